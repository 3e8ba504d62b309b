package relock

import (
	"context"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/rueidis"
	"go.opentelemetry.io/otel/trace"
)

// unlockAttempts is how many times Unlock sends a release whose outcome it could not learn, before it
// leaves the rest to the background; unlockRetryBackoff is the pause between them.
const (
	unlockAttempts     = 3
	unlockRetryBackoff = 20 * time.Millisecond
)

// RLock is a reentrant distributed lock, Redisson's RLock: a Redis hash at the lock's name whose one field
// is the owner ("<clientUUID>:<token>", see WithOwner) and whose value is the owner's hold count.
//
// The owner that holds an RLock may acquire it again (the hold count goes up) and must unlock it as many
// times as it acquired it; the last Unlock deletes the key and publishes a release message on
// "redisson_lock__channel:{<name>}", which wakes a waiter. Only the owner may unlock; Unlock by anyone
// else returns ErrNotHeld and changes nothing.
//
// A hold acquired with a lease lives for the lease. A hold acquired without one is kept alive by the
// Client's watchdog until the final Unlock, and expires within the watchdog timeout if its holder stops
// (crash, Close, partition). A hold that ends any other way than by its owner's Unlock is lost: the
// owner's HoldContext is cancelled with a cause matching ErrLockLost, and its Unlock returns ErrNotHeld.
//
// Every acquisition attempt and every Unlock is one round trip: one Lua script. An RLock is a small
// value; making one costs nothing in Redis, and any number may exist for the same name.
type RLock struct {
	c           *Client
	name        string
	channel     string
	fenced      bool
	acquireKeys []string // [name] or, fenced, [name, token counter]
	releaseKeys []string // [name, channel, release record]
}

// LockOption configures a lock made by Client.Lock.
type LockOption func(*RLock)

// WithFencing makes the lock fenced: each acquisition by a new owner takes the next value of a 64-bit
// counter kept in Redis with the lock ("redisson_lock_token:{<name>}", as Redisson's RFencedLock), in the
// same script and round trip; a reentrant acquisition keeps the owner's token. FencingToken returns it.
//
// A lease or a watchdog cannot stop a holder that was paused (GC, SIGSTOP, a stalled VM) from acting
// after its hold expired and another owner got the lock. Fencing can: pass the token with every write to
// the resource the lock protects, and have the resource reject a write whose token is lower than the
// highest it has accepted. The counter never expires, so tokens keep increasing across the lock key's
// expiries; it must not be evicted (use a noeviction or volatile-* maxmemory policy), and every user of
// the lock name must use fencing.
func WithFencing() LockOption {
	return func(l *RLock) { l.fenced = true }
}

// Lock returns the reentrant lock called name. The name is the Redis key of the lock; an empty name makes
// every method return ErrInvalidName. A nil Client gives a lock whose methods return ErrNilClient.
func (c *Client) Lock(name string, opts ...LockOption) *RLock {
	tag := "{" + name + "}"
	l := &RLock{c: c, name: name, channel: "redisson_lock__channel:" + tag}
	for _, opt := range opts {
		opt(l)
	}
	l.acquireKeys = []string{name}
	if l.fenced {
		l.acquireKeys = append(l.acquireKeys, "redisson_lock_token:"+tag)
	}
	l.releaseKeys = []string{name, l.channel, "relock_release:" + tag}
	return l
}

// Name returns the lock's name, which is its Redis key.
func (l *RLock) Name() string { return l.name }

// Lock acquires the lock for the owner of ctx, waiting as long as ctx allows. The hold has no lease: the
// watchdog keeps it alive until the owner's final Unlock. If the owner holds the lock already, Lock
// increments the hold count and returns at once. When ctx ends first, Lock returns an error that wraps
// ctx.Err(), and the owner does not hold the lock.
func (l *RLock) Lock(ctx context.Context) error {
	_, err := l.tryLock(ctx, "lock", -1, 0)
	return err
}

// LockWithLease is Lock with a lease: the hold expires lease after it is acquired, unless unlocked
// before, and the watchdog does not renew it. lease must be positive (ErrInvalidDuration otherwise); it is
// rounded up to whole milliseconds. A reentrant acquisition never shortens the current hold: it lasts at
// least lease from now.
func (l *RLock) LockWithLease(ctx context.Context, lease time.Duration) error {
	if lease <= 0 {
		return l.fail("lock", ErrInvalidDuration)
	}
	_, err := l.tryLock(ctx, "lock", -1, lease)
	return err
}

// TryLock tries to acquire the lock for the owner of ctx, waiting up to wait for it. wait == 0 makes a
// single attempt. lease > 0 makes the hold expire lease after it is acquired; lease == 0 gives a hold the
// watchdog keeps alive until the final Unlock. Negative durations return ErrInvalidDuration.
//
// TryLock reports true when the owner holds the lock (or held it already: the hold count went up), and
// false, with a nil error, when wait ran out. When ctx ends first, it returns false and an error wrapping
// ctx.Err().
func (l *RLock) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if wait < 0 || lease < 0 {
		return false, l.fail("trylock", ErrInvalidDuration)
	}
	return l.tryLock(ctx, "trylock", wait, lease)
}

func (l *RLock) tryLock(ctx context.Context, op string, wait, lease time.Duration) (bool, error) {
	field, err := l.prepare(ctx)
	if err != nil {
		return false, l.fail(op, err)
	}
	ttl, ttlArg := lease, ""
	if ttl == 0 {
		ttl, ttlArg = l.c.watchdogTimeout, l.c.watchdogTimeoutArg
	} else {
		ttlArg = fmtMillis(ttl)
	}
	args := []string{ttlArg, field}
	k := holdKey{key: l.name, field: field}
	parent := ctx
	ok, err := l.c.acquire(ctx, acquireOp{
		kind: kindRLock, name: l.name, channel: l.channel, wait: wait,
		try: func(ctx context.Context) (bool, time.Duration, error) {
			return l.attempt(ctx, parent, k, lease, ttl, args)
		},
	})
	if err != nil {
		return false, l.fail(op, err)
	}
	return ok, nil
}

// attempt runs the acquire script once.
func (l *RLock) attempt(ctx, parent context.Context, k holdKey, lease, ttl time.Duration, args []string) (bool, time.Duration, error) {
	if _, err := l.c.watchdog.prepare(ctx, k); err != nil {
		return false, 0, err
	}
	sentAt := time.Now()
	reply, err := l.c.run(ctx, scriptAcquire, l.acquireKeys, args).AsIntSlice()
	if err != nil {
		if outcomeUnknown(err) {
			l.undoAcquire(k, ttl)
		}
		return false, 0, err
	}
	if len(reply) != 3 {
		return false, 0, errUnexpectedReply
	}
	if reply[0] == 1 {
		l.c.watchdog.acquired(k, acquisition{
			kind: kindRLock, name: l.name, count: reply[1], lease: lease, sentAt: sentAt,
			renew: renewal{script: scriptRenew, keys: l.acquireKeys[:1], args: args[1:2]}, // args[1] is the field
			token: uint64(reply[2]), parent: parent, traced: trace.SpanFromContext(ctx).IsRecording(),
		})
		return true, 0, nil
	}
	if reply[1] < 0 {
		return false, -1, nil
	}
	return false, time.Duration(reply[1]) * time.Millisecond, nil
}

// undoAcquire releases, in the background, the hold an acquisition may have taken although its reply was
// lost (the context ended or the connection broke while the script was in flight). Without it, a lock
// could stay taken by nobody until its TTL ran out. The release only happens if the hold count is the
// one that acquisition would have produced, so trying again after an attempt whose outcome is unknown is
// safe; the undo keeps trying until Redis answers or the hold it might undo has expired anyway. Until it
// is done, the same owner's next operation on this lock waits.
func (l *RLock) undoAcquire(k holdKey, ttl time.Duration) {
	prior, done := l.c.watchdog.settle(k)
	args := []string{k.field, unlockMessage, strconv.FormatInt(prior+1, 10), ""}
	ran := l.c.goBackground(func(life context.Context) {
		left := l.c.retryUnknown(life, time.Now().Add(ttl), func(ctx context.Context) (int64, error) {
			return l.c.run(ctx, scriptRelease, l.releaseKeys, args).AsInt64()
		})
		done(left) // -1 (the acquisition did not run, or no answer): the count stays what it was
	})
	if !ran {
		done(-1)
	}
}

// Unlock releases one hold of the owner of ctx. When the hold count reaches zero the lock is deleted,
// renewal stops, the owner's HoldContext is cancelled (context.Canceled), and one waiter per Client that
// has any is woken. If the owner does not hold the lock, Unlock returns ErrNotHeld and changes nothing.
//
// A ctx that has already ended makes Unlock return its error without contacting Redis; to unlock in a
// defer after a request context may have ended, pass context.WithoutCancel(ctx), which keeps the owner it
// carries. When a release is sent but its reply is lost (ctx ends, or the connection breaks, while it is
// in flight), Unlock sends the same request again, up to three times while ctx allows; a repeated request
// never releases twice. If a repeat finds that the owner holds nothing, Unlock returns ErrNotHeld: the
// lost request released the last hold, or the hold had been lost before; either way the lock is not the
// owner's any more. If the outcome is still unknown, Unlock returns the error and relock goes on repeating
// the request in the background until Redis answers or the hold expires; the owner's next operation on
// this lock waits for that.
func (l *RLock) Unlock(ctx context.Context) error {
	field, err := l.prepare(ctx)
	if err != nil {
		return l.fail("unlock", err)
	}
	k := holdKey{key: l.name, field: field}
	if _, err := l.c.watchdog.prepare(ctx, k); err != nil {
		return l.fail("unlock", err)
	}
	ctx, span := l.c.tel.startSpan(ctx, "relock.unlock", kindRLock, l.name)
	args := l.releaseArgs(field)
	left, err := l.release(ctx, args)
	for attempt := 1; attempt < unlockAttempts && outcomeUnknown(err) && ctx.Err() == nil; attempt++ {
		select {
		case <-ctx.Done():
		case <-time.After(unlockRetryBackoff):
		}
		left, err = l.release(ctx, args)
	}
	if err != nil {
		if outcomeUnknown(err) {
			l.finishRelease(k, args)
		}
		endSpan(span, outcomeError, err)
		return l.fail("unlock", err)
	}
	if left < 0 {
		l.c.watchdog.notHeld(k)
		endSpan(span, outcomeNotHeld, nil)
		return l.fail("unlock", ErrNotHeld)
	}
	l.c.watchdog.released(k, left)
	if left == 0 {
		endSpan(span, outcomeReleased, nil)
	} else {
		endSpan(span, outcomeDecremented, nil)
	}
	return nil
}

// releaseArgs are the arguments of one release request, with a fresh request id.
func (l *RLock) releaseArgs(field string) []string {
	return []string{field, unlockMessage, "", strconv.FormatUint(rand.Uint64(), 36)}
}

// release sends one release request; sending the same args again never releases twice.
func (l *RLock) release(ctx context.Context, args []string) (int64, error) {
	return l.c.run(ctx, scriptRelease, l.releaseKeys, args).AsInt64()
}

// finishRelease repeats, in the background, a release request whose outcome Unlock could not learn.
func (l *RLock) finishRelease(k holdKey, args []string) {
	_, done := l.c.watchdog.settle(k)
	ran := l.c.goBackground(func(life context.Context) {
		left := l.c.retryUnknown(life, time.Now().Add(l.c.watchdogTimeout), func(ctx context.Context) (int64, error) {
			return l.release(ctx, args)
		})
		done(max(left, 0)) // not held, or no answer for a whole watchdog timeout: the hold is over
	})
	if !ran {
		done(-1)
	}
}

// ForceUnlock deletes the lock whoever holds it, however many times, and wakes its waiters. It reports
// whether there was a lock to delete. It is meant for operators and recovery code: the owner learns of it
// when its watchdog next renews (its HoldContext is cancelled with ErrLockLost), or from Unlock, which
// returns ErrNotHeld.
func (l *RLock) ForceUnlock(ctx context.Context) (bool, error) {
	if err := l.check(ctx); err != nil {
		return false, l.fail("forceunlock", err)
	}
	ctx, span := l.c.tel.startSpan(ctx, "relock.force_unlock", kindRLock, l.name)
	n, err := l.c.run(ctx, scriptForceRelease, l.releaseKeys, []string{unlockMessage}).AsInt64()
	if err != nil {
		endSpan(span, outcomeError, err)
		return false, l.fail("forceunlock", err)
	}
	if n == 1 {
		endSpan(span, outcomeReleased, nil)
	} else {
		endSpan(span, outcomeNotHeld, nil)
	}
	return n == 1, nil
}

// HoldContext returns a context, derived from ctx, for the hold of ctx's owner on the lock. It is
// cancelled when the hold ends: with context.Canceled when the owner's final Unlock releases it, and with
// a cause matching ErrLockLost (see context.Cause) when the hold is lost: Redis no longer had it when the
// watchdog came to renew it, the watchdog could not renew it before it expired, its lease ran out, or the
// Client was closed. It is cancelled too when ctx is. Work that must stop when the lock is no longer
// held should run under it.
//
// HoldContext answers from what the Client knows, without a round trip: it returns ErrNotHeld when the
// owner has no hold that this Client acquired and has not seen end.
func (l *RLock) HoldContext(ctx context.Context) (context.Context, error) {
	field, err := l.prepare(ctx)
	if err != nil {
		return nil, l.fail("holdcontext", err)
	}
	hctx, err := l.c.watchdog.holdContext(ctx, holdKey{key: l.name, field: field})
	if err != nil {
		return nil, l.fail("holdcontext", err)
	}
	return hctx, nil
}

// FencingToken returns the fencing token of the current hold of ctx's owner: the value the lock's counter
// took at the owner's first acquisition, greater than that of every earlier holder. It answers from what
// the Client knows, without a round trip. It returns ErrNotFenced if the lock was made without
// WithFencing, and ErrNotHeld if the owner does not hold the lock.
func (l *RLock) FencingToken(ctx context.Context) (uint64, error) {
	field, err := l.prepare(ctx)
	if err != nil {
		return 0, l.fail("fencingtoken", err)
	}
	if !l.fenced {
		return 0, l.fail("fencingtoken", ErrNotFenced)
	}
	token, ok := l.c.watchdog.token(holdKey{key: l.name, field: field})
	if !ok {
		return 0, l.fail("fencingtoken", ErrNotHeld)
	}
	return token, nil
}

// IsLocked reports whether any owner holds the lock.
func (l *RLock) IsLocked(ctx context.Context) (bool, error) {
	if err := l.check(ctx); err != nil {
		return false, l.fail("islocked", err)
	}
	n, err := l.c.do(ctx, l.c.rdb.B().Exists().Key(l.name).Build()).AsInt64()
	if err != nil {
		return false, l.fail("islocked", err)
	}
	return n == 1, nil
}

// IsHeld reports whether the owner of ctx holds the lock, asking Redis.
func (l *RLock) IsHeld(ctx context.Context) (bool, error) {
	n, err := l.holdCount(ctx, "isheld")
	return n > 0, err
}

// HoldCount returns how many times the owner of ctx holds the lock, asking Redis: 0 when it does not
// hold it.
func (l *RLock) HoldCount(ctx context.Context) (int, error) {
	return l.holdCount(ctx, "holdcount")
}

func (l *RLock) holdCount(ctx context.Context, op string) (int, error) {
	field, err := l.prepare(ctx)
	if err != nil {
		return 0, l.fail(op, err)
	}
	n, err := l.c.do(ctx, l.c.rdb.B().Hget().Key(l.name).Field(field).Build()).AsInt64()
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	if err != nil {
		return 0, l.fail(op, err)
	}
	return int(n), nil
}

// RemainingTTL returns how long the lock's key will live unless renewed or released: 0 when nobody holds
// the lock, and NoExpiry when the key exists without a time to live (written by something other than
// relock or Redisson).
func (l *RLock) RemainingTTL(ctx context.Context) (time.Duration, error) {
	if err := l.check(ctx); err != nil {
		return 0, l.fail("remainingttl", err)
	}
	ms, err := l.c.do(ctx, l.c.rdb.B().Pttl().Key(l.name).Build()).AsInt64()
	if err != nil {
		return 0, l.fail("remainingttl", err)
	}
	return pttlToDuration(ms), nil
}

// NoExpiry is what RemainingTTL returns for a lock key that exists but has no time to live.
const NoExpiry time.Duration = -1

func pttlToDuration(ms int64) time.Duration {
	switch {
	case ms == -1:
		return NoExpiry
	case ms < 0:
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}

// check validates what every operation needs: a usable Client, a name, a live context.
func (l *RLock) check(ctx context.Context) error {
	if l == nil {
		return ErrNilClient
	}
	if err := l.c.check(); err != nil {
		return err
	}
	if l.name == "" {
		return ErrInvalidName
	}
	return ctx.Err()
}

// prepare is check plus the owner field of ctx.
func (l *RLock) prepare(ctx context.Context) (string, error) {
	if err := l.check(ctx); err != nil {
		return "", err
	}
	return l.c.ownerField(ctx)
}

func (l *RLock) fail(op string, err error) error {
	name := ""
	if l != nil {
		name = l.name
	}
	return wrapErr(op, name, err)
}
