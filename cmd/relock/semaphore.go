package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/relock-go/relock"
)

// The kinds of semaphore inspect and list tell apart, as --json prints them. Redis cannot tell a
// Semaphore from a CountDownLatch (both are an integer string at the name), nor a PermitSemaphore with no
// permit taken from either.
const (
	kindCounter         = "semaphore_or_latch"
	kindPermitSemaphore = "permit_semaphore"
)

// semaphoreJSON is a semaphore's or latch's state as --json prints it: what inspect prints for one, and
// list's entries for them (after the locks'). Durations are milliseconds. The field names are stable:
// scripts may rely on them.
type semaphoreJSON struct {
	Name string `json:"name"`
	// Kind is "semaphore_or_latch" for a counter (a Semaphore, a CountDownLatch, or a PermitSemaphore with
	// no permit taken), "permit_semaphore" for a PermitSemaphore with permits taken.
	Kind string `json:"kind"`
	// Exists reports whether the counter key exists (a latch's is deleted when it opens).
	Exists bool `json:"exists"`
	// Value is the counter: the permits available, or a latch's count; 0 when there is no key.
	Value int64 `json:"value"`
	// PermitsTaken counts a PermitSemaphore's permits taken, expired ones included; PermitsExpired, the
	// expired ones (given back at the next acquisition). Both 0 for a counter.
	PermitsTaken   int `json:"permits_taken"`
	PermitsExpired int `json:"permits_expired"`
	// Permits are the first 1000 permits taken, soonest to expire first; [] for a counter. Who took them
	// is not in Redis.
	Permits []permitJSON `json:"permits"`
}

type permitJSON struct {
	ID            string `json:"id"`                  // the permit's id in hex, as relock's Permit.ID and Redisson name it
	ExpiresMillis int64  `json:"expires_ms"`          // time left by Redis's clock unless renewed; <= 0: expired, unless no_expiry
	NoExpiry      bool   `json:"no_expiry,omitempty"` // never expires (taken without a lease, by Redisson); expires_ms is -1
}

func semaphoreKind(st relock.SemaphoreState) string {
	if st.Expirable {
		return kindPermitSemaphore
	}
	return kindCounter
}

// semaphoreTitle is a semaphore kind as people read it; long for inspect, short for list's table.
func semaphoreTitle(st relock.SemaphoreState, long bool) string {
	switch {
	case st.Expirable:
		return "permit semaphore"
	case long:
		return "semaphore or count-down latch"
	}
	return "semaphore or latch"
}

func toSemaphoreJSON(st relock.SemaphoreState) semaphoreJSON {
	j := semaphoreJSON{Name: st.Name, Kind: semaphoreKind(st), Exists: st.Exists, Value: st.Value,
		PermitsTaken: st.PermitsTaken, PermitsExpired: st.PermitsExpired, Permits: []permitJSON{}}
	for _, p := range st.Permits {
		pj := permitJSON{ID: p.ID, ExpiresMillis: p.Expires.Milliseconds()}
		if p.Expires == relock.NoExpiry {
			pj.ExpiresMillis, pj.NoExpiry = -1, true
		}
		j.Permits = append(j.Permits, pj)
	}
	return j
}

// printSemaphore prints st for people.
func printSemaphore(w io.Writer, st relock.SemaphoreState) {
	if !st.Expirable {
		fmt.Fprintf(w, "%s %q: value %d\n", semaphoreTitle(st, true), st.Name, st.Value)
		fmt.Fprintln(w, "  the value is a semaphore's available permits, or a latch's count: Redis cannot tell them apart")
		return
	}
	available := fmt.Sprintf("%d available", st.Value)
	if !st.Exists {
		available += " (its count key does not exist)"
	}
	fmt.Fprintf(w, "%s %q: %s, %d taken", semaphoreTitle(st, true), st.Name, available, st.PermitsTaken)
	if st.PermitsExpired > 0 {
		fmt.Fprintf(w, " (%d expired: given back at the next acquisition)", st.PermitsExpired)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  permits taken (%d), soonest to expire first:\n", st.PermitsTaken)
	for i, p := range st.Permits {
		alive := fmt.Sprintf("expires in %s unless renewed", fmtTTL(p.Expires))
		switch {
		case p.Expires == relock.NoExpiry:
			alive = "never expires: taken without a lease (by Redisson), only its release gives it back"
		case p.Expires <= 0:
			alive = fmt.Sprintf("expired %s ago: its holder stopped renewing it, or its lease ran out", fmtTTL(-p.Expires))
		}
		fmt.Fprintf(w, "    %d. %s, %s\n", i+1, p.ID, alive)
	}
	if st.PermitsTaken > len(st.Permits) {
		fmt.Fprintf(w, "    ... and %d more\n", st.PermitsTaken-len(st.Permits))
	}
	fmt.Fprintln(w, "  who took the permits is not in Redis: only the Client that took a permit knows its owner")
}

// notASemaphore is relock.ErrNotASemaphore's text, after which its errors say why.
var notASemaphore = strings.TrimPrefix(relock.ErrNotASemaphore.Error(), "relock: ")

// inspectSemaphore is inspect's second look, when name is no lock: Inspect found none (lock, with no
// error) or a key that is not one (lockErr, matching relock.ErrNotALock). It reads name as a semaphore or
// latch, and reports whether it is one: a counter where Inspect failed, or a PermitSemaphore with permits
// taken where Inspect found nothing. Otherwise the error is the one to report, nil to print lock as it is.
func inspectSemaphore(ctx context.Context, c *common, lc *relock.Client, name string, lock relock.LockState, lockErr error) (relock.SemaphoreState, bool, error) {
	switch {
	case lockErr == nil && (lock.Kind != relock.KindNone || lock.FencingToken != 0):
		return relock.SemaphoreState{}, false, nil
	case lockErr != nil && !errors.Is(lockErr, relock.ErrNotALock):
		return relock.SemaphoreState{}, false, lockError(c, name, lockErr)
	}
	st, err := lc.InspectSemaphore(ctx, name)
	switch {
	case lockErr == nil && errors.Is(err, relock.ErrNotASemaphore):
		return st, false, nil // a free lock, and some key of the application's at "{name}:timeout"
	case err != nil && !errors.Is(err, relock.ErrNotASemaphore):
		return st, false, lockError(c, name, err)
	case lockErr == nil:
		return st, st.Expirable, nil
	case err == nil && (st.Exists || st.Expirable):
		return st, true, nil
	}
	// Neither a lock nor a semaphore: say why it is not a lock, and why it is not a counter when that is not
	// its type again (a string that is not an integer).
	msg := lockError(c, name, lockErr)
	if err == nil {
		return st, false, msg // deleted since Inspect read it
	}
	detail := err.Error()
	if i := strings.Index(detail, notASemaphore); i >= 0 {
		detail = strings.TrimPrefix(detail[i+len(notASemaphore):], ": ")
	}
	if strings.HasPrefix(detail, "the key is a ") {
		return st, false, msg
	}
	return st, false, fmt.Errorf("%w; nor a semaphore or latch: %s", msg, detail)
}
