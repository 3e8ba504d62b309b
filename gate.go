package relock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// A hot lock, one that many goroutines of a Client take in turn, would have each of them ask Redis, learn
// that it must wait, and be woken to ask again, though only one at a time can have it. A Client queues its
// own waiters of a Lock (the reentrant kind) in a gate instead, one per lock name:
//
//   - Only the gate's head asks Redis. It waits for the lock as any waiter does: it tries, joins the lock's
//     waiting owners in Redis, and sleeps until a release wakes it (by name), the holder's TTL, or its end.
//     The others wait in the gate, in order of arrival, without a round trip, and the first of them becomes
//     the head when the head has the lock or gives up.
//   - A release by one of the Client's owners hands the lock to the first of the gate's queue (to the head
//     if the queue is empty and the head is between attempts), in the release's own script run
//     (lua/rlock_handoff.lua): one round trip instead of a release, a message and an acquisition. A hold
//     handed over is a new holder's: a first hold (count 1), with a new fencing token when its lock is
//     fenced, and its own lease or watchdog renewal.
//   - A Client hands a lock over at most maxHandoffs times in a row: the hold counts the handoffs that led
//     to it (hold.handoffs). The release after that goes through Redis and lets the other Clients go first:
//     it wakes a waiter of another Client by name if there is one; else it wakes Redisson's waiters with
//     Redisson's message (which relock's Clients ignore), and the gate's head tries yieldFor later if
//     anybody heard it; it names the gate's head only when nobody else waits. So a gate's waiters never
//     keep a lock from other Clients' waiters (relock's or Redisson's) for more than maxHandoffs holds in
//     a row.
//   - A waiter whose owner gets the lock meanwhile (another goroutine of a WithOwner token) leaves the gate
//     and acquires at once: a reentry.
//
// An owner that holds the lock already (a reentry), a single attempt (TryLock with no wait) and the other
// kinds do not use the gate. A waiter's life is the machine of gatestate.go.
type gates struct {
	hub *hub // the Client's
	mu  sync.Mutex
	m   map[string]*gate
	// queued counts the waiters in every gate's queue, so that an acquisition looks for its owner's other
	// waiters (acquiredBy) only when there may be some.
	queued atomic.Int64
	// pool keeps the gates forgotten, for reuse. It is the Client's own: a gate is put there once nothing
	// refers to it (no head, no queue, no claim on its way).
	pool sync.Pool
}

// maxHandoffs is how many times in a row a Client hands a lock to its own waiters, and yieldFor the head
// start its waiters then give the others (see gates).
const (
	maxHandoffs = 8
	yieldFor    = 5 * time.Millisecond
)

// gate is the local queue of one lock's waiters.
type gate struct {
	head   *gateWaiter   // the waiter asking Redis; nil when none
	queue  []*gateWaiter // the others, in order of arrival
	open   bool          // the head's attempts fail: acquisitions do not queue (see trouble)
	claims int           // handoffs on their way to its waiters (claimed or abandoned)
	// answered is when the last attempt of a head that Redis answered was sent: the waiters queued before
	// it were waiting while Redis answered (see trouble).
	answered time.Time
	first    gateWaiter // the first entrant's waiter, in the gate's allocation
}

// gateWaiter is one acquisition in a gate.
type gateWaiter struct {
	g       *gate
	name    string
	phase   waiterPhase   // see gatestate.go
	turn    chan struct{} // closed when it becomes the head or is let go (nil for one that entered as the head)
	outcome chan handoff  // the outcome of a handoff to it (capacity 1; a head's is made as it first sleeps)
	target  handoffTarget // what a handoff to it grants
	// hub is the head's place among the hub's waiters for the lock's releases, once it joined or got the
	// place of the head before it (see exit).
	hub *waiter
	// queuedAt is when it joined the queue (zero for one that entered as the head): see trouble.
	queuedAt time.Time
}

// handoff is what a release told the waiter it tried to hand the lock to: handed (with the hold's fencing
// token, when the release was sent, from which the hold's expiry counts, and the handoffs in a row that
// led to it) or not.
type handoff struct {
	handed   bool
	token    uint64
	granted  int64 // Redis's clock (ms) at the grant (see budget.go)
	sentAt   time.Time
	handoffs int
}

// enter puts an acquisition of name in its gate, and returns its waiter once it is the head, with handed
// false, or once a release handed it the lock (handed true: the waiter has left the gate; its hold is to
// be recorded). It returns a nil waiter and no error when deadline (zero: none) passes first, and ctx's
// error, or ErrClosed when stop is closed. The head must call exit once it is done. A waiter freed or
// riding (see gatestate.go) acquires on its own, and does not call exit.
func (gs *gates) enter(ctx context.Context, name string, t handoffTarget, deadline time.Time, stop <-chan struct{}) (*gateWaiter, handoff, error) {
	e, queued := gs.join(name, t)
	if !queued {
		return e, handoff{}, nil
	}
	timeout, stopTimer := deadlineTimer(deadline)
	defer stopTimer()
	var err error
	for {
		select {
		case <-e.turn:
			return e, handoff{}, nil
		case h := <-e.outcome:
			if h.handed {
				return nil, h, nil
			}
			continue // not handed: it waits on, in its place (or as the head, see deliver)
		case <-ctx.Done():
			err = ctx.Err()
		case <-timeout:
		case <-stop:
			err = ErrClosed
		}
		break
	}
	h, handed, head := gs.leaving(e)
	switch {
	case handed: // as it gave up: it holds the lock, as after an attempt
		return nil, h, nil
	case head: // it became the head meanwhile: its turn ends
		gs.exit(e)
	}
	return nil, handoff{}, err
}

// join puts an acquisition of name in its gate: as its head (attempting) when the gate has none, freed when
// the gate is open, else queued (and then reports queued).
func (gs *gates) join(name string, t handoffTarget) (e *gateWaiter, queued bool) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.m[name]
	switch {
	case g == nil:
		g, _ = gs.pool.Get().(*gate)
		if g == nil {
			g = new(gate)
		}
		if gs.m == nil {
			gs.m = make(map[string]*gate)
		}
		gs.m[name] = g
		g.first = gateWaiter{g: g, name: name, target: t, phase: wAttempting}
		g.head = &g.first
		return g.head, false
	case g.open:
		return &gateWaiter{phase: wFreed}, false
	case g.head == nil:
		// A gate whose queue waits for a handoff: the acquisition asks Redis, as the first entrant does.
		e := &gateWaiter{g: g, name: name, target: t, phase: wAttempting}
		g.head = e
		return e, false
	}
	e = &gateWaiter{g: g, name: name, turn: make(chan struct{}), outcome: make(chan handoff, 1), target: t, queuedAt: time.Now()}
	g.queue = append(g.queue, e)
	gs.queued.Add(1)
	if t.lock != nil && t.lock.c.holds.held(holdKey{key: name, field: t.field}) {
		gs.stepLocked(e, gOwnerAcquired) // its owner got the lock meanwhile: it re-enters (see acquiredBy)
	}
	return e, e.phase == wQueued
}

// dequeueLocked takes e out of its gate's queue, if it is there.
func (gs *gates) dequeueLocked(e *gateWaiter) {
	g := e.g
	for i, x := range g.queue {
		if x == e {
			g.queue = append(g.queue[:i], g.queue[i+1:]...)
			gs.queued.Add(-1)
			return
		}
	}
}

// leaving is called by a waiter that gives up (its ctx ended, its wait ran out, the Client closes). A
// handoff on its way is marked abandoned: its sender undoes it. One delivered already is returned
// (handed true): the waiter holds the lock, and must take it as an attempt's acquisition that it learns
// of as it gives up. head reports that it is its gate's head: it gives its turn up with exit.
func (gs *gates) leaving(e *gateWaiter) (h handoff, handed, head bool) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	switch e.phase {
	case wHanded:
		select {
		case h = <-e.outcome:
			return h, true, false
		default: // taken already
		}
	case wQueued, wClaimed:
		g := e.g
		gs.stepLocked(e, gGiveUp)
		gs.forgetIfEmptyLocked(g, e.name)
	case wAttempting, wSleeping:
		return handoff{}, false, true
	}
	return handoff{}, false, false
}

// alone reports whether e, returned by enter, acquires on its own, as if there were no gate (freed or
// riding, see gatestate.go), and whether it does so as a waiter already (riding).
func (gs *gates) alone(e *gateWaiter) (alone, riding bool) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	return e.phase == wFreed || e.phase == wRiding, e.phase == wRiding
}

// exit ends the turn of e, the head of its gate: the first waiter in the queue that no handoff is on its
// way to becomes the head, and gets e's place among the hub's waiters (e.hub), so that the Client's
// subscriptions for the lock stay as they are from one head to the next. When nobody takes it, exit
// leaves the hub.
func (gs *gates) exit(e *gateWaiter) {
	gs.mu.Lock()
	g := e.g
	if e.phase.final() && e.phase != wHanded || g.head != e {
		gs.mu.Unlock()
		return
	}
	g.head, g.open = nil, false
	gs.stepLocked(e, gExit)
	w, next := e.hub, ""
	e.hub = nil
	if gs.promoteLocked(g, w) && w != nil {
		next = g.head.target.owner
	}
	gs.forgetIfEmptyLocked(g, e.name)
	gs.mu.Unlock()
	switch {
	case next != "":
		gs.hub.adopt(w, next) // before e's owner's acquisition is told to the hub (see hub.acquiredBy)
	case w != nil:
		gs.hub.leave(w)
	}
}

// forgetIfEmptyLocked forgets g, name's gate, once nobody is in it and no handoff is on its way to one of
// its waiters, and puts it in the pool for reuse. It does so once only, as it takes g out of gs.m: put
// twice, one gate would serve two locks at once.
func (gs *gates) forgetIfEmptyLocked(g *gate, name string) {
	if g.head != nil || len(g.queue) > 0 || g.claims > 0 || gs.m[name] != g {
		return
	}
	delete(gs.m, name)
	p := g.first.phase // final: kept for a late look of its waiter's, until the gate's reuse
	*g = gate{}
	g.first.phase = p
	gs.pool.Put(g)
}

// promoteLocked makes the first waiter of g's queue that no handoff is on its way to the head, if g has
// none, with w (nil: none) as its place among the hub's waiters. It reports whether it made one.
func (gs *gates) promoteLocked(g *gate, w *waiter) bool {
	if g.head != nil {
		return false
	}
	for _, x := range g.queue {
		if x.phase == wQueued {
			gs.dequeueLocked(x)
			g.head, x.hub = x, w
			gs.stepLocked(x, gPromote)
			close(x.turn)
			return true
		}
	}
	return false
}

// attempting is called by the head before each attempt: no release may hand it the lock while the attempt
// is in flight. If a handoff to it is on its way, it waits for the handoff's outcome first and returns it;
// it gives up waiting (a handoff it gave up on is undone by its sender) when ctx ends (returning its
// error), stop is closed (ErrClosed), or deadline (zero: none) passes (errWaitOver).
func (gs *gates) attempting(ctx context.Context, e *gateWaiter, deadline time.Time, stop <-chan struct{}) (handoff, error) {
	if !gs.tryAttempt(e) {
		return handoff{}, nil
	}
	timeout, stopTimer := deadlineTimer(deadline)
	defer stopTimer()
	var err error
	select {
	case h := <-e.outcome:
		gs.heard(e, h)
		return h, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-stop:
		err = ErrClosed
	case <-timeout:
		err = errWaitOver
	}
	if h, handed := gs.stopWaiting(e); handed {
		return h, nil // delivered meanwhile
	}
	return handoff{}, err
}

// stopWaiting is called by the head e when it stops waiting for the outcome of a handoff on its way (its
// ctx ended, the Client closes, its wait ran out): one delivered meanwhile is returned (handed true); one
// still on its way is its sender's to undo. Told "not handed" meanwhile, e is the head still: its exit
// ends its turn.
func (gs *gates) stopWaiting(e *gateWaiter) (handoff, bool) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	switch e.phase {
	case wHanded:
		return <-e.outcome, true
	case wClaimed:
		gs.stepLocked(e, gGiveUp)
	}
	return handoff{}, false
}

// tryAttempt moves the head e to attempting, and reports false; or, when a handoff to it is on its way or
// was delivered while it woke for another cause (a message, its timer), true: it must take the handoff's
// outcome, and tell it to heard.
func (gs *gates) tryAttempt(e *gateWaiter) (claimed bool) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if e.phase == wClaimed || e.phase == wHanded {
		return true
	}
	gs.stepLocked(e, gAttempt)
	return false
}

// heard is told the outcome of the handoff the head e waited for before its attempt: not handed, it
// attempts now, as the head, with no handoff on its way (a release claims only a head that sleeps).
func (gs *gates) heard(e *gateWaiter, h handoff) {
	if h.handed {
		return
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	gs.stepLocked(e, gAttempt)
}

// errWaitOver is attempting's error when the acquisition's wait ran out: it returns false, with no error.
var errWaitOver = errors.New("relock: the wait ran out")

// sleeping is called by the head when it goes to sleep between attempts: a release may hand it the lock,
// and tells it so on the channel it returns.
func (gs *gates) sleeping(e *gateWaiter) <-chan handoff {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if e.outcome == nil {
		e.outcome = make(chan handoff, 1)
	}
	gs.stepLocked(e, gSleep)
	return e.outcome
}

// acquiredBy is told that owner acquired the lock name (by any path): its waiters in the gate's queue,
// other goroutines of a WithOwner token, leave it and acquire at once, a reentry. No release would come
// for them while their owner holds the lock.
func (gs *gates) acquiredBy(name, owner string) {
	if owner == "" || gs.queued.Load() == 0 {
		return
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if g := gs.m[name]; g != nil {
		for _, x := range copyQueue(g.queue) {
			if x.phase == wQueued && x.target.owner == owner {
				gs.stepLocked(x, gOwnerAcquired)
			}
		}
	}
}
