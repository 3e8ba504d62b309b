package relock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/internal/testutil"
)

// unlockCase is one lock type for the tests of Unlock with an ended context: how to take and release it,
// and whether its key is gone.
type unlockCase struct {
	name   string
	lock   func(ctx context.Context) error
	unlock func(ctx context.Context) error
	hold   func(ctx context.Context) (context.Context, error)
	held   func(t testing.TB) bool // whether anything of the lock is left in Redis
}

func unlockCases(t *testing.T, timeout time.Duration) []unlockCase {
	srv := redistest.Start(t)
	opts := &relock.Options{WatchdogTimeout: timeout}
	c := newClient(t, srv, opts)
	rdb := rawClient(t, srv)
	exists := func(keys ...string) func(t testing.TB) bool {
		return func(t testing.TB) bool {
			n, err := do(t, rdb, append([]string{"EXISTS"}, keys...)...).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			return n > 0
		}
	}
	locker := func(name string, l relock.Locker, hold func(context.Context) (context.Context, error), keys ...string) unlockCase {
		return unlockCase{name: name, lock: l.Lock, unlock: l.Unlock, hold: hold, held: exists(keys...)}
	}
	rl, fl, rr, rw := c.Lock("u:rlock"), c.FairLock("u:fair"), c.ReadWriteLock("u:rw-read"), c.ReadWriteLock("u:rw-write")
	multi := relock.NewMultiLock(c.Lock("u:m1"), c.Lock("u:m2"))
	nodes := redistest.StartN(t, 3)
	var parts []relock.Lockable
	var nodeHeld []func(testing.TB) bool
	for _, s := range nodes {
		parts = append(parts, newClient(t, s, opts).Lock("u:red"))
		raw := rawClient(t, s)
		nodeHeld = append(nodeHeld, func(t testing.TB) bool { n, _ := do(t, raw, "EXISTS", "u:red").AsInt64(); return n > 0 })
	}
	// A node timeout for this test's short watchdog (its default, TTL/20, would be 30 ms: a first call on a
	// loaded machine, dialling and loading its script, can take longer, and Lock reports the first round's
	// node failures).
	red := relock.NewRedLock(parts, &relock.RedLockOptions{NodeTimeout: 200 * time.Millisecond})
	return []unlockCase{
		locker("RLock", rl, rl.HoldContext, "u:rlock"),
		locker("FairLock", fl, fl.HoldContext, "u:fair"),
		locker("ReadLock", rr.ReadLock(), rr.ReadLock().HoldContext, "u:rw-read"),
		locker("WriteLock", rw.WriteLock(), rw.WriteLock().HoldContext, "u:rw-write"),
		locker("MultiLock", multi, multi.HoldContext, "u:m1", "u:m2"),
		{name: "RedLock", lock: red.Lock, unlock: red.Unlock, hold: red.HoldContext, held: func(t testing.TB) bool {
			for _, h := range nodeHeld {
				if h(t) {
					return true
				}
			}
			return false
		}},
	}
}

// An Unlock whose context has already ended (the usual `defer l.Unlock(ctx)` after a request ended)
// returns at once with ctx's error, and still releases the lock: the watchdog stops renewing it at once,
// the hold context ends as released, and the lock is gone from Redis; the owner's next Lock gets it anew.
func TestUnlockWithEndedContextReleases(t *testing.T) {
	t.Parallel()
	for _, tc := range unlockCases(t, 600*time.Millisecond) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, end := range []string{"canceled", "deadline"} {
				owner := relock.WithOwner(context.Background(), tc.name+"-request-"+end)
				ctx, cancel := context.WithTimeout(owner, 10*time.Second)
				if err := tc.lock(ctx); err != nil {
					t.Fatal(err)
				}
				held, err := tc.hold(ctx)
				if err != nil {
					t.Fatal(err)
				}
				want := context.Canceled
				if end == "canceled" {
					cancel()
				} else {
					var c2 context.CancelFunc
					ctx, c2 = context.WithDeadline(ctx, time.Now().Add(-time.Second))
					defer c2()
					want = context.DeadlineExceeded
				}
				start := time.Now()
				err = tc.unlock(ctx)
				if !errors.Is(err, want) {
					t.Fatalf("%s: Unlock = %v, want an error matching %v", end, err, want)
				}
				if d := time.Since(start); d > 500*time.Millisecond {
					t.Fatalf("%s: Unlock took %v with an ended context", end, d)
				}
				select {
				case <-held.Done():
				case <-time.After(time.Second):
					t.Fatalf("%s: the hold context did not end", end)
				}
				if cause := context.Cause(held); errors.Is(cause, relock.ErrLockLost) {
					t.Fatalf("%s: hold context cause %v, want a release", end, cause)
				}
				eventually(t, 2*time.Second, "the lock is released", func() bool { return !tc.held(t) })
				// Nothing renews it back into existence, and nothing is left after two watchdog timeouts.
				time.Sleep(1200 * time.Millisecond)
				if tc.held(t) {
					t.Fatalf("%s: the lock is held again after its release", end)
				}
				// The owner takes it again, once: its next Lock is a first hold, not a reentry.
				live := relock.WithOwner(context.Background(), tc.name+"-request-"+end)
				if err := tc.lock(live); err != nil {
					t.Fatal(err)
				}
				if err := tc.unlock(live); err != nil {
					t.Fatal(err)
				}
				eventually(t, time.Second, "free after one Unlock", func() bool { return !tc.held(t) })
				cancel()
			}
		})
	}
}

// An Unlock whose context ends while its release is in flight (a slow link) returns with ctx's error,
// and the release completes in the background; the watchdog does not renew the hold meanwhile.
func TestUnlockContextEndingInFlightReleases(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := startProxy(t, srv)
	c := clientAt(t, proxy.Addr, &relock.Options{WatchdogTimeout: 600 * time.Millisecond})
	rdb := rawClient(t, srv)
	ctx := relock.WithOwner(ctxTimeout(t, 20*time.Second), "slow")
	l := c.Lock("inflight")
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	held, _ := l.HoldContext(ctx)
	proxy.SetLatency(150 * time.Millisecond) // each way
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := l.Unlock(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Unlock = %v, want an error matching context.DeadlineExceeded", err)
	}
	if errors.Is(context.Cause(held), relock.ErrLockLost) {
		t.Fatalf("hold context: %v", context.Cause(held))
	}
	eventually(t, 3*time.Second, "the release lands", func() bool {
		n, _ := do(t, rdb, "EXISTS", "inflight").AsInt64()
		return n == 0
	})
	proxy.SetLatency(0)
	time.Sleep(900 * time.Millisecond)
	if n, _ := do(t, rdb, "EXISTS", "inflight").AsInt64(); n != 0 {
		t.Fatal("the lock is back after its release")
	}
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := l.HoldCount(ctx); n != 1 {
		t.Fatalf("hold count after the next Lock = %d, want 1", n)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A nested Unlock with an ended context releases one level only: the outer hold stays, renewed.
func TestNestedUnlockWithEndedContextKeepsOuterHold(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, &relock.Options{WatchdogTimeout: time.Second})
	ctx := relock.WithOwner(ctxTimeout(t, 20*time.Second), "nested")
	l := c.Lock("nested")
	for range 2 {
		if err := l.Lock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	held, _ := l.HoldContext(ctx)
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if err := l.Unlock(ended); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // two and a half watchdog timeouts: the outer hold must be renewed
	if held.Err() != nil {
		t.Fatalf("the outer hold ended: %v", context.Cause(held))
	}
	if n, err := l.HoldCount(ctx); n != 1 || err != nil {
		t.Fatalf("hold count = %d, %v; want 1", n, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// `defer l.Unlock(ctx)` then `defer c.Close()` in a program whose ctx ended: Close lets the background
// release land before it ends the Client.
func TestCloseLetsBackgroundReleasesLand(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := rawClient(t, srv)
	for range 20 {
		c, err := relock.New([]string{srv.Addr()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(relock.WithOwner(context.Background(), "main"))
		if err := c.Lock("closing").Lock(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		if err := c.Lock("closing").Unlock(ctx); !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		c.Close()
		if n, _ := do(t, rdb, "EXISTS", "closing").AsInt64(); n != 0 {
			t.Fatal("the lock is still held after Unlock and Close")
		}
	}
}

// A release in the background (Unlock with an ended context) that meets a server loading its data after a
// restart (LOADING) tries again until it gets through, as a waiter rides out LOADING. It gave up at the
// error reply: the hold ended for the Client while Redis still had it, so the owner's next Lock was a
// reentry in Redis, and the Unlock after it left the lock held (the fault suite's election scenario saw it
// as a Resign that returned nil with the candidate still leading). The server here loads slowly: 2 ms a
// key, 1000 keys.
func TestBackgroundReleaseRidesOutLoading(t *testing.T) {
	t.Parallel()
	args, populate := slowLoading(t)
	srv := redistest.Start(t, append([]string{"--appendonly", "yes", "--appendfsync", "always"}, args...)...)
	rdb := rawClient(t, srv)
	do(t, rdb, populate...)
	do(t, rdb, "BGREWRITEAOF") // the keys, in the AOF the restart loads
	testutil.Eventually(t, 10*time.Second, "the AOF rewritten", func() bool {
		info, _ := do(t, rdb, "INFO", "persistence").ToString()
		return strings.Contains(info, "aof_rewrite_in_progress:0") && strings.Contains(info, "aof_rewrite_scheduled:0")
	})
	c := newClient(t, srv, &relock.Options{WatchdogTimeout: 10 * time.Second})
	ctx := relock.WithOwner(ctxTimeout(t, 60*time.Second), "owner")
	l := c.Lock("loading")
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Second, "LOADING", func() bool {
		err := do(t, rdb, "PING").Error()
		return err != nil && strings.Contains(err.Error(), "LOADING")
	})
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if err := l.Unlock(ended); !errors.Is(err, context.Canceled) {
		t.Fatalf("Unlock with an ended context = %v", err)
	}
	testutil.Eventually(t, 20*time.Second, "the data loaded", func() bool { return do(t, rdb, "PING").Error() == nil })
	// The owner's next Lock waits for the background release; then one Unlock frees the lock.
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := do(t, rdb, "EXISTS", "loading").AsInt64(); n != 0 || err != nil {
		hold, _ := do(t, rdb, "HGETALL", "loading").ToAny()
		t.Fatalf("the lock is still held after Lock and Unlock: %v (%v)", hold, err)
	}
}
