package relock_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// BenchmarkFairHandoff8 keeps 8 waiters, 4 on each of two Clients, queued on one fair lock: each takes the
// lock, holds it 1 ms, releases it and queues again at the tail. It reports the handoff latency (from a
// holder's Unlock call to the next holder's acquisition) and the FIFO violations: a holder queues again
// long before the next holder is done (one round trip against 1 ms), so FIFO means the holders come round
// in one fixed cycle of 8, and an acquisition that differs from the one 8 before it is a violation.
func BenchmarkFairHandoff8(b *testing.B) {
	_, x := benchClient(b)
	_, y := benchClient(b)
	const waiters = 8
	var (
		mu          sync.Mutex
		order       []int
		handoffs    []time.Duration
		lastRelease atomic.Int64
		remaining   atomic.Int64
		wg          sync.WaitGroup
	)
	remaining.Store(int64(b.N))
	holder := relock.WithOwner(context.Background(), "starter")
	// Hold the lock until every waiter is queued, so the first round is in queue order too.
	if err := x.FairLock("bench:fair").Lock(holder); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for w := range waiters {
		c := []*relock.Client{x, y}[w%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := relock.WithOwner(context.Background(), "w"+strconv.Itoa(w))
			l := c.FairLock("bench:fair")
			for remaining.Add(-1) >= 0 {
				if err := l.Lock(ctx); err != nil {
					b.Error(err)
					return
				}
				at := time.Now()
				mu.Lock()
				if r := lastRelease.Load(); r != 0 {
					handoffs = append(handoffs, at.Sub(time.Unix(0, r)))
				}
				order = append(order, w)
				mu.Unlock()
				time.Sleep(time.Millisecond)
				lastRelease.Store(time.Now().UnixNano())
				if err := l.Unlock(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	time.Sleep(50 * time.Millisecond) // let all 8 queue
	if err := x.FairLock("bench:fair").Unlock(holder); err != nil {
		b.Fatal(err)
	}
	wg.Wait()
	b.StopTimer()
	violations := 0
	for i := waiters; i < len(order); i++ {
		if order[i] != order[i-waiters] {
			violations++
		}
	}
	// The last round can be incomplete: waiters that found remaining exhausted stop queueing.
	if tail := len(order) - waiters; violations > 0 && tail > 0 {
		violations = 0
		for i := waiters; i < tail; i++ {
			if order[i] != order[i-waiters] {
				violations++
			}
		}
	}
	if len(handoffs) > 0 {
		slices.Sort(handoffs)
		b.ReportMetric(float64(handoffs[len(handoffs)/2].Microseconds()), "handoff-p50-µs")
		b.ReportMetric(float64(handoffs[len(handoffs)*99/100].Microseconds()), "handoff-p99-µs")
	}
	b.ReportMetric(float64(violations), "fifo-violations")
	if violations > 0 && testing.Verbose() {
		for i := waiters; i < len(order)-waiters; i++ {
			if order[i] != order[i-waiters] {
				b.Logf("at %d: %v", i, order[i-waiters:min(i+waiters, len(order))])
				break
			}
		}
	}
}

// BenchmarkFairLockQueue measures what a FairLock acquisition costs Redis as its queue grows: waiters
// owners, 4 on each Client, on one fair lock of a server of their own, each holding it 1 ms, unlocking and
// queueing again at once. Redisson's protocol subtracts the wait time from the score of every waiter
// queued behind on each acquisition, so that part grows with the queue. It reports, per acquisition,
// Redis's CPU (used_cpu_sys + used_cpu_user: everything the server did, pub/sub and sockets too), the
// scripts' own time (commandstats) and the script runs. Run enough acquisitions for the queue to stay
// full: go test -run '^$' -bench FairLockQueue -benchtime 3000x.
func BenchmarkFairLockQueue(b *testing.B) {
	for _, waiters := range []int{8, 32, 128, 512} {
		b.Run("waiters="+strconv.Itoa(waiters), func(b *testing.B) { benchFairQueue(b, waiters) })
	}
}

func benchFairQueue(b *testing.B, waiters int) {
	srv := redistest.Start(b)
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	defer rdb.Close()
	clients := make([]*relock.Client, waiters/4)
	for i := range clients {
		if clients[i], err = relock.New([]string{srv.Addr()}, nil); err != nil {
			b.Fatal(err)
		}
		defer clients[i].Close()
	}
	ctx := context.Background()
	holder := relock.WithOwner(ctx, "starter")
	if err := clients[0].FairLock("bench:queue").Lock(holder); err != nil {
		b.Fatal(err)
	}
	var remaining atomic.Int64
	remaining.Store(int64(b.N))
	var wg sync.WaitGroup
	for w := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := relock.WithOwner(ctx, "w"+strconv.Itoa(w))
			l := clients[w%len(clients)].FairLock("bench:queue")
			for remaining.Add(-1) >= 0 {
				if err := l.Lock(ctx); err != nil {
					b.Error(err)
					return
				}
				time.Sleep(time.Millisecond)
				if err := l.Unlock(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	for queued := int64(0); queued < int64(min(waiters, b.N)); {
		time.Sleep(10 * time.Millisecond)
		if queued, err = rdb.Do(ctx, rdb.B().Llen().Key("redisson_lock_queue:{bench:queue}").Build()).AsInt64(); err != nil {
			b.Fatal(err)
		}
	}
	if err := rdb.Do(ctx, rdb.B().ConfigResetstat().Build()).Error(); err != nil {
		b.Fatal(err)
	}
	cpu0 := serverCPU(b, rdb)
	b.ResetTimer()
	if err := clients[0].FairLock("bench:queue").Unlock(holder); err != nil {
		b.Fatal(err)
	}
	wg.Wait()
	b.StopTimer()
	cpu := serverCPU(b, rdb) - cpu0
	stats, err := rdb.Do(ctx, rdb.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	var calls, usec float64
	for line := range strings.Lines(stats) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:"); ok {
			for field := range strings.SplitSeq(strings.TrimSpace(rest), ",") {
				k, v, _ := strings.Cut(field, "=")
				f, _ := strconv.ParseFloat(v, 64)
				switch k {
				case "calls":
					calls = f
				case "usec":
					usec = f
				}
			}
		}
	}
	n := float64(b.N)
	b.ReportMetric(cpu.Seconds()*1e6/n, "redis-cpu-µs/acq")
	b.ReportMetric(usec/n, "script-µs/acq")
	b.ReportMetric(calls/n, "scripts/acq")
}

// serverCPU is the CPU time the Redis server has used (used_cpu_sys + used_cpu_user).
func serverCPU(b *testing.B, rdb rueidis.Client) time.Duration {
	info, err := rdb.Do(context.Background(), rdb.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for line := range strings.Lines(info) {
		for _, k := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), k); ok {
				f, _ := strconv.ParseFloat(v, 64)
				total += f
			}
		}
	}
	return time.Duration(total * float64(time.Second))
}
