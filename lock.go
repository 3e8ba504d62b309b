package relock

import (
	"context"
	"time"
)

// RLock is a lock of any of relock's kinds, as in Redisson, where every lock is an RLock: the reentrant
// lock of Client.Lock, the fair lock of Client.FairLock (FairLock), and the two halves of a
// ReadWriteLock (ReadLock, WriteLock). They share this method set; what differs between them is told by
// their constructors and type names.
//
// A lock is held by owners ("<clientUUID>:<token>", see WithOwner). The owner that holds a lock may acquire
// it again (the hold count goes up) and must unlock it as many times as it acquired it; only the owner may
// unlock. A hold acquired with a lease lives for the lease; one acquired without a lease is kept alive by
// the Client's watchdog until the owner's final Unlock, and expires within the watchdog timeout if its
// holder stops (crash, partition). Client.Close releases every hold its Client has. A hold that ends any
// other way than by its owner's Unlock or its Client's Close is lost: the owner's HoldContext is cancelled
// with a cause matching ErrLockLost, and its Unlock returns ErrNotHeld.
//
// Every acquisition attempt and every Unlock is one round trip: one Lua script. A lock is a small value;
// making one costs nothing in Redis, and any number may exist for the same name. A nil *RLock, or one made
// from a nil Client, returns ErrNilClient from every method.
type RLock struct {
	c       *Client
	name    string
	kind    lockKind
	spec    spec
	fenced  bool
	ack     replicaAck
	maxHold time.Duration // WithMaxHold's: 0 none
	channel string        // where the lock's releases are announced
}

// Lockable is the method set every lock type shares (*RLock, and so *FairLock, *ReadLock and *WriteLock):
// write code against it to accept any of them, or a fake in tests. MultiLock and RedLock take their parts
// as Lockables; the parts must be relock's own locks.
type Lockable interface {
	Locker
	LockWithLease(ctx context.Context, lease time.Duration) error
	TryLock(ctx context.Context, wait, lease time.Duration) (bool, error)
	ForceUnlock(ctx context.Context) (bool, error)
	FencingToken(ctx context.Context) (uint64, error)
	IsLocked(ctx context.Context) (bool, error)
	IsHeld(ctx context.Context) (bool, error)
	HoldCount(ctx context.Context) (int, error)
	RemainingTTL(ctx context.Context) (time.Duration, error)
	Name() string
}

var _ Lockable = (*RLock)(nil)

// Name returns the lock's name, which is its Redis key.
func (l *RLock) Name() string {
	if l == nil {
		return ""
	}
	return l.name
}

// Lock acquires the lock for the owner of ctx, waiting as long as ctx allows. The hold has no lease: the
// watchdog keeps it alive until the owner's final Unlock. If the owner holds the lock already, Lock
// increments the hold count and returns at once. When ctx ends first, Lock returns an error that wraps
// ctx.Err(), and the owner does not hold the lock (a fair lock's waiter has left the queue).
func (l *RLock) Lock(ctx context.Context) error {
	_, err := l.tryLock(ctx, "lock", -1, 0)
	return err
}

// LockWithLease is Lock with a lease: the hold expires lease after it is acquired, unless unlocked
// before, and the watchdog does not renew it (it checks that Redis still has it, so its loss is told to
// HoldContext as early as a renewed hold's). lease must be positive (ErrInvalidDuration otherwise); it is
// rounded up to whole milliseconds. A reentrant acquisition never shortens the current hold: it lasts at
// least lease from now.
func (l *RLock) LockWithLease(ctx context.Context, lease time.Duration) error {
	if lease <= 0 {
		return l.fail(ctx, "lock", ErrInvalidDuration)
	}
	_, err := l.tryLock(ctx, "lock", -1, lease)
	return err
}

// TryLock tries to acquire the lock for the owner of ctx, waiting up to wait for it. wait == 0 makes a
// single attempt (which never joins a fair lock's queue). lease > 0 makes the hold expire lease after it
// is acquired; lease == 0 gives a hold the watchdog keeps alive until the final Unlock. Negative durations
// return ErrInvalidDuration. The durations come in the package's order: wait, then lease.
//
// TryLock reports true when the owner holds the lock (or held it already: the hold count went up), and
// false, with a nil error, when wait ran out. When ctx ends first, it returns false and an error wrapping
// ctx.Err().
func (l *RLock) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if wait < 0 || lease < 0 {
		return false, l.fail(ctx, "trylock", ErrInvalidDuration)
	}
	return l.tryLock(ctx, "trylock", wait, lease)
}

// Unlock releases one hold of the owner of ctx. When the hold count reaches zero the lock is released,
// renewal stops, the owner's HoldContext is cancelled (context.Canceled), and waiters are woken as the
// lock's kind wakes them. If the owner does not hold the lock, Unlock returns ErrNotHeld and changes
// nothing.
//
// Unlock always releases, whatever its ctx: `defer l.Unlock(ctx)` is safe after a request's ctx ended.
// When ctx has ended before the release could be sent, or ends while it is in flight, Unlock returns at once
// with an error matching ctx.Err(), and the release goes on in the background, on the Client's lifetime:
// it is sent, and sent again, until Redis answers (a server loading its data, or a cluster failing over,
// which answers LOADING or TRYAGAIN without running it, is asked again) or the hold would have expired. If
// it is the owner's last hold, renewal stops at once and the owner's HoldContext is cancelled
// (context.Canceled) before Unlock returns. The owner's next operation on this lock waits for that
// release. To learn the release's own outcome (ErrNotHeld, a Redis error), pass a ctx that has not ended,
// such as context.WithoutCancel(ctx), which keeps the owner it carries.
//
// When a release's reply is lost (the connection breaks while it is in flight), Unlock sends the same
// request again, up to three times while ctx allows, then in the background as above; the request is
// applied once, whatever the order its sendings reach Redis in: one held up on the way that arrives after
// a repeat, within two seconds of it, changes nothing, even when the owner holds the lock again by then.
// If a repeat finds that the owner holds nothing, Unlock returns ErrNotHeld: the lost request released the
// last hold, or the hold had been lost before; either way the lock is not the owner's any more.
func (l *RLock) Unlock(ctx context.Context) error { return l.unlock(ctx) }

// ForceUnlock releases the lock whoever holds it, however many times, and wakes its waiters. It reports
// whether there was a lock to release. It is meant for operators and recovery code: the owner learns of it
// from its HoldContext (cancelled with ErrLockLost within milliseconds where its Client watches its holds,
// see Options.NoHoldWatch, else within a third of the watchdog timeout), or from Unlock, which returns
// ErrNotHeld.
func (l *RLock) ForceUnlock(ctx context.Context) (bool, error) {
	if err := l.check(ctx); err != nil {
		return false, l.fail(ctx, "forceunlock", err)
	}
	ctx, span := l.c.tel.startSpan(ctx, "relock.force_unlock", l.kind, l.name)
	pub, err := l.c.publishCommand(ctx, l.channel)
	var n int64
	if err == nil {
		sc := l.spec.forceRelease(pub)
		n, err = l.c.run(ctx, sc.script, sc.keys, sc.args).AsInt64()
	}
	if err != nil {
		endSpan(span, outcomeError, err)
		return false, l.fail(ctx, "forceunlock", err)
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
// Client's watch of its holds saw its key change (see Options.NoHoldWatch) or the watchdog came to renew
// or check it, the watchdog could not renew it before it expired, or its lease ran
// out. When the Client is closed, it is cancelled, as Close begins, with a cause matching ErrClosed and
// context.Canceled (Close releases the hold). It is cancelled too when ctx is. Work that must stop when the
// lock is no longer held should run under it.
//
// HoldContext answers from what the Client knows, without a round trip: it returns ErrNotHeld when the
// owner has no hold that this Client acquired and has not seen end. It costs O(1): calling it again with
// the same ctx returns the same context (or, for a ctx that never ends, a small value), and nothing it
// makes outlives the hold or ctx.
func (l *RLock) HoldContext(ctx context.Context) (context.Context, error) {
	field, err := l.prepareField(ctx)
	if err != nil {
		return nil, l.fail(ctx, "holdcontext", err)
	}
	hctx, err := l.c.holds.holdContext(ctx, holdKey{key: l.name, field: field})
	if err != nil {
		return nil, l.fail(ctx, "holdcontext", l.notHeld(field))
	}
	return hctx, nil
}

// FencingToken returns the fencing token of the current hold of ctx's owner: the value the lock's counter
// took at the owner's first acquisition, greater than that of every earlier holder. It answers from what
// the Client knows, without a round trip. It returns ErrNotFenced if the lock was made without
// WithFencing (a read lock never is), and ErrNotHeld if the owner does not hold the lock.
func (l *RLock) FencingToken(ctx context.Context) (uint64, error) {
	field, err := l.prepareField(ctx)
	if err != nil {
		return 0, l.fail(ctx, "fencingtoken", err)
	}
	if !l.fenced {
		return 0, l.fail(ctx, "fencingtoken", ErrNotFenced)
	}
	token, ok := l.c.holds.token(holdKey{key: l.name, field: field})
	if !ok {
		return 0, l.fail(ctx, "fencingtoken", l.notHeld(field))
	}
	return token, nil
}

// IsLocked reports whether any owner holds the lock (a read or write lock: in its mode).
func (l *RLock) IsLocked(ctx context.Context) (bool, error) {
	if err := l.check(ctx); err != nil {
		return false, l.fail(ctx, "islocked", err)
	}
	r, err := l.read(ctx, "")
	if err != nil {
		return false, l.fail(ctx, "islocked", err)
	}
	return r[0] == 1, nil
}

// read runs the lock's read (lua/lock_read.lua) for the owner field ("": none), and returns its reply:
// {locked, count, pttl}.
func (l *RLock) read(ctx context.Context, field string) ([3]int64, error) {
	sc := l.spec.read(field)
	r, err := acquireReply(l.c.run(ctx, sc.script, sc.keys, sc.args))
	return [3]int64(r[:3]), err
}

// IsHeld reports whether the owner of ctx holds the lock, asking Redis. The owner is decided by the one
// rule of WithOwner: the token ctx carries, else the calling goroutine. So IsHeld reports false for a lock
// that another goroutine of this Client holds (unless both use the same WithOwner token), as Unlock would
// refuse to release it.
func (l *RLock) IsHeld(ctx context.Context) (bool, error) {
	n, err := l.holdCount(ctx, "isheld")
	return n > 0, err
}

// HoldCount returns how many times the owner of ctx holds the lock, asking Redis: 0 when it does not
// hold it.
func (l *RLock) HoldCount(ctx context.Context) (int, error) { return l.holdCount(ctx, "holdcount") }

// RemainingTTL returns how long the lock's key will live unless renewed or released: 0 when nobody holds
// the lock, and NoExpiry when the key exists without a time to live (written by something other than
// relock or Redisson).
func (l *RLock) RemainingTTL(ctx context.Context) (time.Duration, error) {
	if err := l.check(ctx); err != nil {
		return 0, l.fail(ctx, "remainingttl", err)
	}
	r, err := l.read(ctx, "")
	if err != nil {
		return 0, l.fail(ctx, "remainingttl", err)
	}
	return pttlToDuration(r[2]), nil
}

func pttlToDuration(ms int64) time.Duration {
	switch {
	case ms == -1:
		return NoExpiry
	case ms < 0:
		return 0
	}
	return durationMillis(ms)
}

func (l *RLock) holdCount(ctx context.Context, op string) (int, error) {
	field, err := l.prepareField(ctx)
	if err != nil {
		return 0, l.fail(ctx, op, err)
	}
	k := holdKey{key: l.name, field: field}
	h := l.c.holds.record(k)
	r, err := l.read(ctx, field)
	if err != nil {
		return 0, l.fail(ctx, op, err)
	}
	if r[1] == 0 && h != nil {
		// Its Client believes the owner holds the lock, and Redis says it does not: its HoldContext ends
		// now, not when the watch or the watchdog would tell.
		l.c.holds.readGone(k, h)
	}
	return int(r[1]), nil
}

// NoExpiry is what RemainingTTL returns for a lock key that exists but has no time to live.
const NoExpiry time.Duration = -1

// LockOption configures a lock made by Client.Lock, Client.FairLock or Client.ReadWriteLock.
type LockOption func(*lockOptions)

type lockOptions struct {
	fenced         bool
	writerPriority bool
	ack            replicaAck
	maxHold        time.Duration
}

// replicaAck is WithReplicaAck's setting: replicas is 0 when it is off.
type replicaAck struct {
	replicas int64
	timeout  time.Duration
}

func buildOptions(opts []LockOption) lockOptions {
	if len(opts) == 0 {
		return lockOptions{} // before o, which an option's pointer makes the heap's
	}
	var o lockOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithReplicaAck makes every acquisition wait, in the same round trip, until at least replicas replicas of
// the lock's master have it (WAIT), for up to timeout; one that is not acknowledged in time is rolled back
// and fails with ErrReplicaAck. Redis replicates asynchronously: without it, a master that fails right
// after an acquisition may leave a replica, promoted in its place, without the hold, and another owner may
// take the lock (the first holder learns of it from its HoldContext at the next renewal). With it, a
// failover keeps every hold that was granted, at the cost of the replicas' round trip on each acquisition.
// It has no effect on a server without replicas other than failing every acquisition: use it only with
// replicas. replicas < 1 or timeout <= 0 leave it off.
func WithReplicaAck(replicas int, timeout time.Duration) LockOption {
	return func(o *lockOptions) {
		if replicas > 0 && timeout > 0 {
			o.ack = replicaAck{replicas: int64(replicas), timeout: timeout}
		}
	}
}

// WithMaxHold gives every hold acquired through the lock a budget: it lives at most d from its first
// acquisition, whatever the watchdog, a lease or Extend would do. The Client ends it d after it sent the
// first acquisition, on its own clock: its HoldContext is cancelled with a cause matching
// ErrMaxHoldReached (and ErrLockLost), renewal stops, and the Client releases it in Redis, waking its
// waiters at once, as Close gives a hold up. The owner's Unlock then returns ErrNotHeld. A reentrant
// acquisition keeps the first one's budget (or a shorter one of its own). Each budget reached counts in
// the relock.max_hold_reached metric.
//
// Redis drops the hold d after it granted the first acquisition, on Redis's clock (to the millisecond),
// even if its Client is cut off: no later acquisition, renewal or Extend gives it a time to live past
// that point, however late it reaches Redis, and a reentrant acquisition that reaches Redis after it
// fails with ErrMaxHoldReached. So Redis drops the hold no earlier than its Client ends it, and later by
// the time the first acquisition took to reach Redis.
//
// d == 0 sets no budget; d < 0 makes every acquisition through the lock fail with ErrInvalidDuration.
func WithMaxHold(d time.Duration) LockOption {
	return func(o *lockOptions) { o.maxHold = d }
}

// WithFencing makes the lock fenced: each acquisition by a new owner takes the next value of a 64-bit
// counter kept in Redis with the lock ("redisson_lock_token:{<name>}", as Redisson's RFencedLock), in the
// same script and round trip; a reentrant acquisition keeps the owner's token. FencingToken returns it.
// It applies to every kind but the read lock.
//
// A lease or a watchdog cannot stop a holder that was paused (GC, SIGSTOP, a stalled VM) from acting
// after its hold expired and another owner got the lock. Fencing can: pass the token with every write to
// the resource the lock protects, and have the resource reject a write whose token is lower than the
// highest it has accepted. The counter never expires, so tokens keep increasing across the lock key's
// expiries; it must not be evicted (use the noeviction maxmemory policy: a volatile-* policy spares the
// counter but may evict the lock itself), and every user of the lock name must use fencing.
func WithFencing() LockOption {
	return func(o *lockOptions) { o.fenced = true }
}
