package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// What relock demo --election reports: the header it starts with, its --json report, how it judges the
// election, and the summary it ends with.

// demoElectionReport is what relock demo --election --json prints: one JSON object. Its field names are
// stable; durations are milliseconds (fractional). server and processes are as in demoReport.
//
//	election      true: the report of --election (the locks' report has "lock" instead)
//	candidates    how many candidates campaigned, each with its own Client
//	processes     0 (goroutines of the demo's own process), or one worker process per candidate
//	watchdog_ms   the Clients' watchdog timeout (--watchdog)
//	tenure_ms     how long each leader worked before the next event (--duration)
//	leaders       the leaders in the order the demo's observer (Election.Observe) saw them:
//	              [{"term", "value", "writes_accepted", "writes_rejected"}] (the store's writes with that term)
//	handovers     in order, from the event to the next leader's win: [{"event": "resign" | "death" | "stall",
//	              "from", "from_term", "to", "to_term", "took_ms"}] (resign: from the leader's Resign call)
//	writes        the fenced store's log: {"accepted", "rejected", "in_term_order"} (in_term_order: the
//	              accepted writes' terms never went down)
//	stale_write   null (the stalled leader wrote nothing after it resumed), or its write after the stall:
//	              {"value", "term", "store_term", "accepted"} (store_term: the highest term the store had
//	              accepted when the write arrived)
//	stalled_lost  the stalled leader's LeadershipContext ended with ErrLockLost, once it resumed
//	ok            true when the election did its job: accepted writes in term order, the observer's terms
//	              increasing and missing no leader, no hand-over slower than 2 watchdog timeouts, the stale
//	              write (if any) rejected, the stalled leader told
//	problems      what went wrong, [] when ok
type demoElectionReport struct {
	Election    bool               `json:"election"`
	Server      demoServerJSON     `json:"server"`
	Candidates  int                `json:"candidates"`
	Processes   int                `json:"processes"`
	WatchdogMS  float64            `json:"watchdog_ms"`
	TenureMS    float64            `json:"tenure_ms"`
	Leaders     []demoLeaderJSON   `json:"leaders"`
	Handovers   []demoHandoverJSON `json:"handovers"`
	Writes      demoWritesJSON     `json:"writes"`
	StaleWrite  *demoStaleJSON     `json:"stale_write"`
	StalledLost bool               `json:"stalled_lost"`
	OK          bool               `json:"ok"`
	Problems    []string           `json:"problems"`
}

// demoLeaderJSON is a leader of demoElectionReport.
type demoLeaderJSON struct {
	Term           uint64 `json:"term"`
	Value          string `json:"value"`
	WritesAccepted int    `json:"writes_accepted"`
	WritesRejected int    `json:"writes_rejected"`
}

// demoHandoverJSON is a hand-over of demoElectionReport.
type demoHandoverJSON struct {
	Event    string  `json:"event"`
	From     string  `json:"from"`
	FromTerm uint64  `json:"from_term"`
	To       string  `json:"to"`
	ToTerm   uint64  `json:"to_term"`
	TookMS   float64 `json:"took_ms"`
}

// demoWritesJSON is the "writes" of demoElectionReport.
type demoWritesJSON struct {
	Accepted    int  `json:"accepted"`
	Rejected    int  `json:"rejected"`
	InTermOrder bool `json:"in_term_order"`
}

// demoStaleJSON is the "stale_write" of demoElectionReport.
type demoStaleJSON struct {
	Value     string `json:"value"`
	Term      uint64 `json:"term"`
	StoreTerm uint64 `json:"store_term"`
	Accepted  bool   `json:"accepted"`
}

// The events of the election demo, in demoHandoverJSON.
const (
	handResign = "resign"
	handDeath  = "death"
	handStall  = "stall"
)

// readStore reads the store's log into the report: the writes, and the leaders the observer saw with
// their writes.
func (r *electionRun) readStore(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), demoCleanupLimit)
	defer cancel()
	rdb := r.d.monitor[0].rdb
	lines, err := rdb.Do(rctx, rdb.B().Lrange().Key(r.d.cfg.StoreLog).Start(0).Stop(-1).Build()).AsStrSlice()
	if err != nil {
		return redisError(r.d.cfg.Nodes[0], err)
	}
	accepted, rejected := map[uint64]int{}, map[uint64]int{}
	w := &r.rep.Writes
	w.InTermOrder = true
	var top uint64
	for _, line := range lines {
		fields := strings.Fields(line) // accepted|rejected term store_term value
		if len(fields) != 4 {
			return fmt.Errorf("the store's log has %q", line)
		}
		term, err := strconv.ParseUint(fields[1], 10, 64)
		if err != nil {
			return fmt.Errorf("the store's log has %q", line)
		}
		if fields[0] == "accepted" {
			w.Accepted++
			accepted[term]++
			if term < top {
				w.InTermOrder = false
			}
			top = max(top, term)
		} else {
			w.Rejected++
			rejected[term]++
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.observed {
		r.rep.Leaders = append(r.rep.Leaders, demoLeaderJSON{Term: l.Term, Value: l.Value,
			WritesAccepted: accepted[l.Term], WritesRejected: rejected[l.Term]})
	}
	return nil
}

// judge decides whether the election did its job, and why not.
func (r *electionRun) judge() {
	rep := r.rep
	problem := func(format string, args ...any) {
		rep.Problems = append(rep.Problems, fmt.Sprintf(format, args...))
	}
	if !rep.Writes.InTermOrder {
		problem("the store accepted writes out of term order")
	}
	seen := map[uint64]bool{}
	for i, l := range rep.Leaders {
		seen[l.Term] = true
		if i > 0 && l.Term <= rep.Leaders[i-1].Term {
			problem("the observer saw term %d after term %d", l.Term, rep.Leaders[i-1].Term)
		}
	}
	for _, w := range r.wins {
		if !seen[w.Term] {
			problem("the observer did not see %s lead with term %d", demoCandidateValue(w.ID), w.Term)
		}
	}
	limit := demoHandoverFactor * r.d.flags.watchdog
	for _, h := range rep.Handovers {
		if h.TookMS > demoMillis(limit) {
			problem("the hand-over after the %s took %s, more than %d times the %v watchdog timeout", h.Event,
				demoMS(h.TookMS), demoHandoverFactor, r.d.flags.watchdog)
		}
	}
	if s := rep.StaleWrite; s != nil && s.Accepted {
		problem("the stalled leader's write with term %d was accepted, the store being at term %d", s.Term, s.StoreTerm)
	}
	if !rep.StalledLost {
		problem("the stalled leader was not told that it lost the leadership")
	}
	rep.OK = len(rep.Problems) == 0
}

// electionHeader prints what the election demo is about to do.
func (d *demo) electionHeader(note string) {
	f := d.flags
	how := "goroutines of this process, each with its own Client"
	if f.processes > 0 {
		how = "worker processes, one each"
	}
	d.say("relock demo --election: %d candidates (%s) campaign to lead one election.\n", f.workers, how)
	d.serverLine(note)
	d.say("Election: %q, watchdog timeout %v. Ctrl-C stops the demo.\n", d.cfg.Name, f.watchdog)
	d.say("The leader writes its term to a fenced store every %v: a Redis hash behind a script that rejects a\n"+
		"write whose term is below the highest it accepted. An observer prints each new leader.\n\n", d.cfg.Tick)
}

// summary prints the election's results.
func (r *electionRun) summary() {
	rep, w := r.rep, r.d.e.stdout
	fmt.Fprintln(w, "\nResults")
	leaders := make([]string, len(rep.Leaders))
	for i, l := range rep.Leaders {
		leaders[i] = fmt.Sprintf("%s (term %d)", l.Value, l.Term)
	}
	fmt.Fprintf(w, "  leaders:       %s, as the observer saw them\n", strings.Join(leaders, ", "))
	hands := make([]string, len(rep.Handovers))
	for i, h := range rep.Handovers {
		hands[i] = fmt.Sprintf("%s %s", map[string]string{handResign: "resignation", handDeath: "death", handStall: "stall"}[h.Event],
			demoMS(h.TookMS))
	}
	fmt.Fprintf(w, "  hand-overs:    %s (watchdog timeout %s)\n", strings.Join(hands, ", "), demoMS(rep.WatchdogMS))
	order := "in term order"
	if !rep.Writes.InTermOrder {
		order = "NOT in term order"
	}
	fmt.Fprintf(w, "  store:         %s accepted, %s; %s rejected\n", demoWrites(rep.Writes.Accepted), order,
		demoNum(int64(rep.Writes.Rejected)))
	switch s := rep.StaleWrite; {
	case s == nil:
		fmt.Fprintln(w, "  stale leader:  made no write after it resumed")
	case s.Accepted:
		fmt.Fprintf(w, "  stale leader:  its write with term %d was ACCEPTED, the store being at term %d\n", s.Term, s.StoreTerm)
	default:
		fmt.Fprintf(w, "  stale leader:  its write with term %d was rejected, the store being at term %d\n", s.Term, s.StoreTerm)
	}
	if rep.OK {
		fmt.Fprintln(w, "\nOK: one leader at a time, each with a larger term; the store accepted no write from a replaced leader.")
	}
}

// demoWrites formats a number of writes.
func demoWrites(n int) string {
	if n == 1 {
		return "1 write"
	}
	return demoNum(int64(n)) + " writes"
}
