package relock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/faultnet"
	"github.com/relock-go/relock/internal/redistest"
)

func TestHoldCountThroughNestedLockUnlock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	l := c.Lock("nested")

	wantCount := func(want int) {
		t.Helper()
		n, err := l.HoldCount(ctx)
		if err != nil || n != want {
			t.Fatalf("HoldCount = %d, %v; want %d", n, err, want)
		}
	}
	wantCount(0)
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	wantCount(1)
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	wantCount(2)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wantCount(1)
	if held, err := l.IsHeld(ctx); err != nil || !held {
		t.Fatalf("IsHeld = %v, %v after one of two unlocks", held, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wantCount(0)
	if n, _ := do(t, rdb, "EXISTS", "nested").AsInt64(); n != 0 {
		t.Fatal("the key is still there after the last unlock")
	}
	if err := l.Unlock(ctx); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("Unlock of a released lock = %v, want ErrNotHeld", err)
	}
}

func TestUnlockByOtherGoroutineFails(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	l := c.Lock("goroutines")
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}

	var err error
	var held bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		err = l.Unlock(ctx)
		held, _ = l.IsHeld(ctx)
	}()
	<-done
	if !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("Unlock from another goroutine = %v, want ErrNotHeld", err)
	}
	if held {
		t.Fatal("another goroutine reports holding the lock")
	}
	if n, err := l.HoldCount(ctx); n != 1 || err != nil {
		t.Fatalf("hold count after the failed unlock = %d, %v; want 1", n, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("owner's Unlock: %v", err)
	}
}

func TestUnlockByOtherClientFails(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	ownerCtx := relock.WithOwner(ctx, "job-7")
	if err := a.Lock("clients").Lock(ownerCtx); err != nil {
		t.Fatal(err)
	}
	// Same goroutine and same explicit token, but another Client: another owner.
	if err := b.Lock("clients").Unlock(ctx); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("Unlock on another Client = %v, want ErrNotHeld", err)
	}
	if err := b.Lock("clients").Unlock(ownerCtx); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("Unlock on another Client with the same token = %v, want ErrNotHeld", err)
	}
	if n, err := a.Lock("clients").HoldCount(ownerCtx); n != 1 || err != nil {
		t.Fatalf("hold count = %d, %v; want 1", n, err)
	}
}

func TestExplicitOwnerHandsLockToOtherGoroutines(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	ctx := relock.WithOwner(ctxTimeout(t, 10*time.Second), "batch-42")
	l := c.Lock("handoff")
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(1)
	go func() { // a worker re-enters the owner's lock, then releases that hold
		defer wg.Done()
		if err := l.Lock(ctx); err != nil {
			errs <- err
			return
		}
		errs <- l.Unlock(ctx)
	}()
	wg.Wait()
	wg.Add(1)
	go func() { // another goroutine releases the owner's hold
		defer wg.Done()
		errs <- l.Unlock(ctx)
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if locked, err := l.IsLocked(ctx); locked || err != nil {
		t.Fatalf("IsLocked = %v, %v after the owner's goroutines released it", locked, err)
	}
}

func TestLeaseExpiryLetsOtherOwnerIn(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	const lease = 300 * time.Millisecond
	if err := a.Lock("lease").LockWithLease(ctx, lease); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := b.Lock("lease").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	// The waiter sleeps until the holder's TTL runs out: no release message is ever sent.
	if waited := time.Since(start); waited < lease-50*time.Millisecond || waited > lease+500*time.Millisecond {
		t.Fatalf("the other owner got the lock after %v; lease was %v", waited, lease)
	}
	if err := a.Lock("lease").Unlock(ctx); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("expired owner's Unlock = %v, want ErrNotHeld", err)
	}
	if n, err := b.Lock("lease").HoldCount(ctx); n != 1 || err != nil {
		t.Fatalf("new owner's hold count = %d, %v; want 1", n, err)
	}
}

func TestTryLockGivesUpAfterWait(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	if err := a.Lock("busy").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ok, err := b.Lock("busy").TryLock(ctx, 300*time.Millisecond, 0)
	waited := time.Since(start)
	if ok || err != nil {
		t.Fatalf("TryLock on a held lock = %v, %v", ok, err)
	}
	if waited < 290*time.Millisecond || waited > 800*time.Millisecond {
		t.Fatalf("TryLock(300ms) returned after %v", waited)
	}
	ok, err = b.Lock("busy").TryLock(ctx, 0, 0)
	if ok || err != nil {
		t.Fatalf("TryLock(0) on a held lock = %v, %v", ok, err)
	}
}

func TestWaiterWakesOnRelease(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	if err := a.Lock("wake").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	acquired := make(chan time.Time, 1)
	go func() {
		if err := b.Lock("wake").Lock(ctx); err != nil {
			t.Error(err)
		}
		acquired <- time.Now()
		_ = b.Lock("wake").Unlock(ctx)
	}()
	rdb := rawClient(t, srv)
	eventually(t, 5*time.Second, "the waiter subscribes", func() bool {
		return listening(t, rdb, "redisson_lock__channel:{wake}")
	})
	released := time.Now()
	if err := a.Lock("wake").Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// The lock has the default 30 s TTL: only the release message can wake the waiter this soon.
	if d := (<-acquired).Sub(released); d > 200*time.Millisecond {
		t.Fatalf("the waiter acquired %v after the release", d)
	}
}

func TestMutualExclusionCounter(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clients := []*relock.Client{newClient(t, srv, nil), newClient(t, srv, nil)}
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 120*time.Second)
	const goroutines, increments = 16, 200
	var wg sync.WaitGroup
	var inside atomic.Int32
	for _, c := range clients {
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l := c.Lock("counter-lock")
				for i := 0; i < increments; i++ {
					if err := l.Lock(ctx); err != nil {
						t.Error(err)
						return
					}
					if inside.Add(1) != 1 {
						t.Error("two owners inside the critical section")
					}
					// A read-modify-write that loses updates unless the lock excludes everyone else.
					n, err := rdb.Do(ctx, rdb.B().Get().Key("counter").Build()).AsInt64()
					if err != nil && !rueidis.IsRedisNil(err) {
						t.Error(err)
					}
					if err := rdb.Do(ctx, rdb.B().Set().Key("counter").Value(strconv.FormatInt(n+1, 10)).Build()).Error(); err != nil {
						t.Error(err)
					}
					inside.Add(-1)
					if err := l.Unlock(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	n, err := do(t, rdb, "GET", "counter").AsInt64()
	if want := int64(len(clients) * goroutines * increments); n != want || err != nil {
		t.Fatalf("counter = %d, %v; want %d", n, err, want)
	}
	if locked, _ := do(t, rdb, "EXISTS", "counter-lock").AsInt64(); locked != 0 {
		t.Fatal("the lock key is left behind")
	}
}

func TestCancelledWaiterLeavesNothingBehind(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	if err := a.Lock("cancel").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	// The first wait starts b's subscription connection, which lives as long as b: start it before the
	// goroutine snapshot.
	if ok, err := b.Lock("cancel").TryLock(ctx, 20*time.Millisecond, 0); ok || err != nil {
		t.Fatalf("warm-up TryLock = %v, %v", ok, err)
	}
	const channel = "redisson_lock__channel:{cancel}"
	eventually(t, 5*time.Second, "the warm-up subscription ends", func() bool { return !listening(t, rdb, channel) })
	// The waiter's goroutines must all end. Connections the Client's rueidis client opens meanwhile (it
	// adds pipelines under load) belong to the Client and end at its Close, which TestMain checks.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*pipe)._backgroundRead"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*pipe)._backgroundWrite"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*pipe)._background"))

	waitCtx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- b.Lock("cancel").Lock(waitCtx) }()
	// The waiter sleeps: Redis knows it, and its attempt's reply has had time to arrive. (A wait cancelled
	// during an attempt leaves its queue entry again 1 and 5 s later, in case the attempt ran after the
	// first leave: a goroutine that outlives the call by design.)
	awaitWaitingOwners(t, rdb, "cancel", 1)
	time.Sleep(200 * time.Millisecond)
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Lock = %v, want context.Canceled", err)
		}
	case <-time.After(time.Second):
		t.Fatal("a cancelled Lock did not return")
	}
	eventually(t, 5*time.Second, "PUBSUB NUMSUB returns to 0", func() bool { return !listening(t, rdb, channel) })
	eventually(t, 5*time.Second, "the waiter leaves the waiting owners", func() bool {
		n, _ := do(t, rdb, "EXISTS", "relock_lock_waiters:{cancel}").AsInt64()
		return n == 0
	})
	if n, err := a.Lock("cancel").HoldCount(ctx); n != 1 || err != nil {
		t.Fatalf("holder's count = %d, %v", n, err)
	}
}

func TestRedisRestartWhileHeld(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	if err := c.Lock("restart").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// The hold died with the server. The Unlock either meets the broken connection or a fresh server that
	// knows neither the hold nor the script (EVALSHA answers NOSCRIPT, EVAL follows): an error either way.
	if err := c.Lock("restart").Unlock(ctx); err == nil {
		t.Fatal("Unlock after a restart returned no error")
	}
	// rueidis pipelines over several connections and re-dials each broken one when it is next used, so
	// each connection the restart broke fails one call (relock never resends a script it cannot be sure
	// did not run). After that, every call works: require 20 Lock+Unlock pairs in a row.
	l := c.Lock("after-restart")
	var errs []error
	held := false
	for inARow := 0; inARow < 20; {
		if len(errs) > 10 {
			t.Fatalf("Lock+Unlock keep failing after a restart: %v", errs)
		}
		if !held {
			if err := l.Lock(ctx); err != nil {
				errs, inARow = append(errs, err), 0
				continue
			}
			held = true
		}
		if err := l.Unlock(ctx); err != nil { // on a broken connection: not sent, so still held
			errs, inARow = append(errs, err), 0
			continue
		}
		held = false
		inARow++
	}
	t.Logf("%d calls failed on connections the restart broke: %v", len(errs), errs)
	if locked, err := l.IsLocked(ctx); locked || err != nil {
		t.Fatalf("IsLocked = %v, %v", locked, err)
	}
}

func TestInvalidInputChangesNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	if err := c.Lock("held").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	var nilClient *relock.Client
	closed, err := relock.New([]string{srv.Addr()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()

	if err := do(t, rdb, "CONFIG", "RESETSTAT").Error(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		call func() error
		want error
	}{
		{"empty name Lock", func() error { return c.Lock("").Lock(ctx) }, relock.ErrInvalidName},
		{"empty name TryLock", func() error { _, err := c.Lock("").TryLock(ctx, 0, time.Second); return err }, relock.ErrInvalidName},
		{"empty name Unlock", func() error { return c.Lock("").Unlock(ctx) }, relock.ErrInvalidName},
		{"empty name ForceUnlock", func() error { _, err := c.Lock("").ForceUnlock(ctx); return err }, relock.ErrInvalidName},
		{"empty name IsLocked", func() error { _, err := c.Lock("").IsLocked(ctx); return err }, relock.ErrInvalidName},
		{"negative wait", func() error { _, err := c.Lock("x").TryLock(ctx, -time.Second, 0); return err }, relock.ErrInvalidDuration},
		{"negative lease", func() error { _, err := c.Lock("x").TryLock(ctx, 0, -time.Second); return err }, relock.ErrInvalidDuration},
		{"zero lease", func() error { return c.Lock("x").LockWithLease(ctx, 0) }, relock.ErrInvalidDuration},
		{"negative lease Lock", func() error { return c.Lock("x").LockWithLease(ctx, -1) }, relock.ErrInvalidDuration},
		{"nil client Lock", func() error { return nilClient.Lock("x").Lock(ctx) }, relock.ErrNilClient},
		{"nil client Unlock", func() error { return nilClient.Lock("x").Unlock(ctx) }, relock.ErrNilClient},
		{"nil client HoldCount", func() error { _, err := nilClient.Lock("x").HoldCount(ctx); return err }, relock.ErrNilClient},
		{"nil lock", func() error { return (*relock.RLock)(nil).Lock(ctx) }, relock.ErrNilClient},
		{"closed client Lock", func() error { return closed.Lock("x").Lock(ctx) }, relock.ErrClosed},
		{"closed client Unlock", func() error { return closed.Lock("held").Unlock(ctx) }, relock.ErrClosed},
		{"cancelled Lock", func() error { return c.Lock("x").Lock(cancelled) }, context.Canceled},
		{"cancelled TryLock", func() error { _, err := c.Lock("x").TryLock(cancelled, time.Second, 0); return err }, context.Canceled},
		{"cancelled ForceUnlock", func() error { _, err := c.Lock("held").ForceUnlock(cancelled); return err }, context.Canceled},
		{"empty owner", func() error { return c.Lock("x").Lock(relock.WithOwner(ctx, "")) }, relock.ErrInvalidOwner},
		{"numeric owner", func() error { return c.Lock("x").Lock(relock.WithOwner(ctx, "17")) }, relock.ErrInvalidOwner},
		{"empty owner Unlock", func() error { return c.Lock("held").Unlock(relock.WithOwner(ctx, "")) }, relock.ErrInvalidOwner},
		{"non-owner Unlock", func() error { return c.Lock("held").Unlock(relock.WithOwner(ctx, "someone")) }, relock.ErrNotHeld},
	}
	for _, tc := range cases {
		if err := tc.call(); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	for _, opts := range []*relock.Options{{WatchdogTimeout: -time.Second}, {FairLockWaitTimeout: -time.Millisecond}} {
		if _, err := relock.New([]string{srv.Addr()}, opts); !errors.Is(err, relock.ErrInvalidDuration) {
			t.Errorf("New with %+v: err = %v, want ErrInvalidDuration", opts, err)
		}
		if _, err := relock.Wrap(rdb, opts); !errors.Is(err, relock.ErrInvalidDuration) {
			t.Errorf("Wrap with %+v: err = %v, want ErrInvalidDuration", opts, err)
		}
	}
	if _, err := relock.New(nil, nil); !errors.Is(err, relock.ErrInvalidOptions) {
		t.Errorf("New without address: err = %v, want ErrInvalidOptions", err)
	}
	if _, err := relock.Wrap(nil, nil); !errors.Is(err, relock.ErrNilClient) {
		t.Errorf("Wrap(nil): err = %v, want ErrNilClient", err)
	}

	// Only the non-owner Unlock reached Redis, and it changed nothing.
	calls := commandCalls(t, rdb)
	for cmd, n := range calls {
		switch cmd {
		case "evalsha", "eval":
			if n != 1 {
				t.Errorf("%d %s calls, want 1 (the non-owner Unlock)", n, cmd)
			}
		case "hget", "type", "hexists": // run by the release script of the non-owner Unlock (commandstats counts script calls)
		case "info", "config|resetstat", "ping", "hello", "client|setinfo", "client|tracking",
			"client|caching", "multi", "exec", "unwatch", "watch": // the watch of holds reads its holds
		case "config", "client": // 6.2's names for those subcommands: it counts a subcommand under its command
			if serverVersion(t).AtLeast(7, 0) || cmd == "config" && n != 1 { // the one CONFIG RESETSTAT above
				t.Errorf("invalid input sent %d %s command(s) to Redis", n, cmd)
			}
		default:
			t.Errorf("invalid input sent %d %s command(s) to Redis", n, cmd)
		}
	}
	if keys, _ := do(t, rdb, "KEYS", "*").AsStrSlice(); len(keys) != 1 || keys[0] != "held" {
		t.Errorf("keys after invalid calls = %v, want [held]", keys)
	}
	if n, err := c.Lock("held").HoldCount(ctx); n != 1 || err != nil {
		t.Errorf("hold count = %d, %v; want 1", n, err)
	}
}

func TestRedissonLayout(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	l := c.Lock("shared")

	// relock writes what Redisson writes: hash at the name, field "<uuid>:<goroutine id>", value = count.
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	fields, err := do(t, rdb, "HGETALL", "shared").AsStrMap()
	if err != nil || len(fields) != 1 {
		t.Fatalf("HGETALL shared = %v, %v", fields, err)
	}
	for field, count := range fields {
		id, token, ok := cutLast(field, ":")
		if !ok || id != c.ID() || count != "1" {
			t.Fatalf("field %q = %q; want %q:<goroutine id> = 1", field, count, c.ID())
		}
		if _, err := strconv.ParseUint(token, 10, 64); err != nil {
			t.Fatalf("owner token %q is not a goroutine id", token)
		}
	}
	if ttl, _ := do(t, rdb, "PTTL", "shared").AsInt64(); ttl <= 0 || ttl > int64(relock.DefaultWatchdogTimeout/time.Millisecond) {
		t.Fatalf("PTTL = %d ms; want (0, 30000]", ttl)
	}

	// relock's last Unlock publishes "0" on redisson_lock__channel:{shared}.
	msgs := make(chan rueidis.PubSubMessage, 1)
	subCtx, stop := context.WithCancel(ctx)
	subscribed := make(chan struct{})
	go rdb.Receive(rueidis.WithOnSubscriptionHook(subCtx, func(rueidis.PubSubSubscription) { close(subscribed) }),
		rdb.B().Subscribe().Channel("redisson_lock__channel:{shared}").Build(),
		func(m rueidis.PubSubMessage) { msgs <- m })
	<-subscribed
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-msgs:
		if m.Message != "0" {
			t.Fatalf("unlock message = %q, want \"0\"", m.Message)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no message on redisson_lock__channel:{shared}")
	}
	stop()

	// A hold written by "Redisson" with plain commands excludes relock.
	do(t, rdb, "HSET", "shared", "6f1c2a7e-java-uuid:1", "1")
	do(t, rdb, "PEXPIRE", "shared", "30000")
	if ok, err := l.TryLock(ctx, 0, 0); ok || err != nil {
		t.Fatalf("TryLock over a Redisson hold = %v, %v", ok, err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("Unlock of a Redisson hold = %v, want ErrNotHeld", err)
	}
	if v, _ := do(t, rdb, "HGET", "shared", "6f1c2a7e-java-uuid:1").ToString(); v != "1" {
		t.Fatalf("the Redisson hold changed: %q", v)
	}
}

func cutLast(s, sep string) (before, after string, ok bool) {
	for i := len(s) - len(sep); i >= 0; i-- {
		if s[i:i+len(sep)] == sep {
			return s[:i], s[i+len(sep):], true
		}
	}
	return s, "", false
}

func TestReentryNeverShortensHold(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	l := c.Lock("reentry-ttl")
	ctx := ctxTimeout(t, 10*time.Second)
	if err := l.LockWithLease(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if ok, err := l.TryLock(ctx, 0, 100*time.Millisecond); !ok || err != nil {
		t.Fatalf("reentrant TryLock = %v, %v", ok, err)
	}
	if ttl, err := l.RemainingTTL(ctx); err != nil || ttl < 9*time.Second {
		t.Fatalf("RemainingTTL after a short reentrant lease = %v, %v; want about 10s", ttl, err)
	}
	if ok, err := l.TryLock(ctx, 0, 20*time.Second); !ok || err != nil {
		t.Fatalf("reentrant TryLock = %v, %v", ok, err)
	}
	if ttl, err := l.RemainingTTL(ctx); err != nil || ttl < 19*time.Second {
		t.Fatalf("RemainingTTL after a longer reentrant lease = %v, %v; want about 20s", ttl, err)
	}
}

func TestForceUnlockWakesWaiter(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	if err := a.Lock("stuck").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	got := startWaiter(t, b.Lock("stuck"), ctx, rawClient(t, srv), "redisson_lock__channel:{stuck}")
	if ok, err := b.Lock("stuck").ForceUnlock(ctx); !ok || err != nil {
		t.Fatalf("ForceUnlock = %v, %v", ok, err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the waiter was not woken by ForceUnlock")
	}
	if err := a.Lock("stuck").Unlock(ctx); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("the evicted owner's Unlock = %v, want ErrNotHeld", err)
	}
	if ok, err := a.Lock("nothing").ForceUnlock(ctx); ok || err != nil {
		t.Fatalf("ForceUnlock of a free lock = %v, %v", ok, err)
	}
}

func TestCloseEndsWaits(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a := newClient(t, srv, nil)
	b, err := relock.New([]string{srv.Addr()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 10*time.Second)
	if err := a.Lock("closing").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	rdb := rawClient(t, srv)
	got := startWaiter(t, b.Lock("closing"), ctx, rdb, "redisson_lock__channel:{closing}")
	b.Close()
	select {
	case err := <-got:
		if !errors.Is(err, relock.ErrClosed) {
			t.Fatalf("Lock interrupted by Close = %v, want ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not end a blocked Lock")
	}
	eventually(t, 5*time.Second, "the subscription ends with the Client", func() bool {
		return !listening(t, rdb, "redisson_lock__channel:{closing}")
	})
	if err := b.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}

func TestWrapLeavesRueidisClientOpen(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := rawClient(t, srv)
	c, err := relock.Wrap(rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 10*time.Second)
	if err := c.Lock("wrapped").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	// A wait opens relock's subscription connection on the borrowed client.
	other, _ := relock.Wrap(rdb, nil)
	if ok, err := other.Lock("wrapped").TryLock(ctx, 50*time.Millisecond, 0); ok || err != nil {
		t.Fatalf("TryLock = %v, %v", ok, err)
	}
	other.Close()
	c.Close()
	if err := rdb.Do(ctx, rdb.B().Ping().Build()).Error(); err != nil {
		t.Fatalf("the borrowed client no longer works after Close: %v", err)
	}
	eventually(t, 5*time.Second, "no subscription is left", func() bool {
		return !listening(t, rdb, "redisson_lock__channel:{wrapped}")
	})
}

func TestWaitersResubscribeAfterConnectionLoss(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	if err := a.Lock("reconnect").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	const channel = "redisson_lock__channel:{reconnect}"
	got := startWaiter(t, b.Lock("reconnect"), ctx, rdb, channel)
	if n, err := do(t, rdb, "CLIENT", "KILL", "TYPE", "pubsub").AsInt64(); n != 1 || err != nil {
		t.Fatalf("CLIENT KILL TYPE pubsub = %d, %v", n, err)
	}
	eventually(t, 5*time.Second, "the subscription is restored", func() bool { return listening(t, rdb, channel) })
	released := time.Now()
	if err := a.Lock("reconnect").Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(released); d > time.Second {
			t.Fatalf("the waiter acquired %v after the release", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter hangs after its subscription connection was killed")
	}
}

func TestRedisDownFailsWithinDeadline(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	if err := c.Lock("warm").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer srv.Resume()
	for _, op := range []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"Lock", func(ctx context.Context) error { return c.Lock("down").Lock(ctx) }},
		{"TryLock", func(ctx context.Context) error { _, err := c.Lock("down").TryLock(ctx, time.Second, 0); return err }},
		{"Unlock", func(ctx context.Context) error { return c.Lock("warm").Unlock(ctx) }},
	} {
		opCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		start := time.Now()
		err := op.call(opCtx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s with Redis paused = %v, want context.DeadlineExceeded", op.name, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s with Redis paused returned after %v; deadline was 300ms", op.name, d)
		}
	}
}

func TestLostAcquireReplyIsUndone(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	if err := c.Lock("lost-reply").Lock(ctx); err != nil { // load the scripts: EVALSHA will run at once on resume
		t.Fatal(err)
	}
	if err := c.Lock("lost-reply").Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// On a loaded machine the deadline can pass before the acquisition is even written; then there is
	// nothing to undo, and the round is repeated.
	for round := 1; ; round++ {
		do(t, rdb, "CONFIG", "RESETSTAT")
		if err := srv.Pause(); err != nil {
			t.Fatal(err)
		}
		// The acquisition is written to the socket, but its reply cannot arrive before the deadline.
		opCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := c.Lock("lost-reply").Lock(opCtx)
		cancel()
		if err := srv.Resume(); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock with Redis paused = %v", err)
		}
		// On resume Redis runs the acquisition nobody waits for; relock's undo must release it, long before
		// the 30 s watchdog TTL would. Every acquisition run calls EXISTS first (lua/rlock_acquire.lua), the
		// undo's decision is one script, which calls no EXISTS, and its release, when the acquisition ran
		// first, deletes the lock (DEL: the last level is deleted, not decremented, lib/release.lua), then
		// calls EXISTS once to see who waits (lib/waiters.lua). So the acquisitions run are EXISTS - DEL, and
		// every script has run when EVALSHA = acquisitions + 1 + DEL = EXISTS + 1. (The lock's absence is
		// read with HLEN, which no script here calls.)
		var acquired bool
		var last string
		eventually(t, 5*time.Second, "the orphaned hold is released", func() bool {
			calls := commandCalls(t, rdb)
			n, _ := do(t, rdb, "HLEN", "lost-reply").AsInt64()
			acquired = calls["del"] == 1
			last = fmt.Sprintf("hlen=%d calls=%v", n, calls)
			return n == 0 && calls["evalsha"] == calls["exists"]+1
		}, func() string { return last })
		if acquired {
			break
		}
		if round == 5 {
			t.Fatal("in 5 rounds the acquisition was never sent before its deadline")
		}
	}
	if err := c.Lock("lost-reply").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Lock("lost-reply").HoldCount(ctx); n != 1 || err != nil {
		t.Fatalf("hold count after the undo = %d, %v; want 1", n, err)
	}
}

func TestReleaseWhileUnsubscribedIsNotMissed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	if err := a.Lock("gap").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	got := startWaiter(t, b.Lock("gap"), ctx, rdb, "redisson_lock__channel:{gap}")

	// Cut the subscription connection and keep it from coming back (SUBSCRIBE is refused) while the lock
	// is released: the release message is published to nobody.
	do(t, rdb, "ACL", "SETUSER", "default", "-subscribe")
	defer do(t, rdb, "ACL", "SETUSER", "default", "+subscribe")
	if n, err := do(t, rdb, "CLIENT", "KILL", "TYPE", "pubsub").AsInt64(); n != 1 || err != nil {
		t.Fatalf("CLIENT KILL TYPE pubsub = %d, %v", n, err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := a.Lock("gap").Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := do(t, rdb, "ACL", "SETUSER", "default", "+subscribe").Error(); err != nil {
		t.Fatal(err)
	}
	// The lock's key had the 30 s watchdog TTL; the waiter must retry once it is subscribed again.
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter missed a release published while its subscription was down")
	}
}

func TestWaiterRidesOutRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	if err := a.Lock("restarted").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	got := startWaiter(t, b.Lock("restarted"), ctx, rawClient(t, srv), "redisson_lock__channel:{restarted}")
	// The server dies (the hold with it) and comes back a second later. The waiter, woken by the broken
	// subscription, meets refused connections meanwhile: it must keep waiting, then get the free lock.
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the waiter gave up during a 1 s outage: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the waiter hangs after the restart")
	}
}

// A call that finds its connection being dialled again by another call must still return by its own
// deadline. Here the server is cut off (connections reset, new ones accepted and never answered) and a
// call without a deadline re-dials, which takes rueidis's 5 s dial timeout; calls with a 200 ms deadline
// made meanwhile (rueidis spreads them over its connections, some of them the one being dialled) return
// within it.
func TestCallsDuringRedialKeepTheirDeadline(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := startProxy(t, srv)
	c := clientAt(t, proxy.Addr, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	for i := range 8 { // every connection is in use
		if err := c.Lock("warm" + strconv.Itoa(i)).Lock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	proxy.Stall(faultnet.Downstream, true)
	proxy.Cut()
	// Each of these meets a connection the cut broke (an error at once) or dials one into the stall.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = c.Lock("stuck").TryLock(relock.WithOwner(context.Background(), "slow"+strconv.Itoa(i)), 0, 0)
		}()
	}
	defer func() {
		proxy.Stall(faultnet.Downstream, false)
		proxy.Cut()
		wg.Wait()
	}()
	time.Sleep(100 * time.Millisecond)
	var calls sync.WaitGroup
	for i := range 16 {
		calls.Add(1)
		go func() {
			defer calls.Done()
			opCtx, cancel := context.WithTimeout(relock.WithOwner(ctx, "quick"+strconv.Itoa(i)), 200*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := c.Lock("quick").TryLock(opCtx, 0, 0)
			if d := time.Since(start); d > time.Second {
				t.Errorf("TryLock with a 200 ms deadline returned after %v (%v)", d, err)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("TryLock = %v, want context.DeadlineExceeded", err)
			}
		}()
	}
	calls.Wait()
}

// TestWaitersOfAnOwnerThatGetsTheLockGoOnAtOnce: two goroutines of one owner (WithOwner) wait for a lock
// another owner holds. One release wakes one waiter; when it acquires, the owner holds the lock, and its
// other waiter may enter too (a reentry: hold count 2). It must not sleep on until another release or the
// holder's expiry (the watchdog timeout here, 30 s).
func TestWaitersOfAnOwnerThatGetsTheLockGoOnAtOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	for kind, newLock := range lockers(c, "RLock", "FairLock", "WriteLock") {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			l, other, ctx := heldByOther(t, newLock, "owner-waiters-"+kind)
			mine := relock.WithOwner(ctx, "mine")
			got := make(chan error, 2)
			go func() { got <- l.Lock(mine) }()
			time.Sleep(100 * time.Millisecond)
			go func() { got <- l.Lock(mine) }()
			time.Sleep(300 * time.Millisecond) // both wait
			if err := l.Unlock(other); err != nil {
				t.Fatal(err)
			}
			receive(t, got, 3*time.Second, "no waiter got the released lock")
			receive(t, got, 3*time.Second, "a waiter slept on while its owner held the lock")
			if err := l.Unlock(mine); err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(mine); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A release wakes one waiter, among one Client's waiters and across Clients: not one per waiter, nor one
// per Client. Each relock waiter is known to Redis by its owner, and the release names one of them on its
// Client's own channel (lua/lib/waiters.lua). Every waiter still gets the lock in turn, each woken by
// name: a wake lost on the way would leave the chain asleep until the holder's TTL (30 s), past the
// test's deadline.
func TestOneWaiterWokenPerRelease(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		clients, each int
	}{{"one Client", 1, 10}, {"across Clients", 8, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			rdb := rawClient(t, srv)
			holder := newClient(t, srv, nil)
			ctx := ctxTimeout(t, 20*time.Second)
			// The release script is loaded, so that its run below is one EVALSHA (not one, then EVAL).
			if err := holder.Lock("warm").Lock(ctx); err != nil {
				t.Fatal(err)
			}
			if err := holder.Lock("warm").Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if err := holder.Lock("crowd").Lock(ctx); err != nil {
				t.Fatal(err)
			}
			var acquired atomic.Int32
			release := make(chan struct{})
			var wg sync.WaitGroup
			var waiters []*relock.Client
			for range tc.clients {
				c := newClient(t, srv, nil)
				waiters = append(waiters, c)
				for range tc.each {
					wg.Add(1)
					go func() {
						defer wg.Done()
						l := c.Lock("crowd")
						if err := l.Lock(ctx); err != nil {
							t.Error(err)
							return
						}
						acquired.Add(1)
						<-release
						if err := l.Unlock(ctx); err != nil {
							t.Error(err)
						}
					}()
				}
			}
			n := tc.clients * tc.each
			// Each Client's first waiter waits in Redis, the others in their Client's gate, behind it.
			awaitWaitingOwners(t, rdb, "crowd", int64(tc.clients))
			eventually(t, 5*time.Second, "every waiter waits", func() bool {
				queued := 0
				for _, c := range waiters {
					queued += relock.GateWaiters(c, "crowd")
				}
				return queued == n
			})
			do(t, rdb, "CONFIG", "RESETSTAT")
			if err := holder.Lock("crowd").Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			eventually(t, 5*time.Second, "a waiter acquires", func() bool { return acquired.Load() == 1 })
			time.Sleep(100 * time.Millisecond)
			calls := commandCalls(t, rdb)
			// The unlock, the named waiter's attempt, and the attempt of the next waiter of its Client's
			// gate, which takes its place in Redis: not one attempt per waiter or per Client.
			if scripts := calls["evalsha"] + calls["eval"]; scripts > 3 {
				t.Fatalf("%d script runs after one release with %d waiters on %d Clients; want 3 (%v)", scripts, n, tc.clients, calls)
			}
			start := time.Now()
			close(release)
			wg.Wait()
			if got := acquired.Load(); got != int32(n) {
				t.Fatalf("%d of %d waiters acquired", got, n)
			}
			t.Logf("%d handoffs in %v", n-1, time.Since(start))
			if left, _ := do(t, rdb, "KEYS", "*crowd*").AsStrSlice(); len(left) != 0 {
				t.Fatalf("keys left after every waiter acquired and released: %v", left)
			}
		})
	}
}

// Redisson's waiters and relock's share a lock's releases both ways: a relock release that wakes a relock
// waiter by name still publishes Redisson's unlock message (after relock's named message, which
// Redisson's clients ignore), and a Redisson release, which publishes only the unlock message, wakes
// relock's waiters.
func TestRedissonAndRelockWaitersWakeEachOther(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := rawClient(t, srv)
	holder, waiting := newClient(t, srv, nil), newClient(t, srv, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	wctx := relock.WithOwner(ctx, "waiter") // locks on one goroutine, unlocks on another
	const channel = "redisson_lock__channel:{mixed}"

	// A Redisson client's subscription to the lock's channel, as RedissonLock makes one to wait.
	sub, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	messages := make(chan string, 16)
	subCtx, stopSub := context.WithCancel(ctx)
	received := make(chan error, 1)
	go func() {
		received <- sub.Receive(subCtx, sub.B().Subscribe().Channel(channel).Build(), func(m rueidis.PubSubMessage) {
			messages <- m.Message
		})
	}()
	defer func() {
		stopSub()
		<-received
	}()
	eventually(t, 5*time.Second, "the Redisson subscriber listens", func() bool { return numsub(t, rdb, channel) == 1 })

	got := waitBehind(t, rdb, holder, waiting, "mixed", ctx, wctx, 1)
	if err := holder.Lock("mixed").Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	receive(t, got, 2*time.Second, "the relock waiter was not woken by a relock release")
	for _, want := range []string{"-1", "0"} { // the named message, then Redisson's unlock message
		select {
		case m := <-messages:
			if m != want {
				t.Fatalf("the Redisson subscriber heard %q, want %q (then the unlock message)", m, want)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("the Redisson subscriber did not hear %q", want)
		}
	}
	if err := waiting.Lock("mixed").Unlock(wctx); err != nil {
		t.Fatal(err)
	}
	if m := <-messages; m != "0" { // nobody waits: the unlock message alone
		t.Fatalf("the Redisson subscriber heard %q, want \"0\"", m)
	}

	// A Redisson client holds the lock (its hash, its owner field), and releases it as Redisson does:
	// delete, then publish the unlock message alone.
	redissonHolds(t, rdb, "mixed")
	again := make(chan error, 1)
	go func() { again <- waiting.Lock("mixed").Lock(wctx) }()
	awaitWaitingOwners(t, rdb, "mixed", 1)
	redissonReleases(t, rdb, "mixed")
	receive(t, again, 2*time.Second, "the relock waiter was not woken by a Redisson release")
	if err := waiting.Lock("mixed").Unlock(wctx); err != nil {
		t.Fatal(err)
	}
}

// A release that would name a waiter of a Client that is gone (its process died: nothing left Redis, and
// nobody listens on its channel) skips it, drops it, and names the next.
func TestReleaseSkipsTheWaitersOfAGoneClient(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := rawClient(t, srv)
	holder, live := newClient(t, srv, nil), newClient(t, srv, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	// The gone Client's waiter: known to Redis for the watchdog timeout, and older than the live one, so the
	// release comes to it first.
	do(t, rdb, "ZADD", "relock_lock_waiters:{gone}", strconv.FormatInt(time.Now().Add(20*time.Second).UnixMilli(), 10),
		"00000000-dead-0000-0000-000000000000:1")
	got := waitBehind(t, rdb, holder, live, "gone", ctx, ctx, 2)
	if err := holder.Lock("gone").Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	receive(t, got, 2*time.Second, "the live waiter was not woken: the release named the gone Client's")
	if n, _ := do(t, rdb, "EXISTS", "relock_lock_waiters:{gone}").AsInt64(); n != 0 {
		t.Fatal("the gone Client's waiter is still known to Redis")
	}
}

// A Client that hears a release name an owner it no longer has waiting (it gave up, and its leave has not
// reached Redis yet) wakes another of its waiters instead.
func TestNamedWakeForAnOwnerGoneGoesToAnotherLocalWaiter(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := rawClient(t, srv)
	holder, c := newClient(t, srv, nil), newClient(t, srv, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	got := waitBehind(t, rdb, holder, c, "routed", ctx, ctx, 1)
	// Another owner of c's, first in line: c has no waiter of that owner.
	do(t, rdb, "ZADD", "relock_lock_waiters:{routed}", strconv.FormatInt(time.Now().Add(5*time.Second).UnixMilli(), 10), c.ID()+":left")
	if err := holder.Lock("routed").Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	receive(t, got, 2*time.Second, "the wake for an owner that left was lost")
}

// On a single server, a relock waiter listens on Redisson's channel only while the lock's holder is not a
// relock Client: a relock Client's release wakes it by name on its wake channel, a Redisson client's
// publishes the unlock message alone. A waiter that finds a Redisson holder after being woken listens on
// Redisson's channel from then on, before it sleeps again.
func TestWaiterHearsRedissonsChannelOnlyBehindARedissonHolder(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := rawClient(t, srv)
	holder, c := newClient(t, srv, nil), newClient(t, srv, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	const channel = "redisson_lock__channel:{heard}"
	wake := "relock_lock_wake:{heard}:" + c.ID()
	wctx := relock.WithOwner(ctx, "w")
	got := waitBehind(t, rdb, holder, c, "heard", ctx, wctx, 1)
	if n := numsub(t, rdb, wake); n != 1 {
		t.Fatalf("%d subscribers of the wake channel %s, want 1", n, wake)
	}
	if n := numsub(t, rdb, channel); n != 0 {
		t.Fatalf("%d subscribers of Redisson's channel behind a relock holder, want 0", n)
	}

	// A Redisson client takes the lock as the relock holder lets go, before the named waiter tries.
	do(t, rdb, "DEL", "heard")
	redissonHolds(t, rdb, "heard")
	do(t, rdb, "ZREM", "relock_lock_waiters:{heard}", c.ID()+":w")
	do(t, rdb, "PUBLISH", wake, c.ID()+":w")
	eventually(t, 5*time.Second, "the waiter listens on Redisson's channel", func() bool { return numsub(t, rdb, channel) == 1 })
	awaitWaitingOwners(t, rdb, "heard", 1)
	select {
	case err := <-got:
		t.Fatalf("the waiter got in behind a Redisson holder: %v", err)
	default:
	}
	redissonReleases(t, rdb, "heard")
	receive(t, got, 2*time.Second, "the waiter was not woken by the Redisson holder's release")
	if err := c.Lock("heard").Unlock(wctx); err != nil {
		t.Fatal(err)
	}
}

// A waiter behind a long lease sleeps until the lease's end unless woken: its Client's watchdog keeps it
// among the waiting owners meanwhile (every watchdog timeout/3), so that the holder's release, long after
// the waiter's last attempt, still names it.
func TestWaiterBehindALongLeaseStaysKnown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := rawClient(t, srv)
	opts := &relock.Options{WatchdogTimeout: 300 * time.Millisecond}
	holder, c := newClient(t, srv, opts), newClient(t, srv, opts)
	ctx := ctxTimeout(t, 20*time.Second)
	if err := holder.Lock("long").LockWithLease(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- c.Lock("long").Lock(ctx) }()
	awaitWaitingOwners(t, rdb, "long", 1)
	time.Sleep(time.Second) // three watchdog timeouts
	if n, _ := do(t, rdb, "ZCARD", "relock_lock_waiters:{long}").AsInt64(); n != 1 {
		t.Fatalf("the waiter is no longer known to Redis (%d waiting owners) after three watchdog timeouts", n)
	}
	if err := holder.Lock("long").Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	receive(t, got, 2*time.Second, "the waiter was not woken by the release")
}

// redissonHolds makes a Redisson client (a version 4 UUID in its owner field) the holder of the free Lock
// name (a name without braces), for 30 s, as Redisson's RLock would.
func redissonHolds(t testing.TB, rdb rueidis.Client, name string) {
	t.Helper()
	do(t, rdb, "HSET", name, "6f6e6c79-6a61-4761-8000-000000000000:7", "1")
	do(t, rdb, "PEXPIRE", name, "30000")
}

// redissonReleases releases name as Redisson's RLock does: delete, then publish the unlock message alone.
func redissonReleases(t testing.TB, rdb rueidis.Client, name string) {
	t.Helper()
	do(t, rdb, "DEL", name)
	do(t, rdb, "PUBLISH", "redisson_lock__channel:{"+name+"}", "0")
}
