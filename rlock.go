package relock

import (
	"context"
	"time"
)

// RLock is a reentrant distributed lock, Redisson's RLock: a Redis hash at the lock's name whose one field
// is the owner ("<clientUUID>:<token>", see WithOwner) and whose value is the owner's hold count.
//
// The owner that holds an RLock may acquire it again (the hold count goes up) and must unlock it as many
// times as it acquired it; the last Unlock deletes the key and publishes a release message on
// "redisson_lock__channel:{<name>}", which wakes one waiter per Client. Only the owner may unlock; Unlock
// by anyone else returns ErrNotHeld and changes nothing. Waiters are not ordered: whoever tries first
// after a release gets the lock (see FairLock for first come, first served).
//
// A hold acquired with a lease lives for the lease. A hold acquired without one is kept alive by the
// Client's watchdog until the final Unlock, and expires within the watchdog timeout if its holder stops
// (crash, Close, partition). A hold that ends any other way than by its owner's Unlock is lost: the
// owner's HoldContext is cancelled with a cause matching ErrLockLost, and its Unlock returns ErrNotHeld.
//
// Every acquisition attempt and every Unlock is one round trip: one Lua script. An RLock is a small
// value; making one costs nothing in Redis, and any number may exist for the same name.
type RLock struct {
	r reentrant
}

// Lock returns the reentrant lock called name. The name is the Redis key of the lock; an empty name makes
// every method return ErrInvalidName. A nil Client gives a lock whose methods return ErrNilClient.
func (c *Client) Lock(name string, opts ...LockOption) *RLock {
	l := &RLock{r: newReentrant(c, kindRLock, name, opts)}
	r := &l.r
	r.acquireScript, r.releaseScript, r.forceScript = scriptAcquire, scriptRelease, scriptForceRelease
	r.acquireKeys = []string{name}
	if r.fenced {
		r.acquireKeys = append(r.acquireKeys, r.tokenKey())
	}
	r.releaseKeys = []string{name, r.channel, r.recordKey()}
	return l
}

func (l *RLock) core() *reentrant {
	if l == nil {
		return nil
	}
	return &l.r
}

// Name returns the lock's name, which is its Redis key.
func (l *RLock) Name() string {
	if l == nil {
		return ""
	}
	return l.r.name
}

// Lock acquires the lock for the owner of ctx, waiting as long as ctx allows. The hold has no lease: the
// watchdog keeps it alive until the owner's final Unlock. If the owner holds the lock already, Lock
// increments the hold count and returns at once. When ctx ends first, Lock returns an error that wraps
// ctx.Err(), and the owner does not hold the lock.
func (l *RLock) Lock(ctx context.Context) error {
	_, err := l.core().tryLock(ctx, "lock", -1, 0)
	return err
}

// LockWithLease is Lock with a lease: the hold expires lease after it is acquired, unless unlocked
// before, and the watchdog does not renew it. lease must be positive (ErrInvalidDuration otherwise); it is
// rounded up to whole milliseconds. A reentrant acquisition never shortens the current hold: it lasts at
// least lease from now.
func (l *RLock) LockWithLease(ctx context.Context, lease time.Duration) error {
	if lease <= 0 {
		return l.core().fail(ctx, "lock", ErrInvalidDuration)
	}
	_, err := l.core().tryLock(ctx, "lock", -1, lease)
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
		return false, l.core().fail(ctx, "trylock", ErrInvalidDuration)
	}
	return l.core().tryLock(ctx, "trylock", wait, lease)
}

// Unlock releases one hold of the owner of ctx. When the hold count reaches zero the lock is deleted,
// renewal stops, the owner's HoldContext is cancelled (context.Canceled), and one waiter per Client that
// has any is woken. If the owner does not hold the lock, Unlock returns ErrNotHeld and changes nothing.
//
// Unlock always releases, whatever its ctx: `defer l.Unlock(ctx)` is safe after a request's ctx ended.
// When ctx has ended before the release could be sent, or ends while it is in flight, Unlock returns at once
// with an error matching ctx.Err(), and the release goes on in the background, on the Client's lifetime:
// it is sent, and sent again, until Redis answers or the hold would have expired. If it is the owner's last
// hold, renewal stops at once and the owner's HoldContext is cancelled (context.Canceled) before Unlock
// returns. The owner's next operation on this lock waits for that release. To learn the release's own
// outcome (ErrNotHeld, a Redis error), pass a ctx that has not ended, such as context.WithoutCancel(ctx),
// which keeps the owner it carries.
//
// When a release's reply is lost (the connection breaks while it is in flight), Unlock sends the same
// request again, up to three times while ctx allows, then in the background as above; a repeated request
// never releases twice. If a repeat finds that the owner holds nothing, Unlock returns ErrNotHeld: the lost
// request released the last hold, or the hold had been lost before; either way the lock is not the owner's
// any more.
func (l *RLock) Unlock(ctx context.Context) error { return l.core().unlock(ctx) }

// ForceUnlock deletes the lock whoever holds it, however many times, and wakes its waiters. It reports
// whether there was a lock to delete. It is meant for operators and recovery code: the owner learns of it
// when its watchdog next renews (its HoldContext is cancelled with ErrLockLost), or from Unlock, which
// returns ErrNotHeld.
func (l *RLock) ForceUnlock(ctx context.Context) (bool, error) { return l.core().forceUnlock(ctx) }

// HoldContext returns a context, derived from ctx, for the hold of ctx's owner on the lock. It is
// cancelled when the hold ends: with context.Canceled when the owner's final Unlock releases it, and with
// a cause matching ErrLockLost (see context.Cause) when the hold is lost: Redis no longer had it when the
// watchdog came to renew it, the watchdog could not renew it before it expired, its lease ran out, or the
// Client was closed. It is cancelled too when ctx is. Work that must stop when the lock is no longer
// held should run under it.
//
// A hold with a lease is watched as well: every watchdog timeout/3 the watchdog's batch checks, without
// extending it, that Redis still has it, so its holder learns of a loss (ForceUnlock, a Redis restart
// without persistence) as soon as a renewed hold's would, not at the end of its lease.
//
// HoldContext answers from what the Client knows, without a round trip: it returns ErrNotHeld when the
// owner has no hold that this Client acquired and has not seen end. It costs O(1): calling it again with
// the same ctx returns the same context (or, for a ctx that never ends, a small value), and nothing it
// makes outlives the hold or ctx.
func (l *RLock) HoldContext(ctx context.Context) (context.Context, error) {
	return l.core().holdContext(ctx)
}

// FencingToken returns the fencing token of the current hold of ctx's owner: the value the lock's counter
// took at the owner's first acquisition, greater than that of every earlier holder. It answers from what
// the Client knows, without a round trip. It returns ErrNotFenced if the lock was made without
// WithFencing, and ErrNotHeld if the owner does not hold the lock.
func (l *RLock) FencingToken(ctx context.Context) (uint64, error) { return l.core().fencingToken(ctx) }

// IsLocked reports whether any owner holds the lock.
func (l *RLock) IsLocked(ctx context.Context) (bool, error) { return l.core().isLocked(ctx) }

// IsHeld reports whether the owner of ctx holds the lock, asking Redis.
func (l *RLock) IsHeld(ctx context.Context) (bool, error) {
	n, err := l.core().holdCount(ctx, "isheld")
	return n > 0, err
}

// HoldCount returns how many times the owner of ctx holds the lock, asking Redis: 0 when it does not
// hold it.
func (l *RLock) HoldCount(ctx context.Context) (int, error) {
	return l.core().holdCount(ctx, "holdcount")
}

// RemainingTTL returns how long the lock's key will live unless renewed or released: 0 when nobody holds
// the lock, and NoExpiry when the key exists without a time to live (written by something other than
// relock or Redisson).
func (l *RLock) RemainingTTL(ctx context.Context) (time.Duration, error) {
	return l.core().remainingTTL(ctx)
}
