package relock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// BenchmarkRedLockVsSingleNode interleaves, in every iteration, an RLock Lock+Unlock on one node and a
// RedLock Lock+Unlock over 5 nodes (on the same machine), and reports both and their ratio. With
// "paused", one of the 5 nodes is stopped (SIGSTOP): the RedLock then waits out its node timeout (50 ms).
func BenchmarkRedLockVsSingleNode(b *testing.B) {
	for _, paused := range []bool{false, true} {
		name := "all-up"
		if paused {
			name = "one-paused"
		}
		b.Run(name, func(b *testing.B) {
			servers := redistest.StartN(b, 5)
			clients := make([]*relock.Client, len(servers))
			for i, s := range servers {
				clients[i] = newClient(b, s, nil)
			}
			rl := redlock(clients, "bench:redlock", &relock.RedLockOptions{NodeTimeout: 50 * time.Millisecond})
			single := clients[0].Lock("bench:single")
			ctx := context.Background()
			// The floor of the fan-out on this machine: a PING to one node, and to all 5 at once (connected
			// before a node is paused: a client cannot connect to a paused one).
			raws := make([]rueidis.Client, len(servers))
			for i, s := range servers {
				raws[i] = rawClient(b, s)
			}
			if paused {
				if err := servers[4].Pause(); err != nil {
					b.Fatal(err)
				}
				defer servers[4].Resume()
			}
			ping := func(r rueidis.Client) { _ = r.Do(ctx, r.B().Ping().Build()).Error() }
			var one, five, ping1, ping5 time.Duration
			for b.Loop() {
				tp := time.Now()
				ping(raws[0])
				tq := time.Now()
				var wg sync.WaitGroup
				for _, r := range raws[:len(raws)-btoi(paused)] {
					wg.Add(1)
					go func() { defer wg.Done(); ping(r) }()
				}
				wg.Wait()
				ping1, ping5 = ping1+tq.Sub(tp), ping5+time.Since(tq)
				t0 := time.Now()
				if err := single.Lock(ctx); err != nil {
					b.Fatal(err)
				}
				if err := single.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := rl.Lock(ctx); err != nil {
					b.Fatal(err)
				}
				if err := rl.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
				one, five = one+t1.Sub(t0), five+time.Since(t1)
			}
			n := float64(b.N)
			b.ReportMetric(float64(one.Microseconds())/n, "single-µs")
			b.ReportMetric(float64(five.Microseconds())/n, "redlock-µs")
			b.ReportMetric(float64(five)/float64(one), "redlock/single")
			b.ReportMetric(float64(ping5)/float64(ping1), "fanout-ping/ping")
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
