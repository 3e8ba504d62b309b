package relock_test

import (
	"context"
	"encoding/hex"
	"errors"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/faultnet"
	"github.com/relock-go/relock/internal/redistest"
)

// A permit is kept alive while held, ends its context when released, and is in Redisson's layout.
func TestPermitSemaphore(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	opts := &relock.Options{WatchdogTimeout: time.Second}
	a, b := newClient(t, srv, opts), newClient(t, srv, opts)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	s := a.PermitSemaphore("jobs")
	if ok, err := s.TrySetPermits(ctx, 1); !ok || err != nil {
		t.Fatalf("TrySetPermits = %v, %v", ok, err)
	}
	p, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held, err := p.Context(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := hex.DecodeString(p.ID())
	if len(id) != 16 {
		t.Fatalf("permit id %q, want 16 bytes in hex", p.ID())
	}
	if err := do(t, rdb, "ZSCORE", "{jobs}:timeout", string(id)).Error(); err != nil {
		t.Fatalf("the permit is not in Redisson's {jobs}:timeout: %v", err)
	}
	// Held for 2.5 times the watchdog timeout: renewed, and nobody else gets it.
	if got, ok, err := b.PermitSemaphore("jobs").TryAcquire(ctx, 2500*time.Millisecond, 0); ok || got != nil || err != nil {
		t.Fatalf("another Client got a permit of a semaphore of 1 that is held: %v, %v, %v", got, ok, err)
	}
	if held.Err() != nil {
		t.Fatalf("the permit ended while held: %v", context.Cause(held))
	}
	waiter := make(chan *relock.Permit, 1)
	go func() {
		q, err := b.PermitSemaphore("jobs").Acquire(ctx)
		if err != nil {
			t.Error(err)
		}
		waiter <- q
	}()
	time.Sleep(100 * time.Millisecond)
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(held), context.Canceled) {
		t.Fatalf("the released permit's context ended with %v", context.Cause(held))
	}
	if err := p.Release(ctx); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("a second Release = %v, want ErrNotHeld", err)
	}
	var q *relock.Permit
	select {
	case q = <-waiter:
	case <-time.After(3 * time.Second):
		t.Fatal("the waiter was not woken by the release")
	}
	if err := q.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.AvailablePermits(ctx); n != 1 {
		t.Fatalf("available = %d, want 1", n)
	}
}

// A permit whose holder stops renewing it (its process dies: Abandon) comes back
// within the watchdog timeout, to a waiter that was woken by nothing else.
func TestPermitOfADeadHolderComesBack(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	opts := &relock.Options{WatchdogTimeout: 600 * time.Millisecond}
	dead, alive := newClient(t, srv, opts), newClient(t, srv, opts)
	ctx := ctxTimeout(t, 20*time.Second)
	if _, err := dead.PermitSemaphore("crash").TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := dead.PermitSemaphore("crash").Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	relock.Abandon(dead)
	start := time.Now()
	p, err := alive.PermitSemaphore("crash").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the dead holder's permit came back after %v (watchdog timeout 600ms)", d)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A holder cut off from Redis past the permit's expiry loses it: its context ends with ErrLockLost, and
// another Client takes the permit.
func TestPermitLostWhenNotRenewed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := startProxy(t, srv)
	opts := &relock.Options{WatchdogTimeout: 600 * time.Millisecond}
	holder, other := clientAt(t, proxy.Addr, opts), newClient(t, srv, opts)
	ctx := ctxTimeout(t, 20*time.Second)
	if _, err := other.PermitSemaphore("cut").TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	p, err := holder.PermitSemaphore("cut").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held, _ := p.Context(ctx)
	proxy.Stall(faultnet.Upstream, true)
	got, ok, err := other.PermitSemaphore("cut").TryAcquire(ctx, 3*time.Second, 0)
	if err != nil || !ok {
		t.Fatalf("the other Client did not get the expired permit: %v, %v", got, err)
	}
	select {
	case <-held.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("the holder was not told it lost the permit")
	}
	proxy.Stall(faultnet.Upstream, false)
	if !errors.Is(context.Cause(held), relock.ErrLockLost) {
		t.Fatalf("the lost permit's context ended with %v, want ErrLockLost", context.Cause(held))
	}
	if err := p.Release(ctx); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("Release of a lost permit = %v, want ErrNotHeld", err)
	}
	if err := got.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Redisson's protocol, driven by hand: a permit a Redisson client took (a member of {name}:timeout scored
// with its expiry, the count decremented) whose expiry has passed is given back by relock's next
// acquisition, and relock's permits are members Redisson's scripts see.
func TestPermitSemaphoreRedissonProtocol(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	s := c.PermitSemaphore("shared-permits")
	if _, err := s.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// A Redisson client took the only permit, with a lease that ran out a second ago.
	do(t, rdb, "DECRBY", "shared-permits", "1")
	expired := strconv.FormatInt(time.Now().Add(-time.Second).UnixMilli(), 10)
	do(t, rdb, "ZADD", "{shared-permits}:timeout", expired, "java-permit-id-16")
	p, ok, err := s.TryAcquire(ctx, 0, 0)
	if err != nil || !ok {
		t.Fatalf("relock did not take the permit whose Redisson lease had run out: %v, %v", p, err)
	}
	if n, _ := do(t, rdb, "ZCARD", "{shared-permits}:timeout").AsInt64(); n != 1 {
		t.Fatalf("{shared-permits}:timeout holds %d permits, want relock's 1", n)
	}
	score, err := do(t, rdb, "ZSCORE", "{shared-permits}:timeout", string(mustHex(t, p.ID()))).AsFloat64()
	if err != nil || int64(score) <= time.Now().UnixMilli() {
		t.Fatalf("relock's permit is scored %v (%v), want its expiry in Unix milliseconds", score, err)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// AddPermits and TrySetPermits announce on the semaphore's channel, and wake a waiting Acquire.
func TestPermitSemaphoreAddPermitsWakesWaiters(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	if _, err := a.PermitSemaphore("grow").TrySetPermits(ctx, 0); err != nil {
		t.Fatal(err)
	}
	messages := subscribeRaw(t, srv, "redisson_sc:{grow}")
	got := make(chan error, 1)
	go func() {
		p, err := b.PermitSemaphore("grow").Acquire(ctx)
		if err == nil {
			err = p.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(200 * time.Millisecond)
	if err := a.PermitSemaphore("grow").AddPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-messages:
		if m != "1" {
			t.Fatalf("AddPermits published %q on redisson_sc:{grow}, want 1", m)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("AddPermits published nothing on redisson_sc:{grow}")
	}
	receive(t, got, 3*time.Second, "AddPermits did not wake the waiter")
}

// The owner rule: the permits an owner took are the ones it can release by count, the longest held first;
// releasing more than it holds, or permits another owner holds, is ErrNotHeld and gives nothing back.
func TestPermitOwnerRule(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, &relock.Options{WatchdogTimeout: 3 * time.Second})
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	s := c.PermitSemaphore("owned")
	if _, err := s.TrySetPermits(ctx, 5); err != nil {
		t.Fatal(err)
	}
	a, b := relock.WithOwner(ctx, "a"), relock.WithOwner(ctx, "b")
	var first *relock.Permit
	for i := range 3 {
		p, err := s.Acquire(a)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = p
		}
	}
	state := func() (int64, int64) {
		n, _ := do(t, rdb, "GET", "owned").AsInt64()
		taken, _ := do(t, rdb, "ZCARD", "{owned}:timeout").AsInt64()
		return n, taken
	}
	if n, taken := state(); n != 2 || taken != 3 {
		t.Fatalf("after 3 acquisitions: %d available, %d taken", n, taken)
	}
	if n, err := s.Held(a); n != 3 || err != nil {
		t.Fatalf("Held(a) = %d, %v; want 3", n, err)
	}
	for _, tc := range []struct {
		ctx  context.Context
		n    int
		want error
	}{{b, 1, relock.ErrNotHeld}, {a, 4, relock.ErrNotHeld}, {a, 0, relock.ErrInvalidPermits}, {a, -1, relock.ErrInvalidPermits}, {ctx, 1, relock.ErrNotHeld}} {
		if err := s.Release(tc.ctx, tc.n); !errors.Is(err, tc.want) {
			t.Errorf("Release(%d) = %v, want %v", tc.n, err, tc.want)
		}
		if n, taken := state(); n != 2 || taken != 3 {
			t.Fatalf("a refused Release(%d) changed Redis: %d available, %d taken", tc.n, n, taken)
		}
	}
	// The longest held first: the first permit goes with a Release of 1.
	held, _ := first.Context(ctx)
	if err := s.Release(a, 1); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(held), context.Canceled) {
		t.Fatalf("the first permit's context: %v, want released", context.Cause(held))
	}
	if err := first.Release(ctx); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("Release of a permit its owner gave back = %v, want ErrNotHeld", err)
	}
	// Two of the owner's goroutines release one each, at once: both succeed.
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- s.Release(a, 1) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n, taken := state(); n != 5 || taken != 0 {
		t.Fatalf("after every release: %d available, %d taken", n, taken)
	}
	if n, _ := s.Held(a); n != 0 {
		t.Fatalf("Held(a) = %d after every release", n)
	}

	// Without WithOwner the owner is the goroutine, as for the locks.
	if _, err := s.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	go func() { errs <- s.Release(ctx, 1) }()
	if err := <-errs; !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("Release by another goroutine = %v, want ErrNotHeld", err)
	}
	if err := s.Release(ctx, 1); err != nil {
		t.Fatal(err)
	}
}

// A permit the owner lost does not count as held: Release of it is ErrNotHeld, and gives nothing back
// twice.
func TestPermitOwnerReleaseAfterLoss(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, &relock.Options{WatchdogTimeout: 3 * time.Second})
	rdb := rawClient(t, srv)
	ctx := relock.WithOwner(ctxTimeout(t, 20*time.Second), "o")
	s := c.PermitSemaphore("lost-owned")
	p, held := bothPermits(t, ctx, s)
	// The first permit expires in Redis (as if its renewals had failed) and another owner's acquisition
	// gives it back and takes it.
	id, _ := hex.DecodeString(p.ID())
	do(t, rdb, "ZADD", "{lost-owned}:timeout", "1", string(id))
	q, ok, err := c.PermitSemaphore("lost-owned").TryAcquire(relock.WithOwner(ctx, "other"), 0, 0)
	if err != nil || !ok {
		t.Fatalf("the expired permit was not taken: %v, %v", q, err)
	}
	select {
	case <-held.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lost permit's context did not end")
	}
	if !errors.Is(context.Cause(held), relock.ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", context.Cause(held))
	}
	if n, _ := s.Held(ctx); n != 1 {
		t.Fatalf("Held = %d after a loss, want 1", n)
	}
	if err := s.Release(ctx, 2); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("Release(2) with one permit left = %v, want ErrNotHeld", err)
	}
	if err := s.Release(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if n, _ := do(t, rdb, "GET", "lost-owned").AsInt64(); n != 1 {
		t.Fatalf("available = %d, want 1 (the other owner holds the other permit)", n)
	}
}

// A release with an ended context, by Permit or by owner, returns the context's error and completes in the
// background, as an Unlock does: the permits come back, and are not the owner's any more. Each release
// is traced.
func TestPermitReleaseWithEndedContext(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	obs := newObserved(t, 3*time.Second)
	c := newClient(t, srv, obs.opts)
	ctx := relock.WithOwner(ctxTimeout(t, 20*time.Second), "o")
	s := c.PermitSemaphore("ended-release")
	p, held := bothPermits(t, ctx, s)
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if err := p.Release(ended); !errors.Is(err, context.Canceled) {
		t.Fatalf("Permit.Release with an ended context = %v, want context.Canceled", err)
	}
	if err := s.Release(ended, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Release with an ended context = %v, want context.Canceled", err)
	}
	if !errors.Is(context.Cause(held), context.Canceled) {
		t.Fatalf("the permit's context: %v, want it released", context.Cause(held))
	}
	if n, _ := s.Held(ctx); n != 0 {
		t.Fatalf("Held = %d after both releases, want 0", n)
	}
	eventually(t, 3*time.Second, "both permits back", func() bool {
		n, _ := s.AvailablePermits(ctx)
		return n == 2
	})
	if err := s.Release(ctx, 1); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("Release after both were given back = %v, want ErrNotHeld", err)
	}
	if got := len(obs.ended("relock.permitsemaphore.release")) + len(obs.ended("relock.permitsemaphore.permit.release")); got != 2 {
		t.Fatalf("%d release spans, want 2", got)
	}
}

// bothPermits sets s's permits to 2 and takes both for ctx's owner; it returns the first and its context.
func bothPermits(t *testing.T, ctx context.Context, s *relock.PermitSemaphore) (*relock.Permit, context.Context) {
	t.Helper()
	if _, err := s.TrySetPermits(ctx, 2); err != nil {
		t.Fatal(err)
	}
	p, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := p.Context(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return p, held
}

// A permit is traced as a lock's hold is: a relock.hold span from its acquisition to its release.
func TestPermitHoldIsTraced(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	obs := newObserved(t, 3*time.Second)
	c := newClient(t, srv, obs.opts)
	ctx := ctxTimeout(t, 10*time.Second)
	s := c.PermitSemaphore("traced-permit")
	if _, err := s.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	p, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	holds := obs.ended("relock.hold")
	if len(holds) != 1 {
		t.Fatalf("%d relock.hold spans, want 1", len(holds))
	}
	var kind string
	for _, a := range holds[0].Attributes() {
		if a.Key == relock.AttrLockKind {
			kind = a.Value.AsString()
		}
	}
	if kind != "semaphore" {
		t.Fatalf("the hold span's kind is %q, want semaphore", kind)
	}
}

// A waiter for a permit sleeps until a release while every permit taken is one that does not expire, or
// expires further away than a Duration reaches: Redisson's permit without a lease (scored 922337203685477),
// or one with a lease of 584 years (whose time left in ms, times 10^6, wrapped around int64 to under a
// second). It makes no attempt between its subscription and the release, and the release wakes it.
func TestPermitWaiterBesideRedissonPermitWithoutLease(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := rawClient(t, srv)
	noLease := func() string { return "922337203685477" }
	// 2^64 ns is 18446744073709.551616 ms: a permit 18446744073709 ms + 1 s away was read as 999.4 ms, and
	// the waiter tried again every time that much less than a second.
	wraps := func() string { return strconv.FormatInt(time.Now().UnixMilli()+18446744073709+1000, 10) }
	for _, tc := range []struct {
		name  string
		score func() string
	}{{"no-lease", noLease}, {"wrapping-lease", wraps}} {
		t.Run(tc.name, func(t *testing.T) {
			obs := newObserved(t, 3*time.Second)
			c := newClient(t, srv, obs.opts)
			ctx := ctxTimeout(t, 20*time.Second)
			name := "waiter-beside-" + tc.name
			s := c.PermitSemaphore(name)
			if _, err := s.TrySetPermits(ctx, 1); err != nil {
				t.Fatal(err)
			}
			// A Redisson client took the only permit.
			do(t, rdb, "DECRBY", name, "1")
			do(t, rdb, "ZADD", "{"+name+"}:timeout", tc.score(), "java-permit-id-16")
			got := make(chan error, 1)
			go func() {
				p, err := s.Acquire(ctx)
				if err == nil {
					err = p.Release(ctx)
				}
				got <- err
			}()
			eventually(t, 5*time.Second, "the waiter's subscription", func() bool {
				return numsub(t, rdb, "redisson_sc:{"+name+"}") == 1
			})
			time.Sleep(1500 * time.Millisecond) // a waiter that wakes before the release would try here
			select {
			case err := <-got:
				t.Fatalf("Acquire returned while the permit was taken: %v", err)
			default:
			}
			// The Redisson client releases its permit as its release script does.
			if n, _ := do(t, rdb, "ZREM", "{"+name+"}:timeout", "java-permit-id-16").AsInt64(); n != 1 {
				t.Fatal("the Redisson permit was not there to release")
			}
			do(t, rdb, "INCRBY", name, "1")
			do(t, rdb, "PUBLISH", "redisson_sc:{"+name+"}", "1")
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the release did not wake the waiter")
			}
			spans := obs.ended("relock.acquire")
			if len(spans) != 1 {
				t.Fatalf("%d relock.acquire spans, want 1", len(spans))
			}
			// The first attempt, the one after subscribing, the one after the release.
			if n := attrOf(spans[0], relock.AttrAttempts).AsInt64(); n != 3 {
				t.Fatalf("the waiter made %d attempts, want 3: it woke before the release", n)
			}
		})
	}
}

// Permit.Release and PermitSemaphore.Release of the same permit, at once, round after round: one gives it
// back, the other returns ErrNotHeld, and the permit always ends released: no loss is counted or logged.
func TestPermitReleaseRace(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	obs := newObserved(t, 3*time.Second)
	logs := &redistest.OutputBuffer{}
	obs.opts.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	c := newClient(t, srv, obs.opts)
	ctx := relock.WithOwner(ctxTimeout(t, 60*time.Second), "owner")
	s := c.PermitSemaphore("release-race")
	if _, err := s.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	const rounds = 200
	lostRounds := 0
	for range rounds {
		p, err := s.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held, err := p.Context(ctx)
		if err != nil {
			t.Fatal(err)
		}
		start := make(chan struct{})
		errs := make(chan error, 2)
		go func() { <-start; errs <- p.Release(ctx) }()
		go func() { <-start; errs <- s.Release(ctx, 1) }()
		close(start)
		e1, e2 := <-errs, <-errs
		if !(e1 == nil && errors.Is(e2, relock.ErrNotHeld) || e2 == nil && errors.Is(e1, relock.ErrNotHeld)) {
			t.Fatalf("the two releases returned %v and %v; want one nil, the other ErrNotHeld", e1, e2)
		}
		<-held.Done()
		if !errors.Is(context.Cause(held), context.Canceled) {
			lostRounds++
		}
	}
	if lostRounds > 0 {
		t.Errorf("in %d of %d rounds the permit ended lost, not released", lostRounds, rounds)
	}
	if got := obs.metric(t, "relock.losses", relock.AttrLockKind.String("semaphore")); got != 0 {
		t.Errorf("relock.losses = %d, want 0", got)
	}
	for _, r := range logRecords(t, logs) {
		if r["level"] == "ERROR" {
			t.Fatalf("a loss was logged: %v", r)
		}
	}
	if n, err := s.AvailablePermits(ctx); n != 1 || err != nil {
		t.Fatalf("AvailablePermits = %d, %v, want 1", n, err)
	}
}
