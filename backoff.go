package relock

import (
	"context"
	"math/rand/v2"
	"time"
)

// The pause after a failure to reach Redis, before the next try: it starts at retryPauseMin and doubles,
// up to retryPauseMax, and starts again after a success. Each pause is drawn between half its value and
// all of it, so that the Clients an outage hit together do not all come back at one instant.
//
// retryPauseMax bounds how long whatever retries (a waiter, the subscription connection, an observer,
// Election.Run) stays unaware that Redis answers again. A try against a server that refuses or resets
// costs little, and the waiters give up after transientGrace, so the bound is kept short.
const (
	retryPauseMin = 50 * time.Millisecond
	retryPauseMax = 500 * time.Millisecond
)

// backoff is the state of one retry loop. Its zero value starts at retryPauseMin.
type backoff struct{ next time.Duration }

// pause returns the pause before the next try, and doubles the one after it.
func (b *backoff) pause() time.Duration {
	d := max(b.next, retryPauseMin)
	b.next = min(2*d, retryPauseMax)
	return d/2 + rand.N(d/2+1)
}

// reset starts the pauses again from retryPauseMin: a try succeeded.
func (b *backoff) reset() { b.next = 0 }

// sleepCtx waits d, or until ctx ends; it reports whether it waited all of d.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
