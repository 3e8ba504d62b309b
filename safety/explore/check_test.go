package explore

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// bounds are the times the liveness checkers allow, derived from the documented timings (docs/safety.md,
// "Liveness").
type bounds struct {
	watchdog time.Duration // the Clients' watchdog timeout
	// grant: a waiter gets what is free within this: a release's message, a wake-up, one attempt (a few
	// round trips), on a loaded machine under the race detector; a composite's retry delay (≤ 100 ms) too.
	grant time.Duration
	// recovery: after a fault ends, this long is the fault's too (reconnecting, resubscribing, undoing).
	recovery time.Duration
	// deadline: how late after its ctx's deadline a call may return.
	deadline time.Duration
	// told: how late the history may see a loss told after another owner's grant (the recording
	// goroutine's own scheduling).
	told time.Duration
	// observe: an observer delivers a recorded leader within this.
	observe time.Duration
}

func defaultBounds(watchdog time.Duration) bounds {
	return bounds{watchdog: watchdog, grant: 500 * time.Millisecond, recovery: time.Second,
		deadline: 500 * time.Millisecond, told: 50 * time.Millisecond, observe: time.Second}
}

// resources says how a kind's resources are shared: counting (semaphores: at most capacity units held at
// once, by anyone) or locking (an exclusive hold excludes every other owner; shared holds exclude only
// exclusive ones).
type resources struct {
	counting bool
	capacity []int
}

// violation is what a checker found: what, and the stretch of the schedule it concerns.
type violation struct {
	checker  string
	what     string
	from, to time.Duration
}

func (v violation) String() string { return fmt.Sprintf("%s: %s", v.checker, v.what) }

// check runs every checker over h.
func check(h *history, res resources, b bounds) []violation {
	h.mu.Lock()
	defer h.mu.Unlock()
	clipToCloses(h)
	clipSharedOwners(h)
	var vs []violation
	for _, f := range h.failures {
		vs = append(vs, violation{checker: "run", what: f, from: 0, to: h.end})
	}
	vs = append(vs, checkDeadlines(h, b)...)
	vs = append(vs, checkQuick(h, b)...)
	vs = append(vs, checkRefused(h, b)...)
	vs = append(vs, checkExclusion(h, res, b)...)
	vs = append(vs, checkWaiters(h, res, b)...)
	vs = append(vs, checkLatch(h, b)...)
	vs = append(vs, checkObservers(h, b)...)
	vs = append(vs, checkForced(h, b)...)
	vs = append(vs, checkRevoke(h, b)...)
	vs = append(vs, checkTokens(h)...)
	vs = append(vs, checkGuardLogs(h)...)
	vs = append(vs, checkRedisson(h, b)...)
	return vs
}

// checkDeadlines: every call returns by its ctx's deadline.
func checkDeadlines(h *history, b bounds) []violation {
	var vs []violation
	for _, c := range h.calls {
		if c.deadline > 0 && h.overran(c.ret-c.deadline, b.deadline, c.invoke, c.ret) {
			vs = append(vs, violation{"deadline", fmt.Sprintf("actor %d's %s returned %v after its ctx's deadline (%v)",
				c.actor, c.op, (c.ret - c.deadline).Round(time.Millisecond), c.err), c.invoke, c.ret})
		}
	}
	return vs
}

// stalling reports whether a fault that holds traffic up (rather than refusing or breaking it) overlaps
// [from, to]: a call may wait on it.
func stalling(h *history, from, to time.Duration) bool {
	for _, f := range h.faults {
		switch {
		case f.start > to || f.end < from:
		case strings.HasPrefix(f.what, fIsolated), strings.HasPrefix(f.what, fReplyLost), strings.HasPrefix(f.what, fRedisPause),
			strings.HasPrefix(f.what, fClientPause), strings.HasPrefix(f.what, fStarve), strings.HasPrefix(f.what, fLatency),
			strings.HasPrefix(f.what, fBusy), strings.HasPrefix(f.what, fLoading):
			return true
		}
	}
	return false
}

// checkQuick: a call that makes one attempt (a try without a wait, a read) returns within the grant bound
// unless traffic was held up: refused or broken connections fail it at once. It never waits for an undo
// that is not needed, nor for anything else.
func checkQuick(h *history, b bounds) []violation {
	var vs []violation
	for _, c := range h.calls {
		if c.quick && !stalling(h, c.invoke-b.recovery, c.ret) && h.overran(c.ret-c.invoke, b.grant, c.invoke, c.ret) {
			vs = append(vs, violation{"liveness", fmt.Sprintf("actor %d's %s, one attempt, took %v (%v)", c.actor, c.op, (c.ret - c.invoke).Round(time.Millisecond), c.err), c.invoke, c.ret})
		}
	}
	return vs
}

// checkRefused: a call made while its Client's connections are refused (Redis down) fails at once, with
// ErrUnavailable: nothing can reach Redis, so there is nothing to wait for. (A waiter that was already
// waiting when Redis went down rides the outage out instead; so do calls of a Client with a connection
// that was not refused.)
func checkRefused(h *history, b bounds) []violation {
	var vs []violation
	for _, f := range h.faults {
		if f.what != fDown {
			continue
		}
		for _, c := range h.calls {
			if c.client != f.target || c.invoke < f.start+100*time.Millisecond || c.invoke+b.grant > f.end ||
				stalling(h, c.invoke, c.invoke+b.grant) || !h.overran(c.ret-c.invoke, b.grant, c.invoke, c.ret) {
				continue
			}
			vs = append(vs, violation{"liveness", fmt.Sprintf("actor %d's %s, made while Redis refused its Client's connections, took %v (%v)",
				c.actor, c.op, (c.ret - c.invoke).Round(time.Millisecond), c.err), c.invoke, c.ret})
		}
	}
	return vs
}

// validEnd is when h stops being a hold its owner may act on: its release, the loss it was told, or its
// lease's earliest expiry.
// A hold that began to end as its Client closed ends then. A leased hold's earliest end is its
// acquisition's invocation plus its lease, or later when Extend moved it.
func (x *hold) validEnd() time.Duration {
	end := min(x.end, x.told)
	if x.closed > 0 {
		end = min(end, x.closed)
	}
	if x.coEnd > 0 {
		end = min(end, x.coEnd)
	}
	if x.ctxEnded > 0 { // told, whatever the cause (shared owners: a co-owner's final Unlock, or TakeOver)
		end = min(end, x.ctxEnded)
	}
	if x.lease > 0 {
		end = min(end, x.leaseEnd())
	}
	return end
}

// leaseEnd is a leased hold's earliest end.
func (x *hold) leaseEnd() time.Duration { return max(x.invoke+x.lease, x.leaseMin) }

// lost reports whether x ended otherwise than by its owner's release.
func (x *hold) lost() bool {
	return x.told < forever || x.notHeld || (x.lease > 0 && x.leaseEnd() < x.end)
}

// heldUntil is until when x's units may be held in Redis.
// A Close that returned nil gave up everything its Client had in Redis (closedBy).
func (x *hold) heldUntil() time.Duration {
	if x.phantom { // from the acquisition's invocation (grant) until its undo is surely over
		end := sat(x.endRet, x.keep)
		if x.closedBy > 0 {
			end = min(end, x.closedBy)
		}
		return end
	}
	end := forever
	switch {
	case x.released || x.notHeld:
		end = x.endRet
	case x.end < forever && x.endRet > 0:
		end = sat(x.endRet, x.keep)
	}
	if x.told < forever {
		end = min(end, x.told)
	}
	if x.lease > 0 {
		end = min(end, max(x.grant+x.lease, x.leaseMax))
	}
	if x.maxHold > 0 {
		end = min(end, x.grant+x.maxHold)
	}
	if x.closedBy > 0 {
		end = min(end, x.closedBy)
	}
	return end
}

// sat adds without overflowing forever.
func sat(a, b time.Duration) time.Duration {
	if a >= forever || b >= forever || a+b >= forever {
		return forever
	}
	return a + b
}

// excused reports whether a fault that breaks a condition of the safety promise lies within [from, to].
func excused(h *history, from, to time.Duration) bool {
	for _, f := range h.faults {
		if f.excuses && f.start <= to && f.end >= from {
			return true
		}
	}
	return false
}

// checkExclusion: never more owners than the kind allows. At each grant, the holds valid then must be
// compatible; a lost hold overlapping another owner's is excused only where the promise's conditions were
// broken, or by the recording's own lag.
func checkExclusion(h *history, res resources, b bounds) []violation {
	var vs []violation
	for r := range res.capacity {
		var on []*hold
		for _, x := range h.holds {
			if !x.phantom && slices.Contains(x.res, r) {
				on = append(on, x)
			}
		}
		for _, x := range on {
			t := x.grant
			if x.validEnd() <= t {
				continue
			}
			var valid []*hold
			units := 0
			for _, y := range on {
				if y.grant <= t && y.validEnd() > t {
					valid = append(valid, y)
					units += y.units
				}
			}
			bad := ""
			if res.counting {
				if units > res.capacity[r] {
					bad = fmt.Sprintf("%d units held of %d", units, res.capacity[r])
				}
			} else {
				for _, y := range valid {
					if y.owner != x.owner && !(y.shared && x.shared) && !forcedApart(h, b, r, t, x, y) {
						bad = fmt.Sprintf("%s and %s both hold it", x.owner, y.owner)
						break
					}
				}
			}
			if bad == "" {
				continue
			}
			if excused(h, t-b.watchdog-b.recovery, t) {
				continue
			}
			lateTold := false
			for _, y := range valid {
				if y.lost() && y.validEnd()-t <= b.told {
					lateTold = true
				}
			}
			if lateTold {
				continue
			}
			vs = append(vs, violation{"exclusion", fmt.Sprintf("resource %d at %s: %s", r, ms(t), bad), t - 10*time.Millisecond, t + 10*time.Millisecond})
		}
	}
	return vs
}

// faultFree removes from [from, to] the faults (each with the recovery after it), and returns what is
// left as segments.
func faultFree(h *history, b bounds, from, to time.Duration, busy [][2]time.Duration) [][2]time.Duration {
	cut := slices.Clone(busy)
	for _, f := range h.faults {
		cut = append(cut, [2]time.Duration{f.start, sat(f.end, b.recovery+f.hush)})
	}
	slices.SortFunc(cut, func(a, b [2]time.Duration) int { return int(a[0] - b[0]) })
	var free [][2]time.Duration
	at := from
	for _, c := range cut {
		if c[1] <= at {
			continue
		}
		if c[0] >= to {
			break
		}
		if c[0] > at {
			free = append(free, [2]time.Duration{at, c[0]})
		}
		at = max(at, c[1])
	}
	if at < to {
		free = append(free, [2]time.Duration{at, to})
	}
	return free
}

// checkWaiters: whenever what a waiter waits for is free (no other owner may hold it, nothing is
// uncertain, no fault is under way or just over), the waiter, or another, gets it within the grant bound.
func checkWaiters(h *history, res resources, b bounds) []violation {
	var vs []violation
	for _, w := range h.calls {
		if w.waitFor == nil {
			continue
		}
		end := w.ret
		if w.cancelledAt > 0 {
			end = min(end, w.cancelledAt)
		}
		var busy [][2]time.Duration
		for _, r := range w.waitFor {
			busy = append(busy, busyFor(h, res, w, r)...)
		}
		for _, seg := range faultFree(h, b, w.invoke, end, busy) {
			if h.overran(seg[1]-seg[0], b.grant, seg[0], seg[1]) {
				vs = append(vs, violation{"liveness", fmt.Sprintf("actor %d's %s waited %v (%s..%s) while what it waits for (%v) was free",
					w.actor, w.op, (seg[1] - seg[0]).Round(time.Millisecond), ms(seg[0]), ms(seg[1]), w.waitFor), seg[0], seg[1]})
				break
			}
		}
	}
	return vs
}

// busyFor returns when resource r may not be granted to waiter w: held by another owner (or, counting,
// too few units left), or wanted by a waiting writer when w is a reader.
func busyFor(h *history, res resources, w *call, r int) [][2]time.Duration {
	var busy [][2]time.Duration
	if !res.counting {
		for _, x := range h.holds {
			if x.owner == w.owner || !slices.Contains(x.res, r) || (x.shared && w.shared) {
				continue
			}
			busy = append(busy, [2]time.Duration{x.grant, x.heldUntil()})
		}
		if w.shared { // a waiting writer may go first
			for _, c := range h.calls {
				if c.waitFor != nil && !c.shared && c.owner != w.owner && slices.Contains(c.waitFor, r) {
					busy = append(busy, [2]time.Duration{c.invoke, c.ret})
				}
			}
		}
		return busy
	}
	// Counting: busy where the units possibly held leave fewer than w wants.
	type edge struct {
		at    time.Duration
		delta int
	}
	var edges []edge
	for _, x := range h.holds {
		if !slices.Contains(x.res, r) {
			continue
		}
		edges = append(edges, edge{x.grant, x.units}, edge{x.heldUntil(), -x.units})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return b.delta - a.delta // acquisitions first: busy stays busy at a handover
	})
	held, from := 0, time.Duration(-1)
	for _, e := range edges {
		held += e.delta
		tooFew := res.capacity[r]-held < w.units
		switch {
		case tooFew && from < 0:
			from = e.at
		case !tooFew && from >= 0:
			busy = append(busy, [2]time.Duration{from, e.at})
			from = -1
		}
	}
	if from >= 0 {
		busy = append(busy, [2]time.Duration{from, forever})
	}
	return busy
}

// checkLatch: an Await returns only after the latch could have opened, and returns within the bound once
// it surely has.
func checkLatch(h *history, b bounds) []violation {
	if len(h.countDown) == 0 {
		return nil
	}
	var vs []violation
	need := latchCount(h)
	invokes := make([]time.Duration, 0, len(h.countDown))
	var oks []time.Duration
	uncertain := false
	for _, c := range h.countDown {
		invokes = append(invokes, c.invoke)
		if c.err == nil {
			oks = append(oks, c.ret)
		} else {
			uncertain = true
		}
	}
	slices.Sort(invokes)
	slices.Sort(oks)
	earliest, latest := forever, forever
	if len(invokes) >= need {
		earliest = invokes[need-1]
	}
	if len(oks) >= need {
		latest = oks[need-1]
	}
	_ = uncertain
	for _, c := range h.calls {
		if !c.latchAwait {
			continue
		}
		if c.err == nil && c.granted && c.ret < earliest {
			vs = append(vs, violation{"latch", fmt.Sprintf("actor %d's %s returned at %s, before the latch could open (%s)", c.actor, c.op, ms(c.ret), ms(earliest)), c.invoke, c.ret})
		}
		end := c.ret
		if c.cancelledAt > 0 {
			end = min(end, c.cancelledAt)
		}
		from := max(c.invoke, latest)
		if from >= end {
			continue
		}
		for _, seg := range faultFree(h, b, from, end, nil) {
			if h.overran(seg[1]-seg[0], b.grant, seg[0], seg[1]) {
				vs = append(vs, violation{"liveness", fmt.Sprintf("actor %d's %s waited %v (%s..%s) after the latch opened (%s)", c.actor, c.op, (seg[1] - seg[0]).Round(time.Millisecond), ms(seg[0]), ms(seg[1]), ms(latest)), seg[0], seg[1]})
				break
			}
		}
	}
	return vs
}

// latchCount is the count the schedule set (recorded in a note-free field: the first call's units).
func latchCount(h *history) int {
	for _, c := range h.calls {
		if c.op == "TrySetCount" {
			return c.units
		}
	}
	return 1
}

// checkObservers: every observer sees every leader (one elected while it observed, not lost with the
// election's keys), within the bound (or the faults under way, and the recovery after them), in order.
func checkObservers(h *history, b bounds) []violation {
	var vs []violation
	for i, o := range h.observers {
		for j := 1; j < len(o.got); j++ {
			p, d := o.got[j-1], o.got[j]
			if d.term <= p.term && !d.restarted {
				vs = append(vs, violation{"observer", fmt.Sprintf("observer %d was given term %d after term %d, without Restarted", i, d.term, p.term), p.at, d.at})
			}
		}
		for _, l := range h.leaders {
			if l.at < o.start {
				continue
			}
			due := l.at + b.observe
			if excused(h, l.at-b.observe, due+b.recovery) {
				continue
			}
			for _, f := range h.faults {
				if f.start <= due && f.end >= l.at {
					due = max(due, sat(f.end, b.recovery+b.observe))
				}
			}
			due = sat(due, h.lagIn(l.at, due))
			if o.end < due {
				continue
			}
			seen := false
			for _, d := range o.got {
				if d.owner == l.owner && d.term == l.term {
					seen = true
					break
				}
			}
			if !seen {
				vs = append(vs, violation{"observer", fmt.Sprintf("observer %d (%s..%s) never saw the leader %s of term %d elected at %s", i, ms(o.start), ms(o.end), l.owner, l.term, ms(l.at)), l.at, due})
			}
		}
	}
	// Terms are fencing tokens: two leaders with one term is two owners of one token.
	seen := map[uint64]leaderRec{}
	for _, l := range h.leaders {
		if p, ok := seen[l.term]; ok && p.owner != l.owner && !excused(h, p.at, l.at) {
			vs = append(vs, violation{"election", fmt.Sprintf("term %d won by %s at %s and by %s at %s", l.term, p.owner, ms(p.at), l.owner, ms(l.at)), p.at, l.at})
		}
		seen[l.term] = l
	}
	return vs
}

// isErr reports whether err matches any of targets.
func isErr(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}
