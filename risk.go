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
// time) and nothing has extended it since (a renewal, or a reentrant acquisition), so it may be lost when
// its last known expiry passes (Validity says how soon); or that expiry has passed with no renewal heard
// of (the watchdog ran late: the process was paused or starved of CPU), so it may be lost already. Unlike
// a loss, being at risk can end: the next renewal or acquisition that extends the hold ends it. A holder
// that must not act on a lock it may no longer have stops at risk; one that can afford to wait stops when
// ctx ends.
//
// changed is closed at the next change: when the hold becomes at risk (a renewal fails, or its expiry
// passes), when that ends, or when the hold ends (ctx is then done, with the hold's end as cause).
// HoldRisk returns ErrNotHeld when ctx is not such a context, or its hold has ended. The metric
// relock.at_risk counts the holds that became at risk through failed renewals, and Options.Logger logs
// each failed renewal.
func HoldRisk(ctx context.Context) (atRisk bool, changed <-chan struct{}, err error) {
	ref, ok := ctx.Value(holdRefKey{}).(holdRef)
	if !ok {
		return false, nil, ErrNotHeld
	}
	w, h := ref.w, ref.h
	w.mu.Lock()
	defer w.mu.Unlock()
	if h.phase == phaseEnded {
		return false, nil, ErrNotHeld
	}
	now := time.Now()
	w.refreshRiskLocked(h, now)
	if h.riskChanged == nil {
		h.riskChanged = make(chan struct{})
	}
	if !h.atRisk {
		w.watchExpiryLocked(h, now)
	}
	return h.atRisk, h.riskChanged, nil
}

// holdRefKey is the context key under which a hold's contexts (holdcontext.go) carry their hold.
type holdRefKey struct{}

type holdRef struct {
	w *holdTable
	h *hold
}

// riskLocked reports whether h is at risk at now, from what the Client knows of it: the last renewal got
// no answer, or the expiry it knows has passed.
func (h *hold) riskLocked(now time.Time) bool {
	return h.renewErr != nil || !now.Before(h.expiresAt)
}

// confirmedLocked records that a renewal or acquisition sent at sentAt extended h: a renewal's failure
// before it is over.
func (h *hold) confirmedLocked(sentAt time.Time) {
	h.renewErr = nil
	if sentAt.After(h.confirmed) {
		h.confirmed = sentAt
	}
}

// refreshRiskLocked works out again whether h is at risk, at now, closes riskChanged if that changed, and
// reports whether h became at risk. Whatever changes what riskLocked reads calls it.
func (w *holdTable) refreshRiskLocked(h *hold, now time.Time) (began bool) {
	atRisk := h.riskLocked(now)
	if atRisk == h.atRisk {
		return false
	}
	h.atRisk = atRisk
	if h.riskChanged != nil {
		close(h.riskChanged)
		h.riskChanged = nil
	}
	return atRisk
}

// watchExpiryLocked makes h's risk be worked out again when its expiry passes, for the HoldRisk caller
// waiting on riskChanged: nothing else happens then when the watchdog runs late. The timer moves itself
// on while the expiry moves on (renewals extend it), and stops when nobody waits or the hold ends.
func (w *holdTable) watchExpiryLocked(h *hold, now time.Time) {
	if h.riskTimer != nil {
		return
	}
	h.riskTimer = time.AfterFunc(h.expiresAt.Sub(now), func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		h.riskTimer = nil
		if h.phase == phaseEnded || h.riskChanged == nil {
			return
		}
		now := time.Now()
		w.refreshRiskLocked(h, now)
		if !h.atRisk {
			w.watchExpiryLocked(h, now)
		}
	})
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
		t.logger().LogAttrs(ctx, slog.LevelWarn, "relock: renewal failed; the hold is at risk",
			slog.String("lock", f.name), slog.String("kind", f.kind.String()), slog.String("owner", logOwner(f.kind, f.owner)),
			slog.Duration("expires_in", f.expiresIn), slog.Any("error", errOrUnknown(err)))
	}
}

// logger is where renewal failures and losses are logged: Options.Logger, or slog.Default() as it is now
// (a service that calls slog.SetDefault after New gets them there too).
func (t *telemetry) logger() *slog.Logger {
	if t.log != nil {
		return t.log
	}
	return slog.Default()
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
	if errors.Is(cause, ErrClosed) {
		return
	}
	t.logger().LogAttrs(context.Background(), slog.LevelError, "relock: hold lost",
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
