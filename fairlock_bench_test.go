package relock_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relock-go/relock"
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
