package relock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
)

// BenchmarkHoldWatch measures what the watch of holds (see Options.NoHoldWatch) costs, with it and
// without it, alternated. lock-unlock is an uncontended Lock+Unlock, whose hold ends before the watch
// would read it (5 ms). held keeps 100 holds for 1 s with a 300 ms watchdog (a renewal batch every
// 100 ms), and reports Redis CPU and the HEXISTS calls (INFO commandstats counts the renewal script's
// own two as well: the watch's reads are the difference) per hold per renewal.
//
//	go test -run '^$' -bench 'HoldWatch/lock-unlock' -benchtime 3000x -count 3 .
//	go test -run '^$' -bench 'HoldWatch/held' -benchtime 4x -count 3 .
func BenchmarkHoldWatch(b *testing.B) {
	for _, watch := range []bool{true, false} {
		b.Run(fmt.Sprintf("lock-unlock/watch=%v", watch), func(b *testing.B) {
			_, c := watchClient(b, watch, 0)
			l := c.Lock("bench:watch")
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := l.Lock(ctx); err != nil {
					b.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, watch := range []bool{true, false} {
		b.Run(fmt.Sprintf("held/watch=%v", watch), func(b *testing.B) {
			const holds, timeout, hold = 100, 300 * time.Millisecond, time.Second
			rdb, c := watchClient(b, watch, timeout)
			ctx := context.Background()
			var cpu time.Duration
			var hexists, renewals float64
			for i := 0; b.Loop(); i++ {
				locks := make([]*relock.RLock, holds)
				for j := range locks {
					locks[j] = c.Lock(fmt.Sprintf("bench:watch:%d:%d", i, j))
					if err := locks[j].Lock(ctx); err != nil {
						b.Fatal(err)
					}
				}
				cpu0, calls0 := serverCPU(b, rdb), commandCalls(b, rdb)
				time.Sleep(hold)
				cpu += serverCPU(b, rdb) - cpu0
				calls := commandCalls(b, rdb)
				hexists += float64(calls["hexists"] - calls0["hexists"])
				renewals += float64(holds) * float64(hold/(timeout/3))
				for _, l := range locks {
					if err := l.Unlock(ctx); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(cpu.Seconds()*1e6/renewals, "redis-cpu-µs/hold-renewal")
			b.ReportMetric(hexists/renewals, "hexists/hold-renewal")
		})
	}
}

func watchClient(b *testing.B, watch bool, timeout time.Duration) (rueidis.Client, *relock.Client) {
	b.Helper()
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	c, err := relock.Wrap(rdb, &relock.Options{NoHoldWatch: !watch, WatchdogTimeout: timeout})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		c.Close()
		rdb.Close()
	})
	return rdb, c
}
