package relock

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// CountDownLatch is a count-down latch in Redisson's RCountDownLatch layout: the count, a string, at the
// latch's name while it is above zero, and its changes announced on
// "redisson_countdownlatch__channel__{name}" ("0" when it opens, "1" when a count is set). Java services
// using Redisson and Go services using relock share one latch.
//
// Await waits until the count reaches zero, woken by the announcement, never by polling; every waiter of
// every Client wakes then. A latch that opened can be set again (TrySetCount). Every operation is one
// script run or command.
//
// A woken waiter reads the count before it returns: a latch set again right after it opened, before its
// waiters have read it, is missed by them, and they wait for its next opening. Redisson's waiters have the
// same window. Set a latch again only once its waiters are known to have returned, or use a new name for
// each round.
type CountDownLatch struct {
	syncObject
}

// CountDownLatch returns the latch called name. Its name may not contain "{" or "}" (ErrInvalidName):
// Redisson's channel for it wraps the name in braces, which on Redis Cluster must give the name's own slot.
func (c *Client) CountDownLatch(name string) *CountDownLatch {
	return &CountDownLatch{newSyncObject(c, kindLatch, name, "redisson_countdownlatch__channel__{"+name+"}")}
}

// Name returns the latch's name, its key in Redis ("" for a nil *CountDownLatch).
func (l *CountDownLatch) Name() string {
	if l == nil {
		return ""
	}
	return l.name
}

// check validates the latch and ctx before a call.
func (l *CountDownLatch) check(ctx context.Context) error {
	if l == nil {
		return ErrNilClient
	}
	return l.syncObject.check(ctx, l.name != "" && !strings.ContainsAny(l.name, "{}"))
}

// latchWakes is a latch channel's wake policy: it opened ("0"), so every waiter looks; a new count ("1")
// wakes nobody.
func latchWakes(message string) int {
	if message == "0" {
		return -1
	}
	return 0
}

// TrySetCount sets the count if the latch is open (its count is zero: it was never set, or counted down
// to zero), and reports whether it did. count must be above zero (ErrInvalidCount).
func (l *CountDownLatch) TrySetCount(ctx context.Context, count int64) (bool, error) {
	if err := l.check(ctx); err != nil {
		return false, wrapErrCtx(ctx, "trysetcount", l.Name(), err)
	}
	if count < 1 {
		return false, wrapErrCtx(ctx, "trysetcount", l.Name(), ErrInvalidCount)
	}
	set, err := l.announce(ctx, "relock.latch.trysetcount", scriptLatchSet, strconv.FormatInt(count, 10))
	return set == 1, wrapErrCtx(ctx, "trysetcount", l.Name(), err)
}

// CountDown counts the latch down by one; at zero it opens and wakes every waiter. Counting down an open
// latch does nothing.
func (l *CountDownLatch) CountDown(ctx context.Context) error {
	if err := l.check(ctx); err != nil {
		return wrapErrCtx(ctx, "countdown", l.Name(), err)
	}
	_, err := l.announce(ctx, "relock.latch.countdown", scriptLatchCountDown)
	return wrapErrCtx(ctx, "countdown", l.Name(), err)
}

// Count returns the count (0 once the latch is open).
func (l *CountDownLatch) Count(ctx context.Context) (int64, error) {
	if err := l.check(ctx); err != nil {
		return 0, wrapErrCtx(ctx, "count", l.Name(), err)
	}
	n, err := l.value(ctx)
	return n, wrapErrCtx(ctx, "count", l.Name(), err)
}

// Await waits until the latch is open (its count is zero) or ctx ends (its error is then returned,
// matching ctx.Err()). An opening that a TrySetCount undoes before Await has read the count is missed
// (see CountDownLatch).
func (l *CountDownLatch) Await(ctx context.Context) error {
	open, err := l.await(ctx, "await", -1)
	if err == nil && !open {
		err = wrapErrCtx(ctx, "await", l.Name(), context.Cause(ctx))
	}
	return err
}

// TryAwait waits at most wait for the latch to open (0: only checks), and reports whether it did: false,
// with a nil error, when wait ran out. A negative wait is ErrInvalidDuration. Its arguments follow the
// package's order (see Arguments in the package doc): the context, then the wait.
func (l *CountDownLatch) TryAwait(ctx context.Context, wait time.Duration) (bool, error) {
	if wait < 0 {
		return false, wrapErrCtx(ctx, "tryawait", l.Name(), ErrInvalidDuration)
	}
	return l.await(ctx, "tryawait", wait)
}

func (l *CountDownLatch) await(ctx context.Context, op string, wait time.Duration) (bool, error) {
	if err := l.check(ctx); err != nil {
		return false, wrapErrCtx(ctx, op, l.Name(), err)
	}
	open, err := l.c.acquire(ctx, &acquireOp{kind: kindLatch, name: l.name, channel: l.channel, wakes: latchWakes, wait: wait},
		func(ctx context.Context) (bool, time.Duration, bool, error) {
			n, err := l.value(ctx)
			return err == nil && n <= 0, -1, false, err
		})
	return open, wrapErrCtx(ctx, op, l.Name(), err)
}
