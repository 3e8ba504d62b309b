package relock

import (
	"context"
	"errors"
)

// Locker is what every relock lock type does. Its methods follow the owner rule of WithOwner.
type Locker interface {
	// Lock acquires the lock for the owner of ctx, waiting as long as ctx allows.
	Lock(ctx context.Context) error
	// Unlock releases one hold of the owner of ctx.
	Unlock(ctx context.Context) error
	// HoldContext returns a context cancelled when the owner's hold ends: with a cause matching
	// ErrLockLost when it is lost, with context.Canceled when it is released.
	HoldContext(ctx context.Context) (context.Context, error)
}

var _ Locker = (*RLock)(nil)

// Do acquires l for the owner of ctx, runs fn while holding it, and releases it.
//
// fn gets l's HoldContext: it is cancelled, with a cause matching ErrLockLost, if the lock is lost while fn
// runs, and fn should stop then, since another owner may already hold the lock. Do returns fn's error, joined
// (errors.Join) with that cause when the lock was lost, so errors.Is(err, ErrLockLost) tells the caller that
// fn's work may have overlapped another holder's (fn's error alone when it is, or wraps, that cause, as
// context.Cause(ctx) returns it); otherwise joined with the error of the release, if any.
// The release uses context.WithoutCancel(ctx), so that Do learns its outcome even when ctx ended while fn
// ran (an Unlock with an ended ctx would release too, but could not report how it went).
func Do(ctx context.Context, l Locker, fn func(ctx context.Context) error) error {
	if err := l.Lock(ctx); err != nil {
		return err
	}
	unlockCtx := context.WithoutCancel(ctx)
	held, err := l.HoldContext(ctx)
	if err != nil { // lost already, or ctx ended
		_ = l.Unlock(unlockCtx)
		return err
	}
	fnErr := fn(held)
	var lost error
	if cause := context.Cause(held); errors.Is(cause, ErrLockLost) {
		lost = cause
	}
	unlockErr := l.Unlock(unlockCtx)
	if lost != nil { // the Unlock could only report ErrNotHeld
		if errors.Is(fnErr, lost) {
			return fnErr // fn returned the cause (context.Cause), or wrapped it: once is enough
		}
		return errors.Join(fnErr, lost)
	}
	return errors.Join(fnErr, unlockErr)
}
