package relock

import (
	"context"
	"time"
)

// ReadWriteLock is a distributed read-write lock, Redisson's RReadWriteLock in its key layout: any number
// of owners may hold its read lock at once, or one owner its write lock, never both. Each of the two locks
// is reentrant per owner and behaves like an RLock (blocking and bounded waits, leases, the watchdog,
// HoldContext, tracing); the write lock can be fenced (WithFencing).
//
// The state is one hash at the lock's name: field "mode" ("read" or "write"), a field per reader
// "<owner>" with its read count, and the writer's field "<owner>:write" with its write count. Each read
// hold level n also has a key "{<name>}:<owner>:rwlock_timeout:<n>" that expires on its own, and each
// Client renews only its own readers' keys: a reader whose Client dies or is closed stops counting within
// the watchdog timeout, even while other readers keep the lock alive. Releases are announced on
// "redisson_rwlock:{<name>}", and wake every waiter of the lock on each Client.
//
// The owner that holds the write lock may take the read lock too, and keep it after releasing the write
// lock: a downgrade, after which other readers may enter. The opposite, asking for the write lock while
// holding the read lock, could never be granted (the writer would wait for itself); it fails at once
// with ErrUpgrade.
//
// Writer starvation: by default, as in Redisson, a reader enters whenever no writer holds the lock, so a
// steady stream of overlapping readers can keep a waiting writer out indefinitely. With
// WithWriterPriority, a waiting writer makes new readers wait (owners that already hold the read lock may
// still re-enter): the readers in place drain, the writer gets the lock, and the readers follow it.
type ReadWriteLock struct {
	read  *ReadLock
	write *WriteLock
}

// ReadLock is the shared half of a ReadWriteLock. See ReadWriteLock.
type ReadLock struct {
	r reentrant
}

// WriteLock is the exclusive half of a ReadWriteLock. See ReadWriteLock.
type WriteLock struct {
	r reentrant
}

// WithWriterPriority makes writers that wait for a ReadWriteLock's write lock hold back new readers,
// so that a continuous stream of readers cannot starve them. It applies to writers made with it; readers
// honour it whatever options they were made with. A waiting writer's claim is kept alive by its Client's
// watchdog like a FairLock's queue entry, and dropped when it gets the lock, gives up, or its Client stops
// refreshing it for a watchdog timeout.
func WithWriterPriority() LockOption {
	return func(o *lockOptions) { o.writerPriority = true }
}

// ReadWriteLock returns the read-write lock called name. The name is the Redis key of the lock; an empty
// name makes every method return ErrInvalidName. A nil Client gives locks whose methods return
// ErrNilClient. WithFencing applies to the write lock; WithWriterPriority to writers.
func (c *Client) ReadWriteLock(name string, opts ...LockOption) *ReadWriteLock {
	channel, writers, record := companion("redisson_rwlock", name), companion("relock_rwlock_writers", name), companion("relock_rwlock_release", name)
	// The read-hold keys start with the lock's tag, which every script that forms them is given.
	var tag []string
	if validName(name) {
		tag = []string{nameBase(name)}
	}

	read := &ReadLock{r: newReentrant(c, kindRead, name, opts)}
	r := &read.r
	r.channel, r.mode, r.releaseMessage, r.fenced = channel, "read", readUnlockMessage, false
	r.acquireScript, r.releaseScript, r.forceScript, r.renewScript = scriptRWReadAcquire, scriptRWReadRelease, scriptRWForceRelease, scriptRWReadRenew
	r.acquireKeys = []string{name, writers}
	r.releaseKeys = []string{name, channel, record}
	r.extraArgs = func(owner string) []string { return []string{owner + writerSuffix} }
	r.trailing, r.renewArgs = tag, tag
	r.countScript = scriptRWReadCount

	write := &WriteLock{r: newReentrant(c, kindWrite, name, opts)}
	w := &write.r
	w.channel, w.mode, w.releaseMessage, w.fieldSuffix = channel, "write", readUnlockMessage, writerSuffix
	w.acquireScript, w.releaseScript, w.forceScript = scriptRWWriteAcquire, scriptRWWriteRelease, scriptRWForceRelease
	w.acquireKeys = []string{name, writers}
	if w.fenced {
		w.acquireKeys = append(w.acquireKeys, w.tokenKey())
	}
	w.releaseKeys = []string{name, channel, record}
	w.trailing = tag
	if w.writerPriority {
		w.waiters = &waitQueue{c: c, entries: writers, leave: scriptRWWriteLeave, message: readUnlockMessage,
			leaveKeys: []string{writers, channel}, refresh: renewal{script: scriptQueueRefresh, keys: []string{writers}}}
		w.extraArgs = func(owner string) []string { return []string{owner} }
	} else {
		w.extraArgs = func(owner string) []string { return []string{owner, "", "0"} }
	}
	return &ReadWriteLock{read: read, write: write}
}

// writerSuffix turns an owner into its writer field.
const writerSuffix = ":write"

// ReadLock returns the read lock.
func (rw *ReadWriteLock) ReadLock() *ReadLock { return rw.read }

// WriteLock returns the write lock.
func (rw *ReadWriteLock) WriteLock() *WriteLock { return rw.write }

var (
	_ Locker = (*ReadLock)(nil)
	_ Locker = (*WriteLock)(nil)
)

func (l *ReadLock) core() *reentrant {
	if l == nil {
		return nil
	}
	return &l.r
}

// Name returns the lock's name, which is its Redis key.
func (l *ReadLock) Name() string {
	if l == nil {
		return ""
	}
	return l.r.name
}

// Lock acquires the read lock for the owner of ctx, waiting while a writer holds the lock (or, with
// writer priority, waits for it) as long as ctx allows. The hold has no lease: the watchdog keeps it alive
// until the owner's final Unlock. Reentrant, and granted at once to the owner holding the write lock.
func (l *ReadLock) Lock(ctx context.Context) error {
	_, err := l.core().tryLock(ctx, "lock", -1, 0)
	return err
}

// LockWithLease is Lock with a lease: the read hold expires lease after it is acquired. lease must be
// positive (ErrInvalidDuration otherwise).
func (l *ReadLock) LockWithLease(ctx context.Context, lease time.Duration) error {
	if lease <= 0 {
		return l.core().fail(ctx, "lock", ErrInvalidDuration)
	}
	_, err := l.core().tryLock(ctx, "lock", -1, lease)
	return err
}

// TryLock tries to acquire the read lock, waiting up to wait (0: one attempt); lease as for
// RLock.TryLock. It reports false, with a nil error, when wait ran out.
func (l *ReadLock) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if wait < 0 || lease < 0 {
		return false, l.core().fail(ctx, "trylock", ErrInvalidDuration)
	}
	return l.core().tryLock(ctx, "trylock", wait, lease)
}

// Unlock releases one read hold of the owner of ctx. When the last holder of any kind leaves, the lock
// is deleted and its waiters are woken. A non-holder gets ErrNotHeld and changes nothing. Lost replies
// are handled as for RLock.Unlock.
func (l *ReadLock) Unlock(ctx context.Context) error { return l.core().unlock(ctx) }

// ForceUnlock deletes the whole read-write lock, whoever holds it in either mode, and wakes its waiters.
func (l *ReadLock) ForceUnlock(ctx context.Context) (bool, error) { return l.core().forceUnlock(ctx) }

// HoldContext returns a context, derived from ctx, that is cancelled when the owner's read hold ends:
// with context.Canceled at its final Unlock, with a cause matching ErrLockLost when it is lost.
func (l *ReadLock) HoldContext(ctx context.Context) (context.Context, error) {
	return l.core().holdContext(ctx)
}

// IsLocked reports whether the lock is held in read mode.
func (l *ReadLock) IsLocked(ctx context.Context) (bool, error) { return l.core().isLocked(ctx) }

// IsHeld reports whether the owner of ctx holds the read lock, asking Redis.
func (l *ReadLock) IsHeld(ctx context.Context) (bool, error) {
	n, err := l.core().holdCount(ctx, "isheld")
	return n > 0, err
}

// HoldCount returns how many times the owner of ctx holds the read lock, asking Redis.
func (l *ReadLock) HoldCount(ctx context.Context) (int, error) {
	return l.core().holdCount(ctx, "holdcount")
}

// RemainingTTL returns how long the lock's hash will live unless renewed or released.
func (l *ReadLock) RemainingTTL(ctx context.Context) (time.Duration, error) {
	return l.core().remainingTTL(ctx)
}

func (l *WriteLock) core() *reentrant {
	if l == nil {
		return nil
	}
	return &l.r
}

// Name returns the lock's name, which is its Redis key.
func (l *WriteLock) Name() string {
	if l == nil {
		return ""
	}
	return l.r.name
}

// Lock acquires the write lock for the owner of ctx, waiting until no one else holds the lock in either
// mode, as long as ctx allows. The hold has no lease: the watchdog keeps it alive until the owner's final
// Unlock. Reentrant. It fails at once with ErrUpgrade if the owner holds the read lock.
func (l *WriteLock) Lock(ctx context.Context) error {
	_, err := l.core().tryLock(ctx, "lock", -1, 0)
	return err
}

// LockWithLease is Lock with a lease: the write hold expires lease after it is acquired. lease must be
// positive (ErrInvalidDuration otherwise).
func (l *WriteLock) LockWithLease(ctx context.Context, lease time.Duration) error {
	if lease <= 0 {
		return l.core().fail(ctx, "lock", ErrInvalidDuration)
	}
	_, err := l.core().tryLock(ctx, "lock", -1, lease)
	return err
}

// TryLock tries to acquire the write lock, waiting up to wait (0: one attempt); lease as for
// RLock.TryLock. It reports false, with a nil error, when wait ran out, and fails at once with ErrUpgrade
// if the owner holds the read lock.
func (l *WriteLock) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if wait < 0 || lease < 0 {
		return false, l.core().fail(ctx, "trylock", ErrInvalidDuration)
	}
	return l.core().tryLock(ctx, "trylock", wait, lease)
}

// Unlock releases one write hold of the owner of ctx. The final one deletes the lock, or, if the owner
// also holds the read lock, turns it into a read lock (a downgrade); either way every waiting reader is
// woken. A non-holder gets ErrNotHeld and changes nothing. Lost replies are handled as for RLock.Unlock.
func (l *WriteLock) Unlock(ctx context.Context) error { return l.core().unlock(ctx) }

// ForceUnlock deletes the whole read-write lock, whoever holds it in either mode, and wakes its waiters.
func (l *WriteLock) ForceUnlock(ctx context.Context) (bool, error) { return l.core().forceUnlock(ctx) }

// HoldContext returns a context, derived from ctx, that is cancelled when the owner's write hold ends:
// with context.Canceled at its final Unlock, with a cause matching ErrLockLost when it is lost.
func (l *WriteLock) HoldContext(ctx context.Context) (context.Context, error) {
	return l.core().holdContext(ctx)
}

// FencingToken returns the fencing token of the owner's current write hold (see WithFencing).
func (l *WriteLock) FencingToken(ctx context.Context) (uint64, error) {
	return l.core().fencingToken(ctx)
}

// IsLocked reports whether the lock is held in write mode.
func (l *WriteLock) IsLocked(ctx context.Context) (bool, error) { return l.core().isLocked(ctx) }

// IsHeld reports whether the owner of ctx holds the write lock, asking Redis.
func (l *WriteLock) IsHeld(ctx context.Context) (bool, error) {
	n, err := l.core().holdCount(ctx, "isheld")
	return n > 0, err
}

// HoldCount returns how many times the owner of ctx holds the write lock, asking Redis.
func (l *WriteLock) HoldCount(ctx context.Context) (int, error) {
	return l.core().holdCount(ctx, "holdcount")
}

// RemainingTTL returns how long the lock's hash will live unless renewed or released.
func (l *WriteLock) RemainingTTL(ctx context.Context) (time.Duration, error) {
	return l.core().remainingTTL(ctx)
}
