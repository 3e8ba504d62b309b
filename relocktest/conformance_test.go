package relocktest_test

import (
	"context"
	"testing"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/conformance"
	"github.com/relock-go/relock/relocktest"
)

// TestConformance runs the library's conformance suite, which the library runs against redis-server,
// against relocktest: each test on a Server of its own.
func TestConformance(t *testing.T) {
	conformance.Run(t, []string{"relocktest"}, func(t *testing.T, _ string) *conformance.Deployment {
		srv := relocktest.NewServer(t)
		return &conformance.Deployment{
			Client: func(_ testing.TB, opts *relock.Options) *relock.Client {
				if opts == nil {
					opts = &relock.Options{WatchdogTimeout: relock.DefaultWatchdogTimeout} // relock's default, not relocktest's
				}
				return srv.Client(opts)
			},
			Raw: func(t testing.TB) rueidis.Client { return raw(t, srv) },
			Keys: func(t testing.TB, substr string) []string {
				rdb := raw(t, srv)
				keys, err := rdb.Do(context.Background(), rdb.B().Keys().Pattern("*"+substr+"*").Build()).AsStrSlice()
				if err != nil {
					t.Fatalf("KEYS: %v", err)
				}
				return keys
			},
			Light: true, // miniredis runs the scripts in gopher-lua: the full load takes tens of seconds under -race
		}
	})
}

// raw returns a plain rueidis client on srv, closed when t ends.
func raw(t testing.TB, srv *relocktest.Server) rueidis.Client {
	t.Helper()
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatalf("rueidis.NewClient: %v", err)
	}
	t.Cleanup(rdb.Close)
	return rdb
}
