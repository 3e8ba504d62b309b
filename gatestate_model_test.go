package relock

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relock-go/relock/internal/invariant"
)

// The gate (gate.go, gatestate.go) against a model: random sequences of what the gate's callers do (waiters
// join, the head sleeps and attempts, releases claim a waiter and deliver an outcome, waiters give up, the
// head exits, its attempts fail, an owner gets the lock), through the gate's own methods, the waiting
// goroutines played by the test. After each step every waiter's phase, the head, the queue's order and
// whether the gate exists must be the model's, with every invariant checked by the machine itself.

// gmWaiter is a waiter as the model sees it.
type gmWaiter struct {
	e       *gateWaiter
	owner   string
	phase   waiterPhase
	outcome bool // a claimed head that attempts waits for its handoff's outcome (tryAttempt said so)
	done    bool // final, and checked so once: a final waiter is not looked at again (its gate may be reused)
}

// gmGate is the gate as the model sees it.
type gmGate struct {
	answered time.Time // the send time of the last attempt Redis answered
	exists   bool
	open     bool
	head     *gmWaiter
	queue    []*gmWaiter
	claims   int
	all      []*gmWaiter
}

func (m *gmGate) dequeue(w *gmWaiter) {
	m.queue = slices.DeleteFunc(m.queue, func(x *gmWaiter) bool { return x == w })
}

// promote makes the first queued waiter the head, if there is none.
func (m *gmGate) promote() {
	if m.head != nil {
		return
	}
	for _, w := range m.queue {
		if w.phase == wQueued {
			m.dequeue(w)
			m.head, w.phase = w, wAttempting
			return
		}
	}
}

func (m *gmGate) forget() {
	if m.head == nil && len(m.queue) == 0 && m.claims == 0 {
		m.exists, m.open, m.answered = false, false, time.Time{}
	}
}

func TestGateAgainstModel(t *testing.T) {
	var violations []string
	defer invariant.SetHandler(func(msg string) { violations = append(violations, msg) })()
	owners := []string{"a", "b", "c", "shared", "shared"}
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 10))
		gs := &gates{}
		m := &gmGate{}
		var trail []string
		var claimed []*gmWaiter // the waiters claimed, whose release has not delivered yet
		step := func(what string) { trail = append(trail, what) }
		pick := func(ok func(w *gmWaiter) bool) *gmWaiter {
			var ws []*gmWaiter
			for _, w := range m.all {
				if ok(w) {
					ws = append(ws, w)
				}
			}
			if len(ws) == 0 {
				return nil
			}
			return ws[r.IntN(len(ws))]
		}
		for range 80 {
			switch r.IntN(11) {
			case 0, 1: // a waiter joins
				owner := owners[r.IntN(len(owners))]
				e, _ := gs.join("n", handoffTarget{owner: owner, field: owner})
				w := &gmWaiter{e: e, owner: owner}
				step("join " + owner)
				switch {
				case !m.exists:
					m.exists, m.head, w.phase = true, w, wAttempting
				case m.open:
					w.phase = wFreed
				case m.head == nil:
					m.head, w.phase = w, wAttempting
				default:
					w.phase = wQueued
					m.queue = append(m.queue, w)
				}
				m.all = append(m.all, w)
			case 2: // the head sleeps, or attempts
				w := m.head
				if w == nil {
					continue
				}
				switch w.phase {
				case wAttempting:
					step("head sleeps")
					gs.sleeping(w.e)
					w.phase = wSleeping
				case wSleeping, wClaimed, wHanded:
					// Woken by a message or its timer, the head attempts again, whatever a release did
					// meanwhile: claimed it (the outcome is on its way) or handed it the lock (the outcome
					// waits in its channel).
					step("head attempts")
					waits := w.phase == wClaimed || w.phase == wHanded
					if claimed := gs.tryAttempt(w.e); claimed != waits {
						t.Fatalf("seed %d: tryAttempt = %v in phase %s\n%s", seed, claimed, w.phase, strings.Join(trail, "\n"))
					}
					if waits {
						w.outcome = true
					} else {
						w.phase = wAttempting
					}
				}
			case 3: // a release claims a waiter
				streak := r.IntN(10)
				e, yield := gs.claim("n", streak)
				var want *gmWaiter
				for _, w := range m.queue {
					if w.phase == wQueued {
						want = w
						break
					}
				}
				if want == nil && m.head != nil && m.head.phase == wSleeping {
					want = m.head
				}
				step(fmt.Sprintf("claim (streak %d)", streak))
				switch {
				case m.exists && want != nil && streak >= maxHandoffs:
					if e != nil || !yield {
						t.Fatalf("seed %d: claim = %v, %v; want a yield\n%s", seed, e, yield, strings.Join(trail, "\n"))
					}
					continue
				case !m.exists || want == nil:
					if e != nil {
						t.Fatalf("seed %d: claim picked a waiter; the model has none to hand to\n%s", seed, strings.Join(trail, "\n"))
					}
					continue
				case e != want.e:
					t.Fatalf("seed %d: claim picked another waiter than the model's\n%s", seed, strings.Join(trail, "\n"))
				}
				want.phase = wClaimed
				m.claims++
				claimed = append(claimed, want)
			case 4: // the release delivers its outcome
				if len(claimed) == 0 {
					continue
				}
				i := r.IntN(len(claimed))
				want := claimed[i]
				claimed = slices.Delete(claimed, i, i+1)
				outcome := r.IntN(3) // handed, not handed, its owner busy
				step(fmt.Sprintf("deliver %d", outcome))
				delivered := gs.deliver(want.e, handoff{handed: outcome == 0}, outcome == 2)
				m.claims--
				abandoned := want.phase == wAbandoned
				switch {
				case abandoned:
					want.phase = wLeft
				case outcome == 0:
					want.phase = wHanded
					m.dequeue(want)
				case m.head == want:
					want.phase = wSleeping
					if want.outcome && r.IntN(2) == 0 { // it waited for this outcome: it attempts now
						gs.heard(want.e, handoff{})
						want.phase, want.outcome = wAttempting, false
					} // else its ctx ended first: it stops waiting (below), or attempts later
				case outcome == 2:
					want.phase = wFreed
					m.dequeue(want)
				default:
					want.phase = wQueued
				}
				if delivered == abandoned {
					t.Fatalf("seed %d: deliver = %v; the model says abandoned %v", seed, delivered, abandoned)
				}
				if outcome != 0 {
					m.promote()
				}
				m.forget()
			case 5: // a waiter gives up
				if w := pick(func(w *gmWaiter) bool { return w.phase == wQueued || w.phase == wClaimed || w == m.head }); w != nil {
					step("a waiter gives up")
					gmGiveUp(gs, m, w)
				}
				// Or the head that waited for a handoff's outcome (tryAttempt said claimed) stops waiting: the
				// outcome may have come meanwhile.
				if w := m.head; w != nil && w.outcome && r.IntN(2) == 0 {
					step("the head stops waiting for the outcome")
					h, handed := gs.stopWaiting(w.e)
					switch {
					case w.phase == wHanded:
						if !handed || !h.handed {
							t.Fatalf("seed %d: a handed head stopping its wait was not given its handoff", seed)
						}
					case w.phase == wClaimed:
						w.phase = wAbandoned
					}
					w.outcome = false
					if w.phase != wHanded { // it gives up: its exit
						gmExit(gs, m, w)
					}
				}
			case 6: // the head exits: it got the lock through Redis, or was handed it
				if w := m.head; w != nil && w.phase != wClaimed {
					step("the head exits")
					gmExit(gs, m, w)
				}
			case 7: // the head's attempt failed
				if w := m.head; w != nil && w.phase == wAttempting {
					riding := r.IntN(2) == 0
					// The last attempt Redis answered was sent after every waiter queued, or as one of them
					// queued: that one and those after it were not waiting while Redis answered, and try for
					// themselves.
					if len(m.queue) > 0 && r.IntN(2) == 0 {
						sent := time.Now()
						if r.IntN(2) == 0 {
							sent = m.queue[r.IntN(len(m.queue))].e.queuedAt
						}
						gs.answered(w.e, sent)
						if sent.After(m.answered) {
							m.answered = sent
						}
					}
					step(fmt.Sprintf("trouble (riding %v)", riding))
					gs.trouble(w.e, riding)
					m.open = true
					for _, x := range slices.Clone(m.queue) {
						if x.phase == wQueued {
							x.phase = wFreed
							if riding && x.e.queuedAt.Before(m.answered) {
								x.phase = wRiding
							}
							m.dequeue(x)
						}
					}
				}
			case 8, 9, 10: // an owner got the lock
				owner := owners[r.IntN(len(owners))]
				step("acquired by " + owner)
				gs.acquiredBy("n", owner)
				for _, x := range slices.Clone(m.queue) {
					if x.phase == wQueued && x.owner == owner {
						x.phase = wFreed
						m.dequeue(x)
					}
				}
			}
			if err := gmCheck(gs, m); err != nil {
				t.Fatalf("seed %d: after\n  %s\n%v", seed, strings.Join(trail, "\n  "), err)
			}
			if len(violations) > 0 {
				t.Fatalf("seed %d: after\n  %s\ninvariant violated: %s", seed, strings.Join(trail, "\n  "), violations[0])
			}
		}
	}
}

// gmGiveUp is a waiter giving up: leaving, and exit for a head, as enter and the wait loop do.
func gmGiveUp(gs *gates, m *gmGate, w *gmWaiter) {
	_, _, head := gs.leaving(w.e)
	switch {
	case w.phase == wQueued:
		w.phase = wLeft
		m.dequeue(w)
	case w.phase == wClaimed:
		w.phase = wAbandoned
		m.dequeue(w)
	}
	if head || w == m.head {
		gmExit(gs, m, w)
	}
	m.forget()
}

// gmExit is the head's exit.
func gmExit(gs *gates, m *gmGate, w *gmWaiter) {
	gs.exit(w.e)
	if m.head != w {
		return
	}
	m.head, m.open = nil, false
	switch w.phase {
	case wAttempting, wSleeping:
		w.phase = wLeft
	case wClaimed:
		w.phase = wAbandoned
	}
	m.promote()
	m.forget()
}

// gmCheck compares the gate with the model.
func gmCheck(gs *gates, m *gmGate) error {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.m["n"]
	if (g != nil) != m.exists {
		return fmt.Errorf("the gate exists: %v; the model says %v", g != nil, m.exists)
	}
	for i, w := range m.all {
		if w.done {
			continue
		}
		if w.e.phase != w.phase {
			return fmt.Errorf("waiter %d (%s) is %s; the model says %s", i, w.owner, w.e.phase, w.phase)
		}
		w.done = w.phase.final() && (w.phase != wHanded || m.head != w)
	}
	if g == nil {
		return nil
	}
	if (g.head == nil) != (m.head == nil) || m.head != nil && g.head != m.head.e {
		return fmt.Errorf("another head than the model's")
	}
	if len(g.queue) != len(m.queue) {
		return fmt.Errorf("%d waiters queued; the model says %d", len(g.queue), len(m.queue))
	}
	for i, w := range m.queue {
		if g.queue[i] != w.e {
			return fmt.Errorf("the queue's order is not the model's at %d", i)
		}
	}
	if g.open != m.open || g.claims != m.claims {
		return fmt.Errorf("open %v, claims %d; the model says %v, %d", g.open, g.claims, m.open, m.claims)
	}
	return nil
}
