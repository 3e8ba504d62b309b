package relock

import (
	"context"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/relock-go/relock/internal/redistest"
)

// lateRunner loses the reply of the first permit acquisition (as if its connection broke once it was sent)
// and keeps it, unsent, for the test to send later: an acquisition delayed on a slow link, or queued on
// another connection than its give-back.
type lateRunner struct {
	runner
	mu   sync.Mutex
	late *scriptCall
}

var errLost = io.ErrUnexpectedEOF

func (r *lateRunner) runAcquire(ctx context.Context, call scriptCall) ([4]int64, error) {
	r.mu.Lock()
	if call.script == scriptPermitAcquire && r.late == nil {
		call.args = slices.Clone(call.args) // run later: the caller may reuse its list (argLists)
		r.late = &call
		r.mu.Unlock()
		return [4]int64{}, errLost
	}
	r.mu.Unlock()
	return r.runner.runAcquire(ctx, call)
}

// A permit acquisition whose reply was lost is given back by its Client; when the give-back reaches Redis
// before the acquisition (delayed on a slow link, queued on another connection), the acquisition changes
// nothing when it arrives. Before, it took a permit that nobody held, until its expiry (the watchdog
// timeout: 30 s by default): TestCloseFinishesGiveBacks/PermitSemaphore.Acquire failed so now and then.
func TestPermitGiveBackOvertakingItsAcquisition(t *testing.T) {
	srv := redistest.Start(t)
	c, err := New([]string{srv.Addr()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := &lateRunner{runner: c.scripts}
	c.scripts = r
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := c.PermitSemaphore("giveback-overtaken")
	if _, err := s.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.TryAcquire(ctx, 0, 0); err == nil {
		t.Fatal("TryAcquire whose reply was lost succeeded")
	}
	rdb := c.rdb
	// The give-back runs in the background, and finds nothing to give back yet.
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := rdb.Do(ctx, rdb.B().Hexists().Key(undoneKey(s.name)).Field(r.late.args[1]).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The acquisition arrives now.
	reply, err := r.runner.runAcquire(ctx, *r.late)
	if err != nil {
		t.Fatal(err)
	}
	available, _ := rdb.Do(ctx, rdb.B().Get().Key(s.name).Build()).AsInt64()
	taken, _ := rdb.Do(ctx, rdb.B().Zcard().Key(s.timeouts).Build()).AsInt64()
	if reply[0] == 1 || available != 1 || taken != 0 {
		t.Fatalf("the late acquisition replied %v: %d permits available, %d taken; want nothing changed (1, 0)", reply, available, taken)
	}
	p, ok, err := s.TryAcquire(ctx, 0, 0)
	if err != nil || !ok {
		t.Fatalf("TryAcquire after = %v, %v", ok, err)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
