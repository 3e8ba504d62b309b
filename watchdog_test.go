package relock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// fastWatchdog is a watchdog timeout short enough for tests to watch several renewal periods.
var fastWatchdog = &relock.Options{WatchdogTimeout: time.Second}

func TestWatchdogRenewsPastTimeout(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, fastWatchdog)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	l := c.Lock("renewed")
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := l.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Three watchdog timeouts: without renewal the key would have expired three times over.
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		ttl, err := do(t, rdb, "PTTL", "renewed").AsInt64()
		if err != nil || ttl <= 0 || ttl > 1000 {
			t.Fatalf("PTTL = %d, %v; want (0, 1000] ms while held", ttl, err)
		}
	}
	if held.Err() != nil {
		t.Fatalf("the hold context ended while the lock was held: %v", context.Cause(held))
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(held), context.Canceled) || errors.Is(context.Cause(held), relock.ErrLockLost) {
		t.Fatalf("hold context cause after Unlock = %v, want context.Canceled", context.Cause(held))
	}
	if n, _ := do(t, rdb, "EXISTS", "renewed").AsInt64(); n != 0 {
		t.Fatal("the key is left after Unlock")
	}
	// Renewal runs the batch script (an EVALSHA); after the final Unlock, none may run. (A renewal sent
	// just before the Unlock may still land just after it: let it, then count.)
	time.Sleep(200 * time.Millisecond)
	do(t, rdb, "CONFIG", "RESETSTAT")
	time.Sleep(1500 * time.Millisecond)
	if calls := commandCalls(t, rdb); calls["evalsha"] != 0 {
		t.Fatalf("%d EVALSHA in the 1.5 s after Unlock; want none: no renewal", calls["evalsha"])
	}
}

// A holder whose process dies (Abandon: its Client stops without giving anything up) loses its hold
// within the watchdog timeout, and the hold context says so. (Close gives its holds up at once: see
// shutdown_test.go.)
func TestDeadHolderReleasesWithinWatchdogTimeout(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	holder, err := relock.New([]string{srv.Addr()}, fastWatchdog)
	if err != nil {
		t.Fatal(err)
	}
	other := newClient(t, srv, fastWatchdog)
	ctx := ctxTimeout(t, 20*time.Second)
	if err := holder.Lock("abandoned").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := holder.Lock("abandoned").HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // renewed at least once
	closedAt := time.Now()
	relock.Abandon(holder)
	if cause := context.Cause(held); !errors.Is(cause, relock.ErrLockLost) || !errors.Is(cause, relock.ErrClosed) {
		t.Fatalf("hold context cause after Abandon = %v, want ErrLockLost and ErrClosed", cause)
	}
	if err := other.Lock("abandoned").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(closedAt); d > 1500*time.Millisecond {
		t.Fatalf("the other Client got the lock %v after the holder died; watchdog timeout is 1s", d)
	}
}

func TestHoldDeletedBehindHolderIsLost(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, how := range []string{"DEL", "ForceUnlock"} {
		t.Run(how, func(t *testing.T) {
			c, other := newClient(t, srv, fastWatchdog), newClient(t, srv, fastWatchdog)
			rdb := rawClient(t, srv)
			ctx := ctxTimeout(t, 20*time.Second)
			name := "deleted-" + how
			if err := c.Lock(name).Lock(ctx); err != nil {
				t.Fatal(err)
			}
			held, err := c.Lock(name).HoldContext(ctx)
			if err != nil {
				t.Fatal(err)
			}
			deletedAt := time.Now()
			if how == "DEL" {
				do(t, rdb, "DEL", name)
			} else if ok, err := other.Lock(name).ForceUnlock(ctx); !ok || err != nil {
				t.Fatalf("ForceUnlock = %v, %v", ok, err)
			}
			select {
			case <-held.Done():
			case <-time.After(2 * time.Second):
				t.Fatal("the hold context was not cancelled after the hold was deleted")
			}
			// One renewal period is timeout/3; the watchdog may renew up to timeout/6 early.
			if d := time.Since(deletedAt); d > 400*time.Millisecond {
				t.Errorf("loss noticed %v after the deletion; renewal period is 333ms", d)
			}
			if cause := context.Cause(held); !errors.Is(cause, relock.ErrLockLost) {
				t.Fatalf("cause = %v, want ErrLockLost", cause)
			}
			if err := c.Lock(name).Unlock(ctx); !errors.Is(err, relock.ErrNotHeld) {
				t.Fatalf("Unlock of a lost hold = %v, want ErrNotHeld", err)
			}
		})
	}
}

func TestShortRedisPauseIsNotALoss(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, &relock.Options{WatchdogTimeout: 3 * time.Second})
	ctx := ctxTimeout(t, 30*time.Second)
	l := c.Lock("paused")
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := l.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The first renewal is due 1 s after the acquisition. Its batch gives up after 1 s (timeout/3), and
	// a retry follows 300 ms later (timeout/10), still within the pause: two renewals get no answer.
	// The next one succeeds, before the hold's 3 s expiry.
	time.Sleep(800 * time.Millisecond)
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1700 * time.Millisecond)
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // a retry succeeds, and the next period's renewal too
	if held.Err() != nil {
		t.Fatalf("a pause shorter than the expiry was reported as a loss: %v", context.Cause(held))
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock after the pause: %v", err)
	}
}

func TestRedisRestartIsALossAndLaterLocksAreRenewed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, fastWatchdog)
	ctx := ctxTimeout(t, 30*time.Second)
	if err := c.Lock("before-restart").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := c.Lock("before-restart").HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held.Done():
		if cause := context.Cause(held); !errors.Is(cause, relock.ErrLockLost) {
			t.Fatalf("cause = %v, want ErrLockLost", cause)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the restart that lost the hold was not reported")
	}

	// The restarted server knows no script: the acquisition and the renewal batch take the NOSCRIPT path.
	rdb := rawClient(t, srv)
	l := c.Lock("after-restart")
	eventually(t, 5*time.Second, "a lock is acquired after the restart", func() bool { return l.Lock(ctx) == nil })
	time.Sleep(2500 * time.Millisecond)
	if ttl, err := do(t, rdb, "PTTL", "after-restart").AsInt64(); err != nil || ttl <= 0 {
		t.Fatalf("PTTL 2.5 watchdog timeouts after acquisition = %d, %v: not renewed", ttl, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestLeaseHoldContextEndsWithLease(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	l := c.Lock("leased")
	if err := l.LockWithLease(ctx, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	held, err := l.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	<-held.Done()
	if d := time.Since(start); d > 400*time.Millisecond {
		t.Fatalf("the lease hold's context ended %v after a 300ms lease", d)
	}
	if cause := context.Cause(held); !errors.Is(cause, relock.ErrLockLost) {
		t.Fatalf("cause = %v, want ErrLockLost", cause)
	}
	if _, err := l.HoldContext(ctx); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("HoldContext after the lease = %v, want ErrNotHeld", err)
	}
}

func TestHoldContextSurvivesPartialUnlock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	l := c.Lock("partial")
	if _, err := l.HoldContext(ctx); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("HoldContext before Lock = %v, want ErrNotHeld", err)
	}
	for range 2 {
		if err := l.Lock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	held, err := l.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if held.Err() != nil {
		t.Fatal("releasing one of two holds ended the hold context")
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if cause := context.Cause(held); cause != context.Canceled {
		t.Fatalf("cause after the final Unlock = %v, want context.Canceled", cause)
	}
}

func TestFencingTokensIncrease(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	la, lb := a.Lock("fenced", relock.WithFencing()), b.Lock("fenced", relock.WithFencing())
	token := func(l *relock.RLock, ctx context.Context) uint64 {
		t.Helper()
		tok, err := l.FencingToken(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}

	var last uint64
	next := func(l *relock.RLock, ctx context.Context, lease time.Duration) {
		t.Helper()
		var err error
		if lease > 0 {
			err = l.LockWithLease(ctx, lease)
		} else {
			err = l.Lock(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		if tok := token(l, ctx); tok <= last {
			t.Fatalf("token %d after %d: not increasing", tok, last)
		} else {
			last = tok
		}
	}
	// Owners on two Clients, and two owners on one Client.
	next(la, ctx, 0)
	if err := la.Lock(ctx); err != nil { // reentry keeps the token
		t.Fatal(err)
	}
	if tok := token(la, ctx); tok != last {
		t.Fatalf("reentry changed the token from %d to %d", last, tok)
	}
	la.Unlock(ctx)
	la.Unlock(ctx)
	next(lb, ctx, 0)
	lb.Unlock(ctx)
	other := relock.WithOwner(ctx, "other-owner")
	next(la, other, 0)
	la.Unlock(other)

	// The lock key expires; the counter does not.
	next(lb, ctx, 50*time.Millisecond)
	eventually(t, 2*time.Second, "the lease expires", func() bool {
		n, _ := do(t, rdb, "EXISTS", "fenced").AsInt64()
		return n == 0
	})
	next(la, ctx, 0)
	if v, _ := do(t, rdb, "GET", "redisson_lock_token:{fenced}").AsUint64(); v != last {
		t.Fatalf("the counter in Redis is %d, the last token %d", v, last)
	}
	if _, err := a.Lock("plain").FencingToken(ctx); !errors.Is(err, relock.ErrNotFenced) {
		t.Fatalf("FencingToken of an unfenced lock = %v, want ErrNotFenced", err)
	}
	if _, err := lb.FencingToken(ctx); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("FencingToken of a non-holder = %v, want ErrNotHeld", err)
	}
}

func TestThousandHoldsRenewed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, fastWatchdog)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 60*time.Second)
	const n = 1000
	var wg sync.WaitGroup
	locks := make([]*relock.RLock, n)
	errs := make(chan error, n)
	owner := relock.WithOwner(ctx, "batch-owner")
	for i := range locks {
		locks[i] = c.Lock("many:" + strconv.Itoa(i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- locks[i].Lock(owner)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	do(t, rdb, "CONFIG", "RESETSTAT")
	time.Sleep(3 * time.Second) // 3 watchdog timeouts
	for i, l := range locks {
		if ttl, err := do(t, rdb, "PTTL", l.Name()).AsInt64(); err != nil || ttl <= 0 {
			t.Fatalf("lock %d: PTTL = %d, %v after 3 watchdog timeouts", i, ttl, err)
		}
	}
	// A renewal period costs one batch of 2 runs of the 500-hold script, sent together (or two batches when
	// the holds' renewals fall due further apart than timeout/6, as on a loaded machine): 3 s is 9 periods,
	// against 9,000 single renewals.
	calls := commandCalls(t, rdb)
	if runs := calls["evalsha"]; runs < 12 || runs > 40 {
		t.Errorf("in 3s: %d renewal script runs; want about 9 batches of 2", runs)
	}
	if calls["pexpire"] < 6*n {
		t.Errorf("%d PEXPIRE in 3s for %d holds; want every hold renewed every period", calls["pexpire"], n)
	}
	for _, l := range locks {
		if err := l.Unlock(owner); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDoReportsLoss(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, fastWatchdog)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)

	err := relock.Do(ctx, c.Lock("do"), func(ctx context.Context) error {
		do(t, rdb, "DEL", "do") // the hold vanishes while the work runs
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, relock.ErrLockLost) {
		t.Fatalf("Do after a loss = %v, want ErrLockLost", err)
	}

	ran := false
	if err := relock.Do(ctx, c.Lock("do"), func(ctx context.Context) error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("Do = %v, ran = %v", err, ran)
	}
	if n, _ := do(t, rdb, "EXISTS", "do").AsInt64(); n != 0 {
		t.Fatal("Do left the lock held")
	}
	boom := errors.New("boom")
	if err := relock.Do(ctx, c.Lock("do"), func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Do = %v, want fn's error", err)
	}
}

// fn returning its context's cause, as the README's pattern does, gets that cause from Do once, not twice.
func TestDoReportsALossOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, fastWatchdog)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	err := relock.Do(ctx, c.Lock("do-once"), func(ctx context.Context) error {
		do(t, rdb, "DEL", "do-once")
		<-ctx.Done()
		return context.Cause(ctx)
	})
	if !errors.Is(err, relock.ErrLockLost) {
		t.Fatalf("Do after a loss = %v, want ErrLockLost", err)
	}
	if n := strings.Count(err.Error(), "lock lost"); n != 1 {
		t.Fatalf("Do after a loss = %q: the cause %d times, want once", err, n)
	}
}

func TestLostUnlockReplyIsCompleted(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	l := c.Lock("lost-unlock")
	for range 2 {
		if err := l.Lock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	opCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := l.Unlock(opCtx)
	cancel()
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Unlock with Redis paused = %v", err)
	}
	// However many times the request reaches Redis (the original, its repeats, the background's), one
	// level is released.
	eventually(t, 5*time.Second, "the release is applied", func() bool {
		n, _ := l.HoldCount(ctx)
		return n == 1
	})
	time.Sleep(300 * time.Millisecond)
	if n, err := l.HoldCount(ctx); n != 1 || err != nil {
		t.Fatalf("hold count after an Unlock whose reply was lost = %d, %v; want 1", n, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := do(t, rdb, "EXISTS", "lost-unlock").AsInt64(); n != 0 {
		t.Fatal("the lock is left after the last Unlock")
	}
}

// Waiters that keep retrying while the watchdog refreshes their queue entries: each retry updates the
// entry the watchdog is renewing. Priority writers wait for a reader; spurious release messages make them
// retry all the time, and latency on their link keeps renewal batches out a good part of the time, so
// retries land while one is out. The entries must stay alive. (A renewal batch once read an entry's
// renewal unguarded while a retry rewrote it; the race detector saw it only when nothing else happened to
// order the two, here rarely: cmd/relock's TestDemoInProcess caught it twice in 15 runs.)
func TestQueueEntriesRefreshedWhileWaitersRetry(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := startProxy(t, srv)
	proxy.SetLatency(5 * time.Millisecond)

	holder := newClient(t, srv, &relock.Options{WatchdogTimeout: 300 * time.Millisecond})
	waiters := clientAt(t, proxy.Addr, &relock.Options{WatchdogTimeout: 300 * time.Millisecond})
	ctx := ctxTimeout(t, 20*time.Second)
	const name = "refreshed"
	if err := holder.ReadWriteLock(name).ReadLock().Lock(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 2500*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := waiters.ReadWriteLock(name, relock.WithWriterPriority()).WriteLock()
			if err := w.Lock(relock.WithOwner(wctx, "w"+strconv.Itoa(i))); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("writer %d: %v", i, err)
			}
		}()
	}
	eventually(t, 5*time.Second, "writers waiting", func() bool {
		st, err := holder.Inspect(ctx, name)
		return err == nil && st.QueueLen == 4
	})
	rdb := rawClient(t, srv)
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		do(t, rdb, "PUBLISH", "redisson_rwlock:{"+name+"}", "1") // wakes every waiter
	}
	st, err := holder.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if st.QueueLen != 4 {
		t.Fatalf("waiting writers %+v: want the 4, kept alive", st.Queue)
	}
	for i, w := range st.Queue {
		if w.Expires <= 0 {
			t.Fatalf("writer entry %d = %+v: expired", i, w)
		}
	}
	wg.Wait()
}

// The watchdog's renewals never shorten a key of a hold: a reader's level taken with a lease longer than
// the watchdog timeout, inside a hold the watchdog renews, keeps that lease in Redis.
func TestWatchdogNeverShortensAReadLevel(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, &relock.Options{WatchdogTimeout: 600 * time.Millisecond})
	rdb := rawClient(t, srv)
	ctx := relock.WithOwner(ctxTimeout(t, 20*time.Second), "reader")
	const name = "watchdog-read-level"
	r := c.ReadWriteLock(name).ReadLock()
	if err := r.Lock(ctx); err != nil { // renewed by the watchdog every 200 ms
		t.Fatal(err)
	}
	if err := r.LockWithLease(ctx, time.Minute); err != nil { // level 2: a lease of a minute
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond) // a few renewals
	level2 := "{" + name + "}:" + c.ID() + ":reader:rwlock_timeout:2"
	if ttl, _ := do(t, rdb, "PTTL", level2).AsInt64(); ttl < 55_000 {
		t.Fatalf("PTTL of the level taken with a lease of a minute = %d ms after renewals; want it kept", ttl)
	}
	if ttl, _ := do(t, rdb, "PTTL", "{"+name+"}:"+c.ID()+":reader:rwlock_timeout:1").AsInt64(); ttl <= 0 || ttl > 600 {
		t.Fatalf("PTTL of the watchdog's level = %d ms; want renewed, at most the timeout", ttl)
	}
	for range 2 {
		if err := r.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
