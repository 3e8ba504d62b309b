package relock

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relock-go/relock/internal/redistest"
)

// The waiters of one Client, on real Redis, in the races where a notification reaches a waiter that does
// not use it (the wait loop's own tests, in wait_test.go, cover every wake policy on a scripted Redis). A
// gate on the Client's script runner puts one attempt at the point of the race every time: the scripts
// run on Redis, the gate only holds one of them, before it is sent or before its reply is handed back.

// gatedRunner runs every script with the Client's runner, and holds the first run of a script after arm,
// before it is sent or once its reply came, until the test resumes it.
type gatedRunner struct {
	runner
	mu     sync.Mutex
	script *script
	after  bool
	match  func(call scriptCall) bool // which run of script to hold (nil: the first)
	held   chan struct{}
	resume chan struct{}
	runs   map[*script]int // runs answered (or failed), by script
	// lose makes every batch (the watchdog's renewals) run on Redis and then fail, as if its connection
	// broke before the replies came back.
	lose atomic.Bool
	// cut, if set, is a script whose next run through runInts runs on Redis and then fails as lose's do.
	cut atomic.Pointer[script]
}

// errReplyCut is what a batch run under gatedRunner.lose fails with: the connection's end, mid-reply.
var errReplyCut = io.ErrUnexpectedEOF

func (g *gatedRunner) runBatch(ctx context.Context, calls []scriptCall) ([][]int64, []error) {
	replies, errs := g.runner.runBatch(ctx, calls)
	if g.lose.Load() {
		for i := range errs {
			replies[i], errs[i] = nil, errReplyCut
		}
	}
	return replies, errs
}

func gateScripts(c *Client) *gatedRunner {
	g := &gatedRunner{runner: c.scripts, runs: make(map[*script]int)}
	c.scripts = g
	return g
}

// arm makes the next run of s wait, before it is sent (after false) or once its reply came: held is
// closed when it waits, and resume lets it go on.
func (g *gatedRunner) arm(s *script, after bool) (held <-chan struct{}, resume func()) {
	return g.armFor(s, after, nil)
}

// armFor is arm for the next run of s that match accepts.
func (g *gatedRunner) armFor(s *script, after bool, match func(scriptCall) bool) (held <-chan struct{}, resume func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.script, g.after, g.match = s, after, match
	g.held, g.resume = make(chan struct{}), make(chan struct{})
	r := g.resume
	return g.held, sync.OnceFunc(func() { close(r) })
}

// ran returns how many runs of s are over.
func (g *gatedRunner) ran(s *script) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.runs[s]
}

func (g *gatedRunner) at(call scriptCall, after bool) {
	s := call.script
	g.mu.Lock()
	if after {
		g.runs[s]++
	}
	if g.script != s || g.after != after || g.match != nil && !g.match(call) {
		g.mu.Unlock()
		return
	}
	g.script = nil
	held, resume := g.held, g.resume
	g.mu.Unlock()
	close(held)
	<-resume
}

func (g *gatedRunner) runInt(ctx context.Context, call scriptCall) (int64, error) {
	g.at(call, false)
	n, err := g.runner.runInt(ctx, call)
	g.at(call, true)
	return n, err
}

func (g *gatedRunner) runInts(ctx context.Context, call scriptCall) ([]int64, error) {
	g.at(call, false)
	r, err := g.runner.runInts(ctx, call)
	if err == nil && g.cut.CompareAndSwap(call.script, nil) {
		r, err = nil, errReplyCut
	}
	g.at(call, true)
	return r, err
}

func (g *gatedRunner) runAcquire(ctx context.Context, call scriptCall) ([4]int64, error) {
	g.at(call, false)
	reply, err := g.runner.runAcquire(ctx, call)
	g.at(call, true)
	return reply, err
}

// hubWaiters returns the waiters c's hub has on channel, oldest first.
func hubWaiters(c *Client, channel string) []*waiter {
	c.hub.mu.Lock()
	defer c.hub.mu.Unlock()
	if e := c.hub.subs[channel]; e != nil {
		return append([]*waiter(nil), e.waiters...)
	}
	return nil
}

// until fails t unless cond becomes true within 5 s.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// hubWaiterCount returns how many waiters c's hub has, on every channel.
func hubWaiterCount(c *Client) int {
	c.hub.mu.Lock()
	defer c.hub.mu.Unlock()
	n := 0
	for _, e := range c.hub.subs {
		n += len(e.waiters)
	}
	return n
}

// startWaiting runs acquire in a goroutine and returns once it waits as c's n-th waiter, its attempts
// before sleeping (one before joining, one after: attempt's runs 2n in all) over.
func startWaiting(t *testing.T, c *Client, g *gatedRunner, attempt *script, n int, acquire func() error) <-chan error {
	t.Helper()
	res := make(chan error, 1)
	go func() { res <- acquire() }()
	// Two attempts each, before and after subscribing; a FairLock's waiter reads the lock instead of
	// making the second (acquireOp.taken).
	each := 2
	if attempt == scriptFairAcquire {
		each = 1
	}
	until(t, "a waiter joins", func() bool { return hubWaiterCount(c) == n && g.ran(attempt) == each*n })
	return res
}

// within fails t unless res delivers nil within 5 s (what a woken waiter takes, at most, on a loaded
// machine; one left asleep waits for the next release, or a hold's expiry, 30 s here).
func within(t *testing.T, res <-chan error, who string) {
	t.Helper()
	select {
	case err := <-res:
		if err != nil {
			t.Fatalf("%s: %v", who, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s still waits 5 s later, though what it waits for is free: its wake-up was lost", who)
	}
}

func newTestClient(t *testing.T, srv *redistest.Server) *Client {
	t.Helper()
	c, err := New([]string{srv.Addr()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Two waiters of a semaphore on one Client, A the older. A release wakes A, which takes the permit; a
// second release comes while A's reply is on its way back, and wakes A again (the oldest without a
// notification). B must get the second permit: a plain semaphore never polls, so a lost wake-up leaves it
// asleep until some later release. The same for a PermitSemaphore, whose waiter would sleep until the
// next expiry (A's permit's, renewed: never).
func TestSemaphoreSecondReleaseBeforeWinnerLeaves(t *testing.T) {
	srv := redistest.Start(t)
	for _, kind := range []string{"semaphore", "permits"} {
		t.Run(kind, func(t *testing.T) {
			c, other := newTestClient(t, srv), newTestClient(t, srv)
			g := gateScripts(c)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			name := "handoff-" + kind
			acquire, gated := func() error { return c.Semaphore(name).Acquire(ctx, 1) }, scriptSemaphoreAcquire
			if kind == "permits" {
				acquire, gated = func() error { _, err := c.PermitSemaphore(name).Acquire(ctx); return err }, scriptPermitAcquire
			}
			channel := c.Semaphore(name).channel
			if _, err := other.Semaphore(name).TrySetPermits(ctx, 0); err != nil {
				t.Fatal(err)
			}
			a := startWaiting(t, c, g, gated, 1, acquire)
			b := startWaiting(t, c, g, gated, 2, acquire)
			wa := hubWaiters(c, channel)[0]

			held, resume := g.arm(gated, true)
			defer resume()
			if err := other.Semaphore(name).Release(ctx, 1); err != nil {
				t.Fatal(err)
			}
			<-held // A took the permit; its reply waits
			if err := other.Semaphore(name).Release(ctx, 1); err != nil {
				t.Fatal(err)
			}
			until(t, "the second release reaches A", func() bool { return len(wa.wake) == 1 })
			resume()
			within(t, a, "A")
			within(t, b, "B")
		})
	}
}

// Two waiters of a lock on one Client, A the older. The holder's release wakes A, whose ctx ends as its
// attempt is about to be sent: the attempt fails unsent, and the lock is free. B must get it: a lost
// wake-up leaves an RLock's waiter asleep until the holder's TTL, as it last read it, runs out (30 s).
// A FairLock's waiters each have a channel (the queue's leave wakes the next); a ReadWriteLock's release
// wakes every waiter: they are here to show that every kind hands the lock on.
func TestLockWaiterCtxEndsAsItIsWoken(t *testing.T) {
	srv := redistest.Start(t)
	for _, k := range []struct {
		kind    string
		lock    func(c *Client, name string) *RLock // the waiters' lock
		holder  func(c *Client, name string) *RLock
		attempt *script
	}{
		{"lock", lockOf, lockOf, scriptAcquire},
		{"fair", fairLockOf, fairLockOf, scriptFairAcquire},
		{"write", writeLock, writeLock, scriptRWWriteAcquire},
		{"read", readLock, writeLock, scriptRWReadAcquire},
	} {
		t.Run(k.kind, func(t *testing.T) {
			c, other := newTestClient(t, srv), newTestClient(t, srv)
			g := gateScripts(c)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			name := "handoff-" + k.kind
			holder := WithOwner(ctx, "holder")
			if err := k.holder(other, name).Lock(holder); err != nil {
				t.Fatal(err)
			}
			actx, acancel := context.WithCancel(WithOwner(ctx, "A"))
			defer acancel()
			l := k.lock(c, name)
			a := startWaiting(t, c, g, k.attempt, 1, func() error { return l.Lock(actx) })
			var b <-chan error
			if k.kind == "lock" {
				// B waits in the Client's gate, behind A, without a round trip (see gates): A's give-up
				// must pass it the turn.
				queued := make(chan error, 1)
				go func() { queued <- l.Lock(WithOwner(ctx, "B")) }()
				until(t, "B waits in the gate", func() bool { return c.gates.waiters(name) == 2 })
				b = queued
			} else {
				b = startWaiting(t, c, g, k.attempt, 2, func() error { return l.Lock(WithOwner(ctx, "B")) })
			}

			aField := c.ID() + ":A" // a read-write lock's release wakes B too: hold A's attempt
			held, resume := g.armFor(k.attempt, false, func(call scriptCall) bool {
				return slices.Contains(call.args, aField) || slices.Contains(call.args, aField+writerSuffix)
			})
			defer resume()
			if err := k.holder(other, name).Unlock(holder); err != nil {
				t.Fatal(err)
			}
			<-held // A was woken; its attempt waits to be sent
			acancel()
			resume()
			if err := <-a; !errors.Is(err, context.Canceled) {
				t.Fatalf("A = %v, want its ctx's error", err)
			}
			within(t, b, "B")
		})
	}
}

func lockOf(c *Client, name string) *RLock     { return c.Lock(name) }
func fairLockOf(c *Client, name string) *RLock { return c.FairLock(name) }
func writeLock(c *Client, name string) *RLock  { return c.ReadWriteLock(name).WriteLock() }
func readLock(c *Client, name string) *RLock   { return c.ReadWriteLock(name).ReadLock() }

// A semaphore waiter that wants more permits than are free does not keep a waiter that wants fewer
// asleep: A (the older) wants 2, B 1; one permit is released. Its message wakes one waiter, A, which
// cannot take 2; B must get the permit.
func TestSemaphoreHeavyWaiterHandsOnToLighter(t *testing.T) {
	srv := redistest.Start(t)
	c, other := newTestClient(t, srv), newTestClient(t, srv)
	g := gateScripts(c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := c.Semaphore("handoff-heavy")
	if _, err := other.Semaphore(s.name).TrySetPermits(ctx, 0); err != nil {
		t.Fatal(err)
	}
	actx, acancel := context.WithCancel(ctx)
	defer acancel()
	a := startWaiting(t, c, g, scriptSemaphoreAcquire, 1, func() error { return s.Acquire(actx, 2) })
	b := startWaiting(t, c, g, scriptSemaphoreAcquire, 2, func() error { return s.Acquire(ctx, 1) })
	if err := other.Semaphore(s.name).Release(ctx, 1); err != nil {
		t.Fatal(err)
	}
	within(t, b, "B")
	if err := other.Semaphore(s.name).Release(ctx, 2); err != nil {
		t.Fatal(err)
	}
	within(t, a, "A")
}
