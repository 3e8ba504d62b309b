package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/relock-go/relock"
)

// Defaults and limits of relock demo --election.
const (
	demoElectionCandidates = 3                      // the default, and the fewest: each event needs a successor
	demoElectionTenure     = 500 * time.Millisecond // how long each leader works before the next event
	demoHandoverFactor     = 2                      // a hand-over slower than this many watchdog timeouts is a problem
	demoMaxTick            = 100 * time.Millisecond // the longest interval between a leader's writes
)

// electionRun is one run of relock demo --election: the candidates, the events they send, what the
// observer saw.
type electionRun struct {
	d      *demo
	rep    *demoElectionReport
	cands  demoCandidates
	events chan demoElectionEvent
	quit   chan struct{} // closed when the demo stops listening to the candidates
	start  time.Time
	limit  time.Duration // the longest wait for a new leader before the demo gives up

	leader   int    // the current leader, -1 before the first
	term     uint64 // its term
	wins     []demoElectionEvent
	accepted int // the current leader's accepted writes, as it reported them

	mu       sync.Mutex // guards observed and the output
	observed []relock.Leader
}

// electionTick is how often a leader writes to the store: a tenth of the watchdog timeout, at most
// demoMaxTick.
func electionTick(watchdog time.Duration) time.Duration {
	return max(min(watchdog/10, demoMaxTick), 10*time.Millisecond)
}

// runElection runs relock demo --election on the server set up by run.
func (d *demo) runElection(ctx context.Context, note string) error {
	f := d.flags
	rep := &demoElectionReport{Election: true, Server: d.report.Server, Candidates: f.workers, Processes: f.processes,
		WatchdogMS: demoMillis(f.watchdog), TenureMS: demoMillis(f.duration), Leaders: []demoLeaderJSON{},
		Handovers: []demoHandoverJSON{}, Problems: []string{}}
	r := &electionRun{d: d, rep: rep, events: make(chan demoElectionEvent, 256), quit: make(chan struct{}),
		leader: -1, limit: 3*f.watchdog + 10*time.Second}
	d.electionHeader(note)

	var err error
	if f.processes > 0 {
		r.cands, err = startProcCandidates(ctx, &d.cfg, f.workers, r.events, r.quit)
	} else {
		r.cands, err = startLocalCandidates(ctx, &d.cfg, f.workers, r.events, r.quit)
	}
	if err != nil {
		return err
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			close(r.quit)
			r.cands.stop(r.leader)
		}
	}
	defer stop()

	octx, cancelObs := context.WithCancel(ctx)
	defer cancelObs()
	obs, err := d.monitor[0].lc.Election(d.cfg.Name).Observe(octx)
	if err != nil {
		return redisError(d.cfg.Nodes[0], err)
	}
	var obsDone sync.WaitGroup
	defer obsDone.Wait()
	defer cancelObs()
	r.start = time.Now()
	obsDone.Go(func() {
		for l := range obs {
			r.mu.Lock()
			r.observed = append(r.observed, l)
			r.printLocked(time.Now(), "observer: the leader is %s, term %d", l.Value, l.Term)
			r.mu.Unlock()
		}
	})

	if err := r.campaign(ctx); err != nil {
		return err
	}
	if err := r.scenario(ctx); err != nil {
		return err
	}
	stop()
	r.waitObserver(ctx)
	cancelObs()
	obsDone.Wait()
	if err := r.readStore(ctx); err != nil {
		return err
	}
	r.judge()
	if f.json {
		enc := json.NewEncoder(d.e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		r.summary()
	}
	if !rep.OK {
		return fmt.Errorf("BUG: %s: the election failed; please report this", strings.Join(rep.Problems, "; "))
	}
	return nil
}

// campaign makes the candidates campaign one after the other, each once the one before it leads or waits
// in the queue, so that they lead in the order of their numbers.
func (r *electionRun) campaign(ctx context.Context) error {
	n := r.rep.Candidates
	for i := range n {
		if err := r.cands.campaign(i); err != nil {
			return err
		}
		if i == 0 {
			won, ok, err := r.next(ctx, r.limit, func(ev demoElectionEvent) bool { return ev.Type == evWon })
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("%s did not lead within %v of its campaign", demoCandidateValue(0), r.limit)
			}
			r.print(evTime(won), "%s leads, with term %d", demoCandidateValue(won.ID), won.Term)
			if err := r.waitSeen(ctx, won.Term); err != nil {
				return err
			}
			continue
		}
		deadline := time.Now().Add(demoReadyTimeout)
		for {
			st, err := r.d.monitor[0].lc.Inspect(ctx, r.d.cfg.Name)
			if err != nil {
				return redisError(r.d.cfg.Nodes[0], err)
			}
			if st.QueueLen >= i {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s did not join the election's queue within %v", demoCandidateValue(i), demoReadyTimeout)
			}
			if _, _, err := r.next(ctx, 5*time.Millisecond, nil); err != nil {
				return err
			}
		}
	}
	names := make([]string, 0, n-1)
	for i := 1; i < n; i++ {
		names = append(names, demoCandidateValue(i))
	}
	r.print(time.Now(), "%s wait in the queue, in that order", strings.Join(names, ", "))
	return nil
}

// scenario makes the three events happen, one after the other, each after the leader worked a tenure:
// the leader resigns, the next one dies, the next one stalls.
func (r *electionRun) scenario(ctx context.Context) error {
	f := r.d.flags
	tenure := f.duration

	r.say("\n1/3  The leader resigns: the candidate that has waited longest leads at once.\n")
	if err := r.work(ctx, tenure); err != nil {
		return err
	}
	old, oldTerm := r.leader, r.term
	r.print(time.Now(), "%s resigns (%s accepted with term %d), and campaigns again", demoCandidateValue(old),
		demoWrites(r.accepted), oldTerm)
	if err := r.cands.resign(old); err != nil {
		return err
	}
	var resignedAt int64
	won, err := r.handover(ctx, "resignation", oldTerm, func(ev demoElectionEvent) {
		if ev.Type == evResigned && ev.ID == old && ev.Term == oldTerm {
			resignedAt = ev.At
		}
	}, func() bool { return resignedAt != 0 })
	if err != nil {
		return err
	}
	r.record(handResign, old, oldTerm, won, resignedAt, "the resignation")
	if err := r.waitSeen(ctx, won.Term); err != nil {
		return err
	}

	how := "its Client is cut off from Redis and closed"
	if f.processes > 0 {
		how = "its process is killed (SIGKILL)"
	}
	r.say("\n2/3  The leader dies: %s, without resigning. Its hold expires within the watchdog timeout (%v).\n", how, f.watchdog)
	if err := r.work(ctx, tenure); err != nil {
		return err
	}
	old, oldTerm = r.leader, r.term
	at := time.Now()
	r.print(at, "%s dies (%s accepted with term %d)", demoCandidateValue(old), demoWrites(r.accepted), oldTerm)
	if err := r.cands.die(old); err != nil {
		return err
	}
	if won, err = r.handover(ctx, "death", oldTerm, nil, nil); err != nil {
		return err
	}
	r.record(handDeath, old, oldTerm, won, at.UnixNano(), "the death")
	if err := r.waitSeen(ctx, won.Term); err != nil {
		return err
	}

	how = "the demo holds back its Client's commands, as a stalled network would"
	if f.processes > 0 {
		how = "its process is paused (SIGSTOP), as a long GC pause or a frozen VM would"
	}
	r.say("\n3/3  The leader stalls past the watchdog timeout: %s.\n", how)
	if err := r.work(ctx, tenure); err != nil {
		return err
	}
	old, oldTerm = r.leader, r.term
	// The leader stalls just after a write: in the middle of a unit of work, which it finishes when it
	// resumes, writing with its term. (Stalled during a write, its write would reach Redis before the stall.)
	if _, ok, err := r.next(ctx, r.limit, func(ev demoElectionEvent) bool {
		return ev.Type == evWrote && ev.ID == old && ev.Term == oldTerm
	}); err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("%s made no write within %v", demoCandidateValue(old), r.limit)
		}
		return err
	}
	at = time.Now()
	r.print(at, "%s stalls (%s accepted with term %d)", demoCandidateValue(old), demoWrites(r.accepted), oldTerm)
	if err := r.cands.stall(old); err != nil {
		return err
	}
	if won, err = r.handover(ctx, "stall", oldTerm, nil, nil); err != nil {
		return err
	}
	r.record(handStall, old, oldTerm, won, at.UnixNano(), "the stall")
	if err := r.waitSeen(ctx, won.Term); err != nil {
		return err
	}
	return r.staleWrite(ctx, old, oldTerm)
}

// staleWrite waits for the new leader's first accepted write, then resumes the stalled leader old, and
// reports its write with oldTerm and whether it learns it lost the leadership.
func (r *electionRun) staleWrite(ctx context.Context, old int, oldTerm uint64) error {
	newLeader, newTerm := r.leader, r.term
	first, ok, err := r.next(ctx, r.limit, func(ev demoElectionEvent) bool {
		return ev.Type == evWrote && ev.ID == newLeader && ev.Term == newTerm && ev.Accepted
	})
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s made no write within %v of leading", demoCandidateValue(newLeader), r.limit)
	}
	r.print(evTime(first), "%s writes with term %d: accepted", demoCandidateValue(newLeader), newTerm)
	if r.d.flags.processes > 0 {
		r.print(time.Now(), "%s resumes (SIGCONT), unaware that it was replaced, and writes with its term %d",
			demoCandidateValue(old), oldTerm)
	} else {
		r.print(time.Now(), "the stall ends: %s's write with its term %d, sent during the stall, reaches Redis",
			demoCandidateValue(old), oldTerm)
	}
	if err := r.cands.resume(old); err != nil {
		return err
	}
	wait := 2*r.d.cfg.Tick + 3*time.Second
	// Its first write that reaches the store after the new leader's: one that arrived before (it was on
	// its way when the stall began) is no stale write.
	stale, ok, err := r.next(ctx, wait, func(ev demoElectionEvent) bool {
		return ev.Type == evWrote && ev.ID == old && ev.Term == oldTerm && ev.StoreTerm >= newTerm
	})
	if err != nil {
		return err
	}
	if ok {
		r.rep.StaleWrite = &demoStaleJSON{Value: demoCandidateValue(old), Term: stale.Term, StoreTerm: stale.StoreTerm,
			Accepted: stale.Accepted}
		if stale.Accepted {
			r.print(evTime(stale), "%s's write with term %d is ACCEPTED (the store was at term %d)", demoCandidateValue(old),
				stale.Term, stale.StoreTerm)
		} else {
			r.print(evTime(stale), "%s's write with term %d is rejected: the store is at term %d", demoCandidateValue(old),
				stale.Term, stale.StoreTerm)
		}
	} else {
		r.print(time.Now(), "%s made no write within %v of resuming", demoCandidateValue(old), wait)
	}
	lost, ok, err := r.next(ctx, r.limit, func(ev demoElectionEvent) bool { return ev.Type == evLost && ev.ID == old })
	if err != nil {
		return err
	}
	if !ok {
		r.print(time.Now(), "%s was not told within %v that it lost the leadership", demoCandidateValue(old), r.limit)
		return nil
	}
	r.rep.StalledLost = lost.LockLost
	r.print(evTime(lost), "%s learns that it lost the leadership (%s), and campaigns again", demoCandidateValue(old), lost.Cause)
	return r.work(ctx, r.d.flags.duration/2)
}

// handover waits for a leader with a term above oldTerm, seeing every event with also (when not nil) and
// going on until done (when not nil) says so too, and prints the new leader.
func (r *electionRun) handover(ctx context.Context, after string, oldTerm uint64, also func(demoElectionEvent), done func() bool) (demoElectionEvent, error) {
	var won demoElectionEvent
	_, ok, err := r.next(ctx, r.limit, func(ev demoElectionEvent) bool {
		if also != nil {
			also(ev)
		}
		if ev.Type == evWon && ev.Term > oldTerm && won.Term == 0 {
			won = ev
		}
		return won.Term != 0 && (done == nil || done())
	})
	if err != nil {
		return won, err
	}
	if !ok {
		return won, fmt.Errorf("no candidate led within %v of the %s", r.limit, after)
	}
	return won, nil
}

// record notes the hand-over of event from old (with oldTerm) to won, which began at since (Unix
// nanoseconds), and prints it.
func (r *electionRun) record(event string, old int, oldTerm uint64, won demoElectionEvent, since int64, after string) {
	ms := demoMillis(time.Duration(won.At - since))
	r.rep.Handovers = append(r.rep.Handovers, demoHandoverJSON{Event: event, From: demoCandidateValue(old), FromTerm: oldTerm,
		To: demoCandidateValue(won.ID), ToTerm: won.Term, TookMS: ms})
	r.print(evTime(won), "%s leads, with term %d, %s after %s", demoCandidateValue(won.ID), won.Term, demoMS(ms), after)
}

// waitSeen waits, noting the candidates' events, until the observer has seen term (a second at most: the
// judge says so if it never does), so that its line comes before the story goes on.
func (r *electionRun) waitSeen(ctx context.Context, term uint64) error {
	deadline := time.Now().Add(time.Second)
	for !r.seen(term) && time.Now().Before(deadline) {
		if _, _, err := r.next(ctx, 2*time.Millisecond, nil); err != nil {
			return err
		}
	}
	return nil
}

// seen reports whether the observer has seen term, or a later one.
func (r *electionRun) seen(term uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.observed)
	return n > 0 && r.observed[n-1].Term >= term
}

// work lets the candidates run for d, noting what they do.
func (r *electionRun) work(ctx context.Context, d time.Duration) error {
	_, _, err := r.next(ctx, d, nil)
	return err
}

// next notes the candidates' events until want (when not nil) accepts one, which it returns with ok, or
// until d has passed (not ok). A candidate's error ends the demo, as ctx does.
func (r *electionRun) next(ctx context.Context, d time.Duration, want func(demoElectionEvent) bool) (demoElectionEvent, bool, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return demoElectionEvent{}, false, ctx.Err()
		case <-t.C:
			return demoElectionEvent{}, false, nil
		case ev := <-r.events:
			if ev.Type == evError {
				return ev, false, errors.New(ev.Cause)
			}
			r.note(ev)
			if want != nil && want(ev) {
				return ev, true, nil
			}
		}
	}
}

// note keeps track of the leader and of its writes.
func (r *electionRun) note(ev demoElectionEvent) {
	switch ev.Type {
	case evWon:
		r.wins = append(r.wins, ev)
		if ev.Term > r.term {
			r.leader, r.term, r.accepted = ev.ID, ev.Term, 0
		}
	case evWrote:
		if ev.Accepted && ev.ID == r.leader && ev.Term == r.term {
			r.accepted++
		}
	}
}

// waitObserver waits, for a few seconds at most, until the observer has seen the last leader, once the
// candidates have stopped.
func (r *electionRun) waitObserver(ctx context.Context) {
	deadline := time.Now().Add(3 * time.Second)
	for !r.seen(r.term) && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
}

// print prints a line of the election's story, at, with the time since the start.
func (r *electionRun) print(at time.Time, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.printLocked(at, format, args...)
}

// say prints text for people, as demo.say does, in turn with the observer's lines.
func (r *electionRun) say(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.d.say(format, args...)
}

// evTime is when ev happened.
func evTime(ev demoElectionEvent) time.Time { return time.Unix(0, ev.At) }

func (r *electionRun) printLocked(at time.Time, format string, args ...any) {
	r.d.say("  %6.2fs  %s\n", at.Sub(r.start).Seconds(), fmt.Sprintf(format, args...))
}
