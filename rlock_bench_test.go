package relock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
)

// The benchmarks run against the server TestMain starts. Compare them within one run: the floors
// (BenchmarkFloorTwoPings, BenchmarkFloorRawScripts) use the same rueidis client as the relock Client.
//
//	go test -run '^$' -bench . -count 5

func benchClient(b *testing.B) (rueidis.Client, *relock.Client) {
	b.Helper()
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	c, err := relock.Wrap(rdb, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		c.Close()
		rdb.Close()
	})
	return rdb, c
}

// rawLock runs relock's acquire and release scripts, loaded from lua/, straight through rueidis, with
// the keys and arguments relock gives them: what any library using them must pay.
type rawLock struct {
	rdb              rueidis.Client
	acquire, release *rueidis.Lua
	acqKeys, relKeys []string
	acqArgs, relArgs []string
}

func newRawLock(b *testing.B, rdb rueidis.Client, name, owner string) *rawLock {
	return newRawLockWith(rdb, rawScript(b, "rlock_acquire"), rawScript(b, "rlock_release"), name, owner)
}

// newRawLockWith is newRawLock with the scripts loaded already.
func newRawLockWith(rdb rueidis.Client, acquire, release *rueidis.Lua, name, owner string) *rawLock {
	field := "00000000-0000-0000-0000-000000000000:" + owner
	return &rawLock{
		rdb: rdb, acquire: acquire, release: release,
		// The lock, its undone attempts, and the companions of other kinds that it reads (lua/lib/kinds.lua).
		acqKeys: []string{name, "relock_undone:{" + name + "}", "redisson_lock_queue:{" + name + "}",
			"relock_rwlock_writers:{" + name + "}", "relock_election:{" + name + "}", "relock_lock_waiters:{" + name + "}"},
		relKeys: []string{name, "redisson_lock__channel:{" + name + "}", "relock_release:{" + name + "}", "relock_undone:{" + name + "}",
			"relock_lock_waiters:{" + name + "}", "relock_lock_wake:{" + name + "}", "relock_release_void:{" + name + "}"},
		acqArgs: []string{"30000", field, "a1", "0", "30000"}, // an attempt id, as relock sends one; not waiting
		relArgs: []string{field, "0", "", "!r1", "publish", "-1", "2000"},
	}
}

// lockUnlock acquires and releases once, and checks that both did what they should.
func (r *rawLock) lockUnlock(ctx context.Context) error {
	got, err := r.acquire.Exec(ctx, r.rdb, r.acqKeys, r.acqArgs).AsIntSlice()
	if err != nil {
		return err
	}
	if len(got) != 4 || got[0] != 1 || got[1] != 1 { // {1, count, token, Redis's clock} (lua/lib/hold.lua)
		return fmt.Errorf("raw acquire replied %v", got)
	}
	left, err := r.release.Exec(ctx, r.rdb, r.relKeys, r.relArgs).AsInt64()
	if err != nil {
		return err
	}
	if left != 0 {
		return fmt.Errorf("raw release replied %d", left)
	}
	return nil
}

// BenchmarkFloorTwoPings is the physical floor of Lock+Unlock: two round trips.
func BenchmarkFloorTwoPings(b *testing.B) {
	rdb, _ := benchClient(b)
	ctx := context.Background()
	ping := rdb.B().Ping().Build().Pin()
	b.ReportAllocs()
	for b.Loop() {
		if err := rdb.Do(ctx, ping).Error(); err != nil {
			b.Fatal(err)
		}
		if err := rdb.Do(ctx, ping).Error(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFloorRawScripts runs relock's acquire and release scripts directly through rueidis.
func BenchmarkFloorRawScripts(b *testing.B) {
	rdb, _ := benchClient(b)
	raw := newRawLock(b, rdb, "bench:raw", "1")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := raw.lockUnlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLockUnlock is an uncontended Lock+Unlock on one goroutine.
func BenchmarkLockUnlock(b *testing.B) {
	benchLockUnlock(b, context.Background(), "bench:lock")
}

// BenchmarkLockUnlockWithDeadline is BenchmarkLockUnlock with a context that can end, the usual case in
// a server, which adds the deadline guard of every call.
func BenchmarkLockUnlockWithDeadline(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	benchLockUnlock(b, ctx, "bench:lock-deadline")
}

func benchLockUnlock(b *testing.B, ctx context.Context, name string) {
	_, c := benchClient(b)
	l := c.Lock(name)
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReentrantLockUnlock re-enters a lock the goroutine already holds.
func BenchmarkReentrantLockUnlock(b *testing.B) {
	_, c := benchClient(b)
	l := c.Lock("bench:reentrant")
	ctx := context.Background()
	if err := l.Lock(ctx); err != nil {
		b.Fatal(err)
	}
	defer l.Unlock(ctx)
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// parallelDistinctKeys runs b.N operations spread over workers goroutines, each on its own key.
func parallelDistinctKeys(b *testing.B, workers int, op func(worker int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if err := op(w); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkFreshGoroutine is an uncontended Lock+Unlock, and relock's two scripts run raw, each call
// made on a goroutine of its own, as a server that runs each request on a new goroutine makes them (and
// bench/, which bounds every call that way), against the same on the calling goroutine: interleaved
// blocks of 200 pairs, on one rueidis client. A new goroutine's stack starts small, and is copied to one
// twice its size each time a call goes deeper than it has room for: relock's frames above rueidis's are
// that cost. It reports each one's median pair and relock's ratio to the raw scripts, on fresh goroutines
// and on the calling one.
func BenchmarkFreshGoroutine(b *testing.B) {
	rdb, c := benchClient(b)
	ctx := relock.WithOwner(context.Background(), "fresh") // the Unlock is not made on the Lock's goroutine
	l := c.Lock("bench:fresh")
	raw := newRawLock(b, rdb, "bench:fresh", "1")
	fresh := func(f func() error) error {
		errc := make(chan error, 1)
		go func() { errc <- f() }()
		return <-errc
	}
	lock := func() error { return l.Lock(ctx) }
	unlock := func() error { return l.Unlock(ctx) }
	rawAcquire := func() error {
		return raw.acquire.Exec(ctx, raw.rdb, raw.acqKeys, raw.acqArgs).Error()
	}
	rawRelease := func() error {
		return raw.release.Exec(ctx, raw.rdb, raw.relKeys, raw.relArgs).Error()
	}
	pairs := []struct {
		name string
		pair func() error
		lat  []time.Duration
	}{
		{name: "relock", pair: func() error { return errors.Join(lock(), unlock()) }},
		{name: "raw", pair: func() error { return errors.Join(rawAcquire(), rawRelease()) }},
		{name: "relock-fresh", pair: func() error { return errors.Join(fresh(lock), fresh(unlock)) }},
		{name: "raw-fresh", pair: func() error { return errors.Join(fresh(rawAcquire), fresh(rawRelease)) }},
	}
	for b.Loop() {
		for i := range pairs {
			p := &pairs[i]
			for range 200 {
				t := time.Now()
				if err := p.pair(); err != nil {
					b.Fatal(p.name, err)
				}
				p.lat = append(p.lat, time.Since(t))
			}
		}
	}
	p50 := map[string]float64{}
	for _, p := range pairs {
		slices.Sort(p.lat)
		p50[p.name] = float64(p.lat[len(p.lat)/2].Nanoseconds()) / 1e3
		b.ReportMetric(p50[p.name], p.name+"-p50-µs")
	}
	b.ReportMetric(p50["relock"]/p50["raw"], "relock/raw")
	b.ReportMetric(p50["relock-fresh"]/p50["raw-fresh"], "fresh-relock/raw")
}

// BenchmarkLockUnlockParallel32 is Lock+Unlock by 32 goroutines on 32 keys; rueidis pipelines their
// scripts onto shared connections.
func BenchmarkLockUnlockParallel32(b *testing.B) {
	_, c := benchClient(b)
	ctx := context.Background()
	locks := make([]*relock.RLock, 32)
	for i := range locks {
		locks[i] = c.Lock("bench:parallel:" + strconv.Itoa(i))
	}
	parallelDistinctKeys(b, len(locks), func(w int) error {
		if err := locks[w].Lock(ctx); err != nil {
			return err
		}
		return locks[w].Unlock(ctx)
	})
}

// BenchmarkFloorRawScriptsParallel32 is BenchmarkLockUnlockParallel32's floor.
func BenchmarkFloorRawScriptsParallel32(b *testing.B) {
	rdb, _ := benchClient(b)
	ctx := context.Background()
	raws := make([]*rawLock, 32)
	for i := range raws {
		raws[i] = newRawLock(b, rdb, "bench:raw-parallel:"+strconv.Itoa(i), strconv.Itoa(i))
	}
	parallelDistinctKeys(b, len(raws), func(w int) error { return raws[w].lockUnlock(ctx) })
}

// BenchmarkHandoff measures the time from one owner's Unlock call to the acquisition by an owner on
// another Client that was already waiting: release script, pub/sub delivery, and the waiter's attempt.
// Each owner holds the lock 1 ms, so the other is asleep in its wait when the release comes.
// Reported as handoff-p50-µs and handoff-p99-µs.
func BenchmarkHandoff(b *testing.B) {
	_, x := benchClient(b)
	_, y := benchClient(b)
	ctx := context.Background()
	var (
		mu          sync.Mutex
		handoffs    []time.Duration
		lastRelease atomic.Int64 // UnixNano of the last Unlock call; 0 before the first
		remaining   atomic.Int64
	)
	remaining.Store(int64(b.N))
	handoffs = make([]time.Duration, 0, b.N)
	// Each side waits for its turn token, then blocks in Lock until the other side unlocks.
	turns := [2]chan struct{}{make(chan struct{}, 1), make(chan struct{}, 1)}
	clients := [2]*relock.Client{x, y}
	var wg sync.WaitGroup
	b.ResetTimer()
	for side := 0; side < 2; side++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := clients[side].Lock("bench:handoff")
			other := turns[1-side]
			for range turns[side] {
				if err := l.Lock(ctx); err != nil {
					b.Error(err)
					return
				}
				if at := lastRelease.Load(); at != 0 {
					mu.Lock()
					handoffs = append(handoffs, time.Since(time.Unix(0, at)))
					mu.Unlock()
				}
				if remaining.Add(-1) < 0 {
					_ = l.Unlock(ctx)
					close(other)
					return
				}
				other <- struct{}{} // the other side starts waiting while we hold
				time.Sleep(time.Millisecond)
				lastRelease.Store(time.Now().UnixNano())
				if err := l.Unlock(ctx); err != nil {
					b.Error(err)
					return
				}
			}
			close(other)
		}()
	}
	turns[0] <- struct{}{}
	wg.Wait()
	b.StopTimer()
	if len(handoffs) > 0 {
		slices.Sort(handoffs)
		b.ReportMetric(float64(handoffs[len(handoffs)/2].Microseconds()), "handoff-p50-µs")
		b.ReportMetric(float64(handoffs[len(handoffs)*99/100].Microseconds()), "handoff-p99-µs")
	}
}

// BenchmarkRatios interleaves, in every iteration, two PINGs, the raw acquire and release scripts, and a
// relock Lock+Unlock with context.Background() and with a context that has a deadline, on the same rueidis
// client, so that a noisy machine slows all of them alike. It reports each one's mean time and the ratios
// between them: lock/raw is relock's own overhead, deadline/lock what a deadline adds.
func BenchmarkRatios(b *testing.B) {
	rdb, c := benchClient(b)
	rawLock := newRawLock(b, rdb, "bench:ratio-raw", "1")
	ctx := context.Background()
	dctx, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	ping := rdb.B().Ping().Build().Pin()
	l := c.Lock("bench:ratio-lock")
	lockUnlock := func(ctx context.Context) {
		if err := l.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	var pings, raw, lock, deadline time.Duration
	for b.Loop() {
		t0 := time.Now()
		if rdb.Do(ctx, ping).Error() != nil || rdb.Do(ctx, ping).Error() != nil {
			b.Fatal("PING failed")
		}
		t1 := time.Now()
		if err := rawLock.lockUnlock(ctx); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		lockUnlock(ctx)
		t3 := time.Now()
		lockUnlock(dctx)
		t4 := time.Now()
		pings, raw, lock, deadline = pings+t1.Sub(t0), raw+t2.Sub(t1), lock+t3.Sub(t2), deadline+t4.Sub(t3)
	}
	n := float64(b.N)
	b.ReportMetric(float64(pings.Microseconds())/n, "2ping-µs")
	b.ReportMetric(float64(raw.Microseconds())/n, "raw-µs")
	b.ReportMetric(float64(lock.Microseconds())/n, "lock-µs")
	b.ReportMetric(float64(deadline.Microseconds())/n, "lock-deadline-µs")
	b.ReportMetric(float64(lock)/float64(raw), "lock/raw")
	b.ReportMetric(float64(deadline)/float64(lock), "deadline/lock")
	b.ReportMetric(float64(raw)/float64(pings), "raw/2ping")
}

// BenchmarkParallel64Ratio is Lock+Unlock by 64 goroutines on 64 keys against the raw scripts through the
// same rueidis client (which pipelines them onto shared connections), interleaved: every iteration runs
// one round of each, all 64 goroutines at once, raw and relock in alternating order. It reports the pairs
// per second of each and lock/raw, relock's share of the raw throughput.
func BenchmarkParallel64Ratio(b *testing.B) {
	const workers = 64
	rdb, c := benchClient(b)
	ctx := context.Background()
	raws := make([]*rawLock, workers)
	locks := make([]*relock.RLock, workers)
	for i := range workers {
		raws[i] = newRawLock(b, rdb, "bench:p64-raw:"+strconv.Itoa(i), strconv.Itoa(i))
		locks[i] = c.Lock("bench:p64-lock:" + strconv.Itoa(i))
	}
	const perRound = 8 // pairs per goroutine per round
	round := func(op func(w int) error) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range perRound {
					if err := op(w); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	rawOp := func(w int) error { return raws[w].lockUnlock(ctx) }
	lockOp := func(w int) error {
		if err := locks[w].Lock(ctx); err != nil {
			return err
		}
		return locks[w].Unlock(ctx)
	}
	var raw, lock time.Duration
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			raw += round(rawOp)
			lock += round(lockOp)
		} else {
			lock += round(lockOp)
			raw += round(rawOp)
		}
		i++
	}
	pairs := float64(b.N * workers * perRound)
	b.ReportMetric(pairs/raw.Seconds(), "raw-pairs/s")
	b.ReportMetric(pairs/lock.Seconds(), "lock-pairs/s")
	b.ReportMetric(raw.Seconds()/lock.Seconds(), "lock/raw-throughput")
}

// BenchmarkHotLock is one lock taken in turn by 64 goroutines of one Client, each taking it, leaving at
// once and taking it again: the Client's gate queues them, and each release hands the lock to the next
// (see docs/performance.md). Reported per acquisition.
func BenchmarkHotLock(b *testing.B) {
	_, c := benchClient(b)
	hotLock(b, []*relock.Client{c}, "bench:hot")
}

// BenchmarkHotLockAcrossClients is BenchmarkHotLock with the 64 goroutines spread over 4 Clients: each
// Client hands the lock to its own waiters a few times in a row, then lets the others go first.
func BenchmarkHotLockAcrossClients(b *testing.B) {
	var cs []*relock.Client
	for range 4 {
		_, c := benchClient(b)
		cs = append(cs, c)
	}
	hotLock(b, cs, "bench:hot-clients")
}

// hotLock runs 64 goroutines, spread over cs, each with an owner of its own, that take the lock name and
// let go of it at once, b.N times in all; any two of them inside at once fail b.
func hotLock(b *testing.B, cs []*relock.Client, name string) {
	var next, inside atomic.Int32
	b.SetParallelism(64 / max(1, runtime.GOMAXPROCS(0)))
	b.RunParallel(func(pb *testing.PB) {
		i := next.Add(1)
		l := cs[int(i)%len(cs)].Lock(name)
		ctx := relock.WithOwner(context.Background(), fmt.Sprint("hot-", i))
		for pb.Next() {
			if err := l.Lock(ctx); err != nil {
				b.Error(err)
				return
			}
			if inside.Add(1) != 1 {
				b.Error("two owners inside")
			}
			inside.Add(-1)
			if err := l.Unlock(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
