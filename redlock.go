package relock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"
)

// RedLockOptions configures a RedLock. The zero value, and a nil *RedLockOptions, are valid. A negative
// duration makes every method of the RedLock return ErrInvalidDuration.
type RedLockOptions struct {
	// NodeTimeout bounds each node's part of an attempt, so that a dead or stalled node costs this much,
	// not the caller's wait. Zero means TTL/20, within [10 ms, 500 ms], where TTL is the lease or, without
	// one, the parts' watchdog timeout.
	NodeTimeout time.Duration

	// Drift is the clock drift the validity of a hold allows for. Zero means TTL/100 + 2 ms.
	Drift time.Duration

	// RetryDelay bounds the random delay between two attempts. Zero means 100 ms.
	RetryDelay time.Duration
}

// RedLock is the Redlock algorithm over N independent Redis masters: a lock held when a majority (N/2+1)
// of its parts are, each part a lock on its own Client and server (usually RLocks of the same name).
//
// An attempt starts all N acquisitions together, each bounded by NodeTimeout; it stops early once more
// than N-(N/2+1) nodes failed. It succeeds when a majority acquired and the time it took is less than the
// TTL; the hold is then valid for TTL - elapsed - drift (Validity, on the monotonic clock). A failed attempt
// releases the lock on every node, those that reported failure included (their reply may have been lost),
// and the next attempt follows a random delay. Without a lease each part is renewed by its Client's
// watchdog, so extensions go to every node; the hold is lost (HoldContext cancelled with ErrLockLost) when
// fewer than a majority of parts are still held. Reentrancy is as for the parts.
//
// RedLock has no fencing token. Each node's counter is its own, and a majority of independent counters
// does not give one increasing sequence: two holders in turn may see the same or a smaller value on the
// nodes they reached. (See Kleppmann's critique of Redlock.) Where correctness must survive pauses and
// clock jumps, use a fenced lock on one Redis whose durability you trust (WithFencing), or a consensus
// system's revision (etcd, ZooKeeper), and have the storage check it.
type RedLock struct {
	composite
	quorum int
	opts   RedLockOptions
}

// NewRedLock returns the lock held when a majority of parts are. Each part should live on its own,
// independent Redis master; with no parts, or a part that is not one of relock's locks, every method
// returns ErrInvalidOptions; with a nil part, ErrNilClient.
func NewRedLock(parts []Lockable, opts *RedLockOptions) *RedLock {
	r := &RedLock{quorum: len(parts)/2 + 1}
	if opts != nil {
		r.opts = *opts
	}
	r.init(parts, r.tryLock)
	return r
}

// ttl is how long an acquisition with this lease lives on the parts: the lease, or the shortest watchdog
// timeout among the parts' Clients.
func (r *RedLock) ttl(lease time.Duration) time.Duration {
	if lease > 0 {
		return roundUpToMillis(lease)
	}
	ttl := time.Duration(0)
	for _, p := range r.parts {
		if t := p.c.watchdogTimeout; ttl == 0 || t < ttl {
			ttl = t
		}
	}
	return ttl
}

func (r *RedLock) nodeTimeout(ttl time.Duration) time.Duration {
	if r.opts.NodeTimeout > 0 {
		return r.opts.NodeTimeout
	}
	return min(max(ttl/20, 10*time.Millisecond), 500*time.Millisecond)
}

func (r *RedLock) drift(ttl time.Duration) time.Duration {
	if r.opts.Drift > 0 {
		return r.opts.Drift
	}
	return ttl/100 + 2*time.Millisecond
}

// check validates the options, the parts and ctx (see composite.check).
func (r *RedLock) check(ctx context.Context) (context.Context, error) {
	if err := r.checkOptions(); err != nil {
		return ctx, err
	}
	return r.composite.check(ctx)
}

func (r *RedLock) checkOptions() error {
	if r.opts.NodeTimeout < 0 || r.opts.Drift < 0 || r.opts.RetryDelay < 0 {
		return ErrInvalidDuration
	}
	return nil
}

// tryLock is the RedLock's acquisition. Lock reports node failures (ErrNoQuorum) at its first round, as an
// RLock reports a failed first attempt. Once it waits for other owners it rides them out, as an RLock's
// waiter rides out transient errors, for up to transientGrace: a node slower than the node timeout now
// and then (a loaded machine, a failover) must not end a long wait.
func (r *RedLock) tryLock(ctx context.Context, op string, wait, lease time.Duration) (bool, error) {
	if err := r.checkOptions(); err != nil {
		return false, wrapErrCtx(ctx, op, r.name, err)
	}
	var (
		lastNodeErr  error
		round        int
		troubleSince time.Time // when rounds began to fail for node errors
	)
	delay := func(int) time.Duration { return rand.N(r.retryDelay()) }
	return r.acquire(ctx, op, kindRedLock, wait, delay, func(ctx context.Context) (bool, error) {
		round++
		ok, nodeErr, err := r.round(ctx, lease)
		lastNodeErr = nodeErr
		if nodeErr == nil {
			troubleSince = time.Time{}
		} else if wait < 0 {
			if troubleSince.IsZero() {
				troubleSince = time.Now()
			}
			if round == 1 || time.Since(troubleSince) > transientGrace {
				return false, fmt.Errorf("%w: %w", ErrNoQuorum, nodeErr)
			}
		}
		return ok, err
	}, func(ok bool, err error) error {
		if !ok && err == nil && lastNodeErr != nil {
			return fmt.Errorf("%w: %w", ErrNoQuorum, lastNodeErr)
		}
		return err
	})
}

func (r *RedLock) retryDelay() time.Duration {
	if r.opts.RetryDelay > 0 {
		return r.opts.RetryDelay
	}
	return retryDelayMax
}

// round is one attempt of the algorithm. nodeErr reports the errors of nodes that failed, when they cost
// the majority (rather than other owners holding the lock); err is the caller's context ending, or an
// error no retry can mend.
func (r *RedLock) round(ctx context.Context, lease time.Duration) (ok bool, nodeErr, err error) {
	ttl := r.ttl(lease)
	n, limit := len(r.parts), len(r.parts)-r.quorum
	start := time.Now()
	roundCtx, stop := context.WithCancel(ctx)
	defer stop()
	got := make([]bool, n)
	errs := make([]error, n)
	var failed atomic.Int32
	r.fanOut(func(i int, p *RLock) {
		// The node timeout runs from when the part starts: on a loaded machine a part may start late.
		nodeCtx, cancel := context.WithTimeout(roundCtx, r.nodeTimeout(ttl))
		defer cancel()
		got[i], errs[i] = p.TryLock(nodeCtx, 0, lease)
		if !got[i] && int(failed.Add(1)) > limit {
			stop() // a majority is out of reach: do not wait for the rest
		}
	})
	elapsed := time.Since(start)
	acquired, held := 0, 0
	var nodeErrs []error
	for i, g := range got {
		switch {
		case g:
			acquired++
		case errs[i] == nil:
			held++ // by another owner
		case roundCtx.Err() != nil && ctx.Err() == nil && errors.Is(errs[i], context.Canceled):
			// stopped early by this round: unknown
		case permanent(errs[i]):
			r.release(ctx, got, errs, r.nodeTimeout(ttl))
			return false, nil, errs[i]
		default:
			nodeErrs = append(nodeErrs, errs[i])
		}
	}
	if acquired >= r.quorum && ttl-elapsed-r.drift(ttl) > 0 {
		return true, nil, nil
	}
	// Release what this round acquired, and only that: a node whose attempt failed with an unknown outcome
	// undoes it itself (only if it did take a hold level), and a hold the owner had before (a reentrant
	// acquisition) is left as it was.
	r.release(ctx, got, errs, r.nodeTimeout(ttl))
	if ctx.Err() != nil {
		return false, nil, ctx.Err()
	}
	// Node errors cost the majority when the nodes that answered (acquired, or held by another owner)
	// are too few for one: with as many answering, the lock would not have been had either way.
	if len(nodeErrs) > 0 && acquired+held < r.quorum {
		return false, errors.Join(nodeErrs...), nil
	}
	return false, nil, nil
}

// Unlock releases the owner's hold on every node, in parallel, each within the node timeout. It returns
// ErrNotHeld when no node had it, nil when a majority released it or every other node did not have it,
// and otherwise the errors of the nodes that failed (errors.Join); a node that did not answer completes
// the release in the background (see RLock.Unlock), or drops the hold when it expires.
//
// Like a part's Unlock, it releases even when ctx has ended (in the background; see RLock.Unlock), and then
// returns an error matching ctx.Err().
func (r *RedLock) Unlock(ctx context.Context) error {
	err := r.checkOptions()
	octx := ctx
	if err == nil {
		octx, err = r.owner(ctx)
	}
	if err != nil {
		return wrapErrCtx(ctx, "unlock", r.name, err)
	}
	errs := make([]error, len(r.parts))
	r.fanOut(func(i int, p *RLock) {
		nodeCtx, cancel := context.WithTimeout(octx, r.nodeTimeout(r.ttl(0))) // a stalled node must not hold up the rest
		defer cancel()
		errs[i] = p.Unlock(nodeCtx)
	})
	released, notHeld := 0, 0
	var failures []error
	for _, e := range errs {
		switch {
		case e == nil:
			released++
		case errors.Is(e, ErrNotHeld):
			notHeld++
		default:
			failures = append(failures, e)
		}
	}
	switch {
	case released == 0 && len(failures) == 0:
		return wrapErrCtx(ctx, "unlock", r.name, r.notHeld(octx))
	case ctx.Err() != nil:
		return wrapErrCtx(ctx, "unlock", r.name, errors.Join(failures...))
	case released >= r.quorum || len(failures) == 0:
		return nil
	}
	return errors.Join(failures...)
}

// HoldContext returns a context, derived from ctx, for the owner's hold. It is cancelled with a cause
// matching ErrLockLost when fewer than a majority of the parts are still held (the others lost: their
// node died, restarted or stalled past the hold's expiry), and with context.Canceled when the owner
// unlocks. It returns ErrNotHeld unless the owner holds a majority of the parts.
func (r *RedLock) HoldContext(ctx context.Context) (context.Context, error) {
	octx, err := r.check(ctx)
	if err != nil {
		return nil, wrapErrCtx(ctx, "holdcontext", r.name, err)
	}
	var held []context.Context
	for _, p := range r.parts {
		if h, err := p.holdDone(octx); err == nil {
			held = append(held, h)
		}
	}
	if len(held) < r.quorum {
		return nil, wrapErrCtx(ctx, "holdcontext", r.name, r.notHeld(octx))
	}
	return r.holds.watch(ctx, octx, held, func(lost int, cause error) error {
		switch {
		case !errors.Is(cause, ErrLockLost):
			return cause // released
		case len(held)-lost < r.quorum:
			return fmt.Errorf("%w: held on fewer than %d of %d nodes (%w)", ErrLockLost, r.quorum, len(r.parts), cause)
		}
		return nil
	}), nil
}

// Validity returns how much longer the owner's hold is sure to last: the time until all but a minority of
// the parts could have expired (the majority-th latest expiry, measured from when each acquisition or
// renewal was sent), less the drift. It returns ErrNotHeld unless the owner holds a majority of the parts.
// Without a lease, renewals keep extending it.
func (r *RedLock) Validity(ctx context.Context) (time.Duration, error) {
	ctx, err := r.check(ctx)
	if err != nil {
		return 0, wrapErrCtx(ctx, "validity", r.name, err)
	}
	var expiries []time.Time
	ttl := time.Duration(0)
	for _, p := range r.parts {
		if at, holdTTL, ok := p.expiry(ctx); ok {
			expiries = append(expiries, at)
			ttl = max(ttl, holdTTL)
		}
	}
	if len(expiries) < r.quorum {
		return 0, wrapErrCtx(ctx, "validity", r.name, ErrNotHeld)
	}
	slices.SortFunc(expiries, func(a, b time.Time) int { return b.Compare(a) })
	return max(time.Until(expiries[r.quorum-1])-r.drift(ttl), 0), nil
}

var _ Locker = (*RedLock)(nil)
