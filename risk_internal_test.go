package relock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/relock-go/relock/internal/redistest"
)

// lateBatches runs scripts on Redis as its runner does, except for the watchdog's batches, which a test
// holds: before they are sent (a watchdog starved of CPU, or stuck on its connection), or after Redis
// answered (a reply processed late).
type lateBatches struct {
	runner
	mu     sync.Mutex
	before chan struct{} // closed to let batches be sent; nil: sent at once
	after  chan struct{} // closed to let batches' replies through; nil: at once
}

func (l *lateBatches) runBatch(ctx context.Context, calls []scriptCall) ([][]int64, []error) {
	l.mu.Lock()
	before, after := l.before, l.after
	l.mu.Unlock()
	if before != nil {
		<-before
	}
	replies, errs := l.runner.runBatch(ctx, calls)
	if after != nil {
		<-after
	}
	return replies, errs
}

// newLateClient returns a Client on srv whose watchdog batches lb holds as the test says.
func newLateClient(t *testing.T, srv *redistest.Server, timeout time.Duration) (*Client, *lateBatches) {
	c, err := New([]string{srv.Addr()}, &Options{WatchdogTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	lb := &lateBatches{runner: c.scripts}
	c.scripts = lb // before any hold: nothing runs a script yet
	return c, lb
}

// A hold whose renewal is not sent before its expiry (the watchdog starved) is at risk from its expiry on,
// and lost in Redis by then: HoldRisk must not report it safe. A caller waiting on changed hears of it
// at the expiry. The watchdog, once it runs, ends it as lost.
func TestHoldAtRiskWhenWatchdogStarved(t *testing.T) {
	srv := redistest.Start(t)
	c, lb := newLateClient(t, srv, time.Second)
	starved := make(chan struct{})
	lb.before = starved
	release := sync.OnceFunc(func() { close(starved) })
	defer release()
	ctx, cancel := context.WithTimeout(WithOwner(context.Background(), "holder"), 20*time.Second)
	defer cancel()
	l := c.Lock("starved")
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := l.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	atRisk, changed, err := HoldRisk(held)
	if err != nil || atRisk {
		t.Fatalf("HoldRisk of a fresh hold = %v, %v", atRisk, err)
	}
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("changed was not closed when the hold's expiry passed without a renewal")
	}
	if atRisk, _, err := HoldRisk(held); err != nil || !atRisk {
		t.Fatalf("HoldRisk past the expiry, no renewal sent = %v, %v; want at risk", atRisk, err)
	}
	// Redis dropped it (its TTL ran from the acquisition's run, a little after it was sent).
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := c.rdb.Do(ctx, c.rdb.B().Exists().Key("starved").Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lock key outlived its TTL")
		}
		time.Sleep(10 * time.Millisecond)
	}
	release()
	select {
	case <-held.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the watchdog did not end the hold once it ran")
	}
	if !errors.Is(context.Cause(held), ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", context.Cause(held))
	}
}
