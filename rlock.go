package relock

// Lock returns the reentrant lock called name, Redisson's RLock: a Redis hash at the lock's name whose one
// field is the owner ("<clientUUID>:<token>", see WithOwner) and whose value is the owner's hold count.
// The owner's last Unlock deletes the key and wakes one waiter: a relock waiter by name, on its Client's
// channel "relock_lock_wake:{<name>}:<clientUUID>" (relock's waiting owners are kept in
// "relock_lock_waiters:{<name>}"), and Redisson's waiters with Redisson's release message on
// "redisson_lock__channel:{<name>}", which a Redisson client's release publishes alone and which then
// wakes one waiter per relock Client. Waiters are not ordered: whoever tries first after a release gets
// the lock (see FairLock for first come, first served).
//
// A Client queues its own waiters of the lock locally, first come, first served, and only the first of
// them asks Redis: goroutines of one process that take a busy lock in turn do not each pay round trips to
// learn they must wait. When one of the Client's owners releases the lock while another of its owners
// waits, the release hands the lock to it in the same round trip (a new holder: a first hold, with a new
// fencing token when fenced). A Client does so at most 8 times in a row, then releases the lock letting
// the other Clients' waiters, and Redisson's, go first (see docs/redisson.md, "Handoffs within a Client").
//
// The name is the Redis key of the lock; a name that ErrInvalidName describes makes every method return
// it. A nil Client gives a lock whose methods return ErrNilClient.
func (c *Client) Lock(name string, opts ...LockOption) *RLock {
	o := buildOptions(opts)
	var k [10]string
	companions(k[:], name, "redisson_lock__channel", "relock_undone", "relock_release", "redisson_lock_token",
		"redisson_lock_queue", "relock_rwlock_writers", "relock_election", "relock_lock_waiters", "relock_lock_wake",
		"relock_release_void")
	channel, undone, release, token, waiters, wakes, voids := k[0], k[1], k[2], k[3], k[7], k[8], k[9]
	made := &struct { // the lock, its spec, its waiters and its scripts' keys in one allocation
		l    RLock
		s    rlockSpec
		q    waitQueue
		keys [18]string
	}{keys: [18]string{name, undone, k[4], k[5], k[6], waiters, token, // the acquisition reads the companions that tell another kind (lua/lib/kinds.lua)
		name, channel, release, undone, waiters, wakes, voids,
		name, waiters, channel, wakes}}
	keys := made.keys[:]
	made.s = rlockSpec{name: name, channel: channel, acquireKeys: keys[0:6:6], releaseKeys: keys[7:14:14]}
	if o.fenced {
		made.s.acquireKeys = keys[0:7:7]
	}
	made.q = waitQueue{c: c, entries: waiters, leave: scriptRLockLeave, leaveKeys: keys[14:18:18],
		leaveArgs: rlockLeaveArgs, message: unlockMessage, lazy: true, wakes: wakes,
		refresh: renewal{script: scriptQueueRefresh, keys: keys[5:6:6]}}
	made.s.q = &made.q
	if c != nil {
		made.s.aliveTTL = c.watchdogTimeoutArg
	}
	made.l = makeLock(c, kindRLock, name, o, channel, &made.s)
	return &made.l
}

// rlockLeaveArgs are lua/rlock_leave.lua's arguments after the first three, the same for every lock (never
// written: shared, so that making a lock costs no allocation for them).
var rlockLeaveArgs = []string{namedMessage}

// rlockSpec is the reentrant lock's kind: lua/rlock_*.lua. Its waiting owners are kept in Redis
// (lua/lib/waiters.lua) so that a release wakes one of them by name, on its Client's own channel.
type rlockSpec struct {
	name, channel string
	acquireKeys   []string // the lock, the undone marks, other kinds' companions, the waiting owners, the fencing counter if fenced
	releaseKeys   []string // the lock, the channel, the release record, the undone attempts' marks, the waiting owners, the wakes prefix, the void marks
	aliveTTL      string   // how long a waiting owner stays alive unrefreshed: the watchdog timeout, ms
	q             *waitQueue
}

func (s *rlockSpec) field(owner string) string    { return owner }
func (s *rlockSpec) waitChannel(string) string    { return s.channel }
func (s *rlockSpec) queue() *waitQueue            { return s.q }
func (s *rlockSpec) read(field string) scriptCall { return lockRead(s.acquireKeys[:1], "", field, "") }
func (s *rlockSpec) renewal(field string) renewal {
	return renewal{script: scriptRenew, keys: s.acquireKeys[:1], field: field}
}
func (s *rlockSpec) acquire(a acquireCall, args []string) scriptCall {
	return scriptCall{script: scriptAcquire, keys: s.acquireKeys, args: append(args, a.ttl, a.field, a.attempt, joinFlag(a.join), s.aliveTTL)}
}

func (s *rlockSpec) release(r releaseCall, args []string) scriptCall {
	return scriptCall{script: scriptRelease, keys: s.releaseKeys,
		args: append(args, r.field, unlockMessage, r.expected, r.request, r.publish, namedMessage, voidMarkTTLArg)}
}

// handoff is a release that, at the owner's last hold, hands the lock to the owner field next
// (lua/rlock_handoff.lua); counter is the fencing token counter when next's lock is fenced, else "".
// next == "" makes it a release that lets the Client's (client's) waiters go after the others'.
func (s *rlockSpec) handoff(r releaseCall, next, attempt, ttl, counter, client string) scriptCall {
	keys := s.releaseKeys
	if counter != "" {
		keys = append(keys[:len(keys):len(keys)], counter)
	}
	return scriptCall{script: scriptHandoff, keys: keys,
		args: []string{r.field, unlockMessage, r.expected, r.request, r.publish, namedMessage, next, attempt, ttl, client, voidMarkTTLArg}}
}

// counter is the fencing token counter's key when the lock is fenced, else "".
func (s *rlockSpec) counter() string {
	if len(s.acquireKeys) > 6 {
		return s.acquireKeys[6]
	}
	return ""
}

func (s *rlockSpec) forceRelease(publish string) scriptCall {
	return scriptCall{script: scriptForceRelease, keys: s.releaseKeys, args: []string{unlockMessage, publish, namedMessage}}
}
