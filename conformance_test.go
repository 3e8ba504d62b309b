package relock_test

import (
	"testing"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/conformance"
	"github.com/relock-go/relock/internal/redistest"
)

// TestConformance runs the conformance suite (internal/conformance) against redis-server: every test,
// for every lock kind, on a server of its own, on the shared cluster, as a Redis user holding exactly the
// ACL docs/operations.md gives ("acl"), and over TLS ("tls"). relocktest runs the same suite against its
// in-process server.
func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.Run(t, []string{"standalone", "cluster", "acl", "tls"}, func(t *testing.T, place string) *conformance.Deployment {
		var d *deployment
		switch place {
		case "cluster":
			d = onCluster(t, t.Name()+":")
		case "standalone":
			d = standalone(t)
		case "acl":
			d = standalone(t)
			admin := rawClient(t, d.servers[0])
			if err := do(t, admin, append([]string{"ACL", "SETUSER", "relock-app"}, documentedACL(t)...)...).Error(); err != nil {
				t.Fatalf("the documented ACL: %v", err)
			}
			do(t, admin, "ACL", "SETUSER", "relock-app", ">secret")
			d.clientRedis = &rueidis.ClientOption{Username: "relock-app", Password: "secret"}
			d.prefix = "app:" // the ACL's prefix
		case "tls":
			srv, addr, cfg := startTLS(t)
			d = &deployment{kind: "standalone", addrs: []string{srv.Addr()}, servers: []*redistest.Server{srv},
				clientAddrs: []string{addr}, clientRedis: &rueidis.ClientOption{TLSConfig: cfg}}
		}
		return &conformance.Deployment{
			Client: func(t testing.TB, opts *relock.Options) *relock.Client { return d.client(t, opts) },
			Raw:    func(t testing.TB) rueidis.Client { return d.raw(t) },
			Keys:   func(t testing.TB, substr string) []string { return d.keysContaining(t, substr) },
			Prefix: d.prefix,
			Light:  place == "acl" || place == "tls",
		}
	})
}
