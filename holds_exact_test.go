package relock_test

import (
	"context"
	"errors"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/faultnet"
	"github.com/relock-go/relock/internal/redistest"
)

// A reentrant RedLock round that fails (two of three nodes stalled past the node timeout, their requests
// then lost with their connections) leaves the outer hold as it was on every node: the round releases only
// the level it took, the stalled nodes' parts own their uncertain attempts (which never ran), and the
// outer hold context goes on.
func TestRedLockFailedReentrantRoundKeepsOuterHold(t *testing.T) {
	t.Parallel()
	servers := redistest.StartN(t, 3)
	var parts []relock.Lockable
	var proxies []*faultnet.Proxy
	for i, s := range servers {
		addr := s.Addr()
		if i > 0 {
			p := startProxy(t, s)
			proxies, addr = append(proxies, p), p.Addr
		}
		parts = append(parts, clientAt(t, addr, &relock.Options{WatchdogTimeout: 3 * time.Second}).Lock("outer"))
	}
	rl := relock.NewRedLock(parts, &relock.RedLockOptions{NodeTimeout: 100 * time.Millisecond})
	ctx := relock.WithOwner(ctxTimeout(t, 30*time.Second), "owner")
	if err := rl.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := rl.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Slow nodes first: every attempt on them outlives the node timeout, round after round.
	for _, p := range proxies {
		p.SetLatency(70 * time.Millisecond)
	}
	ok, err := rl.TryLock(ctx, 1500*time.Millisecond, 0)
	if ok {
		t.Fatal("a round with two of three nodes slower than the node timeout got the lock")
	}
	t.Logf("slow nodes: %v", err)
	// Then stalled ones, whose requests are lost with their connections.
	for _, p := range proxies {
		p.SetLatency(0)
		p.Stall(faultnet.Upstream, true)
	}
	ok, err = rl.TryLock(ctx, 0, 0)
	if ok {
		t.Fatal("a round with two of three nodes stalled got the lock")
	}
	t.Logf("stalled nodes: %v", err)
	time.Sleep(100 * time.Millisecond)
	for _, p := range proxies {
		p.Cut()
		p.Stall(faultnet.Upstream, false)
	}
	time.Sleep(1500 * time.Millisecond) // background repeats and undos have had their chance
	for i, s := range servers {
		if vals, _ := do(t, rawClient(t, s), "HVALS", "outer").AsStrSlice(); len(vals) != 1 || vals[0] != "1" {
			t.Errorf("node %d: hold counts %v, want [1] (the outer hold alone)", i, vals)
		}
	}
	if held.Err() != nil {
		t.Fatalf("the outer hold context ended: %v", context.Cause(held))
	}
	if err := rl.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(held), context.Canceled) {
		t.Fatalf("after Unlock the hold context's cause is %v", context.Cause(held))
	}
}

func join(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ","
		}
		out += x
	}
	return out
}

// heapAfterGC returns the live heap, after collecting garbage.
func heapAfterGC() uint64 {
	var m runtime.MemStats
	for range 3 {
		runtime.GC()
	}
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// leastGrowth returns the least the live heap grew by over one of three windows of n calls each. Memory
// that grows with the calls grows in every window; a one-off allocation by something else (a connection's
// buffer, a background goroutine of an earlier test) lands in one.
func leastGrowth(n int, call func() error) (int64, error) {
	least := int64(math.MaxInt64)
	for range 3 {
		before := heapAfterGC()
		for range n {
			if err := call(); err != nil {
				return 0, err
			}
		}
		least = min(least, int64(heapAfterGC())-int64(before))
	}
	return least, nil
}

// HoldContext costs O(1): calling it a million times on one hold, with a context that never ends and with
// one that can, or on a MultiLock whose parts are not all held, does not grow memory.
func TestHoldContextCostsNothingRepeated(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	ctx := relock.WithOwner(ctxTimeout(t, 60*time.Second), "looper")
	l := c.Lock("loop")
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	other := c.Lock("loop2")
	multi := relock.NewMultiLock(l, other)
	const calls = 1_000_000
	cases := []struct {
		name string
		call func() error
	}{
		{"never-ending parent", func() error {
			_, err := l.HoldContext(relock.WithOwner(context.Background(), "looper"))
			return err
		}},
		{"cancellable parent", func() error { _, err := l.HoldContext(ctx); return err }},
		{"MultiLock, a part not held", func() error {
			if _, err := multi.HoldContext(ctx); !errors.Is(err, relock.ErrNotHeld) {
				return err
			}
			return nil
		}},
	}
	for _, tc := range cases {
		for range 1000 { // warm up: the hold's own context, memo entries
			if err := tc.call(); err != nil {
				t.Fatal(err)
			}
		}
		grown, err := leastGrowth(calls/3, tc.call)
		if err != nil {
			t.Fatal(err)
		}
		if grown > 1<<20/3 { // a byte per call would be 333,333
			t.Errorf("%s: %d calls grew the heap by %d bytes", tc.name, calls/3, grown)
		}
	}
	if err := other.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	grown, err := leastGrowth(calls/30, func() error { _, err := multi.HoldContext(ctx); return err })
	if err != nil {
		t.Fatal(err)
	}
	if grown > 1<<20/3 { // ten bytes per call would be 333,333
		t.Errorf("MultiLock held: %d calls grew the heap by %d bytes", calls/30, grown)
	}
	hc, _ := l.HoldContext(ctx)
	mc, _ := multi.HoldContext(ctx)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(hc), context.Canceled) {
		t.Fatalf("after the final Unlock the hold context's cause is %v", context.Cause(hc))
	}
	select {
	case <-mc.Done():
	case <-time.After(time.Second):
		t.Fatal("the MultiLock's hold context did not end when a part was released")
	}
	_ = other.Unlock(ctx)
}

// A reader whose own hold expired (its lease ran out) while another reader keeps the lock does not hold
// it: IsHeld false, HoldCount 0, Unlock ErrNotHeld, and none of it changes the other reader's hold.
func TestExpiredReaderHoldsNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 30*time.Second)
	short, long := relock.WithOwner(ctx, "short"), relock.WithOwner(ctx, "long")
	r := c.ReadWriteLock("shared").ReadLock()
	if err := r.LockWithLease(short, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := r.Lock(long); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	before, _ := do(t, rdb, "HGETALL", "shared").AsStrMap()
	if held, err := r.IsHeld(short); held || err != nil {
		t.Fatalf("IsHeld of the expired reader = %v, %v", held, err)
	}
	if n, err := r.HoldCount(short); n != 0 || err != nil {
		t.Fatalf("HoldCount of the expired reader = %d, %v", n, err)
	}
	if err := r.Unlock(short); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("Unlock of the expired reader = %v, want ErrNotHeld", err)
	}
	after, _ := do(t, rdb, "HGETALL", "shared").AsStrMap()
	if len(after) != len(before) {
		t.Fatalf("the lock changed: %v -> %v", before, after)
	}
	for k, v := range before {
		if after[k] != v {
			t.Fatalf("the lock changed: %v -> %v", before, after)
		}
	}
	if n, err := r.HoldCount(long); n != 1 || err != nil {
		t.Fatalf("HoldCount of the live reader = %d, %v", n, err)
	}
	if ok, err := c.ReadWriteLock("shared").WriteLock().TryLock(relock.WithOwner(ctx, "writer"), 0, 0); ok || err != nil {
		t.Fatalf("a writer got the lock a live reader holds: %v, %v", ok, err)
	}
	if err := r.Unlock(long); err != nil {
		t.Fatal(err)
	}
	if n, _ := do(t, rdb, "EXISTS", "shared").AsInt64(); n != 0 {
		t.Fatal("the lock is left after the live reader's release")
	}
}

// A hold with a lease is watched too: when it is gone from Redis before its lease ends (force-unlocked,
// or Redis restarted without persistence), its HoldContext ends with ErrLockLost within about a third of
// the watchdog timeout, as a renewed hold's would, for every lock type.
func TestLeasedHoldLossIsNoticed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, &relock.Options{WatchdogTimeout: 600 * time.Millisecond})
	rdb := rawClient(t, srv)
	ctx := relock.WithOwner(ctxTimeout(t, 30*time.Second), "leased")
	rw := c.ReadWriteLock("lease:rw")
	for _, tc := range []struct {
		name  string
		lock  func() error
		hold  func() (context.Context, error)
		steal func()
	}{
		{"RLock force-unlocked", func() error { return c.Lock("lease:r").LockWithLease(ctx, time.Minute) },
			func() (context.Context, error) { return c.Lock("lease:r").HoldContext(ctx) },
			func() { _, _ = c.Lock("lease:r").ForceUnlock(context.Background()) }},
		{"FairLock deleted", func() error { return c.FairLock("lease:f").LockWithLease(ctx, time.Minute) },
			func() (context.Context, error) { return c.FairLock("lease:f").HoldContext(ctx) },
			func() { do(t, rdb, "DEL", "lease:f") }},
		{"ReadLock flushed", func() error { return rw.ReadLock().LockWithLease(ctx, time.Minute) },
			func() (context.Context, error) { return rw.ReadLock().HoldContext(ctx) },
			func() { do(t, rdb, "FLUSHALL") }},
		{"WriteLock flushed", func() error { return c.ReadWriteLock("lease:w").WriteLock().LockWithLease(ctx, time.Minute) },
			func() (context.Context, error) { return c.ReadWriteLock("lease:w").WriteLock().HoldContext(ctx) },
			func() { do(t, rdb, "FLUSHALL") }},
	} {
		if err := tc.lock(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		held, err := tc.hold()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		tc.steal()
		start := time.Now()
		select {
		case <-held.Done():
		case <-time.After(2 * time.Second):
			t.Fatalf("%s: the holder was not told within 2 s (watchdog timeout 600 ms, lease 1 min)", tc.name)
		}
		if !errors.Is(context.Cause(held), relock.ErrLockLost) {
			t.Fatalf("%s: cause %v, want ErrLockLost", tc.name, context.Cause(held))
		}
		t.Logf("%s: told after %v", tc.name, time.Since(start).Round(time.Millisecond))
	}
	// A leased hold that stays is not reported lost, and is not extended: it expires with its lease.
	l := c.Lock("lease:kept")
	if err := l.LockWithLease(ctx, 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	held, _ := l.HoldContext(ctx)
	time.Sleep(time.Second)
	if held.Err() != nil {
		t.Fatalf("a leased hold still there was reported: %v", context.Cause(held))
	}
	<-held.Done()
	// The Client's expiry runs from when the acquisition was sent, Redis's from when it arrived: a few ms
	// later. An extension by a check (the watchdog timeout is 600 ms) would keep it for hundreds more.
	eventually(t, 100*time.Millisecond, "the key expires with its lease", func() bool {
		n, _ := do(t, rdb, "EXISTS", "lease:kept").AsInt64()
		return n == 0
	})
}
