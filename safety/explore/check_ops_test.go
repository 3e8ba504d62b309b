package explore

import (
	"fmt"
	"slices"
	"time"
)

// The checkers of the operations beyond acquiring and releasing (ops_test.go, faults_test.go).

// clipToCloses records, on the holds of each Client whose Close returned nil, when that Close gave them up:
// Close "returns nil when everything was given up in Redis", acquisitions under way and background work
// (releases, undos) included.
func clipToCloses(h *history) {
	for _, c := range h.closes {
		if c.err != nil {
			continue
		}
		for _, x := range h.holds {
			if x.client == c.client && x.grant <= c.ret && (x.closedBy == 0 || c.ret < x.closedBy) {
				x.closedBy = c.ret
			}
		}
	}
}

// clipSharedOwners ends, for the checkers, the holds of an owner that two actors share where the other
// actor's Unlock released them: an actor whose hold was lost (its context ended, its lease ran out) and
// whose Unlock then returned nil released the level its co-owner took meanwhile, as the owner's Unlock must
// (the owner, not the goroutine, holds the lock).
func clipSharedOwners(h *history) {
	for _, y := range h.holds {
		if !y.sharedOwner || y.phantom || !y.released || !y.lost() {
			continue
		}
		// The Unlock may have released x anywhere from its invocation to its return, x's grant included
		// (it may have waited for its turn behind the co-owner's acquisition).
		for _, x := range h.holds {
			if from := max(y.end, x.grant); x != y && x.owner == y.owner && !x.phantom && x.grant <= y.endRet && x.validEnd() > from {
				x.coEnd = from
			}
		}
	}
}

// victimBound is how soon after a forced event f its victims must have learnt of their loss (their
// HoldContext ended, or their Unlock said ErrNotHeld): "within milliseconds where its Client watches its
// holds" (ForceUnlock's doc; TakeOver: "at once") — 500 ms on this loaded machine — when no other fault
// is under way or was in the second before; else the watchdog timeout, by which a Client that cannot
// reach Redis counts its holds as expired, plus the 500 ms.
func victimBound(h *history, b bounds, f forcedRec) time.Duration {
	for _, w := range h.faults {
		if w.start == f.from && (w.what == fForce || w.what == fDelete) {
			continue
		}
		if w.start <= f.to+b.grant && sat(w.end, b.recovery) >= f.from {
			return sat(f.to, b.watchdog+b.grant)
		}
	}
	return f.to + b.grant
}

// victimOf reports whether y, a hold on resource r, may have been ended by f: it was (or was being)
// acquired before f was over, was valid when f began, and is not f's own.
func victimOf(f forcedRec, r int, y *hold) bool {
	return slices.Contains(f.res, r) && y.owner != f.owner && y.invoke < f.to && y.grant < f.to+time.Second &&
		y.validEnd() > f.from
}

// forcedApart reports whether x, granted at t, and y overlap on resource r only because a forced event
// (a TakeOver, a Revoke, a ForceUnlock, a key deleted) ended one of them before it knew: a takeover makes
// two owners by design until the one it took from learns it. The overlap is excused when that one learnt
// within victimBound (checkForced reports the victims that did not).
func forcedApart(h *history, b bounds, r int, t time.Duration, x, y *hold) bool {
	for _, f := range h.forced {
		if t < f.from {
			continue
		}
		bound := victimBound(h, b, f)
		for _, v := range []*hold{x, y} {
			if victimOf(f, r, v) && (v.redisson || v.validEnd() <= bound) {
				return true
			}
		}
	}
	return false
}

// checkForced: a relock hold taken over (TakeOver, or a Revoke that returned nil), force-unlocked, or
// whose key was deleted, learns it within victimBound: its HoldContext ends with ErrLockLost, or its
// owner's Unlock returns ErrNotHeld; an Unlock made after it never returns nil ("A hold that ends any other
// way than by its owner's Unlock or its Client's Close is lost: the owner's HoldContext is cancelled with a
// cause matching ErrLockLost, and its Unlock returns ErrNotHeld"). Only the holds surely held when the event
// began (acquired before it, released after it) are checked; Redisson's holders are told nothing.
func checkForced(h *history, b bounds) []violation {
	var vs []violation
	for _, f := range h.forced {
		if !f.sure || excused(h, f.from-b.watchdog-b.recovery, f.to) {
			continue
		}
		bound := victimBound(h, b, f)
		for _, y := range h.holds {
			if y.phantom || y.redisson || y.grant >= f.from || y.end <= f.to || y.validEnd() <= f.from ||
				!slices.ContainsFunc(y.res, func(r int) bool { return slices.Contains(f.res, r) }) || y.owner == f.owner {
				continue
			}
			learnt := y.validEnd()
			if y.end < forever && !y.released {
				learnt = min(learnt, y.endRet)
			}
			switch {
			case y.released && !y.sharedOwner && y.told == forever:
				vs = append(vs, violation{"forced", fmt.Sprintf("%s's hold (acquired %s..%s) was ended by %s at %s..%s, and its Unlock at %s..%s returned nil",
					y.owner, ms(y.invoke), ms(y.grant), f.op, ms(f.from), ms(f.to), ms(y.end), ms(y.endRet)), f.from, y.endRet})
			case learnt > bound && h.overran(learnt-f.to, bound-f.to, f.to, learnt):
				vs = append(vs, violation{"forced", fmt.Sprintf("%s's hold (acquired %s..%s) was ended by %s at %s..%s, and its owner learnt it only at %s (bound %s)",
					y.owner, ms(y.invoke), ms(y.grant), f.op, ms(f.from), ms(f.to), ms(learnt), ms(bound)), f.from, min(learnt, f.to+5*time.Second)})
			}
		}
	}
	return vs
}

// checkRevoke: a Revoke takes the lock over "only from the holders that were asked and heard: relock holders
// that listen for requests"; it leaves the lock to "a Redisson client's holder, a relock holder that does
// not listen, or one that got the lock after the request" (ErrNotHeard). A hold that a Revoke which returned
// nil took (acquired before the Revoke, released after it) must have listened (ReleaseRequests) before the
// Revoke returned, and, when no fault could have lost the request on its way (none under way from a second
// before the Revoke to its return), have heard one of that Revoke's requests.
func checkRevoke(h *history, b bounds) []violation {
	var vs []violation
	for _, f := range h.forced {
		if f.revoke == "" || !f.sure || excused(h, f.from-b.watchdog-b.recovery, f.to) {
			continue
		}
		quiet := true
		for _, w := range h.faults {
			if w.start <= f.to && sat(w.end, b.recovery) >= f.from {
				quiet = false
			}
		}
		for _, y := range h.holds {
			// Held when the Revoke began, and ended by nothing else before it returned: not released, its lease
			// not run out, its Client not closed; and found gone (its context ended as lost, or its Unlock said so).
			if y.phantom || y.grant >= f.from || y.end <= f.to || y.validEnd() <= f.from || y.owner == f.owner ||
				!slices.ContainsFunc(y.res, func(r int) bool { return slices.Contains(f.res, r) }) ||
				(y.lease > 0 && y.leaseEnd() <= f.to) || (y.closed > 0 && y.closed <= f.to) || (y.told == forever && !y.notHeld) {
				continue
			}
			if slices.ContainsFunc(h.forced, func(g forcedRec) bool { // another may have ended it
				return g.revoke != f.revoke && g.from < f.to && g.to > y.grant && slices.ContainsFunc(g.res, func(r int) bool { return slices.Contains(f.res, r) })
			}) {
				continue
			}
			// The owner's hold listens, and hears: with a shared owner, through any of its goroutines' holds.
			listened, heard := forever, false
			for _, z := range h.holds {
				if z == y || (y.sharedOwner && z.owner == y.owner && !z.phantom && z.grant <= f.to && max(z.end, z.ctxEnded) >= f.from) {
					if z.listened > 0 {
						listened = min(listened, z.listened)
					}
					heard = heard || slices.ContainsFunc(z.heard, func(r heardRec) bool { return r.reason == f.revoke })
				}
			}
			switch {
			case y.redisson:
				vs = append(vs, violation{"revoke", fmt.Sprintf("%s at %s..%s took over the Redisson client's hold %s (acquired %s..%s), which cannot hear a request",
					f.op, ms(f.from), ms(f.to), y.owner, ms(y.invoke), ms(y.grant)), f.from, f.to})
			case listened > f.to:
				vs = append(vs, violation{"revoke", fmt.Sprintf("%s at %s..%s took over %s's hold (acquired %s..%s), which did not listen for requests",
					f.op, ms(f.from), ms(f.to), y.owner, ms(y.invoke), ms(y.grant)), f.from, f.to})
			case quiet && !heard:
				vs = append(vs, violation{"revoke", fmt.Sprintf("%s at %s..%s took over %s's hold (acquired %s..%s, listening from %s), which did not hear its request (it heard %v)",
					f.op, ms(f.from), ms(f.to), y.owner, ms(y.invoke), ms(y.grant), ms(listened), y.heard), f.from, f.to})
			}
		}
	}
	return vs
}

// checkTokens: fencing tokens are the lock's counter, taken by each first acquisition (WithFencing): two
// owners never have holds with one token, unless Redis lost the counter (a restart without persistence).
func checkTokens(h *history) []violation {
	if lostData(h) {
		return nil
	}
	var vs []violation
	seen := map[uint64]*hold{}
	for _, x := range h.holds {
		if x.phantom || x.token == 0 {
			continue
		}
		if y := seen[x.token]; y != nil && y.owner != x.owner {
			vs = append(vs, violation{"tokens", fmt.Sprintf("token %d was %s's (acquired %s..%s) and %s's (acquired %s..%s)",
				x.token, y.owner, ms(y.invoke), ms(y.grant), x.owner, ms(x.invoke), ms(x.grant)), y.invoke, x.grant})
		}
		seen[x.token] = x
	}
	return vs
}

// lostData reports whether Redis lost what it had acknowledged during the schedule (a restart without
// persistence).
func lostData(h *history) bool {
	return slices.ContainsFunc(h.faults, func(w window) bool { return w.what == fRestartNone })
}

// checkGuardLogs: "a write can never land after another owner took the lock" (GuardedWrite). Each guarded
// write's entry carries the fencing token its hold began with, which the hold keeps while its HoldContext
// lives (the actor writes only then, and only while FencingToken still gives that token); a GuardedEval's
// entry also has the lock's counter and whether the owner's field was in the lock, as they were when it ran.
// So, in the order the writes landed: a GuardedEval ran only while its owner's field was in the lock and,
// fenced, with the counter at its hold's token; the tokens of the fenced writes never go down (the counter
// only grows, and a guarded write lands only while it is at the writer's token); and a FencedWrite never
// lands after a higher token wrote through the fence (it returns ErrStaleToken).
func checkGuardLogs(h *history) []violation {
	if lostData(h) {
		return nil
	}
	var vs []violation
	for _, lg := range []struct {
		name    string
		entries []string
	}{{"guarded", h.glog}, {"fenced", h.flog}} {
		var last uint64
		lastEntry := ""
		for i, e := range lg.entries {
			token, rest, err := parseEntry(e)
			if err != nil {
				vs = append(vs, violation{"guard", fmt.Sprintf("the %s writes' log has %v", lg.name, err), 0, h.end})
				continue
			}
			if len(rest) == 5 && rest[2] == "e" { // actor hold e counter held
				if rest[4] != "1" {
					vs = append(vs, violation{"guard", fmt.Sprintf("a GuardedEval of actor %s (hold %s) ran without its owner's field in the lock (entry %d: %q)", rest[0], rest[1], i, e), 0, h.end})
				}
				if token != 0 && rest[3] != fmt.Sprint(token) {
					vs = append(vs, violation{"guard", fmt.Sprintf("a GuardedEval of actor %s (hold %s, token %d) ran with the lock's counter at %s (entry %d: %q)", rest[0], rest[1], token, rest[3], i, e), 0, h.end})
				}
			}
			if token == 0 {
				continue
			}
			if token < last {
				vs = append(vs, violation{"guard", fmt.Sprintf("a %s write of token %d (entry %d: %q) landed after one of token %d (%q): a write after another owner took the lock",
					lg.name, token, i, e, last, lastEntry), 0, h.end})
			}
			if token > last {
				last, lastEntry = token, e
			}
		}
	}
	return vs
}

// redissonRun is how many holds of one relock Client a subscribed Redisson waiter may see between two
// unlock messages it hears: docs/redisson.md ("Handoffs within a Client"): "a Client hands a lock over at
// most 8 times in a row. The release after that lets the others go first: it publishes Redisson's 0"; and
// every release that is not a handoff publishes it too. So at most 9 holds of one Client come between two
// of its releases heard. Twice that is allowed: a hold's grant and a message's hearing are recorded by
// goroutines that may run some milliseconds late on this loaded machine.
const redissonRun = 2 * 9

// checkRedisson: relock Clients do not keep a lock from a Redisson waiter by handing it over among their
// owners: while a Redisson-protocol waiter waits, subscribed to the lock's channel (outside faults and the
// second after each, takeovers, and the stretches in which the process did not run), no relock Client gets
// the lock more than redissonRun times between two unlock messages the waiter hears. Whether the waiter
// wins the race a message starts is not checked: it is a race.
func checkRedisson(h *history, b bounds) []violation {
	var vs []violation
	var forced [][2]time.Duration // and the stretches the process did not run
	for _, f := range h.forced {
		forced = append(forced, [2]time.Duration{f.from, f.to})
	}
	forced = append(forced, h.lags...)
	for _, w := range h.calls {
		if !w.redisson || w.waitFor == nil {
			continue
		}
		for _, sub := range w.subscribed {
			free := faultFree(h, b, sub[0], min(sub[1], w.ret), forced)
			// The stretches between two messages heard (and the subscription's ends), each counted apart.
			// A takeover or a forced unlock begins a chain afresh, as a release would: a cut too.
			cuts := []time.Duration{sub[0]}
			for _, t := range w.heard0 {
				if t > sub[0] && t < sub[1] {
					cuts = append(cuts, t)
				}
			}
			for _, f := range h.forced {
				if f.to > sub[0] && f.to < sub[1] {
					cuts = append(cuts, f.to)
				}
			}
			slices.Sort(cuts)
			cuts = append(cuts, min(sub[1], w.ret))
			for _, s := range free {
				h.redissonRow = max(h.redissonRow, relockRow(h, s[0], s[1]))
			}
			for i := 1; i < len(cuts); i++ {
				from, to := cuts[i-1], cuts[i]
				counts := map[int]int{}
				for _, x := range h.holds {
					if x.phantom || x.redisson || x.taker || x.client < 0 || x.grant <= from || x.grant >= to ||
						!slices.ContainsFunc(free, func(s [2]time.Duration) bool { return s[0] <= x.grant && x.grant < s[1] }) {
						continue
					}
					counts[x.client]++
				}
				for c, n := range counts {
					h.redissonMost = max(h.redissonMost, n)
					if n > redissonRun {
						vs = append(vs, violation{"redisson", fmt.Sprintf("actor %d's %s (%s..%s), subscribed, heard no release while relock Client %d got the lock %d times (%s..%s; at most %d: a Client hands a lock over at most 8 times in a row, then publishes Redisson's 0)",
							w.actor, w.op, ms(w.invoke), ms(w.ret), c, n, ms(from), ms(to), redissonRun), from, to})
					}
				}
			}
		}
	}
	return vs
}

// relockRow is the longest run of relock holds granted in (from, to) with no Redisson client's hold
// between them: how many relock holds a Redisson waiter waiting through that stretch waited behind.
func relockRow(h *history, from, to time.Duration) int {
	var grants []*hold
	for _, x := range h.holds {
		if !x.phantom && !x.taker && x.grant > from && x.grant < to {
			grants = append(grants, x)
		}
	}
	slices.SortFunc(grants, func(a, b *hold) int { return int(a.grant - b.grant) })
	row, most := 0, 0
	for _, x := range grants {
		if x.redisson || x.client < 0 {
			row = 0
			continue
		}
		row++
		most = max(most, row)
	}
	return most
}
