package relockvalkey_test

import (
	"testing"

	"github.com/redis/rueidis"
	"github.com/valkey-io/valkey-go"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/conformance"
	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/internal/testutil"
	relockvalkey "github.com/relock-go/relock/valkey"
)

// TestConformance runs the library's conformance suite (internal/conformance) with relock on valkey-go:
// on a server of its own and on a cluster. The server is the one RELOCK_REDIS_SERVER names (a
// valkey-server there runs it on Valkey), else redis-server.
func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.Run(t, []string{"standalone", "cluster"}, func(t *testing.T, place string) *conformance.Deployment {
		var d *deployment
		switch place {
		case "standalone":
			srv := redistest.Start(t)
			d = &deployment{addrs: []string{srv.Addr()}}
		case "cluster":
			d = onCluster(t, t.Name()+":")
		}
		return &conformance.Deployment{
			Client: d.client,
			Raw:    func(t testing.TB) rueidis.Client { return testutil.Raw(t, d.addrs...) },
			Keys:   func(t testing.TB, substr string) []string { return testutil.KeysContaining(t, d.addrs, substr) },
			Prefix: d.prefix,
		}
	})
}

// deployment is where a test's locks live: a server of its own, or the test binary's shared cluster.
type deployment struct {
	addrs  []string
	prefix string
}

func onCluster(t testing.TB, prefix string) *deployment {
	cluster, n := testutil.SharedCluster(t)
	return &deployment{addrs: cluster.Addrs(), prefix: prefix + n + ":"}
}

// valkeyClient returns a valkey-go client on d, closed when t ends.
func (d *deployment) valkeyClient(t testing.TB) valkey.Client {
	t.Helper()
	vk, err := valkey.NewClient(valkey.ClientOption{InitAddress: d.addrs, DisableCache: true})
	if err != nil {
		t.Fatalf("valkey.NewClient: %v", err)
	}
	t.Cleanup(vk.Close)
	return vk
}

// client returns a relock Client on a valkey-go client of its own on d, both closed when t ends.
func (d *deployment) client(t testing.TB, opts *relock.Options) *relock.Client {
	t.Helper()
	c, err := relockvalkey.New(d.valkeyClient(t), opts)
	if err != nil {
		t.Fatalf("relockvalkey.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
