package relock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	// start is when Lock returned: Redis granted the hold, and began its budget, before that (a bound
	// from when Lock was called would be short by the time the request took to reach Redis).
	check := func(t *testing.T, name string, start time.Time) {
		t.Helper()
		// The bound is taken before PTTL is sent: Redis reads the TTL later, when less of the budget
		// is left, so it must be within it (taken after the reply, a slow reply made the bound short).
		left := budget - time.Since(start)
		ttl, err := do(t, rdb, "PTTL", name).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		if ttl > left.Milliseconds()+5 {
			t.Fatalf("PTTL %d ms with %v of the budget left", ttl, left)
		}
	}
	t.Run("watchdog", func(t *testing.T) {
		l := c.Lock("budget-renewed", relock.WithMaxHold(budget))
		if err := l.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		hctx, _ := l.HoldContext(ctx)
		for hctx.Err() == nil { // renewed every 200 ms: each renewal is capped
			check(t, "budget-renewed", start)
			time.Sleep(20 * time.Millisecond)
		}
	})
	t.Run("lease", func(t *testing.T) {
		l := c.Lock("budget-lease", relock.WithMaxHold(budget))
		if err := l.LockWithLease(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
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

// Redis drops a hold with a budget no later than the budget after it granted the hold, on its own clock,
// whatever the delays of the later commands that extend it: here a renewal, an Extend or a reentry that
// spends 250 ms on its way, after which the Client is cut off and can give nothing up. The hold's key (a
// reader's: its level's) must be gone from Redis within the budget of the first acquisition's return
// (which came after the grant), as a separate client sees it.
func TestMaxHoldEndsInRedisBudgetAfterTheGrant(t *testing.T) {
	t.Parallel()
	const budget, latency = time.Second, 250 * time.Millisecond
	srv := redistest.Start(t)
	rdb := rawClient(t, srv) // around the proxies
	for _, how := range []string{"watchdog", "extend", "reentry", "fair-reentry", "write-extend", "read-watchdog", "read-reentry"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			proxy := startProxy(t, srv)
			// A watchdog timeout of 900 ms: a first TTL of 900 ms, and a renewal sent 300 ms in.
			c := clientAt(t, proxy.Addr, &relock.Options{WatchdogTimeout: 900 * time.Millisecond})
			ctx := relock.WithOwner(ctxTimeout(t, 20*time.Second), "owner")
			for round := 1; ; round++ {
				name := fmt.Sprintf("budget-late-%s-%d", how, round)
				key := name
				var l *relock.RLock
				switch how {
				case "fair-reentry":
					l = c.FairLock(name, relock.WithMaxHold(budget))
				case "write-extend":
					l = c.ReadWriteLock(name, relock.WithMaxHold(budget)).WriteLock()
				case "read-watchdog":
					l = c.ReadWriteLock(name, relock.WithMaxHold(budget)).ReadLock()
					key = "{" + name + "}:" + c.ID() + ":owner:rwlock_timeout:1"
				case "read-reentry":
					l = c.ReadWriteLock(name, relock.WithMaxHold(budget)).ReadLock()
					key = "{" + name + "}:" + c.ID() + ":owner:rwlock_timeout:2" // the level the reentry adds
				default:
					l = c.Lock(name, relock.WithMaxHold(budget))
				}
				// The scripts are loaded in Redis first: a NOSCRIPT would cost a round trip more.
				warm := c.Lock(name + "-warm")
				if strings.HasPrefix(how, "read") {
					warm = c.ReadWriteLock(name + "-warm").ReadLock()
				}
				if err := warm.LockWithLease(ctx, time.Second); err != nil {
					t.Fatal(err)
				}
				if err := warm.Extend(ctx, time.Second); err != nil {
					t.Fatal(err)
				}
				var err error
				first := 900 * time.Millisecond // the first acquisition's TTL: the watchdog timeout, or a lease
				begun := time.Now()
				if strings.HasSuffix(how, "watchdog") {
					err = l.Lock(ctx)
				} else {
					// It outlives a round trip of the later command through the proxy, even under the race
					// detector on a loaded machine (700 ms did not, now and then: the later command found the
					// hold gone), and ends 200 ms before the budget, for the polls to see the extension.
					first = 800 * time.Millisecond
					err = l.LockWithLease(ctx, first)
				}
				if err != nil {
					t.Fatal(err)
				}
				granted := time.Now() // Redis granted the hold before its reply came
				// Poll the key directly: lastSeen is when the last poll that found it was sent (Redis ran it later).
				polled := make(chan time.Time)
				go func() {
					var lastSeen time.Time
					for sent := time.Now(); sent.Before(granted.Add(budget + 2*latency)); sent = time.Now() {
						if n, err := rdb.Do(ctx, rdb.B().Exists().Key(key).Build()).AsInt64(); err == nil && n == 1 {
							lastSeen = sent
						}
						time.Sleep(2 * time.Millisecond)
					}
					polled <- lastSeen
				}()
				proxy.SetLatency(latency)
				switch {
				case strings.HasSuffix(how, "watchdog"):
					// The renewal sent about 300 ms in has run once the key lives longer than the first TTL
					// left (on a loaded machine the watchdog may send it late: wait for it, rather than a
					// fixed time).
					for renewed := false; !renewed; time.Sleep(5 * time.Millisecond) {
						if time.Since(granted) > budget {
							t.Fatal("no renewal reached Redis within the budget")
						}
						pttl, _ := rdb.Do(ctx, rdb.B().Pttl().Key(key).Build()).AsInt64()
						renewed = time.Duration(pttl)*time.Millisecond > first-time.Since(granted)+20*time.Millisecond
					}
				case strings.HasSuffix(how, "extend"):
					// Sent now, with what is left of the budget on the Client's clock, it reaches Redis 250 ms later.
					err = l.Extend(ctx, 10*time.Second)
					if errors.Is(err, relock.ErrNotHeld) && round < 5 {
						// On a loaded machine it reached Redis after the first lease had run out (CI saw its round
						// trip take 1 s): nothing was left to extend, and the round tells nothing. Again.
						t.Logf("round %d: the Extend arrived after the first lease: %v", round, err)
						<-polled
						proxy.SetLatency(0)
						continue
					}
				default:
					var ok bool
					if ok, err = l.TryLock(ctx, 0, 10*time.Second); err == nil && !ok { // likewise
						t.Fatal("the reentry failed")
					}
				}
				if err != nil {
					t.Fatal(err)
				}
				proxy.Partition(true) // cut off: the Client can give nothing up in Redis now
				defer proxy.Partition(false)
				lastSeen := <-polled
				t.Logf("last seen by a poll sent %v after Lock began; Lock returned %v after it began",
					lastSeen.Sub(begun), granted.Sub(begun))
				if lastSeen.Sub(granted) > budget+2*time.Millisecond { // Redis counts whole milliseconds
					t.Fatalf("the key was in Redis %v after Lock returned (%v after Lock began); want gone within the budget, %v, of the grant",
						lastSeen.Sub(granted), lastSeen.Sub(begun), budget)
				}
				// That the later command extended the key: the watchdog's case saw it in the key's PTTL above (the
				// budget caps that extension at a few tens of ms, which a poller delayed on a loaded machine can
				// miss); the others are seen by the polls.
				if !strings.HasSuffix(how, "watchdog") && lastSeen.Sub(granted) <= first+2*time.Millisecond {
					t.Fatalf("the key was last seen %v after Lock returned: the later command did not extend it", lastSeen.Sub(granted))
				}
				return
			}
		})
	}
}

// With a slow link at the first acquisition, the Client ends a hold with a budget d after sending that
// acquisition, on its clock, and Redis drops it d after granting it, on its own: the Client's end comes
// first, even when the Client is cut off right after Lock.
func TestMaxHoldClientEndsNoLaterThanRedis(t *testing.T) {
	t.Parallel()
	const budget, latency = time.Second, 250 * time.Millisecond
	srv := redistest.Start(t)
	proxy := startProxy(t, srv)
	c := clientAt(t, proxy.Addr, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	const name = "budget-slow-grant"
	if err := c.Lock(name+"-warm").LockWithLease(ctx, time.Second); err != nil { // no NOSCRIPT round trip below
		t.Fatal(err)
	}
	proxy.SetLatency(latency)
	var l *relock.RLock
	var begun, granted time.Time
	var hctx context.Context
	for try := 0; ; try++ {
		// The Lock takes two latencies (500 ms); on a machine so loaded that it takes most of the budget,
		// the hold's budget may be spent before the test looks at it: try again (a few times), with
		// another lock.
		l = c.Lock(fmt.Sprint(name, try), relock.WithMaxHold(budget))
		begun = time.Now()
		if err := l.LockWithLease(ctx, 10*time.Second); err != nil { // a first TTL of the budget, from the grant
			t.Fatal(err)
		}
		granted = time.Now()
		var err error
		if hctx, err = l.HoldContext(ctx); err == nil && granted.Sub(begun) < budget*8/10 {
			break
		}
		if try == 4 {
			t.Fatalf("5 Locks took %v and more (the last: %v): the machine is too loaded for this test", budget*8/10, err)
		}
		t.Logf("the Lock took %v (%v): again", granted.Sub(begun), err)
		_ = l.Unlock(context.WithoutCancel(ctx))
	}
	proxy.Partition(true) // cut off: the Client can give nothing up in Redis now
	defer proxy.Partition(false)
	ended := make(chan time.Time, 1)
	go func() { <-hctx.Done(); ended <- time.Now() }()
	var lastSeen time.Time // when the last poll that found the key was sent
	for sent := time.Now(); sent.Before(granted.Add(budget + 2*latency)); sent = time.Now() {
		if n, err := do(t, rdb, "EXISTS", l.Name()).AsInt64(); err == nil && n == 1 {
			lastSeen = sent
		}
		time.Sleep(2 * time.Millisecond)
	}
	clientEnd := <-ended
	t.Logf("Lock returned %v, the Client ended the hold %v, Redis had it last %v after Lock began",
		granted.Sub(begun), clientEnd.Sub(begun), lastSeen.Sub(begun))
	if !errors.Is(context.Cause(hctx), relock.ErrMaxHoldReached) {
		t.Fatalf("cause = %v; want ErrMaxHoldReached", context.Cause(hctx))
	}
	if d := clientEnd.Sub(begun); d < budget {
		t.Fatalf("the Client ended the hold %v after sending the first acquisition, before its budget", d)
	}
	if !clientEnd.Before(lastSeen) {
		t.Fatalf("Redis dropped the hold before its Client ended it (last seen %v after Lock began, ended %v)",
			lastSeen.Sub(begun), clientEnd.Sub(begun))
	}
	if lastSeen.Sub(granted) > budget+2*time.Millisecond { // Redis counts whole milliseconds
		t.Fatalf("the key was in Redis %v after Lock returned; want gone within the budget of the grant", lastSeen.Sub(granted))
	}
}

// A reentry sent within the budget on the Client's clock that reaches Redis after the budget's end on
// Redis's clock grants nothing: it fails with ErrMaxHoldReached, and the hold's key stays gone.
func TestMaxHoldReentryArrivingAfterTheBudget(t *testing.T) {
	t.Parallel()
	const budget, latency = time.Second, 250 * time.Millisecond
	srv := redistest.Start(t)
	rdb := rawClient(t, srv)
	for _, kind := range []string{"lock", "fair", "write", "read"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			proxy := startProxy(t, srv)
			c := clientAt(t, proxy.Addr, nil)
			ctx := ctxTimeout(t, 20*time.Second)
			name := "budget-late-reentry-" + kind
			var l *relock.RLock
			switch kind {
			case "lock":
				l = c.Lock(name, relock.WithMaxHold(budget))
			case "fair":
				l = c.FairLock(name, relock.WithMaxHold(budget))
			case "write":
				l = c.ReadWriteLock(name, relock.WithMaxHold(budget)).WriteLock()
			case "read":
				l = c.ReadWriteLock(name, relock.WithMaxHold(budget)).ReadLock()
			}
			begun := time.Now()
			if err := l.LockWithLease(ctx, 10*time.Second); err != nil { // a first TTL of the budget
				t.Fatal(err)
			}
			proxy.SetLatency(latency)
			time.Sleep(budget - 150*time.Millisecond - time.Since(begun))
			// Sent with 150 ms of the budget left, it reaches Redis 250 ms later, after the budget's end. It
			// may wait: it must fail, not try again.
			sent := time.Now()
			ok, err := l.TryLock(ctx, 5*time.Second, 10*time.Second)
			if ok || !errors.Is(err, relock.ErrMaxHoldReached) {
				t.Fatalf("a reentry reaching Redis after the budget = %v, %v (%v after Lock began); want ErrMaxHoldReached",
					ok, err, time.Since(begun))
			}
			if took := time.Since(sent); took > 2*time.Second { // a round trip or two (a subscription): not a retry
				t.Fatalf("the refused reentry returned %v after it was sent; want a round trip or two, of %v", took, 2*latency)
			}
			if keys, _ := rdb.Do(ctx, rdb.B().Keys().Pattern("*"+name+"*").Build()).AsStrSlice(); len(keys) != 0 {
				t.Fatalf("the late reentry left %v", keys)
			}
		})
	}
}
