package relock

import "slices"

// ReadWriteLock is a distributed read-write lock, Redisson's RReadWriteLock in its key layout: any number
// of owners may hold its read lock at once, or one owner its write lock, never both. Each of the two locks
// is reentrant per owner and behaves like an RLock (blocking and bounded waits, leases, the watchdog,
// HoldContext, tracing); the write lock can be fenced (WithFencing).
//
// The state is one hash at the lock's name: field "mode" ("read" or "write"), a field per reader
// "<owner>" with its read count, and the writer's field "<owner>:write" with its write count. Each read
// hold level n also has a key "<base>:<owner>:rwlock_timeout:<n>" (<base>: "{<name>}", or the name when it holds a "{") that expires on its own, and each
// Client renews only its own readers' keys: a reader whose Client dies stops counting within the watchdog
// timeout, even while other readers keep the lock alive (a Client that is closed releases its readers). Releases are announced on
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

// ReadLock is the shared half of a ReadWriteLock: an RLock whose holders share it (see ReadWriteLock). A
// reader whose own hold expired (its lease ran out, or its Client stopped renewing it) holds nothing, even
// while other readers keep the lock: IsHeld reports false, HoldCount 0, and Unlock ErrNotHeld. IsLocked
// reports whether the lock is held in read mode. It is never fenced.
type ReadLock = RLock

// WriteLock is the exclusive half of a ReadWriteLock: an RLock (see ReadWriteLock). IsLocked reports
// whether the lock is held in write mode. Lock and TryLock fail at once with ErrUpgrade when the owner
// holds the read lock. Its final Unlock either deletes the lock or, if the owner also holds the read lock,
// turns it into a read lock (a downgrade); either way every waiting reader is woken.
type WriteLock = RLock

// WithWriterPriority makes writers that wait for a ReadWriteLock's write lock hold back new readers,
// so that a continuous stream of readers cannot starve them. It applies to writers made with it; readers
// honour it whatever options they were made with. A waiting writer's claim is kept alive by its Client's
// watchdog like a FairLock's queue entry, and dropped when it gets the lock, gives up, or its Client stops
// refreshing it for a watchdog timeout.
func WithWriterPriority() LockOption {
	return func(o *lockOptions) { o.writerPriority = true }
}

// ReadWriteLock returns the read-write lock called name. The name is the Redis key of the lock; a name
// that ErrInvalidName describes makes every method return it. A nil Client gives locks whose methods
// return ErrNilClient. WithFencing applies to the write lock; WithWriterPriority to writers.
func (c *Client) ReadWriteLock(name string, opts ...LockOption) *ReadWriteLock {
	o := buildOptions(opts)
	channel, writers := companion("redisson_rwlock", name), companion("relock_rwlock_writers", name)
	base := nameBase(name)
	// The acquisitions read the companions that tell another kind (lua/lib/kinds.lua).
	shared := rwKeys{base: base, baseArg: []string{base},
		lockKeys:    []string{name, writers, undoneKey(name), companion("redisson_lock_queue", name), companion("relock_election", name)},
		releaseKeys: []string{name, channel, companion("relock_rwlock_release", name), undoneKey(name), companion("relock_release_void", name)}}

	ro := o
	ro.fenced = false
	read := newLock(c, kindRead, name, ro, channel, &readSpec{rwKeys: shared})

	ws := &writeSpec{rwKeys: shared, acquireKeys: shared.lockKeys}
	if o.fenced {
		ws.acquireKeys = append(slices.Clip(shared.lockKeys), companion("redisson_lock_token", name))
	}
	if o.writerPriority {
		ws.q = &waitQueue{c: c, entries: writers, leave: scriptRWWriteLeave, message: readUnlockMessage,
			leaveKeys: []string{writers, channel}, refresh: renewal{script: scriptQueueRefresh, keys: []string{writers}}}
		if c != nil {
			ws.aliveTTL = c.watchdogTimeoutArg
		}
	}
	return &ReadWriteLock{read: read, write: newLock(c, kindWrite, name, o, channel, ws)}
}

// ReadLock returns the read lock.
func (rw *ReadWriteLock) ReadLock() *ReadLock { return rw.read }

// WriteLock returns the write lock.
func (rw *ReadWriteLock) WriteLock() *WriteLock { return rw.write }

// writerSuffix turns an owner into its writer field.
const writerSuffix = ":write"

// rwKeys are what both halves of a read-write lock address: lua/rw_*.lua.
type rwKeys struct {
	base        string   // starts the read-hold keys: "{<name>}", or the name when it holds a "{"
	baseArg     []string // base, as the last arg of a reader's renewal
	lockKeys    []string // the lock, the waiting priority writers, the undone marks, other kinds' companions
	releaseKeys []string // the lock, the channel, the release records, the undone attempts' marks, the void marks
}

func (k *rwKeys) release(sc *script, r releaseCall, args []string) scriptCall {
	return scriptCall{script: sc, keys: k.releaseKeys,
		args: append(args, r.field, readUnlockMessage, r.expected, r.request, r.publish, k.base, voidMarkTTLArg)}
}

func (k *rwKeys) forceRelease(publish string) scriptCall {
	return scriptCall{script: scriptRWForceRelease, keys: k.releaseKeys, args: []string{readUnlockMessage, publish, k.base}}
}

func (k *rwKeys) waitChannel(string) string { return k.releaseKeys[1] }

// readSpec is the read lock's kind.
type readSpec struct{ rwKeys }

func (s *readSpec) field(owner string) string { return owner }
func (s *readSpec) queue() *waitQueue         { return nil }
func (s *readSpec) release(r releaseCall, args []string) scriptCall {
	return s.rwKeys.release(scriptRWReadRelease, r, args)
}
func (s *readSpec) acquire(a acquireCall, args []string) scriptCall {
	return scriptCall{script: scriptRWReadAcquire, keys: s.lockKeys, args: append(args, a.ttl, a.field, a.field+writerSuffix, s.base, a.attempt)}
}

func (s *readSpec) renewal(field string) renewal {
	return renewal{script: scriptRWReadRenew, keys: s.lockKeys[:1], field: field, args: s.baseArg}
}

// read: a reader's field may outlive its hold (its levels expired while others read).
func (s *readSpec) read(field string) scriptCall {
	return lockRead(s.lockKeys[:1], "read", field, s.base)
}

// writeSpec is the write lock's kind.
type writeSpec struct {
	rwKeys
	acquireKeys []string   // lockKeys, and the fencing counter if fenced
	q           *waitQueue // the waiting priority writers (WithWriterPriority), or nil
	aliveTTL    string     // with priority, how long a waiting writer's claim lives unrefreshed, ms; else ""
}

func (s *writeSpec) field(owner string) string { return owner + writerSuffix }
func (s *writeSpec) queue() *waitQueue         { return s.q }
func (s *writeSpec) read(field string) scriptCall {
	return lockRead(s.lockKeys[:1], "write", field, "")
}
func (s *writeSpec) release(r releaseCall, args []string) scriptCall {
	return s.rwKeys.release(scriptRWWriteRelease, r, args)
}
func (s *writeSpec) renewal(field string) renewal {
	return renewal{script: scriptRenew, keys: s.lockKeys[:1], field: field}
}

func (s *writeSpec) acquire(a acquireCall, args []string) scriptCall {
	return scriptCall{script: scriptRWWriteAcquire, keys: s.acquireKeys,
		args: append(args, a.ttl, a.field, a.owner, s.aliveTTL, joinFlag(a.join), s.base, a.attempt)}
}
