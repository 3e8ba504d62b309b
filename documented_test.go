package relock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/faultnet"
	"github.com/relock-go/relock/internal/redistest"
)

// The behaviours the docs promise or warn of that no test of their own pinned (docs/guarantees.md lists
// them with the rest): a change to them must change the docs too.

// DrainPermits on a negative count sets it to zero and returns the negative count, as Redisson's does.
func TestDrainPermitsForgivesANegativeCount(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	s := c.Semaphore("owed")
	if _, err := s.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.AddPermits(ctx, -3); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DrainPermits(ctx); n != -2 || err != nil {
		t.Fatalf("DrainPermits of a count at -2 = %d, %v, want -2", n, err)
	}
	if n, err := s.AvailablePermits(ctx); n != 0 || err != nil {
		t.Fatalf("after DrainPermits: %d permits (%v), want 0", n, err)
	}
}

// A latch that opens and is set again before its waiters have read the count is missed by them: they
// wait for its next opening (Redisson's waiters have the same window). The opening and the new count
// come in one script here, so that the window is certain.
func TestLatchSetAgainAtOnceIsMissed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	const name, channel = "round", "redisson_countdownlatch__channel__{round}"
	l := c.CountDownLatch(name)
	if ok, err := l.TrySetCount(ctx, 1); !ok || err != nil {
		t.Fatalf("TrySetCount = %v, %v", ok, err)
	}
	opened := make(chan bool, 1)
	go func() {
		ok, _ := l.TryAwait(ctx, 2*time.Second)
		opened <- ok
	}()
	eventually(t, 5*time.Second, "the waiter subscribes", func() bool { return numsub(t, rdb, channel) == 1 })
	// CountDown's opening (delete, announce "0"), then TrySetCount's (set, announce "1"), back to back.
	script := "redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], 0); " +
		"redis.call('set', KEYS[1], 1); redis.call('publish', KEYS[2], 1); return 1"
	if err := do(t, rdb, "EVAL", script, "2", name, channel).Error(); err != nil {
		t.Fatal(err)
	}
	if <-opened {
		t.Fatal("the waiter saw an opening that was undone before it read the count")
	}
	if n, err := l.Count(ctx); n != 1 || err != nil {
		t.Fatalf("Count = %d, %v, want 1", n, err)
	}
}

// A PermitSemaphore's expired permit is given back by the next acquisition, not by a release of another
// permit: AvailablePermits does not count it until then (InspectSemaphore does, as expired).
func TestExpiredPermitComesBackAtTheNextAcquisition(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	s := c.PermitSemaphore("pool")
	if _, err := s.TrySetPermits(ctx, 2); err != nil {
		t.Fatal(err)
	}
	p, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Another client's permit (a Redisson client's, say), taken and expired a second ago.
	past := strconv.FormatInt(time.Now().UnixMilli()-1000, 10)
	do(t, rdb, "DECR", "pool")
	do(t, rdb, "ZADD", "{pool}:timeout", past, "expired-permit")
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := s.AvailablePermits(ctx); n != 1 || err != nil {
		t.Fatalf("after the release: %d permits (%v), want 1: the release gives back its own permit only", n, err)
	}
	if st, err := c.InspectSemaphore(ctx, "pool"); err != nil || st.PermitsExpired != 1 {
		t.Fatalf("InspectSemaphore = %+v, %v, want the expired permit", st, err)
	}
	if _, err := s.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := c.InspectSemaphore(ctx, "pool"); err != nil || st.Value != 1 || st.PermitsTaken != 1 || st.PermitsExpired != 0 {
		t.Fatalf("after an acquisition: %+v, %v, want the expired permit given back, and 1 of 2 taken", st, err)
	}
}

// An uncontended Lock+Unlock is two script runs, one round trip each, and a hold released within 5 ms is
// not read by the watch of holds: the commands Redis runs are those of the two scripts (the same as for a
// Client without the watch), and nothing else.
func TestLockUnlockIsTwoScriptRuns(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	watched, plain := newClient(t, srv, nil), newClient(t, srv, &relock.Options{NoHoldWatch: true})
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	const name = "two-round-trips"
	// round takes and releases the lock on c, and returns the commands Redis ran meanwhile, but the
	// test's own and keep-alives, and how long the hold lasted.
	round := func(c *relock.Client) (map[string]int, time.Duration) {
		t.Helper()
		do(t, rdb, "CONFIG", "RESETSTAT")
		start := time.Now()
		if err := c.Lock(name).Lock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.Lock(name).Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		held := time.Since(start)
		calls := commandCalls(t, rdb)
		delete(calls, "config|resetstat")
		delete(calls, "info")
		delete(calls, "ping")
		for cmd := range calls { // a connection's handshake (any Client's, any time) is no operation's
			if cmd == "hello" || strings.HasPrefix(cmd, "client|") {
				delete(calls, cmd)
			}
		}
		return calls, held
	}
	for range 2 { // the scripts loaded, the connections made
		round(watched)
		round(plain)
	}
	scripts, _ := round(plain) // what the two scripts run in Redis
	if n := scripts["evalsha"] + scripts["eval"]; n != 2 {
		t.Fatalf("an uncontended Lock+Unlock ran %d scripts, want 2: %v", n, scripts)
	}
	quick := 0 // rounds whose hold lasted under 4 ms: the watch must not have read them
	for range 10 {
		calls, held := round(watched)
		if n := calls["evalsha"] + calls["eval"]; n != 2 {
			t.Fatalf("an uncontended Lock+Unlock ran %d scripts, want 2: %v", n, calls)
		}
		if held >= 4*time.Millisecond { // the watch may read a hold that lasted 5 ms
			continue
		}
		quick++
		if fmt.Sprint(calls) != fmt.Sprint(scripts) {
			t.Fatalf("an uncontended Lock+Unlock of %v ran %v; its scripts alone run %v", held, calls, scripts)
		}
	}
	t.Logf("%d of 10 holds lasted under 4 ms, and sent nothing but their two scripts", quick)
}

// HoldContext, FencingToken and HoldRisk answer from the Client's memory: they send nothing to Redis.
func TestHoldQueriesSendNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	l := c.Lock("queries", relock.WithFencing())
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the watch of holds has read the hold (once, at 5 ms)
	do(t, rdb, "CONFIG", "RESETSTAT")
	for range 100 {
		hctx, err := l.HoldContext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tok, err := l.FencingToken(ctx); tok == 0 || err != nil {
			t.Fatalf("FencingToken = %d, %v", tok, err)
		}
		if atRisk, _, err := relock.HoldRisk(hctx); atRisk || err != nil {
			t.Fatalf("HoldRisk = %v, %v", atRisk, err)
		}
	}
	// The test's CONFIG RESETSTAT is "config|resetstat"; Redis 6.2 counts it as "config", under which it
	// counts every CONFIG subcommand: there, that one call only.
	redis62 := !serverVersion(t).AtLeast(7, 0)
	var sent []string
	for cmd, n := range commandCalls(t, rdb) {
		switch {
		case cmd == "config|resetstat" || cmd == "info" || cmd == "ping":
		case cmd == "config" && n == 1 && redis62:
		default:
			sent = append(sent, fmt.Sprintf("%s ×%d", cmd, n))
		}
	}
	if len(sent) > 0 {
		t.Fatalf("100 HoldContext, FencingToken and HoldRisk calls sent %v", sent)
	}
}

// A MultiLock's or RedLock's HoldContext has no risk of its own to report: HoldRisk returns ErrNotHeld
// for it (its parts' holds have theirs).
func TestHoldRiskOfACompositeIsNotHeld(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clients := []*relock.Client{newClient(t, srv, nil), newClient(t, srv, nil), newClient(t, srv, nil)}
	ctx := ctxTimeout(t, 20*time.Second)
	m := relock.NewMultiLock(clients[0].Lock("risk-multi-a"), clients[0].Lock("risk-multi-b"))
	r := relock.NewRedLock([]relock.Lockable{clients[0].Lock("risk-red"), clients[1].Lock("risk-red2"),
		clients[2].Lock("risk-red3")}, nil)
	for _, l := range []relock.Locker{m, r} {
		if err := l.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		hctx, err := l.HoldContext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := relock.HoldRisk(hctx); !errors.Is(err, relock.ErrNotHeld) {
			t.Fatalf("HoldRisk of a %T's HoldContext = %v, want ErrNotHeld", l, err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A ForceUnlock (what `relock unlock --force` runs) ends the holder's HoldContext without waiting for
// the watchdog where its Client watches its holds (the default), and at the watchdog's next check, within
// a third of the watchdog timeout, where it does not.
func TestForceUnlockIsToldWithOrWithoutTheWatch(t *testing.T) {
	t.Parallel()
	const timeout = 6 * time.Second // a check every 2 s, the first 1 s after the acquisition at the earliest
	srv := redistest.Start(t)
	other := newClient(t, srv, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	for _, watched := range []bool{true, false} {
		c := newClient(t, srv, &relock.Options{WatchdogTimeout: timeout, NoHoldWatch: !watched})
		name := fmt.Sprint("forced-watched-", watched)
		l := c.Lock(name)
		if err := l.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		hctx, err := l.HoldContext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // the watch reads a hold once it has lasted 5 ms
		start := time.Now()
		if ok, err := other.Lock(name).ForceUnlock(ctx); !ok || err != nil {
			t.Fatalf("ForceUnlock = %v, %v", ok, err)
		}
		bound := timeout/3 + 500*time.Millisecond
		if watched {
			bound = 500 * time.Millisecond // long before the watchdog's first check
		} else {
			time.Sleep(300 * time.Millisecond)
			if hctx.Err() != nil {
				t.Fatal("without the watch, the forced unlock was told before the watchdog's check")
			}
		}
		select {
		case <-hctx.Done():
			t.Logf("watched %v: told %v after the forced unlock", watched, time.Since(start))
		case <-time.After(bound - time.Since(start)):
			t.Fatalf("watched %v: the hold context still runs %v after the forced unlock", watched, bound)
		}
		if !errors.Is(context.Cause(hctx), relock.ErrLockLost) {
			t.Fatalf("watched %v: cause %v, want ErrLockLost", watched, context.Cause(hctx))
		}
	}
}

// A FairLock's TryLock without a wait makes one attempt and never joins the queue: with the lock held, it
// leaves no queue behind, and with a waiter queued it neither joins nor jumps it.
func TestFairLockTryLockWithoutWaitNeverQueues(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	const name, queue = "fair-try", "redisson_lock_queue:{fair-try}"
	if err := a.FairLock(name).Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.FairLock(name).TryLock(ctx, 0, 0); ok || err != nil { // its script loaded
		t.Fatalf("TryLock(0) of a held fair lock = %v, %v", ok, err)
	}
	do(t, rdb, "CONFIG", "RESETSTAT")
	if ok, err := b.FairLock(name).TryLock(ctx, 0, 0); ok || err != nil {
		t.Fatalf("TryLock(0) of a held fair lock = %v, %v", ok, err)
	}
	if calls := commandCalls(t, rdb); calls["evalsha"]+calls["eval"] != 1 || calls["rpush"]+calls["lpush"]+calls["zadd"] != 0 {
		t.Fatalf("TryLock(0) of a held fair lock ran %v: want one script, which queues nobody", calls)
	}
	if n, _ := do(t, rdb, "EXISTS", queue, "redisson_lock_timeout:{fair-try}", "relock_lock_alive:{fair-try}").AsInt64(); n != 0 {
		t.Fatalf("TryLock(0) left %d queue keys", n)
	}
	waiter := a.FairLock(name)
	got := make(chan error, 1)
	go func() { got <- waiter.Lock(relock.WithOwner(ctx, "queued")) }()
	eventually(t, 5*time.Second, "the waiter queues", func() bool { n, _ := do(t, rdb, "LLEN", queue).AsInt64(); return n == 1 })
	if ok, err := b.FairLock(name).TryLock(ctx, 0, 0); ok || err != nil {
		t.Fatalf("TryLock(0) with a waiter queued = %v, %v", ok, err)
	}
	if q, _ := do(t, rdb, "LRANGE", queue, "0", "-1").AsStrSlice(); len(q) != 1 || !strings.HasSuffix(q[0], ":queued") {
		t.Fatalf("queue after TryLock(0) = %v, want the waiter alone", q)
	}
	if err := a.FairLock(name).Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if err := waiter.Unlock(relock.WithOwner(ctx, "queued")); err != nil {
		t.Fatal(err)
	}
}

// An Extend that Redis does not answer leaves the Client counting on the hold's earlier expiry: the hold
// context ends at the end of the lease it had, whether or not the Extend ran.
func TestExtendWithoutAnAnswerKeepsTheEarlierExpiry(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := startProxy(t, srv)
	c := clientAt(t, proxy.Addr, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	const lease = time.Second
	l := c.Lock("extend-unanswered")
	start := time.Now()
	if err := l.LockWithLease(ctx, lease); err != nil {
		t.Fatal(err)
	}
	hctx, err := l.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Stall(faultnet.Downstream, true) // the Extend reaches Redis; its reply does not come back
	defer proxy.Stall(faultnet.Downstream, false)
	ectx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err = l.Extend(ectx, 10*time.Second)
	cancel()
	if err == nil {
		t.Fatal("an Extend whose reply never came returned nil")
	}
	select {
	case <-hctx.Done():
		if d := time.Since(start); d < lease {
			t.Fatalf("the hold context ended %v after Lock began, before its lease of %v", d, lease)
		}
		if !errors.Is(context.Cause(hctx), relock.ErrLockLost) {
			t.Fatalf("cause %v, want ErrLockLost", context.Cause(hctx))
		}
	case <-time.After(lease + 500*time.Millisecond - time.Since(start)):
		t.Fatalf("the hold context still runs %v after Lock began: the Client counts on the unanswered Extend", lease+500*time.Millisecond)
	}
}

// The fencing counter and an election's stream of leaders have no expiry (tokens and terms must keep
// increasing), and a read lock is never fenced, even made from a fenced ReadWriteLock.
func TestFencingCounterNeverExpiresAndReadLocksAreNotFenced(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	noExpiry := func(key string) {
		t.Helper()
		if ttl, err := do(t, rdb, "PTTL", key).AsInt64(); ttl != -1 || err != nil {
			t.Fatalf("PTTL %s = %d, %v; want -1: a key without expiry", key, ttl, err)
		}
	}
	l := c.Lock("fenced-forever", relock.WithFencing())
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	noExpiry("redisson_lock_token:{fenced-forever}")
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	noExpiry("redisson_lock_token:{fenced-forever}")

	e := c.Election("elected-forever")
	if _, err := e.Campaign(ctx, "v"); err != nil {
		t.Fatal(err)
	}
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	noExpiry("redisson_lock_token:{elected-forever}")
	noExpiry("relock_election:{elected-forever}")

	rw := c.ReadWriteLock("rw-fenced", relock.WithFencing())
	if err := rw.ReadLock().Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := rw.ReadLock().FencingToken(ctx); !errors.Is(err, relock.ErrNotFenced) {
		t.Fatalf("a read lock's FencingToken = %v, want ErrNotFenced", err)
	}
	if err := rw.ReadLock().Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rw.WriteLock().Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if tok, err := rw.WriteLock().FencingToken(ctx); tok == 0 || err != nil {
		t.Fatalf("the write lock's FencingToken = %d, %v, want a token", tok, err)
	}
	if err := rw.WriteLock().Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A Client's ID is a UUID of version 8 (Redisson's are of version 4): a waiter tells from a holder's
// owner field whether the release will name it (docs/redisson.md, "One waiter woken per release").
func TestClientIDIsAVersion8UUID(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for range 3 {
		id, err := uuid.Parse(newClient(t, srv, nil).ID())
		if err != nil || id.Version() != 8 {
			t.Fatalf("Client ID %v (%v): want a UUID of version 8", id, err)
		}
	}
}
