package relock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

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

// A grace period longer than the lock's time to live (its holder's watchdog renews it every 100 ms) still
// ends in a takeover of a holder that heard and keeps the lock: the request outlives the lock's TTL at the
// time it was made, as long as the hold asked goes on.
func TestRevokeTakesOverAfterAGraceLongerThanTheLockTTL(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, &relock.Options{WatchdogTimeout: 300 * time.Millisecond}), newClient(t, srv, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	la, lb := a.Lock("revoke-long"), b.Lock("revoke-long")
	if err := la.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	held, _ := la.HoldContext(ctx)
	if _, err := la.ReleaseRequests(ctx); err != nil {
		t.Fatal(err)
	}
	const grace = 1500 * time.Millisecond
	start := time.Now()
	if err := lb.Revoke(ctx, "long", grace); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < grace {
		t.Fatalf("took over after %v, before the grace period of %v", d, grace)
	}
	select {
	case <-held.Done():
		if !errors.Is(context.Cause(held), relock.ErrLockLost) {
			t.Fatalf("the old holder's cause = %v; want ErrLockLost", context.Cause(held))
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the old holder did not learn of the takeover within 2 s")
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

// Revoke takes a lock over only when the holder's own Client heard the request for that hold: other
// Clients and programs subscribed to request channels are not the holder. Here the holder does not
// listen, while a former holder's Client (taken over, it does not know yet: it does not watch its holds)
// still listens, a plain subscriber listens on the lock's request channel, and then a pattern subscriber
// on every request channel too: Revoke returns ErrNotHeard and the holder keeps the lock.
func TestRevokeNotHeardByOtherSubscribers(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	former := newClient(t, srv, &relock.Options{NoHoldWatch: true})
	holder, requester := newClient(t, srv, nil), newClient(t, srv, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	const name = "revoke-others"
	lf, lh, lr := former.Lock(name), holder.Lock(name), requester.Lock(name)
	if err := lf.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := lf.ReleaseRequests(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lh.TakeOver(ctx); err != nil { // the former holder's Client learns of it at its watchdog's check
		t.Fatal(err)
	}
	subscribeRaw(t, srv, "relock_release_request:{"+name+"}")
	if n, err := lr.RequestRelease(ctx, "x"); err != nil || n != 0 {
		t.Fatalf("RequestRelease to a holder that does not listen = %d, %v; want 0 heard", n, err)
	}
	if err := lr.Revoke(ctx, "x", 200*time.Millisecond); !errors.Is(err, relock.ErrNotHeard) {
		t.Fatalf("Revoke of a holder that does not listen, while others do = %v; want ErrNotHeard", err)
	}
	if held, _ := lh.IsHeld(ctx); !held {
		t.Fatal("Revoke took the lock from a holder that does not listen")
	}
	psubscribeRaw(t, srv, "relock_release_request:*")
	if err := lr.Revoke(ctx, "x", 200*time.Millisecond); !errors.Is(err, relock.ErrNotHeard) {
		t.Fatalf("Revoke of a holder that does not listen, with a pattern subscriber = %v; want ErrNotHeard", err)
	}
	if held, _ := lh.IsHeld(ctx); !held {
		t.Fatal("Revoke took the lock from a holder that does not listen, with a pattern subscriber")
	}
	if held, _ := lf.HoldContext(ctx); held.Err() != nil {
		t.Fatal("the test needs a former holder whose Client still listens")
	}
}

// A holder that heard a request and let go, then took the lock again at once (the same owner: the
// takeover cannot tell the new hold's field from the old one's), is not taken over: its new hold began
// after the request. Every other round the new hold listens, once it holds: a request made before it
// listened is not one it heard. (The requester, whose link is slower, may take the lock first when it is
// free: a release.)
func TestRevokeSparesAHoldBegunAfterTheRequest(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := startProxy(t, srv)
	proxy.SetLatency(10 * time.Millisecond)
	a, b := newClient(t, srv, nil), clientAt(t, proxy.Addr, nil)
	ctx := ctxTimeout(t, 60*time.Second)
	la, lb := a.Lock("revoke-again"), b.Lock("revoke-again")
	holder, requester := relock.WithOwner(ctx, "holder"), relock.WithOwner(ctx, "requester")
	again := 0
	for round := range 20 {
		if err := la.Lock(holder); err != nil {
			t.Fatal(err)
		}
		requests, err := la.ReleaseRequests(holder)
		if err != nil {
			t.Fatal(err)
		}
		revoked := make(chan error, 1)
		go func() { revoked <- lb.Revoke(requester, "again", 300*time.Millisecond) }()
		select {
		case <-requests:
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: the holder did not hear the request", round)
		}
		if err := la.Unlock(holder); err != nil {
			t.Fatal(err)
		}
		ok, err := la.TryLock(holder, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !ok { // the requester took the free lock
			if err := <-revoked; err != nil {
				t.Fatalf("round %d: Revoke of a released lock = %v", round, err)
			}
			if err := lb.Unlock(requester); err != nil {
				t.Fatal(err)
			}
			continue
		}
		again++
		if round%2 == 1 {
			if _, err := la.ReleaseRequests(holder); err != nil {
				t.Fatal(err)
			}
		}
		held, _ := la.HoldContext(holder)
		if err := <-revoked; !errors.Is(err, relock.ErrNotHeard) {
			t.Fatalf("round %d: Revoke of a hold begun after its request = %v; want ErrNotHeard", round, err)
		}
		if held.Err() != nil {
			t.Fatalf("round %d: the new hold ended: %v", round, context.Cause(held))
		}
		if err := la.Unlock(holder); err != nil {
			t.Fatal(err)
		}
	}
	if again == 0 {
		t.Fatal("the holder never took the lock again before the requester: the test showed nothing")
	}
	t.Logf("the holder took the lock again in %d of 20 rounds", again)
}

// A holder whose lease ran out after it heard a request, and that took the lock again at once (the same
// owner), is not taken over: the hold that heard has ended. (The requester's link is slower, so that the
// holder takes the lock again first.)
func TestRevokeSparesAHoldTakenAgainAfterItsLeaseEnded(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := startProxy(t, srv)
	proxy.SetLatency(50 * time.Millisecond)
	a, b := newClient(t, srv, nil), clientAt(t, proxy.Addr, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	la, lb := a.Lock("revoke-lease"), b.Lock("revoke-lease")
	holder := relock.WithOwner(ctx, "holder")
	if ok, err := la.TryLock(holder, 0, 400*time.Millisecond); !ok || err != nil {
		t.Fatalf("TryLock = %v, %v", ok, err)
	}
	first, _ := la.HoldContext(holder)
	requests, err := la.ReleaseRequests(holder)
	if err != nil {
		t.Fatal(err)
	}
	revoked := make(chan error, 1)
	go func() { revoked <- lb.Revoke(ctx, "lease", 1500*time.Millisecond) }()
	select {
	case <-requests:
	case <-time.After(5 * time.Second):
		t.Fatal("the holder did not hear the request")
	}
	<-first.Done() // the lease ends
	if ok, err := la.TryLock(holder, 0, 0); !ok || err != nil {
		t.Fatalf("TryLock after the lease = %v, %v; the test needs the holder to take the lock again first", ok, err)
	}
	held, _ := la.HoldContext(holder)
	if err := <-revoked; !errors.Is(err, relock.ErrNotHeard) {
		t.Fatalf("Revoke of a hold begun after its request = %v; want ErrNotHeard", err)
	}
	if held.Err() != nil {
		t.Fatalf("the new hold ended: %v", context.Cause(held))
	}
}

// A holder whose lock was deleted behind relock's back after it heard a request (its Client learns of
// the loss at once, watching its holds), and that took the lock again at once (the same owner), is not
// taken over: the hold that heard was lost, and its Client withdraws what it told the requester. (The
// requester's link is slower, so that the holder takes the lock again first.)
func TestRevokeSparesAHoldTakenAgainAfterItWasDeleted(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := startProxy(t, srv)
	proxy.SetLatency(50 * time.Millisecond)
	a, b := newClient(t, srv, nil), clientAt(t, proxy.Addr, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	const name = "revoke-deleted"
	la, lb := a.Lock(name), b.Lock(name)
	holder := relock.WithOwner(ctx, "holder")
	if err := la.Lock(holder); err != nil {
		t.Fatal(err)
	}
	first, _ := la.HoldContext(holder)
	requests, err := la.ReleaseRequests(holder)
	if err != nil {
		t.Fatal(err)
	}
	revoked := make(chan error, 1)
	go func() { revoked <- lb.Revoke(ctx, "deleted", time.Second) }()
	select {
	case <-requests:
	case <-time.After(5 * time.Second):
		t.Fatal("the holder did not hear the request")
	}
	// Its Client has told the requester that the hold heard (the marker of lua/lib/requests.lua).
	marker := "?request " + a.ID() + ":holder"
	eventually(t, 5*time.Second, "the holder's acknowledgement", func() bool {
		v, _ := do(t, rdb, "HGET", "relock_undone:{"+name+"}", marker).ToString()
		f := strings.Fields(v)
		return len(f) > 1 && f[1] == "1"
	})
	do(t, rdb, "DEL", name)
	select {
	case <-first.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the holder did not learn of its loss")
	}
	if ok, err := la.TryLock(holder, 0, 0); !ok || err != nil {
		t.Fatalf("TryLock after the loss = %v, %v; the test needs the holder to take the lock again first", ok, err)
	}
	held, _ := la.HoldContext(holder)
	if err := <-revoked; !errors.Is(err, relock.ErrNotHeard) {
		t.Fatalf("Revoke of a hold begun after its request = %v; want ErrNotHeard", err)
	}
	if held.Err() != nil {
		t.Fatalf("the new hold ended: %v", context.Cause(held))
	}
}

// psubscribeRaw subscribes to pattern on its own connection to srv, as a program other than relock would;
// it returns once Redis counts the subscription.
func psubscribeRaw(t *testing.T, srv *redistest.Server, pattern string) {
	t.Helper()
	sub, rdb := rawClient(t, srv), rawClient(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		<-done
	})
	numpat := func() int64 { n, _ := do(t, rdb, "PUBSUB", "NUMPAT").AsInt64(); return n }
	before := numpat()
	go func() {
		defer close(done)
		_ = sub.Receive(ctx, sub.B().Psubscribe().Pattern(pattern).Build(), func(rueidis.PubSubMessage) {})
	}()
	eventually(t, 3*time.Second, "the raw pattern subscription", func() bool { return numpat() > before })
}
