package relock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// PermitSemaphore is a semaphore whose permits come back when their holder dies: each permit taken has an
// id and an expiry in Redis, which the Client's watchdog keeps pushing back while the permit is held (or
// which a lease fixes), so a permit whose process died or stalled expires within the watchdog timeout,
// and its holder's context (Permit.Context) ends with ErrLockLost when it is lost. An expired permit is
// given back by the next acquisition, relock's or Redisson's, which is when waiters try again: a waiter
// that finds no permit sleeps until a release or until the first permit taken expires.
//
// It uses Redisson's RPermitExpirableSemaphore layout: the available permits at the name, the permits
// taken in the sorted set "{name}:timeout" (an id of 16 random bytes, scored with its expiry in Unix
// milliseconds, taken from the Redis server's clock), and releases announced on "redisson_sc:{name}" with
// the permits then available. Redisson clients see relock's permits, give back the expired ones, and take
// and release their own from the same count. What is relock's alone is the renewal: Redisson's permits live
// for a fixed lease.
//
// Who took a permit is not in Redis, which holds only its id and expiry: the Client that took it knows its
// owner (Held, Release), and Client.InspectSemaphore shows ids.
type PermitSemaphore struct {
	syncObject
	timeouts   string   // the permits taken, "{name}:timeout"
	permitKeys []string // the counter, the permits taken, the channel, the undone acquisitions' marks
}

// PermitSemaphore returns the expirable semaphore called name. Set its permits with TrySetPermits or
// AddPermits.
func (c *Client) PermitSemaphore(name string) *PermitSemaphore {
	timeouts := permitsKey(name)
	s := &PermitSemaphore{syncObject: newSyncObject(c, kindSemaphore, name, companion("redisson_sc", name)), timeouts: timeouts}
	s.permitKeys = []string{name, timeouts, s.channel, undoneKey(name)}
	return s
}

// permitsKey returns the key of the permits taken from the PermitSemaphore called name: "{name}:timeout",
// or name + ":timeout" when name holds a "{" (Redisson's suffixName). It is in name's cluster slot for
// every valid name.
func permitsKey(name string) string {
	if strings.Contains(name, "{") {
		return name + ":timeout"
	}
	return "{" + name + "}:timeout"
}

// Permit is one permit taken from a PermitSemaphore. It belongs to the owner that took it (see WithOwner):
// that owner can give it back with PermitSemaphore.Release, and anyone given the Permit with its Release.
//
// A nil *Permit is no permit: its methods are safe to call and report it (Release and Context return an
// error matching ErrNotHeld, ID returns ""), so that a `defer p.Release(ctx)` written before checking
// TryAcquire's ok does not panic. Check ok all the same: without it, the caller has no permit.
type Permit struct {
	s  *PermitSemaphore
	id string // 16 random bytes, the member of the sorted set
}

// errNoPermit is the error of a nil *Permit's methods (or a Permit that was never taken).
var errNoPermit = fmt.Errorf("%w: no permit (a nil *Permit: its TryAcquire took none)", ErrNotHeld)

// ID returns the permit's id, in hex, as Redisson names permits (RPermitExpirableSemaphore.release(id)),
// or "" for a nil *Permit.
func (p *Permit) ID() string {
	if p == nil {
		return ""
	}
	return hex.EncodeToString([]byte(p.id))
}

// taken reports whether p is a permit that was taken (not nil, not a zero Permit).
func (p *Permit) taken() bool { return p != nil && p.s != nil }

// Name returns the semaphore's name, its key in Redis ("" for a nil *PermitSemaphore).
func (s *PermitSemaphore) Name() string {
	if s == nil {
		return ""
	}
	return s.name
}

func (s *PermitSemaphore) check(ctx context.Context) error {
	if s == nil {
		return ErrNilClient
	}
	return s.syncObject.check(ctx, validName(s.name))
}

// counter is s as the Semaphore that shares its counter (nil for a nil s: its methods return ErrNilClient).
func (s *PermitSemaphore) counter() *Semaphore {
	if s == nil {
		return nil
	}
	return &Semaphore{s.syncObject}
}

// TrySetPermits sets the permits if the semaphore was never set, and reports whether it did. permits must
// not be negative (ErrInvalidPermits).
func (s *PermitSemaphore) TrySetPermits(ctx context.Context, permits int) (bool, error) {
	return s.counter().TrySetPermits(ctx, permits)
}

// AddPermits adds permits, or takes that many away when negative (zero is ErrInvalidPermits).
func (s *PermitSemaphore) AddPermits(ctx context.Context, permits int) error {
	return s.counter().AddPermits(ctx, permits)
}

// AvailablePermits returns the permits available now. A permit whose expiry has passed is not among them
// until an acquisition (relock's or Redisson's) gives it back; relock's Release gives back only the
// permits it names. Client.InspectSemaphore counts the expired permits (SemaphoreState.PermitsExpired).
func (s *PermitSemaphore) AvailablePermits(ctx context.Context) (int, error) {
	return s.counter().AvailablePermits(ctx)
}

// Acquire takes a permit, waiting until one is available or ctx ends. The watchdog keeps it alive until
// Release; if it cannot (the process stalled, Redis lost it), the permit is lost and Context's context
// ends with ErrLockLost.
func (s *PermitSemaphore) Acquire(ctx context.Context) (*Permit, error) {
	p, err := s.tryAcquire(ctx, "acquire", -1, 0)
	if err == nil && p == nil {
		err = wrapErrCtx(ctx, "acquire", s.Name(), context.Cause(ctx))
	}
	return p, err
}

// TryAcquire takes a permit if one becomes available within wait (0: only if one is now). As every Try
// method, it reports whether it did: ok is true with the permit, false with a nil error (and a nil
// *Permit) when wait ran out; when ctx ends first, it returns an error wrapping ctx.Err(). With a lease > 0
// the permit expires after lease (and is watched, not renewed); with 0 the watchdog keeps it alive. A
// negative wait or lease is ErrInvalidDuration. The durations come in the package's order: wait, then
// lease.
//
//	p, ok, err := s.TryAcquire(ctx, time.Second, 0)
//	if err != nil || !ok {
//		return err // nil when no permit came within the wait
//	}
//	defer p.Release(context.WithoutCancel(ctx))
func (s *PermitSemaphore) TryAcquire(ctx context.Context, wait, lease time.Duration) (p *Permit, ok bool, err error) {
	if wait < 0 || lease < 0 {
		return nil, false, wrapErrCtx(ctx, "tryacquire", s.Name(), ErrInvalidDuration)
	}
	p, err = s.tryAcquire(ctx, "tryacquire", wait, lease)
	return p, p != nil, err
}

func (s *PermitSemaphore) tryAcquire(ctx context.Context, op string, wait, lease time.Duration) (*Permit, error) {
	if err := s.check(ctx); err != nil {
		return nil, wrapErrCtx(ctx, op, s.Name(), err)
	}
	owner, err := s.c.ownerField(ctx)
	if err != nil {
		return nil, wrapErrCtx(ctx, op, s.Name(), err)
	}
	publish, err := s.c.publishCommand(ctx, s.channel)
	if err != nil {
		return nil, wrapErrCtx(ctx, op, s.Name(), err)
	}
	ttlArg := s.c.watchdogTimeoutArg
	if lease > 0 {
		lease = roundUpToMillis(lease)
		ttlArg = fmtMillis(lease)
	}
	var permit *Permit
	parent := ctx
	_, err = s.c.acquire(ctx, &acquireOp{kind: kindSemaphore, name: s.name, channel: s.channel, wakes: semaphoreWakes, wait: wait},
		func(ctx context.Context) (bool, time.Duration, bool, error) {
			var raw [16]byte
			_, _ = rand.Read(raw[:])
			id := string(raw[:])
			sentAt := time.Now()
			reply, err := s.c.scripts.runAcquire(ctx, scriptCall{script: scriptPermitAcquire, keys: s.permitKeys, args: []string{ttlArg, id, publish}})
			if err != nil {
				if mayHaveRun(err) {
					s.giveBack(id) // it may have been taken: give it back, or it comes back at its expiry
				}
				return false, 0, false, err
			}
			if reply[0] != 1 {
				return false, durationMillis(reply[1]), false, nil // -1: wait for a release
			}
			if !s.c.holds.acquired(holdKey{key: s.timeouts, field: id}, &acquisition{kind: kindSemaphore, name: s.name, count: 1,
				lease: lease, sentAt: sentAt, parent: parent, group: holdKey{key: s.timeouts, field: owner},
				traced: trace.SpanFromContext(ctx).IsRecording(), giver: s,
				renew: renewal{script: scriptPermitRenew, keys: s.permitKeys[1:2], field: id}}) {
				return false, 0, false, ErrClosed // Close began meanwhile: the permit is being given back
			}
			permit = &Permit{s: s, id: id}
			return true, 0, false, nil
		})
	if err != nil {
		return nil, wrapErrCtx(ctx, op, s.Name(), err)
	}
	return permit, nil
}

// giveBack releases, in the background, permits an acquisition may have taken although its reply was lost,
// or whose release's outcome was not learnt. Releasing is safe to repeat: a permit is given back once. If
// Redis cannot be reached before the watchdog timeout, the permits come back at their expiry.
//
// An acquisition whose reply was lost may also not have reached Redis yet: the give-back then leaves a mark
// that makes it change nothing when it arrives (see lua/permit_release.lua), as an undone lock acquisition's
// (undoMarkTTL).
func (s *PermitSemaphore) giveBack(ids ...string) {
	s.c.goBackground(func(life context.Context) {
		s.c.retryUnknown(life, time.Now().Add(s.c.watchdogTimeout), func(ctx context.Context) (int64, error) {
			_, err := s.releaseIDs(ctx, fmtMillis(undoMarkTTL), ids...)
			return 0, err
		})
	})
}

// giveUp gives the permit k back, for Close (see giver). Giving a permit back is safe to repeat.
func (s *PermitSemaphore) giveUp(life context.Context, k holdKey, deadline time.Time) error {
	_, err := s.c.retry(life, deadline, true, func(ctx context.Context) (int64, error) {
		_, err := s.release(ctx, k.field)
		s.c.holds.settleFailing(k, err)
		return 0, err
	})
	return err
}

// release gives back the permits ids, in one script run, and reports which were given back.
func (s *PermitSemaphore) release(ctx context.Context, ids ...string) ([]int64, error) {
	return s.releaseIDs(ctx, "0", ids...)
}

// releaseIDs is release, marking the ids not taken for mark ms ("0": no marks; see giveBack).
func (s *PermitSemaphore) releaseIDs(ctx context.Context, mark string, ids ...string) ([]int64, error) {
	publish, err := s.c.publishCommand(ctx, s.channel)
	if err != nil {
		return nil, err
	}
	given, err := s.c.scripts.runInts(ctx, scriptCall{script: scriptPermitRelease, keys: s.permitKeys, args: append([]string{publish, mark}, ids...)})
	if err == nil && len(given) != len(ids) {
		err = errUnexpectedReply
	}
	return given, err
}

// settle records the outcome of releasing the permits ks in the hold table and returns how many were not
// taken any more (lost before the release, or released by another release of their owner's: the hold
// table tells which).
func (s *PermitSemaphore) settle(ks []holdKey, given []int64) (lost int) {
	for i, k := range ks {
		if given[i] == 0 {
			s.c.holds.notHeld(k)
			lost++
		} else {
			s.c.holds.released(k, 0)
		}
	}
	return lost
}

// releaseHolds releases the permits ks, taken out of their group, in a span called op. When ctx has ended
// before, or the outcome is unknown, the release completes in the background (as an Unlock's does) and the
// permits end for the Client now: the watchdog stops renewing them. When it failed for sure (nothing ran)
// they go back to their group.
func (s *PermitSemaphore) releaseHolds(ctx context.Context, op string, ks []holdKey) (lost int, err error) {
	ids := make([]string, len(ks))
	for i, k := range ks {
		ids[i] = k.field
	}
	ctx, span := s.c.tel.startSpan(ctx, "relock.permitsemaphore."+op, s.kind, s.name)
	var given []int64
	if err = ctx.Err(); err == nil {
		given, err = s.release(ctx, ids...)
	}
	switch {
	case err == nil:
		lost = s.settle(ks, given)
		if lost > 0 {
			endSpan(span, outcomeNotHeld, nil)
		} else {
			endSpan(span, outcomeReleased, nil)
		}
		return lost, nil
	case ctx.Err() != nil || outcomeUnknown(err) || didNotRun(err): // no answer, or Redis cannot serve now (LOADING, OOM...)
		s.giveBack(ids...)
		for _, k := range ks {
			s.c.holds.released(k, 0)
		}
	default:
		s.c.holds.regroup(ks)
	}
	endSpan(span, outcomeError, err)
	return 0, err
}

// Release gives back n permits that ctx's owner (see WithOwner) took from s, the longest held first, in
// one script run, and wakes waiters. n must be at least 1 (ErrInvalidPermits). When the owner holds fewer
// than n permits it returns an error matching ErrNotHeld and gives nothing back: permits the owner gave
// back already or lost (see Permit.Context) do not count. A permit lost in the instant before the release
// ran, or given back meanwhile by its Permit.Release, is not given back twice: the others are, and the
// error matches ErrNotHeld. As with Unlock, a ctx that has ended, or a release whose reply was lost,
// returns an error and leaves the release to complete in the background: the permits are not the owner's
// any more.
func (s *PermitSemaphore) Release(ctx context.Context, n int) error {
	if s == nil {
		return wrapErrCtx(ctx, "release", "", ErrNilClient)
	}
	if err := s.c.check(); err != nil {
		return wrapErrCtx(ctx, "release", s.Name(), err)
	}
	if !validName(s.name) {
		return wrapErrCtx(ctx, "release", s.Name(), ErrInvalidName)
	}
	if n < 1 {
		return wrapErrCtx(ctx, "release", s.Name(), ErrInvalidPermits)
	}
	owner, err := s.c.ownerField(ctx)
	if err != nil {
		return wrapErrCtx(ctx, "release", s.Name(), err)
	}
	ks, held := s.c.holds.takeFromGroup(holdKey{key: s.timeouts, field: owner}, n)
	if ks == nil {
		err := s.c.ownerError(ErrNotHeld, fmt.Sprintf(": releasing %d permits, the owner holds %d", n, held), owner,
			s.c.holds.otherGroupOwners(s.timeouts, owner))
		return wrapErrCtx(ctx, "release", s.Name(), err)
	}
	lost, err := s.releaseHolds(ctx, "release", ks)
	switch {
	case err != nil:
		return wrapErrCtx(ctx, "release", s.Name(), err)
	case lost > 0:
		return wrapErrCtx(ctx, "release", s.Name(), fmt.Errorf("%w: %d of the %d permits were not taken any more (lost, or released by their Permit.Release meanwhile)", ErrNotHeld, lost, n))
	}
	return nil
}

// Held returns how many permits of s ctx's owner holds: taken, not given back, and not known to be lost.
func (s *PermitSemaphore) Held(ctx context.Context) (int, error) {
	if err := s.check(ctx); err != nil {
		return 0, wrapErrCtx(ctx, "held", s.Name(), err)
	}
	owner, err := s.c.ownerField(ctx)
	if err != nil {
		return 0, wrapErrCtx(ctx, "held", s.Name(), err)
	}
	return s.c.holds.groupSize(holdKey{key: s.timeouts, field: owner}), nil
}

// Context returns a context, derived from ctx, that ends when the permit does: with a cause matching
// ErrLockLost when it is lost (it expired: its holder stalled, or Redis did not answer in time), with
// context.Canceled when it is released, and with a cause matching both ErrClosed and context.Canceled when
// the Client is closed (Close gives it back). It returns ErrNotHeld (and a nil context) for a permit that
// ended already, and for a nil *Permit: check the error before using the context.
func (p *Permit) Context(ctx context.Context) (context.Context, error) {
	if !p.taken() {
		return nil, wrapErrCtx(ctx, "permitcontext", "", errNoPermit)
	}
	hc, err := p.s.c.holds.holdContext(ctx, holdKey{key: p.s.timeouts, field: p.id})
	return hc, wrapErrCtx(ctx, "permitcontext", p.s.name, err)
}

// Release gives the permit back and wakes waiters. It returns ErrNotHeld when the permit was not taken
// any more (released already, or lost: it expired and was given back), and for a nil *Permit (nothing to
// give back). As with Unlock, a ctx that has ended, or a release whose reply was lost, returns an error and
// leaves the release to complete in the background.
func (p *Permit) Release(ctx context.Context) error {
	if !p.taken() {
		return wrapErrCtx(ctx, "release", "", errNoPermit)
	}
	s := p.s
	if err := s.c.check(); err != nil {
		return wrapErrCtx(ctx, "release", s.Name(), err)
	}
	k := holdKey{key: s.timeouts, field: p.id}
	s.c.holds.takeOne(k)
	lost, err := s.releaseHolds(ctx, "permit.release", []holdKey{k})
	switch {
	case err != nil:
		return wrapErrCtx(ctx, "release", s.Name(), err)
	case lost > 0:
		return wrapErrCtx(ctx, "release", s.Name(), ErrNotHeld)
	}
	return nil
}
