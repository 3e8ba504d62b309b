package relock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// Extend gives a lease hold a new lease: Redis keeps it that long from now, the Client's HoldContext does
// not end at the old lease's end, and the hold keeps its count and fencing token.
func TestExtendGivesALeaseHoldANewLease(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	for _, kind := range []string{"lock", "fair", "write", "read"} {
		t.Run(kind, func(t *testing.T) {
			name := "extend-" + kind
			var l *relock.RLock
			switch kind {
			case "lock":
				l = c.Lock(name, relock.WithFencing())
			case "fair":
				l = c.FairLock(name, relock.WithFencing())
			case "write":
				l = c.ReadWriteLock(name, relock.WithFencing()).WriteLock()
			case "read":
				l = c.ReadWriteLock(name).ReadLock()
			}
			if err := l.LockWithLease(ctx, 400*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			if err := l.LockWithLease(ctx, 400*time.Millisecond); err != nil { // a reentry: count 2
				t.Fatal(err)
			}
			hctx, err := l.HoldContext(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var token uint64
			if kind != "read" {
				if token, err = l.FencingToken(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Extend(ctx, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			if ttl, err := l.RemainingTTL(ctx); err != nil || ttl < 4*time.Second {
				t.Fatalf("RemainingTTL after Extend(5s) = %v, %v; want about 5 s", ttl, err)
			}
			time.Sleep(800 * time.Millisecond) // well past the first lease
			if err := hctx.Err(); err != nil {
				t.Fatalf("the hold context ended at the old lease's end: %v (%v)", err, context.Cause(hctx))
			}
			if held, err := l.IsHeld(ctx); err != nil || !held {
				t.Fatalf("IsHeld after the old lease's end = %v, %v; want true", held, err)
			}
			if n, err := l.HoldCount(ctx); err != nil || n != 2 {
				t.Fatalf("HoldCount = %d, %v; want 2", n, err)
			}
			if kind != "read" {
				if got, err := l.FencingToken(ctx); err != nil || got != token {
					t.Fatalf("FencingToken = %d, %v; want %d (unchanged)", got, err, token)
				}
			}
			// Extend never shortens a hold.
			if err := l.Extend(ctx, 100*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			if ttl, err := l.RemainingTTL(ctx); err != nil || ttl < 3*time.Second {
				t.Fatalf("RemainingTTL after Extend(100ms) = %v, %v; want the longer lease kept", ttl, err)
			}
			for range 2 {
				if err := l.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if n, _ := do(t, rdb, "EXISTS", name).AsInt64(); n != 0 {
				t.Fatalf("the lock key is left after the last Unlock")
			}
		})
	}
}

// Extend refuses, changing nothing, when the owner does not hold the lock, when the hold is gone from
// Redis (which ends it as lost for the Client), for a hold the watchdog keeps, and for bad input.
func TestExtendRefusals(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, other := newClient(t, srv, nil), newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	l := c.Lock("extend-refused")

	if err := l.Extend(ctx, time.Second); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("Extend without a hold = %v; want ErrNotHeld", err)
	}
	if err := other.Lock("extend-refused").LockWithLease(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, time.Second); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("Extend of another Client's hold = %v; want ErrNotHeld", err)
	}
	if ttl, _ := do(t, rdb, "PTTL", "extend-refused").AsInt64(); ttl > 10000 {
		t.Fatalf("a refused Extend changed the holder's TTL to %d ms", ttl)
	}
	if err := other.Lock("extend-refused").Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// A hold the watchdog keeps has no lease to extend.
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, time.Minute); !errors.Is(err, relock.ErrNoLease) {
		t.Fatalf("Extend of a watchdog hold = %v; want ErrNoLease", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// Bad input.
	if err := l.LockWithLease(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, d := range []time.Duration{0, -time.Second} {
		if err := l.Extend(ctx, d); !errors.Is(err, relock.ErrInvalidDuration) {
			t.Fatalf("Extend(%v) = %v; want ErrInvalidDuration", d, err)
		}
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if err := l.Extend(ended, time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("Extend with an ended ctx = %v; want context.Canceled", err)
	}
	if ttl, _ := do(t, rdb, "PTTL", "extend-refused").AsInt64(); ttl > 10000 {
		t.Fatalf("a refused Extend changed the TTL to %d ms", ttl)
	}

	// A hold gone from Redis: ErrNotHeld, and the hold ends as lost at once.
	hctx, err := l.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := other.Lock("extend-refused").ForceUnlock(ctx); err != nil || !ok {
		t.Fatalf("ForceUnlock = %v, %v", ok, err)
	}
	if err := l.Extend(ctx, time.Minute); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("Extend of a force-unlocked hold = %v; want ErrNotHeld", err)
	}
	select {
	case <-hctx.Done():
		if !errors.Is(context.Cause(hctx), relock.ErrLockLost) {
			t.Fatalf("the hold context's cause = %v; want ErrLockLost", context.Cause(hctx))
		}
	default:
		t.Fatal("the hold context did not end when Extend found the hold gone")
	}
	if n, _ := do(t, rdb, "EXISTS", "extend-refused").AsInt64(); n != 0 {
		t.Fatal("Extend of a gone hold recreated the key")
	}
	if err := (*relock.RLock)(nil).Extend(ctx, time.Second); !errors.Is(err, relock.ErrNilClient) {
		t.Fatalf("Extend on a nil lock = %v; want ErrNilClient", err)
	}
}

// A lease hold that is extended again and again outlives many leases, and the watchdog's checks go on
// telling its loss (here a DEL by an operator) to its HoldContext.
func TestExtendedHoldIsStillWatched(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, &relock.Options{WatchdogTimeout: 600 * time.Millisecond})
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	l := c.Lock("extend-watched")
	if err := l.LockWithLease(ctx, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	hctx, err := l.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 6 {
		time.Sleep(150 * time.Millisecond)
		if err := l.Extend(ctx, 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if err := hctx.Err(); err != nil {
		t.Fatalf("an extended hold's context ended: %v", context.Cause(hctx))
	}
	do(t, rdb, "DEL", "extend-watched")
	if err := l.Extend(ctx, 300*time.Millisecond); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("Extend after a DEL = %v; want ErrNotHeld", err)
	}
	<-hctx.Done()
	if !errors.Is(context.Cause(hctx), relock.ErrLockLost) {
		t.Fatalf("cause = %v; want ErrLockLost", context.Cause(hctx))
	}
}

// Extend with a shorter lease than a hold has leaves every key of the hold living at least as long as it
// did: the lock's hash, and a reader's own hold levels (each its own key, which a writer waits for).
func TestExtendNeverShortensAnyKey(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	for _, kind := range []string{"lock", "fair", "write", "read", "read-reentrant"} {
		t.Run(kind, func(t *testing.T) {
			name := "extend-shorter-" + kind
			var l *relock.RLock
			switch kind {
			case "lock":
				l = c.Lock(name, relock.WithFencing())
			case "fair":
				l = c.FairLock(name, relock.WithFencing())
			case "write":
				l = c.ReadWriteLock(name, relock.WithFencing()).WriteLock()
			default:
				l = c.ReadWriteLock(name).ReadLock()
			}
			if err := l.LockWithLease(ctx, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			if kind == "read-reentrant" { // a second level, with a lease of its own
				if err := l.LockWithLease(ctx, 8*time.Second); err != nil {
					t.Fatal(err)
				}
			}
			keys, err := rdb.Do(ctx, rdb.B().Keys().Pattern("*"+name+"*").Build()).AsStrSlice()
			if err != nil {
				t.Fatal(err)
			}
			if want := map[string]int{"read": 2, "read-reentrant": 3}[kind]; want > 0 && len(keys) != want {
				t.Fatalf("keys %v; want the hash and a key per read level", keys)
			}
			pttls := func() []int64 {
				ttls := make([]int64, len(keys))
				for i, k := range keys {
					ttls[i], _ = do(t, rdb, "PTTL", k).AsInt64()
				}
				return ttls
			}
			at := time.Now() // before the first read: the time elapsed is then never under-counted
			before := pttls()
			if err := l.Extend(ctx, 200*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			after := pttls()
			elapsed := time.Since(at).Milliseconds() + 1
			for i, k := range keys {
				if after[i] < before[i]-elapsed {
					t.Errorf("PTTL of %s: %d ms before Extend(200ms), %d ms %d ms later: shortened", k, before[i], after[i], elapsed)
				}
			}
			for n, _ := l.HoldCount(ctx); n > 0; n-- {
				if err := l.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// A reader that extends its lease hold with a shorter lease keeps the writers out for as long as its
// hold lives: Extend did not cut its hold level's key short behind its HoldContext.
func TestExtendOfAReadHoldKeepsWritersOut(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, other := newClient(t, srv, nil), newClient(t, srv, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	const name = "extend-read-writer"
	r := c.ReadWriteLock(name).ReadLock()
	if err := r.LockWithLease(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	hctx, err := r.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Extend(ctx, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	if hctx.Err() != nil {
		t.Fatalf("the reader's hold ended: %v", context.Cause(hctx))
	}
	w := other.ReadWriteLock(name).WriteLock()
	if ok, err := w.TryLock(ctx, 0, 0); err != nil || ok {
		t.Fatalf("another Client's writer TryLock while the reader's hold lives = %v, %v; want false", ok, err)
	}
	if hctx.Err() != nil {
		t.Fatalf("the reader's hold ended: %v", context.Cause(hctx))
	}
	if err := r.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
