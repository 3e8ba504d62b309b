package relocktest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/relocktest"
)

// A holding kind: what each hook does to a hold is the same for all of them, and tested for each.
type holdKind struct {
	name string
	// hold takes a hold of the object called name on c for ctx's owner, and returns the hold's context and
	// its token (fencing token, term; 0 for a permit) and a release.
	hold func(t *testing.T, ctx context.Context, c *relock.Client, name string) (held context.Context, token uint64, release func() error)
}

// holdKinds are every kind whose holds the watchdog keeps: locks, a permit, a leadership.
func holdKinds() []holdKind {
	locker := func(l *relock.RLock) func(t *testing.T, ctx context.Context) (context.Context, uint64, func() error) {
		return func(t *testing.T, ctx context.Context) (context.Context, uint64, func() error) {
			t.Helper()
			if err := l.Lock(ctx); err != nil {
				t.Fatalf("Lock: %v", err)
			}
			held, err := l.HoldContext(ctx)
			if err != nil {
				t.Fatalf("HoldContext: %v", err)
			}
			token, _ := l.FencingToken(ctx) // 0 for a read hold
			return held, token, func() error { return l.Unlock(ctx) }
		}
	}
	return []holdKind{
		{"lock", func(t *testing.T, ctx context.Context, c *relock.Client, name string) (context.Context, uint64, func() error) {
			return locker(c.Lock(name, relock.WithFencing()))(t, ctx)
		}},
		{"fairlock", func(t *testing.T, ctx context.Context, c *relock.Client, name string) (context.Context, uint64, func() error) {
			return locker(c.FairLock(name, relock.WithFencing()))(t, ctx)
		}},
		{"writelock", func(t *testing.T, ctx context.Context, c *relock.Client, name string) (context.Context, uint64, func() error) {
			return locker(c.ReadWriteLock(name, relock.WithFencing()).WriteLock())(t, ctx)
		}},
		{"readlock", func(t *testing.T, ctx context.Context, c *relock.Client, name string) (context.Context, uint64, func() error) {
			return locker(c.ReadWriteLock(name).ReadLock())(t, ctx)
		}},
		{"permitsemaphore", func(t *testing.T, ctx context.Context, c *relock.Client, name string) (context.Context, uint64, func() error) {
			t.Helper()
			s := c.PermitSemaphore(name)
			if _, err := s.TrySetPermits(ctx, 1); err != nil {
				t.Fatalf("TrySetPermits: %v", err)
			}
			p, err := s.Acquire(ctx)
			if err != nil {
				t.Fatalf("Acquire: %v", err)
			}
			held, err := p.Context(ctx)
			if err != nil {
				t.Fatalf("Permit.Context: %v", err)
			}
			return held, 0, func() error { return p.Release(ctx) }
		}},
		{"election", func(t *testing.T, ctx context.Context, c *relock.Client, name string) (context.Context, uint64, func() error) {
			t.Helper()
			e := c.Election(name)
			term, err := e.Campaign(ctx, "v")
			if err != nil {
				t.Fatalf("Campaign: %v", err)
			}
			held, err := e.LeadershipContext(ctx)
			if err != nil {
				t.Fatalf("LeadershipContext: %v", err)
			}
			return held, term, func() error { return e.Resign(ctx) }
		}},
	}
}

// Expire ends the hold of every kind: its holder's context ends with ErrLockLost, and another owner gets
// in at once, before the first has heard of it, with a larger token (a larger term), which is what a test
// of code using fencing should assert on.
func TestExpireEveryHoldKind(t *testing.T) {
	t.Parallel()
	for _, k := range holdKinds() {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			srv := relocktest.NewServer(t)
			a, b := srv.Client(nil), srv.Client(nil)
			ctx := ctxTimeout(t, 20*time.Second)
			const name = "expired{k}"
			held, token, _ := k.hold(t, ctx, a, name)
			if !srv.Expire(name) {
				t.Fatal("Expire found nothing held")
			}
			// Another owner gets in at once: Expire deletes, it does not wait for anything.
			_, token2, _ := k.hold(t, ctxTimeout(t, 5*time.Second), b, name)
			t.Logf("the first holder had heard of the loss when the second got in: %v", held.Err() != nil)
			if k.name != "readlock" && k.name != "permitsemaphore" && token2 <= token {
				t.Errorf("token after Expire = %d, want above the expired hold's %d", token2, token)
			}
			cause := lost(t, held, 3*time.Second)
			t.Logf("lost: %v; next token %d (was %d)", cause, token2, token)
			if srv.Expire("nothing{k}") {
				t.Error("Expire of a name nothing holds reported true")
			}
		})
	}
}

// A permit semaphore keeps its counter through Expire: its permits are marked expired, as a real expiry
// leaves them, and the next acquisition gives them back.
func TestExpirePermitSemaphoreKeepsItsPermits(t *testing.T) {
	t.Parallel()
	c, srv := relocktest.NewClient(t, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	s := c.PermitSemaphore("permits")
	if _, err := s.TrySetPermits(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if srv.Expire("permits") {
		t.Fatal("Expire of a permit semaphore with no permit taken reported true")
	}
	var helds []context.Context
	for range 2 {
		p, err := s.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held, err := p.Context(ctx)
		if err != nil {
			t.Fatal(err)
		}
		helds = append(helds, held)
	}
	if !srv.Expire("permits") {
		t.Fatal("Expire found no permit taken")
	}
	st := srv.InspectSemaphore("permits")
	if !st.Exists || st.Value != 1 || st.PermitsTaken != 2 || st.PermitsExpired != 2 {
		t.Fatalf("InspectSemaphore after Expire = %+v, want the counter at 1 and 2 permits taken, both expired", st)
	}
	for _, held := range helds {
		lost(t, held, 3*time.Second)
	}
	// The next acquisition gives the expired permits back: three are there to take.
	other := srv.Client(nil).PermitSemaphore("permits")
	for i := range 3 {
		short, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := other.Acquire(short)
		cancel()
		if err != nil {
			t.Fatalf("permit %d after Expire: %v", i+1, err)
		}
	}
	if st := srv.InspectSemaphore("permits"); st.Value != 0 || st.PermitsTaken != 3 || st.PermitsExpired != 0 {
		t.Fatalf("InspectSemaphore = %+v, want the 3 permits taken by the other Client", st)
	}
}

// Expire does nothing to a Semaphore or a CountDownLatch: nothing of theirs expires.
func TestExpireLeavesSemaphoresAndLatches(t *testing.T) {
	t.Parallel()
	c, srv := relocktest.NewClient(t, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	sem := c.Semaphore("sem")
	if _, err := sem.TrySetPermits(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if err := sem.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	latch := c.CountDownLatch("latch")
	if _, err := latch.TrySetCount(ctx, 2); err != nil {
		t.Fatal(err)
	}
	awaited := make(chan error, 1)
	go func() { awaited <- latch.Await(ctx) }()
	for _, name := range []string{"sem", "latch"} {
		if srv.Expire(name) {
			t.Errorf("Expire(%q) reported something held", name)
		}
	}
	if n, err := sem.AvailablePermits(ctx); n != 2 || err != nil {
		t.Errorf("semaphore after Expire: %d permits (%v), want 2", n, err)
	}
	if n, err := latch.Count(ctx); n != 2 || err != nil {
		t.Errorf("latch after Expire: count %d (%v), want 2", n, err)
	}
	select {
	case err := <-awaited:
		t.Fatalf("the latch's waiter returned after Expire: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	for range 2 {
		if err := latch.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-awaited; err != nil {
		t.Fatal(err)
	}
}

// FailRenewals fails the renewals of every kind: many lose the hold, "not renewed before it expired".
func TestFailRenewalsEveryHoldKind(t *testing.T) {
	t.Parallel()
	for _, k := range holdKinds() {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			c, srv := relocktest.NewClient(t, nil)
			ctx := ctxTimeout(t, 20*time.Second)
			held, _, _ := k.hold(t, ctx, c, "failing{k}")
			srv.FailRenewals(1000)
			if cause := lost(t, held, 3*time.Second); !strings.Contains(cause.Error(), "not renewed") {
				t.Fatalf("cause = %v, want a renewal timeout", cause)
			}
			if left := relocktest.FailingLeft(srv); left == 1000 {
				t.Fatal("no renewal was failed")
			}
			srv.FailRenewals(0)
		})
	}
}

// A few failed renewals are ridden out, for every kind: the renewals were failed (none left to fail), and
// the hold goes on.
func TestFailRenewalsRiddenOutEveryHoldKind(t *testing.T) {
	t.Parallel()
	for _, k := range holdKinds() {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			c, srv := relocktest.NewClient(t, nil)
			ctx := ctxTimeout(t, 20*time.Second)
			held, _, release := k.hold(t, ctx, c, "flaky{k}")
			srv.FailRenewals(2) // the first renewal (at 1/3 s) and a retry (1/10 s later)
			deadline := time.Now().Add(5 * time.Second)
			for relocktest.FailingLeft(srv) != 0 {
				if time.Now().After(deadline) {
					t.Fatalf("%d renewals left to fail after 5 s: this kind's renewals were not failed", relocktest.FailingLeft(srv))
				}
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(500 * time.Millisecond) // a renewal that works, after the retries
			if held.Err() != nil {
				t.Fatalf("two failed renewals lost the hold: %v", context.Cause(held))
			}
			if err := release(); err != nil {
				t.Fatalf("release: %v", err)
			}
		})
	}
}

// Nothing of a Semaphore or a CountDownLatch is renewed: FailRenewals leaves them working, and its count
// of runs to fail untouched.
func TestFailRenewalsLeavesSemaphoresAndLatches(t *testing.T) {
	t.Parallel()
	c, srv := relocktest.NewClient(t, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	srv.FailRenewals(5)
	sem := c.Semaphore("sem")
	if _, err := sem.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := sem.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	latch := c.CountDownLatch("latch")
	if _, err := latch.TrySetCount(ctx, 1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // past a watchdog period: there is nothing to renew
	if err := sem.Release(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := latch.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := latch.Await(ctx); err != nil {
		t.Fatal(err)
	}
	if left := relocktest.FailingLeft(srv); left != 5 {
		t.Fatalf("%d renewals left to fail, want 5: something was taken for a renewal", left)
	}
}

// Down loses the hold of every kind once it cannot be renewed, and after Up another Client gets in.
func TestDownUpEveryHoldKind(t *testing.T) {
	t.Parallel()
	for _, k := range holdKinds() {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			srv := relocktest.NewServer(t)
			a := srv.Client(nil)
			ctx := ctxTimeout(t, 30*time.Second)
			held, _, _ := k.hold(t, ctx, a, "down{k}")
			srv.Down()
			cause := lost(t, held, 3*time.Second)
			t.Logf("lost while down: %v", cause)
			srv.Up()
			// A Client's connection that was cut may fail its first call after Up (see Server.Up; TestDownAndUp
			// covers it): a Client made after Up has none.
			k.hold(t, ctxTimeout(t, 10*time.Second), srv.Client(nil), "down{k}")
		})
	}
}

// While Down, a Semaphore's and a CountDownLatch's calls fail; after Up they work, on the same state.
func TestDownUpSemaphoresAndLatches(t *testing.T) {
	t.Parallel()
	c, srv := relocktest.NewClient(t, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	sem, latch := c.Semaphore("sem"), c.CountDownLatch("latch")
	if _, err := sem.TrySetPermits(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := latch.TrySetCount(ctx, 2); err != nil {
		t.Fatal(err)
	}
	srv.Down()
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if ok, err := sem.TryAcquire(short, 1, 0); ok || err == nil {
		t.Errorf("Semaphore.TryAcquire while down = %v, %v, want an error", ok, err)
	}
	if err := latch.CountDown(short); err == nil {
		t.Error("CountDownLatch.CountDown while down succeeded")
	}
	srv.Up()
	// The same objects on a Client made after Up (the cut connections of c may fail a first call; see
	// Server.Up): the state is the server's.
	c = srv.Client(nil)
	sem, latch = c.Semaphore("sem"), c.CountDownLatch("latch")
	if n, err := sem.AvailablePermits(ctx); n != 2 || err != nil {
		t.Errorf("semaphore after Up: %d permits (%v), want 2", n, err)
	}
	if n, err := latch.Count(ctx); n != 2 || err != nil {
		t.Errorf("latch after Up: count %d (%v), want 2", n, err)
	}
	if err := sem.Acquire(ctx, 2); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := latch.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := latch.Await(ctx); err != nil {
		t.Fatal(err)
	}
}

// InspectSemaphore reads a Semaphore, a CountDownLatch and a PermitSemaphore, even while the server is down.
func TestInspectSemaphore(t *testing.T) {
	t.Parallel()
	c, srv := relocktest.NewClient(t, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	if _, err := c.Semaphore("sem").TrySetPermits(ctx, 4); err != nil {
		t.Fatal(err)
	}
	ps := c.PermitSemaphore("permits")
	if _, err := ps.TrySetPermits(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := ps.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Down()
	defer srv.Up()
	if st := srv.InspectSemaphore("sem"); !st.Exists || st.Value != 4 || st.Expirable {
		t.Errorf("InspectSemaphore(sem) = %+v", st)
	}
	if st := srv.InspectSemaphore("permits"); !st.Exists || st.Value != 1 || !st.Expirable || st.PermitsTaken != 1 {
		t.Errorf("InspectSemaphore(permits) = %+v", st)
	}
	if st := srv.InspectSemaphore("never-set"); st.Exists {
		t.Errorf("InspectSemaphore(never-set) = %+v", st)
	}
}
