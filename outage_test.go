package relock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/faultnet"
	"github.com/relock-go/relock/internal/redistest"
)

// call is one operation of the API that asks Redis.
type call struct {
	name string
	fn   func(ctx context.Context) error
}

// everyCall returns every operation of c that asks Redis, each on a name of its own (prefix + a suffix).
func everyCall(c *relock.Client, prefix string) []call {
	l := c.Lock(prefix + "lock")
	fair := c.FairLock(prefix + "fair")
	rw := c.ReadWriteLock(prefix + "rw")
	sem := c.Semaphore(prefix + "sem")
	psem := c.PermitSemaphore(prefix + "psem")
	latch := c.CountDownLatch(prefix + "latch")
	el := c.Election(prefix + "election")
	multi := relock.NewMultiLock(c.Lock(prefix+"m1"), c.Lock(prefix+"m2"))
	red := relock.NewRedLock([]relock.Lockable{c.Lock(prefix + "r"), c.Lock(prefix + "r"), c.Lock(prefix + "r")}, nil)
	return []call{
		{"RLock.Lock", l.Lock},
		{"RLock.LockWithLease", func(ctx context.Context) error { return l.LockWithLease(ctx, time.Minute) }},
		{"RLock.TryLock", func(ctx context.Context) error { _, err := l.TryLock(ctx, 0, 0); return err }},
		{"RLock.TryLock(wait)", func(ctx context.Context) error { _, err := l.TryLock(ctx, time.Minute, 0); return err }},
		{"RLock.Unlock", l.Unlock},
		{"RLock.ForceUnlock", func(ctx context.Context) error { _, err := l.ForceUnlock(ctx); return err }},
		{"RLock.IsLocked", func(ctx context.Context) error { _, err := l.IsLocked(ctx); return err }},
		{"RLock.IsHeld", func(ctx context.Context) error { _, err := l.IsHeld(ctx); return err }},
		{"RLock.HoldCount", func(ctx context.Context) error { _, err := l.HoldCount(ctx); return err }},
		{"RLock.RemainingTTL", func(ctx context.Context) error { _, err := l.RemainingTTL(ctx); return err }},
		{"FairLock.Lock", fair.Lock},
		{"FairLock.IsLocked", func(ctx context.Context) error { _, err := fair.IsLocked(ctx); return err }},
		{"FairLock.HoldCount", func(ctx context.Context) error { _, err := fair.HoldCount(ctx); return err }},
		{"ReadLock.Lock", rw.ReadLock().Lock},
		{"ReadLock.IsLocked", func(ctx context.Context) error { _, err := rw.ReadLock().IsLocked(ctx); return err }},
		{"ReadLock.HoldCount", func(ctx context.Context) error { _, err := rw.ReadLock().HoldCount(ctx); return err }},
		{"WriteLock.Lock", rw.WriteLock().Lock},
		{"WriteLock.IsLocked", func(ctx context.Context) error { _, err := rw.WriteLock().IsLocked(ctx); return err }},
		{"WriteLock.RemainingTTL", func(ctx context.Context) error { _, err := rw.WriteLock().RemainingTTL(ctx); return err }},
		{"Semaphore.TrySetPermits", func(ctx context.Context) error { _, err := sem.TrySetPermits(ctx, 1); return err }},
		{"Semaphore.AddPermits", func(ctx context.Context) error { return sem.AddPermits(ctx, 1) }},
		{"Semaphore.Acquire", func(ctx context.Context) error { return sem.Acquire(ctx, 1) }},
		{"Semaphore.Release", func(ctx context.Context) error { return sem.Release(ctx, 1) }},
		{"Semaphore.DrainPermits", func(ctx context.Context) error { _, err := sem.DrainPermits(ctx); return err }},
		{"Semaphore.AvailablePermits", func(ctx context.Context) error { _, err := sem.AvailablePermits(ctx); return err }},
		{"PermitSemaphore.TrySetPermits", func(ctx context.Context) error { _, err := psem.TrySetPermits(ctx, 1); return err }},
		{"PermitSemaphore.AddPermits", func(ctx context.Context) error { return psem.AddPermits(ctx, 1) }},
		{"PermitSemaphore.Acquire", func(ctx context.Context) error { _, err := psem.Acquire(ctx); return err }},
		{"PermitSemaphore.AvailablePermits", func(ctx context.Context) error { _, err := psem.AvailablePermits(ctx); return err }},
		{"CountDownLatch.TrySetCount", func(ctx context.Context) error { _, err := latch.TrySetCount(ctx, 1); return err }},
		{"CountDownLatch.CountDown", latch.CountDown},
		{"CountDownLatch.Count", func(ctx context.Context) error { _, err := latch.Count(ctx); return err }},
		{"CountDownLatch.Await", latch.Await},
		{"Election.Campaign", func(ctx context.Context) error { _, err := el.Campaign(ctx, "v"); return err }},
		{"Election.Leader", func(ctx context.Context) error { _, err := el.Leader(ctx); return err }},
		{"Election.Resign", el.Resign},
		{"Election.Observe", func(ctx context.Context) error { _, err := el.Observe(ctx); return err }},
		{"Client.Inspect", func(ctx context.Context) error { _, err := c.Inspect(ctx, prefix+"lock"); return err }},
		{"Client.InspectSemaphore", func(ctx context.Context) error { _, err := c.InspectSemaphore(ctx, prefix+"sem"); return err }},
		{"MultiLock.Lock", multi.Lock},
		{"MultiLock.TryLock", func(ctx context.Context) error { _, err := multi.TryLock(ctx, 0, 0); return err }},
		{"MultiLock.Unlock", multi.Unlock},
		{"RedLock.Lock", red.Lock},
		{"RedLock.TryLock", func(ctx context.Context) error { _, err := red.TryLock(ctx, 0, 0); return err }},
		{"RedLock.Unlock", red.Unlock},
	}
}

// result is what one call returned, and how long it took.
type result struct {
	call
	err  error
	took time.Duration
	done bool // returned within the test's bound
}

// runAll runs every call at once, each with ctx on a goroutine of its own (its owner), and returns their
// results, waiting for each up to bound.
func runAll(ctx context.Context, calls []call, bound time.Duration) []result {
	results := make([]result, len(calls))
	var wg sync.WaitGroup
	deadline := time.Now().Add(bound)
	for i, cl := range calls {
		wg.Add(1)
		got := make(chan result, 1)
		go func() {
			start := time.Now()
			err := cl.fn(ctx)
			got <- result{call: cl, err: err, took: time.Since(start), done: true}
		}()
		go func() {
			defer wg.Done()
			select {
			case r := <-got:
				results[i] = r
			case <-time.After(time.Until(deadline)):
				results[i] = result{call: cl, took: bound}
			}
		}()
	}
	wg.Wait()
	return results
}

// waitRefused waits until c's calls meet a refused connection (the connections it had are gone), asking
// with a script run (Inspect), which rueidis never retries.
func waitRefused(t *testing.T, c *relock.Client) {
	t.Helper()
	// rueidis spreads calls over several connections: each must have met its end, and redialled.
	eventually(t, 10*time.Second, "calls meet a refused connection", func() bool {
		for range 16 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := c.Inspect(ctx, "probe")
			cancel()
			if !errors.Is(err, syscall.ECONNREFUSED) {
				return false
			}
		}
		return true
	})
}

// With Redis down, every operation (reads included) made with a context without deadline returns at once
// with an error matching ErrUnavailable that wraps the cause (connection refused). rueidis retries
// read-only commands until their context ends: IsLocked, RemainingTTL, HoldCount, AvailablePermits and
// Count were still blocked after 8 s (one IsLocked after 110 s). New's client does not retry.
func TestEveryCallFailsFastWhileRedisIsDown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, &relock.Options{WatchdogTimeout: 5 * time.Second})
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	waitRefused(t, c)
	const bound = 3 * time.Second // measured: a few milliseconds each
	for _, r := range runAll(context.Background(), everyCall(c, "down:"), bound) {
		switch {
		case !r.done:
			t.Errorf("%s with context.Background() on a dead server: still blocked after %v", r.name, bound)
		case !errors.Is(r.err, relock.ErrUnavailable) || !errors.Is(r.err, syscall.ECONNREFUSED):
			t.Errorf("%s on a dead server: %v, want ErrUnavailable wrapping connection refused", r.name, r.err)
		default:
			t.Logf("%s: %v in %v", r.name, r.err, r.took.Round(time.Millisecond))
		}
	}
}

// On a rueidis client given to Wrap, which retries read-only commands until their context ends, relock
// bounds its reads without deadline (10 s, documented on Wrap); every other call fails at once, as on
// New's client.
func TestEveryCallOfAWrappedClientEndsWhileRedisIsDown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	c, err := relock.Wrap(rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	waitRefused(t, c)
	const bound = 20 * time.Second // the reads' 10 s, and room for a loaded machine
	for _, r := range runAll(context.Background(), everyCall(c, "wrapped:"), bound) {
		switch {
		case !r.done:
			t.Errorf("%s with context.Background() on a dead server, through Wrap: still blocked after %v", r.name, bound)
		case !errors.Is(r.err, relock.ErrUnavailable):
			t.Errorf("%s on a dead server, through Wrap: %v, want ErrUnavailable", r.name, r.err)
		default:
			t.Logf("%s: %v in %v", r.name, r.err, r.took.Round(time.Millisecond))
		}
	}
}

// A call without deadline on a connection whose server stopped answering (paused) fails, matching
// ErrUnavailable, once rueidis gives the connection up: after ConnWriteTimeout (here 1 s; by default
// 10 s).
func TestCallWithoutDeadlineEndsWhenRedisStopsAnswering(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	opts := &relock.Options{}
	opts.Redis.ConnWriteTimeout = time.Second
	c := newClient(t, srv, opts)
	l := c.Lock("paused")
	if _, err := l.IsLocked(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer srv.Resume()
	for _, r := range runAll(context.Background(), []call{
		{"IsLocked", func(ctx context.Context) error { _, err := l.IsLocked(ctx); return err }},
		{"Lock", l.Lock},
	}, 10*time.Second) {
		if !r.done || !errors.Is(r.err, relock.ErrUnavailable) {
			t.Errorf("%s on a paused server: %v after %v, want ErrUnavailable", r.name, r.err, r.took)
		}
		t.Logf("%s: %v in %v", r.name, r.err, r.took.Round(time.Millisecond))
	}
}

// An acquisition refused a connection (Redis down) surely never ran: it leaves nothing to undo, and the
// owner's next call on the lock does not wait for an undo. Before, a dial refusal was an unknown outcome:
// the next call waited for a background undo for as long as the hold would have lived (30 s with the
// default watchdog timeout).
func TestRefusedAttemptLeavesNothingToUndo(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil) // the default watchdog timeout, 30 s
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	waitRefused(t, c)
	ctx, cancel := context.WithTimeout(relock.WithOwner(context.Background(), "o"), 10*time.Second)
	defer cancel()
	l := c.Lock("refused")
	start := time.Now()
	if err := l.Lock(ctx); !errors.Is(err, relock.ErrUnavailable) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Lock on a dead server: %v, want ErrUnavailable wrapping connection refused", err)
	}
	for _, next := range []call{
		{"TryLock", func(ctx context.Context) error { _, err := l.TryLock(ctx, 0, 0); return err }},
		{"Lock", l.Lock},
		{"HoldCount", func(ctx context.Context) error { _, err := l.HoldCount(ctx); return err }},
	} {
		if err := next.fn(ctx); !errors.Is(err, relock.ErrUnavailable) {
			t.Errorf("%s after a refused Lock: %v, want ErrUnavailable", next.name, err)
		}
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("a refused Lock, then three calls of its owner, took %v", took)
	}
}

// Every composite call returns by its context's deadline, its servers down or stalled. Before, a failed
// round waited for its parts' undos past the deadline: MultiLock.Lock with a 500 ms context returned after
// 1.0 s, then 1.5 s.
func TestCompositeCallsReturnByTheirDeadline(t *testing.T) {
	t.Parallel()
	servers := redistest.StartN(t, 3)
	var parts, nodes []relock.Lockable
	for i, srv := range servers {
		c := newClient(t, srv, nil)
		parts = append(parts, c.Lock(fmt.Sprintf("dl%d", i)))
		nodes = append(nodes, c.Lock("dl-red"))
	}
	multi := relock.NewMultiLock(parts...)
	red := relock.NewRedLock(nodes, nil)
	calls := []call{
		{"MultiLock.Lock", multi.Lock},
		{"MultiLock.TryLock", func(ctx context.Context) error { _, err := multi.TryLock(ctx, time.Minute, 0); return err }},
		{"MultiLock.Unlock", multi.Unlock},
		{"RedLock.Lock", red.Lock},
		{"RedLock.TryLock", func(ctx context.Context) error { _, err := red.TryLock(ctx, time.Minute, 0); return err }},
		{"RedLock.Unlock", red.Unlock},
	}
	const timeout, slack = 300 * time.Millisecond, 600 * time.Millisecond
	check := func(state string) {
		owner := relock.WithOwner(context.Background(), "o")
		for round := 0; round < 2; round++ { // the same owner again: earlier rounds' undos must not hold it up
			for _, cl := range calls {
				ctx, cancel := context.WithTimeout(owner, timeout)
				start := time.Now()
				err := cl.fn(ctx)
				took := time.Since(start)
				cancel()
				if took > timeout+slack {
					t.Errorf("%s, servers %s, round %d: returned after %v with a %v context (%v)", cl.name, state, round, took, timeout, err)
				}
				if err == nil {
					t.Errorf("%s, servers %s: no error", cl.name, state)
				}
			}
		}
	}
	for _, srv := range servers {
		if err := srv.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	check("paused")
	for _, srv := range servers {
		if err := srv.Resume(); err != nil {
			t.Fatal(err)
		}
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	check("killed")
}

// startSleep makes srv sleep for d (DEBUG SLEEP), from a connection of its own, and returns once the
// sleep has begun; the returned channel is closed when it is over.
func startSleep(t *testing.T, srv *redistest.Server, d time.Duration) <-chan struct{} {
	t.Helper()
	rdb, probe := rawClient(t, srv), rawClient(t, srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = rdb.Do(context.Background(), rdb.B().Arbitrary("DEBUG", "SLEEP").Args(fmt.Sprintf("%.3f", d.Seconds())).Build()).Error()
	}()
	eventually(t, 5*time.Second, "the server sleeps", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		return probe.Do(ctx, probe.B().Ping().Build()).Error() != nil
	})
	return done
}

// oneConnection makes a Client's rueidis client use one connection for its pipelined calls (rueidis
// spreads a single server's calls over two by default, at random), so that two calls surely share it.
func oneConnection() *relock.Options {
	opts := &relock.Options{}
	opts.Redis.ForceSingleClient = true
	opts.Redis.PipelineMultiplex = -1
	return opts
}

// One caller's deadline costs other callers nothing: during a 400 ms stall of Redis, a TryLock whose
// 100 ms context ends does not break the connection it shares with a Semaphore.Acquire made with
// context.Background(), which gets its permit once Redis answers. Before, rueidis ran the TryLock alone on
// its connection under the connection's deadline, whose expiry closed the connection: the Acquire failed
// with "the reply was lost: the permits may have been taken" although nothing was taken (on one
// connection, every time; with rueidis's default two per server, when both calls went to the same one).
func TestAnotherCallersDeadlineBreaksNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for round := 0; round < 6; round++ {
		opts := oneConnection()
		if round%2 == 1 {
			opts = nil
		}
		c := newClient(t, srv, opts) // a new Client: its connection has not pipelined yet
		name := fmt.Sprintf("stranger:%d", round)
		sem := c.Semaphore(name + ":sem")
		ctx := ctxTimeout(t, 20*time.Second)
		if _, err := sem.TrySetPermits(ctx, 1); err != nil {
			t.Fatal(err)
		}
		sleeping := startSleep(t, srv, 400*time.Millisecond)
		short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		tried := make(chan error, 1)
		go func() { _, err := c.Lock(name).TryLock(short, 0, 0); tried <- err }()
		time.Sleep(20 * time.Millisecond) // the TryLock is sent first
		acquired := make(chan error, 1)
		go func() { acquired <- sem.Acquire(context.Background(), 1) }()
		if err := <-tried; !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("round %d: TryLock during the stall: %v, want DeadlineExceeded", round, err)
		}
		cancel()
		if err := receiveWithin(acquired, 10*time.Second); err != nil {
			t.Fatalf("round %d: Acquire(context.Background()) beside a TryLock whose deadline passed: %v", round, err)
		}
		<-sleeping
		if n, err := sem.AvailablePermits(ctx); err != nil || n != 0 {
			t.Fatalf("round %d: after the Acquire, %d permits available (%v), want 0", round, n, err)
		}
		if err := sem.Release(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
}

// One caller's deadline costs other callers nothing while a connection is being made either: a call that
// waits for a connection another call is dialling, whose context ends before the (stalled) server answers
// the handshake, makes the connection again under its own context, and gets its answer. Before, it failed
// with the other call's context's error, taken for a broken connection ("the reply was lost").
func TestAnotherCallersDeadlineDuringADial(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, oneConnection())
	ctx := ctxTimeout(t, 20*time.Second)
	sem := c.Semaphore("dial:sem")
	if _, err := sem.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// Calls at once, so that the connection pipelines (rueidis then reads it all the time, and sees it
	// closed when it is).
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = sem.AvailablePermits(ctx) }()
	}
	wg.Wait()
	// Close the Client's connections, then stall the server: the next call dials again, and the handshake
	// waits for the server.
	rdb := rawClient(t, srv)
	do(t, rdb, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
	time.Sleep(300 * time.Millisecond) // rueidis sees its connection closed (at once: it reads it all the time)
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	tried := make(chan error, 1)
	go func() { _, err := c.Lock("dial").TryLock(short, 0, 0); tried <- err }()
	time.Sleep(20 * time.Millisecond) // the TryLock starts the dial
	acquired := make(chan error, 1)
	go func() { acquired <- sem.Acquire(context.Background(), 1) }()
	t.Logf("TryLock during the stall: %v", <-tried)
	time.Sleep(300 * time.Millisecond)
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := receiveWithin(acquired, 10*time.Second); err != nil {
		t.Fatalf("Acquire(context.Background()) waiting for a dial whose caller's deadline passed: %v", err)
	}
	if n, err := sem.AvailablePermits(ctx); err != nil || n != 0 {
		t.Fatalf("after the Acquire, %d permits available (%v), want 0", n, err)
	}
}

func receiveWithin(ch <-chan error, d time.Duration) error {
	select {
	case err := <-ch:
		return err
	case <-time.After(d):
		return fmt.Errorf("no answer within %v", d)
	}
}

// Configuration mistakes are ErrInvalidOptions with a message that says what is wrong; redis:// and
// rediss:// URLs are accepted.
func TestNewAddresses(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, tc := range []struct {
		addrs []string
		says  string
	}{
		{[]string{}, "no Redis address"},
		{nil, "no Redis address"},
		{[]string{"127.0.0.1"}, "missing port"},
		{[]string{"127.0.0.1:"}, "missing port"},
		{[]string{srv.Addr(), "redis://" + srv.Addr()}, "the only address"},
		{[]string{"redis://" + srv.Addr() + "/x"}, "invalid database"},
		{[]string{"http://" + srv.Addr()}, "invalid URL scheme"},
	} {
		c, err := relock.New(tc.addrs, nil)
		if c != nil {
			c.Close()
		}
		if !errors.Is(err, relock.ErrInvalidOptions) || errors.Is(err, relock.ErrUnavailable) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("New(%q) = %v, want ErrInvalidOptions saying %q", tc.addrs, err, tc.says)
		}
	}
	if _, err := relock.New([]string{"redis://:secret@" + srv.Addr() + "/x"}, nil); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("New with a bad URL: %v, want an error that does not show the password", err)
	}
	c, err := relock.New([]string{"redis://" + srv.Addr() + "/3"}, nil)
	if err != nil {
		t.Fatalf("New with a redis:// URL: %v", err)
	}
	defer c.Close()
	ctx := ctxTimeout(t, 10*time.Second)
	if err := c.Lock("url").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, SelectDB: 3, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	if n, _ := do(t, rdb, "EXISTS", "url").AsInt64(); n != 1 {
		t.Error("the lock is not in the URL's database")
	}
	if n, _ := do(t, rawClient(t, srv), "EXISTS", "url").AsInt64(); n != 0 {
		t.Error("the lock is in database 0")
	}

	_, addr, cfg := startTLS(t)
	tc, err := relock.New([]string{"rediss://" + addr}, &relock.Options{Redis: rueidis.ClientOption{TLSConfig: cfg}})
	if err != nil {
		t.Fatalf("New with a rediss:// URL: %v", err)
	}
	defer tc.Close()
	if _, err := tc.Lock("tls-url").IsLocked(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := relock.New([]string{"rediss://" + addr}, nil); err == nil {
		t.Error("New with a rediss:// URL accepted a certificate it cannot verify")
	}
}

// Messages carry relock's prefix once, whatever they wrap: outages, ended contexts, composites' parts,
// invalid options, lost holds.
func TestErrorMessagesHaveOnePrefix(t *testing.T) {
	t.Parallel()
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	// Lost holds' causes.
	l := c.Lock("prefix")
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	hold, err := l.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	for _, cl := range everyCall(c, "ended:") {
		add(cl.fn(ended))
	}
	add(c.Lock("prefix2").Unlock(ended))
	_, err = relock.New(nil, nil)
	add(err)
	_, err = relock.New([]string{"x"}, &relock.Options{WatchdogTimeout: time.Millisecond})
	add(err)
	_, err = relock.New([]string{srv.Addr()}, &relock.Options{FairLockWaitTimeout: -1})
	add(err)
	add(relock.NewMultiLock().Lock(ctx))
	add(relock.NewRedLock(nil, nil).Lock(ctx))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	<-hold.Done()
	if cause := context.Cause(hold); !errors.Is(cause, relock.ErrClosed) {
		t.Fatalf("the hold's cause after Close: %v", cause)
	} else {
		add(cause)
	}
	add(l.Lock(ctx))

	d := newClient(t, srv, nil)
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	waitRefused(t, d)
	for _, r := range runAll(ctxTimeout(t, 2*time.Second), everyCall(d, "down:"), 10*time.Second) {
		add(r.err)
	}
	deadline, stop := context.WithTimeout(ctx, 50*time.Millisecond)
	defer stop()
	for _, r := range everyCall(d, "deadline:") {
		add(r.fn(deadline))
	}
	if len(errs) < 80 {
		t.Fatalf("only %d errors rendered", len(errs))
	}
	seen := map[string]bool{}
	for _, err := range errs {
		for _, line := range strings.Split(err.Error(), "\n") {
			if n := strings.Count(line, "relock:"); n > 1 && !seen[line] {
				seen[line] = true
				t.Errorf("%q: relock: %d times", line, n)
			}
		}
	}
	var sample []string
	for _, err := range errs[:5] {
		sample = append(sample, err.Error())
	}
	sort.Strings(sample)
	t.Logf("e.g. %q", sample)
}

// An owner's next call on a lock does not wait for the undo of its earlier acquisition whose reply was lost
// while that undo cannot reach Redis: it fails within about a second, matching ErrUnavailable, and sends
// nothing. Before, it waited for the undo until the hold it might undo would have expired (30 s with the
// default watchdog timeout); once Redis answers, the undo completes and the owner's calls go through.
func TestNextCallDoesNotWaitForAnUndoRedisCannotAnswer(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil) // the default watchdog timeout, 30 s
	owner := relock.WithOwner(context.Background(), "o")
	l := c.Lock("stuck-undo")
	lost := func(state string) {
		t.Helper()
		short, cancel := context.WithTimeout(owner, 200*time.Millisecond)
		defer cancel()
		if err := l.Lock(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock on a paused server: %v, want DeadlineExceeded", err)
		}
	}
	next := func(state string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(owner, 20*time.Second)
		defer cancel()
		start := time.Now()
		for _, cl := range []call{
			{"Lock", l.Lock},
			{"TryLock", func(ctx context.Context) error { _, err := l.TryLock(ctx, 0, 0); return err }},
		} {
			if err := cl.fn(ctx); !errors.Is(err, relock.ErrUnavailable) {
				t.Errorf("%s after a lost reply, server %s: %v, want ErrUnavailable", cl.name, state, err)
			}
		}
		if took := time.Since(start); took > 6*time.Second {
			t.Errorf("two calls after a lost reply, server %s, took %v", state, took)
		}
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	lost("paused")
	next("paused")
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 20*time.Second)
	eventually(t, 10*time.Second, "the owner locks once Redis answers", func() bool {
		return l.Lock(relock.WithOwner(ctx, "o")) == nil
	})
	if err := l.Unlock(relock.WithOwner(ctx, "o")); err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	lost("paused")
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	next("killed")
}

// A call that finds its connection being dialled again returns by its own deadline even when no call saw
// the connection break: New's client reads a connection that pipelines all the time, and dials it again
// as soon as it breaks. Here the connections are reset while nothing is in flight, the server then
// accepts connections and never answers, and a call without a deadline re-dials (rueidis's 5 s dial
// timeout): calls with a 200 ms deadline made meanwhile return within it. Before, they waited for that
// dial (4.9 s): relock guarded calls only after one of its own calls had met a broken connection.
func TestCallsDuringAQuietRedialKeepTheirDeadline(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := startProxy(t, srv)
	c := clientAt(t, proxy.Addr, oneConnection())
	ctx := ctxTimeout(t, 20*time.Second)
	var wg sync.WaitGroup
	for i := range 20 { // calls at once: the connection pipelines
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = c.Lock(fmt.Sprint("warm", i)).IsLocked(ctx) }()
	}
	wg.Wait()
	proxy.Stall(faultnet.Downstream, true)
	proxy.Cut()
	time.Sleep(200 * time.Millisecond) // rueidis sees the connection reset; no call of relock's does
	slow := make(chan struct{})
	go func() {
		defer close(slow)
		_, _ = c.Lock("slow").IsLocked(context.Background()) // dials into the stall
	}()
	defer func() {
		proxy.Stall(faultnet.Downstream, false)
		proxy.Cut()
		<-slow
	}()
	time.Sleep(100 * time.Millisecond)
	var calls sync.WaitGroup
	for i := range 8 {
		calls.Add(1)
		go func() {
			defer calls.Done()
			opCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := c.Lock(fmt.Sprint("quick", i)).IsLocked(opCtx)
			if d := time.Since(start); d > time.Second {
				t.Errorf("IsLocked with a 200 ms deadline returned after %v (%v)", d, err)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("IsLocked = %v, want context.DeadlineExceeded", err)
			}
		}()
	}
	calls.Wait()
}

// An acquisition held up on its connection (the link stalled both ways) whose context ended is undone in
// the background. The undo must go on until Redis answers: the attempt can reach Redis as late as the
// connection lives, long after the lease it asked for would have run out had it arrived at once. Here the
// stall outlasts the lease; when it ends, the held-up attempt arrives and takes the lock, and the undo,
// which arrives with it, gives it back (or, arriving first, makes it change nothing). Before, the undo
// stopped once the lease would have run out: the owner then held, for a whole lease, a lock it was told
// it did not get (safety/explore, ReadWriteLock).
func TestAcquisitionHeldUpPastItsLeaseIsStillUndone(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := startProxy(t, srv)
	c := clientAt(t, proxy.Addr, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	for _, kind := range []string{"lock", "read"} {
		name := "held-up-" + kind
		l := c.Lock(name)
		lockWithLease := l.LockWithLease
		if kind == "read" {
			lockWithLease = c.ReadWriteLock(name).ReadLock().LockWithLease
		}
		if err := l.Lock(ctx); err != nil { // a connection made
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		const lease = 400 * time.Millisecond
		proxy.Stall(faultnet.Upstream, true)
		proxy.Stall(faultnet.Downstream, true)
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		err := lockWithLease(short, lease)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: LockWithLease through a stalled link = %v, want its context's error", kind, err)
		}
		time.Sleep(3 * lease)
		proxy.Stall(faultnet.Upstream, false)
		proxy.Stall(faultnet.Downstream, false)
		time.Sleep(lease / 2) // the attempt has arrived; its lease has not run out
		if n, err := rdb.Do(ctx, rdb.B().Exists().Key(name).Build()).AsInt64(); err != nil || n != 0 {
			t.Fatalf("%s: %v after the stall (%d, %v): the held-up attempt took the lock, and nothing undid it", kind, name, n, err)
		}
		if n, err := l.HoldCount(ctx); err != nil || n != 0 {
			t.Fatalf("%s: HoldCount = %d, %v; want 0", kind, n, err)
		}
	}
}

// The same for a PermitSemaphore, whose give-back stops after the watchdog timeout: an acquisition held up
// past it must not keep a permit nobody holds when it arrives (a permit's expiry is set when it is asked
// for, so a late one arrives expired, or nearly).
func TestPermitHeldUpPastTheWatchdogTimeoutIsStillGivenBack(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := startProxy(t, srv)
	c := clientAt(t, proxy.Addr, &relock.Options{WatchdogTimeout: time.Second})
	ctx := ctxTimeout(t, 20*time.Second)
	s := c.PermitSemaphore("held-up-permit")
	if ok, err := s.TrySetPermits(ctx, 1); !ok || err != nil {
		t.Fatalf("TrySetPermits = %v, %v", ok, err)
	}
	proxy.Stall(faultnet.Upstream, true)
	proxy.Stall(faultnet.Downstream, true)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err := s.Acquire(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire through a stalled link = %v, want its context's error", err)
	}
	time.Sleep(2 * time.Second) // past the watchdog timeout
	proxy.Stall(faultnet.Upstream, false)
	proxy.Stall(faultnet.Downstream, false)
	time.Sleep(300 * time.Millisecond) // the acquisition has arrived; a permit it took would not have expired
	if n, err := s.AvailablePermits(ctx); err != nil || n != 1 {
		t.Fatalf("AvailablePermits after the stall = %d, %v; want 1: the held-up acquisition kept a permit", n, err)
	}
}

// A call that comes while another call's dial waits for a stalled server's handshake returns at its own
// deadline, however long after the last broken connection that dial comes: rueidis dials lazily, at the
// next call, and the calls that wait for that dial meanwhile ignore their contexts. (Found by the safety
// explorer: a CountDownLatch.TryAwait returned 620 ms after its deadline.)
func TestCallDuringALateDialReturnsAtItsDeadline(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	opts := oneConnection()
	opts.Redis.Dialer.Timeout = 800 * time.Millisecond // the guard's window after a break: 1.6 s
	c := newClient(t, srv, opts)
	ctx := ctxTimeout(t, 20*time.Second)
	if _, err := c.Lock("late-dial").IsLocked(ctx); err != nil {
		t.Fatal(err)
	}
	rdb := rawClient(t, srv)
	do(t, rdb, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
	time.Sleep(2500 * time.Millisecond) // past the window; rueidis does not dial until a call needs it
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Resume(); err != nil {
			t.Fatal(err)
		}
	}()
	dialer, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go func() { _, _ = c.Lock("late-dial").IsLocked(dialer) }() // dials; the handshake waits for the server
	time.Sleep(50 * time.Millisecond)
	short, cancelShort := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancelShort()
	start := time.Now()
	_, err := c.Lock("late-dial").IsLocked(short)
	if took := time.Since(start); took > 400*time.Millisecond {
		t.Fatalf("a call with a 100 ms context returned after %v (%v), waiting for another call's dial", took, err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a call with a 100 ms context during a stalled dial = %v, want context.DeadlineExceeded", err)
	}
}

// gateHead is a Client c, reached through the proxy p, whose gate for the lock name has a head: owner a's
// Lock, waiting for another Client's hold (a 30 s watchdog timeout: it sleeps on that TTL).
type gateHead struct {
	p         *faultnet.Proxy
	c, holder *relock.Client
	ctx       context.Context
	name      string
	aDone     chan error
}

func newGateHead(t *testing.T, name string) *gateHead {
	t.Helper()
	srv := redistest.Start(t)
	p := startProxy(t, srv)
	g := &gateHead{p: p, c: clientAt(t, p.Addr, nil), holder: newClient(t, srv, nil), ctx: ctxTimeout(t, 30*time.Second),
		name: name, aDone: make(chan error, 1)}
	if err := g.holder.Lock(name).Lock(g.ctx); err != nil {
		t.Fatal(err)
	}
	actx, stop := context.WithCancel(relock.WithOwner(g.ctx, "a"))
	t.Cleanup(stop)
	go func() { g.aDone <- g.c.Lock(name).Lock(actx) }()
	time.Sleep(300 * time.Millisecond) // a waits, as the gate's head
	return g
}

// end lets Redis answer again, releases the holder's hold, and checks that a gets the lock.
func (g *gateHead) end(t *testing.T) {
	t.Helper()
	g.p.Stall(faultnet.Upstream, false)
	g.p.Stall(faultnet.Downstream, false)
	if err := g.p.Up(); err != nil {
		t.Fatal(err)
	}
	if err := g.holder.Lock(g.name).Unlock(g.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-g.aDone; err != nil {
		t.Fatalf("a's Lock once Redis answered again: %v", err)
	}
	if err := g.c.Lock(g.name).Unlock(relock.WithOwner(g.ctx, "a")); err != nil {
		t.Fatal(err)
	}
}

// A call made while Redis refuses connections fails at once, also when it queues behind a waiter of its
// Client for the same lock (see gates): that waiter, which was waiting while Redis answered, rides the
// outage out; the new call was never answered, and is not made to wait with it. Before, every waiter
// queued when the head's attempt failed rode the outage out, up to its deadline.
func TestGateWaiterCalledDuringAnOutageFailsAtOnce(t *testing.T) {
	t.Parallel()
	g := newGateHead(t, "outage-gate")
	p, c, ctx, name := g.p, g.c, g.ctx, g.name
	// The link stalls (nothing notices), b queues behind a, then Redis refuses connections.
	p.Stall(faultnet.Upstream, true)
	p.Stall(faultnet.Downstream, true)
	bctx, cancel := context.WithTimeout(relock.WithOwner(ctx, "b"), 3*time.Second)
	defer cancel()
	bDone := make(chan error, 1)
	go func() { bDone <- c.Lock(name).Lock(bctx) }()
	time.Sleep(200 * time.Millisecond)
	if err := p.Down(); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	select {
	case err := <-bDone:
		if !errors.Is(err, relock.ErrUnavailable) {
			t.Fatalf("b's Lock = %v; want ErrUnavailable", err)
		}
		t.Logf("b's Lock failed %v after Redis refused connections", time.Since(down).Round(time.Millisecond))
	case <-time.After(time.Second):
		t.Fatal("b's Lock, made during the outage, still waits 1 s after Redis refused connections")
	}
	select {
	case err := <-g.aDone:
		t.Fatalf("a's Lock, waiting since before the outage, returned %v at once; want it to ride the outage out", err)
	default:
	}
	g.end(t)
}

// A call made after Redis began to refuse connections fails at once, also when its Client's gate for the
// lock has a head waiting since before, asleep on the holder's TTL, whose next attempt would be the first
// to fail: the hub tells the head its subscription broke, the head's attempt fails, and the gate opens.
// (The explorer's liveness check once saw a Lock made during refused connections wait 1.5 s, up to its
// deadline, Redisson seed 2389718883037385911, not replayed: this is not that case; see docs/safety.md.)
func TestGateWaiterCalledAfterConnectionsBrokeFailsAtOnce(t *testing.T) {
	t.Parallel()
	g := newGateHead(t, "outage-gate-after") // a, asleep on the holder's 30 s TTL
	p, c, ctx, name := g.p, g.c, g.ctx, g.name
	if err := p.Down(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the Client's connections are reset, and its dials refused
	bctx, cancel := context.WithTimeout(relock.WithOwner(ctx, "b"), 3*time.Second)
	defer cancel()
	start := time.Now()
	err := c.Lock(name).Lock(bctx)
	if took := time.Since(start); took > time.Second || !errors.Is(err, relock.ErrUnavailable) {
		t.Fatalf("b's Lock, made while Redis refused connections, returned %v after %v; want ErrUnavailable at once", err, took.Round(time.Millisecond))
	}
	g.end(t)
}

// An owner's next call fails at once while Redis refuses connections, also when it finds two of the owner's
// releases completing in the background, the second waiting for the first: the first's failed attempts
// are the second's too. Before, the call waited for the second's failures, which never came while it
// waited for the first, up to the call's deadline.
func TestNextCallDoesNotWaitBehindChainedBackgroundReleases(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := startProxy(t, srv)
	c := clientAt(t, p.Addr, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	owner := relock.WithOwner(ctx, "o")
	l := c.Lock("chained-releases")
	for range 2 {
		if err := l.Lock(owner); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Down(); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(owner); !errors.Is(err, relock.ErrUnavailable) { // completed in the background
		t.Fatalf("Unlock while Redis refuses connections = %v; want ErrUnavailable", err)
	}
	ended, end := context.WithCancel(owner)
	end()
	if err := l.Unlock(ended); err == nil { // in the background too, after the first
		t.Fatal("Unlock with an ended ctx returned nil")
	}
	call, cancel := context.WithTimeout(owner, 3*time.Second)
	defer cancel()
	start := time.Now()
	err := l.Lock(call)
	if took := time.Since(start); !errors.Is(err, relock.ErrUnavailable) || took > time.Second {
		t.Fatalf("Lock while Redis refuses connections = %v after %v; want ErrUnavailable at once", err, took.Round(time.Millisecond))
	}
	if err := p.Up(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the owner locks once Redis answers", func() bool { return l.Lock(owner) == nil })
	if err := l.Unlock(owner); err != nil {
		t.Fatal(err)
	}
}

// lostToRefusedConnections takes the lock name on c, makes p refuse connections, and returns the hold's
// context once the hold is lost for want of renewal (within 10 s; c's watchdog timeout must be shorter).
func lostToRefusedConnections(t *testing.T, c *relock.Client, p *faultnet.Proxy, name string) context.Context {
	t.Helper()
	ctx := ctxTimeout(t, 20*time.Second)
	l := c.Lock(name)
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	hold, err := l.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Down(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hold.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the hold outlived its expiry while Redis refused connections")
	}
	return hold
}

// A hold lost because Redis stopped answering says so: its cause matches ErrLockLost and ErrUnavailable,
// and names the last renewal's error, so that a service without a Logger learns why from the cause alone.
func TestLossForWantOfRenewalSaysWhy(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := startProxy(t, srv)
	hold := lostToRefusedConnections(t, clientAt(t, p.Addr, fastWatchdog), p, "loss-says-why")
	cause := context.Cause(hold)
	if !errors.Is(cause, relock.ErrLockLost) || !errors.Is(cause, relock.ErrUnavailable) || !strings.Contains(cause.Error(), "connection refused") {
		t.Fatalf("cause = %q; want a loss that matches ErrUnavailable and names the renewal's error", cause)
	}
	t.Logf("cause: %v", cause)
}

// Without Options.Logger, an outage is not silent: each failed renewal is a Warn record, and the loss an
// Error record, on slog.Default() (as it is when they are written: a service's slog.SetDefault after New
// counts). Not parallel: it replaces the process's default logger.
func TestOutageIsLoggedWithoutALogger(t *testing.T) {
	logs := &redistest.OutputBuffer{}
	was := slog.Default()
	t.Cleanup(func() { slog.SetDefault(was) })
	srv := redistest.Start(t)
	p := startProxy(t, srv)
	c := clientAt(t, p.Addr, fastWatchdog) // no Logger
	slog.SetDefault(slog.New(slog.NewJSONHandler(logs, nil)))
	lostToRefusedConnections(t, c, p, "outage-logged")
	var warned, lost bool
	eventually(t, 2*time.Second, "a Warn record of a failed renewal and an Error record of the loss", func() bool {
		for _, r := range logRecords(t, logs) {
			if r["lock"] != "outage-logged" {
				continue
			}
			switch r["level"] {
			case "WARN":
				warned = warned || strings.Contains(fmt.Sprint(r["error"]), "connection refused")
			case "ERROR":
				lost = lost || strings.Contains(fmt.Sprint(r["error"]), "not renewed before it expired")
			}
		}
		return warned && lost
	})
}
