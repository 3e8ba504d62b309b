package relock

import (
	"container/heap"
	"context"
	"errors"
	"strings"
	"time"

	"github.com/relock-go/relock/internal/invariant"
)

// The life of a hold, as its Client knows it: one machine, whose state only transitionLocked (and
// stepLocked, which calls it for every event but an acquisition) changes.
//
// A hold record is one owner's hold of one lock (or one permit), or a wait queue entry that the watchdog
// keeps alive (entryMode: refreshed like a hold, without contexts, spans or metrics). Its phase:
//
//	held       Redis has it, as far as the Client knows
//	releasing  releases of it by its owner are under way (releases > 0)
//	doubted    releasing, and Redis said meanwhile that it is gone: one of those releases may have removed
//	           it, or it was lost; their outcomes decide
//	ended      released, lost, given up, or its Client closed: out of the table, for good
//
// and its place in the watchdog's cycle: queued (in the watchdog's queue, for its next renewal, check or
// end), sent (a renewal or check of it is under way), recheck (sent, and the watch saw it gone since: it is
// looked at again when the reply comes), parked (doubted, out of the queue until its releases decide).
//
// An owner's operations on one lock take turns on its Client (see holdTable.beginTurn): an acquisition,
// a release or an Extend is answered before the next is sent, so the replies come in the order Redis ran
// them. Renewals and the watch's reads are not operations of the owner: they only observe.
//
//	event                 held                   releasing               doubted
//	acquired (reentry)    count, expiry          illegal (turns)         illegal (turns)
//	acquired (a first     the old hold was lost: it ends (errRetaken), and a new record begins
//	  hold's reply)
//	releaseSent           releasing, leaves its  releasing, +1           doubted, +1
//	                        group
//	released(left > 0)    illegal                held when none left     releasing / held; queued
//	released(left <= 0)   illegal                ended (Canceled)        ended (Canceled)
//	releaseNotHeld        illegal                doubted, or ended       doubted, or ended (lost)
//	                                               (lost) when none left
//	releaseUnanswered,    illegal                held when none left     ended (lost) when none left
//	  releaseCancelled                             (back in its group)
//	unlockedInBackground  count - 1; at 0 ended (Canceled)
//	entryLeft             ended (a queue entry its owner's acquisition removed)
//	due                   a budget spent: ended (ErrMaxHoldReached), given up; past its expiry: ended
//	                        (lease: errLeaseExpired; renewed: errRenewTimeout, given up); else sent
//	renewed               queued, expiry         queued, expiry          queued, expiry (a renewal sent
//	                                                                       before the doubt says little)
//	renewGone             ended (lost)           doubted, parked         doubted, parked
//	renewOtherKind        ended (lost to the other kind)
//	renewUnanswered       queued for a retry soon (at risk); past its expiry or closing: ended, given up
//	watchGone             due now; recheck if    doubted (parked if      -
//	                        sent                   queued)
//	extended              expiry                 expiry                  expiry
//	extendGone            ended (lost)           doubted, parked         doubted, parked
//	readGone              ended (lost)           doubted, parked         doubted, parked
//	settled(count)        count, unless unknown; at 0 ended (Canceled)
//	shut                  ended (errGivenUp, or errClientClosed when abandoned)
//	writeEnded            ended (lost), and     -                       -
//	                        given up when the
//	                        write hold was
//
// readGone is a read of the hold by its owner (HoldCount, IsHeld) that found Redis without it, sent while
// the record was already its key's: what an Extend that found it gone tells, and as soon.
//
// writeEnded is a read hold's event when its owner's write hold of the same lock ends otherwise than by
// a release or Close: the read hold was taken under it (an owner holding both took the write first: the
// other order is ErrUpgrade), and in Redis lives within it until the write unlock (see
// rw_read_acquire.lua). A read hold being released waits for its releases' outcome instead, which shows
// whether it is gone.
//
// The watch of holds reads a hold only while it is held (see holdTable.watchedHolds): every transition
// from releasing or doubted back to held has the watch read it again (watch.touch), since an invalidation
// of its key that came meanwhile was let go.
//
// In test binaries (see internal/invariant), every transition is followed by a check of the invariants
// (checkHoldLocked), and an illegal pair fails: an ended hold is out of the table, the queue, its group
// and the watch; a live one is its key's record, has a count, is held exactly when no release of it is
// under way, is queued exactly when in the watchdog's queue, is parked only while doubted, and is in its
// group only while held.
type holdPhase uint8

const (
	phaseHeld holdPhase = iota
	phaseReleasing
	phaseDoubted
	phaseEnded
)

func (p holdPhase) String() string { return [...]string{"held", "releasing", "doubted", "ended"}[p] }

// renewPhase is where a hold is in the watchdog's cycle (see above).
type renewPhase uint8

const (
	renewQueued renewPhase = iota
	renewSent
	renewRecheck
	renewParked
)

func (r renewPhase) String() string { return [...]string{"queued", "sent", "recheck", "parked"}[r] }

// holdMode is what keeps a hold record alive: its lease (the watchdog only checks that Redis has it), the
// watchdog's renewals (a hold acquired, or acquired again, without a lease), or, for a wait queue entry,
// the watchdog's refreshes.
type holdMode uint8

const (
	leaseMode holdMode = iota
	renewMode
	entryMode
)

// renewed reports whether the watchdog extends h (else it only checks it, until its lease ends).
func (h *hold) renewed() bool { return h.mode != leaseMode }

// holdEv names a hold's events (see the table above).
type holdEv uint8

const (
	evAcquired holdEv = iota
	evReleaseSent
	evReleased
	evReleaseNotHeld
	evReleaseUnanswered
	evReleaseCancelled
	evUnlockedInBackground
	evEntryLeft
	evDue
	evRenewed
	evRenewGone
	evRenewOtherKind
	evRenewUnanswered
	evWatchGone
	evExtended
	evExtendGone
	evSettled
	evShut
	evWriteEnded
	evReadGone
)

func (e holdEv) String() string {
	return [...]string{"acquired", "releaseSent", "released", "releaseNotHeld", "releaseUnanswered",
		"releaseCancelled", "unlockedInBackground", "entryLeft", "due", "renewed", "renewGone",
		"renewOtherKind", "renewUnanswered", "watchGone", "extended", "extendGone", "settled", "shut",
		"writeEnded", "readGone"}[e]
}

// stepLocked applies ev, any event but evAcquired (see transitionLocked), to h, the record of its key
// (nil: none), and returns the key's live record afterwards, or nil.
func (w *holdTable) stepLocked(h *hold, ev *holdEvent, out *stepped) *hold {
	return w.transitionLocked(h, ev, nil, out)
}

// transitionLocked applies ev to h, the record of its key (nil: none; then only evAcquired does
// anything), and returns the key's live record afterwards, or nil. It is the only code that changes a
// hold's phase, renewal phase, releases, count, expiry or mode. a is evAcquired's acquisition, nil for
// every other event. (It is no field of ev: that would make every event as large as an acquisition, in
// the frame of each caller, and a deep stack costs a fresh goroutine a copy of its stack each time it
// outgrows it. Nor does ev point to it: escape analysis sees an event's fields as one, and would move
// each acquisition to the heap.)
func (w *holdTable) transitionLocked(h *hold, ev *holdEvent, a *acquisition, out *stepped) *hold {
	if (ev.ev == evAcquired) != (a != nil) && invariant.On() {
		invariant.Failf("hold event %s with acquisition %v", ev.ev, a != nil)
	}
	if ev.now.IsZero() {
		ev.now = time.Now()
	}
	if h != nil && h.phase == phaseEnded {
		h = nil // a reply for a hold that ended meanwhile: nothing left to change
	}
	if h == nil && ev.ev != evAcquired {
		return nil
	}
	before := phaseEnded
	if h != nil {
		before = h.phase
	}
	switch ev.ev {
	case evAcquired:
		h = w.acquiredLocked(h, ev, a, out)

	case evReleaseSent:
		h.releases++
		if h.phase == phaseHeld {
			h.phase = phaseReleasing
			w.ungroupLocked(h)
		}

	case evReleased, evReleaseNotHeld, evReleaseUnanswered, evReleaseCancelled:
		if h.phase == phaseHeld {
			w.illegalLocked(h, ev)
			break
		}
		h.releases--
		switch {
		case ev.ev == evReleased && ev.n <= 0:
			w.endLocked(h, context.Canceled, out) // whatever else said it was gone, its owner's release ended it
		case ev.ev == evReleased:
			h.count = ev.n
			w.releasesOverLocked(h, ev.now) // Redis still has it: a doubt is over
		case ev.ev == evReleaseNotHeld && h.releases > 0:
			h.phase = phaseDoubted // another release of its owner may be what removed it
			w.parkLocked(h)
		case ev.ev == evReleaseNotHeld, h.phase == phaseDoubted && h.releases == 0:
			w.endLocked(h, errHoldGone, out) // none of its owner's releases removed it: lost
		case h.releases == 0:
			h.phase = phaseHeld
			if ev.ev == evReleaseCancelled {
				w.regroupLocked(h)
			}
		}

	case evUnlockedInBackground:
		// Its owner gave a level up, whenever Redis hears of it: its last one ends the hold now.
		if h.count--; h.count <= 0 {
			w.endLocked(h, context.Canceled, out)
		}

	case evEntryLeft:
		w.endLocked(h, context.Canceled, out)

	case evDue:
		switch {
		case !h.budgetAt.IsZero() && !h.budgetAt.After(ev.now):
			// Its budget (WithMaxHold) is spent: it ends, and is given up in Redis, where no acquisition
			// or renewal gave it a time to live past this point.
			w.endGivingUpLocked(h, ErrMaxHoldReached, ev.now, out)
		case !h.expiresAt.After(ev.now) && !h.renewed():
			w.endLocked(h, errLeaseExpired, out)
		case !h.expiresAt.After(ev.now):
			// Past its expiry: it could not be renewed in time (this process was stopped, or starved of
			// CPU, or Redis did not answer). Redis has dropped it, and the holder must hear so at once, not
			// after a round trip.
			w.endGivingUpLocked(h, renewTimeout(h.renewErr), ev.now, out)
		default:
			h.renewing = renewSent
		}

	case evRenewed:
		recheck := h.renewing == renewRecheck
		h.renewing = renewQueued
		if h.renewed() { // a lease hold's check extends nothing
			h.renewals++
			h.lengthen(ev.sentAt, cmp(ev.ttl, w.timeout))
			h.confirmedLocked(ev.sentAt)
		}
		w.scheduleLocked(h, ev.sentAt)
		if recheck { // the watch saw it gone after this renewal was sent: look again now
			w.dueNowLocked(h, ev.now)
		}

	case evRenewGone, evExtendGone, evReadGone, evRenewOtherKind:
		if ev.ev == evRenewGone || ev.ev == evRenewOtherKind {
			h.renewing = renewQueued // out of the queue: parked, or ended, below
		}
		switch {
		case !h.renewed() && !ev.now.Before(h.expiresAt):
			w.endLocked(h, errLeaseExpired, out) // its lease ran out meanwhile: no loss
		case ev.ev == evRenewOtherKind:
			w.endLocked(h, lostToKind(h.kind, ev.n), out)
		case h.phase == phaseHeld:
			w.endLocked(h, errHoldGone, out)
		default:
			// Its owner is releasing it: that release may be what removed it. Its outcome decides whether
			// this was a loss; until then the hold is not renewed.
			h.phase = phaseDoubted
			w.parkLocked(h)
		}

	case evRenewUnanswered:
		h.renewing = renewQueued
		switch {
		case !h.renewed() && !ev.now.Before(h.expiresAt):
			w.endLocked(h, errLeaseExpired, out)
		case w.closed || !ev.now.Before(h.expiresAt):
			w.endGivingUpLocked(h, renewTimeout(ev.cause), ev.now, out)
		default:
			// No answer: not a loss until the hold's expiry. Try again soon.
			if h.renewed() && !ev.sentAt.Before(h.confirmed) {
				// Not older than the latest renewal or acquisition that extended it.
				h.renewErr = ev.cause
				if h.renewErr == nil {
					h.renewErr = errRenewUnanswered
				}
			}
			h.next = ev.now.Add(min(w.retryDelay(), h.expiresAt.Sub(ev.now)))
			w.queueLocked(h)
			if h.phase == phaseDoubted {
				w.parkLocked(h)
			}
		}

	case evWatchGone:
		switch {
		case h.phase != phaseHeld:
			// Its owner's release under way may be what removed it (its invalidation can come before the
			// release's reply): that release's outcome decides, as for a renewal that finds it gone.
			h.phase = phaseDoubted
			w.parkLocked(h)
		case h.renewing == renewSent:
			h.renewing = renewRecheck
		case h.renewing == renewQueued:
			w.dueNowLocked(h, ev.now)
		}

	case evExtended:
		if h.lengthen(ev.sentAt, ev.ttl) {
			h.ttl = max(h.ttl, ev.ttl)
			h.confirmedLocked(ev.sentAt)
		}
		if h.renewing == renewQueued {
			w.scheduleLocked(h, ev.sentAt) // its next check, or the end of its new lease
		}

	case evSettled:
		if ev.n >= 0 {
			h.count = ev.n
		}
		if h.count <= 0 {
			w.endLocked(h, context.Canceled, out)
		}

	case evShut:
		w.endLocked(h, ev.cause, out)

	case evWriteEnded:
		switch {
		case h.phase != phaseHeld:
		case givenUp(ev.cause):
			w.endGivingUpLocked(h, writeHoldEnded(ev.cause), ev.now, out)
		default:
			w.endLocked(h, writeHoldEnded(ev.cause), out)
		}
	}
	if before == phaseReleasing || before == phaseDoubted {
		if h.phase == phaseHeld {
			// Held again after a release: the watch did not read it meanwhile (see watchedHolds), and an
			// invalidation it let go by took the key out of Redis's tracking: it reads the key again.
			w.c.watch.touch(h.key)
		}
	}
	if invariant.On() {
		w.checkHoldLocked(h, before, ev)
	}
	if h.phase == phaseEnded {
		if before != phaseEnded {
			w.writeEndedLocked(h, ev.now, out)
		}
		return nil
	}
	w.refreshRiskLocked(h, ev.now)
	return h
}

// writeEndedLocked steps, when h is a write hold that ended otherwise than by its owner's release or
// Close, its owner's read hold of the same lock (evWriteEnded), if it has one.
func (w *holdTable) writeEndedLocked(h *hold, now time.Time, out *stepped) {
	if h.kind != kindWrite || h.mode == entryMode || h.cause == context.Canceled || errors.Is(h.cause, ErrClosed) {
		return
	}
	if r := w.holds[holdKey{h.key.key, strings.TrimSuffix(h.key.field, writerSuffix)}]; r != nil && r.kind == kindRead {
		w.stepLocked(r, &holdEvent{ev: evWriteEnded, cause: h.cause, now: now}, out)
		if invariant.On() && r.phase == phaseHeld {
			invariant.Failf("read hold %q of %q is still held after its owner's write hold ended (%v)", r.key.field, r.key.key, h.cause)
		}
	}
}

// givenUp reports whether a hold that ended with cause was given up in Redis (see endGivingUpLocked).
func givenUp(cause error) bool {
	return errors.Is(cause, ErrMaxHoldReached) || errors.Is(cause, errRenewTimeout)
}

// acquiredLocked is evAcquired: a new record for a first hold, or h updated by a reentry.
func (w *holdTable) acquiredLocked(h *hold, ev *holdEvent, a *acquisition, out *stepped) *hold {
	if h != nil && h.mode != entryMode && a.first(h) {
		// A first hold for a hold believed held: Redis had lost the old one (no release of it by its owner
		// was under way: an owner's operations on a lock take turns). It ends as lost; this is a new hold.
		w.endLocked(h, errRetaken, out)
		h = nil
	}
	if h == nil {
		h = &hold{key: a.key, index: -1, kind: a.kind, name: a.name, acquiredAt: ev.now, firstSent: a.sentAt,
			granted: a.granted, giver: a.giver, handoffs: a.handoffs, span: noSpan}
		if a.keepAlive {
			h.mode = entryMode
		}
		w.holds[a.key] = h
		w.beganLocked(h, a)
	} else if h.phase != phaseHeld && h.mode != entryMode {
		w.illegalLocked(h, ev)
	}
	h.count = a.count
	if a.token != 0 {
		h.token = a.token
	}
	h.renew = a.renew
	if a.budget > 0 {
		if at := h.firstSent.Add(a.budget); h.budgetAt.IsZero() || at.Before(h.budgetAt) {
			h.budgetAt = at
		}
	}
	ttl := a.lease
	if a.lease == 0 {
		if h.mode == leaseMode {
			h.mode = renewMode
		}
		ttl = w.timeout
	}
	h.ttl = max(h.ttl, ttl)
	if h.lengthen(a.sentAt, cmp(a.ttl, ttl)) {
		h.confirmedLocked(a.sentAt) // the acquisition extended the hold: a renewal's earlier failure is over
	}
	w.scheduleLocked(h, a.sentAt)
	return h
}

// lengthen moves h's expiry to sentAt+ttl when that is later (never earlier), and reports whether it did.
func (h *hold) lengthen(sentAt time.Time, ttl time.Duration) bool {
	if expires := sentAt.Add(ttl); expires.After(h.expiresAt) {
		h.expiresAt = expires
		return true
	}
	return false
}

// releasesOverLocked puts h, whose release left it held, in the phase that says whether others are under
// way, and back in the watchdog's queue if a doubt had parked it.
func (w *holdTable) releasesOverLocked(h *hold, now time.Time) {
	h.phase = phaseReleasing
	if h.releases == 0 {
		h.phase = phaseHeld
	}
	if h.renewing == renewParked {
		h.renewing = renewQueued
		w.dueNowLocked(h, now)
	}
}

// parkLocked takes h, doubted, out of the watchdog's queue: its renewal waits for the outcome of its
// owner's releases. A renewal under way is left so; its outcome parks it.
func (w *holdTable) parkLocked(h *hold) {
	if h.renewing != renewQueued {
		return
	}
	if h.index >= 0 {
		heap.Remove(&w.queue, h.index)
	}
	h.renewing = renewParked
}

// dueNowLocked makes h, queued, due now.
func (w *holdTable) dueNowLocked(h *hold, now time.Time) {
	h.next = now
	w.queueLocked(h)
	w.wakeLocked()
}
