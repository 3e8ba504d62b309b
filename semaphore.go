package relock

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
)

// Semaphore is a counting semaphore in Redisson's RSemaphore layout: the number of available permits, a
// string, at the semaphore's name, and its releases announced on "redisson_sc:{name}" with the number of
// permits then available. Java services using Redisson and Go services using relock share one semaphore.
//
// Like Redisson's, its permits have no owner: any caller may release permits, and permits taken by a
// process that dies are not given back, nor those of an Acquire whose reply was lost to a broken connection
// (nothing in Redis tells whether it ran). Such an Acquire fails, saying so, even while it waits: a waiter
// rides out an outage (connections refused, a server loading), but not an attempt of its whose reply was
// lost, as trying again would strand those permits unseen. An Acquire or DrainPermits whose context ends
// while its script is in flight returns at once, but its reply is still awaited, for up to the Client's
// WatchdogTimeout: the permits it took, if it ran, are then given back (Client.Close waits for that, up to
// its bound).
//
// Waiters are woken by the announcements, never by polling: a release of n permits wakes up to n waiters of
// each Client (each Redisson JVM wakes as many), which try again; the order in which waiters get permits is
// not fair. A wake-up its waiter does not use (its context ended, its attempt failed, or it came after the
// waiter got its permits) goes to another waiter of the Client, and a waiter that wants more permits than
// it found free wakes waiters that want fewer. Every operation is one script run.
//
// A Semaphore is a cheap value; make one per use or keep it, as you like. Its methods are safe for
// concurrent use.
type Semaphore struct {
	syncObject
}

// Semaphore returns the semaphore called name. A semaphore that was never set has no permits: set them
// with TrySetPermits (once, whoever comes first) or AddPermits.
func (c *Client) Semaphore(name string) *Semaphore {
	return &Semaphore{newSyncObject(c, kindSemaphore, name, companion("redisson_sc", name))}
}

// Name returns the semaphore's name, its key in Redis ("" for a nil *Semaphore).
func (s *Semaphore) Name() string {
	if s == nil {
		return ""
	}
	return s.name
}

// check validates the semaphore and ctx before a call.
func (s *Semaphore) check(ctx context.Context) error {
	if s == nil {
		return ErrNilClient
	}
	return s.syncObject.check(ctx, validName(s.name))
}

// semaphoreWakes is a semaphore channel's wake policy: a message is the number of permits available, and
// wakes up to that many waiters (Redisson's SemaphorePubSub does the same per JVM).
func semaphoreWakes(message string) int {
	n, err := strconv.Atoi(message)
	if err != nil {
		return 1 // not Redisson's message: let one waiter look
	}
	return max(n, 0)
}

// Acquire takes permits, waiting until enough are available or ctx ends (its error is then returned,
// matching ctx.Err()). permits must be at least 1 (ErrInvalidPermits).
func (s *Semaphore) Acquire(ctx context.Context, permits int) error {
	ok, err := s.tryAcquire(ctx, "acquire", permits, -1)
	if err == nil && !ok {
		err = wrapErrCtx(ctx, "acquire", s.Name(), context.Cause(ctx))
	}
	return err
}

// TryAcquire takes permits if enough become available within wait (0: only if they are now), and
// reports whether it took them: false, with a nil error, when wait ran out. permits must be at least 1
// (ErrInvalidPermits); a negative wait is ErrInvalidDuration. The arguments come in the package's order:
// what is taken (permits), then the wait.
func (s *Semaphore) TryAcquire(ctx context.Context, permits int, wait time.Duration) (bool, error) {
	if wait < 0 {
		return false, wrapErrCtx(ctx, "tryacquire", s.Name(), ErrInvalidDuration)
	}
	return s.tryAcquire(ctx, "tryacquire", permits, wait)
}

func (s *Semaphore) tryAcquire(ctx context.Context, op string, permits int, wait time.Duration) (bool, error) {
	if err := s.check(ctx); err != nil {
		return false, wrapErrCtx(ctx, op, s.Name(), err)
	}
	if permits < 1 {
		return false, wrapErrCtx(ctx, op, s.Name(), ErrInvalidPermits)
	}
	call := scriptCall{script: scriptSemaphoreAcquire, keys: s.counterKeys, args: []string{strconv.Itoa(permits)}}
	ok, err := s.c.acquire(ctx, &acquireOp{kind: kindSemaphore, name: s.name, channel: s.channel, wakes: semaphoreWakes, weight: permits, wait: wait},
		func(ctx context.Context) (bool, time.Duration, bool, error) {
			got, err := s.take(ctx, call, int64(permits))
			return got == 1, -1, false, err // nothing expires: wait for an announcement
		})
	return ok, wrapErrCtx(ctx, op, s.Name(), err)
}

// take runs call, a script that takes permits (its reply times unit of them), and returns its reply. If ctx
// ends while the script is in flight, take returns ctx's error at once, and the reply is awaited in the
// background, for up to the watchdog timeout more: the permits the script took are given back. Without
// this, they would stay taken by nobody for good (a semaphore has no owners and no expiry). A reply lost to
// a broken connection still leaves them taken: nothing in Redis tells whether the script ran, and releasing
// permits it did not take would make up permits.
//
// A failure of the call after the script was sent, whose outcome is unknown, is reported as errReplyLost,
// which the wait loop does not ride out.
func (s *Semaphore) take(ctx context.Context, call scriptCall, unit int64) (int64, error) {
	if ctx.Done() == nil {
		return replyLost(s.c.scripts.runInt(ctx, call))
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	f := &flight{done: make(chan struct{})}
	// The call runs with ctx's values, not its end, as background work: Close waits for it, and for its
	// give-back, up to its bound, and ends it when the Client's lifetime ends.
	callCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if !s.c.goBackground(func(life context.Context) {
		stop := context.AfterFunc(life, cancel)
		defer stop()
		f.reply, f.err = s.c.scripts.runInt(callCtx, call)
		cancel()
		if f.state.CompareAndSwap(flightRunning, flightReturned) {
			close(f.done)
		} else if f.err == nil && f.reply > 0 {
			s.giveBack(life, f.reply*unit) // the caller is gone
		}
	}) {
		cancel()
		return 0, ErrClosed
	}
	select {
	case <-f.done:
	case <-ctx.Done():
		if f.state.CompareAndSwap(flightRunning, flightLeft) {
			time.AfterFunc(s.c.watchdogTimeout, cancel)
			return 0, ctx.Err()
		}
		<-f.done // the reply came first: it is the caller's
	}
	return replyLost(f.reply, f.err)
}

// replyLost passes on a call's reply, its failure marked errReplyLost if the script may have run.
func replyLost(n int64, err error) (int64, error) {
	if err != nil && mayHaveRun(err) {
		err = fmt.Errorf("%w: %w", errReplyLost, err)
	}
	return n, err
}

// flight is a script call that may outlive its caller (Semaphore.take): whichever of the call and the
// caller moves its state first decides who owns the reply.
type flight struct {
	state atomic.Int32 // flightRunning, then flightReturned or flightLeft
	done  chan struct{}
	reply int64
	err   error
}

const (
	flightRunning  = iota
	flightReturned // the reply is the caller's: done is closed
	flightLeft     // the caller returned ctx's error: the reply is the call's to settle
)

// giveBack releases permits an acquisition took after its caller gave up, for up to the watchdog timeout
// (Close ends it at its bound). It tries again after an error that shows the release did not run (a refused
// connection, LOADING), not after one whose outcome is unknown: a release that may have run is not sent
// again, for it would make up permits.
func (s *Semaphore) giveBack(life context.Context, permits int64) {
	_, _ = s.c.retry(life, time.Now().Add(s.c.watchdogTimeout), false, func(ctx context.Context) (int64, error) {
		return s.announce(ctx, "relock.semaphore.giveback", scriptSemaphoreRelease, strconv.FormatInt(permits, 10))
	})
}

// Release gives permits back (at least 1: ErrInvalidPermits) and wakes waiters. The semaphore does not
// check that the caller took them: like Redisson's, it has no owners. A Release that failed after it was
// sent (the connection broke) may have run: sending it again could make up permits.
func (s *Semaphore) Release(ctx context.Context, permits int) error {
	if permits < 1 {
		return wrapErrCtx(ctx, "release", s.Name(), ErrInvalidPermits)
	}
	_, err := s.add(ctx, "release", permits)
	return err
}

// AddPermits adds permits to the semaphore, or, when permits is negative, takes that many away (the count
// may then go below zero: acquisitions wait until releases bring it back up). Zero is ErrInvalidPermits.
func (s *Semaphore) AddPermits(ctx context.Context, permits int) error {
	if permits == 0 {
		return wrapErrCtx(ctx, "addpermits", s.Name(), ErrInvalidPermits)
	}
	_, err := s.add(ctx, "addpermits", permits)
	return err
}

// add runs the release script, in a span, and returns the permits then available.
func (s *Semaphore) add(ctx context.Context, op string, permits int) (int64, error) {
	if err := s.check(ctx); err != nil {
		return 0, wrapErrCtx(ctx, op, s.Name(), err)
	}
	available, err := s.announce(ctx, "relock.semaphore."+op, scriptSemaphoreRelease, strconv.Itoa(permits))
	return available, wrapErrCtx(ctx, op, s.Name(), err)
}

// TrySetPermits sets the semaphore's permits if it was never set, and reports whether it did: of many
// processes starting at once, one sets them. permits must not be negative (ErrInvalidPermits).
func (s *Semaphore) TrySetPermits(ctx context.Context, permits int) (bool, error) {
	if err := s.check(ctx); err != nil {
		return false, wrapErrCtx(ctx, "trysetpermits", s.Name(), err)
	}
	if permits < 0 {
		return false, wrapErrCtx(ctx, "trysetpermits", s.Name(), ErrInvalidPermits)
	}
	set, err := s.announce(ctx, "relock.semaphore.trysetpermits", scriptSemaphoreSet, strconv.Itoa(permits))
	return set == 1, wrapErrCtx(ctx, "trysetpermits", s.Name(), err)
}

// AvailablePermits returns the number of permits available now (0 for a semaphore never set).
func (s *Semaphore) AvailablePermits(ctx context.Context) (int, error) {
	if err := s.check(ctx); err != nil {
		return 0, wrapErrCtx(ctx, "availablepermits", s.Name(), err)
	}
	n, err := s.value(ctx)
	return int(n), wrapErrCtx(ctx, "availablepermits", s.Name(), err)
}

// DrainPermits takes every available permit and returns how many it took. When the count is below zero
// (AddPermits took away more permits than were available), DrainPermits sets it to zero, as Redisson's
// drainPermits does, and returns the negative count it found: the permits owed are forgiven.
func (s *Semaphore) DrainPermits(ctx context.Context) (int, error) {
	if err := s.check(ctx); err != nil {
		return 0, wrapErrCtx(ctx, "drainpermits", s.Name(), err)
	}
	n, err := s.take(ctx, scriptCall{script: scriptSemaphoreDrain, keys: s.counterKeys}, 1)
	return int(n), wrapErrCtx(ctx, "drainpermits", s.Name(), err)
}
