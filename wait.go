package relock

import (
	"context"
	"time"
)

// transientGrace is how long a waiter keeps trying through transient errors before it returns one.
const transientGrace = 10 * time.Second

// attempt tries to acquire a lock once. When it does not get the lock, holderTTL is how long the current
// hold may still last (negative: no expiry known), so a waiter never sleeps past it, and named says the
// holder's release wakes a waiter by name (see acquireOp.named).
type attempt func(ctx context.Context) (acquired bool, holderTTL time.Duration, named bool, err error)

// acquireOp is one acquisition by any lock type, for the shared wait loop.
type acquireOp struct {
	kind    lockKind
	name    string
	channel string     // where the lock's releases are announced
	wakes   wakePolicy // how the channel's messages wake waiters (nil: lockWakes)
	// named, if not "", is the prefix of the channels on which a release may wake the waiting owner by
	// name: the waiter listens on "<named>:<clientUUID>" (hub.join), and on channel only while the last
	// attempt's holder may not wake it by name (on a single server; on a cluster, always).
	named  string
	weight int           // what the waiter wants, for the hub (see waiter): a semaphore's permits; 0 is 1
	wait   time.Duration // < 0: as long as ctx allows; 0: one attempt
	// owner is the acquiring owner, for the kinds whose hold lets the owner's other acquisitions in (a
	// reentry, a Campaign of the leader); "" for the others. Once it acquires, the owner's other waiters
	// on the channel are woken (hub.acquiredBy).
	owner string
	// gated says the acquisition waits in the Client's gate for its lock, where a release may hand it the
	// lock as gate says (see gates).
	gated bool
	gate  handoffTarget
	// queued, if not nil, is set when the acquisition waited in its gate before its first attempt: that
	// attempt is made while waiting (it joins the lock's waiting owners, as later ones do).
	queued *bool
	// taken, if not nil, replaces the attempt a waiter makes as it begins to listen, which catches a
	// release it could have missed since its first attempt, with one read of the lock, for the kinds whose
	// waiters are only ever woken by a release that frees the lock (a FairLock's): while the lock is taken,
	// every wake-up to come reaches the listening waiter. It reports whether the lock is taken, and how
	// long its hold may still last (< 0: no expiry known). A free lock, or an error, makes the waiter
	// attempt at once, as the others do.
	taken func(ctx context.Context) (taken bool, holderTTL time.Duration, err error)
}

// acquire runs op in the shared wait loop, inside a "relock.acquire" span, and records its outcome. Close
// waits for it (see Client.begin); once Close has begun, it fails with ErrClosed.
func (c *Client) acquire(ctx context.Context, op *acquireOp, try attempt) (bool, error) {
	if !c.begin() {
		return false, ErrClosed
	}
	defer c.finish()
	start := time.Now()
	ctx, span := c.tel.startSpan(ctx, "relock.acquire", op.kind, op.name)
	attempts := 0
	ok, err := c.acquireWaiting(ctx, op, func(ctx context.Context) (bool, time.Duration, bool, error) {
		attempts++
		return try(ctx)
	})
	if ok {
		c.hub.acquiredBy(op.channel, op.owner)
		if op.gated || op.kind == kindRLock {
			c.gates.acquiredBy(op.name, op.owner)
		}
	}
	o := acquireOutcome(ok, err)
	wait := time.Since(start)
	c.tel.acquired(ctx, op.kind, o, wait)
	if span.IsRecording() {
		span.SetAttributes(AttrAttempts.Int(attempts), AttrWaitMS.Float64(millis(wait)))
	}
	endSpan(span, o, err)
	return ok, err
}

// acquireWaiting is the wait loop of every lock type: try; if the lock is taken, subscribe to op's release
// channel, try again (a release between the first try and the subscription would otherwise be missed;
// op.taken may tell there was none), then sleep until a release notification, the holder's TTL, the end
// of op's wait, or ctx, and try again.
// A wait < 0 lasts as long as ctx allows; 0 makes one attempt. The hub is told which notifications an
// answered attempt looked at: the others go to other waiters when this one leaves.
func (c *Client) acquireWaiting(ctx context.Context, op *acquireOp, try attempt) (bool, error) {
	var deadline time.Time
	if op.wait > 0 {
		deadline = time.Now().Add(op.wait)
	}
	var e *gateWaiter // the acquisition's place in its gate, once it is the head
	waited := false   // it waited in the gate: the lock was taken a moment ago
	if op.gated {
		var h handoff
		var err error
		if e, h, err = c.gates.enter(ctx, op.name, op.gate, deadline, c.hub.done); h.handed {
			return op.gate.take(ctx, h)
		}
		if e == nil {
			return false, err // nil: the wait ran out
		}
		alone, riding := c.gates.alone(e)
		waited = e.turn != nil && (!alone || riding)
		if alone {
			e = nil
		} else {
			defer c.gates.exit(e)
		}
	}
	named := true
	firstTTL := time.Duration(-1) // the first attempt's holderTTL
	if !waited {
		// The first attempt, before waiting. One that waited in its gate begins to wait at once instead:
		// it listens, then makes its first attempt as a waiter (and rides out a short outage as one).
		var ok bool
		var err error
		sent := time.Now()
		ok, firstTTL, named, err = try(ctx)
		if e != nil {
			if err != nil {
				c.gates.trouble(e, false)
			} else {
				c.gates.answered(e, sent)
			}
		}
		if ok || err != nil || op.wait == 0 {
			return ok, err
		}
	} else if op.queued != nil {
		*op.queued = true
	}
	return c.wait(ctx, op, try, e, waited, named, firstTTL, deadline)
}

// wait is acquireWaiting once the lock was found taken, or the acquisition waited in its gate (waited):
// it listens for the lock's releases, and tries again on each, until it gets the lock, its wait ends
// (deadline, when not zero), or ctx does. e is its place in its gate as its head, if it has one; named
// and firstTTL are what the first attempt told (see attempt). Apart from acquireWaiting, so that what it
// needs is no part of the frames on the stack while the first attempt, the common case, is sent: a fresh
// goroutine's stack is copied to one twice its size each time a call goes deeper than it has room for.
func (c *Client) wait(ctx context.Context, op *acquireOp, try attempt, e *gateWaiter, waited, named bool,
	firstTTL time.Duration, deadline time.Time) (bool, error) {
	// A named waiter hears the channel only while its lock's holder may not wake it by name: on a single
	// server, where a release knows whether its Client heard the name (lua/lib/waiters.lua).
	hears := func(named bool) bool { return op.named == "" || c.cluster || !named }
	var w *waiter
	var err error
	if e != nil && e.hub != nil { // the place of the head before it (see gates.exit)
		w = e.hub
	} else {
		w, err = c.hub.join(ctx, op.channel, op.wakes, op.weight, op.owner, op.named, hears(named))
	}
	if err != nil && waited {
		// A waiter rides out a short outage (see below), its subscription's too.
		w, err = c.joinRidingOut(ctx, op, hears(named), err)
	}
	if err != nil {
		if transient(err) {
			err = unavailable(err)
		}
		return false, err
	}
	if e != nil {
		e.hub = w // exit hands it to the next head, or leaves
	} else {
		defer c.hub.leave(w)
	}

	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	var troubleSince time.Time // when attempts began to fail with transient errors
	var retry backoff
	recheck := op.taken != nil && !waited // the first attempt was made before listening
	for {
		if e != nil {
			h, err := c.gates.attempting(ctx, e, deadline, c.hub.done)
			if err == errWaitOver {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			if h.handed {
				return op.gate.take(ctx, h)
			}
		}
		var ttl time.Duration
		attempt := true
		if recheck {
			recheck = false
			if taken, holderTTL, err := op.taken(ctx); err == nil && taken {
				attempt, ttl = false, shorterWait(firstTTL, holderTTL)
			}
		}
		if attempt {
			w.attempting()
			sent := time.Now()
			ok, holderTTL, named, err := try(ctx)
			ttl = holderTTL
			if err == nil {
				c.hub.answered(w, ok)
				if e != nil {
					c.gates.answered(e, sent)
				}
			}
			if ok {
				return true, nil
			}
			if err == nil && !w.hears && hears(named) {
				// The holder's release may not name this waiter (a Redisson client's): hear the channel,
				// then try again, as after joining. A subscription that fails is ridden out as an
				// attempt's failure.
				if err = c.hub.hear(ctx, w); err == nil {
					continue
				}
			}
			if err != nil && e != nil {
				c.gates.trouble(e, true)
			}
			if err != nil {
				// A waiter rides out a short outage (a restart, a cluster failover) rather than give up
				// its wait: it tries again, backing off, for up to transientGrace. The first attempt,
				// made before waiting, reports errors at once.
				if !transient(err) || ctx.Err() != nil {
					return false, err
				}
				if troubleSince.IsZero() {
					troubleSince = time.Now()
				} else if time.Since(troubleSince) > transientGrace {
					return false, err
				}
				ttl = retry.pause()
			} else {
				troubleSince = time.Time{}
				retry.reset()
			}
		}
		sleep := ttl
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return false, nil
			}
			if sleep < 0 || left < sleep {
				sleep = left
			}
		}
		var timeout <-chan time.Time
		if sleep >= 0 {
			if timer == nil {
				timer = time.NewTimer(sleep)
			} else {
				timer.Reset(sleep)
			}
			timeout = timer.C
		}
		var handed <-chan handoff // a release by another owner of the Client may hand it the lock
		if e != nil {
			handed = c.gates.sleeping(e)
		}
		select {
		case <-w.wake:
			w.took()
		case <-timeout:
		case h := <-handed:
			if h.handed {
				return op.gate.take(ctx, h)
			}
		case <-ctx.Done():
			if e != nil {
				if h, ok, _ := c.gates.leaving(e); ok {
					return op.gate.take(ctx, h)
				}
			}
			return false, ctx.Err()
		case <-c.hub.done:
			if e != nil {
				if h, ok, _ := c.gates.leaving(e); ok {
					return op.gate.take(ctx, h) // Close began: take gives the hold up
				}
			}
			return false, ErrClosed
		}
	}
}

// joinRidingOut joins the hub for op again, after a join failed with err, as long as the failures are
// transient and for up to transientGrace, backing off between tries, as a waiter's attempts do.
func (c *Client) joinRidingOut(ctx context.Context, op *acquireOp, hears bool, err error) (*waiter, error) {
	var retry backoff
	since := time.Now()
	for transient(err) && ctx.Err() == nil && time.Since(since) <= transientGrace {
		if !sleepCtx(ctx, retry.pause()) {
			break
		}
		var w *waiter
		if w, err = c.hub.join(ctx, op.channel, op.wakes, op.weight, op.owner, op.named, hears); err == nil {
			return w, nil
		}
	}
	return nil, err
}

// shorterWait returns the shorter of two holderTTLs (< 0: no bound).
func shorterWait(a, b time.Duration) time.Duration {
	if a < 0 || b >= 0 && b < a {
		return b
	}
	return a
}

// deadlineTimer returns a channel that delivers at deadline (nil, never, for a zero deadline), and the
// function that stops its timer.
func deadlineTimer(deadline time.Time) (<-chan time.Time, func()) {
	if deadline.IsZero() {
		return nil, func() {}
	}
	timer := time.NewTimer(time.Until(deadline))
	return timer.C, func() { timer.Stop() }
}
