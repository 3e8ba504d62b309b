package relock

import (
	"context"
	"slices"
	"time"
)

// FairLock is a reentrant distributed lock whose waiters get it in the order they asked for it, across
// goroutines and Clients: Redisson's RFairLock, in its key layout, so that Go and Java waiters on one
// lock share one queue.
//
// The lock itself is an RLock's hash at the lock's name. Waiters queue in the list
// "redisson_lock_queue:{<name>}", scored in the sorted set "redisson_lock_timeout:{<name>}" as Redisson
// scores them, with Options.FairLockWaitTimeout as Redisson's fairLockWaitTimeout (they must be equal);
// relock keeps its own waiters' liveness in the sorted set "relock_lock_alive:{<name>}". A waiter joins
// the queue at its first attempt (TryLock with wait 0 never joins) and leaves it when it gets the lock or
// gives up (its wait runs out, or its context ends): then it removes itself at once, and the waiters
// behind it keep their order. Only the head of the queue may take a free lock. The final Unlock wakes the
// head alone, on its own channel "redisson_lock__channel:{<name>}:<owner>".
//
// A waiter is never dropped for having waited long: its Client's watchdog refreshes it every watchdog
// timeout/3. A waiter whose Client stopped refreshing it (the process died, or was cut off from Redis) for
// a whole watchdog timeout is dropped when it reaches the head, so a dead waiter holds up the queue for
// about the watchdog timeout at most, as a dead holder does: relock's waiters try again at least every
// watchdog timeout/3, and drop it. (Redisson's clients, which do not know relock's rule, drop it by
// theirs, about FairLockWaitTimeout later; a Redisson client's waiter is dropped at the head by Redisson's
// rule, by either side.) A live waiter keeps its Redisson score high enough that Redisson's clients do not
// drop it; should one drop it anyway, or should it be removed by hand, it goes back to the head of the
// queue within a watchdog timeout/3, and takes the lock if it is free. When a holder's lease runs out
// without an Unlock, the head of the queue takes the lock as soon as the key expires. A Client that is
// closed does not remove its waiters' entries: they expire like those of a dead process.
//
// Everything else (reentrancy, leases, the watchdog, HoldContext, fencing, one script per attempt and per
// Unlock) is as for RLock. When no owner holds or waits for the lock, none of its keys is left in Redis
// (the fencing counter excepted; and the alive set, for a watchdog timeout at most, when a Redisson client
// dropped a dead relock waiter).
type FairLock struct {
	r reentrant
}

// defaultFairLockWaitTimeout is Redisson's default Config.fairLockWaitTimeout, the FairLockWaitTimeout a
// zero in Options stands for.
const defaultFairLockWaitTimeout = 5 * time.Minute

// FairLock returns the fair lock called name. The name is the Redis key of the lock; an empty name makes
// every method return ErrInvalidName. A nil Client gives a lock whose methods return ErrNilClient.
func (c *Client) FairLock(name string, opts ...LockOption) *FairLock {
	l := &FairLock{r: newReentrant(c, kindFair, name, opts)}
	r := &l.r
	queue, timeouts := companion("redisson_lock_queue", name), companion("redisson_lock_timeout", name)
	alive := companion("relock_lock_alive", name)
	keys := []string{name, queue, timeouts, alive, r.channel} // every queue script's
	q := &waitQueue{c: c, entries: alive, leave: scriptFairLeave, leaveKeys: keys, message: unlockMessage,
		refresh: renewal{script: scriptFairRefresh, keys: keys}}
	if c != nil {
		q.joinArgs = []string{c.fairLockWaitArg, unlockMessage}
		q.publishes = true // the publish command follows joinArgs, in the acquire and refresh scripts
		q.leaveArgs = []string{c.fairLockWaitArg}
		q.refresh.args = q.joinArgs
		q.maxSleep = c.watchdogTimeout / 3
	}
	r.waiters = q
	r.ownerChannels = true
	r.acquireScript, r.releaseScript, r.forceScript = scriptFairAcquire, scriptFairRelease, scriptFairForceRelease
	r.acquireKeys = slices.Clip(keys)
	if r.fenced {
		r.acquireKeys = append(r.acquireKeys, r.tokenKey())
	}
	r.releaseKeys = append(slices.Clip(keys), r.recordKey())
	return l
}

func (l *FairLock) core() *reentrant {
	if l == nil {
		return nil
	}
	return &l.r
}

// Name returns the lock's name, which is its Redis key.
func (l *FairLock) Name() string {
	if l == nil {
		return ""
	}
	return l.r.name
}

// Lock acquires the lock for the owner of ctx, waiting its turn as long as ctx allows. The hold has no
// lease: the watchdog keeps it alive until the owner's final Unlock. If the owner holds the lock already,
// Lock increments the hold count and returns at once. When ctx ends first, Lock leaves the queue and
// returns an error that wraps ctx.Err().
func (l *FairLock) Lock(ctx context.Context) error {
	_, err := l.core().tryLock(ctx, "lock", -1, 0)
	return err
}

// LockWithLease is Lock with a lease: the hold expires lease after it is acquired, unless unlocked
// before. lease must be positive (ErrInvalidDuration otherwise).
func (l *FairLock) LockWithLease(ctx context.Context, lease time.Duration) error {
	if lease <= 0 {
		return l.core().fail(ctx, "lock", ErrInvalidDuration)
	}
	_, err := l.core().tryLock(ctx, "lock", -1, lease)
	return err
}

// TryLock tries to acquire the lock for the owner of ctx, waiting its turn for up to wait. wait == 0
// makes a single attempt, which succeeds only if the lock is free and nobody is queued, and never joins
// the queue. lease > 0 makes the hold expire lease after it is acquired; lease == 0 gives a hold the
// watchdog keeps alive. Negative durations return ErrInvalidDuration. It reports false, with a nil error,
// when wait ran out; the owner has then left the queue.
func (l *FairLock) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if wait < 0 || lease < 0 {
		return false, l.core().fail(ctx, "trylock", ErrInvalidDuration)
	}
	return l.core().tryLock(ctx, "trylock", wait, lease)
}

// Unlock releases one hold of the owner of ctx. The final Unlock deletes the lock and wakes the head of
// the queue, and only it. Unlock by a non-owner returns ErrNotHeld and changes nothing. Lost replies are
// handled as for RLock.Unlock.
func (l *FairLock) Unlock(ctx context.Context) error { return l.core().unlock(ctx) }

// ForceUnlock deletes the lock whoever holds it and wakes the head of the queue. The queue is kept.
func (l *FairLock) ForceUnlock(ctx context.Context) (bool, error) { return l.core().forceUnlock(ctx) }

// HoldContext returns a context, derived from ctx, that is cancelled when the hold of ctx's owner ends:
// with context.Canceled at its final Unlock, with a cause matching ErrLockLost when it is lost. See
// RLock.HoldContext.
func (l *FairLock) HoldContext(ctx context.Context) (context.Context, error) {
	return l.core().holdContext(ctx)
}

// FencingToken returns the fencing token of the current hold of ctx's owner (see WithFencing).
func (l *FairLock) FencingToken(ctx context.Context) (uint64, error) {
	return l.core().fencingToken(ctx)
}

// IsLocked reports whether any owner holds the lock.
func (l *FairLock) IsLocked(ctx context.Context) (bool, error) { return l.core().isLocked(ctx) }

// IsHeld reports whether the owner of ctx holds the lock, asking Redis.
func (l *FairLock) IsHeld(ctx context.Context) (bool, error) {
	n, err := l.core().holdCount(ctx, "isheld")
	return n > 0, err
}

// HoldCount returns how many times the owner of ctx holds the lock, asking Redis.
func (l *FairLock) HoldCount(ctx context.Context) (int, error) {
	return l.core().holdCount(ctx, "holdcount")
}

// RemainingTTL returns how long the lock's key will live unless renewed or released (see
// RLock.RemainingTTL).
func (l *FairLock) RemainingTTL(ctx context.Context) (time.Duration, error) {
	return l.core().remainingTTL(ctx)
}

var _ Locker = (*FairLock)(nil)
