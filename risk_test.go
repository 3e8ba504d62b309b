package relock_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/faultnet"
	"github.com/relock-go/relock/internal/redistest"
)

// logRecords returns the JSON log records written to b so far.
func logRecords(t *testing.T, b *redistest.OutputBuffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// A hold whose renewals fail is at risk (HoldRisk), logged at Warn and counted, until a renewal succeeds;
// one that cannot be renewed before it expires is lost, logged at Error and counted.
func TestHoldAtRiskThenLost(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := startProxy(t, srv)
	// Renewals every 1.5 s, each given 1.5 s: the risk shows within 3 s of the stall, leaving 1.5 s to
	// unstall and renew before the hold expires (a loaded CI machine missed a 300 ms margin).
	obs := newObserved(t, 4500*time.Millisecond)
	logs := &redistest.OutputBuffer{}
	obs.opts.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	c := clientAt(t, proxy.Addr, obs.opts)
	ctx := relock.WithOwner(ctxTimeout(t, 30*time.Second), "holder")
	l := c.Lock("risky")
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := l.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	atRisk, changed, err := relock.HoldRisk(held)
	if err != nil || atRisk {
		t.Fatalf("HoldRisk of a fresh hold = %v, %v", atRisk, err)
	}
	if _, _, err := relock.HoldRisk(ctx); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("HoldRisk of a context that is not a hold's = %v, want ErrNotHeld", err)
	}

	// Renewals get no answer: at risk, well before the hold's expiry.
	proxy.Stall(faultnet.Upstream, true)
	select {
	case <-changed:
	case <-time.After(6 * time.Second):
		t.Fatal("the hold did not become at risk while its renewals failed")
	}
	atRisk, changed, err = relock.HoldRisk(held)
	if err != nil || !atRisk {
		t.Fatalf("HoldRisk while renewals fail = %v, %v; want at risk", atRisk, err)
	}
	if held.Err() != nil {
		t.Fatalf("the hold ended while only at risk: %v", context.Cause(held))
	}
	// Redis answers again before the expiry: the risk ends, the hold goes on.
	proxy.Stall(faultnet.Upstream, false)
	select {
	case <-changed:
	case <-time.After(6 * time.Second):
		t.Fatal("the risk did not end once a renewal succeeded")
	}
	if atRisk, _, err = relock.HoldRisk(held); err != nil || atRisk {
		t.Fatalf("HoldRisk after a renewal succeeded = %v, %v", atRisk, err)
	}
	if got := obs.metric(t, "relock.at_risk", relock.AttrLockKind.String("rlock")); got < 1 {
		t.Fatalf("relock.at_risk = %d, want at least 1", got)
	}
	var warned bool
	for _, r := range logRecords(t, logs) {
		if r["level"] == "WARN" && r["lock"] == "risky" && r["kind"] == "rlock" && strings.HasSuffix(r["owner"].(string), ":holder") && r["error"] != nil {
			warned = true
		}
		if r["level"] == "ERROR" {
			t.Fatalf("an Error record before any loss: %v", r)
		}
	}
	if !warned {
		t.Fatalf("no Warn record of the failed renewal: %v", logRecords(t, logs))
	}

	// Renewals fail past the expiry: lost.
	proxy.Stall(faultnet.Upstream, true)
	select {
	case <-held.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the hold was not lost")
	}
	proxy.Stall(faultnet.Upstream, false)
	if !errors.Is(context.Cause(held), relock.ErrLockLost) {
		t.Fatalf("the hold ended with %v, want ErrLockLost", context.Cause(held))
	}
	if _, _, err := relock.HoldRisk(held); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("HoldRisk of a lost hold = %v, want ErrNotHeld", err)
	}
	if got := obs.metric(t, "relock.losses", relock.AttrLockKind.String("rlock")); got != 1 {
		t.Fatalf("relock.losses = %d, want 1", got)
	}
	eventually(t, 2*time.Second, "an Error record of the loss", func() bool {
		for _, r := range logRecords(t, logs) {
			if r["level"] == "ERROR" && r["lock"] == "risky" && r["kind"] == "rlock" && strings.Contains(r["error"].(string), "lock lost") {
				return true
			}
		}
		return false
	})
}

// Without a Logger nothing is logged, and the hot path allocates as before (TestLockUnlockAllocations);
// HoldRisk works on a context derived from a hold's, and on a FairLock's.
func TestHoldRiskOnDerivedAndFairContexts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	ctx := relock.WithOwner(ctxTimeout(t, 10*time.Second), "holder")
	f := c.FairLock("risk-fair")
	if err := f.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := f.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sub, cancel := context.WithTimeout(held, time.Minute)
	defer cancel()
	atRisk, changed, err := relock.HoldRisk(sub)
	if err != nil || atRisk {
		t.Fatalf("HoldRisk of a context derived from a fair lock's hold context = %v, %v", atRisk, err)
	}
	if err := f.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(time.Second):
		t.Fatal("changed was not closed when the hold ended")
	}
}

// A reentrant acquisition of a hold at risk extends it in Redis, so the risk ends with it; the watchdog's
// next renewal is then timeout/3 away, and the hold must not stay at risk until it.
func TestReentrantLockEndsRisk(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := startProxy(t, srv)
	// Renewals every 2 s, each given 2 s; a renewal that got no answer is tried again 600 ms later, which
	// leaves the reentrant Lock below 600 ms to get in first.
	c := clientAt(t, proxy.Addr, &relock.Options{WatchdogTimeout: 6 * time.Second})
	ctx := relock.WithOwner(ctxTimeout(t, 30*time.Second), "holder")
	l := c.Lock("risky-reentry")
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := l.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, changed, err := relock.HoldRisk(held)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Stall(faultnet.Upstream, true)
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("the hold did not become at risk while its renewals failed")
	}
	proxy.Stall(faultnet.Upstream, false)
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if atRisk, _, err := relock.HoldRisk(held); err != nil || atRisk {
		t.Fatalf("HoldRisk after a reentrant Lock extended the hold = %v, %v; want not at risk", atRisk, err)
	}
	for range 2 {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
