package relock

import (
	"context"
	"encoding/hex"
	"errors"
	"log/slog"
	"time"
)

// HoldRisk reports whether the hold behind ctx, a context returned by the HoldContext of an RLock,
// FairLock, ReadLock or WriteLock, is at risk: the watchdog could not renew it (Redis did not answer in
// time) and no renewal has succeeded since, so it may be lost when its last known expiry passes (Validity
// says how soon). Unlike a loss, being at risk can end: the next renewal that succeeds ends it. A holder
// that must not act on a lock it may no longer have stops at risk; one that can afford to wait stops when
// ctx ends.
//
// changed is closed at the next change: when the hold becomes at risk, when that ends, or when the hold
// ends (ctx is then done, with the hold's end as cause). HoldRisk returns ErrNotHeld when ctx is not such
// a context, or its hold has ended. The metric relock.at_risk counts the holds that became at risk, and
// Options.Logger logs each failed renewal.
func HoldRisk(ctx context.Context) (atRisk bool, changed <-chan struct{}, err error) {
	ref, ok := ctx.Value(holdRefKey{}).(holdRef)
	if !ok {
		return false, nil, ErrNotHeld
	}
	w, h := ref.w, ref.h
	w.mu.Lock()
	defer w.mu.Unlock()
	if h.ended {
		return false, nil, ErrNotHeld
	}
	if h.riskChanged == nil {
		h.riskChanged = make(chan struct{})
	}
	return h.atRisk, h.riskChanged, nil
}

// holdRefKey is the context key under which a hold's contexts (holdcontext.go) carry their hold.
type holdRefKey struct{}

type holdRef struct {
	w *holdTable
	h *hold
}

// setRiskLocked marks h at risk or not, and reports whether that changed.
func (h *hold) setRiskLocked(atRisk bool) bool {
	if h.atRisk == atRisk {
		return false
	}
	h.atRisk = atRisk
	if h.riskChanged != nil {
		close(h.riskChanged)
		h.riskChanged = nil
	}
	return true
}

// renewalFailure is a failed renewal of a hold, to be reported once holdTable.mu is released.
type renewalFailure struct {
	kind        lockKind
	name, owner string
	expiresIn   time.Duration
	began       bool // the hold became at risk with it
}

// reportRenewalFailures counts the holds that became at risk and logs every failure.
func (t *telemetry) reportRenewalFailures(fs []renewalFailure, err error) {
	ctx := context.Background()
	for _, f := range fs {
		if f.began {
			t.atRisk.Add(ctx, 1, t.byKind[f.kind].add...)
		}
		if t.log != nil {
			t.log.LogAttrs(ctx, slog.LevelWarn, "relock: renewal failed; the hold is at risk",
				slog.String("lock", f.name), slog.String("kind", f.kind.String()), slog.String("owner", logOwner(f.kind, f.owner)),
				slog.Duration("expires_in", f.expiresIn), slog.Any("error", errOrUnknown(err)))
		}
	}
}

// logOwner is how a hold's owner field shows in a log record: a permit's id (PermitSemaphore) is 16
// random bytes, shown in hex as Permit.ID gives it.
func logOwner(kind lockKind, field string) string {
	if kind == kindSemaphore {
		return hex.EncodeToString([]byte(field))
	}
	return field
}

// logLoss logs the loss of the hold h (cause matches ErrLockLost), unless its Client stopped.
func (t *telemetry) logLoss(h *hold, cause error) {
	if t.log == nil || errors.Is(cause, ErrClosed) {
		return
	}
	t.log.LogAttrs(context.Background(), slog.LevelError, "relock: hold lost",
		slog.String("lock", h.name), slog.String("kind", h.kind.String()), slog.String("owner", logOwner(h.kind, h.key.field)),
		slog.Any("error", cause))
}

func errOrUnknown(err error) error {
	if err == nil {
		return errRenewalNoAnswer
	}
	return err
}

// errRenewalNoAnswer is a renewal's failure when its batch reported no error of its own.
var errRenewalNoAnswer = errors.New("relock: no answer from Redis")
