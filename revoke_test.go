package relock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// A holder that listens hears the request, with its reason and requester, and lets go: Revoke then holds
// the lock well before its grace period ends, without a takeover.
func TestRevokeCooperative(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	la, lb := a.Lock("revoke-coop", relock.WithFencing()), b.Lock("revoke-coop", relock.WithFencing())
	holder := relock.WithOwner(ctx, "holder") // it releases from another goroutine
	if err := la.Lock(holder); err != nil {
		t.Fatal(err)
	}
	requests, err := la.ReleaseRequests(holder)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := b.Lock("revoke-free").RequestRelease(ctx, "nobody"); err != nil || n != 0 {
		t.Fatalf("RequestRelease of a free lock = %d, %v; want 0 heard", n, err)
	}
	go func() {
		req, ok := <-requests
		if !ok {
			t.Error("the requests channel closed before a request came")
			return
		}
		if req.Reason != "deploy v2" || req.From != b.ID() {
			t.Errorf("request = %+v; want reason %q from %s", req, "deploy v2", b.ID())
		}
		if err := la.Unlock(holder); err != nil {
			t.Error(err)
		}
	}()
	start := time.Now()
	if err := lb.Revoke(ctx, "deploy v2", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Revoke took %v: the holder's release did not end it", d)
	}
	if held, _ := lb.IsHeld(ctx); !held {
		t.Fatal("the requester does not hold the lock after Revoke")
	}
	select {
	case _, ok := <-requests:
		if ok {
			t.Fatal("a second request arrived")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the requests channel was not closed when the hold ended")
	}
}

// A holder that hears but does not let go is taken over after the grace period: the requester holds the
// lock with a newer fencing token, and the old holder learns of its loss at once.
func TestRevokeTakesOverAfterGrace(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	la, lb := a.Lock("revoke-grace", relock.WithFencing()), b.Lock("revoke-grace", relock.WithFencing())
	if err := la.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := la.Lock(ctx); err != nil { // held twice: a takeover takes every level
		t.Fatal(err)
	}
	tokenA, _ := la.FencingToken(ctx)
	held, _ := la.HoldContext(ctx)
	if _, err := la.ReleaseRequests(ctx); err != nil {
		t.Fatal(err)
	}
	const grace = 300 * time.Millisecond
	start := time.Now()
	if err := lb.Revoke(ctx, "stuck", grace); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < grace {
		t.Fatalf("took over after %v, before the grace period of %v", d, grace)
	}
	tokenB, err := lb.FencingToken(ctx)
	if err != nil || tokenB <= tokenA {
		t.Fatalf("the new holder's token = %d, %v; want above %d", tokenB, err, tokenA)
	}
	select {
	case <-held.Done():
		if !errors.Is(context.Cause(held), relock.ErrLockLost) {
			t.Fatalf("the old holder's cause = %v; want ErrLockLost", context.Cause(held))
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the old holder did not learn of the takeover within 2 s")
	}
	if n, _ := lb.HoldCount(ctx); n != 1 {
		t.Fatalf("HoldCount after the takeover = %d; want 1", n)
	}
}

// A holder taken over that has not heard of it yet (a paused process: its Client does not watch its holds)
// can no longer write through its hold: its guarded write is refused in Redis.
func TestTakenOverHolderCannotWrite(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, &relock.Options{NoHoldWatch: true}), newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	la := a.Lock("{taken}", relock.WithFencing())
	if err := la.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Lock("{taken}", relock.WithFencing()).TakeOver(ctx); err != nil {
		t.Fatal(err)
	}
	if held, _ := la.HoldContext(ctx); held.Err() != nil {
		t.Fatal("the test needs a holder that has not heard of its loss yet")
	}
	if _, err := la.GuardedWrite(ctx, rdb.B().Set().Key("{taken}:data").Value("stale").Build()); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("the taken-over holder's GuardedWrite = %v; want ErrNotHeld", err)
	}
	if n, _ := do(t, rdb, "EXISTS", "{taken}:data").AsInt64(); n != 0 {
		t.Fatal("the taken-over holder's write landed")
	}
}

// A holder that cannot hear, relock's not listening or Redisson's, is never taken over by Revoke; only
// TakeOver, the explicit step, takes the lock from it.
func TestRevokeNeverTakesFromAHolderThatCannotHear(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)

	la := a.Lock("revoke-deaf")
	if err := la.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Lock("revoke-deaf").Revoke(ctx, "x", 200*time.Millisecond); !errors.Is(err, relock.ErrNotHeard) {
		t.Fatalf("Revoke of a holder that does not listen = %v; want ErrNotHeard", err)
	}
	if held, _ := la.IsHeld(ctx); !held {
		t.Fatal("a holder that does not listen lost the lock to Revoke")
	}

	const redisson = "6f6e6c79-6a61-4761-8000-000000000000:9"
	do(t, rdb, "HSET", "revoke-redisson", redisson, "1")
	do(t, rdb, "PEXPIRE", "revoke-redisson", "30000")
	lb := b.Lock("revoke-redisson", relock.WithFencing())
	if err := lb.Revoke(ctx, "x", 200*time.Millisecond); !errors.Is(err, relock.ErrNotHeard) {
		t.Fatalf("Revoke of a Redisson holder = %v; want ErrNotHeard", err)
	}
	if n, _ := do(t, rdb, "HEXISTS", "revoke-redisson", redisson).AsInt64(); n != 1 {
		t.Fatal("Revoke took the lock from a Redisson holder")
	}
	if err := lb.TakeOver(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := do(t, rdb, "HEXISTS", "revoke-redisson", redisson).AsInt64(); n != 0 {
		t.Fatal("TakeOver left the Redisson holder's field")
	}
	if held, _ := lb.IsHeld(ctx); !held {
		t.Fatal("TakeOver did not give the lock to its caller")
	}
	if tok, err := lb.FencingToken(ctx); err != nil || tok == 0 {
		t.Fatalf("token after TakeOver = %d, %v", tok, err)
	}
	if err := b.FairLock("revoke-fair").TakeOver(ctx); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("TakeOver of a FairLock = %v; want errors.ErrUnsupported", err)
	}
	if err := lb.Revoke(ctx, "x", -time.Second); !errors.Is(err, relock.ErrInvalidDuration) {
		t.Fatalf("Revoke with a negative grace = %v; want ErrInvalidDuration", err)
	}
}

// An election's leader hears a request to step down and resigns: the candidate that asked leads next.
func TestElectionStepDownRequest(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	ea, eb := a.Election("revoke-election"), b.Election("revoke-election")
	if _, err := ea.Campaign(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	requests, err := ea.StepDownRequests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := eb.RequestStepDown(ctx, "maintenance"); err != nil || n != 1 {
		t.Fatalf("RequestStepDown = %d, %v; want 1 heard", n, err)
	}
	select {
	case req := <-requests:
		if req.Reason != "maintenance" {
			t.Fatalf("reason = %q", req.Reason)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the leader did not hear the request")
	}
	if err := ea.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := eb.Campaign(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if l, err := eb.Leader(ctx); err != nil || l.Value != "b" {
		t.Fatalf("leader = %+v, %v; want b", l, err)
	}
}
