package relock

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/redis/rueidis"
	"go.opentelemetry.io/otel/trace"
)

// unlockAttempts is how many times Unlock sends a release whose outcome it could not learn, before it
// leaves the rest to the background; unlockRetryBackoff is the pause between them.
const (
	unlockAttempts     = 3
	unlockRetryBackoff = 20 * time.Millisecond
)

// LockOption configures a lock made by Client.Lock or Client.FairLock.
type LockOption func(*lockOptions)

type lockOptions struct {
	fenced         bool
	writerPriority bool
	ackReplicas    int64
	ackTimeout     time.Duration
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
			o.ackReplicas, o.ackTimeout = int64(replicas), timeout
		}
	}
}

// WithFencing makes the lock fenced: each acquisition by a new owner takes the next value of a 64-bit
// counter kept in Redis with the lock ("redisson_lock_token:{<name>}", as Redisson's RFencedLock), in the
// same script and round trip; a reentrant acquisition keeps the owner's token. FencingToken returns it.
//
// A lease or a watchdog cannot stop a holder that was paused (GC, SIGSTOP, a stalled VM) from acting
// after its hold expired and another owner got the lock. Fencing can: pass the token with every write to
// the resource the lock protects, and have the resource reject a write whose token is lower than the
// highest it has accepted. The counter never expires, so tokens keep increasing across the lock key's
// expiries; it must not be evicted (use a noeviction or volatile-* maxmemory policy), and every user of
// the lock name must use fencing.
func WithFencing() LockOption {
	return func(o *lockOptions) { o.fenced = true }
}

// reentrant is what every lock type shares: a hash at the lock's name whose field is the owner (plus a
// suffix, for a write lock) and whose value is its hold count; acquisition, release and repair by one
// script each; holds registered with the watchdog; the optional fencing counter.
//
// The scripts of all lock types take the same leading arguments and give the same replies: acquire
// ARGV = [hold TTL ms, owner field, extraArgs..., (queue TTL ms, join)] and replies {1, count, token},
// {0, wait ms, 0} or {-1, 0, 0} (an upgrade that would deadlock); release ARGV = [owner field, message,
// expected count or ”, request id, publish command] and replies the remaining count or -1 (not held).
type reentrant struct {
	c              *Client
	kind           lockKind
	name           string
	fenced         bool
	writerPriority bool
	ackReplicas    int64
	ackTimeout     time.Duration
	channel        string // where releases are announced; with ownerChannels, the prefix of each waiter's own

	acquireScript, releaseScript, forceScript, renewScript *script
	countScript                                            *script  // the owner's hold count, if HGET cannot tell
	acquireKeys                                            []string // the lock's key first
	releaseKeys                                            []string
	fieldSuffix                                            string // appended to the owner to make its field
	releaseMessage                                         string // what the last release publishes
	mode                                                   string // for IsLocked: the hash's mode, or "" for any
	extraArgs                                              func(owner string) []string
	waiters                                                *waitQueue // queued waiters (FairLock, writer priority)
	ownerChannels                                          bool       // each waiter listens on channel:<owner>
	// trailing args end the acquire, release and force-release arguments (a read-write lock's tag);
	// renewArgs, if set, are the renewal script's per-hold args after the owner field.
	trailing, renewArgs []string
}

func newReentrant(c *Client, kind lockKind, name string, opts []LockOption) reentrant {
	var o lockOptions
	for _, opt := range opts {
		opt(&o)
	}
	return reentrant{c: c, kind: kind, name: name, fenced: o.fenced, writerPriority: o.writerPriority,
		ackReplicas: o.ackReplicas, ackTimeout: o.ackTimeout,
		channel: companion("redisson_lock__channel", name), renewScript: scriptRenew, releaseMessage: unlockMessage}
}

// tokenKey is the fencing counter's key.
func (r *reentrant) tokenKey() string { return companion("redisson_lock_token", r.name) }

// recordKey is the release record's key (see lua/rlock_release.lua).
func (r *reentrant) recordKey() string { return companion("relock_release", r.name) }

func (r *reentrant) tryLock(ctx context.Context, op string, wait, lease time.Duration) (bool, error) {
	field, err := r.prepare(ctx)
	if err != nil {
		return false, r.fail(ctx, op, err)
	}
	ttl, ttlArg := lease, ""
	if ttl == 0 {
		ttl, ttlArg = r.c.watchdogTimeout, r.c.watchdogTimeoutArg
	} else {
		ttlArg = fmtMillis(ttl)
	}
	owner := field
	field += r.fieldSuffix
	k := holdKey{key: r.name, field: field}
	args := []string{ttlArg, field}
	if r.extraArgs != nil {
		args = append(args, r.extraArgs(owner)...)
	}
	if r.waiters != nil {
		if args, err = r.waiters.acquireArgs(ctx, r.channel, args, wait != 0); err != nil {
			return false, r.fail(ctx, op, err)
		}
	}
	args = append(args, r.trailing...)
	channel := r.channel
	if r.ownerChannels {
		channel += ":" + field
	}
	parent := ctx
	join := r.waiters != nil && wait != 0
	lateJoin := false // an attempt that joins the queue may have run unseen: it may yet add an entry
	ok, err := r.c.acquire(ctx, acquireOp{
		kind: r.kind, name: r.name, channel: channel, wait: wait,
		try: func(ctx context.Context) (bool, time.Duration, error) {
			ok, wait, err := r.attempt(ctx, parent, k, lease, ttl, args, join)
			lateJoin = lateJoin || join && outcomeUnknown(err)
			return ok, wait, err
		},
	})
	if join {
		r.waiters.done(k, ok, lateJoin)
	}
	if err != nil {
		return false, r.fail(ctx, op, err)
	}
	return ok, nil
}

// attempt runs the acquire script once.
func (r *reentrant) attempt(ctx, parent context.Context, k holdKey, lease, ttl time.Duration, args []string, join bool) (bool, time.Duration, error) {
	if _, err := r.c.holds.prepare(ctx, k); err != nil {
		return false, 0, err
	}
	if r.waiters != nil {
		if err := r.waiters.prepare(ctx, k); err != nil {
			return false, 0, err
		}
	}
	sentAt := time.Now()
	var reply []int64
	var err error
	acked := int64(-1)
	if r.ackReplicas > 0 {
		var resp rueidis.RedisResult
		resp, acked, err = r.c.runAcked(ctx, r.acquireScript, r.acquireKeys, args, r.ackReplicas, r.ackTimeout)
		if err == nil {
			reply, err = resp.AsIntSlice()
		}
	} else {
		reply, err = r.c.run(ctx, r.acquireScript, r.acquireKeys, args).AsIntSlice()
	}
	if err != nil {
		if outcomeUnknown(err) {
			r.undoAcquire(k, ttl)
		}
		return false, 0, err
	}
	if len(reply) != 3 {
		return false, 0, errUnexpectedReply
	}
	if reply[0] == 1 && acked >= 0 && acked < r.ackReplicas {
		return false, 0, r.rollBack(ctx, k, reply[1])
	}
	switch reply[0] {
	case 1:
		r.c.holds.acquired(k, acquisition{
			kind: r.kind, name: r.name, count: reply[1], lease: lease, sentAt: sentAt,
			renew: renewal{script: r.renewScript, keys: r.acquireKeys[:1], args: r.renewalArgs(args)},
			token: uint64(reply[2]), parent: parent, traced: trace.SpanFromContext(ctx).IsRecording(),
		})
		return true, 0, nil
	case -1:
		return false, 0, ErrUpgrade
	}
	wait := time.Duration(-1)
	if reply[1] >= 0 {
		wait = time.Duration(reply[1]) * time.Millisecond
	}
	if join {
		r.waiters.waiting(k, r.kind, sentAt)
		if m := r.waiters.maxSleep; m > 0 && (wait < 0 || wait > m) {
			wait = m
		}
	}
	return false, wait, nil
}

// rollBack releases the hold level an acquisition just took (count is the hold count it reached) because
// the replicas did not acknowledge it. If the release cannot be confirmed, the undo goes on in the
// background.
func (r *reentrant) rollBack(ctx context.Context, k holdKey, count int64) error {
	args := append([]string{k.field, r.releaseMessage, strconv.FormatInt(count, 10), "", r.c.knownPublishCommand()}, r.trailing...)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), retryAttemptTimeout)
	defer cancel()
	if _, err := r.release(ctx, args); err != nil {
		r.undoAcquire(k, r.c.watchdogTimeout) // releases count (the known count + 1) if it is still there
	}
	return ErrReplicaAck
}

// undoAcquire releases, in the background, the hold an acquisition may have taken although its reply was
// lost (the context ended or the connection broke while the script was in flight). Without it, a lock
// could stay taken by nobody until its TTL ran out. The release only happens if the hold count is the
// one that acquisition would have produced, so trying again after an attempt whose outcome is unknown is
// safe; the undo keeps trying until Redis answers or the hold it might undo has expired anyway. Until it
// is done, the same owner's next operation on this lock waits.
func (r *reentrant) undoAcquire(k holdKey, ttl time.Duration) {
	prior, done := r.c.holds.settle(k)
	args := append([]string{k.field, r.releaseMessage, strconv.FormatInt(prior+1, 10), "", r.c.knownPublishCommand()}, r.trailing...)
	ran := r.c.goBackground(func(life context.Context) {
		left := r.c.retryUnknown(life, time.Now().Add(ttl), func(ctx context.Context) (int64, error) {
			return r.release(ctx, args)
		})
		done(left) // -1 (the acquisition did not run, or no answer): the count stays what it was
	})
	if !ran {
		done(-1)
	}
}

func (r *reentrant) unlock(ctx context.Context) error {
	field, err := r.ownerOf(ctx)
	if err != nil {
		return r.fail(ctx, "unlock", err)
	}
	k := holdKey{key: r.name, field: field}
	args := r.releaseArgs(field)
	// An Unlock whose ctx has ended (before it, or while it waits for an earlier operation of the owner to
	// settle) still releases: in the background, on the Client's lifetime.
	if ctx.Err() != nil {
		r.releaseInBackground(k, args)
		return r.fail(ctx, "unlock", ctx.Err())
	}
	if _, err := r.c.holds.prepare(ctx, k); err != nil {
		r.releaseInBackground(k, args)
		return r.fail(ctx, "unlock", err)
	}
	ctx, span := r.c.tel.startSpan(ctx, "relock.unlock", r.kind, r.name)
	left, err := r.release(ctx, args)
	if outcomeUnknown(err) {
		args = repeating(args)
	}
	for attempt := 1; attempt < unlockAttempts && outcomeUnknown(err) && ctx.Err() == nil; attempt++ {
		select {
		case <-ctx.Done():
		case <-time.After(unlockRetryBackoff):
		}
		left, err = r.release(ctx, args)
	}
	if err != nil {
		if outcomeUnknown(err) {
			r.releaseInBackground(k, args)
		}
		endSpan(span, outcomeError, err)
		return r.fail(ctx, "unlock", err)
	}
	if left < 0 {
		r.c.holds.notHeld(k)
		endSpan(span, outcomeNotHeld, nil)
		return r.fail(ctx, "unlock", ErrNotHeld)
	}
	r.c.holds.released(k, left)
	if left == 0 {
		endSpan(span, outcomeReleased, nil)
	} else {
		endSpan(span, outcomeDecremented, nil)
	}
	return nil
}

// releaseInBackground completes, on the Client's lifetime, a release whose outcome Unlock could not learn
// (its ctx ended before, or while, it was sent; or the connection broke): it sends the request, again and
// again, until Redis answers or the hold would have expired. A repeated request never releases twice. If
// it is the owner's last hold, the hold ends at once for the Client: the watchdog stops renewing it and its
// contexts end with context.Canceled. The owner's next operation on the lock waits for the release.
func (r *reentrant) releaseInBackground(k holdKey, args []string) {
	args = repeating(args)
	after, deadline, done := r.c.holds.unlocking(k)
	ran := r.c.goRelease(func(life context.Context) {
		if after != nil { // an earlier operation of the owner is settling: release after it
			select {
			case <-after:
			case <-life.Done():
				done(-1)
				return
			}
		}
		left := r.c.retryUnknown(life, deadline, func(ctx context.Context) (int64, error) {
			return r.release(ctx, args)
		})
		done(max(left, 0)) // not held, or no answer until the hold's expiry: the hold is over
	})
	if !ran {
		done(-1)
	}
}

// renewalArgs are the renewal script's args for the hold acquired with args (args[1] is the owner field).
func (r *reentrant) renewalArgs(args []string) []string {
	if r.renewArgs == nil {
		return args[1:2]
	}
	return append([]string{args[1]}, r.renewArgs...)
}

// releaseArgs are the arguments of one release request, with a fresh request id, marked as sent first.
// Their publish command is "" while it is not known yet: release finds it out.
func (r *reentrant) releaseArgs(field string) []string {
	return append([]string{field, r.releaseMessage, "", "!" + strconv.FormatUint(rand.Uint64(), 36), r.c.knownPublishCommand()}, r.trailing...)
}

// repeating returns the release request args marked as sent again: the script then checks whether it
// was applied already (the first sending skips that read). It copies them: an abandoned call may still be
// reading the first ones.
func repeating(args []string) []string {
	again := slices.Clone(args)
	again[3] = "?" + args[3][1:]
	return again
}

// release sends one release request; sending the same args again never releases twice. When args were
// made before the publish command was known (ShardedPubSubAuto), it is found out first, and args are
// copied to carry it: an abandoned call may still be reading them. A probe that gets no answer fails the
// call as an unanswered release would, so that it is repeated the same way.
func (r *reentrant) release(ctx context.Context, args []string) (int64, error) {
	if args[4] == "" {
		pub, err := r.c.publishCommand(ctx, r.channel)
		if err != nil {
			return 0, err
		}
		args = slices.Clone(args)
		args[4] = pub
	}
	return r.c.run(ctx, r.releaseScript, r.releaseKeys, args).AsInt64()
}

func (r *reentrant) forceUnlock(ctx context.Context) (bool, error) {
	if err := r.check(ctx); err != nil {
		return false, r.fail(ctx, "forceunlock", err)
	}
	ctx, span := r.c.tel.startSpan(ctx, "relock.force_unlock", r.kind, r.name)
	pub, err := r.c.publishCommand(ctx, r.channel)
	var n int64
	if err == nil {
		n, err = r.c.run(ctx, r.forceScript, r.releaseKeys, append([]string{r.releaseMessage, pub}, r.trailing...)).AsInt64()
	}
	if err != nil {
		endSpan(span, outcomeError, err)
		return false, r.fail(ctx, "forceunlock", err)
	}
	if n == 1 {
		endSpan(span, outcomeReleased, nil)
	} else {
		endSpan(span, outcomeNotHeld, nil)
	}
	return n == 1, nil
}

func (r *reentrant) holdContext(ctx context.Context) (context.Context, error) {
	field, err := r.prepareField(ctx)
	if err != nil {
		return nil, r.fail(ctx, "holdcontext", err)
	}
	hctx, err := r.c.holds.holdContext(ctx, holdKey{key: r.name, field: field})
	if err != nil {
		return nil, r.fail(ctx, "holdcontext", err)
	}
	return hctx, nil
}

// holdDone returns the context that ends when the hold of ctx's owner ends (see watchdog.holdDone).
func (r *reentrant) holdDone(ctx context.Context) (context.Context, error) {
	field, err := r.prepareField(ctx)
	if err != nil {
		return nil, err
	}
	return r.c.holds.holdDone(holdKey{key: r.name, field: field})
}

func (r *reentrant) fencingToken(ctx context.Context) (uint64, error) {
	field, err := r.prepareField(ctx)
	if err != nil {
		return 0, r.fail(ctx, "fencingtoken", err)
	}
	if !r.fenced {
		return 0, r.fail(ctx, "fencingtoken", ErrNotFenced)
	}
	token, ok := r.c.holds.token(holdKey{key: r.name, field: field})
	if !ok {
		return 0, r.fail(ctx, "fencingtoken", ErrNotHeld)
	}
	return token, nil
}

// expiry returns when the owner's hold expires unless renewed, and the hold's TTL, if it is held.
func (r *reentrant) expiry(ctx context.Context) (time.Time, time.Duration, bool) {
	field, err := r.prepareField(ctx)
	if err != nil {
		return time.Time{}, 0, false
	}
	return r.c.holds.expiry(holdKey{key: r.name, field: field})
}

func (r *reentrant) isLocked(ctx context.Context) (bool, error) {
	if err := r.check(ctx); err != nil {
		return false, r.fail(ctx, "islocked", err)
	}
	if r.mode != "" {
		mode, err := r.c.do(ctx, r.c.rdb.B().Hget().Key(r.name).Field("mode").Build()).ToString()
		if rueidis.IsRedisNil(err) {
			return false, nil
		}
		if err != nil {
			return false, r.fail(ctx, "islocked", err)
		}
		return mode == r.mode, nil
	}
	n, err := r.c.do(ctx, r.c.rdb.B().Exists().Key(r.name).Build()).AsInt64()
	if err != nil {
		return false, r.fail(ctx, "islocked", err)
	}
	return n == 1, nil
}

func (r *reentrant) holdCount(ctx context.Context, op string) (int, error) {
	field, err := r.prepareField(ctx)
	if err != nil {
		return 0, r.fail(ctx, op, err)
	}
	var n int64
	if r.countScript != nil { // a shared lock: the owner's field may outlive its hold
		n, err = r.c.run(ctx, r.countScript, []string{r.name}, append([]string{field}, r.trailing...)).AsInt64()
	} else {
		n, err = r.c.do(ctx, r.c.rdb.B().Hget().Key(r.name).Field(field).Build()).AsInt64()
	}
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	if err != nil {
		return 0, r.fail(ctx, op, err)
	}
	return int(n), nil
}

func (r *reentrant) remainingTTL(ctx context.Context) (time.Duration, error) {
	if err := r.check(ctx); err != nil {
		return 0, r.fail(ctx, "remainingttl", err)
	}
	ms, err := r.c.do(ctx, r.c.rdb.B().Pttl().Key(r.name).Build()).AsInt64()
	if err != nil {
		return 0, r.fail(ctx, "remainingttl", err)
	}
	return pttlToDuration(ms), nil
}

// NoExpiry is what RemainingTTL returns for a lock key that exists but has no time to live.
const NoExpiry time.Duration = -1

func pttlToDuration(ms int64) time.Duration {
	switch {
	case ms == -1:
		return NoExpiry
	case ms < 0:
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}

// check validates what every operation needs: a usable Client, a name, a live context.
func (r *reentrant) check(ctx context.Context) error {
	if err := r.usable(); err != nil {
		return err
	}
	return ctx.Err()
}

// usable validates what every operation needs but its context: a usable Client and a name.
func (r *reentrant) usable() error {
	if r == nil {
		return ErrNilClient
	}
	if err := r.c.check(); err != nil {
		return err
	}
	if !validName(r.name) {
		return ErrInvalidName
	}
	return nil
}

// ownerOf returns the owner field of ctx's owner in the lock's hash, whether or not ctx has ended (an
// Unlock releases even then).
func (r *reentrant) ownerOf(ctx context.Context) (string, error) {
	if err := r.usable(); err != nil {
		return "", err
	}
	owner, err := r.c.ownerField(ctx)
	return owner + r.fieldSuffix, err
}

// prepare is check plus the owner field of ctx.
func (r *reentrant) prepare(ctx context.Context) (string, error) {
	if err := r.check(ctx); err != nil {
		return "", err
	}
	return r.c.ownerField(ctx)
}

// prepareField is prepare, with the owner turned into the owner's field in the lock's hash.
func (r *reentrant) prepareField(ctx context.Context) (string, error) {
	owner, err := r.prepare(ctx)
	return owner + r.fieldSuffix, err
}

// fail attaches op and the lock's name to err, and makes it match ctx's error once ctx has ended.
func (r *reentrant) fail(ctx context.Context, op string, err error) error {
	name := ""
	if r != nil {
		name = r.name
	}
	return wrapErrCtx(ctx, op, name, err)
}
