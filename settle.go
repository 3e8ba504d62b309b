package relock

import (
	"context"
	"slices"
	"time"

	"github.com/relock-go/relock/internal/invariant"
)

// An owner's operations on one lock take turns on its Client, and wait for the settling of earlier ones
// whose outcome was not learnt.
//
// A turn is held by one operation of the owner on the lock at a time, from just before its script is sent
// until its reply is recorded: an acquisition attempt (or a handoff to the owner), a release, an Extend.
// So the hold table records their replies in the order Redis ran them: a reply of a first hold while the
// owner held the lock can only mean that Redis had lost the hold (holdstate.go). A turn is only ever held
// across one round trip; the waits of an acquisition are not in it.
//
// A settling is the completion, in the background, of an operation of the owner whose reply was lost:
// the undo of an acquisition (RLock.undoAcquire), the release of an Unlock that could not learn its
// outcome (releaseInBackground), the give-up of a hold the watchdog ended while Redis may have it, a wait
// queue entry's leave. Its life:
//
//	running --failed(err)--> running   the operations waiting for it, or for a later settling of its key,
//	                                   are told (prepare fails with errSettling)
//	running --done(count)--> done      the owner's hold, if any, takes the count Redis answered (< 0: unknown)
//	running --owe(resend)--> done      no sending was answered: one may still reach Redis, late (see owe)
//
// While one runs, the owner's operations on the lock wait (beginTurn, prepare), so that it sees counts
// nobody else is changing; but only until one of its attempts fails (Redis unreachable): then they fail
// with errSettling, which matches ErrUnavailable, and nothing is sent. So the owner's next operation waits
// for at most one attempt, a second at worst (retryAttemptTimeout), while Redis does not answer.
type settling struct {
	w     *holdTable
	key   holdKey
	over  bool          // done: the settling has ended
	ch    chan struct{} // closed at done
	fails *failure      // closed, and replaced, at each failed attempt
}

// failure is closed once, with the error it failed with.
type failure struct {
	done chan struct{}
	err  error // set before done is closed, never after
}

func newFailure() *failure { return &failure{done: make(chan struct{})} }

// beginSettlingLocked starts a settling of k, after those of k still running.
func (w *holdTable) beginSettlingLocked(k holdKey) *settling {
	s := &settling{w: w, key: k, ch: make(chan struct{}), fails: newFailure()}
	w.settlings[k] = append(w.settlings[k], s)
	return s
}

// failing notes that an attempt of the settling failed with err (nil: it did not fail), and tells the
// operations waiting for it or for a later settling of its key (see prepare): a later one may be waiting
// for it before it makes an attempt of its own (releaseInBackground), and its failures are theirs.
func (s *settling) failing(err error) {
	if err == nil {
		return
	}
	w := s.w
	w.mu.Lock()
	defer w.mu.Unlock()
	s.failingLocked(err)
}

func (s *settling) failingLocked(err error) {
	if s.over {
		return
	}
	for _, x := range s.w.settlings[s.key] {
		x.fails.err = err
		close(x.fails.done)
		x.fails = newFailure()
	}
}

// done ends the settling, given the hold count then known for its key (< 0: unknown). When no other
// settling of the key runs, the owner's hold, if the table has one, takes that count, and ends at 0.
func (s *settling) done(count int64) {
	w := s.w
	var out stepped
	w.mu.Lock()
	if s.over {
		w.mu.Unlock()
		if invariant.On() {
			invariant.Failf("settling of %q of %q: done twice", s.key.field, s.key.key)
		}
		return
	}
	s.over = true
	close(s.ch)
	running := slices.DeleteFunc(w.settlings[s.key], func(x *settling) bool { return x == s })
	if len(running) == 0 {
		delete(w.settlings, s.key)
		w.stepLocked(w.holds[s.key], &holdEvent{ev: evSettled, n: count}, &out)
	} else {
		w.settlings[s.key] = running
	}
	if invariant.On() && slices.Contains(w.settlings[s.key], s) {
		invariant.Failf("settling of %q of %q: still running once done", s.key.field, s.key.key)
	}
	w.mu.Unlock()
	out.finish(w.c.tel)
}

// An owedSending is a release the Client gave up sending with no sending answered: each may still reach
// Redis, held up on the way, after the owner's next hold began, and end it. So the owner's next operation
// on the lock first sends it once more, as a repeat (prepare): answered, it leaves a void mark that makes
// every sending of it arriving later change nothing (lua/lib/release.lua). A sending arrives within a
// network delay or never (the void mark's bound, undoMarkTTL): an owed sending older than that is
// forgotten.
type owedSending struct {
	at     time.Time // when it was last sent
	resend func(ctx context.Context) error
}

// owe ends s, whose sendings got no answer up to its deadline, as done with an unknown count, and makes
// resend owed by its key's owner (see owedSending).
func (s *settling) owe(resend func(ctx context.Context) error) {
	s.w.owe(s.key, resend)
	s.done(-1)
}

// owe makes resend owed by k's owner (see owedSending). Owed sendings past their bound are forgotten
// meanwhile.
func (w *holdTable) owe(k holdKey, resend func(ctx context.Context) error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	for k, owed := range w.owed {
		if owed = slices.DeleteFunc(owed, func(o *owedSending) bool { return now.Sub(o.at) > undoMarkTTL }); len(owed) == 0 {
			delete(w.owed, k)
		} else {
			w.owed[k] = owed
		}
	}
	w.owed[k] = append(w.owed[k], &owedSending{at: now, resend: resend})
}

// prepare waits until nothing settles k, sends the releases owed for k (see owedSending), and returns the
// hold count known for it; it fails with errSettling once an attempt of the settling it waits for fails
// (see settling), or an owed release gets no answer.
func (w *holdTable) prepare(ctx context.Context, k holdKey) (int64, error) {
	for {
		w.mu.Lock()
		running := w.settlings[k]
		if owed := w.owed[k]; len(running) == 0 && len(owed) > 0 {
			o := owed[0]
			w.mu.Unlock()
			if time.Since(o.at) <= undoMarkTTL {
				// Any answer will do, a refusal too (the key holds another kind now: a late sending is
				// refused as well); no answer fails the operation, which sent nothing else.
				if err := o.resend(ctx); outcomeUnknown(err) || didNotRun(err) {
					if ctx.Err() != nil {
						return 0, ctx.Err()
					}
					return 0, settlingError(err)
				}
			}
			w.mu.Lock()
			if owed := slices.DeleteFunc(w.owed[k], func(x *owedSending) bool { return x == o }); len(owed) == 0 {
				delete(w.owed, k)
			} else {
				w.owed[k] = owed
			}
			w.mu.Unlock()
			continue
		}
		if len(running) == 0 {
			var count int64
			if h := w.holds[k]; h != nil {
				count = h.count
			}
			w.mu.Unlock()
			return count, nil
		}
		s := running[len(running)-1]
		ch, failed := s.ch, s.fails
		w.mu.Unlock()
		select {
		case <-ch:
		case <-failed.done:
			return 0, settlingError(failed.err)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// beginTurn waits until nothing settles k (as prepare does) and no other operation of k's owner on k's
// lock has its turn, and gives the caller the turn; endTurn ends it. An operation that waits here has
// sent nothing: ctx ending returns its error, with nothing to undo. Only an operation that finds another
// in its turn allocates (the channel it waits on).
func (w *holdTable) beginTurn(ctx context.Context, k holdKey) error { return w.takeTurn(ctx, k, true) }

// beginAttempt takes k's turn without waiting for k's settlings: for turns that are not a hold's (an
// owner's Campaigns of an Election take turns so, see Election.Campaign).
func (w *holdTable) beginAttempt(ctx context.Context, k holdKey) error {
	return w.takeTurn(ctx, k, false)
}

// takeTurn is beginTurn, waiting for k's settlings first when settled.
func (w *holdTable) takeTurn(ctx context.Context, k holdKey, settled bool) error {
	for {
		if settled {
			if _, err := w.prepare(ctx, k); err != nil {
				return err
			}
		}
		w.mu.Lock()
		if settled && len(w.settlings[k]) > 0 { // a settling began meanwhile: wait for it first
			w.mu.Unlock()
			continue
		}
		ch, busy := w.turns[k]
		if !busy {
			w.turns[k] = nil
			w.mu.Unlock()
			return nil
		}
		if ch == nil {
			ch = make(chan struct{})
			w.turns[k] = ch
		}
		w.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// tryBeginTurn gives the caller k's turn, as beginTurn does, if nobody has it, nothing settles k and k has
// no hold: a handoff to the owner (see gates) takes its turn so. It reports whether it did; the caller then
// calls endTurn, or has the handoff's recipient call it.
func (w *holdTable) tryBeginTurn(k holdKey) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, busy := w.turns[k]; busy || len(w.settlings[k]) > 0 || w.holds[k] != nil {
		return false
	}
	w.turns[k] = nil
	return true
}

// endTurn ends the turn beginTurn gave, and wakes the operations waiting for it.
func (w *holdTable) endTurn(k holdKey) {
	w.mu.Lock()
	ch, busy := w.turns[k]
	delete(w.turns, k)
	w.mu.Unlock()
	if !busy && invariant.On() {
		invariant.Failf("turn of %q of %q ended, but nobody had it", k.field, k.key)
	}
	if ch != nil {
		close(ch)
	}
}

// endAttempt ends a turn that beginAttempt gave.
func (w *holdTable) endAttempt(k holdKey) { w.endTurn(k) }

// settleFailing notes that an attempt of the settling of k under way failed with err (nil: it did not
// fail), and tells the operations waiting for it (see prepare): for the settlings that do not hold their
// settling (a give-up: see giver).
func (w *holdTable) settleFailing(k holdKey, err error) {
	if err == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.settlings[k] {
		s.failingLocked(err)
	}
}

// settle starts a settling of k (an undo, a queue entry's leave), until done is called on what it returns,
// and returns the hold count known for k.
func (w *holdTable) settle(k holdKey) (prior int64, s *settling) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if h := w.holds[k]; h != nil {
		prior = h.count
	}
	return prior, w.beginSettlingLocked(k)
}

// unlocking marks the owner's hold k as being released in the background (an Unlock that could not learn
// the outcome of its release, or could not send it), one level less than the Client knew. If that release is
// the owner's last (no level is left), the hold ends now for the Client: the watchdog stops renewing it and
// its contexts end with context.Canceled. Until done is called with the count Redis answered (negative: no
// answer), the owner's next operation on the lock waits. after is the settling the release must wait for
// first (an earlier operation of the owner whose outcome is being settled), or nil; deadline is when the
// hold would have expired, after which there is nothing left to release.
func (w *holdTable) unlocking(k holdKey) (after <-chan struct{}, deadline time.Time, s *settling) {
	var out stepped
	w.mu.Lock()
	deadline = time.Now().Add(w.timeout)
	if running := w.settlings[k]; len(running) > 0 {
		after = running[len(running)-1].ch
	}
	if h := w.holds[k]; h != nil {
		deadline = h.expiresAt
		w.stepLocked(h, &holdEvent{ev: evUnlockedInBackground}, &out)
	}
	s = w.beginSettlingLocked(k)
	w.mu.Unlock()
	out.finish(w.c.tel)
	return after, deadline, s
}

// settling reports whether k is being settled (see prepare).
func (w *holdTable) settling(k holdKey) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.settlings[k]) > 0
}
