package relock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
)

// The case: while Client A holds Lock("x"), Client B's write lock, read lock and fair lock do not
// get in; the write and read locks fail at once with a KindError naming the lock found, and A's hold is
// as it was (A's Unlock releases it, and only it).
func TestWriteLockRefusesALocksName(t *testing.T) {
	t.Parallel()
	d := standalone(t)
	a, b := d.client(t, nil), d.client(t, nil)
	rdb := d.raw(t)
	ctx := ctxTimeout(t, 20*time.Second)
	if err := a.Lock("x").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	before := keysState(t, rdb, "x")
	rw := b.ReadWriteLock("x")
	for _, l := range []*relock.RLock{rw.WriteLock(), rw.ReadLock()} {
		ok, err := l.TryLock(ctx, 0, 0)
		var ke *relock.KindError
		if ok || !errors.Is(err, relock.ErrWrongKind) || !errors.As(err, &ke) || ke.Found != relock.KindRLock || ke.Type != "hash" {
			t.Fatalf("TryLock on a Lock's name = %v, %v; want ErrWrongKind finding an rlock hash", ok, err)
		}
		t.Logf("refused: %v", err)
	}
	if ok, err := b.FairLock("x").TryLock(ctx, 0, 0); ok || err != nil {
		t.Fatalf("FairLock.TryLock on a held Lock's name = %v, %v; want false (same layout: excluded)", ok, err)
	}
	if after := keysState(t, rdb, "x"); !slices.Equal(before, after) {
		t.Fatalf("refused acquisitions changed Redis:\n before %v\n after  %v", before, after)
	}
	if st := inspect(t, b, "x"); st.Kind != relock.KindRLock || len(st.Holders) != 1 || st.Holders[0].ClientID != a.ID() {
		t.Fatalf("Inspect after the refusals: %+v", st)
	}
	if err := a.Lock("x").Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if keys := d.keysContaining(t, "x"); len(keys) != 0 {
		t.Fatalf("keys left after A's Unlock: %v", keys)
	}
}

// A kind of object, set up at a name by a holder: its layout in Redis, as the kinds' table tells it.
type heldKind struct {
	name   string
	layout string // "lock", "fairq", "election", "rw", "counter", "permits", "foreign"
	found  relock.LockKind
	hold   func(t *testing.T, ctx context.Context, c *relock.Client, rdb rueidis.Client, name string)
}

func heldKinds() []heldKind {
	must := func(t *testing.T, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	return []heldKind{
		{"Lock", "lock", relock.KindRLock, func(t *testing.T, ctx context.Context, c *relock.Client, _ rueidis.Client, name string) {
			must(t, c.Lock(name).Lock(ctx))
		}},
		{"FairLock", "lock", relock.KindRLock, func(t *testing.T, ctx context.Context, c *relock.Client, _ rueidis.Client, name string) {
			must(t, c.FairLock(name).Lock(ctx))
		}},
		{"FairLock with a waiter", "fairq", relock.KindFairLock, func(t *testing.T, ctx context.Context, c *relock.Client, rdb rueidis.Client, name string) {
			must(t, c.FairLock(name).Lock(ctx))
			// A Redisson client's waiter, queued for an hour: its entries do not move while the test runs.
			far := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
			do(t, rdb, "RPUSH", "redisson_lock_queue:{"+name+"}", "java-client:1")
			do(t, rdb, "ZADD", "redisson_lock_timeout:{"+name+"}", far, "java-client:1")
		}},
		{"ReadLock", "rw", relock.KindReadWriteLock, func(t *testing.T, ctx context.Context, c *relock.Client, _ rueidis.Client, name string) {
			must(t, c.ReadWriteLock(name).ReadLock().Lock(ctx))
		}},
		{"WriteLock", "rw", relock.KindReadWriteLock, func(t *testing.T, ctx context.Context, c *relock.Client, _ rueidis.Client, name string) {
			must(t, c.ReadWriteLock(name).WriteLock().Lock(ctx))
		}},
		{"Semaphore", "counter", relock.KindSemaphore, func(t *testing.T, ctx context.Context, c *relock.Client, _ rueidis.Client, name string) {
			s := c.Semaphore(name)
			_, err := s.TrySetPermits(ctx, 3)
			must(t, err)
			must(t, s.Acquire(ctx, 1))
		}},
		{"PermitSemaphore", "permits", relock.KindPermitSemaphore, func(t *testing.T, ctx context.Context, c *relock.Client, _ rueidis.Client, name string) {
			s := c.PermitSemaphore(name)
			_, err := s.TrySetPermits(ctx, 2)
			must(t, err)
			// A leased permit: its expiry stays where it is (the watchdog only checks it).
			if _, ok, err := s.TryAcquire(ctx, 0, time.Hour); !ok || err != nil {
				t.Fatalf("TryAcquire: %v, %v", ok, err)
			}
		}},
		{"CountDownLatch", "counter", relock.KindSemaphore, func(t *testing.T, ctx context.Context, c *relock.Client, _ rueidis.Client, name string) {
			_, err := c.CountDownLatch(name).TrySetCount(ctx, 2)
			must(t, err)
		}},
		{"Election", "election", relock.KindElection, func(t *testing.T, ctx context.Context, c *relock.Client, _ rueidis.Client, name string) {
			_, err := c.Election(name).Campaign(ctx, "10.0.0.1")
			must(t, err)
		}},
		{"a string", "foreign", relock.KindOther, func(t *testing.T, _ context.Context, _ *relock.Client, rdb rueidis.Client, name string) {
			do(t, rdb, "SET", name, "hello")
		}},
		{"a list", "foreign", relock.KindOther, func(t *testing.T, _ context.Context, _ *relock.Client, rdb rueidis.Client, name string) {
			do(t, rdb, "RPUSH", name, "a", "b")
		}},
	}
}

// foundAs reports whether a KindError may report found for h. An operation that reads only the name's key
// sees a FairLock's or an Election's lock as a lock (KindRLock), and a PermitSemaphore's counter as a
// counter (KindSemaphore): only acquisitions read the companion keys that tell more.
func (h heldKind) foundAs(found relock.LockKind) bool {
	switch {
	case found == h.found:
		return true
	case h.layout == "fairq" || h.layout == "election":
		return found == relock.KindRLock
	case h.layout == "permits":
		return found == relock.KindSemaphore
	}
	return false
}

// kindOp is one operation of a kind, made by another Client on a name held as some kind.
type kindOp struct {
	kind string // the operation's kind, as heldKind.name
	name string
	call func(ctx context.Context, c *relock.Client, name string) error
	// refused returns the error the operation must match on a name of layout held, or nil when it is not
	// refused there (the same kind, or one Redis cannot tell from it): such pairs are not checked here.
	refused func(held heldKind) error
}

func kindOps() []kindOp {
	boolErr := func(_ bool, err error) error { return err }
	intErr := func(_ int, err error) error { return err }
	// Refusals by layout, for each family of operations.
	lockOp := func(acquires bool) func(heldKind) error {
		return func(h heldKind) error {
			switch h.layout {
			case "rw":
				return relock.ErrWrongKind
			case "counter", "permits", "foreign":
				return relock.ErrNotALock
			case "fairq", "election":
				if acquires {
					return relock.ErrWrongKind
				}
			}
			return nil
		}
	}
	fairOp := func(acquires bool) func(heldKind) error {
		return func(h heldKind) error {
			if h.layout == "fairq" {
				return nil // its own kind
			}
			return lockOp(acquires)(h)
		}
	}
	electionOp := func(h heldKind) error {
		if h.layout == "fairq" || h.layout == "election" {
			return nil
		}
		return lockOp(false)(h)
	}
	rwOp := func(h heldKind) error {
		switch h.layout {
		case "rw":
			return nil
		case "counter", "permits", "foreign":
			return relock.ErrNotALock
		}
		return relock.ErrWrongKind
	}
	// A counter's operations refuse every lock, and what is no counter; a Semaphore's taking and a
	// latch's every operation refuse a PermitSemaphore with permits taken.
	counterOp := func(refusesPermits bool) func(heldKind) error {
		return func(h heldKind) error {
			switch h.layout {
			case "counter":
				return nil
			case "permits":
				if refusesPermits {
					return relock.ErrWrongKind
				}
				return nil
			}
			return relock.ErrNotASemaphore
		}
	}
	var ops []kindOp
	for _, k := range []struct {
		kind string
		lock func(c *relock.Client, name string) *relock.RLock
		op   func(acquires bool) func(heldKind) error
	}{
		{"Lock", func(c *relock.Client, name string) *relock.RLock { return c.Lock(name) }, lockOp},
		{"FairLock", func(c *relock.Client, name string) *relock.RLock { return c.FairLock(name) }, fairOp},
		{"ReadLock", func(c *relock.Client, name string) *relock.RLock { return c.ReadWriteLock(name).ReadLock() },
			func(bool) func(heldKind) error { return rwOp }},
		{"WriteLock", func(c *relock.Client, name string) *relock.RLock { return c.ReadWriteLock(name).WriteLock() },
			func(bool) func(heldKind) error { return rwOp }},
	} {
		ops = append(ops,
			kindOp{k.kind, "TryLock", func(ctx context.Context, c *relock.Client, name string) error {
				return boolErr(k.lock(c, name).TryLock(ctx, 0, 0))
			}, k.op(true)},
			kindOp{k.kind, "TryLock with a wait", func(ctx context.Context, c *relock.Client, name string) error {
				return boolErr(k.lock(c, name).TryLock(ctx, 100*time.Millisecond, time.Minute))
			}, k.op(true)},
			kindOp{k.kind, "Unlock", func(ctx context.Context, c *relock.Client, name string) error {
				return k.lock(c, name).Unlock(ctx)
			}, k.op(false)},
			kindOp{k.kind, "ForceUnlock", func(ctx context.Context, c *relock.Client, name string) error {
				return boolErr(k.lock(c, name).ForceUnlock(ctx))
			}, k.op(false)},
			kindOp{k.kind, "IsLocked", func(ctx context.Context, c *relock.Client, name string) error {
				return boolErr(k.lock(c, name).IsLocked(ctx))
			}, k.op(false)},
			kindOp{k.kind, "IsHeld", func(ctx context.Context, c *relock.Client, name string) error {
				return boolErr(k.lock(c, name).IsHeld(ctx))
			}, k.op(false)},
			kindOp{k.kind, "HoldCount", func(ctx context.Context, c *relock.Client, name string) error {
				return intErr(k.lock(c, name).HoldCount(ctx))
			}, k.op(false)},
			kindOp{k.kind, "RemainingTTL", func(ctx context.Context, c *relock.Client, name string) error {
				_, err := k.lock(c, name).RemainingTTL(ctx)
				return err
			}, k.op(false)},
		)
	}
	ops = append(ops,
		kindOp{"Election", "Campaign", func(ctx context.Context, c *relock.Client, name string) error {
			ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			_, err := c.Election(name).Campaign(ctx, "10.0.0.2")
			return err
		}, func(h heldKind) error {
			if h.layout == "lock" {
				return nil // a candidate waits behind a Lock's holder: the same layout
			}
			return electionOp(h)
		}},
		kindOp{"Election", "Leader", func(ctx context.Context, c *relock.Client, name string) error {
			_, err := c.Election(name).Leader(ctx)
			return err
		}, func(h heldKind) error {
			if h.layout == "lock" {
				return nil
			}
			return electionOp(h)
		}},
		kindOp{"Election", "Resign", func(ctx context.Context, c *relock.Client, name string) error {
			return c.Election(name).Resign(ctx)
		}, func(h heldKind) error {
			if h.layout == "lock" {
				return nil
			}
			return electionOp(h)
		}},
		kindOp{"Semaphore", "TryAcquire", func(ctx context.Context, c *relock.Client, name string) error {
			return boolErr(c.Semaphore(name).TryAcquire(ctx, 1, 0))
		}, counterOp(true)},
		kindOp{"Semaphore", "DrainPermits", func(ctx context.Context, c *relock.Client, name string) error {
			return intErr(c.Semaphore(name).DrainPermits(ctx))
		}, counterOp(true)},
		kindOp{"Semaphore", "Release", func(ctx context.Context, c *relock.Client, name string) error {
			return c.Semaphore(name).Release(ctx, 1)
		}, counterOp(false)},
		kindOp{"Semaphore", "AddPermits", func(ctx context.Context, c *relock.Client, name string) error {
			return c.Semaphore(name).AddPermits(ctx, -1)
		}, counterOp(false)},
		kindOp{"Semaphore", "TrySetPermits", func(ctx context.Context, c *relock.Client, name string) error {
			return boolErr(c.Semaphore(name).TrySetPermits(ctx, 5))
		}, counterOp(false)},
		kindOp{"Semaphore", "AvailablePermits", func(ctx context.Context, c *relock.Client, name string) error {
			return intErr(c.Semaphore(name).AvailablePermits(ctx))
		}, counterOp(false)},
		kindOp{"PermitSemaphore", "TryAcquire", func(ctx context.Context, c *relock.Client, name string) error {
			_, _, err := c.PermitSemaphore(name).TryAcquire(ctx, 0, 0)
			return err
		}, counterOp(false)},
		kindOp{"PermitSemaphore", "AddPermits", func(ctx context.Context, c *relock.Client, name string) error {
			return c.PermitSemaphore(name).AddPermits(ctx, 1)
		}, counterOp(false)},
		kindOp{"PermitSemaphore", "AvailablePermits", func(ctx context.Context, c *relock.Client, name string) error {
			return intErr(c.PermitSemaphore(name).AvailablePermits(ctx))
		}, counterOp(false)},
		kindOp{"CountDownLatch", "TrySetCount", func(ctx context.Context, c *relock.Client, name string) error {
			return boolErr(c.CountDownLatch(name).TrySetCount(ctx, 3))
		}, counterOp(true)},
		kindOp{"CountDownLatch", "CountDown", func(ctx context.Context, c *relock.Client, name string) error {
			return c.CountDownLatch(name).CountDown(ctx)
		}, counterOp(true)},
		kindOp{"CountDownLatch", "Count", func(ctx context.Context, c *relock.Client, name string) error {
			_, err := c.CountDownLatch(name).Count(ctx)
			return err
		}, counterOp(true)},
		kindOp{"CountDownLatch", "TryAwait", func(ctx context.Context, c *relock.Client, name string) error {
			return boolErr(c.CountDownLatch(name).TryAwait(ctx, 0))
		}, counterOp(true)},
	)
	return ops
}

// Every operation of every kind, made on a name held as another kind that Redis can tell from its own,
// fails with a typed error (ErrWrongKind, and ErrNotALock or ErrNotASemaphore when the key is no lock, or
// no counter) whose KindError names the kind found, and changes nothing in Redis; the holder's hold is
// intact. Pairs Redis cannot tell apart (a Lock and a FairLock; a Semaphore and a CountDownLatch; a
// PermitSemaphore with no permit taken and a Semaphore) are not refused, as the package documents.
func TestEveryKindRefusesTheOthers(t *testing.T) {
	t.Parallel()
	d := standalone(t)
	a, b := d.client(t, nil), d.client(t, nil)
	rdb := d.raw(t)
	ctx := ctxTimeout(t, 2*time.Minute)
	refusals := 0
	for i, h := range heldKinds() {
		name := "kind" + string(rune('a'+i))
		h.hold(t, ctx, a, rdb, name)
		for _, op := range kindOps() {
			want := op.refused(h)
			if want == nil {
				continue
			}
			before := keysState(t, rdb, name)
			err := op.call(ctx, b, name)
			var ke *relock.KindError
			if !errors.Is(err, want) || !errors.Is(err, relock.ErrWrongKind) || !errors.As(err, &ke) {
				t.Errorf("%s.%s on a name held as %s: err = %v, want a KindError matching %v", op.kind, op.name, h.name, err, want)
				continue
			}
			if !h.foundAs(ke.Found) {
				t.Errorf("%s.%s on a name held as %s: found %q, want %q (%v)", op.kind, op.name, h.name, ke.Found, h.found, err)
			}
			if n := strings.Count(err.Error(), "relock:"); n != 1 {
				t.Errorf("%s.%s on a name held as %s: %d \"relock:\" in %q", op.kind, op.name, h.name, n, err)
			}
			if after := keysState(t, rdb, name); !slices.Equal(before, after) {
				t.Errorf("%s.%s on a name held as %s changed Redis:\n before %v\n after  %v", op.kind, op.name, h.name, before, after)
			}
			refusals++
		}
	}
	t.Logf("%d refusals checked", refusals)
	// The holders still hold: each releases as its kind does.
	for i, h := range heldKinds() {
		name := "kind" + string(rune('a'+i))
		var err error
		switch h.name {
		case "Lock":
			err = a.Lock(name).Unlock(ctx)
		case "FairLock", "FairLock with a waiter":
			err = a.FairLock(name).Unlock(ctx)
		case "ReadLock":
			err = a.ReadWriteLock(name).ReadLock().Unlock(ctx)
		case "WriteLock":
			err = a.ReadWriteLock(name).WriteLock().Unlock(ctx)
		case "Election":
			err = a.Election(name).Resign(ctx)
		}
		if err != nil {
			t.Errorf("%s: the holder's release after the refusals: %v", h.name, err)
		}
	}
}

// The kinds Redis cannot tell apart share a layout: a Lock and a FairLock (or an Election's lock) held by
// another owner exclude each other, without an error.
func TestSameLayoutKindsExcludeEachOther(t *testing.T) {
	t.Parallel()
	d := standalone(t)
	a, b := d.client(t, nil), d.client(t, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	if err := a.FairLock("f").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.Lock("f").TryLock(ctx, 0, 0); ok || err != nil {
		t.Fatalf("Lock.TryLock on a held FairLock's name = %v, %v; want false, nil", ok, err)
	}
	if _, err := a.Election("e").Campaign(ctx, "v"); err != nil {
		t.Fatal(err)
	}
	if err := a.Election("e").Resign(ctx); err != nil {
		t.Fatal(err)
	}
	// Once an Election recorded a leader, its name is an Election's: a Lock or a FairLock is refused
	// there even while nobody leads.
	for _, l := range []*relock.RLock{b.Lock("e"), b.FairLock("e")} {
		var ke *relock.KindError
		if _, err := l.TryLock(ctx, 0, 0); !errors.As(err, &ke) || ke.Found != relock.KindElection {
			t.Fatalf("TryLock on an Election's name: %v, want a KindError finding an election", err)
		}
	}
}

// A renewal batch goes on for every hold whose key is intact when another hold's key is now another
// kind's (replaced behind the Client's back): the one hold is lost, with a cause that says so (ErrLockLost
// and ErrWrongKind; ErrNotALock or ErrNotASemaphore when the key is no lock, or no permits' set), and the
// others are renewed. Before, a key of another type failed the whole batch with WRONGTYPE, and every hold
// in it was lost; and a Lock's hold whose key became a ReadWriteLock read by the same owner was renewed on.
func TestRenewalSurvivesAnotherHoldsKeyOfAnotherKind(t *testing.T) {
	t.Parallel()
	held := func(l *relock.RLock) func(ctx context.Context, c *relock.Client) (context.Context, error) {
		return func(ctx context.Context, c *relock.Client) (context.Context, error) {
			if err := l.Lock(ctx); err != nil {
				return nil, err
			}
			return l.HoldContext(ctx)
		}
	}
	toString := func(key string) func(t *testing.T, rdb rueidis.Client, c *relock.Client) {
		return func(t *testing.T, rdb rueidis.Client, _ *relock.Client) {
			do(t, rdb, "DEL", key)
			do(t, rdb, "SET", key, "7")
		}
	}
	for _, tc := range []struct {
		kind    string
		acquire func(c *relock.Client, name string) func(ctx context.Context, c *relock.Client) (context.Context, error)
		replace func(name string) func(t *testing.T, rdb rueidis.Client, c *relock.Client)
		want    error
	}{
		{"Lock", func(c *relock.Client, name string) func(context.Context, *relock.Client) (context.Context, error) {
			return held(c.Lock(name))
		}, func(name string) func(*testing.T, rueidis.Client, *relock.Client) { return toString(name) }, relock.ErrNotALock},
		{"Lock whose key became a ReadWriteLock its owner reads", func(c *relock.Client, name string) func(context.Context, *relock.Client) (context.Context, error) {
			return held(c.Lock(name))
		}, func(name string) func(*testing.T, rueidis.Client, *relock.Client) {
			return func(t *testing.T, rdb rueidis.Client, c *relock.Client) {
				do(t, rdb, "HSET", name, "mode", "read") // the same owner's field stays: a reader's now
			}
		}, relock.ErrWrongKind},
		{"ReadLock", func(c *relock.Client, name string) func(context.Context, *relock.Client) (context.Context, error) {
			return held(c.ReadWriteLock(name).ReadLock())
		}, func(name string) func(*testing.T, rueidis.Client, *relock.Client) { return toString(name) }, relock.ErrNotALock},
		{"WriteLock", func(c *relock.Client, name string) func(context.Context, *relock.Client) (context.Context, error) {
			return held(c.ReadWriteLock(name).WriteLock())
		}, func(name string) func(*testing.T, rueidis.Client, *relock.Client) { return toString(name) }, relock.ErrNotALock},
		{"PermitSemaphore", func(c *relock.Client, name string) func(context.Context, *relock.Client) (context.Context, error) {
			return func(ctx context.Context, c *relock.Client) (context.Context, error) {
				s := c.PermitSemaphore(name)
				if _, err := s.TrySetPermits(ctx, 1); err != nil {
					return nil, err
				}
				p, err := s.Acquire(ctx)
				if err != nil {
					return nil, err
				}
				return p.Context(ctx)
			}
		}, func(name string) func(*testing.T, rueidis.Client, *relock.Client) {
			return toString("{" + name + "}:timeout")
		}, relock.ErrNotASemaphore},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			t.Parallel()
			d := standalone(t)
			const timeout = 2 * time.Second // renewed every 667 ms: generous on a loaded machine
			c := d.client(t, &relock.Options{WatchdogTimeout: timeout})
			rdb := d.raw(t)
			ctx := relock.WithOwner(ctxTimeout(t, time.Minute), "owner")
			replaced, err := tc.acquire(c, "replaced")(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			kept, err := tc.acquire(c, "kept")(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			tc.replace("replaced")(t, rdb, c)
			select {
			case <-replaced.Done():
				if cause := context.Cause(replaced); !errors.Is(cause, relock.ErrLockLost) || !errors.Is(cause, tc.want) ||
					!errors.Is(cause, relock.ErrWrongKind) {
					t.Fatalf("the replaced hold ended with %v, want ErrLockLost and %v", cause, tc.want)
				}
				t.Logf("lost: %v", context.Cause(replaced))
			case <-time.After(10 * timeout):
				t.Fatal("the hold whose key is now another kind's was not found lost")
			}
			// Several renewals later, the other hold is still held.
			select {
			case <-kept.Done():
				t.Fatalf("the intact hold was lost with the other: %v", context.Cause(kept))
			case <-time.After(2 * timeout):
			}
		})
	}
}

// keysState describes every key whose name contains substr: its name, type, content and whether it has a
// TTL (not its value, which runs down).
func keysState(t *testing.T, rdb rueidis.Client, substr string) []string {
	t.Helper()
	keys, err := do(t, rdb, "KEYS", "*"+substr+"*").AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		typ, _ := do(t, rdb, "TYPE", k).ToString()
		var content any
		switch typ {
		case "hash":
			content, _ = do(t, rdb, "HGETALL", k).AsStrMap()
		case "string":
			content, _ = do(t, rdb, "GET", k).ToString()
		case "list":
			content, _ = do(t, rdb, "LRANGE", k, "0", "-1").AsStrSlice()
		case "zset":
			content, _ = do(t, rdb, "ZRANGE", k, "0", "-1", "WITHSCORES").AsStrSlice()
		case "stream":
			content, _ = do(t, rdb, "XLEN", k).AsInt64()
		}
		ttl, _ := do(t, rdb, "PTTL", k).AsInt64()
		out = append(out, fmt.Sprintf("%s %s %v expires:%v", k, typ, content, ttl >= 0))
	}
	return out
}
