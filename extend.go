package relock

import (
	"context"
	"time"
)

// Extend gives the hold of ctx's owner, one acquired with a lease (LockWithLease, or TryLock with a lease),
// a new lease: it lives at least lease from now, as redsync's Extend and bsm/redislock's Refresh do. It
// never shortens the hold (as a reentrant acquisition never does), and the hold keeps its count, fencing
// token and HoldContext. It is one round trip: the kind's renewal script for this one hold.
//
// It returns ErrNotHeld, and changes nothing, when the owner does not hold the lock, including when Redis
// no longer has the hold (its lease ran out, it was force-unlocked): the hold then ends for the Client as
// lost, as when the watchdog finds it gone. It returns ErrNoLease for a hold without a lease, which the
// watchdog keeps alive anyway. lease must be positive (ErrInvalidDuration); it is rounded up to whole
// milliseconds. A hold with a budget (WithMaxHold) is extended up to its budget at most, and once the
// budget is spent Extend returns ErrMaxHoldReached.
//
// When Redis does not answer, Extend returns the error; the hold may or may not have been extended, and
// the Client goes on counting on its earlier expiry, the earlier of the two.
func (l *RLock) Extend(ctx context.Context, lease time.Duration) error {
	field, err := l.prepareField(ctx)
	if err != nil {
		return l.fail(ctx, "extend", err)
	}
	if lease <= 0 {
		return l.fail(ctx, "extend", ErrInvalidDuration)
	}
	k := holdKey{key: l.name, field: field}
	if err := l.c.holds.beginTurn(ctx, k); err != nil {
		return l.fail(ctx, "extend", err)
	}
	defer l.c.holds.endTurn(k)
	r, err := l.c.holds.extension(k, lease)
	if err == ErrNotHeld {
		err = l.notHeld(field)
	}
	if err != nil {
		return l.fail(ctx, "extend", err)
	}
	sentAt := time.Now()
	reply, err := l.c.scripts.runInts(ctx, scriptCall{script: r.script, keys: r.keys,
		args: append([]string{r.ttlArg(0), r.field}, r.args...)})
	if err == nil && len(reply) != 1 {
		err = errUnexpectedReply
	}
	if err != nil {
		return l.fail(ctx, "extend", err)
	}
	if !l.c.holds.extended(k, reply[0], sentAt, r.ttl) {
		return l.fail(ctx, "extend", l.notHeld(field))
	}
	return nil
}

// extension returns the renewal that extends the lease hold k by lease, capped by its budget: ErrNotHeld
// when k is not held, ErrNoLease when the watchdog renews it, ErrMaxHoldReached when its budget is spent.
func (w *holdTable) extension(k holdKey, lease time.Duration) (renewal, error) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	h := w.holds[k]
	switch {
	case !h.heldLocked(now):
		return renewal{}, ErrNotHeld
	case h.renewed():
		return renewal{}, ErrNoLease
	case h.renew.script == nil:
		return renewal{}, ErrNotHeld // a test's hold, which cannot be renewed
	}
	r := h.renew
	r.check, r.ttl = false, roundUpToMillis(lease)
	if !h.budgetAt.IsZero() {
		left := h.budgetAt.Sub(now).Truncate(time.Millisecond)
		if left <= 0 {
			return renewal{}, ErrMaxHoldReached
		}
		r.ttl, r.until = min(r.ttl, left), h.budgetEndLocked(h.budgetAt)
	}
	return r, nil
}

// record returns k's hold record for a read of the hold by its owner (see readGone), nil when there is
// none (or only a queue entry).
func (w *holdTable) record(k holdKey) *hold {
	w.mu.Lock()
	defer w.mu.Unlock()
	if h := w.holds[k]; h != nil && h.mode != entryMode {
		return h
	}
	return nil
}

// readGone records that a read of the hold k by its owner (HoldCount, IsHeld), sent while h was its record,
// found that Redis does not have it: a loss, as when an Extend finds it gone, unless a release of it by its
// owner is under way. A record made since (the owner acquired the lock afresh meanwhile) is not the hold
// the read saw, and is left alone.
func (w *holdTable) readGone(k holdKey, h *hold) {
	var out stepped
	w.mu.Lock()
	if w.holds[k] == h {
		w.stepLocked(h, &holdEvent{ev: evReadGone}, &out)
	}
	w.mu.Unlock()
	out.finish(w.c.tel)
}

// extended records the reply of Extend's renewal of the lease hold k, sent at sentAt with time to live ttl:
// 1 extended, 0 gone, 2 or 3 its key is another kind's now. It reports whether the owner still holds it;
// a hold Redis no longer has ends as lost, as when the watchdog finds it gone (unless a release of it by
// its owner is under way, which may be what removed it: see holdTable.notHeld).
func (w *holdTable) extended(k holdKey, code int64, sentAt time.Time, ttl time.Duration) bool {
	ev := holdEvent{ev: evExtended, sentAt: sentAt, ttl: ttl}
	switch {
	case code == 0:
		ev.ev = evExtendGone
	case code != 1:
		ev.ev, ev.n = evRenewOtherKind, code
	}
	var out stepped
	w.mu.Lock()
	h := w.stepLocked(w.holds[k], &ev, &out)
	w.mu.Unlock()
	out.finish(w.c.tel)
	return h != nil && code == 1
}
