package relock_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// runResult starts e.Run(ctx, value, fn) on a new goroutine; its error arrives on the channel.
func runResult(e *relock.Election, ctx context.Context, value string, fn func(context.Context, uint64) error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx, value, fn) }()
	return done
}

// ranFor returns the error Run returned on done, failing t if it did not return within 10 s.
func ranFor(t *testing.T, done <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("Run did not return within 10 s of %s", what)
	}
	return nil
}

// leads campaigns for a candidate "next" on c and fails t unless it leads within 5 s: much less than the
// default watchdog timeout (30 s) the tests' leaders run with, so the leader before it resigned.
func leads(t *testing.T, ctx context.Context, c *relock.Client, name string) {
	t.Helper()
	won := make(chan error, 1)
	next := relock.WithOwner(ctx, "next")
	go func() {
		_, err := c.Election(name).Campaign(next, "next")
		won <- err
	}()
	receive(t, won, 5*time.Second, "another candidate does not lead: the leader did not resign")
	if err := c.Election(name).Resign(next); err != nil {
		t.Fatal(err)
	}
}

// Run calls fn once the owner leads, with its term and a context of its leadership; fn returning ends Run,
// which resigns at once and returns fn's error (nil for nil).
func TestElectionRunEndsWhenFnReturns(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, other := newClient(t, srv, nil), newClient(t, srv, nil)
	ctx := ctxTimeout(t, 60*time.Second)
	const name = "run-returns"
	e := c.Election(name)
	boom := errors.New("boom")
	var term uint64
	err := e.Run(ctx, "10.0.0.1", func(lead context.Context, t2 uint64) error {
		term = t2
		l, err := other.Election(name).Leader(ctx)
		if err != nil || l.Value != "10.0.0.1" || l.Term != t2 {
			t.Errorf("Leader while fn runs = %+v, %v; want 10.0.0.1 with term %d", l, err, t2)
		}
		if lead.Err() != nil {
			t.Errorf("fn's context has ended: %v", context.Cause(lead))
		}
		return boom
	})
	if !errors.Is(err, boom) || term == 0 {
		t.Fatalf("Run = %v (term %d), want fn's error", err, term)
	}
	if _, err := other.Election(name).Leader(ctx); !errors.Is(err, relock.ErrNoLeader) {
		t.Fatalf("Leader after Run returned = %v, want ErrNoLeader", err)
	}
	leads(t, ctx, other, name)

	calls := 0
	if err := e.Run(ctx, "10.0.0.1", func(context.Context, uint64) error { calls++; return nil }); err != nil || calls != 1 {
		t.Fatalf("Run with a fn that returns nil = %v, %d calls; want nil, 1", err, calls)
	}
	leads(t, ctx, other, name)

	// A fn that resigns itself ends Run as well, with what it returned.
	if err := e.Run(ctx, "v", func(lead context.Context, _ uint64) error { return e.Resign(lead) }); err != nil {
		t.Fatalf("Run with a fn that resigns = %v, want nil", err)
	}
	leads(t, ctx, other, name)
}

// A leadership lost while fn runs ends fn's context with ErrLockLost; Run campaigns again and calls fn
// again, with a larger term, never while the first call runs. The loss here is the election's lock
// force-unlocked by another Client (an operator's `relock unlock --force`).
func TestElectionRunCampaignsAgainAfterLoss(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, &relock.Options{WatchdogTimeout: time.Second})
	other := newClient(t, srv, nil)
	ctx := ctxTimeout(t, 60*time.Second)
	const name = "run-lost"
	type call struct {
		term  uint64
		cause error
	}
	started, ended := make(chan uint64, 10), make(chan call, 10)
	var running, overlaps atomic.Int32
	runCtx, shutdown := context.WithCancel(ctx)
	defer shutdown()
	done := runResult(c.Election(name), runCtx, "v", func(lead context.Context, term uint64) error {
		if running.Add(1) > 1 {
			overlaps.Add(1)
		}
		defer running.Add(-1)
		started <- term
		<-lead.Done()
		ended <- call{term, context.Cause(lead)}
		return lead.Err()
	})
	var term1 uint64
	select {
	case term1 = <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("fn was not called")
	}
	if ok, err := other.Lock(name).ForceUnlock(ctx); !ok || err != nil {
		t.Fatalf("ForceUnlock = %v, %v", ok, err)
	}
	select {
	case first := <-ended:
		if !errors.Is(first.cause, relock.ErrLockLost) {
			t.Fatalf("fn's context after the loss: %v, want ErrLockLost", first.cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("fn's context did not end after the leadership was lost")
	}
	select {
	case term2 := <-started:
		if term2 <= term1 {
			t.Fatalf("fn called again with term %d, after %d", term2, term1)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not lead again after the loss")
	}
	if l, err := other.Election(name).Leader(ctx); err != nil || l.Value != "v" {
		t.Fatalf("Leader after the new campaign = %+v, %v", l, err)
	}
	shutdown()
	if err := ranFor(t, done, "its context ended"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if last := <-ended; !errors.Is(last.cause, context.Canceled) || errors.Is(last.cause, relock.ErrLockLost) {
		t.Fatalf("fn's context at shutdown: %v, want context.Canceled", last.cause)
	}
	if n := overlaps.Load(); n > 0 {
		t.Fatalf("fn ran %d times while another call of it ran", n)
	}
	leads(t, ctx, other, name)
}

// When Run's context ends, fn's context ends (not with ErrLockLost), Run returns its error (joined with
// fn's own), and the leadership is resigned at once: a candidate waiting on another Client leads in far
// less than the watchdog timeout.
func TestElectionRunShutdownResignsAtOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil) // the default watchdog timeout: 30 s
	ctx := ctxTimeout(t, 60*time.Second)
	const name = "run-shutdown"
	flush := errors.New("flush failed")
	leading := make(chan struct{})
	var cause atomic.Value
	runCtx, shutdown := context.WithCancel(ctx)
	done := runResult(a.Election(name), runCtx, "a", func(lead context.Context, _ uint64) error {
		close(leading)
		<-lead.Done()
		cause.Store(context.Cause(lead))
		return flush
	})
	select {
	case <-leading:
	case <-time.After(10 * time.Second):
		t.Fatal("the first candidate does not lead")
	}
	standby := make(chan uint64, 1)
	bDone := runResult(b.Election(name), ctx, "b", func(_ context.Context, term uint64) error {
		standby <- term
		return nil
	})
	time.Sleep(200 * time.Millisecond) // b campaigns, and waits
	start := time.Now()
	shutdown()
	err := ranFor(t, done, "its context ended")
	if !errors.Is(err, context.Canceled) || !errors.Is(err, flush) {
		t.Fatalf("Run = %v, want context.Canceled and fn's error", err)
	}
	if c := cause.Load().(error); !errors.Is(c, context.Canceled) || errors.Is(c, relock.ErrLockLost) {
		t.Fatalf("fn's context ended with %v, want context.Canceled", c)
	}
	select {
	case <-standby:
		t.Logf("hand-over after the shutdown: %v", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("the standby does not lead 5 s after the leader's shutdown: the leader did not resign")
	}
	if err := ranFor(t, bDone, "its fn returned"); err != nil {
		t.Fatalf("the standby's Run = %v", err)
	}
}

// Close ends the leadership: fn's context ends with ErrClosed, and Run returns ErrClosed; Run on a closed
// Client fails at once.
func TestElectionRunClose(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	ctx := ctxTimeout(t, 60*time.Second)
	leading := make(chan struct{})
	var cause atomic.Value
	done := runResult(c.Election("run-close"), ctx, "v", func(lead context.Context, _ uint64) error {
		close(leading)
		<-lead.Done()
		cause.Store(context.Cause(lead))
		return lead.Err()
	})
	select {
	case <-leading:
	case <-time.After(10 * time.Second):
		t.Fatal("fn was not called")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ranFor(t, done, "Close"); !errors.Is(err, relock.ErrClosed) {
		t.Fatalf("Run = %v, want ErrClosed", err)
	}
	if c := cause.Load().(error); !errors.Is(c, relock.ErrClosed) || errors.Is(c, relock.ErrLockLost) {
		t.Fatalf("fn's context ended with %v, want ErrClosed", c)
	}
	if err := c.Election("run-close").Run(ctx, "v", func(context.Context, uint64) error { return nil }); !errors.Is(err, relock.ErrClosed) {
		t.Fatalf("Run on a closed Client = %v, want ErrClosed", err)
	}
}

// A fn that panics does not leave its owner leading, renewed for ever: the leadership is resigned.
func TestElectionRunPanicResigns(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, other := newClient(t, srv, nil), newClient(t, srv, nil)
	ctx := ctxTimeout(t, 60*time.Second)
	const name = "run-panic"
	func() {
		defer func() {
			if r := recover(); r != "job failed" {
				t.Fatalf("recovered %v, want fn's panic", r)
			}
		}()
		_ = c.Election(name).Run(ctx, "v", func(context.Context, uint64) error { panic("job failed") })
	}()
	leads(t, ctx, other, name)
}

// Bad input gets typed errors, calls no fn and writes nothing.
func TestElectionRunBadInput(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	called := false
	fn := func(context.Context, uint64) error { called = true; return nil }
	var nilClient *relock.Client
	if err := nilClient.Election("x").Run(ctx, "v", fn); !errors.Is(err, relock.ErrNilClient) {
		t.Errorf("Run on a nil Client = %v", err)
	}
	if err := c.Election("").Run(ctx, "v", fn); !errors.Is(err, relock.ErrInvalidName) {
		t.Errorf("Run with an empty name = %v", err)
	}
	if err := c.Election("x").Run(relock.WithOwner(ctx, "42"), "v", fn); !errors.Is(err, relock.ErrInvalidOwner) {
		t.Errorf("Run with an invalid owner = %v", err)
	}
	if err := c.Election("x").Run(ctx, "v", nil); !errors.Is(err, relock.ErrInvalidOptions) {
		t.Errorf("Run with a nil fn = %v", err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.Election("x").Run(ended, "v", fn); !errors.Is(err, context.Canceled) {
		t.Errorf("Run with an ended context = %v", err)
	}
	if called {
		t.Error("fn was called")
	}
	if n, _ := do(t, rdb, "DBSIZE").AsInt64(); n != 0 {
		t.Fatalf("bad input wrote %d keys", n)
	}
}

// While Redis is down, Run campaigns again and again, backing off: it does not spin (a few Campaigns a
// second, counted by their "relock.acquire" spans, not thousands), and returns once its context ends, with
// its error and the outage's. A leader that loses
// Redis loses its leadership (ErrLockLost), and leads again, its fn called again, once Redis is back.
func TestElectionRunRedisDown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	o := newObserved(t, time.Second)
	c := newClient(t, srv, o.opts)
	campaigns := func() int { return len(o.ended("relock.acquire")) }
	ctx := ctxTimeout(t, 60*time.Second)
	const name = "run-redis-down"

	// Down before Run campaigns: Run returns when its context ends.
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	before := campaigns()
	start := time.Now()
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	err := c.Election(name).Run(short, "v", func(context.Context, uint64) error {
		t.Error("fn called while Redis is down")
		return nil
	})
	cancel()
	took, n := time.Since(start), campaigns()-before
	t.Logf("Run with Redis down for 3 s: %v, %d Campaigns", took, n)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, relock.ErrUnavailable) {
		t.Fatalf("Run = %v, want its context's error and ErrUnavailable", err)
	}
	if took > 10*time.Second {
		t.Fatalf("Run returned %v after it began, its context ended after 3 s", took)
	}
	if n > 30 {
		t.Fatalf("%d Campaigns in 3 s: Run does not back off", n)
	}
	// Whenever the context ends, during a pause or during a Campaign, the outage is in the error.
	var runs sync.WaitGroup
	for i := range 40 {
		runs.Go(func() {
			short, cancel := context.WithTimeout(relock.WithOwner(ctx, fmt.Sprint("o", i)), time.Duration(100+7*i)*time.Millisecond)
			defer cancel()
			err := c.Election(name).Run(short, "v", func(context.Context, uint64) error { return nil })
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, relock.ErrUnavailable) {
				t.Errorf("Run with a context of %v = %v, want its context's error and ErrUnavailable", time.Duration(100+7*i)*time.Millisecond, err)
			}
		})
	}
	runs.Wait()

	// Leading, then down: lost, campaigning again while down, leading again once Redis is back.
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	started, lost := make(chan uint64, 10), make(chan error, 10)
	runCtx, shutdown := context.WithCancel(ctx)
	defer shutdown()
	done := runResult(c.Election(name), runCtx, "v", func(lead context.Context, term uint64) error {
		started <- term
		<-lead.Done()
		lost <- context.Cause(lead)
		return nil
	})
	eventuallyRecv(t, started, 20*time.Second, "fn was not called once Redis was back")
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if cause := eventuallyRecv(t, lost, 10*time.Second, "fn's context did not end after Redis went down"); !errors.Is(cause, relock.ErrLockLost) {
		t.Fatalf("fn's context ended with %v, want ErrLockLost", cause)
	}
	before = campaigns()
	time.Sleep(3 * time.Second)
	n = campaigns() - before
	t.Logf("Run after losing Redis, for 3 s: %d Campaigns", n)
	if n > 30 {
		t.Fatalf("%d Campaigns in 3 s: Run does not back off", n)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	eventuallyRecv(t, started, 20*time.Second, "fn was not called again once Redis was back")
	shutdown()
	if err := ranFor(t, done, "its context ended"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
}

// eventuallyRecv returns the next value on ch, failing t with failure after d.
func eventuallyRecv[T any](t *testing.T, ch <-chan T, d time.Duration, failure string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatal(failure)
	}
	var zero T
	return zero
}

// fn returning while Redis cannot be reached: the resignation cannot be sent (its connection cannot be
// made), and Run returns its error (ErrUnavailable); the leadership still ends for the Client (its watchdog
// stops renewing it) and the release goes on in the background, so that once Redis can be reached again
// another candidate leads at once, rather than never (the Client renewing, for ever, a leadership that
// nobody would resign).
func TestElectionRunResignsWhenRedisIsBack(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := startProxy(t, srv)
	var refuse atomic.Bool
	dial := func(ctx context.Context, dst string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
		if refuse.Load() {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		}
		return d.DialContext(ctx, "tcp", dst)
	}
	c := clientAt(t, proxy.Addr, &relock.Options{Redis: rueidis.ClientOption{DialCtxFn: dial}}) // watchdog timeout: 30 s
	other := newClient(t, srv, nil)
	ctx := ctxTimeout(t, 60*time.Second)
	const name = "run-resign-later"
	err := c.Election(name).Run(ctx, "v", func(context.Context, uint64) error {
		refuse.Store(true)
		proxy.Cut()
		time.Sleep(500 * time.Millisecond) // rueidis sees its connection broken, and fails to dial it again
		return nil
	})
	if !errors.Is(err, relock.ErrUnavailable) {
		t.Fatalf("Run = %v, want the resignation's ErrUnavailable", err)
	}
	t.Logf("Run = %v", err)
	refuse.Store(false)
	leads(t, ctx, other, name)
}

// fn returning when the resignation fails with an error reply (here NOPERM: an ACL that lost DEL, with
// which the release of the leadership's one level deletes the lock; LOADING, while Redis restarts, is the same for Run): Run returns that error,
// and the leadership still ends for the Client, its release left to the background (which gives it up at
// such a reply), so its watchdog stops renewing it: another candidate leads within the watchdog timeout.
// (An Unlock failed by an error reply leaves the hold as it was, for its owner to try again: Run, which
// returns, must not leave its owner leading, renewed for ever.)
func TestElectionRunResignRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := rawClient(t, srv)
	if err := do(t, admin, append([]string{"ACL", "SETUSER", "runner", ">secret"}, documentedACL(t)...)...).Error(); err != nil {
		t.Fatal(err)
	}
	opts := &relock.Options{WatchdogTimeout: time.Second, Redis: rueidis.ClientOption{Username: "runner", Password: "secret"}}
	c, other := newClient(t, srv, opts), newClient(t, srv, nil)
	ctx := ctxTimeout(t, 60*time.Second)
	const name = "app:run-resign-refused"
	err := c.Election(name).Run(ctx, "v", func(context.Context, uint64) error {
		if err := do(t, admin, "ACL", "SETUSER", "runner", "-del").Error(); err != nil {
			t.Fatal(err)
		}
		return nil
	})
	var rerr *rueidis.RedisError
	if !errors.As(err, &rerr) {
		t.Fatalf("Run = %v, want the resignation's error reply", err)
	}
	t.Logf("Run = %v", err)
	leads(t, ctx, other, name) // within 5 s; the leader's watchdog timeout is 1 s
}
