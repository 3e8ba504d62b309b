package relock_test

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/luasrc"
)

// BenchmarkSemaphoreRatio interleaves, in every iteration, Acquire(1)+Release(1) on a relock Semaphore and
// the same two scripts run raw through the same rueidis client, and reports both and their ratio.
func BenchmarkSemaphoreRatio(b *testing.B) {
	rdb, c := benchClient(b)
	ctx := context.Background()
	load := func(name string) *rueidis.Lua { return rawScript(b, name) }
	acquire, release := load("semaphore_acquire"), load("semaphore_release")
	rawKeys := []string{"bench:sem-raw", "redisson_sc:{bench:sem-raw}"}
	takeKeys := []string{"bench:sem-raw", "{bench:sem-raw}:timeout"} // the counter, and a PermitSemaphore's permits
	s := c.Semaphore("bench:sem")
	for _, k := range []string{"bench:sem", "bench:sem-raw"} {
		if err := rdb.Do(ctx, rdb.B().Set().Key(k).Value("1").Build()).Error(); err != nil {
			b.Fatal(err)
		}
	}
	var raw, sem time.Duration
	for b.Loop() {
		t0 := time.Now()
		if got, err := acquire.Exec(ctx, rdb, takeKeys, []string{"1"}).AsInt64(); got != 1 || err != nil {
			b.Fatalf("raw acquire: %d, %v", got, err)
		}
		if err := release.Exec(ctx, rdb, rawKeys, []string{"1", "publish"}).Error(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := s.Acquire(ctx, 1); err != nil {
			b.Fatal(err)
		}
		if err := s.Release(ctx, 1); err != nil {
			b.Fatal(err)
		}
		raw, sem = raw+t1.Sub(t0), sem+time.Since(t1)
	}
	n := float64(b.N)
	b.ReportMetric(float64(raw.Microseconds())/n, "raw-µs")
	b.ReportMetric(float64(sem.Microseconds())/n, "semaphore-µs")
	b.ReportMetric(float64(sem)/float64(raw), "semaphore/raw")
}

// BenchmarkSemaphoreWakeup measures, on every iteration, the time from a Release on one Client to the
// return of an Acquire that was waiting for it on another, and reports its p50 and p99.
func BenchmarkSemaphoreWakeup(b *testing.B) {
	_, releaser := benchClient(b)
	_, waiter := benchClient(b)
	ctx := context.Background()
	name := "bench:sem-wakeup"
	if _, err := releaser.Semaphore(name).TrySetPermits(ctx, 0); err != nil {
		b.Fatal(err)
	}
	_, _ = releaser.Semaphore(name).DrainPermits(ctx)
	var lat []time.Duration
	for b.Loop() {
		done := make(chan time.Time, 1)
		go func() {
			if err := waiter.Semaphore(name).Acquire(ctx, 1); err != nil {
				b.Error(err)
			}
			done <- time.Now()
		}()
		time.Sleep(2 * time.Millisecond) // the waiter is waiting
		t0 := time.Now()
		if err := releaser.Semaphore(name).Release(ctx, 1); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, (<-done).Sub(t0))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkPermitSemaphoreRatio interleaves, in every iteration, Acquire+Release of a PermitSemaphore's
// permit (watchdog kept) and the same two scripts run raw through the same rueidis client, and reports both
// and their ratio. relock's side also records the permit in the hold table and schedules its renewal.
func BenchmarkPermitSemaphoreRatio(b *testing.B) {
	rdb, c := benchClient(b)
	ctx := context.Background()
	load := func(name string) *rueidis.Lua { return rawScript(b, name) }
	acquire, release := load("permit_acquire"), load("permit_release")
	rawKeys := []string{"bench:permits-raw", "{bench:permits-raw}:timeout", "redisson_sc:{bench:permits-raw}", "relock_undone:{bench:permits-raw}"}
	s := c.PermitSemaphore("bench:permits")
	for _, k := range []string{"bench:permits", "bench:permits-raw"} {
		if err := rdb.Do(ctx, rdb.B().Set().Key(k).Value("1").Build()).Error(); err != nil {
			b.Fatal(err)
		}
	}
	id := "0123456789abcdef"
	var raw, sem time.Duration
	for b.Loop() {
		t0 := time.Now()
		if got, err := acquire.Exec(ctx, rdb, rawKeys, []string{"30000", id, "publish"}).AsIntSlice(); err != nil || got[0] != 1 {
			b.Fatalf("raw acquire: %v, %v", got, err)
		}
		if err := release.Exec(ctx, rdb, rawKeys, []string{"publish", "0", id}).Error(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		p, err := s.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Release(ctx); err != nil {
			b.Fatal(err)
		}
		raw, sem = raw+t1.Sub(t0), sem+time.Since(t1)
	}
	n := float64(b.N)
	b.ReportMetric(float64(raw.Microseconds())/n, "raw-µs")
	b.ReportMetric(float64(sem.Microseconds())/n, "permit-µs")
	b.ReportMetric(float64(sem)/float64(raw), "permit/raw")
}

// rawScript loads the library's script called name, to be run raw through rueidis.
func rawScript(b *testing.B, name string) *rueidis.Lua {
	b.Helper()
	src, err := luasrc.Load(os.DirFS("lua"), name)
	if err != nil {
		b.Fatal(err)
	}
	return rueidis.NewLuaScript(src)
}
