package relock

import (
	"context"
	"time"
)

// prepare waits until nothing settles k, and returns the hold count known for it. It waits for a
// settling only until the settling's next attempt fails (Redis unreachable, or not answering): it then
// fails with errSettling, which matches ErrUnavailable, and nothing is sent. (The settling goes on: an undo
// until Redis answers, a release until then or until the hold it settles would have expired.) So the owner's next operation waits for at
// most one attempt, a second at worst (retryAttemptTimeout), while Redis does not answer.
func (w *holdTable) prepare(ctx context.Context, k holdKey) (int64, error) {
	for {
		w.mu.Lock()
		h := w.holds[k]
		if h == nil {
			w.mu.Unlock()
			return 0, nil
		}
		count, settling, failed := h.count, h.settling, h.settleFailed
		w.mu.Unlock()
		if settling == nil {
			return count, nil
		}
		select {
		case <-settling:
		case <-failed.done:
			return 0, settlingError(failed.err)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// beginAttempt waits until no other acquisition attempt of k's owner on k's lock is in flight on this
// Client, and makes the caller's the one; endAttempt, called once its outcome is known (recorded as a
// hold, or its undo begun: see RLock.undoAcquire), lets the next one go. Two goroutines of one owner
// (WithOwner) may acquire a lock at once: were their attempts in flight together, the undo of one whose
// reply was lost could not tell its own level from the other's (lua/undo_acquire.lua counts levels), and
// would release the hold the other had just been granted (an Election, whose owner holds once, lost its
// leadership so). An attempt that waits here has sent nothing: ctx ending returns its error, with nothing
// to undo. Only an attempt that finds another in flight allocates (the channel it waits on). An owner's
// Campaigns take turns the same way (see Election.Campaign).
func (w *holdTable) beginAttempt(ctx context.Context, k holdKey) error {
	for {
		w.mu.Lock()
		ch, busy := w.attempting[k]
		if !busy {
			w.attempting[k] = nil
			w.mu.Unlock()
			return nil
		}
		if ch == nil {
			ch = make(chan struct{})
			w.attempting[k] = ch
		}
		w.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// tryBeginAttempt makes an attempt of k's owner the one in flight, as beginAttempt does, if no other is
// and k has no hold and nothing settling: a handoff to the owner (see gates) is such an attempt. It
// reports whether it did; the caller then calls endAttempt, or has the handoff's recipient call it.
func (w *holdTable) tryBeginAttempt(k holdKey) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, busy := w.attempting[k]; busy {
		return false
	}
	if h := w.holds[k]; h != nil && (h.settling != nil || h.count > 0) {
		return false
	}
	w.attempting[k] = nil
	return true
}

// settling reports whether k's hold is being settled (see prepare).
func (w *holdTable) settling(k holdKey) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := w.holds[k]
	return h != nil && h.settling != nil
}

// endAttempt ends the attempt beginAttempt let through, and wakes the attempts waiting for it.
func (w *holdTable) endAttempt(k holdKey) {
	w.mu.Lock()
	ch := w.attempting[k]
	delete(w.attempting, k)
	w.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// settleFailing notes that an attempt of the settling of k failed with err (nil: it did not fail), and
// tells the operations waiting for the settling (see prepare). It is for the settlings that have no
// settlement (a give-up: see giver); the others tell theirs.
func (w *holdTable) settleFailing(k holdKey, err error) {
	if err == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if h := w.holds[k]; h != nil {
		h.settleFailingLocked(err)
	}
}

func (h *hold) settleFailingLocked(err error) {
	if h.settling == nil {
		return
	}
	h.settleFailed.err = err
	close(h.settleFailed.done)
	h.settleFailed = newFailure()
}

// settlement is one settling of a hold record, started by settle or unlocking: the failures of its
// attempts and its end are told through it to the record it began on, even once the table no longer has
// that record (the watchdog drops a queue entry whose refreshes fail), so that whoever waits for it (see
// prepare) hears of both.
type settlement struct {
	w  *holdTable
	h  *hold
	ch chan struct{}
}

// failing notes that an attempt of the settling failed with err (nil: it did not fail).
func (s settlement) failing(err error) {
	if err == nil {
		return
	}
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	s.h.settleFailingLocked(err)
}

// failure is closed once, with the error it failed with.
type failure struct {
	done chan struct{}
	err  error // set before done is closed, never after
}

func newFailure() *failure { return &failure{done: make(chan struct{})} }

// startSettlingLocked makes ch h's settling.
func (h *hold) startSettlingLocked(ch chan struct{}) {
	h.settling, h.settleFailed = ch, newFailure()
}

// settle marks k as being settled, until the settlement it returns is done.
func (w *holdTable) settle(k holdKey) (prior int64, s settlement) {
	w.mu.Lock()
	h := w.holds[k]
	if h == nil {
		h = &hold{key: k, index: -1}
		w.holds[k] = h
	}
	prior = h.count
	ch := make(chan struct{})
	h.startSettlingLocked(ch)
	w.mu.Unlock()
	return prior, settlement{w, h, ch}
}

// unlocking marks the owner's hold k as being released in the background (an Unlock that could not learn
// the outcome of its release, or could not send it), one level less than the Client knew. If that release is
// the owner's last (no level is left), the hold ends now for the Client: the watchdog stops renewing it and its contexts end
// with context.Canceled. Until done is called with the count Redis answered (negative: no answer), the
// owner's next operation on the lock waits. after is the settling the release must wait for first (an
// earlier operation of the owner whose outcome is being settled), or nil; deadline is when the hold would
// have expired, after which there is nothing left to release.
func (w *holdTable) unlocking(k holdKey) (after <-chan struct{}, deadline time.Time, s settlement) {
	w.mu.Lock()
	now := time.Now()
	deadline = now.Add(w.timeout)
	h := w.holds[k]
	var e ending
	if h != nil {
		if h.settling != nil {
			after = h.settling
		}
		if !h.acquiredAt.IsZero() {
			deadline = h.expiresAt
			// The owner gave this level up, whenever Redis hears of it: its last Unlock ends the hold now,
			// even while earlier ones are still being completed.
			h.count--
			if h.count <= 0 {
				e = w.endLocked(h, context.Canceled)
				h = nil
			}
		}
	}
	if h == nil {
		h = &hold{key: k, index: -1}
		w.holds[k] = h
	}
	ch := make(chan struct{})
	h.startSettlingLocked(ch)
	w.mu.Unlock()
	e.report(w.c.tel)
	return after, deadline, settlement{w, h, ch}
}

// done ends the settling, given the hold count then known (negative: unchanged); a hold left with no
// count ends.
func (s settlement) done(count int64) {
	w, h := s.w, s.h
	w.mu.Lock()
	if count >= 0 {
		h.count = count
	}
	if h.settling == s.ch {
		h.settling, h.settleFailed = nil, nil
	}
	close(s.ch)
	var e ending
	if h.count <= 0 && h.settling == nil {
		e = w.endLocked(h, context.Canceled)
	}
	w.mu.Unlock()
	e.report(w.c.tel)
}
