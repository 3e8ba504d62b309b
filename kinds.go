package relock

import (
	"errors"
	"strings"

	"github.com/redis/rueidis"
)

// ErrWrongKind means the call found its name in use by another kind of object than its own: a lock of
// another kind (a Lock's name used by a ReadWriteLock, say), a Semaphore's or CountDownLatch's counter
// where a lock was asked for (the error then matches ErrNotALock too), a lock where a counter was asked
// for (ErrNotASemaphore too), or a key that none of relock's kinds writes. Nothing was changed in Redis.
// The error is a *KindError, which tells the kind found (errors.As).
//
// Redis tells kinds apart by the key at the name and by the companion keys some kinds keep (see
// LockKind). A Lock, a FairLock and an Election's lock share one layout, Redisson's, and exclude each
// other: they are told apart only while a FairLock has waiters queued (a Lock refuses the name then, as
// it would take the lock ahead of them) or once an Election has recorded a leader (Lock and FairLock
// refuse its name from then on; its stream of leaders is kept). A Semaphore and a CountDownLatch are both
// an integer at the name: they cannot be told apart. A PermitSemaphore is told from a Semaphore only while
// it has permits taken. Give each object a name of its own.
var ErrWrongKind = errors.New("relock: name in use by another kind")

// KindError is the error of a call that found its name in use by another kind of object (see
// ErrWrongKind). It matches ErrWrongKind; and ErrNotALock when a lock's call found no lock, ErrNotASemaphore
// when a Semaphore's, PermitSemaphore's or CountDownLatch's call found no counter.
type KindError struct {
	// Found is the kind found at the name: KindRLock for any reentrant lock's hash (a Lock, or a FairLock
	// or Election with nobody queued), KindFairLock or KindElection when their companion keys tell, and
	// KindOther for a key that none of relock's kinds writes.
	Found LockKind
	// Type is the Redis type of the key at the name ("hash", "string", "list"...), "none" when there is
	// no key and another kind's companion key told the kind (a FairLock's queue, a ReadWriteLock's waiting
	// writers, an Election's stream of leaders).
	Type string

	is      error // ErrNotALock, ErrNotASemaphore, or nil
	notHeld bool  // an Unlock's: it matches ErrNotHeld too
}

func (e *KindError) Error() string {
	var b strings.Builder
	b.WriteString("relock: ")
	if e.notHeld {
		b.WriteString(strings.TrimPrefix(ErrNotHeld.Error(), "relock: "))
		b.WriteString(": ")
	}
	if e.is != nil {
		b.WriteString(strings.TrimPrefix(e.is.Error(), "relock: "))
	} else {
		b.WriteString(strings.TrimPrefix(ErrWrongKind.Error(), "relock: "))
	}
	b.WriteString(": ")
	b.WriteString(e.Found.describe(e.Type))
	return b.String()
}

// Unwrap returns ErrWrongKind, ErrNotALock or ErrNotASemaphore when they apply, and ErrNotHeld for an
// Unlock's.
func (e *KindError) Unwrap() []error {
	errs := []error{ErrWrongKind}
	if e.is != nil {
		errs = append(errs, e.is)
	}
	if e.notHeld {
		errs = append(errs, ErrNotHeld)
	}
	return errs
}

// asNotHeld returns a copy of e that matches ErrNotHeld too: an Unlock's, which found nothing of its
// owner's at the name.
func (e *KindError) asNotHeld() *KindError {
	c := *e
	c.notHeld = true
	return &c
}

// describe says what a key of kind k, of Redis type t, is, for KindError's message.
func (k LockKind) describe(t string) string {
	switch k {
	case KindRLock:
		return "it holds a lock (Lock, FairLock or an Election's)"
	case KindFairLock:
		return "it is a FairLock's, with waiters queued"
	case KindElection:
		return "it is an Election's"
	case KindReadWriteLock:
		return "it holds a ReadWriteLock"
	case KindSemaphore:
		return "it is a Semaphore's or CountDownLatch's counter"
	case KindPermitSemaphore:
		return "it is a PermitSemaphore's, with permits taken"
	}
	if t == "string" {
		return "it holds a string that is no counter"
	}
	return "it holds a Redis " + t
}

// The causes of the loss of a hold whose key the watchdog found in use by another kind: renewal scripts
// answer 2 for a lock of another kind, 3 for a key that is no lock (no permits key, for a permit).
var (
	errLostToKind        = &lossError{"relock: lock lost: its key is now another kind's lock", []error{ErrLockLost, ErrWrongKind}}
	errLostNotALock      = &lossError{"relock: lock lost: its key is now no lock", []error{ErrLockLost, ErrWrongKind, ErrNotALock}}
	errLostNotASemaphore = &lossError{"relock: lock lost: the permits' key is now no sorted set", []error{ErrLockLost, ErrWrongKind, ErrNotASemaphore}}
)

// lossError is a loss's cause that matches several sentinels, with one message.
type lossError struct {
	msg string
	is  []error
}

func (e *lossError) Error() string   { return e.msg }
func (e *lossError) Unwrap() []error { return e.is }

// lostToKind is the cause of the loss of a hold of kind whose renewal answered code (2 or 3).
func lostToKind(kind lockKind, code int64) error {
	switch {
	case code == 2:
		return errLostToKind
	case kind == kindSemaphore:
		return errLostNotASemaphore
	}
	return errLostNotALock
}

// refusalPrefix starts the error replies of scripts that refuse a name in use by another kind
// (lua/lib/kinds.lua): "RELOCK_<code> <kind> <type>".
const refusalPrefix = "RELOCK_"

// kindReply turns a script's refusal into a *KindError, and returns any other result as it is.
func kindReply(r rueidis.RedisResult) rueidis.RedisResult {
	rerr, ok := rueidis.IsRedisErr(r.Error())
	if !ok || !strings.HasPrefix(rerr.Error(), refusalPrefix) {
		return r
	}
	if ke := parseRefusal(rerr.Error()); ke != nil {
		return rueidis.NewErrorResult(ke)
	}
	return r
}

// parseRefusal reads a script's refusal, or returns nil for another error.
func parseRefusal(msg string) *KindError {
	f := strings.Fields(strings.TrimPrefix(msg, refusalPrefix))
	if len(f) != 3 {
		return nil
	}
	ke := &KindError{Found: LockKind(f[1]), Type: f[2]}
	switch f[0] {
	case "WRONGKIND":
	case "NOTALOCK":
		ke.is = ErrNotALock
	case "NOTASEMAPHORE":
		ke.is = ErrNotASemaphore
	default:
		return nil
	}
	return ke
}
