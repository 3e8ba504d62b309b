package relocktest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/relocktest"
)

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// lost waits up to d for held to end, and fails t unless it ended with ErrLockLost.
func lost(t *testing.T, held context.Context, d time.Duration) error {
	t.Helper()
	select {
	case <-held.Done():
	case <-time.After(d):
		t.Fatalf("the hold was not lost within %v", d)
	}
	cause := context.Cause(held)
	if !errors.Is(cause, relock.ErrLockLost) {
		t.Fatalf("cause = %v, want ErrLockLost", cause)
	}
	return cause
}

func TestExpireEndsTheHold(t *testing.T) {
	t.Parallel()
	c, srv := relocktest.NewClient(t, nil)
	other := srv.Client(nil)
	ctx := ctxTimeout(t, 10*time.Second)
	l := c.Lock("expired", relock.WithFencing())
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := l.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st := srv.Inspect("expired")
	if !st.Locked || len(st.Holders) != 1 || st.Holders[0].ClientID != c.ID() || st.Holders[0].Count != 1 ||
		st.FencingToken != 1 || st.TTL <= 0 || st.TTL > relocktest.DefaultWatchdogTimeout {
		t.Fatalf("Inspect = %+v, want one holder of c with count 1, fencing token 1, a TTL up to 1s", st)
	}
	start := time.Now()
	if !srv.Expire("expired") {
		t.Fatal("Expire found nothing held")
	}
	cause := lost(t, held, 2*time.Second)
	t.Logf("lost after %v: %v", time.Since(start), cause)
	if d := time.Since(start); d > relocktest.DefaultWatchdogTimeout/2 {
		t.Errorf("the loss took %v, want within about the watchdog timeout/3", d)
	}
	if err := l.Unlock(ctx); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("Unlock after Expire = %v, want ErrNotHeld", err)
	}
	if ok, err := other.Lock("expired", relock.WithFencing()).TryLock(ctx, 0, 0); !ok || err != nil {
		t.Fatalf("another Client's TryLock after Expire = %v, %v", ok, err)
	}
	if st := srv.Inspect("expired"); st.FencingToken != 2 || st.Holders[0].ClientID != other.ID() {
		t.Fatalf("Inspect = %+v, want the other Client holding with token 2", st)
	}
}

func TestExpireEndsReadHolds(t *testing.T) {
	t.Parallel()
	srv := relocktest.NewServer(t)
	a, b := srv.Client(nil), srv.Client(nil)
	ctx := ctxTimeout(t, 10*time.Second)
	var helds []context.Context
	for _, c := range []*relock.Client{a, b} {
		r := c.ReadWriteLock("rw{1}").ReadLock()
		if err := r.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		held, err := r.HoldContext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		helds = append(helds, held)
	}
	if st := srv.Inspect("rw{1}"); st.Kind != relock.KindReadWriteLock || st.Mode != "read" || len(st.Holders) != 2 {
		t.Fatalf("Inspect = %+v, want two readers", st)
	}
	srv.Expire("rw{1}")
	for _, held := range helds {
		lost(t, held, 2*time.Second)
	}
	if st := srv.Inspect("rw{1}"); st.Locked {
		t.Fatalf("Inspect after Expire = %+v", st)
	}
}

func TestFailRenewalsRiddenOut(t *testing.T) {
	t.Parallel()
	c, srv := relocktest.NewClient(t, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	l := c.Lock("flaky")
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := l.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv.FailRenewals(3) // the first renewal (at 1/3 s) and two retries (each 1/10 s later) fail
	time.Sleep(1500 * time.Millisecond)
	if relocktest.FailingLeft(srv) != 0 {
		t.Fatalf("%d renewals left to fail: the watchdog's renewals were not recognised", relocktest.FailingLeft(srv))
	}
	if held.Err() != nil {
		t.Fatalf("three failed renewals lost the hold: %v", context.Cause(held))
	}
	if n, err := l.HoldCount(ctx); n != 1 || err != nil {
		t.Fatalf("hold count = %d, %v", n, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestFailRenewalsLosesTheHold(t *testing.T) {
	t.Parallel()
	c, srv := relocktest.NewClient(t, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	l := c.FairLock("failing")
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := l.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv.FailRenewals(1000)
	if cause := lost(t, held, 3*time.Second); !strings.Contains(cause.Error(), "not renewed") {
		t.Fatalf("cause = %v, want a renewal timeout", cause)
	}
	srv.FailRenewals(0)
	// The watchdog counts a hold's TTL from before the acquisition was sent, Redis from when it ran: the key
	// may outlive the loss by a moment.
	time.Sleep(50 * time.Millisecond)
	if err := l.Unlock(ctx); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("Unlock = %v, want ErrNotHeld", err)
	}
}

func TestDownAndUp(t *testing.T) {
	t.Parallel()
	c, srv := relocktest.NewClient(t, nil)
	other := srv.Client(nil)
	ctx := ctxTimeout(t, 20*time.Second)
	l := c.Lock("partitioned")
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := l.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv.Down()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = other.Lock("partitioned").TryLock(short, 0, 0)
	cancel()
	if err == nil {
		t.Fatal("TryLock succeeded while the server was down")
	}
	t.Logf("TryLock while down: %v", err)
	lost(t, held, 3*time.Second) // not renewed within the 1 s watchdog timeout
	// The watchdog counts the hold's TTL from before its last renewal was sent, Redis from when it ran.
	for deadline := time.Now().Add(200 * time.Millisecond); srv.Inspect("partitioned").Locked; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Inspect while down = %+v, want the hold expired", srv.Inspect("partitioned"))
		}
	}
	srv.Up()
	// A dial begun while down may fail after Up (CI saw "dial tcp ... i/o timeout" once): the next call
	// reconnects.
	var errs []error
	for {
		err := other.Lock("partitioned").Lock(ctx)
		if err == nil {
			break
		}
		if errs = append(errs, err); len(errs) == 3 || ctx.Err() != nil {
			t.Fatalf("Lock after Up failed %d times: %v", len(errs), errs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(errs) > 0 {
		t.Logf("Lock right after Up: %v (then it reconnected)", errs)
	}
}

func TestReplicaAckIsRefused(t *testing.T) {
	t.Parallel()
	c, srv := relocktest.NewClient(t, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	err := c.Lock("acked", relock.WithReplicaAck(1, 100*time.Millisecond)).Lock(ctx)
	if !errors.Is(err, relock.ErrReplicaAck) || !strings.Contains(err.Error(), "WAIT is not supported by relocktest") {
		t.Fatalf("Lock WithReplicaAck = %v, want ErrReplicaAck saying WAIT is not supported", err)
	}
	if st := srv.Inspect("acked"); st.Locked {
		t.Fatalf("the refused acquisition was not rolled back: %+v", st)
	}
}

func TestMultiLock(t *testing.T) {
	t.Parallel()
	c, srv := relocktest.NewClient(t, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	m := relock.NewMultiLock(c.Lock("a"), c.FairLock("b"), c.ReadWriteLock("c").WriteLock())
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := m.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "c"} {
		if !srv.Inspect(name).Locked {
			t.Fatalf("%s is not locked", name)
		}
	}
	srv.Expire("b")
	lost(t, held, 2*time.Second)
	if err := m.Unlock(ctx); err == nil {
		t.Fatal("Unlock of a MultiLock with a lost part succeeded")
	}
}

func TestRedLock(t *testing.T) {
	t.Parallel()
	var servers []*relocktest.Server
	var parts []relock.Lockable
	for range 3 {
		srv := relocktest.NewServer(t)
		servers = append(servers, srv)
		parts = append(parts, srv.Client(nil).Lock("red"))
	}
	ctx := ctxTimeout(t, 20*time.Second)
	servers[0].Down() // a minority down: still a quorum
	r := relock.NewRedLock(parts, nil)
	if err := r.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := r.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	servers[1].Expire("red") // now only one of three parts is held
	lost(t, held, 2*time.Second)
	if err := r.Unlock(ctx); err == nil { // the part on the server that is down cannot be released
		t.Fatal("Unlock with a server down succeeded")
	}
	servers[0].Up()
	if err := relock.NewRedLock(parts, nil).Lock(ctx); err != nil {
		t.Fatalf("RedLock after Up: %v", err)
	}
}

// A Server from Start is closed by Close, with its Clients; a Client asked of a closed Server panics.
func TestStartClose(t *testing.T) {
	srv, err := relocktest.Start()
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Client(nil)
	srv.Close()
	if err := c.Lock("x").Lock(context.Background()); !errors.Is(err, relock.ErrClosed) {
		t.Fatalf("Lock on a Client of a closed Server = %v, want ErrClosed", err)
	}
	srv.Close()
	defer func() {
		if recover() == nil {
			t.Fatal("Client of a closed Server did not panic")
		}
	}()
	srv.Client(nil)
}

// The in-process server runs relock's scripts as Redis does: a name in use by another kind is refused
// with the same typed errors, and nothing is changed.
func TestKindsAreRefusedAsOnRedis(t *testing.T) {
	t.Parallel()
	c, srv := relocktest.NewClient(t, nil)
	other := srv.Client(nil)
	ctx := ctxTimeout(t, 10*time.Second)
	if err := c.Lock("job").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	var ke *relock.KindError
	if ok, err := other.ReadWriteLock("job").WriteLock().TryLock(ctx, 0, 0); ok || !errors.As(err, &ke) || ke.Found != relock.KindRLock {
		t.Fatalf("WriteLock.TryLock on a Lock's name = %v, %v; want a KindError finding an rlock", ok, err)
	}
	if _, err := other.Semaphore("job").TrySetPermits(ctx, 1); !errors.Is(err, relock.ErrNotASemaphore) {
		t.Fatalf("Semaphore.TrySetPermits on a Lock's name = %v, want ErrNotASemaphore", err)
	}
	if _, err := other.CountDownLatch("batch").TrySetCount(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Lock("batch").ForceUnlock(ctx); !errors.Is(err, relock.ErrNotALock) || !errors.Is(err, relock.ErrWrongKind) {
		t.Fatalf("Lock.ForceUnlock on a latch's name = %v, want ErrNotALock", err)
	}
	if n, err := other.CountDownLatch("batch").Count(ctx); n != 2 || err != nil {
		t.Fatalf("the latch after a refused ForceUnlock: %d, %v", n, err)
	}
	if st := srv.Inspect("job"); st.Kind != relock.KindRLock || len(st.Holders) != 1 {
		t.Fatalf("the Lock after the refusals: %+v", st)
	}
}
