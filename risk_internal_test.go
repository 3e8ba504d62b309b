package relock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/relock-go/relock/internal/redistest"
)

// hookedRunner runs scripts on Redis as its runner does, and calls the hooks a test sets around them: to
// hold a watchdog batch before it is sent (a watchdog starved of CPU, or stuck on its connection), or a
// reply after Redis ran the script (a reply handled late). Each hook runs at the next such call only.
type hookedRunner struct {
	runner
	mu            sync.Mutex
	batchSent     func() // before a batch is sent
	batchAnswered func() // after a batch's replies came
	intAnswered   func() // after the reply of a script replying an integer came (an Unlock's)
	intsAnswered  func() // after the reply of a script replying integers came (a permit release's)
}

// take returns the hook *f and clears it.
func (r *hookedRunner) take(f *func()) func() {
	r.mu.Lock()
	defer r.mu.Unlock()
	fn := *f
	*f = nil
	if fn == nil {
		return func() {}
	}
	return fn
}

// set sets the hook *f.
func (r *hookedRunner) set(f *func(), fn func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*f = fn
}

func (r *hookedRunner) runBatch(ctx context.Context, calls []scriptCall) ([][]int64, []error) {
	r.take(&r.batchSent)()
	replies, errs := r.runner.runBatch(ctx, calls)
	r.take(&r.batchAnswered)()
	return replies, errs
}

func (r *hookedRunner) runInt(ctx context.Context, call scriptCall) (int64, error) {
	n, err := r.runner.runInt(ctx, call)
	r.take(&r.intAnswered)()
	return n, err
}

func (r *hookedRunner) runInts(ctx context.Context, call scriptCall) ([]int64, error) {
	ns, err := r.runner.runInts(ctx, call)
	r.take(&r.intsAnswered)()
	return ns, err
}

// newHookedClient returns a Client on srv whose scripts go through a hookedRunner.
func newHookedClient(t *testing.T, srv *redistest.Server, opts *Options) (*Client, *hookedRunner) {
	c, err := New([]string{srv.Addr()}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := &hookedRunner{runner: c.scripts}
	c.scripts = r // before any hold: nothing runs a script yet
	return c, r
}

// A hold whose renewal is not sent before its expiry (the watchdog starved) is at risk from its expiry on,
// and lost in Redis by then: HoldRisk must not report it safe. A caller waiting on changed hears of it
// at the expiry. The watchdog, once it runs, ends it as lost.
func TestHoldAtRiskWhenWatchdogStarved(t *testing.T) {
	srv := redistest.Start(t)
	c, r := newHookedClient(t, srv, &Options{WatchdogTimeout: time.Second})
	starved := make(chan struct{})
	r.set(&r.batchSent, func() { <-starved })
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
