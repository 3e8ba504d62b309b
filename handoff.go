package relock

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// A release that hands the lock to a waiter of the same Client (see gates), and the waiter's side of it.

// handoffTarget is what a handoff to a waiter grants: a first hold of its lock for its owner field, which
// lives ttl (its lease, or the watchdog timeout; ttlArg is it as lua/rlock_handoff.lua reads it, see holdTTLArg).
type handoffTarget struct {
	lock   *RLock
	owner  string
	field  string
	ttl    time.Duration
	ttlArg string
	lease  time.Duration
	parent context.Context // the acquisition's ctx, from which the hold's span and HoldContext descend
}

// take records the hold a release handed to t's owner, as a successful attempt does. The release took the
// owner's turn for the handoff (see handOff); take ends it.
func (t *handoffTarget) take(ctx context.Context, h handoff) (bool, error) {
	l := t.lock
	k := holdKey{key: l.name, field: t.field}
	defer l.c.holds.endTurn(k)
	if !l.c.holds.acquired(k, &acquisition{
		kind: l.kind, name: l.name, count: 1, lease: t.lease, ttl: t.ttl, budget: l.maxHold, sentAt: h.sentAt,
		renew: l.spec.renewal(k.field), token: h.token, granted: h.granted, parent: t.parent, handoffs: h.handoffs,
		traced: trace.SpanFromContext(ctx).IsRecording(), giver: l,
	}) {
		return false, ErrClosed // Close began meanwhile: the hold is being given up
	}
	return true, nil
}

// claim picks the waiter of name's gate that a release of the lock hands it to, and marks it claimed: the
// first of the queue, else the head if it is between attempts. (The head waits in Redis: the lock comes
// to it when it goes through Redis, at the latest after maxHandoffs handoffs; a handoff to it would make
// the next waiter the head, and have it ask Redis to take its place there.) It returns nil when there is
// none, and nil with yield true when the releasing hold came from streak handoffs in a row, maxHandoffs or
// more: the release is to let the other Clients go first. The caller must deliver the outcome to the
// waiter it got.
func (gs *gates) claim(name string, streak int) (e *gateWaiter, yield bool) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.m[name]
	if g == nil {
		return nil, false
	}
	for _, x := range g.queue {
		if x.phase == wQueued {
			e = x
			break
		}
	}
	if h := g.head; e == nil && h != nil && h.phase == wSleeping {
		e = h
	}
	if e == nil {
		return nil, false
	}
	if streak >= maxHandoffs {
		return nil, true
	}
	gs.stepLocked(e, gClaim)
	return e, false
}

// deliver tells e, claimed for a handoff, its outcome. It reports false when e gave up meanwhile: a hold
// handed to it is then the caller's to undo. A waiter of the queue that was handed the lock leaves the
// gate; one that was not waits on, as the head if the gate has none; ownerBusy says the handoff was not
// tried because e's owner was busy on the lock (it holds it, or acquires it): e then acquires on its own,
// a reentry most likely.
func (gs *gates) deliver(e *gateWaiter, h handoff, ownerBusy bool) bool {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := e.g
	ev := gNotHanded
	switch {
	case h.handed:
		ev = gHanded
	case ownerBusy && g.head != e:
		ev = gOwnerBusy
	}
	abandoned := e.phase == wAbandoned
	gs.stepLocked(e, ev)
	if !abandoned && ev != gOwnerBusy {
		select {
		case <-e.outcome: // a nudge the head has not taken (see yielded): this outcome says more
		default:
		}
		e.outcome <- h
	}
	if !h.handed {
		gs.promoteLocked(g, nil) // the gate may have lost its head while e was claimed
	}
	gs.forgetIfEmptyLocked(g, e.name)
	return !abandoned
}

// yielded is told that a release of name's lock that let the other Clients go first woke nobody by name,
// and somebody (Redisson's waiters) by the unlock message: the gate's head, which that release did not
// name, tries yieldFor later. (If Redisson's waiter took the lock, the head learns so and listens for
// Redisson's release; else it takes the lock.)
func (gs *gates) yielded(name string) {
	time.AfterFunc(yieldFor, func() {
		gs.mu.Lock()
		defer gs.mu.Unlock()
		g := gs.m[name]
		if g == nil {
			return
		}
		if h := g.head; h != nil && h.phase == wSleeping && h.outcome != nil {
			select {
			case h.outcome <- handoff{}: // not handed: it tries
			default:
			}
		}
	})
}

// releaseFirst sends an Unlock's release request. When it is the owner's last hold and a waiter of the
// Client's gate for the lock may have it, the release hands the lock to that waiter (handOff).
func (l *RLock) releaseFirst(ctx context.Context, k holdKey, call releaseCall) (int64, error) {
	if l.kind == kindRLock {
		if count, streak := l.c.holds.handoffs(k); count == 1 {
			switch e, yield := l.c.gates.claim(l.name, streak); {
			case e != nil:
				return l.handOff(ctx, call, e, streak)
			case yield:
				return l.releaseYielding(ctx, call)
			}
		}
	}
	return l.release(ctx, call)
}

// releaseYielding sends a release that, at the owner's last hold, lets the other Clients' waiters go
// first (see gates).
func (l *RLock) releaseYielding(ctx context.Context, call releaseCall) (int64, error) {
	var err error
	if call, err = l.withPublish(ctx, call); err != nil {
		return 0, err
	}
	r, err := l.c.scripts.runInts(ctx, l.spec.(*rlockSpec).handoff(call, "", "", "", "", l.c.id))
	if err == nil && len(r) != 3 {
		err = errUnexpectedReply
	}
	if err != nil {
		return 0, err
	}
	if r[0] == 0 && r[2] >= 2 { // somebody heard Redisson's unlock message: the gate's head waits its head start
		l.c.gates.yielded(l.name)
	}
	return r[0], nil
}

// withPublish returns call with the publish command, found out first when it is not known yet.
func (l *RLock) withPublish(ctx context.Context, call releaseCall) (releaseCall, error) {
	if call.publish = l.c.knownPublishCommand(); call.publish == "" {
		pub, err := l.c.publishCommand(ctx, l.channel)
		if err != nil {
			return call, err
		}
		call.publish = pub
	}
	return call, nil
}

// handOff sends the release call, which hands the lock, at the owner's last hold, to e, a waiter of the
// lock's gate that gates.claim picked; e learns the outcome. Its reply is the release's: the owner's
// remaining hold count (0 when the lock was handed over or released), or -1 when it held nothing. A
// handoff whose reply is lost is undone as an attempt of e's owner is (it hands nothing if it arrives after
// the undo, and its hold is released if it had arrived), and e tries again.
func (l *RLock) handOff(ctx context.Context, call releaseCall, e *gateWaiter, streak int) (int64, error) {
	t := e.target // a copy: e may be reused once told
	next := holdKey{key: l.name, field: t.field}
	if !l.c.holds.tryBeginTurn(next) { // the next owner is busy on the lock already
		l.c.gates.deliver(e, handoff{}, true)
		return l.release(ctx, call)
	}
	notHanded := func() {
		l.c.holds.endTurn(next)
		l.c.gates.deliver(e, handoff{}, false)
	}
	call, err := l.withPublish(ctx, call)
	if err != nil {
		notHanded()
		return 0, err
	}
	attempt := l.c.attemptID()
	counter := t.lock.spec.(*rlockSpec).counter()
	sentAt := time.Now()
	r, err := l.c.scripts.runInts(ctx, l.spec.(*rlockSpec).handoff(call, t.field, attempt, t.ttlArg, counter, l.c.id))
	if err == nil && len(r) != 3 && len(r) != 4 { // 4: a handoff, with Redis's clock at the grant
		err = errUnexpectedReply
	}
	switch {
	case err != nil:
		if mayHaveRun(err) {
			t.lock.undoAcquire(next, t.ttl, attempt)
		}
		notHanded()
		return 0, err
	case r[1] == 1:
		if !l.c.gates.deliver(e, handoff{handed: true, token: uint64(r[2]), granted: r[3], sentAt: sentAt, handoffs: streak + 1}, false) {
			// e gave up meanwhile: release the hold it was handed.
			t.lock.undoAcquire(next, t.ttl, attempt)
			l.c.holds.endTurn(next)
		}
		return 0, nil
	}
	notHanded()
	return r[0], nil
}
