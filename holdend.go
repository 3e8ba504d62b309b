package relock

import (
	"container/heap"
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// A hold's beginning and end, beside its state (holdstate.go): the watch of its key, its span and group as
// it begins; as it ends, its contexts, span and metrics, reported once the table is unlocked, and the
// give-up in Redis of a hold ended while Redis may still have it.

// beganLocked does what a new hold needs besides its fields: its group, its span, the watch of its key.
func (w *holdTable) beganLocked(h *hold, a *acquisition) {
	if a.group != (holdKey{}) {
		w.groupLocked(h, a.group)
	}
	if a.traced && h.mode != entryMode { // no hold span where the acquisition was not traced (no SDK, or not sampled)
		h.span = w.c.tel.startHold(a.parent, a.kind, a.name)
	}
	switch {
	case h.mode == entryMode:
	case a.kind <= kindWrite: // a lock's hold: a field of a hash (see holdWatch)
		w.c.watch.add(h.key, false)
	case a.kind == kindSemaphore && a.renew.script == scriptPermitRenew: // a permit: a sorted set's member
		w.c.watch.add(h.key, true)
	}
}

// endLocked ends h: it leaves the table, the queue, its group and the watch, and what is to be reported of
// it (its contexts, span and metrics) is added to out, for once the table is unlocked. (It adds the ending
// itself rather than returning it: transitionLocked ends holds in a dozen places, each of which would
// otherwise keep a copy of an ending in its frame, and a deep frame costs a fresh goroutine a copy of its
// stack.)
func (w *holdTable) endLocked(h *hold, cause error, out *stepped) {
	h.phase = phaseEnded
	h.cause = cause
	if h.riskChanged != nil {
		close(h.riskChanged)
		h.riskChanged = nil
	}
	if h.riskTimer != nil {
		h.riskTimer.Stop()
		h.riskTimer = nil
	}
	if w.holds[h.key] == h {
		delete(w.holds, h.key)
		w.c.watch.remove(h.key)
	}
	w.ungroupLocked(h)
	if h.index >= 0 {
		heap.Remove(&w.queue, h.index)
	}
	if h.mode == entryMode {
		return // not a hold: nothing to report
	}
	e := ending{h: h, cause: cause, held: time.Since(h.acquiredAt)}
	for _, d := range h.derived {
		e.derived = append(e.derived, d.cancel)
	}
	out.add(e)
}

// endGivingUpLocked ends h with cause and, unless the Client is closing (Close gives holds up itself),
// adds to out what gives it up in Redis. It ends so a hold the watchdog renews whose renewals got no
// answer until its expiry, as lost (errRenewTimeout): Redis may well still have it, its renewals may have
// run, their replies lost. And a hold whose budget is spent (ErrMaxHoldReached), which Redis drops about
// now anyway: given up, its waiters are woken at once. Left there, a hold would keep the lock from
// everyone until it expired, and the owner's next acquisition would re-enter it (a hold count of 2 for the
// 1 the owner knows of, which its Unlock would not end). So it is given up as Close gives holds up (see
// giver), and until that is over the owner's next operation on the lock waits, or fails while Redis does
// not answer (see prepare). A queue entry is no hold: its owner still waits, and its next attempt joins
// again if the entry is gone.
func (w *holdTable) endGivingUpLocked(h *hold, cause error, now time.Time, out *stepped) {
	w.endLocked(h, cause, out)
	if w.closed || h.giver == nil || h.mode == entryMode {
		return
	}
	k, giver := h.key, h.giver
	// No renewal sent before now extends the hold past now + timeout: then Redis has surely dropped it.
	deadline := now.Add(w.timeout)
	s := w.beginSettlingLocked(k)
	out.gives = append(out.gives, func() {
		if !w.c.goBackground(func(life context.Context) {
			_ = giver.giveUp(life, k, deadline)
			s.done(0)
		}) {
			s.done(0)
		}
	})
}

// ending is a hold that ended, to be reported once holdTable.mu is released: cancelling its context and
// ending its span call out of relock.
type ending struct {
	h       *hold
	cause   error
	held    time.Duration
	derived []context.CancelCauseFunc // the hold's derived contexts, to end with it
}

// report records the end of the hold in its span and metrics, then cancels its contexts with its cause:
// whoever sees a hold context end finds the end already recorded.
func (e ending) report(t *telemetry) {
	h := e.h
	if h == nil {
		return
	}
	defer func() {
		if h.cancel != nil {
			h.cancel(e.cause)
		}
		for _, cancel := range e.derived {
			cancel(e.cause)
		}
	}()
	ctx := context.Background()
	t.holdTime.Record(ctx, e.held.Seconds(), t.byKind[h.kind].record...)
	o := outcomeReleased
	if errors.Is(e.cause, ErrLockLost) {
		o = outcomeGone
		switch e.cause {
		case errLeaseExpired:
		case ErrMaxHoldReached:
			t.maxHold.Add(ctx, 1, t.byKind[h.kind].add...)
		default:
			t.losses.Add(ctx, 1, t.byKind[h.kind].add...)
			t.logLoss(h, e.cause)
		}
	}
	if h.span.IsRecording() {
		if e.cause == ErrMaxHoldReached {
			h.span.AddEvent("max hold reached")
		} else if o == outcomeGone {
			h.span.AddEvent("lock lost", trace.WithAttributes(AttrCause.String(e.cause.Error())))
		}
		attrs := []attribute.KeyValue{AttrHoldMS.Float64(millis(e.held)), AttrRenewals.Int(h.renewals)}
		if h.token != 0 {
			attrs = append(attrs, AttrFencing.Int64(int64(h.token)))
		}
		endSpan(h.span, o, nil, attrs...)
	} else {
		h.span.End()
	}
}

func reportAll(t *telemetry, es []ending) {
	for _, e := range es {
		e.report(t)
	}
}
