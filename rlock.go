package relock

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// RLock is a reentrant distributed lock, Redisson's RLock: a Redis hash at the lock's name whose one field
// is the owner ("<clientUUID>:<token>", see WithOwner) and whose value is the owner's hold count.
//
// The owner that holds an RLock may acquire it again (the hold count goes up) and must unlock it as many
// times as it acquired it; the last Unlock deletes the key and publishes a release message on
// "redisson_lock__channel:{<name>}", which wakes a waiter. Only the owner may unlock; Unlock by anyone
// else returns ErrNotHeld and changes nothing. A hold lives for its lease, or, when acquired without a
// lease, for the Client's watchdog timeout. A hold that expires is gone: another owner may take the lock,
// and the former owner's Unlock returns ErrNotHeld.
//
// Every acquisition attempt and every Unlock is one round trip: one Lua script. An RLock is a small
// value; making one costs nothing in Redis, and any number may exist for the same name.
type RLock struct {
	c       *Client
	name    string
	channel string
}

// Lock returns the reentrant lock called name. The name is the Redis key of the lock; an empty name makes
// every method return ErrInvalidName. A nil Client gives a lock whose methods return ErrNilClient.
func (c *Client) Lock(name string) *RLock {
	return &RLock{c: c, name: name, channel: "redisson_lock__channel:{" + name + "}"}
}

// Name returns the lock's name, which is its Redis key.
func (l *RLock) Name() string { return l.name }

// Lock acquires the lock for the owner of ctx, waiting as long as ctx allows. The hold has no lease: it
// lives for the Client's watchdog timeout. If the owner holds the lock already, Lock increments the hold
// count and returns at once. When ctx ends first, Lock returns an error that wraps ctx.Err() and the
// owner does not hold the lock.
func (l *RLock) Lock(ctx context.Context) error {
	_, err := l.tryLock(ctx, "lock", -1, 0)
	return err
}

// LockWithLease is Lock with a lease: the hold expires lease after it is acquired, unless unlocked
// before. lease must be positive (ErrInvalidDuration otherwise); it is rounded up to whole milliseconds.
// A reentrant acquisition never shortens the current hold: it lasts at least lease from now.
func (l *RLock) LockWithLease(ctx context.Context, lease time.Duration) error {
	if lease <= 0 {
		return l.fail("lock", ErrInvalidDuration)
	}
	_, err := l.tryLock(ctx, "lock", -1, lease)
	return err
}

// TryLock tries to acquire the lock for the owner of ctx, waiting up to wait for it. wait == 0 makes a
// single attempt. lease > 0 makes the hold expire lease after it is acquired; lease == 0 gives a hold
// without lease, which lives for the Client's watchdog timeout. Negative durations return
// ErrInvalidDuration.
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
	ttl := lease
	if ttl == 0 {
		ttl = l.c.watchdogTimeout
	}
	args := []string{strconv.FormatInt(roundUpToMillis(ttl).Milliseconds(), 10), field}
	key := holdKey{key: l.name, field: field}
	ok, err := l.c.acquireWaiting(ctx, l.channel, wait, func(ctx context.Context) (bool, time.Duration, error) {
		return l.attempt(ctx, key, ttl, args)
	})
	if err != nil {
		return false, l.fail(op, err)
	}
	return ok, nil
}

// attempt runs the acquire script once.
func (l *RLock) attempt(ctx context.Context, key holdKey, ttl time.Duration, args []string) (bool, time.Duration, error) {
	if _, err := l.c.holds.prepare(ctx, key); err != nil {
		return false, 0, err
	}
	reply, err := l.c.run(ctx, scriptAcquire, []string{l.name}, args).AsIntSlice()
	if err != nil {
		if outcomeUnknown(err) {
			l.undoAcquire(key, ttl)
		}
		return false, 0, err
	}
	if len(reply) != 2 {
		return false, 0, errUnexpectedReply
	}
	if reply[0] == 1 {
		l.c.holds.set(key, reply[1])
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
// is done, the same owner's next acquisition of this lock waits.
func (l *RLock) undoAcquire(key holdKey, ttl time.Duration) {
	prior, done := l.c.holds.settle(key)
	args := []string{key.field, unlockMessage, strconv.FormatInt(prior+1, 10)}
	ran := l.c.goBackground(func(life context.Context) {
		left := l.c.retryUnknown(life, time.Now().Add(ttl), func(ctx context.Context) (int64, error) {
			return l.c.run(ctx, scriptRelease, []string{l.name, l.channel}, args).AsInt64()
		})
		if left < 0 {
			left = prior // the acquisition did not run, or we cannot tell: keep what we knew
		}
		done(left)
	})
	if !ran {
		done(prior)
	}
}

// Unlock releases one hold of the owner of ctx. When the hold count reaches zero the lock is deleted and
// one waiter (per Client that has any) is woken. If the owner does not hold the lock, Unlock returns
// ErrNotHeld and changes nothing. A ctx that has already ended makes Unlock return its error without
// contacting Redis; to unlock in a defer after a request context may have ended, pass
// context.WithoutCancel(ctx), which keeps the owner it carries.
func (l *RLock) Unlock(ctx context.Context) error {
	field, err := l.prepare(ctx)
	if err != nil {
		return l.fail("unlock", err)
	}
	left, err := l.c.run(ctx, scriptRelease, []string{l.name, l.channel}, []string{field, unlockMessage}).AsInt64()
	if err != nil {
		return l.fail("unlock", err)
	}
	if left < 0 {
		l.c.holds.set(holdKey{key: l.name, field: field}, 0)
		return l.fail("unlock", ErrNotHeld)
	}
	l.c.holds.set(holdKey{key: l.name, field: field}, left)
	return nil
}

// ForceUnlock deletes the lock whoever holds it, however many times, and wakes its waiters. It reports
// whether there was a lock to delete. It is meant for operators and recovery code: the owner is not told,
// and its Unlock will return ErrNotHeld.
func (l *RLock) ForceUnlock(ctx context.Context) (bool, error) {
	if err := l.check(ctx); err != nil {
		return false, l.fail("forceunlock", err)
	}
	n, err := l.c.run(ctx, scriptForceRelease, []string{l.name, l.channel}, []string{unlockMessage}).AsInt64()
	if err != nil {
		return false, l.fail("forceunlock", err)
	}
	return n == 1, nil
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

// IsHeld reports whether the owner of ctx holds the lock.
func (l *RLock) IsHeld(ctx context.Context) (bool, error) {
	n, err := l.holdCount(ctx, "isheld")
	return n > 0, err
}

// HoldCount returns how many times the owner of ctx holds the lock: 0 when it does not hold it.
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
