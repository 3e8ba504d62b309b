package relock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"
)

// ErrNotALock means a lock's call found, at the lock's name, a key that no relock (or Redisson) lock
// writes: a key of another type (a Semaphore's or CountDownLatch's counter is a string), or, for Inspect,
// a hash whose fields are not owners with hold counts. Every operation of a Lock, FairLock, ReadWriteLock
// or Election returns it (acquisitions, releases, ForceUnlock, reads; and the watchdog counts such a
// hold as lost) as a *KindError, which matches ErrWrongKind too and says what the key is; nothing is
// changed in Redis.
var ErrNotALock = errors.New("relock: key is not a lock")

// LockKind is a kind of object relock keeps at a name: the kind of lock Inspect finds in Redis, or the
// kind a KindError found where the call expected another.
type LockKind string

// The kinds of lock Inspect tells apart. A FairLock with nobody queued has the same keys as an RLock, and
// Inspect reports it as KindRLock; what can be done to it (Unlock, ForceUnlock) is the same.
const (
	// KindNone: nothing of the lock is in Redis but, perhaps, its fencing counter. It is free.
	KindNone LockKind = ""
	// KindRLock: an RLock (or a FairLock with an empty queue; or an Election's lock, the same layout).
	KindRLock LockKind = "rlock"
	// KindFairLock: a FairLock with owners in its queue.
	KindFairLock LockKind = "fairlock"
	// KindReadWriteLock: a ReadWriteLock, held in read or write mode, or with priority writers waiting.
	KindReadWriteLock LockKind = "rwlock"
)

// The other kinds a KindError can report (Inspect reports none of them: it reads locks only).
const (
	// KindElection: an Election that recorded a leader (its stream "relock_election:{name}" exists).
	KindElection LockKind = "election"
	// KindSemaphore: a counter, an integer string at the name: a Semaphore's, a CountDownLatch's (Redis
	// cannot tell them apart), or a PermitSemaphore's with no permit taken.
	KindSemaphore LockKind = "semaphore"
	// KindPermitSemaphore: a PermitSemaphore with permits taken (its "{name}:timeout" exists).
	KindPermitSemaphore LockKind = "permitsemaphore"
	// KindOther: a key that none of relock's kinds writes (KindError.Type says what it is).
	KindOther LockKind = "other"
)

// inspectQueueLimit is the most queue entries Inspect returns; LockState.QueueLen counts them all.
const inspectQueueLimit = 1000

// LockState is a snapshot of a lock, read from Redis in one atomic step by Client.Inspect.
type LockState struct {
	// Name is the lock's name, its Redis key.
	Name string
	// Kind is the kind of lock found; KindNone when no key of the lock is left.
	Kind LockKind
	// Locked reports whether some owner holds the lock.
	Locked bool
	// Mode is "read" or "write" for a held ReadWriteLock, "" otherwise.
	Mode string
	// TTL is how long the lock key lives if nobody renews it: NoExpiry for a key without expiry, 0 when
	// the lock is not held. Holds kept by a watchdog are renewed every watchdog timeout/3.
	TTL time.Duration
	// Holders are the owners holding the lock: one for an RLock, a FairLock and a write lock, any number of
	// readers (and the writer, who may also read) for a ReadWriteLock. Sorted by owner.
	Holders []Holder
	// Queue lists the waiters in order: a FairLock's queue, or the priority writers of a ReadWriteLock
	// (WithWriterPriority), at most the first 1000.
	Queue []Waiter
	// QueueLen is the length of the whole queue.
	QueueLen int
	// FencingToken is the last fencing token issued for the lock (by an acquisition WithFencing), 0 if
	// none ever was. The current holder's token, when it was fenced.
	FencingToken uint64
}

// Holder is an owner holding a lock.
type Holder struct {
	// Owner is the owner's field in the lock hash: "<clientID>:<token>", with ":write" after it for the
	// write hold of a ReadWriteLock.
	Owner string
	// ClientID is the holding Client's ID (Client.ID), "" when the owner is not in relock's format.
	ClientID string
	// Token is the owner within its Client: a goroutine ID (decimal digits) or a WithOwner token.
	Token string
	// Count is the hold count: how many Unlocks the owner needs to release it.
	Count int
	// Mode is "read" or "write" for a ReadWriteLock's holder, "" otherwise.
	Mode string
	// TTL is how long this hold lives unless renewed: the lock's TTL, except for a reader, whose read holds
	// expire on their own (the longest of them).
	TTL time.Duration
}

// Waiter is an owner waiting in a lock's queue.
type Waiter struct {
	// Owner, ClientID and Token are as for Holder.
	Owner    string
	ClientID string
	Token    string
	// Expires is how long the entry stays alive unless its Client refreshes it (its watchdog does, every
	// watchdog timeout/3). Zero or less means its Client stopped refreshing it (the process died, or lost
	// Redis): the entry is dropped when it reaches the head of the queue. For a Redisson client's waiter in
	// a FairLock's queue, it is what is left of its Redisson score, by the same rule.
	Expires time.Duration
}

// GoroutineOwner reports whether the owner is a goroutine (rather than a WithOwner token).
func (h Holder) GoroutineOwner() bool { return isGoroutineToken(h.Token) }

func isGoroutineToken(t string) bool {
	if t == "" {
		return false
	}
	for i := 0; i < len(t); i++ {
		if t[i] < '0' || t[i] > '9' {
			return false
		}
	}
	return true
}

var scriptInspect = loadScript("inspect")

// Inspect reads the state of the lock called name from Redis: its kind, holders, TTL, queue and fencing
// token, in one atomic script that changes nothing. It works on every lock relock makes (RLock, FairLock,
// ReadWriteLock; a MultiLock's or RedLock's parts are RLocks, each on its own name and, for a RedLock,
// its own server), and on Redisson's locks of those kinds. A name with no key gives a LockState of
// KindNone, not an error; a key of another type, or a hash that is not a lock, gives ErrNotALock. A
// Semaphore's or CountDownLatch's key is a string, and so not a lock: read those with InspectSemaphore.
func (c *Client) Inspect(ctx context.Context, name string) (LockState, error) {
	st := LockState{Name: name}
	switch {
	case c.check() != nil:
		return st, wrapErrCtx(ctx, "inspect", name, c.check())
	case !validName(name):
		return st, wrapErrCtx(ctx, "inspect", name, ErrInvalidName)
	case ctx.Err() != nil:
		return st, wrapErrCtx(ctx, "inspect", name, ctx.Err())
	}
	keys := []string{name, companion("redisson_lock_queue", name), companion("redisson_lock_timeout", name),
		companion("relock_rwlock_writers", name), companion("redisson_lock_token", name), companion("relock_lock_alive", name)}
	reply, err := c.run(ctx, scriptInspect, keys, []string{nameBase(name), strconv.Itoa(inspectQueueLimit)}).ToArray()
	if err != nil {
		return st, wrapErrCtx(ctx, "inspect", name, err)
	}
	if err := st.decode(reply); err != nil {
		return LockState{Name: name}, wrapErrCtx(ctx, "inspect", name, err)
	}
	return st, nil
}

// decode fills st from inspect.lua's reply.
func (st *LockState) decode(reply []rueidis.RedisMessage) error {
	if len(reply) != 11 {
		return errUnexpectedReply
	}
	var (
		ints [6]int64
		err  error
	)
	for i, at := range []int{1, 2, 5, 8} {
		if ints[i], err = reply[at].AsInt64(); err != nil {
			return errUnexpectedReply
		}
	}
	pttl, now, queueLen, writersLen := ints[0], ints[1], ints[2], ints[3]
	kind, err1 := reply[0].ToString()
	fields, err2 := reply[3].AsStrSlice()
	readTTLs, err3 := reply[4].AsIntSlice()
	queue, err4 := reply[6].AsStrSlice()
	deadlines, err5 := reply[7].AsIntSlice()
	writers, err6 := reply[9].AsStrSlice()
	token, err7 := reply[10].ToString()
	if err := errors.Join(err1, err2, err3, err4, err5, err6, err7); err != nil || len(readTTLs)*2 != len(fields) ||
		len(deadlines) != len(queue) || len(writers)%2 != 0 {
		return errUnexpectedReply
	}
	if token != "" {
		if st.FencingToken, err = strconv.ParseUint(token, 10, 64); err != nil {
			return fmt.Errorf("%w: its fencing counter holds %q", ErrNotALock, token)
		}
	}

	switch kind {
	case "none":
	case "hash":
		if err := st.decodeHolders(fields, readTTLs, pttl); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: the key is a %s", ErrNotALock, kind)
	}

	if queueLen > 0 {
		// A fair lock's queue.
		if st.Mode != "" {
			return fmt.Errorf("%w: a read-write lock with a fair queue", ErrNotALock)
		}
		st.Kind, st.QueueLen = KindFairLock, int(queueLen)
		for i, owner := range queue {
			st.Queue = append(st.Queue, newWaiter(owner, deadlines[i]-now))
		}
	} else if writersLen > 0 {
		// A read-write lock's priority writers, in the order of their deadlines (that is, of their last
		// refresh: they all wait alike, for the readers to leave).
		if st.Kind == KindRLock && st.Mode == "" && st.Locked {
			return fmt.Errorf("%w: a lock with waiting writers but no mode", ErrNotALock)
		}
		st.Kind, st.QueueLen = KindReadWriteLock, int(writersLen)
		for i := 0; i < len(writers); i += 2 {
			score, err := strconv.ParseFloat(writers[i+1], 64)
			if err != nil {
				return errUnexpectedReply
			}
			st.Queue = append(st.Queue, newWaiter(strings.TrimSuffix(writers[i], writerSuffix), int64(score)-now))
		}
	}
	return nil
}

// decodeHolders reads the lock hash (fields, flat) into st.
func (st *LockState) decodeHolders(fields []string, readTTLs []int64, pttl int64) error {
	st.Kind, st.Locked, st.TTL = KindRLock, true, pttlToDuration(pttl)
	for i := 0; i < len(fields); i += 2 {
		field, value := fields[i], fields[i+1]
		if field == "mode" {
			if value != "read" && value != "write" {
				return fmt.Errorf("%w: its mode is %q", ErrNotALock, value)
			}
			st.Kind, st.Mode = KindReadWriteLock, value
			continue
		}
		n, err := strconv.Atoi(value)
		if err != nil || n <= 0 || !strings.Contains(field, ":") {
			return fmt.Errorf("%w: a hash whose field %q holds %q, not an owner's hold count", ErrNotALock, field, value)
		}
		h := Holder{Owner: field, Count: n, TTL: st.TTL}
		owner := field
		if readTTLs[i/2] != -3 {
			h.Mode, h.TTL = "read", pttlToDuration(readTTLs[i/2])
		} else if strings.HasSuffix(field, writerSuffix) {
			h.Mode, owner = "write", strings.TrimSuffix(field, writerSuffix)
		}
		h.ClientID, h.Token = splitOwner(owner)
		st.Holders = append(st.Holders, h)
	}
	switch {
	case st.Mode == "" && (len(st.Holders) != 1 || st.Holders[0].Mode != ""):
		return fmt.Errorf("%w: a hash with %d owners and no mode", ErrNotALock, len(st.Holders))
	case len(st.Holders) == 0:
		return fmt.Errorf("%w: a read-write lock with no holder", ErrNotALock)
	}
	slices.SortFunc(st.Holders, func(a, b Holder) int { return strings.Compare(a.Owner, b.Owner) })
	return nil
}

func newWaiter(owner string, expiresMillis int64) Waiter {
	id, token := splitOwner(owner)
	return Waiter{Owner: owner, ClientID: id, Token: token, Expires: durationMillis(expiresMillis)}
}

// splitOwner splits an owner "<clientID>:<token>" whose client ID is a UUID; any other owner is all
// token.
func splitOwner(owner string) (clientID, token string) {
	if len(owner) > 37 && owner[36] == ':' {
		if _, err := uuid.Parse(owner[:36]); err == nil {
			return owner[:36], owner[37:]
		}
	}
	return "", owner
}
