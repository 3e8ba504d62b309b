package relock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// composite is what MultiLock and RedLock share: their parts, and the fan-out, rounds, releases and hold
// contexts of a lock made of locks. Each adds its rule (all of the parts; a majority) and nothing else.
// Each part owns its own uncertain outcomes: a composite releases only what its round acquired.
type composite struct {
	parts []*RLock
	err   error // why the parts cannot work, returned by every method: none, a nil part, a foreign one
	name  string
	holds holdWatches
	// try is the composite's acquisition (MultiLock.tryLock, RedLock.tryLock).
	try func(ctx context.Context, op string, wait, lease time.Duration) (bool, error)
}

// init sets the composite's parts, and the error every method returns if they cannot work.
func (m *composite) init(parts []Lockable, try func(ctx context.Context, op string, wait, lease time.Duration) (bool, error)) {
	m.parts, m.try = make([]*RLock, len(parts)), try
	names := make([]string, 0, len(parts))
	if len(parts) == 0 {
		m.err = errorf("%w: no parts", ErrInvalidOptions)
	}
	for i, p := range parts {
		l, ok := p.(*RLock)
		switch {
		case p == nil || ok && l == nil:
			m.err = ErrNilClient
		case !ok:
			m.err = errorf("%w: part %d is a %T, not one of relock's locks", ErrInvalidOptions, i, p)
		default:
			m.parts[i] = l
			names = append(names, l.Name())
		}
	}
	m.name = strings.Join(names, ",")
}

// Lock acquires the lock for the owner of ctx (every part of a MultiLock; a majority of a RedLock's
// nodes), waiting as long as ctx allows. Without a lease, the parts are kept alive by their Clients'
// watchdogs until Unlock.
func (m *composite) Lock(ctx context.Context) error {
	_, err := m.try(ctx, "lock", -1, 0)
	return err
}

// LockWithLease is Lock with a lease on every part. lease must be positive (ErrInvalidDuration
// otherwise).
func (m *composite) LockWithLease(ctx context.Context, lease time.Duration) error {
	if lease <= 0 {
		return wrapErrCtx(ctx, "lock", m.name, ErrInvalidDuration)
	}
	_, err := m.try(ctx, "lock", -1, lease)
	return err
}

// TryLock tries to acquire the lock, in rounds, for up to wait (0: one round); lease as for RLock.TryLock
// (the package's order: wait, then lease).
// It reports false, with a nil error, when wait ran out; the owner then holds none of the parts it did
// not hold before.
func (m *composite) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if wait < 0 || lease < 0 {
		return false, wrapErrCtx(ctx, "trylock", m.name, ErrInvalidDuration)
	}
	return m.try(ctx, "trylock", wait, lease)
}

// check validates the parts and ctx, and returns ctx carrying the caller's owner for the parts.
func (m *composite) check(ctx context.Context) (context.Context, error) {
	if err := ctx.Err(); err != nil {
		return ctx, err
	}
	return m.owner(ctx)
}

// owner validates the parts, and returns ctx carrying the caller's owner for the parts, whether or not
// ctx has ended (an Unlock releases even then).
func (m *composite) owner(ctx context.Context) (context.Context, error) {
	if m.err != nil {
		return ctx, m.err
	}
	for _, p := range m.parts {
		if err := p.usable(); err != nil {
			return ctx, err
		}
	}
	return withResolvedOwner(ctx)
}

// notHeld is ErrNotHeld for the owner of ctx (as owner resolved it), which holds too few of the parts:
// with the first part's account of who the owner is and who holds that part instead (RLock.notHeld).
func (m *composite) notHeld(ctx context.Context) error {
	p := m.parts[0]
	field, err := p.ownerOf(ctx)
	if err != nil {
		return ErrNotHeld
	}
	return p.notHeld(field)
}

// acquire is a composite's acquisition: rounds (see rounds) in a "relock.acquire" span, with its outcome
// recorded. finish, if not nil, may turn the outcome of the rounds into an error.
func (m *composite) acquire(ctx context.Context, op string, kind lockKind, wait time.Duration, delay func(n int) time.Duration,
	round func(context.Context) (bool, error), finish func(ok bool, err error) error) (bool, error) {
	ctx, err := m.check(ctx)
	if err != nil {
		return false, wrapErrCtx(ctx, op, m.name, err)
	}
	tel, start := m.parts[0].c.tel, time.Now()
	ctx, span := tel.startSpan(ctx, "relock.acquire", kind, m.name)
	ok, rounds, err := m.rounds(ctx, wait, delay, round)
	if finish != nil {
		err = finish(ok, err)
	}
	o := acquireOutcome(ok, err)
	tel.acquired(ctx, kind, o, time.Since(start))
	if span.IsRecording() {
		span.SetAttributes(AttrAttempts.Int(rounds), AttrWaitMS.Float64(millis(time.Since(start))))
	}
	endSpan(span, o, err)
	if err != nil {
		return false, wrapErrCtx(ctx, op, m.name, err)
	}
	return ok, nil
}

// closed returns a channel closed as soon as the Client of any part is closed, and the function that
// stops watching.
func (m *composite) closed() (<-chan struct{}, func()) {
	closed := make(chan struct{})
	var once sync.Once
	var stops []func() bool
	seen := make(map[*Client]bool)
	for _, p := range m.parts {
		if !seen[p.c] {
			seen[p.c] = true
			stops = append(stops, context.AfterFunc(p.c.closing, func() { once.Do(func() { close(closed) }) }))
		}
	}
	return closed, func() {
		for _, stop := range stops {
			stop()
		}
	}
}

// rounds runs round until it succeeds or fails with an error, sleeping delay(n) after the n-th failed
// round, until wait (< 0: no limit; 0: one round) or ctx runs out, or the Client of a part is closed
// (ErrClosed, at once). It returns how many rounds ran.
func (m *composite) rounds(ctx context.Context, wait time.Duration, delay func(n int) time.Duration, round func(context.Context) (bool, error)) (bool, int, error) {
	closed, stop := m.closed()
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

// fanOut runs fn for every part at once, the first on the calling goroutine and the others on their
// Clients' workers, and waits for all of them.
func (m *composite) fanOut(fn func(i int, p *RLock)) {
	var wg sync.WaitGroup
	for i := 1; i < len(m.parts); i++ {
		p := m.parts[i]
		wg.Add(1)
		task := func() {
			defer wg.Done()
			fn(i, p)
		}
		if !p.c.workers.run(task) {
			go task() // the Client is closed: the part's call says so
		}
	}
	fn(0, m.parts[0])
	wg.Wait()
}

// release ends a failed round: it unlocks the parts marked in got, and waits for the parts whose attempt
// may have run unseen (errs) to undo it themselves, each within timeout and ctx. So a failed round leaves
// nothing it took behind, wherever Redis answers in time; a part whose server does not, or whose release
// ctx leaves no time for, completes its release or undo in the background (see RLock.Unlock), and the
// composite call returns by ctx's deadline.
func (m *composite) release(ctx context.Context, got []bool, errs []error, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m.fanOut(func(i int, p *RLock) {
		switch {
		case got[i]:
			_ = p.Unlock(ctx) // releases in the background if ctx has ended
		case errs[i] != nil && mayHaveRun(errs[i]):
			p.settled(ctx)
		}
	})
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
