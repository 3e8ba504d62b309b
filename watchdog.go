package relock

import (
	"container/heap"
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// renewBatchSize is how many holds one run of a renewal script extends. Bigger batches are split into
// several runs, all sent in one pipeline.
const renewBatchSize = 500

// renewal is how the watchdog extends a hold: a script that renews many holds of one kind in one run,
// given the Client's watchdog timeout (ms) in ARGV[1] and then, for each hold, its keys and args, of a
// number fixed by the script. It replies with one integer per hold: 1 renewed, 0 gone.
type renewal struct {
	script *script
	keys   []string
	field  string   // the owner's field, the hold's first arg
	args   []string // the args that follow it, the same for every hold of the lock
	// check asks the script to extend nothing and only say whether the hold is there (a lease hold, which
	// the watchdog watches for a loss without renewing it): the script is given 0 as the timeout.
	check bool
	// ttl, when not 0, is the time to live the renewal gives instead of the watchdog timeout: what is left
	// of a hold's budget (WithMaxHold), or Extend's lease.
	ttl time.Duration
	// until, when not 0, is when the hold's budget ends on Redis's clock (ms): no later (see budget.go).
	until int64
}

// ttlArg is the time to live the renewal script is given: 0 for a check, else r.ttl or the Client's
// watchdog timeout, in milliseconds.
func (r renewal) ttlArg(timeout time.Duration) string {
	switch {
	case r.check:
		return "0"
	case r.ttl > 0:
		return holdTTLArg(r.ttl, r.until, r.until > 0)
	}
	return fmtMillis(timeout)
}

// scheduleLocked sets h's next event, timeout/3 after base: a renewal, or, for a lease hold, a check that
// Redis still has it, unless its lease ends first, or its budget. A hold whose renewal is under way is
// queued by the renewal's outcome.
func (w *holdTable) scheduleLocked(h *hold, base time.Time) {
	h.next = base.Add(w.timeout / 3)
	if !h.renewed() && h.expiresAt.Before(h.next) {
		h.next = h.expiresAt
	}
	if !h.budgetAt.IsZero() && h.budgetAt.Before(h.next) {
		h.next = h.budgetAt
	}
	if h.renewing == renewQueued {
		w.queueLocked(h)
	}
}

// queueLocked puts h in the watchdog's queue at h.next, or moves it there, and has the loop look at the
// queue again if that is earlier than it would.
func (w *holdTable) queueLocked(h *hold) {
	if h.index >= 0 {
		heap.Fix(&w.queue, h.index)
	} else {
		heap.Push(&w.queue, h)
	}
	if !w.started {
		w.started = true
		go w.loop()
	} else if h.next.Before(w.sleepUntil) {
		w.wakeLocked()
	}
}

// wakeLocked makes the loop look at the queue again before it next would.
func (w *holdTable) wakeLocked() {
	w.sleepUntil = time.Time{}
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// loop is the watchdog goroutine: it sleeps until the next event in the queue, handles what is due, and
// ends with the Client.
func (w *holdTable) loop() {
	defer close(w.stopped)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if wait := w.tick(time.Now()); wait >= 0 {
			timer.Reset(wait)
		} else {
			timer.Stop()
		}
		select {
		case <-timer.C:
		case <-w.wake:
		case <-w.c.life.Done():
			return
		}
	}
}

// tick ends the holds whose lease, budget or time ran out, sends the renewals that are due, and returns how
// long until the next event (negative: none queued).
func (w *holdTable) tick(now time.Time) time.Duration {
	w.mu.Lock()
	// Renewals falling due within timeout/6 of one due now go with it, so holds acquired at nearby times
	// share a batch; no hold is renewed more than timeout/6 early.
	horizon := now.Add(w.timeout / 6)
	var candidates, later []*hold
	var out stepped
	for len(w.queue) > 0 && !w.queue[0].next.After(horizon) {
		h := heap.Pop(&w.queue).(*hold)
		switch {
		case !h.budgetAt.IsZero() && !h.budgetAt.After(now), !h.expiresAt.After(now):
			w.stepLocked(h, &holdEvent{ev: evDue, now: now}, &out) // it ends
		case h.renew.script == nil || !h.renewed() && !h.next.Before(h.expiresAt):
			later = append(later, h) // a lease hold whose next event is the end of its lease
		default:
			candidates = append(candidates, h) // a renewal, or a lease hold's check
		}
	}
	if len(candidates) > 0 && candidates[0].next.After(now) { // nothing is due yet: wait for the first
		later = append(later, candidates...)
		candidates = nil
	}
	for _, h := range later {
		heap.Push(&w.queue, h)
	}
	// What the batch sends is copied now, under the lock: an owner's attempt may update its hold's renewal
	// (a waiting owner's queue entry) while the batch is out.
	due := candidates[:0]
	var jobs []renewal
	deadline := now.Add(w.timeout / 3)
	for _, h := range candidates {
		if w.stepLocked(h, &holdEvent{ev: evDue, now: now}, &out) == nil {
			continue
		}
		due = append(due, h)
		job := h.renew
		job.check = !h.renewed()
		if !h.budgetAt.IsZero() && h.renewed() {
			job.ttl = min(w.timeout, h.budgetAt.Sub(now).Truncate(time.Millisecond)) // never past the budget
			job.until = h.budgetEndLocked(h.budgetAt)                                // nor past its end on Redis's clock (budget.go)
		}
		jobs = append(jobs, job)
		if h.expiresAt.Before(deadline) {
			deadline = h.expiresAt
		}
	}
	wait := time.Duration(-1)
	w.sleepUntil = now.Add(100 * 365 * 24 * time.Hour)
	if len(w.queue) > 0 {
		wait = max(w.queue[0].next.Sub(now), 0)
		w.sleepUntil = now.Add(wait)
	}
	w.mu.Unlock()
	out.finish(w.c.tel)
	if len(due) > 0 {
		w.renew(due, jobs, now, deadline)
	}
	return wait
}

// renew sends one batch of renewals (jobs[i] renews due[i]) in the background and applies their outcomes.
// The batch gives up at deadline: when the first of its holds expires, or after timeout/3. The holds it
// could not renew are tried again shortly, until each one's expiry.
func (w *holdTable) renew(due []*hold, jobs []renewal, sentAt, deadline time.Time) {
	ok := w.c.goBackground(func(life context.Context) {
		ctx, cancel := context.WithDeadline(life, deadline)
		results, err := w.runRenewals(ctx, jobs)
		cancel()
		w.applyRenewals(due, jobs, results, err, sentAt)
	})
	if !ok { // the Client is closing
		w.applyRenewals(due, jobs, make([]int64, len(due)), ErrClosed, sentAt)
	}
}

// runRenewals runs the renewals due: per script and mode (renew or check) and, on a cluster, per slot (one
// run never mixes slots), runs of up to renewBatchSize holds, all sent at once, so that they reach each
// node in one write. results[i] is 1 (renewed), 0 (gone) or -1 (no answer) for due[i].
func (w *holdTable) runRenewals(ctx context.Context, due []renewal) ([]int64, error) {
	results := make([]int64, len(due))
	type group struct {
		script *script
		ttl    string
		slot   uint16
	}
	groups := make(map[group][]int)
	var order []group
	for i, r := range due {
		results[i] = -1
		g := group{script: r.script, ttl: r.ttlArg(w.timeout)}
		if w.c.cluster {
			g.slot = slot(r.keys[0])
		}
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], i)
	}
	var calls []scriptCall
	var parts [][]int // the positions in due of each call's holds
	for _, g := range order {
		idx := groups[g]
		for b := 0; b < len(idx); b += renewBatchSize {
			part := idx[b:min(b+renewBatchSize, len(idx))]
			call := scriptCall{script: g.script, args: []string{g.ttl}}
			for _, i := range part {
				call.keys = append(call.keys, due[i].keys...)
				call.args = append(append(call.args, due[i].field), due[i].args...)
			}
			calls, parts = append(calls, call), append(parts, part)
		}
	}
	replies, errs := w.c.scripts.runBatch(ctx, calls)
	var firstErr error
	for b, vals := range replies {
		err := errs[b]
		if err == nil && len(vals) != len(parts[b]) {
			err = errUnexpectedReply
		}
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		for j, i := range parts[b] {
			results[i] = vals[j]
		}
	}
	return results, firstErr
}

// applyRenewals records the outcome of one batch of renewals (jobs[i] renewed due[i]).
func (w *holdTable) applyRenewals(due []*hold, jobs []renewal, results []int64, err error, sentAt time.Time) {
	t := w.c.tel
	var out stepped
	var failures []renewalFailure
	var renewed, failed, gone int64
	w.mu.Lock()
	now := time.Now()
	for i, h := range due {
		if h.phase == phaseEnded {
			continue // released while the renewal was under way
		}
		ev := holdEvent{sentAt: sentAt, ttl: jobs[i].ttl, now: now}
		leaseOver := !h.renewed() && !now.Before(h.expiresAt) // not a loss, whatever the reply
		switch r := results[i]; {
		case r == 1:
			ev.ev = evRenewed
			if h.renewed() {
				renewed++
			}
		case r == 0:
			ev.ev = evRenewGone
			if h.phase == phaseHeld && !leaseOver {
				gone++
			}
		case r >= 2: // its key is now another kind's (lua/lib/kinds.lua)
			ev.ev, ev.n = evRenewOtherKind, r
			if !leaseOver {
				gone++
			}
		default: // no answer
			ev.ev, ev.cause = evRenewUnanswered, err
			if h.renewed() {
				failed++
			}
			if h.span.IsRecording() {
				h.span.AddEvent("renewal failed", trace.WithAttributes(attribute.String("error", fmt.Sprint(err))))
			}
		}
		wasAtRisk := h.atRisk
		if w.stepLocked(h, &ev, &out) != nil && ev.ev == evRenewUnanswered && h.renewed() && h.mode != entryMode {
			failures = append(failures, renewalFailure{kind: h.kind, name: h.name, owner: h.key.field,
				expiresIn: h.expiresAt.Sub(now), began: h.atRisk && !wasAtRisk})
		}
	}
	w.mu.Unlock()
	ctx := context.Background()
	if renewed > 0 {
		t.renewals.Add(ctx, renewed, t.byOutcome[outcomeRenewed].add...)
	}
	if failed > 0 {
		t.renewals.Add(ctx, failed, t.byOutcome[outcomeRenewFailed].add...)
	}
	if gone > 0 {
		t.renewals.Add(ctx, gone, t.byOutcome[outcomeGone].add...)
	}
	t.reportRenewalFailures(failures, err)
	out.finish(t)
}

// retryDelay is the pause before renewing again a hold whose renewal got no answer.
func (w *holdTable) retryDelay() time.Duration {
	return min(max(w.timeout/10, 10*time.Millisecond), time.Second)
}

// close ends the watchdog once the Client's lifetime is over: the loop stops, and whatever is left in the
// table ends with errClientClosed.
func (w *holdTable) close() {
	w.mu.Lock()
	w.closed = true
	started := w.started
	var out stepped
	for _, h := range w.holds {
		w.stepLocked(h, &holdEvent{ev: evShut, cause: errClientClosed}, &out)
	}
	w.mu.Unlock()
	out.finish(w.c.tel)
	if started {
		<-w.stopped
	}
}

// holdQueue is a min-heap of holds by next event.
type holdQueue []*hold

func (q holdQueue) Len() int           { return len(q) }
func (q holdQueue) Less(i, j int) bool { return q[i].next.Before(q[j].next) }
func (q holdQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *holdQueue) Push(x any) {
	h := x.(*hold)
	h.index = len(*q)
	*q = append(*q, h)
}
func (q *holdQueue) Pop() any {
	old := *q
	h := old[len(old)-1]
	old[len(old)-1] = nil
	h.index = -1
	*q = old[:len(old)-1]
	return h
}
