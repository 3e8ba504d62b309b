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
// A request is published on each holder's request channel, relock_release_request:{<name>}:<owner field>,
// which a Client subscribes to while that holder's hold listens for requests: a former holder's Client,
// still subscribed, does not get the requests made to the next holder, nor count in RequestRelease's
// reply. A Redisson client never subscribes: a lock one of its threads holds is taken over only by
// TakeOver, the explicit forced step.
//
// Whether a holder heard a Revoke is not inferred from subscriber counts, which cannot tell one hold of
// an owner from its next: a Client stays subscribed a few milliseconds after its listening hold ends (the
// hub unsubscribes asynchronously), or until it learns of a loss, while the same owner may hold the lock
// again; and any program may subscribe (a PSUBSCRIBE hears every channel). Instead, in Redis
// (lua/lib/requests.lua), a Revoke's request leaves a marker for each holder asked, which lives no longer
// than the hold asked; the holder's own Client marks it heard when the request reaches a hold of its
// that listens, in one script run (lua/release_request_heard.lua), and withdraws that when it learns the
// hold was lost; the takeover needs every holder's marker heard. The markers are fields of the undone
// attempts' marks (relock_undone:{<name>}), which the lock's final release (a release, a handoff, a force
// release) deletes already: the hot path (acquire, release, renewal) pays nothing for them. The lock hash
// itself, Redisson's, gets no field.

// ReleaseRequest is a request to release a lock, as its holder hears it (see RLock.ReleaseRequests).
type ReleaseRequest struct {
	Reason string // what the requester said
	From   string // the requesting Client's ID (Client.ID)
}

// ErrNotHeard is Revoke's error when it did not take the lock over because a holder did not hear the
// request: a Redisson client's holder, a relock holder that does not listen for requests
// (ReleaseRequests), or a hold that began after the request (the hold asked was released, lost or taken
// over since, even if the same owner holds the lock again). The lock stays its holder's; TakeOver takes
// it whoever holds it.
var ErrNotHeard = errors.New("relock: the lock's holder did not hear the request to release it")

// RequestRelease asks the current holders of the lock to release it, telling them reason: each holder that
// listens for requests (ReleaseRequests) gets it. It reports how many subscribers the holders' request
// channels had: the Clients of the holders that listen (0 when nobody holds the lock, or its holders do
// not listen: a Redisson client's never does). That is a hint: a Client whose listening hold ended a
// moment before may still count when the same owner holds the lock again, and so does a program
// subscribed to those channels; Revoke does not rely on it. It is one script run; it changes nothing in
// Redis. Whether a holder lets go is its own decision: see Revoke for a request that ends in a takeover.
func (l *RLock) RequestRelease(ctx context.Context, reason string) (int, error) {
	if err := l.check(ctx); err != nil {
		return 0, l.fail(ctx, "requestrelease", err)
	}
	a, err := l.ask(ctx, "ask", l.c.id+" - "+reason, "", 0)
	if err != nil {
		return 0, l.fail(ctx, "requestrelease", err)
	}
	return a.heard, nil
}

// asked is what a request told of the lock: how many subscribers the holders' request channels had,
// whether every holder is relock's, and how long a Revoke's markers live now (0: there are none).
type asked struct {
	heard  int
	relock bool
	life   time.Duration
}

// ask runs lua/release_request.lua in mode 'ask', 'mark' or 'again' (see there) with message; request
// and life are a Revoke's.
func (l *RLock) ask(ctx context.Context, mode, message, request string, life time.Duration) (asked, error) {
	channels := l.requestChannels()
	pub, err := l.c.publishCommand(ctx, channels)
	if err != nil {
		return asked{}, err
	}
	r, err := l.c.run(ctx, scriptReleaseRequest, []string{l.name, channels, undoneKey(l.name)},
		[]string{pub, message, mode, request, fmtMillis(life)}).AsIntSlice()
	if err != nil {
		return asked{}, err
	}
	if len(r) != 3 {
		return asked{}, errUnexpectedReply
	}
	return asked{heard: int(r[0]), relock: r[1] == 1, life: time.Duration(r[2]) * time.Millisecond}, nil
}

// requestChannels is the prefix of the lock's request channels: a holder's is requestChannels() + ":" +
// its owner field.
func (l *RLock) requestChannels() string { return companion("relock_release_request", l.name) }

// ReleaseRequests returns a channel on which the hold of ctx's owner hears the requests to release the lock
// (RequestRelease, Revoke) made from now on, until the hold ends; then the channel is closed. Once it
// returns, the Client listens: it subscribes to the hold's request channel, for as long as the hold
// listens, and tells a Revoke's requester that the hold heard. The channel keeps the latest request not
// yet read. It returns ErrNotHeld when the owner does not hold the lock.
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
	lis := &requestListener{out: make(chan ReleaseRequest, 1), hold: done, l: l, field: field}
	ch := l.requestChannels() + ":" + field
	l.c.requests.add(ch, lis)
	stop, err := l.c.hub.listen(ctx, ch, func(msg string) { l.c.requests.deliver(ch, msg) })
	if err != nil {
		l.c.requests.remove(ch, lis)
		return nil, l.fail(ctx, "releaserequests", err)
	}
	context.AfterFunc(done, func() {
		stop()
		if acked := l.c.requests.remove(ch, lis); acked != "" {
			lis.withdraw(acked)
		}
	})
	return lis.out, nil
}

// requestListeners are a Client's holds that listen for requests, by request channel.
type requestListeners struct {
	mu sync.Mutex
	m  map[string][]*requestListener
}

// requestListener is a hold that listens for requests.
type requestListener struct {
	out   chan ReleaseRequest
	hold  context.Context // the hold's context (RLock.HoldContext): it ends with the hold
	l     *RLock
	field string

	// Under requestListeners.mu:
	acked string // the last Revoke's request it marked heard in Redis
	ended bool   // the hold has ended: acknowledgements that complete now are withdrawn if it was lost
}

func (r *requestListeners) add(channel string, lis *requestListener) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[string][]*requestListener)
	}
	r.m[channel] = append(r.m[channel], lis)
}

// remove stops delivering to lis, closes its channel, and returns the last request it acknowledged.
func (r *requestListeners) remove(channel string, lis *requestListener) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := slices.DeleteFunc(r.m[channel], func(o *requestListener) bool { return o == lis })
	if len(l) == 0 {
		delete(r.m, channel)
	} else {
		r.m[channel] = l
	}
	close(lis.out)
	lis.ended = true
	return lis.acked
}

// deliver gives a request heard on channel, "<from> <request id or '-'> <reason>", to its listeners whose
// hold goes on, each keeping the latest it has not read, and has a Revoke's request marked heard.
func (r *requestListeners) deliver(channel, msg string) {
	from, rest, _ := strings.Cut(msg, " ")
	id, reason, _ := strings.Cut(rest, " ")
	req := ReleaseRequest{Reason: reason, From: from}
	r.mu.Lock()
	defer r.mu.Unlock()
	var heard *requestListener
	for _, lis := range r.m[channel] {
		if lis.hold.Err() != nil {
			// Its hold has ended, and its listener is on its way out: the request is for a later hold of
			// the same owner, which did not listen when the request came.
			continue
		}
		select {
		case <-lis.out: // an older request not read yet: the newer one replaces it
		default:
		}
		lis.out <- req
		heard = lis
	}
	if heard != nil && id != "-" && heard.l.kind == kindRLock {
		heard.acknowledge(from + " " + id)
	}
}

// acknowledge marks request heard by the listener's hold in Redis, in the background (the hub's delivery
// must not wait), trying again until Redis answers, up to the watchdog timeout (a marker lives no longer
// than the lock's TTL, which is at most that unless the hold has a longer lease). If the hold ended
// meanwhile, lost, the acknowledgement is withdrawn again.
func (lis *requestListener) acknowledge(request string) {
	c := lis.l.c
	c.goBackground(func(life context.Context) {
		n := lis.heard(life, request, "1")
		if n != 1 {
			return
		}
		c.requests.mu.Lock()
		lis.acked = request
		ended := lis.ended
		c.requests.mu.Unlock()
		if ended {
			lis.withdraw(request)
		}
	})
}

// withdraw deletes the marker of request, which the listener's hold acknowledged, if the hold was lost:
// lost to an expiry or a deletion that relock's scripts did not see, it may be followed by a hold of the
// same owner that did not hear (the release of a hold deletes its marker in Redis already, a takeover
// too). A takeover between the owner's new acquisition and this withdrawal is not prevented: the window
// is the time this script run takes to arrive.
func (lis *requestListener) withdraw(request string) {
	if !errors.Is(context.Cause(lis.hold), ErrLockLost) {
		return
	}
	lis.l.c.goBackground(func(life context.Context) { lis.heard(life, request, "0") })
}

// heard runs lua/release_request_heard.lua for the listener's hold and request (how: '1' heard, '0'
// withdrawn), until Redis answers or the watchdog timeout passes; it returns its reply, or -1.
func (lis *requestListener) heard(life context.Context, request, how string) int64 {
	l := lis.l
	keys, args := []string{l.name, undoneKey(l.name)}, []string{lis.field, request, how}
	return l.c.retryUnknown(life, time.Now().Add(l.c.watchdogTimeout), func(ctx context.Context) (int64, error) {
		return l.c.run(ctx, scriptRequestHeard, keys, args).AsInt64()
	})
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

// Revoke asks the lock's holders to release it (as RequestRelease, with reason), waits up to grace for the
// lock, as Lock does, and, if it is still held then, takes it over (as TakeOver), but only from holds
// that heard the request: holds that were there when it was made and have not ended since (released,
// lost, taken over), that listen for requests (ReleaseRequests), and whose own Client got the request
// while they listened and confirmed it in Redis within the grace period. It returns nil when ctx's owner
// holds the lock, released to it or taken over. It returns ErrNotHeard, leaving the lock to its holder,
// otherwise: a Redisson client's holder, a relock holder that does not listen, or a hold begun after the
// request, even the same owner's (a hold lost behind relock's back, its key deleted, counts as ended once
// its Client learns of the loss). While a hold asked has not confirmed, the request is made to it again,
// at least every grace/5. Of two Revokes of one lock at once, the later request replaces the earlier's,
// which may then return ErrNotHeard. It applies to the reentrant lock (Client.Lock); other kinds fail
// with errors.ErrUnsupported.
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
	request := l.c.id + " " + l.c.attemptID()
	message := request + " " + reason
	sent := time.Now()
	a, err := l.ask(ctx, "mark", message, request, grace+revokeMargin)
	if err != nil {
		return l.fail(ctx, "revoke", err)
	}
	step := max(grace/5, 10*time.Millisecond)
	for {
		wait := min(step, time.Until(deadline))
		if a.life > 0 { // the markers live no longer than the lock's TTL when they were set: renew them
			wait = min(wait, time.Until(sent.Add(a.life/2)))
		}
		ok, err := l.TryLock(ctx, max(wait, 0), 0)
		if err != nil || ok {
			return err
		}
		if time.Until(deadline) <= 0 {
			break
		}
		if a.life > 0 { // the holds asked go on: keep their markers live, and ask again those not heard
			sent = time.Now()
			if a, err = l.ask(ctx, "again", message, request, time.Until(deadline)+revokeMargin); err != nil {
				return l.fail(ctx, "revoke", err)
			}
		}
	}
	if !a.relock || a.life == 0 {
		return l.fail(ctx, "revoke", ErrNotHeard)
	}
	return l.takeOver(ctx, "revoke", request)
}

// revokeMargin is how long a Revoke's markers may outlive its grace period: time for its last TryLock to
// return and its takeover to arrive. (They never outlive the hold they were left for.)
const revokeMargin = 2 * time.Second

// takeOver runs lua/rlock_takeover.lua for ctx's owner, taking the lock from anyone (expected '*'), or
// from the holds that heard a Revoke's request (expected that request).
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
	if capped, end, budgeted, err := l.c.holds.capTTL(k, l.maxHold, ttl); err != nil {
		return l.fail(ctx, op, err)
	} else if budgeted {
		ttl, ttlArg = capped, holdTTLArg(capped, end, true)
	}
	if err := l.c.holds.beginTurn(ctx, k); err != nil {
		return l.fail(ctx, op, err)
	}
	defer l.c.holds.endTurn(k)
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
		return l.fail(ctx, op, ErrNotHeard) // a hold that did not hear the request holds the lock
	}
	if !l.c.holds.acquired(k, &acquisition{kind: l.kind, name: l.name, count: 1, ttl: ttl, budget: l.maxHold,
		sentAt: sentAt, renew: l.spec.renewal(field), token: uint64(reply[2]), granted: reply[3], parent: ctx, giver: l}) {
		return l.fail(ctx, op, ErrClosed)
	}
	return nil
}

// RequestStepDown asks the election's leader to step down, telling it reason, as RLock.RequestRelease asks
// a lock's holder: a leader that listens (StepDownRequests) hears it, and may Resign. It reports what
// RequestRelease does: the subscribers of the leader's request channel (0 when there is no leader, or it
// does not listen).
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
