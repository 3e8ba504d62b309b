package relock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"
)

// Cooperative revocation: a caller asks a lock's holders to let go (RequestRelease), a holder that listens
// (ReleaseRequests) hears it and may release, and the requester may take the lock over after a grace
// period (Revoke), or at once whoever holds it (TakeOver).
//
// A request is published on the lock's request channel, relock_release_request:{<name>}, which a Client
// subscribes to while one of its holders of the lock listens for requests. A Redisson client never does:
// a lock one of its threads holds is taken over only by TakeOver, the explicit forced step.

// ReleaseRequest is a request to release a lock, as its holder hears it (see RLock.ReleaseRequests).
type ReleaseRequest struct {
	Reason string // what the requester said
	From   string // the requesting Client's ID (Client.ID)
}

// ErrNotHeard is Revoke's error when it did not take the lock over because its holder could not have
// heard the request: a Redisson client's holder, a relock holder that does not listen for requests
// (ReleaseRequests), or a holder that got the lock after the request was made. The lock stays its
// holder's; TakeOver takes it whoever holds it.
var ErrNotHeard = errors.New("relock: the lock's holder did not hear the request to release it")

// RequestRelease asks the current holders of the lock to release it, telling them reason: each holder that
// listens for requests (ReleaseRequests) gets it. It reports how many Clients heard it (0 when nobody holds
// the lock, or its holders do not listen: a Redisson client's never does). It is one script run; it
// changes nothing in Redis. Whether a holder lets go is its own decision: see Revoke for a request that
// ends in a takeover.
func (l *RLock) RequestRelease(ctx context.Context, reason string) (int, error) {
	if err := l.check(ctx); err != nil {
		return 0, l.fail(ctx, "requestrelease", err)
	}
	asked, err := l.requestRelease(ctx, reason)
	if err != nil {
		return 0, l.fail(ctx, "requestrelease", err)
	}
	return asked.heard, nil
}

// asked is what a request told of the lock: how many Clients heard it, whether every holder is relock's,
// and the holders' owner fields, sorted.
type asked struct {
	heard   int
	relock  bool
	holders []string
}

func (l *RLock) requestRelease(ctx context.Context, reason string) (asked, error) {
	ch := l.requestChannel()
	pub, err := l.c.publishCommand(ctx, ch)
	if err != nil {
		return asked{}, err
	}
	r, err := l.c.run(ctx, scriptReleaseRequest, []string{l.name, ch}, []string{pub, l.c.id + " " + reason}).ToArray()
	if err != nil {
		return asked{}, err
	}
	if len(r) < 2 {
		return asked{}, errUnexpectedReply
	}
	var a asked
	heard, err1 := r[0].AsInt64()
	relock, err2 := r[1].AsInt64()
	if err1 != nil || err2 != nil {
		return asked{}, errUnexpectedReply
	}
	a.heard, a.relock = int(heard), relock == 1
	for _, m := range r[2:] {
		f, err := m.ToString()
		if err != nil {
			return asked{}, errUnexpectedReply
		}
		a.holders = append(a.holders, f)
	}
	slices.Sort(a.holders)
	return a, nil
}

// requestChannel is the lock's request channel.
func (l *RLock) requestChannel() string { return companion("relock_release_request", l.name) }

// ReleaseRequests returns a channel on which the hold of ctx's owner hears the requests to release the lock
// (RequestRelease, Revoke) made from now on, until the hold ends; then the channel is closed. Once it
// returns, the Client listens: it subscribes to the lock's request channel (one subscription per lock,
// whatever the number of listeners), for as long as a hold of the lock listens. The channel keeps the
// latest request not yet read. It returns ErrNotHeld when the owner does not hold the lock.
//
// A holder that hears a request decides: it may finish its work and Unlock, or go on. A requester that
// runs Revoke takes the lock over after its grace period whatever the holder does, and the holder then
// learns of its loss from its HoldContext.
func (l *RLock) ReleaseRequests(ctx context.Context) (<-chan ReleaseRequest, error) {
	field, err := l.prepareField(ctx)
	if err != nil {
		return nil, l.fail(ctx, "releaserequests", err)
	}
	done, err := l.c.holds.holdDone(holdKey{key: l.name, field: field})
	if err != nil {
		return nil, l.fail(ctx, "releaserequests", l.notHeld(field))
	}
	out := make(chan ReleaseRequest, 1)
	ch := l.requestChannel()
	l.c.requests.add(ch, out)
	stop, err := l.c.hub.listen(ctx, ch, func(msg string) { l.c.requests.deliver(ch, msg) })
	if err != nil {
		l.c.requests.remove(ch, out)
		return nil, l.fail(ctx, "releaserequests", err)
	}
	context.AfterFunc(done, func() {
		stop()
		l.c.requests.remove(ch, out)
	})
	return out, nil
}

// requestListeners are a Client's holders that listen for requests, by request channel.
type requestListeners struct {
	mu sync.Mutex
	m  map[string][]chan ReleaseRequest
}

func (r *requestListeners) add(channel string, ch chan ReleaseRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[string][]chan ReleaseRequest)
	}
	r.m[channel] = append(r.m[channel], ch)
}

// remove stops delivering to ch, and closes it.
func (r *requestListeners) remove(channel string, ch chan ReleaseRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := slices.DeleteFunc(r.m[channel], func(c chan ReleaseRequest) bool { return c == ch })
	if len(l) == 0 {
		delete(r.m, channel)
	} else {
		r.m[channel] = l
	}
	close(ch)
}

// deliver gives a request heard on channel to its listeners, each keeping the latest it has not read.
func (r *requestListeners) deliver(channel, msg string) {
	from, reason, _ := strings.Cut(msg, " ")
	req := ReleaseRequest{Reason: reason, From: from}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ch := range r.m[channel] {
		select {
		case <-ch: // an older request not read yet: the newer one replaces it
		default:
		}
		ch <- req
	}
}

// TakeOver takes the lock for ctx's owner, whoever holds it, however many times: every holder loses its
// hold (a relock holder's HoldContext ends with ErrLockLost, at once where the Client watches its holds,
// see Options.NoHoldWatch), and the owner holds the lock once, kept alive by the watchdog, with a new
// fencing token when the lock is fenced. It is one script run. It is the explicit, forced step of a
// revocation, the only one that takes a lock from a Redisson client's holder, which cannot hear a request.
// It applies to the reentrant lock (Client.Lock); other kinds fail with errors.ErrUnsupported.
func (l *RLock) TakeOver(ctx context.Context) error {
	return l.takeOver(ctx, "takeover", "*")
}

// Revoke asks the lock's holders to release it (RequestRelease, with reason), waits up to grace for the
// lock, as Lock does, and, if it is still held then, takes it over (TakeOver), but only from the holders
// that were asked and heard: relock holders that listen for requests. It returns nil when ctx's owner
// holds the lock, released to it or taken over. It returns ErrNotHeard, leaving the lock to its holder,
// when a holder could not hear (a Redisson client's holder, a relock holder that does not listen, or one
// that got the lock after the request). While nobody has heard, the request is made again every grace/5.
// It applies to the reentrant lock (Client.Lock); other kinds fail with errors.ErrUnsupported.
func (l *RLock) Revoke(ctx context.Context, reason string, grace time.Duration) error {
	if err := l.check(ctx); err != nil {
		return l.fail(ctx, "revoke", err)
	}
	if grace < 0 {
		return l.fail(ctx, "revoke", ErrInvalidDuration)
	}
	if l.kind != kindRLock {
		return l.fail(ctx, "revoke", errors.ErrUnsupported)
	}
	deadline := time.Now().Add(grace)
	a, err := l.requestRelease(ctx, reason)
	if err != nil {
		return l.fail(ctx, "revoke", err)
	}
	step := max(grace/5, 10*time.Millisecond)
	for {
		wait := min(step, time.Until(deadline))
		if wait < 0 {
			wait = 0
		}
		ok, err := l.TryLock(ctx, wait, 0)
		if err != nil || ok {
			return err
		}
		if time.Until(deadline) <= 0 {
			break
		}
		if a.heard == 0 && a.relock { // a listener may have been subscribing: ask again
			if a, err = l.requestRelease(ctx, reason); err != nil {
				return l.fail(ctx, "revoke", err)
			}
		}
	}
	if !a.relock || a.heard == 0 {
		return l.fail(ctx, "revoke", ErrNotHeard)
	}
	return l.takeOver(ctx, "revoke", strings.Join(a.holders, "\n"))
}

// takeOver runs lua/rlock_takeover.lua for ctx's owner, taking the lock from expected ('*': anyone).
func (l *RLock) takeOver(ctx context.Context, op, expected string) error {
	owner, err := l.prepare(ctx)
	if err != nil {
		return l.fail(ctx, op, err)
	}
	if l.kind != kindRLock {
		return l.fail(ctx, op, errors.ErrUnsupported)
	}
	if !l.c.begin() {
		return l.fail(ctx, op, ErrClosed)
	}
	defer l.c.finish()
	field := l.spec.field(owner)
	k := holdKey{key: l.name, field: field}
	ttl, ttlArg := l.c.watchdogTimeout, l.c.watchdogTimeoutArg
	if capped, end, err := l.c.holds.capTTL(k, l.maxHold, ttl); err != nil {
		return l.fail(ctx, op, err)
	} else if capped != ttl || end != 0 {
		ttl, ttlArg = capped, holdTTLArg(capped, end)
	}
	if _, err := l.c.holds.prepare(ctx, k); err != nil {
		return l.fail(ctx, op, err)
	}
	if err := l.c.holds.beginAttempt(ctx, k); err != nil {
		return l.fail(ctx, op, err)
	}
	defer l.c.holds.endAttempt(k)
	attempt := l.c.attemptID()
	s := l.spec.(*rlockSpec)
	sentAt := time.Now()
	reply, err := l.c.scripts.runAcquire(ctx, scriptCall{script: scriptTakeOver, keys: s.acquireKeys,
		args: []string{ttlArg, field, expected, attempt}})
	if err != nil {
		if mayHaveRun(err) {
			l.undoAcquire(k, ttl, attempt)
		}
		return l.fail(ctx, op, err)
	}
	switch reply[0] {
	case -3: // the owner's hold's budget had ended on Redis's clock: nothing changed
		return l.fail(ctx, op, ErrMaxHoldReached)
	case 1:
	default:
		return l.fail(ctx, op, ErrNotHeard) // the holders changed since the request
	}
	if !l.c.holds.acquired(k, acquisition{kind: l.kind, name: l.name, count: 1, ttl: ttl, budget: l.maxHold,
		sentAt: sentAt, renew: l.spec.renewal(field), token: uint64(reply[2]), granted: reply[3], parent: ctx, giver: l}) {
		return l.fail(ctx, op, ErrClosed)
	}
	return nil
}

// RequestStepDown asks the election's leader to step down, telling it reason, as RLock.RequestRelease asks
// a lock's holder: a leader that listens (StepDownRequests) hears it, and may Resign. It reports how many
// Clients heard it (0 when there is no leader, or it does not listen).
func (e *Election) RequestStepDown(ctx context.Context, reason string) (int, error) {
	if e == nil || e.c == nil {
		return 0, wrapErrCtx(ctx, "requeststepdown", "", ErrNilClient)
	}
	return e.lock.RequestRelease(ctx, reason)
}

// StepDownRequests returns a channel on which ctx's owner, while it leads, hears the requests to step down
// (RequestStepDown), as RLock.ReleaseRequests does for a lock's holder; it is closed when the leadership
// ends. It returns ErrNotHeld when the owner does not lead.
func (e *Election) StepDownRequests(ctx context.Context) (<-chan ReleaseRequest, error) {
	if e == nil || e.c == nil {
		return nil, wrapErrCtx(ctx, "stepdownrequests", "", ErrNilClient)
	}
	return e.lock.ReleaseRequests(ctx)
}
