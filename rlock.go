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
	s := &rlockSpec{name: name, channel: companion("redisson_lock__channel", name)}
	s.acquireKeys = []string{name, undoneKey(name)}
	if o.fenced {
		s.acquireKeys = append(s.acquireKeys, companion("redisson_lock_token", name))
	}
	s.releaseKeys = []string{name, s.channel, companion("relock_release", name), undoneKey(name)}
	return newLock(c, kindRLock, name, o, s.channel, s)
}

// rlockSpec is the reentrant lock's kind: lua/rlock_*.lua.
type rlockSpec struct {
	name, channel string
	acquireKeys   []string // the lock, and the fencing counter if fenced
	releaseKeys   []string // the lock, the channel, the release record, the undone attempts' marks
}

func (s *rlockSpec) field(owner string) string    { return owner }
func (s *rlockSpec) waitChannel(string) string    { return s.channel }
func (s *rlockSpec) countCall(string) *scriptCall { return nil }
func (s *rlockSpec) mode() string                 { return "" }
func (s *rlockSpec) queue() *waitQueue            { return nil }
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
