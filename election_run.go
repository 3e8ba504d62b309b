package relock

import (
	"context"
	"errors"
	"fmt"
)

// Run is the life of a leader-only job: it campaigns for ctx's owner with value, calls fn while the owner
// leads, campaigns again when the leadership is lost, and resigns when fn returns or ctx ends.
//
//   - fn gets a context that ends when the leadership does (LeadershipContext's) and the term, to pass to
//     the stores it writes (see WithFencing). fn must return once its context ends: Run waits for it, and
//     never calls fn again before it returned, so calls of fn never overlap.
//   - A lost leadership does not end Run: fn's context ends with a cause matching ErrLockLost (the process
//     stalled, Redis did not answer in time, someone force-unlocked the election) and, once fn returned,
//     whatever it returned, Run campaigns again; fn is called again, with a new, larger term, when the
//     owner leads again (the Client first gives up what Redis may still hold of the lost leadership).
//   - fn returning while the owner leads ends Run: it resigns, so the next candidate leads at once, and
//     returns fn's error, joined (errors.Join) with the resignation's error if that failed: one matching
//     ErrLockLost when the resignation found the leadership already gone (fn's work may have overlapped the
//     next leader's); otherwise Redis's, and the leadership ends for the Client all the same, its release
//     going on in the background (at worst, it expires within the watchdog timeout). So Run returns nil
//     only when fn returned nil and the resignation went through.
//   - When ctx ends, fn's context ends too, with ctx's cause (not ErrLockLost). Once fn returned, Run
//     resigns without waiting for Redis (as Resign with an ended ctx does: the leadership ends for the
//     Client at once and the release goes on in the background; Close waits for it) and returns an error
//     matching ctx.Err(), joined with fn's error when fn returned another error than its context's.
//   - While Redis cannot be reached (ErrUnavailable), Run campaigns again, waiting between attempts about 50 ms
//     at first, doubling up to 0.5 s, until ctx ends: it then returns an error matching ctx.Err() and the last
//     failure. Any other failure to campaign is returned at once: ErrClosed when the Client is closed,
//     ErrInvalidName, ErrInvalidOwner, a *KindError, an error reply of Redis (NOPERM...).
//
// Close ends the leadership (it resigns): fn's context then ends with a cause matching ErrClosed, and Run
// returns an error matching ErrClosed once fn returned. A nil fn gets ErrInvalidOptions.
//
// The candidate is ctx's owner, by WithOwner's rule, on every Campaign of the same Run (Run calls fn on the
// calling goroutine). Two Runs need two owners: Runs of one owner share its leadership, and would call
// their fns at the same time.
func (e *Election) Run(ctx context.Context, value string, fn func(ctx context.Context, term uint64) error) error {
	if err := e.check(ctx); err != nil {
		return wrapErrCtx(ctx, "run", e.Name(), err)
	}
	if fn == nil {
		return wrapErrCtx(ctx, "run", e.name, errorf("%w: nil function", ErrInvalidOptions))
	}
	var retry backoff // between Campaigns that failed because Redis could not be reached
	var failed error  // the last failure Run campaigned again after
	for {
		term, err := e.Campaign(ctx, value)
		if err != nil {
			// Redis could not be reached, or the leadership was lost before it was recorded (errHoldGone):
			// campaign again, after a pause. Anything else is for the caller.
			again := (errors.Is(err, ErrUnavailable) || errors.Is(err, ErrLockLost)) && !permanent(err)
			if again {
				failed = err
			} else if failed != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				// ctx ended during one more try through the failure: the failure is still the news
				err = fmt.Errorf("%w, after %w", err, failed)
			}
			if !again || ctx.Err() != nil || !sleepCtx(ctx, retry.pause()) {
				return wrapErrCtx(ctx, "run", e.name, err)
			}
			continue
		}
		retry.reset()
		failed = nil
		if lost, err := e.lead(ctx, term, fn); !lost {
			return err
		}
	}
}

// lead calls fn for the leadership of ctx's owner, won with term, and resigns unless it was lost. It
// reports whether it was lost (Run campaigns again then), and otherwise what Run returns.
func (e *Election) lead(ctx context.Context, term uint64, fn func(ctx context.Context, term uint64) error) (lost bool, err error) {
	lead, err := e.LeadershipContext(ctx)
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil { // ctx ended, the Client is closing, or the leadership is gone already
		switch {
		case ctx.Err() != nil:
			e.resignInBackground(ctx)
			return false, wrapErrCtx(ctx, "run", e.name, ctx.Err())
		case e.c.check() != nil:
			return false, wrapErrCtx(ctx, "run", e.name, e.c.check())
		}
		return true, nil
	}
	// A fn that panics, or ends its goroutine (runtime.Goexit), does not leave the owner leading, renewed
	// for ever with nobody to resign.
	returned := false
	defer func() {
		if !returned {
			e.resignInBackground(ctx)
		}
	}()
	fnErr := fn(lead, term)
	returned = true
	cause := context.Cause(lead)
	switch {
	case ctx.Err() != nil:
		e.resignInBackground(ctx)
		return false, errors.Join(wrapErrCtx(ctx, "run", e.name, ctx.Err()), ownError(ctx, fnErr))
	case errors.Is(cause, ErrClosed): // Close resigned (or the Client died: a test's Abandon)
		return false, errors.Join(wrapErrCtx(ctx, "run", e.name, ErrClosed), ownError(lead, fnErr))
	case errors.Is(cause, ErrLockLost):
		return true, nil
	case !e.leading(ctx): // fn resigned itself
		return false, fnErr
	}
	rerr := e.Resign(ctx)
	if e.leading(ctx) { // the resignation did not run (Redis could not be reached): give it to the background
		e.resignInBackground(ctx)
	}
	if errors.Is(rerr, ErrNotHeld) {
		if cause := context.Cause(lead); errors.Is(cause, ErrLockLost) {
			rerr = wrapErrCtx(ctx, "run", e.name, cause)
		}
	}
	return false, errors.Join(fnErr, rerr)
}

// leading reports whether the Client holds the leadership of ctx's owner, whether or not ctx has ended.
func (e *Election) leading(ctx context.Context) bool {
	field, err := e.lock.ownerOf(ctx)
	if err != nil {
		return false
	}
	_, ok := e.c.holds.token(holdKey{key: e.name, field: field})
	return ok
}

// resignInBackground resigns the leadership of ctx's owner, if the Client holds it, as Resign with an
// ended ctx does: it ends for the Client at once, and the release goes on in the background.
func (e *Election) resignInBackground(ctx context.Context) {
	if e.leading(ctx) {
		_ = e.lock.unlockInBackground(ctx)
	}
}

// ownError returns err unless it is ctx's own (its error or its cause), which Run reports already.
func ownError(ctx context.Context, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Cause(ctx)) {
		return nil
	}
	return err
}
