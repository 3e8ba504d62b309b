package relock

import (
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
// closed removes its waiters' entries (see Client.Close); a dead process's expire as told above.
//
// Its lock is a Lock's hash: a FairLock and a Lock on one name exclude each other, and Redis tells them
// apart only while waiters are queued, when a Lock's acquisition fails with ErrWrongKind (it would take the
// lock ahead of them, and its release would not wake them). A waiter behind a plain Lock's holder is not
// woken by its release: it tries again within watchdog timeout/3. Use one kind per name.
//
// Everything else (reentrancy, leases, the watchdog, HoldContext, fencing, one script per attempt and per
// Unlock) is as for every RLock. When no owner holds or waits for the lock, none of its keys is left in Redis
// (the fencing counter excepted; and the alive set, for a watchdog timeout at most, when a Redisson client
// dropped a dead relock waiter).
type FairLock = RLock

// defaultFairLockWaitTimeout is Redisson's default Config.fairLockWaitTimeout, the FairLockWaitTimeout a
// zero in Options stands for.
const defaultFairLockWaitTimeout = 5 * time.Minute

// FairLock returns the fair lock called name (see FairLock). The name is the Redis key of the lock; a name
// that ErrInvalidName describes makes every method return it. A nil Client gives a lock whose methods
// return ErrNilClient.
func (c *Client) FairLock(name string, opts ...LockOption) *FairLock {
	return c.fairLock(name, buildOptions(opts), false)
}

// fairLock returns the fair lock called name; an Election's (election) may take a name whose stream of
// leaders exists, which a FairLock refuses as an Election's.
func (c *Client) fairLock(name string, o lockOptions, election bool) *FairLock {
	channel := companion("redisson_lock__channel", name)
	alive := companion("relock_lock_alive", name)
	// Every queue script's keys: the lock, the queue, Redisson's scores, relock's liveness, the channel.
	keys := []string{name, companion("redisson_lock_queue", name), companion("redisson_lock_timeout", name), alive, channel}
	// The acquisition reads the companions that tell another kind (lua/lib/kinds.lua).
	// The scripts that shift Redisson's scores use a scratch set, which lives only within their run.
	scratch := companion("relock_lock_shift", name)
	s := &fairSpec{channel: channel,
		acquireKeys: append(slices.Clip(keys), undoneKey(name), companion("relock_rwlock_writers", name),
			companion("relock_election", name), scratch),
		releaseKeys: append(slices.Clip(keys), companion("relock_release", name), undoneKey(name), companion("relock_release_void", name))}
	if election {
		s.election = "1"
	}
	if o.fenced {
		s.acquireKeys = append(s.acquireKeys, companion("redisson_lock_token", name))
	}
	s.q = &waitQueue{c: c, entries: alive, leave: scriptFairLeave, leaveKeys: append(slices.Clip(keys), scratch), message: unlockMessage,
		refresh: renewal{script: scriptFairRefresh, keys: keys}, publishes: true, freeWakes: true, outlives: true}
	if c != nil {
		s.aliveTTL, s.wait = c.watchdogTimeoutArg, c.fairLockWaitArg
		s.q.leaveArgs = []string{c.fairLockWaitArg}
		s.q.refresh.args = []string{c.fairLockWaitArg, unlockMessage}
		s.q.maxSleep = c.watchdogTimeout / 3
	}
	return newLock(c, kindFair, name, o, channel, s)
}

// fairSpec is the fair lock's kind: lua/fair_*.lua. Waiters are woken one by one, each on its own
// channel; their queue (waitQueue) is kept alive by the watchdog.
type fairSpec struct {
	channel     string
	acquireKeys []string // the queue scripts' keys, the undone marks, other kinds' companions, the scratch set, the fencing counter if fenced
	releaseKeys []string // the queue scripts' keys, the release record, the undone attempts' marks, the void marks
	aliveTTL    string   // how long a waiter stays alive unrefreshed: the watchdog timeout, ms
	wait        string   // Redisson's fair lock wait time, ms
	election    string   // "1" for an Election's lock: the stream of leaders is its own, and each owner holds it once at most
	q           *waitQueue
}

func (s *fairSpec) field(owner string) string       { return owner }
func (s *fairSpec) waitChannel(field string) string { return s.channel + ":" + field }
func (s *fairSpec) queue() *waitQueue               { return s.q }
func (s *fairSpec) read(field string) scriptCall    { return lockRead(s.acquireKeys[:1], "", field, "") }
func (s *fairSpec) renewal(field string) renewal {
	return renewal{script: scriptRenew, keys: s.acquireKeys[:1], field: field}
}

func (s *fairSpec) acquire(a acquireCall, args []string) scriptCall {
	return scriptCall{script: scriptFairAcquire, keys: s.acquireKeys,
		args: append(args, a.ttl, a.field, s.aliveTTL, joinFlag(a.join), s.wait, unlockMessage, a.publish, a.attempt, s.election)}
}

func (s *fairSpec) release(r releaseCall, args []string) scriptCall {
	return scriptCall{script: scriptFairRelease, keys: s.releaseKeys,
		args: append(args, r.field, unlockMessage, r.expected, r.request, r.publish, voidMarkTTLArg)}
}

func (s *fairSpec) forceRelease(publish string) scriptCall {
	return scriptCall{script: scriptFairForceRelease, keys: s.releaseKeys, args: []string{unlockMessage, publish}}
}

// joinFlag is how queue scripts are told whether an attempt may join the queue.
func joinFlag(join bool) string {
	if join {
		return "1"
	}
	return "0"
}
