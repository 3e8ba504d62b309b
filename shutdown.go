package relock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Close: how a Client gives up everything it holds, and the work it waits for before it ends.

// DefaultCloseTimeout bounds Close: how long it waits for Redis to confirm that the Client's holds are
// given up before it closes the Client anyway (see CloseContext).
const DefaultCloseTimeout = 5 * time.Second

// Close is CloseContext bounded by DefaultCloseTimeout: it gives up everything the Client holds, waits up
// to DefaultCloseTimeout for Redis to confirm it, then closes the Client. When the bound passed first, its
// error matches context.DeadlineExceeded.
func (c *Client) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultCloseTimeout)
	defer cancel()
	return c.CloseContext(ctx)
}

// CloseContext gives up everything the Client holds, as etcd's Session.Close does, and closes the Client:
//
//   - Calls made from then on, and calls that wait (Lock, Acquire, Campaign, ...), return ErrClosed. An
//     acquisition that was under way and succeeds meanwhile is given up too, and returns ErrClosed.
//   - Every hold of every owner (locks of every kind, composite locks' parts on this Client, leased holds,
//     permits, leadership) ends for the Client at once: renewal stops, and its contexts (HoldContext,
//     Permit.Context, LeadershipContext) end before anything is sent, with a cause matching ErrClosed and
//     context.Canceled, not ErrLockLost: the Client gives the hold up as an owner's Unlock would.
//   - Then every hold is released in Redis (all its reentrant levels), every permit given back and every
//     leadership resigned, and every waiter leaves the queue it was in (a FairLock's, a priority writers'),
//     one script run each (a reentrant hold: one per level), all at once; each release is announced as its
//     owner's Unlock would announce it, so the next waiter, on any Client (relock's or Redisson's), gets
//     the lock at once.
//   - Work the Client left to the background finishes too: releases of Unlocks whose ctx had ended, undos
//     of acquisitions whose reply was lost, give-backs of permits taken by abandoned acquisitions.
//
// It waits for Redis to confirm all of it for as long as ctx allows; a release met by a server that is
// loading its data, or unreachable, is tried again until then, or until its hold would have expired. Then
// the Client closes: its subscription connection and goroutines end and, when New built the rueidis client,
// that client is closed. It returns nil when everything was given up in Redis; an error matching ctx.Err()
// when ctx ended first; or an error saying how many holds Redis did not release. What Redis was not told of
// ends by itself, at the end of its lease or watchdog timeout, as a dead process's holds would. With a ctx
// that never ends, CloseContext waits as long as Redis takes to answer the calls under way.
//
// Close and CloseContext are idempotent: every call after the first returns nil at once, and a call made
// while the first is under way waits for it.
func (c *Client) CloseContext(ctx context.Context) error {
	if c == nil {
		return ErrNilClient
	}
	var err error
	c.once.Do(func() { err = c.shutdown(ctx, false) })
	return err
}

// shutdown is Close. With abandon, it gives nothing up and waits for nothing: the Client stops as a process
// that dies would (a test's dead holder), and its holds' contexts end with errClientClosed.
func (c *Client) shutdown(ctx context.Context, abandon bool) error {
	// Calls are refused, and waits end, from now on.
	c.bgMu.Lock()
	c.closed.Store(true)
	c.bgMu.Unlock()
	c.ops.close()
	if abandon {
		c.stoppedShort.Store(true)
		c.bg.close()
		c.end()
	}
	c.beginClose()
	c.hub.stop()
	// Every hold ends for the Client, and is given up in the background, all at once: rueidis pipelines the
	// releases. Acquisitions under way are waited for below; one that succeeds is given up as it lands
	// (holdTable.acquired).
	var failed atomic.Int64
	var lastErr atomic.Pointer[error]
	gives := c.holds.shut(abandon)
	for _, g := range gives {
		c.goBackground(func(life context.Context) {
			if err := g.run(life); err != nil {
				lastErr.Store(&err)
				failed.Add(1)
			}
		})
	}
	var err error
	if !abandon {
		// Acquisitions under way first: what they leave to the background is background work.
		if err = c.ops.wait(ctx); err == nil {
			err = c.bg.wait(ctx)
		}
		c.stoppedShort.Store(err != nil)
	}
	// The end: background work still under way is cancelled (an attempt alone on its connection goes on
	// until its own deadline, at most retryAttemptTimeout: rueidis ignores an earlier cancellation there).
	// Acquisitions still under way (Redis does not answer them) end when the rueidis client is closed.
	c.bg.close()
	c.end()
	c.holds.close()
	c.tel.close()
	// What is left may wait on Redis: the hub's loop for a connection being dialled, rueidis's Close for
	// silent connections (a second each). It finishes in the background once ctx has ended.
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		c.hub.close()
		c.watch.close()
		_ = c.bg.wait(context.Background())
		if !c.borrowed {
			c.rdb.Close()
		}
		c.workers.close(retryAttemptTimeout)
	}()
	select {
	case <-finished:
	case <-ctx.Done():
	}
	switch {
	case abandon:
		return nil
	case err != nil:
		return &opError{op: "close", err: fmt.Errorf("%w: what was not given up in time expires by itself", err)}
	case failed.Load() > 0:
		return &opError{op: "close", err: fmt.Errorf("%d of %d holds not released (they expire by themselves): %w",
			failed.Load(), len(gives), *lastErr.Load())}
	}
	return nil
}

// tasks counts work that Close waits for, and refuses more once closed.
type tasks struct {
	mu     sync.Mutex
	n      int
	closed bool
	idle   chan struct{} // made by wait, closed when n drops to 0
}

// enter counts one more task, unless tasks is closed.
func (t *tasks) enter() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.n++
	return true
}

// leave counts a task out.
func (t *tasks) leave() {
	t.mu.Lock()
	if t.n--; t.n == 0 && t.idle != nil {
		close(t.idle)
		t.idle = nil
	}
	t.mu.Unlock()
}

// close refuses every task from now on.
func (t *tasks) close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
}

// wait waits until no task is under way, or ctx ends (its error).
func (t *tasks) wait(ctx context.Context) error {
	for {
		t.mu.Lock()
		if t.n == 0 {
			t.mu.Unlock()
			return nil
		}
		if t.idle == nil {
			t.idle = make(chan struct{})
		}
		idle := t.idle
		t.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// begin counts an operation in, for Close to wait for: an acquisition, whose outcome may leave a hold to
// give up. It reports false, counting nothing, once Close has begun.
func (c *Client) begin() bool { return c.ops.enter() }

// finish counts out an operation that begin counted in.
func (c *Client) finish() { c.ops.leave() }

// waitAtMost waits for wg, for up to d.
func waitAtMost(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	}
}

// shut ends every hold as Close begins: their contexts end with errGivenUp (with errClientClosed when the
// Client is abandoned), the watchdog stops renewing them, and acquisitions that land from now on are given
// up as they land (see acquired). It returns what Close gives up in Redis: every hold and wait queue entry,
// unless abandoned. A settling (an operation of the owner whose outcome was not learnt) is background
// work, which Close waits for; a hold's give-up waits for it first.
func (w *holdTable) shut(abandon bool) []relinquishment {
	cause := errGivenUp
	if abandon {
		cause = errClientClosed
	}
	var out stepped
	var gives []relinquishment
	w.mu.Lock()
	w.closed = true
	for k, h := range w.holds {
		if !abandon && h.giver != nil {
			var after chan struct{}
			if running := w.settlings[k]; len(running) > 0 {
				after = running[len(running)-1].ch
			}
			gives = append(gives, relinquishment{k: k, giver: h.giver, settling: after, deadline: h.expiresAt})
		}
		w.stepLocked(h, &holdEvent{ev: evShut, cause: cause}, &out)
	}
	w.mu.Unlock()
	out.finish(w.c.tel)
	return gives
}

// giver is what gives up a Client's hold at Close, and a hold the watchdog ended as lost although Redis may
// still have it (see endGivingUpLocked): a lock kind releases the hold wholly, a permit semaphore gives the
// permit back, a wait queue takes the waiting owner out. A giver is the object that
// made the hold (an *RLock, ...): recording it costs an acquisition nothing.
type giver interface {
	// giveUp gives up the hold k in Redis, announcing it as its owner's release would, trying until
	// Redis answers, life ends, or deadline (when the hold expires by itself) passes. It returns nil
	// when Redis has nothing of the hold any more.
	giveUp(life context.Context, k holdKey, deadline time.Time) error
}

// relinquishment is a hold Close gives up, in the background.
type relinquishment struct {
	k        holdKey
	giver    giver
	settling <-chan struct{} // an earlier operation of the owner being settled, to wait for; or nil
	deadline time.Time       // when the hold expires by itself: nothing to give up after that
}

// run gives the hold up, once what settles it is over.
func (r relinquishment) run(life context.Context) error {
	if r.settling != nil {
		select {
		case <-r.settling:
		case <-life.Done():
			return life.Err()
		}
	}
	return r.giver.giveUp(life, r.k, r.deadline)
}
