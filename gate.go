package relock

import (
	"context"
	"errors"
	"slices"
	"sync"
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
//     if the queue is empty and the head is not in the middle of an attempt), in the release's own script run
//     (lua/rlock_handoff.lua): one round trip instead of a release, a message and an acquisition. A hold
//     handed over is a new holder's: a first hold (count 1), with a new fencing token when its lock is
//     fenced, and its own lease or watchdog renewal.
//   - A Client hands a lock over at most maxHandoffs times in a row. The release after that goes through
//     Redis and lets the other Clients go first: it wakes a waiter of another Client by name if there is
//     one; else it wakes Redisson's waiters with Redisson's message, and the gate's head tries yieldFor
//     later if anybody heard it; it names the gate's head only when nobody else waits. So a gate's waiters
//     never keep a lock from other Clients' waiters (relock's or Redisson's) for more than maxHandoffs
//     holds in a row.
//
// An owner that holds the lock already (a reentry), a single attempt (TryLock with no wait) and the other
// kinds do not use the gate.
type gates struct {
	hub *hub // the Client's
	mu  sync.Mutex
	m   map[string]*gate
	// pool keeps the gates forgotten, for reuse. It is the Client's own: a waiter that still refers to a
	// gate after it was forgotten (see enter) touches it under this Client's mu only.
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
	streak int           // handoffs in a row since the lock last went through Redis
	open   bool          // the head's attempts fail: acquisitions do not queue (see trouble)
	first  gateWaiter    // the first entrant's waiter, in the gate's allocation
}

// gateWaiter is one acquisition in a gate.
type gateWaiter struct {
	g       *gate
	name    string
	turn    chan struct{} // closed when it becomes the head (nil for a waiter that entered as the head)
	outcome chan handoff  // the outcome of a handoff to it (capacity 1; a head's is made as it first sleeps)
	target  handoffTarget // what a handoff to it grants
	// Under gates.mu: busy says an attempt of the head is under way (no handoff then); pending that a
	// handoff to it is in flight; abandoned that it gave up meanwhile (the handoff's sender undoes a hold
	// handed to it).
	busy, pending, abandoned bool
	// free says the gate let it go without a turn (see trouble): it acquires as if there were no gate, as
	// a waiter already (waiting), or from its first attempt.
	free, waiting bool
	// hub is the head's place among the hub's waiters for the lock's releases, once it joined or got the
	// place of the head before it (see exit).
	hub *waiter
}

// handoff is what a release told the waiter it tried to hand the lock to: handed (with the hold's fencing
// token and when the release was sent, from which the hold's expiry counts) or not.
type handoff struct {
	handed  bool
	token   uint64
	granted int64 // Redis's clock (ms) at the grant (see budget.go)
	sentAt  time.Time
}

// enter puts an acquisition of name in its gate, and returns its waiter once it is the head, with handed
// false, or once a release handed it the lock (handed true: the waiter has left the gate; its hold is to
// be recorded). It returns a nil waiter and no error when deadline (zero: none) passes first, and ctx's
// error, or ErrClosed when stop is closed. The head must call exit once it is done. A waiter with free set
// was let go without a turn (see trouble): it acquires on its own, and does not call exit.
func (gs *gates) enter(ctx context.Context, name string, t handoffTarget, deadline time.Time, stop <-chan struct{}) (*gateWaiter, handoff, error) {
	gs.mu.Lock()
	g := gs.m[name]
	if g == nil {
		g, _ = gs.pool.Get().(*gate)
		if g == nil {
			g = new(gate)
		}
		if gs.m == nil {
			gs.m = make(map[string]*gate)
		}
		gs.m[name] = g
		g.first = gateWaiter{g: g, name: name, target: t, busy: true}
		g.head = &g.first
		gs.mu.Unlock()
		return g.head, handoff{}, nil
	}
	if g.open {
		gs.mu.Unlock()
		return &gateWaiter{free: true}, handoff{}, nil
	}
	if g.head == nil {
		// A gate kept for its streak (see forgetIfEmptyLocked), or whose queue waits for a handoff: the
		// acquisition asks Redis, as the first entrant does.
		e := &gateWaiter{g: g, name: name, target: t, busy: true}
		g.head = e
		gs.mu.Unlock()
		return e, handoff{}, nil
	}
	e := &gateWaiter{g: g, name: name, turn: make(chan struct{}), outcome: make(chan handoff, 1), target: t}
	g.queue = append(g.queue, e)
	gs.mu.Unlock()

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
	if h, handed := gs.leaving(e); handed { // as it gave up: it holds the lock, as after an attempt
		return nil, h, nil
	}
	gs.mu.Lock()
	if e.free {
		// The gate let it go as it gave up (see trouble): it is in the gate no more, which may be forgotten
		// and reused for another lock already.
		gs.mu.Unlock()
		return nil, handoff{}, err
	}
	if g.head == e { // it became the head meanwhile: the turn goes on
		gs.mu.Unlock()
		gs.exit(e)
		return nil, handoff{}, err
	}
	g.queue = slices.DeleteFunc(g.queue, func(x *gateWaiter) bool { return x == e })
	gs.leaveLocked(e)
	gs.mu.Unlock()
	return nil, handoff{}, err
}

// leaving is called by a waiter that gives up while a release may hand it the lock. A handoff on its way
// is marked abandoned: its sender undoes it. One delivered already is returned (handed true): the waiter
// holds the lock, and must take it as an attempt's acquisition that it learns of as it gives up.
func (gs *gates) leaving(e *gateWaiter) (handoff, bool) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if e.pending {
		e.abandoned = true
		return handoff{}, false
	}
	select {
	case h := <-e.outcome:
		return h, h.handed
	default:
		return handoff{}, false
	}
}

// exit ends the turn of e, the head of its gate: the first waiter in the queue that no handoff is on its
// way to becomes the head, and gets e's place among the hub's waiters (e.hub), so that the Client's
// subscriptions for the lock stay as they are from one head to the next. When nobody takes it, exit
// leaves the hub.
func (gs *gates) exit(e *gateWaiter) {
	gs.mu.Lock()
	g := e.g
	if g.head != e {
		gs.mu.Unlock()
		return
	}
	g.head, g.open = nil, false
	w, next := e.hub, ""
	e.hub = nil
	if gs.promoteLocked(g, w) && w != nil {
		next = g.head.target.owner
	}
	gs.leaveLocked(e)
	gs.mu.Unlock()
	switch {
	case next != "":
		gs.hub.adopt(w, next) // before e's owner's acquisition is told to the hub (see hub.acquiredBy)
	case w != nil:
		gs.hub.leave(w)
	}
}

// leaveLocked is called once e has left its gate (or never will be in it again). A handoff on its way to
// it is the sender's to undo (see deliver). A gate that nobody is in any more is forgotten, and reused
// unless a handoff to its first waiter is still on its way.
func (gs *gates) leaveLocked(e *gateWaiter) {
	if e.pending {
		e.abandoned = true
	}
	gs.forgetIfEmptyLocked(e.g, e.name)
}

// forgetIfEmptyLocked forgets g, name's gate, if nobody is in it and the lock's last holder did not get
// it from the gate (its release counts in the streak), and reuses it unless a handoff to its first waiter
// is still on its way (deliver then leaves the gate untouched: its waiter gave up). It puts a gate back in
// the pool once only, as it takes it out of gs.m: a later call for a gate forgotten already (a waiter
// leaving late) does nothing. Put twice, one gate would serve two locks at once.
func (gs *gates) forgetIfEmptyLocked(g *gate, name string) {
	if g.head != nil || len(g.queue) > 0 || g.streak > 0 || gs.m[name] != g {
		return
	}
	delete(gs.m, name)
	if !g.first.pending {
		*g = gate{}
		gs.pool.Put(g)
	}
}

// promoteLocked makes the first waiter of g's queue that no handoff is on its way to the head, if g has
// none, with w (nil: none) as its place among the hub's waiters. It reports whether it made one.
func (gs *gates) promoteLocked(g *gate, w *waiter) bool {
	if g.head != nil {
		return false
	}
	for i, x := range g.queue {
		if !x.pending {
			g.queue = slices.Delete(g.queue, i, i+1)
			x.busy, x.hub = true, w
			g.head = x
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
	gs.mu.Lock()
	if !e.pending {
		e.busy = true
		gs.mu.Unlock()
		return handoff{}, nil
	}
	gs.mu.Unlock()
	timeout, stopTimer := deadlineTimer(deadline)
	defer stopTimer()
	var err error
	select {
	case h := <-e.outcome:
		return h, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-stop:
		err = ErrClosed
	case <-timeout:
		err = errWaitOver
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if e.pending {
		e.abandoned = true
		return handoff{}, err
	}
	return <-e.outcome, nil // delivered meanwhile
}

// errWaitOver is attempting's error when the acquisition's wait ran out: it returns false, with no error.
var errWaitOver = errors.New("relock: the wait ran out")

// trouble is called by the head when an attempt failed with an error: the gate opens, and its waiters try
// for themselves, as do the acquisitions that come while the head is in the gate. A gate queues waiters
// of a lock that is taken, not of a Redis that does not answer. When the head was waiting already (its
// attempt was not its first), so do its waiters: they ride out a short outage as waiters do; else each
// makes a first attempt, which reports its own error at once.
func (gs *gates) trouble(e *gateWaiter, waiting bool) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := e.g
	if g.head != e {
		return
	}
	g.open = true
	for _, x := range g.queue {
		if !x.pending {
			x.free, x.waiting = true, waiting
			close(x.turn)
		}
	}
	g.queue = slices.DeleteFunc(g.queue, func(x *gateWaiter) bool { return x.free })
}

// sleeping is called by the head when it goes to sleep between attempts: a release may hand it the lock,
// and tells it so on the channel it returns.
func (gs *gates) sleeping(e *gateWaiter) <-chan handoff {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if e.outcome == nil {
		e.outcome = make(chan handoff, 1)
	}
	e.busy = false
	return e.outcome
}

// claim picks the waiter of name's gate that a release of the lock hands it to: the first of the queue,
// else the head if it is between attempts. (The head waits in Redis: the lock comes to it when it goes
// through Redis, at the latest after maxHandoffs handoffs; a handoff to it would make the next waiter
// the head, and have it ask Redis to take its place there.) It returns nil when there is none, and nil with yield true when
// the Client handed the lock over maxHandoffs times in a row: the release is to let the other Clients go
// first (the streak then begins again). Each release of the lock by one of
// the Client's owners calls it, so that a release through Redis ends the streak. The caller must deliver
// the outcome to the waiter it got.
func (gs *gates) claim(name string) (e *gateWaiter, yield bool) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.m[name]
	if g == nil {
		return nil, false
	}
	for _, x := range g.queue {
		if !x.pending {
			e = x
			break
		}
	}
	if h := g.head; e == nil && h != nil && !h.busy && !h.pending {
		e = h
	}
	if e == nil { // released through Redis
		g.streak = 0
		gs.forgetIfEmptyLocked(g, name)
		return nil, false
	}
	if g.streak >= maxHandoffs {
		g.streak = 0
		return nil, true
	}
	e.pending = true
	return e, false
}

// yielded is told that a release of name's lock that let the other Clients go first woke nobody by name,
// and somebody (Redisson's waiters) by the unlock message: the gate's head, which that release did not
// name, tries yieldFor later. (If Redisson's waiter took the lock, the head learns so and listens for
// Redisson's release; else it takes the lock.)
func (gs *gates) yielded(name string) {
	gs.mu.Lock()
	g := gs.m[name]
	gs.mu.Unlock()
	if g == nil {
		return
	}
	time.AfterFunc(yieldFor, func() {
		gs.mu.Lock()
		defer gs.mu.Unlock()
		if gs.m[name] != g { // gone, or reused
			return
		}
		if h := g.head; h != nil && !h.busy && !h.pending && h.outcome != nil {
			select {
			case h.outcome <- handoff{}: // not handed: it tries
			default:
			}
		}
	})
}

// deliver tells e, claimed for a handoff, its outcome. It reports false when e gave up meanwhile: a hold
// handed to it is then the caller's to undo. A waiter of the queue that was handed the lock leaves the
// gate; one that was not waits on, as the head if the gate has none.
func (gs *gates) deliver(e *gateWaiter, h handoff) bool {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	e.pending = false
	g := e.g
	if e.abandoned {
		return false
	}
	if h.handed {
		g.streak++
	}
	select {
	case <-e.outcome: // a nudge the head has not taken (see yielded): this outcome says more
	default:
	}
	e.outcome <- h
	if g.head != e {
		if h.handed {
			g.queue = slices.DeleteFunc(g.queue, func(x *gateWaiter) bool { return x == e })
			gs.forgetIfEmptyLocked(g, e.name)
		} else {
			gs.promoteLocked(g, nil)
		}
	}
	return true
}

// fromRedis is called when the head e got the lock through Redis: the streak of handoffs begins again.
func (gs *gates) fromRedis(e *gateWaiter) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	e.g.streak = 0
}

// waiters counts the acquisitions in name's gate: its head, if any, and those queued behind it.
func (gs *gates) waiters(name string) int {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.m[name]
	if g == nil {
		return 0
	}
	n := len(g.queue)
	if g.head != nil {
		n++
	}
	return n
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
