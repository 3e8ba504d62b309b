package explore

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// forever stands for "until after the schedule": a hold that may never have ended, a wait that never did.
const forever = time.Duration(1<<62 - 1)

// hold is one grant as the history records it: an owner held units of some resources from the return of
// its acquisition (grant) until it ended. It is also what may be held without a grant: an acquisition
// that failed may have run in Redis (phantom), and holds its units until relock undid it or it expired.
type hold struct {
	owner    string
	res      []int // the resources held: one, or a MultiLock's parts
	units    int   // permits; 1 for locks
	shared   bool  // a read hold
	phantom  bool  // a failed acquisition that may have run: never valid, possibly held
	invoke   time.Duration
	grant    time.Duration // the acquisition's return
	lease    time.Duration // 0: kept by the watchdog
	end      time.Duration // the release's invocation; forever while it has not been invoked
	endRet   time.Duration // the release's return
	endErr   error         // what the release returned
	released bool          // the release returned nil
	notHeld  bool          // the release found the hold gone (ErrNotHeld): it was lost before
	told     time.Duration // when the holder was told it lost the hold; forever if never
	// keep is how long after the release (or the told loss, or the failed acquisition) the units may
	// still be held in Redis: a background release or undo, an expiry. forever: maybe never given back.
	keep time.Duration
	// cause is what ended the hold's context, when it ended while the schedule ran.
	cause error

	// What the operations beyond acquiring and releasing record (ops_test.go).
	client      int           // the Client (of a phantom too); negative: a Redisson client's
	seq         int           // the actor's count of holds, this one's
	sharedOwner bool          // its owner is shared with another actor (WithOwner)
	redisson    bool          // a Redisson client's hold: it is told of no loss
	token       uint64        // its fencing token (FencingToken when it began), 0 unfenced
	maxHold     time.Duration // its budget (WithMaxHold), 0: none
	taker       bool          // a TakeOver's or a Revoke's
	// leaseMin and leaseMax are the earliest and latest ends of a leased hold, which Extend moves.
	leaseMin, leaseMax time.Duration
	closed             time.Duration // when its context ended as its Client closed; 0 if not
	closedBy           time.Duration // when its Client's Close returned nil, having given it up (0: not)
	coEnd              time.Duration // when its co-owner's Unlock released it (clipSharedOwners; 0: not)
	ctxEnded           time.Duration // when its context ended, whatever the cause (0: not while the schedule ran)
	listened           time.Duration // when it began to listen for requests (0: it did not)
	heard              []heardRec    // the requests it heard
}

// window is a fault, from its start to its end, in the schedule's time.
type window struct {
	what       string
	target     int // the Client or server it hit
	start, end time.Duration
	// excuses says the fault breaks a condition of the safety promise (docs/safety.md, "The promise"):
	// Redis lost what it acknowledged (a restart without persistence), or a process paused past the
	// watchdog timeout (the watchdog starved). An owner overlapping a lost hold is then not a violation.
	excuses bool
	// hush is how long after the fault's end (and the recovery) a waiter may still sleep through it: a
	// key deleted without an announcement is seen at the time to live the waiters last read.
	hush time.Duration
}

// call is one API call with its deadline, for "every call returns by its ctx's deadline".
type call struct {
	actor          int
	client         int
	op             string
	invoke, ret    time.Duration
	deadline       time.Duration // 0: none
	err            error
	waitFor        []int // resources a blocking acquisition waits for (nil: not one)
	quick          bool  // one attempt (a try without wait, a read): it waits for nothing
	units          int
	shared         bool
	owner          string
	granted        bool
	cancelledAt    time.Duration // when the actor cancelled it mid-wait (0: not)
	latchAwait     bool
	observerLeader bool
	revoke         string // a Revoke's reason
	redisson       bool   // a Redisson client's wait
	// A Redisson client's wait: when it was subscribed to the lock's channel, and when it heard an unlock
	// message there.
	subscribed [][2]time.Duration
	heard0     []time.Duration
}

// leaderRec is an election win: the owner and term a Campaign returned, when.
type leaderRec struct {
	owner string
	term  uint64
	at    time.Duration
}

// delivery is a leader an observer was given.
type delivery struct {
	owner     string
	term      uint64
	at        time.Duration
	restarted bool
}

// observerRec is one Observe: when it began and ended, and what it delivered.
type observerRec struct {
	start, end time.Duration
	got        []delivery
}

// history is what a schedule recorded. Its methods are safe for concurrent use.
type history struct {
	base time.Time

	mu        sync.Mutex
	holds     []*hold
	calls     []*call
	faults    []window
	leaders   []leaderRec
	observers []*observerRec
	countDown []*call // a latch's CountDowns
	notes     []string
	failures  []string // violations found while running (a Resign that did not end leadership, a count)
	forced    []forcedRec
	closes    []closeRec
	glog      []string // the guarded writes' log, as Redis has it once the schedule is over
	flog      []string // the fenced writes' log
	end       time.Duration
	// lags are the stretches in which the test process itself did not run (monitorLag): a call that
	// overran its bound by no more than the process lagged within it was not late by the library's doing.
	lags [][2]time.Duration
	// lagExcused counts the overruns lags excused, for the summary.
	lagExcused int
	// redissonMost is the most holds one relock Client got while a Redisson waiter waited (checkRedisson),
	// for the summary: how close the schedules came to the bound.
	redissonMost int
	// redissonRow is the longest run of relock holds a subscribed Redisson waiter waited through
	// (relockRow), for the summary.
	redissonRow int
}

func newHistory() *history { return &history{base: time.Now()} }

func (h *history) now() time.Duration { return time.Since(h.base) }

func (h *history) addCall(c *call) {
	h.mu.Lock()
	h.calls = append(h.calls, c)
	h.mu.Unlock()
}

func (h *history) addHold(x *hold) {
	h.mu.Lock()
	h.holds = append(h.holds, x)
	h.mu.Unlock()
}

func (h *history) fault(w window) {
	h.mu.Lock()
	h.faults = append(h.faults, w)
	h.mu.Unlock()
}

func (h *history) note(format string, args ...any) {
	h.mu.Lock()
	h.notes = append(h.notes, fmt.Sprintf("%8s ", h.now().Round(time.Millisecond))+fmt.Sprintf(format, args...))
	h.mu.Unlock()
}

// fail records a violation seen while the schedule ran.
func (h *history) fail(format string, args ...any) {
	h.mu.Lock()
	h.failures = append(h.failures, fmt.Sprintf("at %v: ", h.now().Round(time.Millisecond))+fmt.Sprintf(format, args...))
	h.mu.Unlock()
}

// update runs f under the history's lock (records are changed while the checkers may not yet read).
func (h *history) update(f func()) {
	h.mu.Lock()
	f()
	h.mu.Unlock()
}

// lagPeriod and lagMin: monitorLag wakes every lagPeriod, and records a stretch in which it woke at
// least lagMin late (shorter lags are the timer's and the scheduler's ordinary noise, not counted).
const (
	lagPeriod = 5 * time.Millisecond
	lagMin    = 20 * time.Millisecond
)

// monitorLag records, until stop is closed, the stretches in which a goroutine of the test process that
// asked to wake every lagPeriod was not run: the machine was too loaded to run the process (CI runs every
// package at once, on 2 cores, under the race detector), or a fault starved it. The library cannot
// return by a deadline while its process does not run, so the liveness checkers do not count such
// stretches against it.
func (h *history) monitorLag(stop <-chan struct{}) {
	t := time.NewTicker(lagPeriod)
	defer t.Stop()
	last := h.now()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		now := h.now()
		if now-last-lagPeriod >= lagMin {
			h.mu.Lock()
			h.lags = append(h.lags, [2]time.Duration{last + lagPeriod, now})
			h.mu.Unlock()
		}
		last = now
	}
}

// lagIn is how long the process did not run within [from, to].
func (h *history) lagIn(from, to time.Duration) time.Duration {
	var d time.Duration
	for _, l := range h.lags {
		if s, e := max(l[0], from), min(l[1], to); e > s {
			d += e - s
		}
	}
	return d
}

// overran reports whether took, measured over [from, to], exceeds bound once the process's lag within
// [from, to] is taken off; an overrun that the lag excuses is counted in lagExcused.
func (h *history) overran(took, bound, from, to time.Duration) bool {
	if took <= bound {
		return false
	}
	if took-h.lagIn(from, to) <= bound {
		h.lagExcused++
		return false
	}
	return true
}

// ms formats a schedule time.
func ms(d time.Duration) string {
	if d >= forever/2 {
		return "∞"
	}
	return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond))
}

// around prints the part of the history within [from, to]: the calls, holds and faults that overlap it,
// in order of their start: the minimal history a violation is shown with.
func (h *history) around(from, to time.Duration) string {
	type line struct {
		at   time.Duration
		text string
	}
	var lines []line
	for _, c := range h.calls {
		if c.ret < from || c.invoke > to {
			continue
		}
		text := fmt.Sprintf("actor %d %-s %s..%s", c.actor, c.op, ms(c.invoke), ms(c.ret))
		if c.deadline > 0 {
			text += " deadline " + ms(c.deadline)
		}
		if c.cancelledAt > 0 {
			text += " cancelled " + ms(c.cancelledAt)
		}
		if c.err != nil {
			text += fmt.Sprintf(" err=%v", c.err)
		} else if c.waitFor != nil {
			text += fmt.Sprintf(" granted=%v", c.granted)
		}
		lines = append(lines, line{c.invoke, text})
	}
	for _, x := range h.holds {
		if x.grant > to || (max(x.end, x.endRet) < from && (x.told >= forever || x.told < from)) {
			continue
		}
		kind := "hold"
		if x.phantom {
			kind = "maybe-held"
		}
		text := fmt.Sprintf("%s %s of %v (units %d, shared %v, lease %v): %s..%s released=%v notHeld=%v told=%s keep=%s",
			kind, x.owner, x.res, x.units, x.shared, x.lease, ms(x.grant), ms(x.end), x.released, x.notHeld, ms(x.told), ms(x.keep))
		if x.cause != nil {
			text += fmt.Sprintf(" context ended: %v", x.cause)
		}
		lines = append(lines, line{x.grant, text})
	}
	for _, f := range h.faults {
		if f.end < from || f.start > to {
			continue
		}
		lines = append(lines, line{f.start, fmt.Sprintf("fault %s %s..%s", f.what, ms(f.start), ms(f.end))})
	}
	for i, o := range h.observers {
		for _, d := range o.got {
			if d.at < from || d.at > to {
				continue
			}
			text := fmt.Sprintf("observer %d given %s of term %d", i, d.owner, d.term)
			if d.restarted {
				text += " (restarted)"
			}
			lines = append(lines, line{d.at, text})
		}
	}
	for _, l := range h.lags {
		if l[1] < from || l[0] > to {
			continue
		}
		lines = append(lines, line{l[0], fmt.Sprintf("the test process did not run %s..%s", ms(l[0]), ms(l[1]))})
	}
	slices.SortStableFunc(lines, func(a, b line) int { return int(a.at - b.at) })
	var b strings.Builder
	for i, l := range lines {
		if i == 60 && to < forever {
			fmt.Fprintf(&b, "    … %d more\n", len(lines)-i)
			break
		}
		fmt.Fprintf(&b, "    %s\n", l.text)
	}
	return b.String()
}
