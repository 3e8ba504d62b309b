package relock

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// Lockable is a lock that MultiLock and RedLock can be made of: any of relock's lock types (RLock,
// FairLock, ReadLock, WriteLock), on one Client or on several.
type Lockable interface {
	Locker
	TryLock(ctx context.Context, wait, lease time.Duration) (bool, error)
	Name() string
	core() *reentrant
}

var (
	_ Lockable = (*RLock)(nil)
	_ Lockable = (*FairLock)(nil)
	_ Lockable = (*ReadLock)(nil)
	_ Lockable = (*WriteLock)(nil)
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
// not free, the round releases the parts it got, waits a random delay, and tries again, until the wait or
// ctx runs out; so two MultiLocks over overlapping parts never deadlock, and one of them gets through.
// Leases apply to every part as given; without a lease every part is kept alive by its Client's
// watchdog. The owner rule is WithOwner's: the caller's owner holds every part, whichever goroutine sends
// the part's request.
type MultiLock struct {
	parts []Lockable
	name  string
	holds holdWatches
}

// NewMultiLock returns the lock that holds all of parts at once. With no parts, or a nil part, every
// method returns ErrInvalidOptions or ErrNilClient.
func NewMultiLock(parts ...Lockable) *MultiLock {
	return &MultiLock{parts: parts, name: partNames(parts)}
}

func partNames(parts []Lockable) string {
	names := make([]string, 0, len(parts))
	for _, p := range parts {
		if p != nil && p.core() != nil {
			names = append(names, p.Name())
		}
	}
	return strings.Join(names, ",")
}

// checkParts validates the parts and ctx, and returns ctx carrying the caller's owner for the parts.
func checkParts(ctx context.Context, parts []Lockable) (context.Context, error) {
	if err := ctx.Err(); err != nil {
		return ctx, err
	}
	return partsOwner(ctx, parts)
}

// partsOwner validates the parts, and returns ctx carrying the caller's owner for the parts, whether or not
// ctx has ended (an Unlock releases even then).
func partsOwner(ctx context.Context, parts []Lockable) (context.Context, error) {
	if len(parts) == 0 {
		return ctx, ErrInvalidOptions
	}
	for _, p := range parts {
		if p == nil || p.core() == nil {
			return ctx, ErrNilClient
		}
		if err := p.core().usable(); err != nil {
			return ctx, err
		}
	}
	return withResolvedOwner(ctx)
}

// partsClosed returns a channel closed as soon as the Client of any part is closed, and the function that
// stops watching.
func partsClosed(parts []Lockable) (<-chan struct{}, func()) {
	closed := make(chan struct{})
	var once sync.Once
	var stops []func() bool
	seen := make(map[*Client]bool)
	for _, p := range parts {
		if c := p.core().c; !seen[c] {
			seen[c] = true
			stops = append(stops, context.AfterFunc(c.life, func() { once.Do(func() { close(closed) }) }))
		}
	}
	return closed, func() {
		for _, stop := range stops {
			stop()
		}
	}
}

// Lock acquires every part for the owner of ctx, waiting as long as ctx allows. Without a lease, the
// parts are kept alive by their Clients' watchdogs until Unlock.
func (m *MultiLock) Lock(ctx context.Context) error {
	_, err := m.tryLock(ctx, "lock", -1, 0)
	return err
}

// LockWithLease is Lock with a lease on every part. lease must be positive (ErrInvalidDuration
// otherwise).
func (m *MultiLock) LockWithLease(ctx context.Context, lease time.Duration) error {
	if lease <= 0 {
		return wrapErrCtx(ctx, "lock", m.name, ErrInvalidDuration)
	}
	_, err := m.tryLock(ctx, "lock", -1, lease)
	return err
}

// TryLock tries to acquire every part, waiting up to wait (0: one round); lease as for RLock.TryLock. It
// reports false, with a nil error, when wait ran out; the owner then holds none of the parts it did not
// hold before.
func (m *MultiLock) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if wait < 0 || lease < 0 {
		return false, wrapErrCtx(ctx, "trylock", m.name, ErrInvalidDuration)
	}
	return m.tryLock(ctx, "trylock", wait, lease)
}

func (m *MultiLock) tryLock(ctx context.Context, op string, wait, lease time.Duration) (bool, error) {
	ctx, err := checkParts(ctx, m.parts)
	if err != nil {
		return false, wrapErrCtx(ctx, op, m.name, err)
	}
	tel, start := m.parts[0].core().c.tel, time.Now()
	ctx, span := tel.startSpan(ctx, "relock.acquire", kindMulti, m.name)
	// The bound of the random delay doubles each round, up to retryDelayMax.
	delay := func(round int) time.Duration { return rand.N(min(retryDelayMin<<min(round-1, 10), retryDelayMax)) }
	ok, rounds, err := retryRounds(ctx, m.parts, wait, delay, func(ctx context.Context) (bool, error) { return m.round(ctx, lease) })
	o := acquireOutcome(ok, err)
	tel.acquired(ctx, kindMulti, o, time.Since(start))
	endSpan(span, o, err, AttrAttempts.Int(rounds), AttrWaitMS.Float64(millis(time.Since(start))))
	if err != nil {
		return false, wrapErrCtx(ctx, op, m.name, err)
	}
	return ok, nil
}

// round tries every part at once; unless it got them all, it releases what it got, and only that: a part
// whose attempt failed with an unknown outcome undoes it itself, and a part the owner held before keeps
// that hold.
func (m *MultiLock) round(ctx context.Context, lease time.Duration) (bool, error) {
	got := make([]bool, len(m.parts))
	errs := make([]error, len(m.parts))
	fanOut(m.parts, func(i int, p Lockable) {
		got[i], errs[i] = p.TryLock(ctx, 0, lease)
	})
	all := true
	for _, ok := range got {
		all = all && ok
	}
	if all {
		return true, nil
	}
	releaseParts(ctx, m.parts, got, multiReleaseTimeout)
	return false, errors.Join(errs...)
}

// retryRounds runs round until it succeeds or fails with an error, sleeping delay(n) after the n-th
// failed round, until wait (< 0: no limit; 0: one round) or ctx runs out, or the Client of a part is
// closed (ErrClosed, at once). It returns how many rounds ran.
func retryRounds(ctx context.Context, parts []Lockable, wait time.Duration, delay func(n int) time.Duration, round func(context.Context) (bool, error)) (bool, int, error) {
	closed, stop := partsClosed(parts)
	defer stop()
	var deadline time.Time
	if wait > 0 {
		deadline = time.Now().Add(wait)
	}
	for n := 1; ; n++ {
		ok, err := round(ctx)
		if ok || err != nil || wait == 0 {
			return ok, n, err
		}
		d := delay(n)
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return false, n, nil
			}
			d = min(d, left)
		}
		timer := time.NewTimer(d)
		select {
		case <-ctx.Done():
			timer.Stop()
			return false, n, ctx.Err()
		case <-closed:
			timer.Stop()
			return false, n, ErrClosed
		case <-timer.C:
		}
	}
}

// fanOut runs fn for every part at once and waits for all of them.
func fanOut(parts []Lockable, fn func(i int, p Lockable)) {
	var g errgroup.Group
	for i, p := range parts {
		g.Go(func() error {
			fn(i, p)
			return nil
		})
	}
	_ = g.Wait()
}

// releaseParts unlocks the parts marked in got (nil: all), at once, even if ctx has ended, each within
// timeout: a part whose server does not answer in time completes its release in the background (see
// RLock.Unlock).
func releaseParts(ctx context.Context, parts []Lockable, got []bool, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	fanOut(parts, func(i int, p Lockable) {
		if got == nil || got[i] {
			_ = p.Unlock(ctx)
		}
	})
}

// Unlock releases one hold of every part, in parallel, and returns every failure (errors.Join): ErrNotHeld
// for a part the owner did not hold, and the errors of the others. Like a part's Unlock, it releases even
// when ctx has ended (in the background; see RLock.Unlock), and then returns errors matching ctx.Err().
func (m *MultiLock) Unlock(ctx context.Context) error {
	ctx, err := partsOwner(ctx, m.parts)
	if err != nil {
		return wrapErrCtx(ctx, "unlock", m.name, err)
	}
	errs := make([]error, len(m.parts))
	fanOut(m.parts, func(i int, p Lockable) { errs[i] = p.Unlock(ctx) })
	return errors.Join(errs...)
}

// HoldContext returns a context, derived from ctx, that is cancelled (just after, in another goroutine)
// when the owner's hold on any part ends: with a cause matching ErrLockLost if that part was lost,
// context.Canceled if released. It returns ErrNotHeld unless the owner holds every part. Calling it again
// with the same ctx returns the same context, and costs no memory.
func (m *MultiLock) HoldContext(ctx context.Context) (context.Context, error) {
	octx, err := checkParts(ctx, m.parts)
	if err != nil {
		return nil, wrapErrCtx(ctx, "holdcontext", m.name, err)
	}
	held := make([]context.Context, len(m.parts))
	for i, p := range m.parts {
		if held[i], err = p.core().holdDone(octx); err != nil {
			return nil, wrapErrCtx(ctx, "holdcontext", m.name, err)
		}
	}
	// Any part's end ends the whole hold, with that part's cause.
	return m.holds.watch(ctx, octx, held, func(_ int, cause error) error { return cause }), nil
}

// holdWatches are the contexts a composite's HoldContext made and that have not ended, by owner and
// parent context, so that calling HoldContext again and again with one context costs no memory.
type holdWatches struct {
	mu sync.Mutex
	m  map[holdWatchKey]context.Context
}

type holdWatchKey struct {
	owner  string
	parent context.Context
}

// watch returns a context derived from parent that a part's end may cancel: when the hold behind one of
// held (the parts' own hold contexts) ends, decide gets how many parts have been lost so far and that
// part's cause, and returns the cause to cancel with, or nil to let the hold go on. owned carries the
// owner the parts were resolved for. The context's watches of the parts end with it.
func (w *holdWatches) watch(parent, owned context.Context, held []context.Context, decide func(lost int, cause error) error) context.Context {
	key := holdWatchKey{parent: parent}
	memo := comparableContext(parent)
	if memo {
		key.owner, _ = ownerToken(owned)
		w.mu.Lock()
		if out := w.m[key]; out != nil && out.Err() == nil { // it watches the same holds: any that ended would have ended it
			w.mu.Unlock()
			return out
		}
		w.mu.Unlock()
	}
	out, cancel := context.WithCancelCause(parent)
	stops := watchParts(held, cancel, decide)
	w.mu.Lock()
	if memo {
		if w.m == nil {
			w.m = make(map[holdWatchKey]context.Context)
		}
		w.m[key] = out
	}
	w.mu.Unlock()
	context.AfterFunc(out, func() {
		for _, stop := range stops {
			stop()
		}
		if memo {
			w.mu.Lock()
			if w.m[key] == out {
				delete(w.m, key)
			}
			w.mu.Unlock()
		}
	})
	return out
}

// watchParts calls decide when the hold behind one of held ends, and cancels with the cause it returns, if
// any. It returns the functions that stop watching each part.
func watchParts(held []context.Context, cancel context.CancelCauseFunc, decide func(lost int, cause error) error) []func() bool {
	var lost atomic.Int32
	stops := make([]func() bool, len(held))
	for i, h := range held {
		stops[i] = context.AfterFunc(h, func() {
			cause := context.Cause(h)
			n := int(lost.Load())
			if errors.Is(cause, ErrLockLost) {
				n = int(lost.Add(1))
			}
			if c := decide(n, cause); c != nil {
				cancel(c)
			}
		})
	}
	return stops
}

// acquireOutcome is how an acquisition that returned ok and err ended.
func acquireOutcome(ok bool, err error) outcome {
	switch {
	case ok:
		return outcomeAcquired
	case err == nil:
		return outcomeTimeout
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return outcomeCanceled
	}
	return outcomeError
}

var _ Locker = (*MultiLock)(nil)
