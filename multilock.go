package relock

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// Bounds of the random delay between two rounds of a MultiLock: the bound starts at retryDelayMin and
// doubles each round up to retryDelayMax; the delay is uniform below it. RetryDelay's default is the max.
const (
	retryDelayMin = 5 * time.Millisecond
	retryDelayMax = 100 * time.Millisecond
)

// multiReleaseTimeout bounds the release of the parts a failed MultiLock round got.
const multiReleaseTimeout = time.Second

// MultiLock holds several locks as one: all of them or none. Its parts may be of any lock type, on any
// Clients (and so on different Redis servers). It holds no state of its own in Redis.
//
// Each round tries every part at once, in parallel (Redisson's MultiLock goes one by one). If any part is
// not free, the round releases the parts it got, and only those (a part the owner held before keeps its
// hold), waits a random delay, and tries again, until the wait or ctx runs out; so two MultiLocks over
// overlapping parts never deadlock, and one of them gets through. Leases apply to every part as given;
// without a lease every part is kept alive by its Client's watchdog. The owner rule is WithOwner's: the
// caller's owner holds every part, whichever goroutine sends the part's request.
type MultiLock struct {
	composite
}

// NewMultiLock returns the lock that holds all of parts at once. With no parts, or a part that is not one
// of relock's locks, every method returns ErrInvalidOptions; with a nil part, ErrNilClient.
func NewMultiLock(parts ...Lockable) *MultiLock {
	m := &MultiLock{}
	m.init(parts, m.tryLock)
	return m
}

// tryLock is the MultiLock's acquisition. A failure of its first round is returned at once, as an RLock
// reports a failed first attempt; once it waits for other owners it rides out transient errors of its
// parts (a broken connection, a failover) for up to transientGrace, as an RLock's waiter does, and returns
// the last of them if the wait ends first.
func (m *MultiLock) tryLock(ctx context.Context, op string, wait, lease time.Duration) (bool, error) {
	// The bound of the random delay doubles each round, up to retryDelayMax.
	delay := func(round int) time.Duration { return rand.N(min(retryDelayMin<<min(round-1, 10), retryDelayMax)) }
	var (
		round        int
		troubleSince time.Time // when rounds began to fail for transient errors
		lastErr      error     // the transient error of the last round, ridden out
	)
	return m.acquire(ctx, op, kindMulti, wait, delay, func(ctx context.Context) (bool, error) {
		round++
		ok, err := m.round(ctx, lease)
		lastErr = nil
		if err == nil || round == 1 || !transient(err) || ctx.Err() != nil {
			troubleSince = time.Time{}
			return ok, err
		}
		if troubleSince.IsZero() {
			troubleSince = time.Now()
		} else if time.Since(troubleSince) > transientGrace {
			return false, err
		}
		lastErr = err
		return false, nil
	}, func(ok bool, err error) error {
		if !ok && err == nil && lastErr != nil {
			return lastErr
		}
		return err
	})
}

// round tries every part at once; unless it got them all, it releases what it got.
func (m *MultiLock) round(ctx context.Context, lease time.Duration) (bool, error) {
	got := make([]bool, len(m.parts))
	errs := make([]error, len(m.parts))
	m.fanOut(func(i int, p *RLock) {
		got[i], errs[i] = p.TryLock(ctx, 0, lease)
	})
	all := true
	for _, ok := range got {
		all = all && ok
	}
	if all {
		return true, nil
	}
	m.release(ctx, got, errs, multiReleaseTimeout)
	return false, errors.Join(errs...)
}

// Unlock releases one hold of every part, in parallel, and returns every failure (errors.Join): ErrNotHeld
// for a part the owner did not hold, and the errors of the others. Like a part's Unlock, it releases even
// when ctx has ended (in the background; see RLock.Unlock), and then returns errors matching ctx.Err().
func (m *MultiLock) Unlock(ctx context.Context) error {
	ctx, err := m.owner(ctx)
	if err != nil {
		return wrapErrCtx(ctx, "unlock", m.name, err)
	}
	errs := make([]error, len(m.parts))
	m.fanOut(func(i int, p *RLock) { errs[i] = p.Unlock(ctx) })
	return errors.Join(errs...)
}

// HoldContext returns a context, derived from ctx, that is cancelled (just after, in another goroutine)
// when the owner's hold on any part ends: with a cause matching ErrLockLost if that part was lost,
// context.Canceled if released. It returns ErrNotHeld unless the owner holds every part. Calling it again
// with the same ctx returns the same context, and costs no memory.
func (m *MultiLock) HoldContext(ctx context.Context) (context.Context, error) {
	octx, err := m.check(ctx)
	if err != nil {
		return nil, wrapErrCtx(ctx, "holdcontext", m.name, err)
	}
	held := make([]context.Context, len(m.parts))
	for i, p := range m.parts {
		if held[i], err = p.holdDone(octx); err != nil {
			return nil, wrapErrCtx(ctx, "holdcontext", m.name, err)
		}
	}
	// Any part's end ends the whole hold, with that part's cause.
	return m.holds.watch(ctx, octx, held, func(_ int, cause error) error { return cause }), nil
}

var _ Locker = (*MultiLock)(nil)
