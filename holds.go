package relock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// noSpan is the span of a hold that is not traced.
var noSpan = trace.SpanFromContext(context.Background())

// holdKey names one owner's hold on one lock.
type holdKey struct {
	key   string // the lock's key
	field string // the owner field
}

// acquisition is what a lock type reports to the hold table when an acquisition succeeds.
type acquisition struct {
	key    holdKey
	kind   lockKind
	name   string
	count  int64           // the hold count Redis returned
	lease  time.Duration   // 0: the watchdog keeps the hold alive
	ttl    time.Duration   // the TTL the acquisition gave the hold in Redis: lease or the watchdog timeout, or less (a budget's cap, see capTTL); 0: lease or the watchdog timeout
	budget time.Duration   // WithMaxHold's: the hold lives at most this long from its first acquisition; 0: no cap
	sentAt time.Time       // when the acquisition was sent: the hold's TTL runs from no earlier than this
	renew  renewal         // how to renew it (used when lease is 0)
	token  uint64          // fencing token, 0 if the lock is not fenced
	parent context.Context // the acquiring call's context: the hold span's parent
	traced bool            // the acquisition's span records: give the hold one too
	group  holdKey         // the hold group the hold joins (see holdgroups.go); zero: none
	giver  giver           // how Close gives the hold up; nil: it cannot (a test's)
	// once says the lock's owners hold it once at most (an Election's): an acquisition again by its holder
	// keeps its count and token, so only a new token tells a first hold (see acquisition.first).
	once bool
	// handoffs counts the handoffs in a row that led to this hold (see gates): 0 for one from Redis.
	handoffs int
	// keepAlive marks an entry that is not a hold but something a waiter keeps alive the same way (a fair
	// lock's queue entry): renewed like a hold, but without contexts, spans or metrics.
	keepAlive bool
	// granted is Redis's clock (ms) when it granted the acquisition, 0 if unknown (see budget.go).
	granted int64
}

// hold is what the Client knows of one owner's hold on one lock: a record of the machine of holdstate.go,
// whose state (phase, renewing, releases, mode, count, expiry) only holdTable.transitionLocked changes.
// Every field is guarded by holdTable.mu.
type hold struct {
	key        holdKey
	kind       lockKind
	name       string
	phase      holdPhase
	renewing   renewPhase
	mode       holdMode
	releases   int // the releases of it by its owner under way (phase releasing or doubted)
	count      int64
	token      uint64
	handoffs   int           // see acquisition.handoffs
	renew      renewal       // how to renew the hold, or, for a lease hold, check that it is still there
	expiresAt  time.Time     // Redis drops the hold at this time or later, unless it is renewed
	ttl        time.Duration // the longest lease (or watchdog timeout) its acquisitions asked for
	next       time.Time     // when the watchdog next acts: a renewal falls due, or the lease ends
	index      int           // position in the watchdog's queue; -1 when not queued
	acquiredAt time.Time
	firstSent  time.Time // when the first acquisition was sent: a budget counts from it
	budgetAt   time.Time // when the hold's budget (WithMaxHold) ends it; zero: never
	granted    int64     // Redis's clock (ms) at the first acquisition's grant, 0 if unknown: the budget ends on it too (budget.go)
	renewals   int
	cause      error   // why it ended, once it has
	group      holdKey // the hold's group, if it has one (see holdgroups.go)
	giver      giver   // see acquisition.giver
	// ctx ends, with the hold's end as cause, when the hold ends; made by the first holdContext call.
	// derived memoizes, by parent, the contexts holdContext derived from it for a parent that can end, so
	// that calling holdContext again and again with one parent costs no memory.
	ctx     context.Context
	cancel  context.CancelCauseFunc
	derived map[context.Context]derived
	span    trace.Span // "relock.hold", from the first acquisition to the release or loss
	// renewErr is the error of a renewal that got no answer, kept until the next renewal or acquisition
	// that extends the hold; confirmed is when the latest of those was sent: the failure of a renewal sent
	// before it is old news. The hold is at risk while renewErr is set or its expiry has passed (see
	// riskLocked, risk.go); lost at its expiry, its cause says why (renewTimeout).
	renewErr  error
	confirmed time.Time
	// atRisk is riskLocked's value when last worked out; riskChanged, made by the first HoldRisk call after
	// a change, is closed at the next change of it or at the hold's end. riskTimer works it out again when
	// the expiry passes, which no event of the hold marks, while someone waits on riskChanged.
	atRisk      bool
	riskChanged chan struct{}
	riskTimer   *time.Timer
}

// heldLocked reports whether h is a hold its owner has at now: a hold (not a queue entry) that has not
// ended, and is not past its expiry. A hold past its expiry is gone from Redis even before the watchdog,
// which may run late on a loaded machine, has ended it.
func (h *hold) heldLocked(now time.Time) bool {
	return h != nil && h.phase != phaseEnded && h.mode != entryMode && now.Before(h.expiresAt)
}

// holdTable is the Client's table of its owners' holds: the truth behind HoldContext (holdcontext.go),
// FencingToken, Validity, and the settling of operations whose outcome was not learnt (settle.go). Its
// watchdog (watchdog.go), one goroutine, keeps the holds alive: holds without a lease are renewed every
// timeout/3, in batches, for as long as they are held, and holds with one are checked as often. A hold that
// Redis no longer has, that could not be renewed before it expired, or whose lease ran out is lost: its
// context is cancelled with a cause wrapping ErrLockLost. How a hold's state changes: holdstate.go.
type holdTable struct {
	c       *Client
	timeout time.Duration

	mu     sync.Mutex
	holds  map[holdKey]*hold
	groups map[holdKey][]holdKey // see holdgroups.go
	// turns and settlings: see settle.go.
	turns     map[holdKey]chan struct{}
	settlings map[holdKey][]*settling
	owed      map[holdKey][]*owedSending
	// queued counts, for each owner's entry in a wait queue (waitQueue.entryKey), the owner's acquisitions
	// waiting in it: the goroutines of one WithOwner token share the entry (see waitQueue.joined).
	queued  map[holdKey]*queuedOwner
	queue   holdQueue
	started bool
	closed  bool
	// sleepUntil is when the loop will next look at the queue unless woken: a hold whose next event is
	// later needs no wake-up, which keeps the loop asleep through most acquisitions.
	sleepUntil time.Time
	wake       chan struct{}
	stopped    chan struct{}
}

func newHoldTable(c *Client, timeout time.Duration) *holdTable {
	return &holdTable{
		c:         c,
		timeout:   timeout,
		holds:     make(map[holdKey]*hold),
		turns:     make(map[holdKey]chan struct{}),
		settlings: make(map[holdKey][]*settling),
		owed:      make(map[holdKey][]*owedSending),
		queued:    make(map[holdKey]*queuedOwner),
		wake:      make(chan struct{}, 1),
		stopped:   make(chan struct{}),
	}
}

// step applies ev to the record of k, and reports what ended once the table is unlocked.
func (w *holdTable) step(k holdKey, ev *holdEvent) {
	var out stepped
	w.mu.Lock()
	w.stepLocked(w.holds[k], ev, &out)
	w.mu.Unlock()
	out.finish(w.c.tel)
}

// acquired records a successful acquisition, first or reentrant, and schedules what the hold needs. Once
// Close has begun it records nothing: it gives the hold up in the background, and reports false.
func (w *holdTable) acquired(k holdKey, a *acquisition) bool {
	a.key = k
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		if a.giver != nil {
			r := relinquishment{k: k, giver: a.giver, deadline: a.sentAt.Add(cmp(a.lease, w.timeout))}
			w.c.goBackground(func(life context.Context) { _ = r.run(life) })
		}
		return false
	}
	var out stepped
	w.transitionLocked(w.holds[k], &holdEvent{ev: evAcquired}, a, &out)
	w.mu.Unlock()
	out.finish(w.c.tel)
	return true
}

// releasing records that the owner is sending a release of k. Its outcome is then recorded by released,
// notHeld or releaseUnanswered, exactly one of them. (Releases through a hold group count themselves:
// see takeFromGroup, takeOne.)
func (w *holdTable) releasing(k holdKey) { w.step(k, &holdEvent{ev: evReleaseSent}) }

// released records the hold count Redis returned for a release (0 for a release whose outcome is left to
// the background); at zero the hold ends, released.
func (w *holdTable) released(k holdKey, left int64) {
	w.step(k, &holdEvent{ev: evReleased, n: left})
}

// notHeld records that Redis says the owner does not hold the lock, in reply to a release: a hold this
// Client believed in was lost without the watchdog noticing yet, unless another release of it by its owner
// is under way, which may be what removed it: then that one's outcome decides.
func (w *holdTable) notHeld(k holdKey) { w.step(k, &holdEvent{ev: evReleaseNotHeld}) }

// releaseUnanswered records that a release of k by its owner got no reply that tells the hold's fate: it
// did not run, or its outcome is being learnt in the background.
func (w *holdTable) releaseUnanswered(k holdKey) { w.step(k, &holdEvent{ev: evReleaseUnanswered}) }

// entryLeft records that the wait queue entry k is gone: its owner's acquisition removed it.
func (w *holdTable) entryLeft(k holdKey) { w.step(k, &holdEvent{ev: evEntryLeft}) }

// watchedHolds returns the holds of keys that the table has and that are held, each with its hold (see
// holdWatch). A read of a key that is gone puts it in Redis's tracking table all the same, where it stays
// until the key is written again, for good for a name no one uses again; so a hold whose release is under
// way, or doubted, is not read: the release may have deleted its key. Its outcome decides the hold's fate,
// and a hold it leaves held is read again (see stepLocked).
func (w *holdTable) watchedHolds(keys []holdKey) []watched {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]watched, 0, len(keys))
	for _, k := range keys {
		if h := w.holds[k]; h != nil && h.mode != entryMode && h.phase == phaseHeld {
			out = append(out, watched{k, h})
		}
	}
	return out
}

// checkNow is told by the watch that Redis may no longer have h: the watchdog renews or checks it at once,
// and ends it as lost if it is gone, with the cause and the handling of a renewal that finds it gone (a
// release under way decides; a key of another kind is told). A renewal of it under way was sent before
// the watch's read: the hold is looked at again once it is back.
func (w *holdTable) checkNow(h *hold) {
	var out stepped
	w.mu.Lock()
	if w.holds[h.key] == h {
		w.stepLocked(h, &holdEvent{ev: evWatchGone}, &out)
	}
	w.mu.Unlock()
	out.finish(w.c.tel)
}

// token returns the fencing token of the hold k, if it is held and fenced.
func (w *holdTable) token(k holdKey) (uint64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if h := w.holds[k]; h.heldLocked(time.Now()) {
		return h.token, true
	}
	return 0, false
}

// expiry returns when the hold k expires unless renewed, and its TTL, if it is held.
func (w *holdTable) expiry(k holdKey) (time.Time, time.Duration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if h := w.holds[k]; h.heldLocked(time.Now()) {
		return h.expiresAt, h.ttl, true
	}
	return time.Time{}, 0, false
}

// capTTL returns ttl, the time to live an acquisition of k would give the hold in Redis, capped so that it
// does not outlive the hold's budget: the budget of the hold k if it is held, and budget (WithMaxHold's,
// 0: none), counted from the hold's first acquisition if it is held, else from now. It returns too when
// the held hold's budget ends on Redis's clock (ms; 0: no budget, or not known, see budget.go), whether
// the hold has a budget, and ErrMaxHoldReached when a held hold's budget has run out (the watchdog is about to end it).
func (w *holdTable) capTTL(k holdKey, budget, ttl time.Duration) (time.Duration, int64, bool, error) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	at, end := time.Time{}, int64(0)
	if h := w.holds[k]; h.heldLocked(now) {
		at = h.budgetAt
		if budget > 0 {
			if b := h.firstSent.Add(budget); at.IsZero() || b.Before(at) {
				at = b
			}
		}
		end = h.budgetEndLocked(at)
	} else if budget > 0 {
		at = now.Add(budget)
	}
	if at.IsZero() {
		return ttl, 0, false, nil
	}
	left := at.Sub(now).Truncate(time.Millisecond) // Redis counts whole milliseconds: never past the budget
	if left <= 0 {
		return 0, 0, true, ErrMaxHoldReached
	}
	return min(ttl, left), end, true, nil
}

// handoffs returns the hold count known for k, and the handoffs in a row that led to its hold (see gates).
func (w *holdTable) handoffs(k holdKey) (count int64, streak int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if h := w.holds[k]; h != nil {
		return h.count, h.handoffs
	}
	return 0, 0
}

// held reports whether k is held (see hold.heldLocked).
func (w *holdTable) held(k holdKey) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.holds[k].heldLocked(time.Now())
}

// count returns the hold count known for k.
func (w *holdTable) count(k holdKey) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if h := w.holds[k]; h != nil {
		return h.count
	}
	return 0
}

// heldByKind counts the holds by kind, for the relock.held metric.
func (w *holdTable) heldByKind() (n [numKinds]int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, h := range w.holds {
		if h.mode != entryMode {
			n[h.kind]++
		}
	}
	return n
}

// holdEvent is one event of a hold, with what it carries.
type holdEvent struct {
	ev     holdEv
	n      int64         // evReleased: the count left; evSettled: the count (< 0: unknown); evRenewOtherKind: the code
	sentAt time.Time     // evRenewed, evRenewUnanswered, evExtended: when the renewal was sent
	ttl    time.Duration // evRenewed, evExtended: the time to live it gave (0: the watchdog timeout)
	cause  error         // evShut; evRenewUnanswered: the renewal's error; evWriteEnded: the write hold's end
	now    time.Time
}

// renewTimeout is the cause of a hold lost at its expiry for want of a renewal: errRenewTimeout, and the
// error of the last renewal that got no answer, when there was one (matching ErrUnavailable when Redis
// could not be reached), so that the loss says why.
func renewTimeout(last error) error {
	if last == nil {
		return errRenewTimeout
	}
	if transient(last) {
		last = unavailable(last)
	}
	return errorf("%w (the last renewal: %w)", errRenewTimeout, last)
}

// errRetaken ends a hold that Redis had lost when its owner acquired the lock again: Redis made a new
// hold (a first one, with a new fencing token when fenced), which is no reentry of the old one.
var errRetaken = fmt.Errorf("%w: Redis no longer had the hold when its owner acquired the lock again", ErrLockLost)

// stepped is what transitions leave to do once the table is unlocked: report the holds that ended (their
// contexts, spans, metrics), and start the give-ups of holds ended while Redis may still have them. The
// first ending is kept in place: a release that ends one hold allocates nothing for it.
type stepped struct {
	first ending
	more  []ending
	gives []func()
}

func (s *stepped) add(e ending) {
	switch {
	case e.h == nil:
	case s.first.h == nil:
		s.first = e
	default:
		s.more = append(s.more, e)
	}
}

// finish reports what ended and starts the give-ups; the table must be unlocked.
func (s *stepped) finish(t *telemetry) {
	s.first.report(t)
	reportAll(t, s.more)
	for _, give := range s.gives {
		give()
	}
}

// cmp returns d, or def when d is 0.
func cmp(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// first reports whether a, the reply of an acquisition for the key whose hold is h, is a first hold
// rather than a reentry of h: a reentry of a reentrant kind counts 2 or more, and one of a lock its owners
// hold once (an Election's) keeps the hold's token, where a first hold takes a new one.
func (a *acquisition) first(h *hold) bool {
	if a.token != 0 && h.token != 0 && a.token != h.token {
		return true
	}
	return !a.once && a.count == 1
}
