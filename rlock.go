package relock

// Lock returns the reentrant lock called name, Redisson's RLock: a Redis hash at the lock's name whose one
// field is the owner ("<clientUUID>:<token>", see WithOwner) and whose value is the owner's hold count.
// The owner's last Unlock deletes the key and publishes a release message on
// "redisson_lock__channel:{<name>}", which wakes one waiter per Client. Waiters are not ordered: whoever
// tries first after a release gets the lock (see FairLock for first come, first served).
//
// The name is the Redis key of the lock; a name that ErrInvalidName describes makes every method return
// it. A nil Client gives a lock whose methods return ErrNilClient.
func (c *Client) Lock(name string, opts ...LockOption) *RLock {
	o := buildOptions(opts)
	k := companions(name, "redisson_lock__channel", "relock_undone", "relock_release", "redisson_lock_token",
		"redisson_lock_queue", "relock_rwlock_writers", "relock_election")
	channel, undone, release, token := k[0], k[1], k[2], k[3]
	// The acquisition reads the companions that tell another kind (lua/lib/kinds.lua).
	keys := []string{name, undone, k[4], k[5], k[6], token, name, channel, release, undone}
	made := &struct { // the lock and its spec in one allocation
		l RLock
		s rlockSpec
	}{s: rlockSpec{name: name, channel: channel, acquireKeys: keys[0:5:5], releaseKeys: keys[6:10:10]}}
	if o.fenced {
		made.s.acquireKeys = keys[0:6:6]
	}
	made.l = makeLock(c, kindRLock, name, o, channel, &made.s)
	return &made.l
}

// rlockSpec is the reentrant lock's kind: lua/rlock_*.lua.
type rlockSpec struct {
	name, channel string
	acquireKeys   []string // the lock, the undone marks, other kinds' companions, the fencing counter if fenced
	releaseKeys   []string // the lock, the channel, the release record, the undone attempts' marks
}

func (s *rlockSpec) field(owner string) string    { return owner }
func (s *rlockSpec) waitChannel(string) string    { return s.channel }
func (s *rlockSpec) queue() *waitQueue            { return nil }
func (s *rlockSpec) read(field string) scriptCall { return lockRead(s.acquireKeys[:1], "", field, "") }
func (s *rlockSpec) renewal(field string) renewal {
	return renewal{script: scriptRenew, keys: s.acquireKeys[:1], field: field}
}
func (s *rlockSpec) acquire(a acquireCall) scriptCall {
	return scriptCall{script: scriptAcquire, keys: s.acquireKeys, args: []string{a.ttl, a.field, a.attempt}}
}

func (s *rlockSpec) release(r releaseCall) scriptCall {
	return scriptCall{script: scriptRelease, keys: s.releaseKeys,
		args: []string{r.field, unlockMessage, r.expected, r.request, r.publish}}
}

func (s *rlockSpec) forceRelease(publish string) scriptCall {
	return scriptCall{script: scriptForceRelease, keys: s.releaseKeys, args: []string{unlockMessage, publish}}
}
