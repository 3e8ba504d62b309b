package relock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// A hold with a budget ends at it, whatever the watchdog would do: its HoldContext ends with
// ErrMaxHoldReached (which matches ErrLockLost), the Client releases it, so that another Client's waiter
// gets the lock at once, and the budget reached is counted, not as a loss.
func TestMaxHoldEndsAWatchdogHold(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	o := newObserved(t, 0) // the default watchdog timeout, 30 s: only the budget ends the hold
	c, other := newClient(t, srv, o.opts), newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	const budget = 700 * time.Millisecond
	l := c.Lock("budget", relock.WithMaxHold(budget))
	start := time.Now()
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Lock(ctx); err != nil { // a reentry keeps the first acquisition's budget
		t.Fatal(err)
	}
	hctx, err := l.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ttl, _ := do(t, rdb, "PTTL", "budget").AsInt64(); ttl > budget.Milliseconds() || ttl <= 0 {
		t.Fatalf("PTTL right after the acquisitions = %d ms; want at most the budget, %v", ttl, budget)
	}
	waiter := make(chan error, 1)
	go func() { waiter <- other.Lock("budget").Lock(ctx) }()

	<-hctx.Done()
	ended := time.Since(start)
	cause := context.Cause(hctx)
	if !errors.Is(cause, relock.ErrMaxHoldReached) || !errors.Is(cause, relock.ErrLockLost) {
		t.Fatalf("cause = %v; want ErrMaxHoldReached, matching ErrLockLost", cause)
	}
	if ended < budget {
		t.Fatalf("the hold ended after %v, before its budget of %v", ended, budget)
	}
	select {
	case err := <-waiter:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("another Client's waiter still waits 5 s after the budget ended the hold")
	}
	if err := l.Unlock(ctx); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("Unlock after the budget = %v; want ErrNotHeld", err)
	}
	if n := o.metric(t, "relock.max_hold_reached", relock.AttrLockKind.String("rlock")); n != 1 {
		t.Fatalf("relock.max_hold_reached = %d; want 1", n)
	}
	if n := o.metric(t, "relock.losses", relock.AttrLockKind.String("rlock")); n != 0 {
		t.Fatalf("relock.losses = %d; want 0: a budget reached is no loss", n)
	}
}

// No acquisition, renewal or Extend gives a hold a time to live in Redis past its budget: Redis drops it
// there even if its Client can no longer release it.
func TestMaxHoldCapsTheTTLInRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, &relock.Options{WatchdogTimeout: 600 * time.Millisecond})
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	const budget = 1500 * time.Millisecond
	check := func(t *testing.T, name string, start time.Time) {
		t.Helper()
		ttl, err := do(t, rdb, "PTTL", name).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		if left := budget - time.Since(start); ttl > left.Milliseconds()+5 {
			t.Fatalf("PTTL %d ms with %v of the budget left", ttl, left)
		}
	}
	t.Run("watchdog", func(t *testing.T) {
		l := c.Lock("budget-renewed", relock.WithMaxHold(budget))
		start := time.Now()
		if err := l.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		hctx, _ := l.HoldContext(ctx)
		for hctx.Err() == nil { // renewed every 200 ms: each renewal is capped
			check(t, "budget-renewed", start)
			time.Sleep(20 * time.Millisecond)
		}
	})
	t.Run("lease", func(t *testing.T) {
		l := c.Lock("budget-lease", relock.WithMaxHold(budget))
		start := time.Now()
		if err := l.LockWithLease(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		check(t, "budget-lease", start)
		if err := l.Extend(ctx, time.Hour); err != nil {
			t.Fatal(err)
		}
		check(t, "budget-lease", start)
		hctx, _ := l.HoldContext(ctx)
		<-hctx.Done()
		if !errors.Is(context.Cause(hctx), relock.ErrMaxHoldReached) {
			t.Fatalf("cause = %v; want ErrMaxHoldReached", context.Cause(hctx))
		}
		if err := l.Extend(ctx, time.Second); !errors.Is(err, relock.ErrNotHeld) {
			t.Fatalf("Extend after the budget = %v; want ErrNotHeld", err)
		}
	})
	t.Run("reentry without the option", func(t *testing.T) {
		// A reentry through a lock made without WithMaxHold keeps the hold's budget.
		l := c.Lock("budget-reentry", relock.WithMaxHold(budget))
		start := time.Now()
		if err := l.LockWithLease(ctx, 200*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if err := c.Lock("budget-reentry").LockWithLease(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		check(t, "budget-reentry", start)
	})
}

// A negative budget is refused at every acquisition, and writes nothing.
func TestMaxHoldRefusesANegativeBudget(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	l := c.Lock("budget-negative", relock.WithMaxHold(-time.Second))
	if err := l.Lock(ctx); !errors.Is(err, relock.ErrInvalidDuration) {
		t.Fatalf("Lock = %v; want ErrInvalidDuration", err)
	}
	if ok, err := l.TryLock(ctx, 0, time.Second); ok || !errors.Is(err, relock.ErrInvalidDuration) {
		t.Fatalf("TryLock = %v, %v; want ErrInvalidDuration", ok, err)
	}
	if n, _ := do(t, rdb, "DBSIZE").AsInt64(); n != 0 {
		t.Fatalf("%d keys written by refused acquisitions", n)
	}
}

// A hold handed to a waiter of the same Client (see gates) is a new hold with its own budget.
func TestMaxHoldOfAHandedOverHold(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	l := c.Lock("budget-handoff", relock.WithMaxHold(time.Minute))
	a, b := relock.WithOwner(ctx, "A"), relock.WithOwner(ctx, "B")
	if err := l.Lock(a); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	lb := c.Lock("budget-handoff", relock.WithMaxHold(800*time.Millisecond))
	go func() { got <- lb.Lock(b) }()
	awaitWaitingOwners(t, rdb, "budget-handoff", 1)
	if err := l.Unlock(a); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if ttl, _ := do(t, rdb, "PTTL", "budget-handoff").AsInt64(); ttl > 800 {
		t.Fatalf("PTTL of the handed-over hold = %d ms; want at most its budget, 800 ms", ttl)
	}
	hctx, err := lb.HoldContext(b)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-hctx.Done():
		if !errors.Is(context.Cause(hctx), relock.ErrMaxHoldReached) {
			t.Fatalf("cause = %v; want ErrMaxHoldReached", context.Cause(hctx))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handed-over hold outlived its budget by seconds")
	}
}
