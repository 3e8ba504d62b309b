package relock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Errors returned by relock. Compare with errors.Is: the errors a call returns wrap these with the
// operation and the lock name.
var (
	// ErrNotHeld means the caller's owner does not hold the lock it tried to unlock: it never acquired it,
	// already released it, or its hold expired. Nothing was changed in Redis.
	ErrNotHeld = errors.New("relock: lock not held by this owner")

	// ErrClosed means the Client was closed before or during the call.
	ErrClosed = errors.New("relock: client closed")

	// ErrNilClient means a lock was made from a nil *Client, or New/Wrap got no Redis client.
	ErrNilClient = errors.New("relock: nil client")

	// ErrInvalidName means a lock name is one whose companion keys and channels, formed by Redisson's rule
	// (see Client.Lock), would not share its Redis Cluster slot. Exactly these names are refused, on every
	// deployment: the empty name; a name with a "{" whose first "{" is not followed, later, by a "}" with
	// something between them ("a{", "a{b", "a{}", "{}a"); and a name with a "}" but no "{" ("a}b", "}").
	ErrInvalidName = errors.New("relock: invalid lock name")

	// ErrInvalidDuration means a wait, lease or timeout is negative, or zero where zero has no meaning.
	ErrInvalidDuration = errors.New("relock: invalid duration")

	// ErrInvalidPermits is returned for a number of semaphore permits that is not allowed: zero or
	// negative permits to acquire or release, zero to add, a negative number to set.
	ErrInvalidPermits = errors.New("relock: invalid number of permits")

	// ErrInvalidCount is returned for a count-down latch's count that is not above zero.
	ErrInvalidCount = errors.New("relock: invalid count")

	// ErrInvalidOwner means the owner token carried by the context (see WithOwner) is empty, consists only
	// of decimal digits (reserved for goroutine owners), or ends in ":write".
	ErrInvalidOwner = errors.New("relock: invalid owner token")

	// ErrUpgrade means an owner that holds a read lock asked for the write lock of the same ReadWriteLock.
	// The write lock waits for every reader to leave, this owner included, so the request could never be
	// granted; it fails at once instead of waiting forever. Release the read lock first.
	ErrUpgrade = errors.New("relock: cannot take the write lock while holding the read lock")

	// ErrReplicaAck means an acquisition made with WithReplicaAck was not acknowledged by enough replicas
	// in time: it was rolled back, and the owner does not hold the lock (or holds it as before).
	ErrReplicaAck = errors.New("relock: acquisition not acknowledged by enough replicas")

	// ErrNotFenced means FencingToken or FencedWrite was called on a lock made without WithFencing, or
	// FencedWrite on a hold acquired without it (which has no token).
	ErrNotFenced = errors.New("relock: lock is not fenced")

	// ErrInvalidOptions means a configuration cannot work: the Options or addresses given to New or Wrap
	// (no Redis address, an address that is neither host:port nor a redis:// or rediss:// URL, a watchdog
	// timeout below MinWatchdogTimeout), or the parts of a MultiLock or RedLock. The message says what is
	// wrong.
	ErrInvalidOptions = errors.New("relock: invalid options")

	// ErrUnavailable means Redis could not be reached or did not answer, in any operation (New and
	// NewContext included): the connection could not be made (refused, unreachable, timed out), it broke,
	// the server stopped answering, or it answered that it cannot serve now (LOADING, BUSY, MASTERDOWN,
	// CLUSTERDOWN, TRYAGAIN, or OOM over its maxmemory). It wraps the cause. A call that could not reach Redis changed nothing; one
	// whose reply was lost is settled as its operation documents (an acquisition is undone, a release
	// completed, in the background). Trying again later is the remedy.
	ErrUnavailable = errors.New("relock: redis unavailable")
)

// ErrNoQuorum means a RedLock could not reach a majority of its nodes: too many of them failed with
// errors (unreachable, stalled past the node timeout) rather than being held by another owner.
var ErrNoQuorum = errors.New("relock: no quorum of redlock nodes")

// ErrLockLost is the cause (context.Cause) of a hold's context when the hold ended without its owner
// releasing it: Redis no longer had it when the watchdog came to renew it (it expired during a pause,
// was deleted by ForceUnlock or by hand, or Redis restarted), the watchdog could not renew it before it
// expired, its lease ran out, or its key was replaced by another kind's (the cause then matches
// ErrWrongKind too, see KindError). Causes wrap it with the reason; test with errors.Is. A hold its
// Client gave up at Close is not lost: its cause matches ErrClosed and context.Canceled (see Client.Close).
var ErrLockLost = errors.New("relock: lock lost")

// ErrMaxHoldReached is the cause of a hold's context when the hold reached its budget (WithMaxHold): its
// Client released it, and Redis drops it by the budget after it granted it in any case (see WithMaxHold).
// It is also the error of an acquisition of the hold made, or reaching Redis, once its budget is spent.
// It wraps ErrLockLost, so code that stops work on a loss stops here too; it is not counted as a loss
// (relock.losses) but as a budget reached (relock.max_hold_reached).
var ErrMaxHoldReached = fmt.Errorf("%w: it reached its maximum duration (WithMaxHold)", ErrLockLost)

// ErrNoLease is Extend's error for a hold that has no lease: the watchdog keeps it alive until its owner
// releases it, so there is nothing to extend.
var ErrNoLease = errors.New("relock: the hold has no lease (the watchdog keeps it alive)")

// The causes of a loss. Each wraps ErrLockLost.
var (
	errHoldGone     = fmt.Errorf("%w: the hold is gone from Redis", ErrLockLost)
	errRenewTimeout = fmt.Errorf("%w: not renewed before it expired", ErrLockLost)
	// errRenewUnanswered is a renewal's failure when no error says more (see hold.renewErr).
	errRenewUnanswered = errors.New("relock: the renewal got no answer")
	errLeaseExpired    = fmt.Errorf("%w: its lease ran out", ErrLockLost)
	errClientClosed    = errorf("%w: %w", ErrLockLost, ErrClosed) // a Client that stopped without giving its holds up
)

// writeHoldEnded is the cause of a read hold taken under its owner's own write hold, which lives within
// it (see rw_read_acquire.lua), when that write hold ended otherwise than by its owner's release: cause.
func writeHoldEnded(cause error) error {
	return fmt.Errorf("%w: the write hold it was taken under ended (%w)", ErrLockLost, cause)
}

// errGivenUp is the cause of a hold's context when Close gave the hold up: its Client released it, as its
// owner's Unlock would have (context.Canceled), because it was closed (ErrClosed). It is not a loss.
var errGivenUp = errorf("%w: the hold was given up (%w)", ErrClosed, context.Canceled)

// errUnexpectedReply means a script answered in a shape it never produces: the key was changed by
// something that does not follow the lock's layout, or the script is not the one relock sent.
var errUnexpectedReply = errors.New("relock: unexpected reply from Redis")

// errInterrupted is a call's failure when its connection broke under it because of another call, on a
// rueidis client given to Wrap that does not always pipeline: rueidis then runs a call alone on its
// connection under the connection's deadline, set to the call's context's, whose expiry closes the
// connection, and the calls that share it fail with that context's error, although their own has not
// ended. Like any broken connection, its outcome is unknown and it is transient. (New always pipelines:
// see Client.exec.)
var errInterrupted = errors.New("relock: the connection broke under the call")

// errNotConnected is a call's failure when the connection it waited for could not be made because of
// another call: rueidis dials a connection, and sends its handshake, under the context of the call that
// needed it first, and the calls that wait for it fail with that context's error when it ends first. The
// call was never sent.
var errNotConnected = errors.New("relock: the connection could not be made")

// errReplyLost is the failure of a plain semaphore's acquisition whose reply was lost after it was sent
// (the connection broke): it may have taken permits that nobody holds now, and nothing in Redis tells. A
// waiter does not try again past it, which would take more and leave those unseen: its caller is told.
var errReplyLost = errors.New("relock: the reply was lost: the permits may have been taken, and nobody holds them")

// opError reports which operation on which lock failed, and why.
type opError struct {
	op   string
	name string
	err  error
}

func (e *opError) Error() string {
	var b strings.Builder
	b.WriteString(errPrefix)
	b.WriteString(e.op)
	if e.name != "" {
		b.WriteByte(' ')
		b.WriteString(strconv.Quote(e.name))
	}
	b.WriteString(": ")
	b.WriteString(trimNested(e.err.Error()))
	return b.String()
}

func (e *opError) Unwrap() error { return e.err }

// errPrefix starts the text of every error relock returns, once.
const errPrefix = "relock: "

// trimNested removes errPrefix from the texts of the errors nested in msg: at its start, and after a
// space, "(" or a newline (errors.Join), where the text of a wrapped error begins.
func trimNested(msg string) string {
	if !strings.Contains(msg, errPrefix) {
		return msg
	}
	var b strings.Builder
	for {
		i := strings.Index(msg, errPrefix)
		if i < 0 {
			break
		}
		if i == 0 || msg[i-1] == ' ' || msg[i-1] == '(' || msg[i-1] == '\n' {
			b.WriteString(msg[:i])
		} else {
			b.WriteString(msg[:i+len(errPrefix)])
		}
		msg = msg[i+len(errPrefix):]
	}
	b.WriteString(msg)
	return b.String()
}

// textError is an error with a text of its own, wrapping err.
type textError struct {
	msg string
	err error
}

func (e *textError) Error() string { return e.msg }
func (e *textError) Unwrap() error { return e.err }

// errorf is fmt.Errorf, with errPrefix kept only at the start of the text.
func errorf(format string, a ...any) error {
	err := fmt.Errorf(format, a...)
	msg := err.Error()
	trimmed := trimNested(msg)
	if strings.HasPrefix(msg, errPrefix) {
		trimmed = errPrefix + trimmed
	}
	return &textError{msg: trimmed, err: err}
}

// unavailable returns err, a failure to reach Redis or to get its answer, as an error matching
// ErrUnavailable and err.
func unavailable(err error) error {
	if errors.Is(err, ErrUnavailable) {
		return err
	}
	return errorf("%w: %w", ErrUnavailable, err)
}

// wrapErrCtx attaches op and name to err, an error of an operation made with ctx, translating rueidis's
// closing error into ErrClosed. Once ctx has ended, the error matches ctx's error (errors.Is), whatever
// else went wrong as it ended (a dial that timed out, a broken connection). A ctx whose deadline has passed
// has ended, even if its timer, late on a loaded machine, has not fired yet.
func wrapErrCtx(ctx context.Context, op, name string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, rueidis.ErrClosing) {
		err = ErrClosed
	}
	if rerr, ok := redisReply(err); ok && transientReply(rerr) {
		err = unavailable(err)
	}
	cerr := ctx.Err()
	if dl, ok := ctx.Deadline(); ok && cerr == nil && !time.Now().Before(dl) {
		cerr = context.DeadlineExceeded
	}
	if cerr != nil && !errors.Is(err, cerr) {
		err = fmt.Errorf("%w (%w)", cerr, err)
	}
	return &opError{op: op, name: name, err: err}
}

// connectError classifies the failure of rueidis.NewClient: a configuration rueidis refuses matches
// ErrInvalidOptions, and so does a server's refusal of the credentials (NOAUTH: none given; WRONGPASS),
// saying where they go; another reply of Redis (NOPERM...) is returned as it is; anything else means Redis
// could not be reached (ErrUnavailable).
func connectError(err error) error {
	if rerr, ok := redisReply(err); ok {
		switch msg := rerr.Error(); {
		case strings.HasPrefix(msg, "NOAUTH"):
			return errorf("%w: the server requires a password: put it in the address "+
				"(redis://:password@host:port, or redis://user:password@host:port for an ACL user) or in "+
				"Options.Redis (Password, and Username): %w", ErrInvalidOptions, err)
		case strings.HasPrefix(msg, "WRONGPASS"):
			return errorf("%w: the server refused the user or password given (in the address, or in "+
				"Options.Redis: Username, Password): %w", ErrInvalidOptions, err)
		}
		return err
	}
	for _, e := range []error{rueidis.ErrNoCache, rueidis.ErrReplicaOnlyNotSupported, rueidis.ErrNoSendToReplicas, rueidis.ErrWrongPipelineMultiplex} {
		if errors.Is(err, e) {
			return errorf("%w: %w", ErrInvalidOptions, err)
		}
	}
	if strings.Contains(err.Error(), "cannot be used together") { // rueidis.NewClient's conflicting options
		return errorf("%w: %w", ErrInvalidOptions, err)
	}
	return unavailable(err)
}

// redisReply returns the error reply of Redis that err is, or wraps.
func redisReply(err error) (*rueidis.RedisError, bool) {
	var rerr *rueidis.RedisError
	return rerr, errors.As(err, &rerr)
}

// transientReply reports whether rerr is Redis saying it cannot serve now, without running the command:
// a cluster failing over or down, a server loading its data or running a slow script (BUSY), a replica
// without its master, or a server over its maxmemory with noeviction (OOM). A server over its maxmemory refuses a script at its first write that
// needs memory; relock's scripts make those writes before any that a repeat would apply twice (a release's
// decrement comes before its record, a semaphore's count before anything), so a refused one is safe to
// send again.
func transientReply(rerr *rueidis.RedisError) bool {
	msg := rerr.Error()
	return rerr.IsClusterDown() || rerr.IsTryAgain() || rerr.IsLoading() || strings.HasPrefix(msg, "MASTERDOWN") ||
		strings.HasPrefix(msg, "OOM") || strings.Contains(msg, ": -OOM ") || // 6.2 wraps a script's: "ERR Error running script ...: -OOM ..."
		strings.HasPrefix(msg, "BUSY ") // not BUSYKEY, BUSYGROUP

}

// outcomeUnknown reports whether a failed command got no definite answer: Redis did not reply. It may
// nevertheless have run on the server (see mayHaveRun), or have surely not been sent (unsent). A reply
// from Redis (even an error reply) is a definite outcome.
func outcomeUnknown(err error) bool {
	if err == nil {
		return false
	}
	if _, ok := redisReply(err); ok {
		return false
	}
	// relock's own errors are definite: read from a reply (ErrUpgrade, errUnexpectedReply), or given
	// before anything was sent. rueidis rejects the commands of a closed client before sending them.
	return !permanent(err) && !errors.Is(err, errUnexpectedReply) && !errors.Is(err, ErrReplicaAck) &&
		!errors.Is(err, rueidis.ErrClosing)
}

// transient reports whether err may well go away by itself soon: the connection broke or could not be
// made, or a cluster is failing over or a server loading its data.
func transient(err error) bool {
	if rerr, ok := redisReply(err); ok {
		return transientReply(rerr)
	}
	if unsent(err) {
		return true
	}
	return outcomeUnknown(err) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) &&
		!errors.Is(err, errReplyLost)
}

// mayHaveRun reports whether a failed command may have run on the server although no reply says so: the
// request may have been written before the connection broke or the context ended. Only such a failure
// leaves something to undo.
func mayHaveRun(err error) bool {
	return outcomeUnknown(err) && !unsent(err)
}

// errSettling is the failure of an operation that did not wait for the settling of an earlier operation
// of its owner on the same lock, whose attempts fail (see holdTable.prepare). Nothing was sent.
var errSettling = errors.New("relock: an earlier call of this owner on the lock is still being completed in the background")

// settlingError is errSettling, because of cause, the last failure of the settling: an error matching
// ErrUnavailable, and cause unless it is a context's (the settling's attempt's, not the caller's).
func settlingError(cause error) error {
	switch {
	case errors.Is(cause, context.Canceled) || errors.Is(cause, context.DeadlineExceeded):
		return errorf("%w: %w (%v)", ErrUnavailable, errSettling, cause)
	case errors.Is(cause, ErrUnavailable):
		return errorf("%w (%w)", errSettling, cause)
	}
	return errorf("%w: %w (%w)", ErrUnavailable, errSettling, cause)
}

// unsent reports whether a failed call surely never reached the server: its connection could not be made
// (the dial failed, or, for a call that waited for another call's dial, that call's context ended first;
// rueidis sends nothing on a connection before it is made), or it did not wait for an earlier call to be
// settled (errSettling).
func unsent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" || errors.Is(err, errNotConnected) || errors.Is(err, errSettling)
}

// permanent reports whether err is one that trying again cannot mend.
func permanent(err error) bool {
	for _, e := range []error{ErrUpgrade, ErrInvalidOwner, ErrInvalidName, ErrInvalidDuration, ErrClosed, ErrNilClient, ErrWrongKind,
		ErrMaxHoldReached} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// didNotRun reports whether a failed command surely did not run, so that sending it again cannot apply it
// twice: its connection could not be made, or the server answered that it cannot run commands now (a
// server loading its data, a cluster failing over: LOADING, TRYAGAIN, CLUSTERDOWN, MASTERDOWN).
func didNotRun(err error) bool {
	if rerr, ok := redisReply(err); ok { // classify may have wrapped it (ErrUnavailable)
		return transientReply(rerr)
	}
	return unsent(err)
}
