package relock

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.opentelemetry.io/otel"

	"github.com/relock-go/relock/internal/redistest"
)

// BenchmarkRenewalBatch measures one watchdog renewal batch for a Client holding 1,000 and 10,000 locks:
// the time it takes, the Client's CPU (user+system) and Redis's CPU (INFO commandstats) per batch, and
// the commands it sends: EVALSHA runs of 500 holds each, sent at once (one write, one round trip).
func BenchmarkRenewalBatch(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run("holds="+strconv.Itoa(n), func(b *testing.B) {
			srv := redistest.Start(b)
			c, err := New([]string{srv.Addr()}, nil) // 30 s watchdog: no renewal of its own during the run
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := WithOwner(context.Background(), "bench-owner")
			var wg sync.WaitGroup
			for i := 0; i < n; i += n / 50 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := i; j < i+n/50; j++ {
						if err := c.Lock("renew:" + strconv.Itoa(j)).Lock(ctx); err != nil {
							b.Error(err)
						}
					}
				}()
			}
			wg.Wait()
			c.holds.mu.Lock()
			holds := make([]renewal, 0, len(c.holds.holds))
			for _, h := range c.holds.holds {
				holds = append(holds, h.renew)
			}
			c.holds.mu.Unlock()
			if len(holds) != n {
				b.Fatalf("%d holds registered, want %d", len(holds), n)
			}
			rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
			if err != nil {
				b.Fatal(err)
			}
			defer rdb.Close()
			rdb.Do(ctx, rdb.B().ConfigResetstat().Build())

			cpu0 := cpuTime()
			b.ResetTimer()
			for b.Loop() {
				results, err := c.holds.runRenewals(ctx, holds)
				if err != nil {
					b.Fatal(err)
				}
				for _, r := range results {
					if r != 1 {
						b.Fatal("a hold was not renewed")
					}
				}
			}
			b.StopTimer()
			cpu := cpuTime() - cpu0
			stats := commandStats(b, rdb)
			N := float64(b.N)
			b.ReportMetric(float64(cpu.Microseconds())/N, "client-cpu-µs/op")
			b.ReportMetric(stats["evalsha"].usec/N, "redis-cpu-µs/op")
			b.ReportMetric(stats["evalsha"].calls/N, "evalsha/op")
		})
	}
}

// BenchmarkTelemetryNoProvider measures what relock's telemetry adds to one Lock+Unlock when no
// OpenTelemetry SDK is installed (the global providers): the acquire, hold and unlock spans and the
// metric updates.
func BenchmarkTelemetryNoProvider(b *testing.B) {
	tel, err := newTelemetry(otel.GetTracerProvider(), otel.GetMeterProvider(), func() (n [numKinds]int64) { return n })
	if err != nil {
		b.Fatal(err)
	}
	defer tel.close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		actx, span := tel.startSpan(ctx, "relock.acquire", kindRLock, "bench")
		tel.acquired(actx, kindRLock, outcomeAcquired, time.Microsecond)
		endSpan(span, outcomeAcquired, nil, AttrAttempts.Int(1), AttrWaitMS.Float64(0.1))
		holdSpan := tel.startHold(actx, kindRLock, "bench")
		e := ending{h: &hold{kind: kindRLock, span: holdSpan}, cause: context.Canceled, held: time.Millisecond}
		_, uspan := tel.startSpan(ctx, "relock.unlock", kindRLock, "bench")
		e.report(tel)
		endSpan(uspan, outcomeReleased, nil)
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type cmdStat struct{ calls, usec float64 }

func commandStats(b *testing.B, rdb rueidis.Client) map[string]cmdStat {
	info, err := rdb.Do(context.Background(), rdb.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	stats := map[string]cmdStat{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var s cmdStat
		for _, field := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(field, "=")
			f, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				s.calls = f
			case "usec":
				s.usec = f
			}
		}
		stats[strings.TrimPrefix(name, "cmdstat_")] = s
	}
	return stats
}

// BenchmarkHoldMemory reports the memory a Client keeps per held lock (its hold table entry, the
// watchdog's queue slot, the renewal's keys and args), measured over 10,000 holds of distinct locks
// without a lease: the live heap after the holds were taken, less the live heap before, per hold.
func BenchmarkHoldMemory(b *testing.B) {
	const n = 10000
	srv := redistest.Start(b)
	c, err := New([]string{srv.Addr()}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := WithOwner(context.Background(), "memory")
	names := make([]string, n)
	for i := range names {
		names[i] = "mem:" + strconv.Itoa(i)
	}
	locks := make([]*RLock, n)
	for i := range locks {
		locks[i] = c.Lock(names[i])
	}
	if err := locks[0].Lock(ctx); err != nil { // the Client's connections and goroutines, outside the count
		b.Fatal(err)
	}
	if err := locks[0].Unlock(ctx); err != nil {
		b.Fatal(err)
	}
	var perHold float64
	for b.Loop() {
		before := liveHeap()
		for _, l := range locks {
			if err := l.Lock(ctx); err != nil {
				b.Fatal(err)
			}
		}
		after := liveHeap()
		perHold = float64(int64(after)-int64(before)) / n
		for _, l := range locks {
			if err := l.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(perHold, "B/hold")
}

// liveHeap returns the live heap, after collecting garbage.
func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
