package relock

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/relock-go/relock/internal/invariant"
)

// The hold machine (holdstate.go) against a model of a few dozen lines: random sequences of the events its
// callers make (acquisitions, releases and their outcomes, renewals and theirs, the watch, settlings,
// Close), on a few keys, and after each one the table must agree with the model, with every invariant
// checked by the machine itself. The model is the table of holdstate.go's doc comment, written again from
// the callers' side: what the owner was told (held or not, its count) and how each hold ended.

// modelHold is what the model knows of one key's hold.
type modelHold struct {
	live     bool
	count    int64
	releases int  // the owner's releases under way
	doubted  bool // Redis said it is gone while releases were under way
	renewing bool // a renewal of it is under way
	ended    string
}

func (m *modelHold) end(how string) { *m = modelHold{ended: how} }

// modelStep is one event for the model: whether it applies now, and what it does.
type modelStep struct {
	name  string
	legal func(m *modelHold) bool
	apply func(m *modelHold, w *holdTable, k holdKey, r *rand.Rand)
}

var holdModelSteps = []modelStep{
	{"first acquisition", func(m *modelHold) bool { return !m.live }, func(m *modelHold, w *holdTable, k holdKey, _ *rand.Rand) {
		w.acquired(k, modelAcquisition(k, 1))
		*m = modelHold{live: true, count: 1}
	}},
	{"reentry", func(m *modelHold) bool { return m.live && m.releases == 0 }, func(m *modelHold, w *holdTable, k holdKey, _ *rand.Rand) {
		w.acquired(k, modelAcquisition(k, m.count+1))
		m.count++
	}},
	{"first hold for a hold believed held", func(m *modelHold) bool { return m.live && m.releases == 0 }, func(m *modelHold, w *holdTable, k holdKey, _ *rand.Rand) {
		w.acquired(k, modelAcquisition(k, 1))
		*m = modelHold{live: true, count: 1, ended: "lost"} // a new hold: the old one ended, lost
	}},
	{"release sent", func(m *modelHold) bool { return m.live }, func(m *modelHold, w *holdTable, k holdKey, _ *rand.Rand) {
		w.releasing(k)
		m.releases++
	}},
	{"released", func(m *modelHold) bool { return m.releases > 0 }, func(m *modelHold, w *holdTable, k holdKey, r *rand.Rand) {
		left := r.Int64N(m.count + 1)
		w.released(k, left)
		if m.releases--; left == 0 {
			m.end("released")
		} else {
			m.count, m.doubted = left, false
		}
	}},
	{"release: not held", func(m *modelHold) bool { return m.releases > 0 }, func(m *modelHold, w *holdTable, k holdKey, _ *rand.Rand) {
		w.notHeld(k)
		if m.releases--; m.releases == 0 {
			m.end("lost")
		} else {
			m.doubted = true
		}
	}},
	{"release unanswered", func(m *modelHold) bool { return m.releases > 0 }, func(m *modelHold, w *holdTable, k holdKey, _ *rand.Rand) {
		w.releaseUnanswered(k)
		if m.releases--; m.releases == 0 && m.doubted {
			m.end("lost")
		}
	}},
	{"release in the background", func(m *modelHold) bool { return m.live }, func(m *modelHold, w *holdTable, k holdKey, _ *rand.Rand) {
		_, _, s := w.unlocking(k)
		if m.count--; m.count == 0 {
			m.end("released")
		}
		s.done(-1) // its outcome unknown: the count stays what the owner gave up to
	}},
	{"renewal sent", func(m *modelHold) bool { return m.live && !m.renewing && !m.doubted }, func(m *modelHold, w *holdTable, k holdKey, _ *rand.Rand) {
		w.mu.Lock()
		h := w.holds[k]
		if h.renewing == renewQueued {
			heap.Remove(&w.queue, h.index) // as tick's pop does
			var out stepped
			w.stepLocked(h, &holdEvent{ev: evDue}, &out)
		}
		w.mu.Unlock()
		m.renewing = true
	}},
	{"renewed", func(m *modelHold) bool { return m.renewing }, func(m *modelHold, w *holdTable, k holdKey, _ *rand.Rand) {
		w.applyRenewals([]*hold{w.holds[k]}, []renewal{{}}, []int64{1}, nil, time.Now())
		m.renewing = false
	}},
	{"renewal: gone", func(m *modelHold) bool { return m.renewing }, func(m *modelHold, w *holdTable, k holdKey, _ *rand.Rand) {
		w.applyRenewals([]*hold{w.holds[k]}, []renewal{{}}, []int64{0}, nil, time.Now())
		if m.renewing = false; m.releases == 0 {
			m.end("lost")
		} else {
			m.doubted = true
		}
	}},
	{"renewal unanswered", func(m *modelHold) bool { return m.renewing }, func(m *modelHold, w *holdTable, k holdKey, _ *rand.Rand) {
		w.applyRenewals([]*hold{w.holds[k]}, []renewal{{}}, []int64{-1}, errNoAnswer, time.Now())
		m.renewing = false
	}},
	{"the watch sees it gone", func(m *modelHold) bool { return m.live }, func(m *modelHold, w *holdTable, k holdKey, _ *rand.Rand) {
		w.checkNow(w.holds[k])
		if m.releases > 0 {
			m.doubted = true
		}
	}},
	{"its owner's read finds it gone", func(m *modelHold) bool { return m.live }, func(m *modelHold, w *holdTable, k holdKey, _ *rand.Rand) {
		w.readGone(k, w.record(k))
		if m.releases == 0 {
			m.end("lost")
		} else {
			m.doubted = true
		}
	}},
	{"its owner's read, sent before it was taken afresh, finds it gone", func(m *modelHold) bool { return m.live && m.releases == 0 }, func(m *modelHold, w *holdTable, k holdKey, _ *rand.Rand) {
		old := w.record(k)
		w.acquired(k, modelAcquisition(k, 1)) // Redis had lost it: a new hold, the old one ended (lost)
		w.readGone(k, old)                    // the read saw the old hold gone: the new one stays
		*m = modelHold{live: true, count: 1, ended: "lost"}
	}},
	{"its owner's write hold ended (a read hold under it)", func(m *modelHold) bool { return m.live }, func(m *modelHold, w *holdTable, k holdKey, _ *rand.Rand) {
		stepKey(w, k, holdEvent{ev: evWriteEnded, cause: errLeaseExpired})
		if m.releases == 0 {
			m.end("lost")
		}
	}},
	{"Close", func(m *modelHold) bool { return m.live }, func(m *modelHold, w *holdTable, k holdKey, _ *rand.Rand) {
		stepKey(w, k, holdEvent{ev: evShut, cause: errGivenUp})
		m.end("closed")
	}},
}

// stepKey applies ev to k's record, as the table's callers do.
func stepKey(w *holdTable, k holdKey, ev holdEvent) {
	var out stepped
	w.mu.Lock()
	w.stepLocked(w.holds[k], &ev, &out)
	w.mu.Unlock()
	out.finish(w.c.tel)
}

func modelAcquisition(k holdKey, count int64) *acquisition {
	return &acquisition{kind: kindRLock, name: k.key, count: count, sentAt: time.Now(), parent: context.Background(),
		renew: renewal{script: scriptRenew, keys: []string{k.key}, field: k.field}}
}

func TestHoldMachineAgainstModel(t *testing.T) {
	var violations []string
	defer invariant.SetHandler(func(msg string) { violations = append(violations, msg) })()
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 39))
		c := newFakeClient(t, &fakeRunner{}, time.Hour)
		c.holds.started = true // no watchdog loop: the test is the watchdog
		keys := []holdKey{{"a", "o1"}, {"a", "o2"}, {"b", "o1"}}
		models := make([]modelHold, len(keys))
		var hctx []context.Context // the live holds' contexts, by key
		hctx = make([]context.Context, len(keys))
		var trail []string
		for range 60 {
			i := r.IntN(len(keys))
			m, k := &models[i], keys[i]
			var legal []modelStep
			for _, s := range holdModelSteps {
				if s.legal(m) {
					legal = append(legal, s)
				}
			}
			s := legal[r.IntN(len(legal))]
			trail = append(trail, fmt.Sprintf("%s/%s: %s", k.key, k.field, s.name))
			wasLive := m.live
			m.ended = ""
			s.apply(m, c.holds, k, r)
			if err := checkModel(c, k, m, hctx[i], wasLive); err != nil {
				t.Fatalf("seed %d: after %s\n%v", seed, strings.Join(trail, "\n  "), err)
			}
			if m.live {
				hctx[i], _ = c.holds.holdContext(context.Background(), k)
			}
			if len(violations) > 0 {
				t.Fatalf("seed %d: after %s\ninvariant violated: %s", seed, strings.Join(trail, "\n  "), violations[0])
			}
		}
		c.holds.started = false // no loop to wait for
		closeFake(c)
	}
}

// checkModel compares what the table tells of k with the model m; old is the hold context of k's hold
// before the step (nil: none), which must end with the cause the model says when the hold ended.
func checkModel(c *Client, k holdKey, m *modelHold, old context.Context, wasLive bool) error {
	w := c.holds
	w.mu.Lock()
	h := w.holds[k]
	live, count, releases := h != nil, int64(0), 0
	doubted := false
	if h != nil {
		count, releases, doubted = h.count, h.releases, h.phase == phaseDoubted
	}
	w.mu.Unlock()
	switch {
	case live != m.live:
		return fmt.Errorf("live = %v; the model says %v", live, m.live)
	case live && (count != m.count || releases != m.releases || doubted != m.doubted):
		return fmt.Errorf("count %d, releases %d, doubted %v; the model says %d, %d, %v", count, releases, doubted, m.count, m.releases, m.doubted)
	}
	if old == nil || !wasLive {
		return nil
	}
	cause := context.Cause(old)
	switch m.ended {
	case "":
		if cause != nil {
			return fmt.Errorf("the hold goes on, but its context ended: %v", cause)
		}
	case "released", "closed":
		if cause == nil || errors.Is(cause, ErrLockLost) {
			return fmt.Errorf("%s, but its context says %v", m.ended, cause)
		}
	case "lost":
		if !errors.Is(cause, ErrLockLost) {
			return fmt.Errorf("lost, but its context says %v", cause)
		}
	}
	return nil
}

// An Unlock that Redis answers with no level left ends the hold, before it returns, whatever else of its
// owner's settles meanwhile (the undo of an attempt whose reply was lost). The explorer once saw "Unlock
// returned nil, and its HoldContext still lives 200 ms later" (RLock, seed 5868515200010982491, not
// replayed): the hold ended only when the settling did. Now a release's reply ends the hold by itself
// (holdstate.go: released(left <= 0)), and an owner's release and attempts take turns, so that no settling
// of its own begins while its release is under way.
func TestReleaseEndsTheHoldWhateverSettles(t *testing.T) {
	c := newFakeClient(t, &fakeRunner{}, time.Hour)
	c.holds.started = true // no watchdog loop
	defer func() { c.holds.started = false; closeFake(c) }()
	k := acquireFake(c, "settling", "owner", 0)
	hc, err := c.holds.holdContext(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	_, s := c.holds.settle(k) // an undo of the owner's, in the background
	c.holds.releasing(k)
	c.holds.released(k, 0)
	if hc.Err() == nil || !errors.Is(context.Cause(hc), context.Canceled) {
		t.Fatalf("after the release's reply (no level left), the HoldContext says %v", context.Cause(hc))
	}
	s.done(-1)
}
