package relock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// riskOf is HoldRisk of hc, a hold's context.
func riskOf(t *testing.T, hc context.Context) (bool, <-chan struct{}) {
	t.Helper()
	atRisk, changed, err := HoldRisk(hc)
	if err != nil {
		t.Fatalf("HoldRisk: %v", err)
	}
	return atRisk, changed
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A reentrant acquisition that extends a hold at risk (its renewal got no answer) ends the risk: the hold
// is as safe as after a renewal, although the next renewal is now timeout/3 away. A renewal sent before
// that acquisition, whose failure comes after it, does not bring the risk back.
func TestSyncReentrantAcquisitionEndsRisk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		answer := make(chan struct{})
		f := &fakeRunner{batch: func(call scriptCall) ([]int64, error) { return nil, errNoAnswer }}
		c := newFakeClient(t, f, 3*time.Second)
		defer closeFake(c)
		reply := sync.OnceFunc(func() { close(answer) })
		defer reply() // before closeFake: a test that fails lets the hanging renewal end
		hc, _ := c.holds.holdContext(context.Background(), acquireFake(c, "risky", "owner", 0))
		time.Sleep(time.Second) // the renewal at 1 s gets no answer
		synctest.Wait()
		atRisk, changed := riskOf(t, hc)
		if !atRisk {
			t.Fatal("not at risk after a renewal got no answer")
		}
		acquireFake(c, "risky", "owner", 0) // reentry: the hold now expires at 4 s
		if atRisk, _ := riskOf(t, hc); atRisk {
			t.Fatal("still at risk after a reentrant acquisition extended the hold")
		}
		if !isClosed(changed) {
			t.Fatal("changed was not closed when the risk ended")
		}

		// The next renewal (at 2 s) hangs; a reentry at 2.5 s extends the hold; the renewal's failure, at
		// 2.9 s, is older than that.
		f.mu.Lock()
		f.batch = func(call scriptCall) ([]int64, error) {
			<-answer
			return nil, errNoAnswer
		}
		f.mu.Unlock()
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		acquireFake(c, "risky", "owner", 0)
		_, changed = riskOf(t, hc)
		time.Sleep(400 * time.Millisecond)
		reply()
		synctest.Wait()
		if atRisk, _ := riskOf(t, hc); atRisk || isClosed(changed) {
			t.Fatal("the failure of a renewal sent before a reentrant acquisition put the hold at risk")
		}
	})
}

// A hold whose expiry passes while the watchdog has not heard back from its renewal (the process was
// starved, the reply is late) is at risk from that instant, and a HoldRisk caller waiting on changed hears
// so then. The renewal's reply, once it comes, ends the risk if Redis renewed the hold.
func TestSyncHoldAtRiskPastExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		answer := make(chan struct{})
		f := &fakeRunner{batch: func(call scriptCall) ([]int64, error) {
			<-answer
			return allRenewed(call)
		}}
		c := newFakeClient(t, f, 3*time.Second)
		defer closeFake(c)
		reply := sync.OnceFunc(func() { close(answer) })
		defer reply() // before closeFake: a test that fails lets the hanging renewal end
		start := time.Now()
		hc, _ := c.holds.holdContext(context.Background(), acquireFake(c, "starved", "owner", 0))
		atRisk, changed := riskOf(t, hc)
		if atRisk {
			t.Fatal("a fresh hold is at risk")
		}
		select { // the renewal sent at 1 s has no reply yet: the expiry, at 3 s, passes
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Fatal("changed was not closed when the expiry passed")
		}
		if at := time.Since(start); at != 3*time.Second {
			t.Fatalf("changed closed at +%v, want at the expiry, +3s", at)
		}
		atRisk, changed = riskOf(t, hc)
		if !atRisk {
			t.Fatal("a hold past its expiry, its renewal unanswered, is not at risk")
		}
		time.Sleep(100 * time.Millisecond)
		reply() // Redis renewed it at 1 s: it expires at 4 s
		synctest.Wait()
		if hc.Err() != nil {
			t.Fatalf("the hold ended: %v", context.Cause(hc))
		}
		if !isClosed(changed) {
			t.Fatal("changed was not closed when the renewal came back")
		}
		if atRisk, _ := riskOf(t, hc); atRisk {
			t.Fatal("at risk after its renewal came back")
		}
	})
}

// A hold whose renewal never comes back is at risk at its expiry, then lost.
func TestSyncHoldAtRiskThenLostPastExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		answer := make(chan struct{})
		f := &fakeRunner{batch: func(call scriptCall) ([]int64, error) {
			<-answer
			return nil, errNoAnswer
		}}
		c := newFakeClient(t, f, 3*time.Second)
		defer closeFake(c)
		reply := sync.OnceFunc(func() { close(answer) })
		defer reply() // before closeFake: a test that fails lets the hanging renewal end
		hc, _ := c.holds.holdContext(context.Background(), acquireFake(c, "starved", "owner", 0))
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if atRisk, _ := riskOf(t, hc); !atRisk {
			t.Fatal("a hold at its expiry, its renewal unanswered, is not at risk")
		}
		reply()
		synctest.Wait()
		if !errors.Is(context.Cause(hc), errRenewTimeout) {
			t.Fatalf("cause %v, want not renewed in time", context.Cause(hc))
		}
		if _, _, err := HoldRisk(hc); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("HoldRisk of a lost hold = %v", err)
		}
	})
}
