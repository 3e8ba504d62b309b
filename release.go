package relock

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"time"
)

// The release path of every lock kind: Unlock, a release completed in the background when Unlock could not
// learn its outcome, and the give-up of a whole hold (Close, a hold the watchdog ended as lost).

// unlockAttempts is how many times Unlock sends a release whose outcome it could not learn, before it
// leaves the rest to the background; unlockRetryBackoff is the pause between them.
const (
	unlockAttempts     = 3
	unlockRetryBackoff = 20 * time.Millisecond
)

func (l *RLock) unlock(ctx context.Context) error {
	field, err := l.ownerOf(ctx)
	if err != nil {
		return l.fail(ctx, "unlock", err)
	}
	k := holdKey{key: l.name, field: field}
	call := newRelease(field)
	// Close waits for the Unlock: what it leaves to do (a handoff's undo, a release in the background) is
	// done before the Client ends. Once Close has begun, Close itself gives the hold up.
	if !l.c.begin() {
		return l.fail(ctx, "unlock", ErrClosed)
	}
	defer l.c.finish()
	// An Unlock whose ctx has ended (before it, or while it waits for its turn: an earlier operation of the
	// owner under way or settling) still releases: in the background, on the Client's lifetime.
	if ctx.Err() != nil {
		l.releaseInBackground(k, call)
		return l.fail(ctx, "unlock", ctx.Err())
	}
	if err := l.c.holds.beginTurn(ctx, k); err != nil {
		l.releaseInBackground(k, call)
		return l.fail(ctx, "unlock", err)
	}
	defer l.c.holds.endTurn(k)
	ctx, span := l.c.tel.startSpan(ctx, "relock.unlock", l.kind, l.name)
	l.c.holds.releasing(k) // a renewal that finds the hold gone meanwhile waits for this outcome
	left, err := l.releaseFirst(ctx, k, call)
	if outcomeUnknown(err) {
		call = repeating(call)
	}
	for attempt := 1; attempt < unlockAttempts && outcomeUnknown(err) && ctx.Err() == nil; attempt++ {
		select {
		case <-ctx.Done():
		case <-time.After(unlockRetryBackoff):
		}
		left, err = l.release(ctx, call)
	}
	if err != nil {
		if kind := (*KindError)(nil); errors.As(err, &kind) { // the name is another kind's: nothing of the owner's is there
			l.c.holds.notHeld(k)
			endSpan(span, outcomeNotHeld, nil)
			return l.fail(ctx, "unlock", kind.asNotHeld())
		}
		// No answer, or Redis saying it cannot serve now (LOADING, OOM...): the release is completed in the
		// background, as the owner asked. Any other error reply (NOPERM...) is the caller's to mend.
		if outcomeUnknown(err) || didNotRun(err) {
			l.releaseInBackground(k, call)
		}
		l.c.holds.releaseUnanswered(k)
		endSpan(span, outcomeError, err)
		return l.fail(ctx, "unlock", err)
	}
	if left < 0 {
		l.c.holds.notHeld(k)
		endSpan(span, outcomeNotHeld, nil)
		return l.fail(ctx, "unlock", l.notHeld(field))
	}
	l.c.holds.released(k, left)
	if left == 0 {
		endSpan(span, outcomeReleased, nil)
	} else {
		endSpan(span, outcomeDecremented, nil)
	}
	return nil
}

// unlockInBackground releases ctx's owner's hold in the background, as an Unlock whose ctx has ended does:
// the hold ends for the Client at once, whatever Redis answers, and the release goes on, on the Client's
// lifetime, until Redis answers or the hold would have expired.
func (l *RLock) unlockInBackground(ctx context.Context) error {
	field, err := l.ownerOf(ctx)
	if err != nil {
		return err
	}
	l.releaseInBackground(holdKey{key: l.name, field: field}, newRelease(field))
	return nil
}

// releaseInBackground completes, on the Client's lifetime, a release whose outcome Unlock could not learn
// (its ctx ended before, or while, it was sent; or the connection broke): it sends the request, again and
// again, until Redis answers (LOADING and the like are no answer: see retryUnknown) or the hold would have
// expired. A repeated request is applied once (see release). If it is the owner's last hold, the hold
// ends at once for the Client: the watchdog stops renewing it and its contexts end with context.Canceled.
// The owner's next operation on the lock waits for the release, as for an undo (see undoAcquire).
func (l *RLock) releaseInBackground(k holdKey, call releaseCall) {
	call = repeating(call)
	after, deadline, settling := l.c.holds.unlocking(k)
	ran := l.c.mustRun("a release in the background", func(life context.Context) {
		if after != nil { // an earlier operation of the owner is settling: release after it
			select {
			case <-after:
			case <-life.Done():
				settling.done(-1)
				return
			}
		}
		l.settleRelease(life, deadline, call, settling)
	})
	if !ran {
		settling.done(-1)
	}
}

// giveUp releases every level of the hold k, for Close or a hold the watchdog ended as lost (see giver): one
// release after another until the owner holds nothing. A release whose reply was lost is sent again as it
// is, and may then take one more level than was meant: that is harmless, since all of the owner's levels
// are being given up, the owner's next operation on the lock waits for it, and no other Client can hold a
// field of its owner.
func (l *RLock) giveUp(life context.Context, k holdKey, deadline time.Time) error {
	for {
		call := newRelease(k.field)
		left, err := l.c.retry(life, deadline, true, func(ctx context.Context) (int64, error) {
			left, err := l.release(ctx, call)
			call = repeating(call)          // a sending whose reply was lost is repeated as such
			l.c.holds.settleFailing(k, err) // an owner waiting for this (see holdTable.endGivingUpLocked) need not wait for a Redis that is gone
			return left, err
		})
		if err != nil {
			if life.Err() == nil {
				l.c.holds.owe(k, l.resender(call)) // sent, never answered: see owedSending
			}
			return err
		}
		if left <= 0 {
			return nil
		}
	}
}

// settleRelease sends call, a repeat, until Redis answers or deadline passes, and ends settling with the
// count Redis answered (not held: 0); with no answer, as owing the release (see owedSending).
func (l *RLock) settleRelease(life context.Context, deadline time.Time, call releaseCall, settling *settling) {
	left, err := l.c.retry(life, deadline, true, func(ctx context.Context) (int64, error) {
		left, err := l.release(ctx, call)
		settling.failing(err)
		return left, err
	})
	if err != nil && life.Err() == nil {
		settling.owe(l.resender(call))
		return
	}
	settling.done(max(left, 0)) // not held, or no answer until the hold's expiry: the hold is over
}

// resender sends the release request call again, as a repeat: see owedSending.
func (l *RLock) resender(call releaseCall) func(ctx context.Context) error {
	call = repeating(call)
	return func(ctx context.Context) error {
		_, err := l.release(ctx, call)
		return err
	}
}

// release sends one release request; sending the same request again (repeating) applies it once, whatever
// the order the sendings reach Redis in, a late one within voidMarkTTLArg of a repeat. The publish
// command is found out first when it is not known yet (ShardedPubSubAuto); a probe that gets no answer
// fails the call as an unanswered release would, so that it is repeated the same way.
func (l *RLock) release(ctx context.Context, call releaseCall) (int64, error) {
	call, err := l.withPublish(ctx, call)
	if err != nil {
		return 0, err
	}
	args := newArgs()
	defer freeArgs(args)
	return l.c.scripts.runInt(ctx, l.spec.release(call, args[:0]))
}

// voidMarkTTLArg is how long, in ms, the void mark a repeated release request leaves lives: a sending of
// the same request that reaches Redis later (held up on the way) changes nothing within that time (see
// lua/lib/release.lua). Such a sending arrives within a network delay, or never, as an undone acquisition
// attempt does: the same bound (undoMarkTTL).
var voidMarkTTLArg = fmtMillis(undoMarkTTL)

// newRelease is a release request of the owner field, with a fresh id, marked as sent first.
func newRelease(field string) releaseCall {
	var id [14]byte // '!' and up to 13 base-36 digits
	id[0] = '!'
	return releaseCall{field: field, request: string(strconv.AppendUint(id[:1], rand.Uint64(), 36))}
}

// repeating marks a release request as sent again: the script then checks whether it was applied already
// (the first sending skips that read), and leaves a void mark, so that a sending of the same request
// arriving later, held up on the way, changes nothing (see lua/lib/release.lua).
func repeating(call releaseCall) releaseCall {
	if call.request != "" {
		call.request = "?" + call.request[1:]
	}
	return call
}

// settled waits, as long as ctx allows, until no operation of ctx's owner on the lock is being settled
// (the undo of an acquisition whose reply was lost, a release completing in the background).
func (l *RLock) settled(ctx context.Context) {
	if field, err := l.ownerOf(ctx); err == nil {
		_, _ = l.c.holds.prepare(ctx, holdKey{key: l.name, field: field})
	}
}
