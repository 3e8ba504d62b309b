package relock

import (
	"time"

	"github.com/relock-go/relock/internal/invariant"
)

// The life of a gate waiter (see gates): one machine, whose phase only gates.stepLocked changes, under
// gates.mu.
//
//	queued      in its gate's queue, waiting for its turn or a handoff
//	attempting  the gate's head, with an attempt of its own under way: no release hands it the lock
//	sleeping    the head between attempts: a release may hand it the lock
//	claimed     a release is handing it the lock (in the queue, or the head): nobody else claims it
//	abandoned   claimed, and it gave up meanwhile: the release undoes the hold it may have handed
//	freed       let go without a turn (the head's attempts fail, or its owner holds the lock): it acquires
//	            on its own, as if there were no gate, from its first attempt
//	riding      freed while the head was waiting already, having queued before an attempt Redis answered:
//	            it acquires as a waiter (it rides out an outage)
//	handed      a release handed it the lock: its hold is to be recorded
//	left        out of the gate: its turn as head is over, or it gave up
//
//	event          queued         attempting    sleeping      claimed              abandoned
//	promote        attempting     -             -             -                    -
//	attempt        -              attempting    attempting    (waits for the outcome; handed: takes it)
//	sleep          -              sleeping      -             -                    -
//	claim          claimed        -             claimed       -                    -
//	handed         -              -             -             handed               left (undone)
//	notHanded      -              -             -             queued / sleeping    left
//	ownerBusy      -              -             -             freed                left
//	giveUp         left           -             -             abandoned            abandoned
//	trouble        freed/riding   -             -             -                    -
//	ownerAcquired  freed          -             -             -                    -
//	exit (head)    -              left          left          abandoned            abandoned
//
// handed, ownerBusy and notHanded are a release's outcome (deliver); a claimed head that was not handed the
// lock sleeps with a not-handed outcome waiting, which makes it attempt at once. freed, riding, handed and
// left are final: a waiter in them never touches its gate again (the gate may serve another lock by then).
// "-" is an illegal pair: in test binaries it fails (internal/invariant), and after every transition the
// gate's invariants are checked (checkGateLocked).
type waiterPhase uint8

const (
	wQueued waiterPhase = iota
	wAttempting
	wSleeping
	wClaimed
	wAbandoned
	wFreed
	wRiding
	wHanded
	wLeft
)

func (p waiterPhase) String() string {
	return [...]string{"queued", "attempting", "sleeping", "claimed", "abandoned", "freed", "riding",
		"handed", "left"}[p]
}

// final reports whether p is one a waiter never leaves, and in which it is out of its gate.
func (p waiterPhase) final() bool { return p >= wFreed }

type gateEv uint8

const (
	gPromote gateEv = iota
	gAttempt
	gSleep
	gClaim
	gHanded
	gNotHanded
	gOwnerBusy
	gGiveUp
	gTrouble
	gTroubleRiding
	gOwnerAcquired
	gExit
)

func (e gateEv) String() string {
	return [...]string{"promote", "attempt", "sleep", "claim", "handed", "notHanded", "ownerBusy", "giveUp",
		"trouble", "troubleRiding", "ownerAcquired", "exit"}[e]
}

// gateNext is the machine's table: the phase each event moves each phase to; a phase missing for an event
// makes the pair illegal. (wClaimed or wHanded + gAttempt is no transition: the head takes the outcome.)
var gateNext = [...]map[waiterPhase]waiterPhase{
	gPromote:       {wQueued: wAttempting},
	gAttempt:       {wAttempting: wAttempting, wSleeping: wAttempting},
	gSleep:         {wAttempting: wSleeping},
	gClaim:         {wQueued: wClaimed, wSleeping: wClaimed},
	gHanded:        {wClaimed: wHanded, wAbandoned: wLeft},
	gNotHanded:     {wClaimed: wQueued, wAbandoned: wLeft}, // a claimed head sleeps: see stepLocked
	gOwnerBusy:     {wClaimed: wFreed, wAbandoned: wLeft},
	gGiveUp:        {wQueued: wLeft, wClaimed: wAbandoned, wAbandoned: wAbandoned}, // a head gives up by its exit
	gTrouble:       {wQueued: wFreed},
	gTroubleRiding: {wQueued: wRiding},
	gOwnerAcquired: {wQueued: wFreed},
	gExit:          {wAttempting: wLeft, wSleeping: wLeft, wClaimed: wAbandoned, wAbandoned: wAbandoned, wHanded: wHanded},
}

// stepLocked moves e, a waiter of gate g, by ev, and keeps g's queue, head and claims in line with it:
// the only code that changes a waiter's phase. It reports whether the pair was legal.
func (gs *gates) stepLocked(e *gateWaiter, ev gateEv) bool {
	g := e.g
	before := e.phase
	next, ok := gateNext[ev][before]
	if !ok {
		if invariant.On() {
			invariant.Failf("gate waiter of %q: %s in phase %s", e.name, ev, before)
		}
		return false
	}
	if ev == gNotHanded && g.head == e {
		next = wSleeping // with a not-handed outcome waiting: it attempts at once
	}
	e.phase = next
	switch {
	case ev == gClaim:
		g.claims++
	case ev == gHanded, ev == gNotHanded, ev == gOwnerBusy:
		g.claims--
	}
	if next.final() || next == wAbandoned {
		gs.dequeueLocked(e)
	}
	if (next == wFreed || next == wRiding) && e.turn != nil {
		close(e.turn) // it stops waiting for its turn (never had: a head is not freed): it acquires on its own
	}
	if invariant.On() {
		gs.checkGateLocked(g, e, ev)
	}
	return true
}

// checkGateLocked asserts g's invariants after ev moved e.
func (gs *gates) checkGateLocked(g *gate, e *gateWaiter, ev gateEv) {
	fail := func(what string) {
		invariant.Failf("gate of %q after %s of a waiter (now %s): %s", e.name, ev, e.phase, what)
	}
	claimed := 0
	for _, x := range g.queue {
		switch {
		case x == g.head:
			fail("the head is in the queue")
		case x.phase == wClaimed:
			claimed++
		case x.phase != wQueued:
			fail("a waiter in the queue is " + x.phase.String())
		}
	}
	if h := g.head; h != nil {
		switch h.phase {
		case wClaimed:
			claimed++
		case wAttempting, wSleeping, wAbandoned, wHanded:
		default:
			fail("the head is " + h.phase.String())
		}
	}
	switch {
	case g.claims < claimed:
		fail("fewer claims counted than waiters claimed")
	case g.claims < 0:
		fail("fewer than no claims")
	case g.open && g.head == nil:
		fail("open without a head")
	case e.phase.final() && e.phase != wHanded && g.head == e:
		fail("a final waiter is the head")
	case gs.queued.Load() < int64(len(g.queue)):
		fail("the count of queued waiters is behind this gate's queue")
	}
}

// answered is told by the head e that Redis answered its attempt sent at sent (see trouble).
func (gs *gates) answered(e *gateWaiter, sent time.Time) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if g := e.g; g.head == e && sent.After(g.answered) {
		g.answered = sent
	}
}

// trouble is called by the head when an attempt failed with an error: the gate opens, and its waiters try
// for themselves, as do the acquisitions that come while the head is in the gate. A gate queues waiters
// of a lock that is taken, not of a Redis that does not answer. When the head was waiting already (its
// attempt was not its first), so do the waiters that queued before an attempt Redis answered was sent:
// they were waiting while Redis answered, and ride out a short outage as waiters do. Every other waiter
// makes a first attempt, which reports its own error at once: a call made while Redis does not answer
// fails, as it would with no gate.
func (gs *gates) trouble(e *gateWaiter, waiting bool) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := e.g
	if g.head != e {
		return
	}
	g.open = true
	for _, x := range copyQueue(g.queue) {
		if x.phase == wQueued {
			ev := gTrouble
			if waiting && x.queuedAt.Before(g.answered) {
				ev = gTroubleRiding
			}
			gs.stepLocked(x, ev)
		}
	}
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

// count returns how many gates the Client has.
func (gs *gates) count() int {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	return len(gs.m)
}

// copyQueue returns a copy of q, to range over while the transitions change q.
func copyQueue(q []*gateWaiter) []*gateWaiter { return append([]*gateWaiter(nil), q...) }
