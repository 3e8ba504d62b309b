package relock_test

import (
	"testing"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/conformance"
)

// TestConformance runs the conformance suite (internal/conformance) against redis-server: every test,
// for every lock kind, on a server of its own and on the shared cluster. relocktest runs the same suite
// against its in-process server.
func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.Run(t, []string{"standalone", "cluster"}, func(t *testing.T, place string) *conformance.Deployment {
		d := onCluster(t, t.Name()+":")
		if place == "standalone" {
			d = standalone(t)
		}
		return &conformance.Deployment{
			Client: func(t testing.TB, opts *relock.Options) *relock.Client { return d.client(t, opts) },
			Raw:    func(t testing.TB) rueidis.Client { return d.raw(t) },
			Keys:   func(t testing.TB, substr string) []string { return d.keysContaining(t, substr) },
			Prefix: d.prefix,
		}
	})
}
