package relock

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"
	"go.opentelemetry.io/otel/trace"
)

// The engine runs any lock kind's operations from its spec: acquisition attempts, and the undo of one whose
// reply was lost. The release path is in release.go.

// spec is a lock kind: the keys of one lock, and the script calls its operations make, built from typed
// calls (rlock.go, fairlock.go, rwlock.go). Every kind keeps its holds in a hash at the lock's name whose
// field is the owner's (plus a suffix, for a writer) and whose value is the hold count; its scripts give
// the same replies: an acquisition {1, count, token}, {0, wait ms, 0} or {-1, 0, 0} (an upgrade that would
// deadlock); a release the owner's remaining count, or -1 when it holds nothing; a forced release 1 or 0.
// Every script refuses a name in use by another kind (lua/lib/kinds.lua), which the Client reports as a
// *KindError.
type spec interface {
	field(owner string) string       // the owner's field in the lock's hash
	waitChannel(field string) string // where a waiter with that field hears of releases
	// acquire and release make one acquisition attempt, one release request: their arguments are appended
	// to args (room from argLists, which the caller frees once the script has run).
	acquire(a acquireCall, args []string) scriptCall
	release(r releaseCall, args []string) scriptCall
	forceRelease(publish string) scriptCall
	renewal(field string) renewal // how the watchdog renews, or checks, a hold
	read(field string) scriptCall // lua/lock_read.lua for the lock, and the owner field ("": none)
	queue() *waitQueue            // the lock's waiters, when they queue (FairLock, writer priority)
}

// lockRead is a run of lua/lock_read.lua on the lock keys[0]: mode is "" for a reentrant lock, "read" or
// "write" for a read-write lock's halves; base starts a read lock's read-hold keys.
func lockRead(keys []string, mode, field, base string) scriptCall {
	return scriptCall{script: scriptLockRead, keys: keys, args: []string{mode, field, base}}
}

// acquireCall is one acquisition attempt.
type acquireCall struct {
	ttl     string // how long the hold lives, ms: the lease, or the watchdog timeout
	owner   string // "<clientUUID>:<token>"
	field   string // the owner's field (spec.field)
	join    bool   // the attempt may join the lock's wait queue
	publish string // the publish command, for kinds whose acquisition may wake a waiter
	attempt string // the attempt's id, new for each attempt: its undo names it (lua/lib/undone.lua)
}

// releaseCall is one release request.
type releaseCall struct {
	field    string
	expected string // "" or the hold count the owner must have (an undo, which must not take a newer hold)
	request  string // "" or the request id, "!" when sent first, "?" when sent again (see lib/release.lua)
	publish  string // the publish command, "" while unknown (release finds it out)
}

// scriptCall is one run of a script.
type scriptCall struct {
	script *script
	keys   []string
	args   []string
}

// argLists holds room for the arguments of acquisitions and releases, which a spec appends to the list it
// is given (spec.acquire, spec.release): rueidis copies a script's arguments into the command it builds,
// so the list is free again once the run returns, and an uncontended Lock+Unlock allocates none (a runner
// keeps no call's args past its return: see runner).
var argLists = sync.Pool{New: func() any { return new(argList) }}

// argList is room for a script's arguments: more than any acquisition or release has.
type argList [12]string

// newArgs returns an empty list with room for a script's arguments; freeArgs gives it back once the script
// has run.
func newArgs() *argList { return argLists.Get().(*argList) }

func freeArgs(a *argList) {
	*a = argList{} // keep no strings alive
	argLists.Put(a)
}

func newLock(c *Client, kind lockKind, name string, o lockOptions, channel string, s spec) *RLock {
	l := makeLock(c, kind, name, o, channel, s)
	return &l
}

// makeLock returns the lock value that newLock allocates, for a caller that allocates it with its spec.
func makeLock(c *Client, kind lockKind, name string, o lockOptions, channel string, s spec) RLock {
	return RLock{c: c, name: name, kind: kind, spec: s, fenced: o.fenced, ack: o.ack, maxHold: o.maxHold, channel: channel}
}

func (l *RLock) tryLock(ctx context.Context, op string, wait, lease time.Duration) (bool, error) {
	owner, err := l.prepare(ctx)
	if err != nil {
		return false, l.fail(ctx, op, err)
	}
	ttl, ttlArg := lease, ""
	if ttl == 0 {
		ttl, ttlArg = l.c.watchdogTimeout, l.c.watchdogTimeoutArg
	} else {
		ttlArg = fmtMillis(ttl)
	}
	q := l.spec.queue()
	join := q != nil && wait != 0 // the owner joins the queue while it waits
	call := acquireCall{ttl: ttlArg, owner: owner, field: l.spec.field(owner), join: join && !q.lazy}
	k := holdKey{key: l.name, field: call.field}
	if l.maxHold < 0 {
		return false, l.fail(ctx, op, ErrInvalidDuration)
	}
	// A hold with a budget (WithMaxHold) is never given a time to live past it: on Redis's clock too, once
	// its first grant told that clock (end).
	if capped, end, budgeted, err := l.c.holds.capTTL(k, l.maxHold, ttl); err != nil {
		return false, l.fail(ctx, op, err)
	} else if budgeted {
		ttl = capped
		call.ttl, ttlArg = holdTTLArg(ttl, end, true), holdTTLArg(ttl, 0, true)
	}
	if q != nil && q.publishes {
		if call.publish, err = l.c.publishCommand(ctx, l.channel); err != nil {
			return false, l.fail(ctx, op, err)
		}
	}
	parent := ctx
	lateJoin := false // an attempt that joins the queue may have run unseen: it may yet add an entry
	tried := false
	if call.join {
		q.joined(k)
	}
	ao := acquireOp{kind: l.kind, name: l.name, channel: l.spec.waitChannel(call.field), wait: wait, owner: owner}
	if join {
		ao.named = q.wakes
		if q.freeWakes {
			ao.taken = l.taken
		}
	}
	if l.kind == kindRLock && wait != 0 && l.ack.replicas == 0 && !l.c.holds.held(k) {
		// A waiter, not a reentry: it waits in the Client's gate for the lock (see gates).
		ao.gated = true
		ao.gate = handoffTarget{lock: l, owner: owner, field: call.field, ttl: ttl, ttlArg: ttlArg, lease: lease, parent: parent}
	}
	queued := false // it waited in the Client's gate: its first attempt is made while waiting
	ao.queued = &queued
	ok, err := l.c.acquire(ctx, &ao, func(ctx context.Context) (bool, time.Duration, bool, error) {
		if join && !call.join && (tried || queued) { // a lazy queue's owner joins as it begins to wait
			q.joined(k)
			call.join = true
		}
		tried = true
		ok, wait, named, err := l.attempt(ctx, parent, k, lease, ttl, call)
		lateJoin = lateJoin || call.join && mayHaveRun(err)
		return ok, wait, named, err
	})
	if call.join {
		q.done(k, ok, lateJoin)
	}
	if err != nil {
		return false, l.fail(ctx, op, err)
	}
	return ok, nil
}

// taken reads whether the lock is taken, and how long its hold may still last (see acquireOp.taken).
func (l *RLock) taken(ctx context.Context) (bool, time.Duration, error) {
	ms, err := l.c.do(ctx, l.c.rdb.B().Pttl().Key(l.name).Build()).AsInt64()
	switch {
	case err != nil:
		return false, 0, err
	case ms == -2: // no key: free
		return false, 0, nil
	case ms == -1: // no expiry
		return true, -1, nil
	}
	return true, durationMillis(ms), nil
}

// attempt runs the acquire script once.
func (l *RLock) attempt(ctx, parent context.Context, k holdKey, lease, ttl time.Duration, call acquireCall) (acquired bool, wait time.Duration, names bool, err error) {
	q := l.spec.queue()
	if q != nil && (call.join || !q.lazy) { // a lazy queue's owner is not in it before it waits
		if err := q.prepare(ctx, k); err != nil {
			return false, 0, false, err
		}
	}
	// The attempt's turn among the owner's operations on the lock, once nothing of the owner's settles.
	if err := l.c.holds.beginTurn(ctx, k); err != nil {
		return false, 0, false, err
	}
	defer l.c.holds.endTurn(k) // after the outcome is recorded, or its undo has begun
	call.attempt = l.c.attemptID()
	args := newArgs()
	defer freeArgs(args)
	sc := l.spec.acquire(call, args[:0])
	sentAt := time.Now()
	var reply [4]int64
	acked := int64(-1)
	var refused error // WAIT's error reply
	if l.ack.replicas > 0 {
		var resp rueidis.RedisResult
		resp, acked, refused, err = l.c.runAcked(ctx, sc.script, sc.keys, sc.args, l.ack.replicas, l.ack.timeout)
		if err == nil {
			reply, err = acquireReply(resp)
		}
	} else {
		reply, err = l.c.scripts.runAcquire(ctx, sc)
	}
	if err != nil {
		if mayHaveRun(err) { // an attempt that never reached Redis (unsent) leaves nothing to undo
			l.undoAcquire(k, ttl, call.attempt)
		}
		return false, 0, false, err
	}
	if reply[0] == 1 && acked >= 0 && acked < l.ack.replicas {
		err := l.rollBack(ctx, k, reply[1], call.attempt)
		if refused != nil { // say why nothing was acknowledged
			err = fmt.Errorf("%w: WAIT refused: %w", err, refused)
		}
		return false, 0, false, err
	}
	switch reply[0] {
	case 1:
		if !l.granted(ctx, parent, k, lease, ttl, sentAt, reply) {
			return false, 0, false, ErrClosed // Close began meanwhile: the hold is being given up
		}
		return true, 0, false, nil
	case -1:
		return false, 0, false, ErrUpgrade
	case -3: // the hold's budget had ended on Redis's clock when this reached it: nothing changed
		return false, 0, false, ErrMaxHoldReached
	}
	wait = -1
	if reply[1] >= 0 {
		wait = durationMillis(reply[1])
	}
	if call.join {
		q.waiting(k, l.kind, sentAt)
		if m := q.maxSleep; m > 0 && (wait < 0 || wait > m) {
			wait = m
		}
	}
	return false, wait, reply[2] == 1, nil
}

// granted records the grant an attempt sent at sentAt got (reply: see acquireReply) in the hold table, and
// reports false when Close had begun (the hold is then given up). Apart from attempt, so that the record
// it builds is no part of attempt's frame while the script is sent: a goroutine's stack starts small, and
// each time a call goes deeper than it has, the whole stack is copied to one twice its size.
func (l *RLock) granted(ctx, parent context.Context, k holdKey, lease, ttl time.Duration, sentAt time.Time, reply [4]int64) bool {
	return l.c.holds.acquired(k, &acquisition{
		kind: l.kind, name: l.name, count: reply[1], lease: lease, ttl: ttl, budget: l.maxHold, sentAt: sentAt,
		renew: l.spec.renewal(k.field), token: uint64(reply[2]), granted: reply[3], parent: parent, once: l.holdsOnce(),
		traced: trace.SpanFromContext(ctx).IsRecording(), giver: l,
	})
}

// rollBack releases the hold level an acquisition just took (count is the hold count it reached) because
// the replicas did not acknowledge it. If the release cannot be confirmed, the undo goes on in the
// background.
func (l *RLock) rollBack(ctx context.Context, k holdKey, count int64, attempt string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), retryAttemptTimeout)
	defer cancel()
	if _, err := l.release(ctx, releaseCall{field: k.field, expected: strconv.FormatInt(count, 10)}); err != nil {
		l.undoAcquire(k, l.c.watchdogTimeout, attempt) // releases count (the known count + 1) if it is still there
	}
	return ErrReplicaAck
}

// undoMarkTTL bounds how long the mark of an undone attempt lives (lua/lib/undone.lua). An attempt that
// has not reached Redis when its undo does is delayed by the network or queued on a connection: it arrives
// within a network delay, not a hold's TTL, or never. Marks are also left for attempts that ran without
// taking the lock (a wait that was cancelled), so they must not outlive their use by much; the lock's
// final release deletes them all.
const undoMarkTTL = 2 * time.Second

// undoAcquire releases, in the background, the hold an acquisition attempt may have taken although its
// reply was lost (the context ended or the connection broke while the script was in flight). Without it,
// a lock could stay taken by nobody until its TTL ran out. The undo first asks Redis whether the owner has
// the hold count the attempt would have produced (lua/undo_acquire.lua): if it has, the attempt ran and
// its level is released (a release expecting that count); if not, the attempt has not run yet, and a mark
// left in Redis makes it change nothing if it arrives later (it may be delayed on a slow link, or queued
// on a connection), so that an undo that overtakes its attempt does not leave an orphaned hold level.
// Trying again after an attempt whose outcome is unknown is therefore safe; the undo keeps trying until
// Redis answers (or the Client ends), however long that is: an attempt held up on its connection reaches
// Redis whenever the connection carries it on, which can be long after the hold it asked for would have
// expired had it arrived at once (rueidis keeps a silent connection for ConnWriteTimeout plus twice the
// dialer's KeepAlive). Until the undo is done, the same owner's next operation on this lock waits, or,
// while the undo cannot reach Redis, fails when its next attempt does (see holdTable.prepare).
func (l *RLock) undoAcquire(k holdKey, ttl time.Duration, attempt string) {
	prior, settling := l.c.holds.settle(k)
	expected := strconv.FormatInt(prior+1, 10)
	decide := scriptCall{script: scriptUndoAcquire, keys: []string{l.name, undoneKey(l.name)},
		args: []string{k.field, expected, attempt, fmtMillis(min(ttl, undoMarkTTL))}}
	call := releaseCall{field: k.field, expected: expected}
	ran := l.c.mustRun("the undo of an acquisition", func(life context.Context) {
		left := l.c.retryUnknown(life, time.Time{}, func(ctx context.Context) (int64, error) {
			if applied, err := l.c.scripts.runInt(ctx, decide); err != nil || applied == 0 {
				settling.failing(err)
				return -1, err // not run, and now it never will
			}
			left, err := l.release(ctx, call)
			settling.failing(err)
			return left, err
		})
		settling.done(left) // -1 (the acquisition did not run, or no answer): the count stays what it was
	})
	if !ran {
		settling.done(-1)
	}
}

// holdsOnce reports whether the lock's owners hold it once at most (an Election's): see acquisition.once.
func (l *RLock) holdsOnce() bool {
	s, ok := l.spec.(*fairSpec)
	return ok && s.election != ""
}

// holdDone returns the context that ends when the hold of ctx's owner ends (see holdTable.holdDone).
func (l *RLock) holdDone(ctx context.Context) (context.Context, error) {
	field, err := l.prepareField(ctx)
	if err != nil {
		return nil, err
	}
	done, err := l.c.holds.holdDone(holdKey{key: l.name, field: field})
	if err != nil {
		return nil, l.notHeld(field)
	}
	return done, nil
}

// notHeld is ErrNotHeld for the owner field, which holds nothing of the lock, saying who it is and which
// owners of this Client hold the lock instead (see Client.notHeldError).
func (l *RLock) notHeld(field string) error {
	return l.c.notHeldError(l.kind, l.name, field)
}

// expiry returns when the owner's hold expires unless renewed, and the hold's TTL, if it is held.
func (l *RLock) expiry(ctx context.Context) (time.Time, time.Duration, bool) {
	field, err := l.prepareField(ctx)
	if err != nil {
		return time.Time{}, 0, false
	}
	return l.c.holds.expiry(holdKey{key: l.name, field: field})
}

// check validates what every operation needs: a usable Client, a name, a live context.
func (l *RLock) check(ctx context.Context) error {
	if err := l.usable(); err != nil {
		return err
	}
	return ctx.Err()
}

// usable validates what every operation needs but its context: a usable Client and a name.
func (l *RLock) usable() error {
	if l == nil {
		return ErrNilClient
	}
	if err := l.c.check(); err != nil {
		return err
	}
	if !validName(l.name) {
		return ErrInvalidName
	}
	return nil
}

// ownerOf returns the owner's field in the lock's hash, whether or not ctx has ended (an Unlock releases
// even then).
func (l *RLock) ownerOf(ctx context.Context) (string, error) {
	if err := l.usable(); err != nil {
		return "", err
	}
	owner, err := l.c.ownerField(ctx)
	return l.spec.field(owner), err
}

// prepare is check plus the owner of ctx.
func (l *RLock) prepare(ctx context.Context) (string, error) {
	if err := l.check(ctx); err != nil {
		return "", err
	}
	return l.c.ownerField(ctx)
}

// prepareField is prepare, with the owner turned into the owner's field in the lock's hash.
func (l *RLock) prepareField(ctx context.Context) (string, error) {
	owner, err := l.prepare(ctx)
	if err != nil {
		return "", err
	}
	return l.spec.field(owner), nil
}

// fail attaches op and the lock's name to err, and makes it match ctx's error once ctx has ended, and
// ErrClosed when the Client was closed while the call was under way (the connection it used is gone).
func (l *RLock) fail(ctx context.Context, op string, err error) error {
	name := ""
	if l != nil {
		name = l.name
		if l.c != nil && l.c.closed.Load() && outcomeUnknown(err) {
			err = fmt.Errorf("%w (%w)", ErrClosed, err)
		}
	}
	return wrapErrCtx(ctx, op, name, err)
}
