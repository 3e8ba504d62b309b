package relock

import (
	"context"
	"time"

	"github.com/relock-go/relock/internal/invariant"
)

// Background work: what a Client completes after its caller has gone (a release whose context ended, the
// undo of an acquisition whose reply was lost, a give-back), under the Client's lifetime, tried again until
// Redis answers. Close waits for it (see shutdown.go).

// retryAttemptTimeout bounds one attempt of a background retry (retryUnknown), and retryBackoff is the
// pause between attempts.
const (
	retryAttemptTimeout = time.Second
	retryBackoff        = 50 * time.Millisecond
)

// goBackground runs fn under the Client's lifetime; Close waits for it, up to its bound, then ends that
// lifetime. It reports false, without running fn, once Close has ended the Client's lifetime.
func (c *Client) goBackground(fn func(ctx context.Context)) bool {
	if !c.bg.enter() {
		return false
	}
	go func() {
		defer c.bg.leave()
		fn(c.life)
	}()
	return true
}

// mustRun runs fn as goBackground does, for work that must reach Redis (the undo of an acquisition, a
// release completed in the background): Close waits for the operations that start it, so that it is
// refused only once Close gave up waiting or the Client was abandoned; refused otherwise, in test binaries,
// it fails (a hold Redis may have would be left to its TTL). It reports whether fn runs.
func (c *Client) mustRun(what string, fn func(ctx context.Context)) bool {
	if c.goBackground(fn) {
		return true
	}
	if invariant.On() && !c.stoppedShort.Load() {
		invariant.Failf("%s dropped: the Client ended while the operation that started it was under way", what)
	}
	return false
}

// retryUnknown runs call until Redis answers it (see retry; call must be safe to repeat: an attempt whose
// outcome is unknown may have run), the deadline passes (a zero deadline: never) or life ends, and returns
// the last reply, or -1 when none came.
func (c *Client) retryUnknown(life context.Context, deadline time.Time, call func(ctx context.Context) (int64, error)) int64 {
	n, err := c.retry(life, deadline, true, call)
	if err != nil {
		return -1
	}
	return n
}

// retry runs call until Redis answers it, the deadline passes or life ends, and returns the last reply and
// error. An attempt is made again after an error that shows it did not run (a connection that could not be
// made; a server loading its data after a restart, or a cluster failing over, answers LOADING, TRYAGAIN,
// CLUSTERDOWN or MASTERDOWN without running it) and, when repeatable, after one whose outcome is unknown:
// call must then be safe to repeat, for such an attempt may have run. Each attempt gets at most
// retryAttemptTimeout, a deadline that also bounds the re-dial it may start (rueidis dials under the
// context of the call that found the connection broken, and makes other calls wait for that dial).
func (c *Client) retry(life context.Context, deadline time.Time, repeatable bool, call func(ctx context.Context) (int64, error)) (int64, error) {
	for {
		attemptDeadline := time.Now().Add(retryAttemptTimeout)
		if !deadline.IsZero() && deadline.Before(attemptDeadline) {
			attemptDeadline = deadline
		}
		ctx, cancel := context.WithDeadline(life, attemptDeadline)
		n, err := call(ctx)
		cancel()
		if err == nil {
			return n, nil
		}
		again := didNotRun(err) || repeatable && (outcomeUnknown(err) || transient(err))
		if !again || !deadline.IsZero() && time.Now().After(deadline) {
			return -1, err
		}
		select {
		case <-life.Done():
			return -1, err
		case <-time.After(retryBackoff):
		}
	}
}
