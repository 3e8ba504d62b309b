package relockgoredis_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	relockgoredis "github.com/relock-go/relock/goredis"
	"github.com/relock-go/relock/internal/conformance"
	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/internal/testutil"
)

// TestConformance runs the library's conformance suite (internal/conformance) with relock on go-redis:
// on a server of its own through a *redis.Client with go-redis's default options ("standalone": calls
// end at their deadline by relock's doing), with ContextTimeoutEnabled ("standalone-ctx"), and on a
// cluster through a *redis.ClusterClient ("cluster").
func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.Run(t, []string{"standalone", "standalone-ctx", "cluster"}, func(t *testing.T, place string) *conformance.Deployment {
		var d *deployment
		switch place {
		case "standalone":
			d = standalone(t, false)
		case "standalone-ctx":
			d = standalone(t, true)
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
	addrs      []string
	cluster    bool
	ctxTimeout bool // go-redis's ContextTimeoutEnabled
	prefix     string
}

func standalone(t testing.TB, ctxTimeout bool) *deployment {
	srv := redistest.Start(t)
	return &deployment{addrs: []string{srv.Addr()}, ctxTimeout: ctxTimeout}
}

func onCluster(t testing.TB, prefix string) *deployment {
	cluster, n := testutil.SharedCluster(t)
	return &deployment{addrs: cluster.Addrs(), cluster: true, ctxTimeout: true, prefix: prefix + n + ":"}
}

// goRedis returns a go-redis client on d, closed when t ends.
func (d *deployment) goRedis(t testing.TB) redis.UniversalClient {
	var rdb redis.UniversalClient
	if d.cluster {
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: d.addrs, ContextTimeoutEnabled: d.ctxTimeout})
	} else {
		rdb = redis.NewClient(&redis.Options{Addr: d.addrs[0], ContextTimeoutEnabled: d.ctxTimeout})
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// client returns a relock Client on a go-redis client of its own on d, both closed when t ends.
func (d *deployment) client(t testing.TB, opts *relock.Options) *relock.Client {
	t.Helper()
	rdb := d.goRedis(t)
	c, err := relockgoredis.New(rdb, opts)
	if err != nil {
		t.Fatalf("relockgoredis.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
