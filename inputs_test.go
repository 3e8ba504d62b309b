package relock_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/faultnet"
	"github.com/relock-go/relock/internal/redistest"
)

// Every error a call returns after its context ended matches ctx.Err(), whatever else failed as it ended:
// here the server is cut off (connections reset, new ones refused, then accepted but stalled), so that
// rueidis re-dials under deadlines of a few milliseconds and dial errors race with the deadline.
func TestErrorsAfterContextEndMatchIt(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := startProxy(t, srv)
	c := clientAt(t, proxy.Addr, nil)
	base := relock.WithOwner(context.Background(), "o")
	l := c.Lock("errs")
	rw := c.ReadWriteLock("errs-rw")
	calls := []func(ctx context.Context) error{
		l.Lock,
		func(ctx context.Context) error { _, err := l.TryLock(ctx, 50*time.Millisecond, 0); return err },
		l.Unlock,
		func(ctx context.Context) error { _, err := l.IsLocked(ctx); return err },
		func(ctx context.Context) error { _, err := l.HoldCount(ctx); return err },
		func(ctx context.Context) error { _, err := l.RemainingTTL(ctx); return err },
		func(ctx context.Context) error { _, err := l.ForceUnlock(ctx); return err },
		rw.ReadLock().Lock,
		func(ctx context.Context) error { _, err := rw.ReadLock().HoldCount(ctx); return err },
		c.FairLock("errs-fair").Lock,
	}
	checked := 0
	for round := 0; round < 300; round++ {
		switch round % 100 {
		case 0:
			proxy.Partition(true) // reset, and refused
		case 40:
			proxy.Partition(false)
			proxy.Stall(faultnet.Downstream, true) // accepted, never answered
			proxy.Cut()
		case 80:
			proxy.Stall(faultnet.Downstream, false)
		}
		ctx, cancel := context.WithTimeout(base, time.Duration(rand.IntN(3000))*time.Microsecond)
		err := calls[round%len(calls)](ctx)
		returned := time.Now()
		dl, _ := ctx.Deadline()
		// A call that failed on its own (EOF while partitioned) just before its deadline may return after
		// it, or the context's timer may fire late on a loaded machine: only a call that returned past its
		// deadline must say the context ended (CI once saw EOF from a call whose context ended as it
		// returned).
		if ctx.Err() != nil && err != nil && !returned.Before(dl) {
			checked++
			if !errors.Is(err, ctx.Err()) {
				t.Errorf("call %d after its context ended: %v, which does not match %v", round%len(calls), err, ctx.Err())
			}
		}
		cancel()
	}
	if checked < 50 {
		t.Fatalf("only %d calls ended with their context", checked)
	}
}

// Durations and options that cannot work are refused with typed errors, before anything is sent.
func TestInvalidDurationsAndOptions(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, d := range []time.Duration{time.Nanosecond, time.Millisecond, relock.MinWatchdogTimeout - time.Millisecond, -time.Second} {
		_, err := relock.New([]string{srv.Addr()}, &relock.Options{WatchdogTimeout: d})
		if !errors.Is(err, relock.ErrInvalidDuration) || !errors.Is(err, relock.ErrInvalidOptions) {
			t.Errorf("New with WatchdogTimeout %v: %v, want ErrInvalidDuration and ErrInvalidOptions", d, err)
		}
		_, err = relock.Wrap(rawClient(t, srv), &relock.Options{WatchdogTimeout: d})
		if !errors.Is(err, relock.ErrInvalidDuration) {
			t.Errorf("Wrap with WatchdogTimeout %v: %v, want ErrInvalidDuration", d, err)
		}
	}
	if c, err := relock.New([]string{srv.Addr()}, &relock.Options{WatchdogTimeout: relock.MinWatchdogTimeout}); err != nil {
		t.Errorf("New with the minimum watchdog timeout: %v", err)
	} else {
		c.Close()
	}

	c := newClient(t, srv, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	for _, opts := range []relock.RedLockOptions{{NodeTimeout: -1}, {Drift: -time.Millisecond}, {RetryDelay: -time.Second}} {
		rl := relock.NewRedLock([]relock.Lockable{c.Lock("rl")}, &opts)
		for name, call := range map[string]func() error{
			"Lock":        func() error { return rl.Lock(ctx) },
			"TryLock":     func() error { _, err := rl.TryLock(ctx, 0, 0); return err },
			"Unlock":      func() error { return rl.Unlock(ctx) },
			"HoldContext": func() error { _, err := rl.HoldContext(ctx); return err },
			"Validity":    func() error { _, err := rl.Validity(ctx); return err },
		} {
			if err := call(); !errors.Is(err, relock.ErrInvalidDuration) {
				t.Errorf("RedLock %+v %s: %v, want ErrInvalidDuration", opts, name, err)
			}
		}
	}
	if n, _ := do(t, rawClient(t, srv), "EXISTS", "rl").AsInt64(); n != 0 {
		t.Fatal("an invalid RedLock wrote its lock")
	}
}

// Making a Client while Redis does not answer (stopped) or is down returns, within the caller's bound, an
// error matching ErrUnavailable (and the context's error when that bound was the context's).
func TestNewWhileRedisIsDownOrStalled(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	addr := srv.Addr()
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer srv.Resume()
	for _, bound := range []time.Duration{50 * time.Millisecond, 300 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		start := time.Now()
		c, err := relock.NewContext(ctx, []string{addr}, nil)
		took := time.Since(start)
		cancel()
		if c != nil {
			c.Close()
		}
		if !errors.Is(err, relock.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("NewContext within %v on a stopped server: %v, want ErrUnavailable and DeadlineExceeded", bound, err)
		}
		if took > bound+500*time.Millisecond {
			t.Errorf("NewContext within %v took %v", bound, took)
		}
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := relock.NewContext(cancelled, []string{addr}, nil); !errors.Is(err, context.Canceled) || !errors.Is(err, relock.ErrUnavailable) {
		t.Errorf("NewContext with an ended context: %v", err)
	}
	// New is bounded by the dial timeout of Options.Redis.
	opts := &relock.Options{}
	opts.Redis.Dialer.Timeout = 200 * time.Millisecond
	start := time.Now()
	if _, err := relock.New([]string{addr}, opts); !errors.Is(err, relock.ErrUnavailable) {
		t.Errorf("New on a stopped server: %v, want ErrUnavailable", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("New with a 200 ms dial timeout took %v", took)
	}
	srv.Resume()
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := relock.New([]string{addr}, nil); !errors.Is(err, relock.ErrUnavailable) {
		t.Errorf("New on a dead server: %v, want ErrUnavailable", err)
	}
}

// Close wakes every waiter at once, those of MultiLock and RedLock sleeping between rounds included.
func TestCloseWakesCompositeWaiters(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	holder := newClient(t, srv, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	for _, name := range []string{"cw1", "cw2"} {
		if err := holder.Lock(name).Lock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c, err := relock.New([]string{srv.Addr()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	multi := relock.NewMultiLock(c.Lock("cw1"), c.Lock("cw2"))
	red := relock.NewRedLock([]relock.Lockable{c.Lock("cw1"), c.Lock("cw2"), c.Lock("cw3")}, &relock.RedLockOptions{RetryDelay: 5 * time.Second})
	results := make(chan error, 2)
	go func() { _, err := multi.TryLock(ctx, 20*time.Second, 0); results <- err }()
	go func() { _, err := red.TryLock(ctx, 20*time.Second, 0); results <- err }()
	time.Sleep(500 * time.Millisecond) // both are between rounds
	closed := time.Now()
	c.Close()
	for range 2 {
		select {
		case err := <-results:
			if !errors.Is(err, relock.ErrClosed) {
				t.Errorf("waiter after Close: %v, want ErrClosed", err)
			}
			if d := time.Since(closed); d > 500*time.Millisecond {
				t.Errorf("a waiter returned %v after Close", d)
			}
		case <-time.After(3 * time.Second):
			t.Fatal("a composite waiter did not return after Close")
		}
	}
}

// A server that wants a password refuses a Client given none (NOAUTH) or a wrong one (WRONGPASS): New says
// where the password goes, matching ErrInvalidOptions, and keeps Redis's reply.
func TestNewSaysWhereThePasswordGoes(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := rawClient(t, srv) // authenticated before the password is set
	do(t, admin, "CONFIG", "SET", "requirepass", "s3cret")
	t.Cleanup(func() { do(t, admin, "CONFIG", "SET", "requirepass", "") })
	for _, tc := range []struct{ addr, reply, says string }{
		{srv.Addr(), "NOAUTH", "the server requires a password: put it in the address"},
		{"redis://:wrong@" + srv.Addr(), "WRONGPASS", "the server refused the user or password given"},
	} {
		_, err := relock.New([]string{tc.addr}, nil)
		var rerr *rueidis.RedisError
		if !errors.Is(err, relock.ErrInvalidOptions) || !errors.As(err, &rerr) || !strings.HasPrefix(rerr.Error(), tc.reply) || !strings.Contains(err.Error(), tc.says) {
			t.Fatalf("New(%q): %v; want ErrInvalidOptions with Redis's %s reply, saying %q", tc.addr, err, tc.reply, tc.says)
		}
		t.Log(err)
	}
	c, err := relock.New([]string{"redis://:s3cret@" + srv.Addr()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}
