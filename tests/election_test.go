package tests

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/faultnet"
	"github.com/relock-go/relock/internal/redistest"
)

// electionWatchdog is the candidates' watchdog timeout in the election scenario.
const electionWatchdog = time.Second

func init() {
	// candidate campaigns in the election ELECTION on ELECTION_ADDR (its own proxy; 1 s watchdog timeout)
	// with its name NAME as owner and value, again and again, and observes the election all along. It
	// prints:
	//
	//	observing                      once Observe returned
	//	observed <term> <value>        for every leader Observe delivers
	//	leading <term> <unix ns>       when it leads (Campaign returned, LeadershipContext obtained)
	//	resigned <term> <unix ns> tries=<n> <quoted Resign error>
	//	                               when it resigned (told so by SIGUSR1), trying n times
	//	lost <term> <unix ns> after=<n> accepted_after=<n> rejected=<n> cause=<quoted>
	//	                               when it lost it: the time its LeadershipContext ended
	//	campaign-failed <quoted error>
	//
	// While it leads it writes to the fenced store STORE on STORE_ADDR (straight to Redis: the proxy cuts
	// the candidate off from the election, not from the store) every 5 ms, with its term; "lost" counts
	// the writes the store rejected, and those made (and accepted) since the last gap of more than 300 ms
	// between writes: after it was stopped and resumed.
	helpers["candidate"] = func() error {
		name := os.Getenv("NAME")
		c, err := relock.New([]string{os.Getenv("ELECTION_ADDR")}, &relock.Options{WatchdogTimeout: electionWatchdog})
		if err != nil {
			return err
		}
		defer c.Close()
		rdb := rawClientNoTest(os.Getenv("STORE_ADDR"))
		defer rdb.Close()
		store := fencedLog{rdb: rdb, key: os.Getenv("STORE")}
		e := c.Election(os.Getenv("ELECTION"))
		var mu sync.Mutex
		say := func(format string, args ...any) {
			mu.Lock()
			fmt.Printf(format+"\n", args...)
			mu.Unlock()
		}
		ctx := relock.WithOwner(context.Background(), name)
		var leaders <-chan relock.Leader
		for leaders == nil {
			if leaders, err = e.Observe(ctx); err != nil {
				time.Sleep(50 * time.Millisecond)
			}
		}
		say("observing")
		go func() {
			for l := range leaders {
				say("observed %d %s", l.Term, l.Value)
			}
		}()
		resign := make(chan os.Signal, 1)
		signal.Notify(resign, syscall.SIGUSR1)
		for {
			term, err := e.Campaign(ctx, name)
			if err != nil {
				say("campaign-failed %q", err)
				time.Sleep(100 * time.Millisecond)
				continue
			}
			lead, err := e.LeadershipContext(ctx)
			if err != nil {
				say("lost %d %d after=0 accepted_after=0 rejected=0 cause=%q", term, time.Now().UnixNano(), err)
				continue
			}
			select {
			case <-resign: // sent before it led
			default:
			}
			told := make(chan int64, 1) // when the leadership ended
			context.AfterFunc(lead, func() { told <- time.Now().UnixNano() })
			say("leading %d %d", term, time.Now().UnixNano())
			var after, acceptedAfter, rejected int
			last := time.Now()
			resigned := false
			for !resigned {
				if lead.Err() != nil {
					if time.Since(last) > 300*time.Millisecond { // stopped since its last write
						after, acceptedAfter = 0, 0
					}
					break
				}
				select {
				case <-resign:
					// A resignation that failed with an error reply (LOADING, as Redis restarts) did not
					// happen: the candidate still leads, and resigns again.
					err := e.Resign(ctx)
					tries := 1
					for ; err != nil && !errors.Is(err, relock.ErrNotHeld) && lead.Err() == nil; tries++ {
						time.Sleep(50 * time.Millisecond)
						err = e.Resign(ctx)
					}
					say("resigned %d %d tries=%d %q", term, time.Now().UnixNano(), tries, fmt.Sprint(err))
					resigned = true
					continue
				default:
				}
				if time.Since(last) > 300*time.Millisecond {
					after, acceptedAfter = 0, 0
				}
				last = time.Now()
				wctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				ok, err := store.write(wctx, term, name)
				cancel()
				after++
				switch {
				case ok:
					acceptedAfter++
				case err == nil:
					rejected++
				}
				time.Sleep(5 * time.Millisecond)
			}
			if !resigned {
				say("lost %d %d after=%d accepted_after=%d rejected=%d cause=%q", term, <-told, after, acceptedAfter, rejected, context.Cause(lead))
			}
		}
	}
}

// leadership is one term of a candidate's, as it printed it.
type leadership struct {
	proc  string
	term  uint64
	at    time.Time // when it printed leading, by its clock
	ended string    // "", "resigned" or "lost"
	endAt time.Time
	// For a lost leadership: the writes it made since its last gap between writes, those of them the store
	// accepted, the writes the store rejected in the term, and how its LeadershipContext ended (cause). For
	// a resignation: the calls to Resign, and the last one's error (cause, "<nil>").
	after, acceptedAfter, rejected, tries int
	cause                                 string
}

// electionRun collects what the candidates print.
type electionRun struct {
	mu        sync.Mutex
	leads     []*leadership
	byTerm    map[uint64]*leadership
	dupTerms  []string // a term printed by two leaders
	observed  map[string][]leaderOf
	observing map[string]bool
	ended     map[string]bool // its output closed
	dead      map[string]bool // killed by the test
	failed    int             // campaigns that failed
	odd       []string        // lines not understood
}

func (r *electionRun) add(proc, line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	debugf("%s: %s", proc, line)
	word, rest, _ := strings.Cut(line, " ")
	var term uint64
	var ns int64
	var bad error
	switch word {
	case "observing":
		r.observing[proc] = true
	case "observed":
		var l leaderOf
		if _, bad = fmt.Sscanf(rest, "%d %s", &l.term, &l.value); bad == nil {
			r.observed[proc] = append(r.observed[proc], l)
		}
	case "leading":
		if _, bad = fmt.Sscanf(rest, "%d %d", &term, &ns); bad == nil {
			l := &leadership{proc: proc, term: term, at: time.Unix(0, ns)}
			if prev, ok := r.byTerm[term]; ok {
				r.dupTerms = append(r.dupTerms, fmt.Sprintf("term %d led by %s and %s", term, prev.proc, proc))
			}
			r.leads = append(r.leads, l)
			r.byTerm[term] = l
		}
	case "resigned", "lost":
		l := &leadership{}
		if word == "resigned" {
			_, bad = fmt.Sscanf(rest, "%d %d tries=%d %q", &term, &ns, &l.tries, &l.cause)
		} else {
			_, bad = fmt.Sscanf(rest, "%d %d after=%d accepted_after=%d rejected=%d cause=%q", &term, &ns, &l.after, &l.acceptedAfter, &l.rejected, &l.cause)
		}
		if bad == nil {
			if led := r.byTerm[term]; led != nil && led.proc == proc {
				led.ended, led.endAt = word, time.Unix(0, ns)
				led.after, led.acceptedAfter, led.rejected, led.tries, led.cause = l.after, l.acceptedAfter, l.rejected, l.tries, l.cause
			} else if word == "resigned" || l.cause != "" && !strings.Contains(l.cause, "not held") {
				bad = errors.New("for a term it did not lead")
			}
		}
	case "campaign-failed":
		r.failed++
	default:
		bad = errors.New("unknown")
	}
	if bad != nil {
		r.odd = append(r.odd, fmt.Sprintf("%s: %q: %v", proc, line, bad))
	}
}

// state describes what the candidates said, for a failure's message.
func (r *electionRun) state() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, l := range r.leads {
		fmt.Fprintf(&b, "[%s term %d %s %s dead=%v] ", l.proc, l.term, l.ended, l.cause, r.dead[l.proc])
	}
	fmt.Fprintf(&b, "%d campaigns failed, odd lines %q", r.failed, r.odd)
	return b.String()
}

// debugf prints, with the time, to stderr when RELOCK_ELECTION_DEBUG is set: the election scenario then
// shows every line of every candidate, and every fault as it is injected.
func debugf(format string, args ...any) {
	if os.Getenv("RELOCK_ELECTION_DEBUG") != "" {
		fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000000")}, args...)...)
	}
}

// electionKeys describes the keys of the election name in Redis, for a failure's message.
func electionKeys(ctx context.Context, rdb rueidis.Client, name string) string {
	var b strings.Builder
	for _, cmd := range [][]string{
		{"HGETALL", name}, {"PTTL", name},
		{"LRANGE", "redisson_lock_queue:{" + name + "}", "0", "-1"},
		{"ZRANGE", "redisson_lock_timeout:{" + name + "}", "0", "-1", "WITHSCORES"},
		{"ZRANGE", "relock_lock_alive:{" + name + "}", "0", "-1", "WITHSCORES"},
		{"XREVRANGE", "relock_election:{" + name + "}", "+", "-", "COUNT", "3"},
		{"TIME"},
	} {
		v, err := rdb.Do(ctx, rdb.B().Arbitrary(cmd...).Build()).ToAny()
		fmt.Fprintf(&b, "%v: %v %v; ", cmd, v, err)
	}
	return b.String()
}

// await polls cond, under r.mu, until it holds or within passes.
func (r *electionRun) await(within time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(within); ; time.Sleep(2 * time.Millisecond) {
		r.mu.Lock()
		ok := cond()
		r.mu.Unlock()
		if ok {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// current returns the leadership with the highest term above after that has not ended, of a candidate
// alive. r.mu must be held.
func (r *electionRun) current(after uint64) *leadership {
	var cur *leadership
	for _, l := range r.leads {
		if l.term > after && l.ended == "" && !r.dead[l.proc] && (cur == nil || l.term > cur.term) {
			cur = l
		}
	}
	return cur
}

// next returns the leadership with the lowest term above term, nil if none yet. r.mu must be held.
func (r *electionRun) next(term uint64) *leadership {
	var n *leadership
	for _, l := range r.leads {
		if l.term > term && (n == nil || l.term < n.term) {
			n = l
		}
	}
	return n
}

// candidateProc is a candidate process, with the proxy it reaches the election through.
type candidateProc struct {
	name  string
	cmd   *exec.Cmd
	proxy *faultnet.Proxy
}

// percentile returns the p-th percentile (nearest rank) of ds, sorted.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(math.Ceil(float64(len(ds))*p)) - 1
	return ds[max(0, min(i, len(ds)-1))]
}

// TestElectionUnderFaults: 5 candidate processes campaign in one election, each through its own proxy, with
// a 1 s watchdog timeout; each leader writes to a fenced store with its term every 5 ms, and every
// candidate, and the test, observe the election. In rounds, the current leader resigns, is stopped
// (SIGSTOP) past the watchdog timeout and resumed, is killed (a new candidate replaces it), is cut off by its
// proxy past the timeout and healed; redis-server (AOF, appendfsync always) is killed and restarted on its
// port under a leader, and again as a leader resigns (RELOCK_ELECTION_DEBUG shows it all). Checked: the store never accepts a write with a term below one it accepted (no two leaders'
// terms accepted at once), nor one term from two writers, nor a term from a candidate not recorded as its
// leader; no two candidates are told they lead with one term; every observer sees the same sequence of
// leaders, with terms increasing, as recorded in the stream of leaders; a stopped or cut-off leader is told
// its leadership was lost (ErrLockLost), and a stopped one makes at most one write once resumed, which the
// store rejects; and every hand-over, from the fault (or the resignation) to the next leader's first line,
// is within a bound (see bound). The summary gives the hand-over times' p50 and p99, after faults and by
// kind. A -soak of D adds D/10s rounds to the 2 of short mode (about 10 s a round).
func TestElectionUnderFaults(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, aof...)
	rdb := rawClient(t, srv.Addr())
	store := fencedLog{rdb: rdb, key: "fenced"}
	const election = "leader"
	c := newClient(t, []string{srv.Addr()}, &relock.Options{WatchdogTimeout: electionWatchdog})
	ctx := ctxTimeout(t, 5*time.Minute+2*(*soak))
	s := &summary{scenario: "election-under-faults"}
	run := &electionRun{byTerm: map[uint64]*leadership{}, observed: map[string][]leaderOf{}, observing: map[string]bool{},
		ended: map[string]bool{}, dead: map[string]bool{}}

	// The test's own observer, straight to Redis, from before the first campaign.
	octx, stopObserving := context.WithCancel(ctx)
	defer stopObserving()
	leaders, err := c.Election(election).Observe(octx)
	if err != nil {
		t.Fatal(err)
	}
	var mine []leaderOf
	observed := make(chan struct{})
	go func() {
		defer close(observed)
		for l := range leaders {
			run.mu.Lock()
			mine = append(mine, leaderOf{l.Term, l.Value})
			run.mu.Unlock()
		}
	}()

	procs := map[string]*candidateProc{}
	var order []string
	start := func() *candidateProc {
		p := &candidateProc{name: "c" + strconv.Itoa(len(order)), proxy: startProxy(t, srv)}
		cmd, lines := startHelper(t, "candidate", "ELECTION_ADDR="+p.proxy.Addr, "STORE_ADDR="+srv.Addr(),
			"ELECTION="+election, "STORE="+store.key, "NAME="+p.name)
		p.cmd = cmd
		go func() {
			for line := range lines {
				run.add(p.name, line)
			}
			run.mu.Lock()
			run.ended[p.name] = true
			run.mu.Unlock()
		}()
		procs[p.name] = p
		order = append(order, p.name)
		return p
	}
	for range 5 {
		start()
	}
	if !run.await(30*time.Second, func() bool { return len(run.observing) == 5 }) {
		t.Fatalf("the candidates did not all observe: %v", run.observing)
	}

	// The hand-over bound. A leader that stops renewing (stopped, killed, cut off) keeps the lock at most the
	// watchdog timeout after its last renewal, made before the fault: 1 timeout. The head of the queue takes
	// the lock at its next attempt: a waiter sleeps no longer than the holder's TTL it read, and tries at
	// least every timeout/3; and a dead candidate ahead of it in the queue (one killed as it had just lost
	// the leadership and queued again) is dropped once it has not been refreshed for a timeout: a 2nd
	// timeout. The 3rd is slack for the record script, the line, and a loaded machine (2 cores, 6 race-built
	// processes). A restart adds twice its duration: nothing runs while the server is down, and waiters back
	// off through the outage (doubling from 50 ms), so that their next attempt may come as late again.
	bound := func(restart time.Duration) time.Duration { return 3*electionWatchdog + 2*restart }

	handovers := map[string][]time.Duration{} // by kind of fault ("resign": none)
	var toldVsNext []time.Duration            // when a cut-off leader was told, from when its successor led
	var kept, resignTries, resignErrs, staleRejected int
	var lastTerm uint64 // the term of the last leader that was replaced
	// leader waits for a leader with a term above lastTerm whose writes the store accepts.
	leader := func() (*leadership, *candidateProc) {
		t.Helper()
		var ld *leadership
		if !run.await(20*time.Second, func() bool { ld = run.current(lastTerm); return ld != nil }) {
			t.Fatalf("no leader after term %d: %s", lastTerm, run.state())
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if m, err := store.max(ctx); err == nil && m >= ld.term {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the leader of term %d does not write", ld.term)
			}
		}
		time.Sleep(time.Duration(rand.IntN(50)) * time.Millisecond) // the fault comes anywhere in its loop
		return ld, procs[ld.proc]
	}
	// handover waits for the next leader after ld, within the bound (plus time to see it late), and records
	// the hand-over from at.
	handover := func(kind string, ld *leadership, at time.Time, limit time.Duration) *leadership {
		t.Helper()
		var next *leadership
		run.await(limit+5*time.Second, func() bool { next = run.next(ld.term); return next != nil })
		if next == nil {
			s.violations++
			s.note("%s: no leader after term %d within %v", kind, ld.term, limit+5*time.Second)
			t.Logf("candidates: %s", run.state())
			t.Logf("in Redis: %s", electionKeys(ctx, rdb, election))
			s.report(t, true)
			t.FailNow()
		}
		d := next.at.Sub(at)
		handovers[kind] = append(handovers[kind], d)
		if d > limit {
			s.violations++
			s.note("%s: hand-over from term %d to %d took %v, more than %v", kind, ld.term, next.term, d.Round(time.Millisecond), limit)
		}
		lastTerm = ld.term
		return next
	}
	// ended waits for ld's end, and checks it lost the leadership as a leader must be told.
	ended := func(kind string, ld *leadership) {
		t.Helper()
		if !run.await(10*time.Second, func() bool { return ld.ended != "" }) {
			s.violations++
			s.note("%s: the leader of term %d was never told it lost", kind, ld.term)
			return
		}
		run.mu.Lock()
		defer run.mu.Unlock()
		if ld.ended != "lost" || !strings.Contains(ld.cause, "lock lost") {
			s.violations++
			s.note("%s: the leader of term %d ended %s, cause %q; want lost, ErrLockLost", kind, ld.term, ld.ended, ld.cause)
		}
		staleRejected += ld.rejected
	}
	// pastTimeout sleeps until a fault begun at has lasted 1.5 watchdog timeouts.
	pastTimeout := func(at time.Time) { time.Sleep(time.Until(at.Add(3 * electionWatchdog / 2))) }

	rounds := 2 + int(*soak/(10*time.Second))
	for range rounds {
		// The leader resigns: the next one leads at once.
		ld, p := leader()
		at := time.Now()
		debugf("resign: the leader of term %d, %s", ld.term, ld.proc)
		if err := p.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		handover("resign", ld, at, bound(0))
		if !run.await(10*time.Second, func() bool { return ld.ended == "resigned" && ld.cause == "<nil>" }) {
			s.violations++
			s.note("resign: the leader of term %d did not resign (%s %s)", ld.term, ld.ended, ld.cause)
		}

		// The leader is stopped past the watchdog timeout; the next leads and writes; the stopped one, resumed,
		// is told, and the store rejects the one write it may make first.
		ld, p = leader()
		at = time.Now()
		debugf("stop: the leader of term %d, %s", ld.term, ld.proc)
		if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		s.faults++
		next := handover("stop", ld, at, bound(0))
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if m, err := store.max(ctx); err == nil && m >= next.term || time.Now().After(deadline) {
				break
			}
		}
		pastTimeout(at)
		if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		ended("stop", ld)
		run.mu.Lock()
		if ld.acceptedAfter > 0 || ld.after > 1 {
			s.violations++
			s.note("stop: the leader of term %d, resumed, wrote %d times, %d accepted", ld.term, ld.after, ld.acceptedAfter)
		}
		run.mu.Unlock()

		// The leader is killed; a new candidate replaces it.
		ld, p = leader()
		at = time.Now()
		debugf("kill: the leader of term %d, %s", ld.term, ld.proc)
		if err := p.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		run.mu.Lock()
		run.dead[p.name] = true
		run.mu.Unlock()
		s.faults++
		handover("kill", ld, at, bound(0))
		np := start()
		if !run.await(30*time.Second, func() bool { return run.observing[np.name] }) {
			t.Fatalf("%s did not observe", np.name)
		}

		// The leader is cut off by its proxy past the watchdog timeout (it still reaches the store), then
		// healed.
		ld, p = leader()
		at = time.Now()
		debugf("partition: the leader of term %d, %s", ld.term, ld.proc)
		p.proxy.Partition(true)
		s.faults++
		next = handover("partition", ld, at, bound(0))
		ended("partition", ld)
		run.mu.Lock()
		if ld.ended != "" {
			// Told no later than its successor led (plus scheduling slack): its local deadline comes before
			// its lease expires in Redis, and the successor cannot lead before that.
			late := ld.endAt.Sub(next.at)
			toldVsNext = append(toldVsNext, late.Round(time.Millisecond))
			if late > 100*time.Millisecond {
				s.violations++
				s.note("partition: the leader of term %d was told %v after its successor led", ld.term, late)
			}
		}
		run.mu.Unlock()
		pastTimeout(at)
		p.proxy.Partition(false)

		// redis-server is killed and restarted on its port; it loads its AOF. The leader keeps leading if it
		// renews within the watchdog timeout; otherwise the next leads.
		ld, _ = leader()
		at = time.Now()
		debugf("restart: the leader of term %d, %s", ld.term, ld.proc)
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
		restart := time.Since(at)
		s.faults++
		var next2 *leadership
		run.await(3*electionWatchdog/2+restart, func() bool { next2 = run.next(ld.term); return next2 != nil || ld.ended != "" })
		if next2 == nil && ld.ended == "" {
			kept++ // the next round starts with this leader
		} else {
			handover("restart", ld, at, bound(restart))
		}

		// The leader resigns as redis-server is killed and restarted: the release, the next leader's
		// acquisition and its record in the stream may each be cut off by the restart.
		ld, p = leader()
		at = time.Now()
		debugf("resign-restart: the leader of term %d, %s", ld.term, ld.proc)
		if err := p.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
		restart = time.Since(at)
		s.faults++
		handover("resign-restart", ld, at, bound(restart))
		if !run.await(10*time.Second, func() bool { return ld.ended != "" }) {
			s.violations++
			s.note("resign-restart: the leader of term %d neither resigned nor lost", ld.term)
		}
		run.mu.Lock()
		if ld.ended == "resigned" {
			resignTries += ld.tries - 1
			if ld.cause != "<nil>" {
				// Its reply was lost: the release goes on in the background (EOF), or its first sending
				// had run (ErrNotHeld from the repeat).
				resignErrs++
			}
		}
		run.mu.Unlock()
	}

	// Every live candidate's observer, and the test's, see the last leader; then the candidates stop.
	var through uint64
	run.mu.Lock()
	for _, l := range run.leads {
		through = max(through, l.term)
	}
	run.mu.Unlock()
	run.await(10*time.Second, func() bool {
		for _, name := range order {
			if obs := run.observed[name]; !run.dead[name] && (len(obs) == 0 || obs[len(obs)-1].term < through) {
				return false
			}
		}
		return len(mine) > 0 && mine[len(mine)-1].term >= through
	})
	live := map[string]uint64{"test": through}
	for _, name := range order {
		if !run.dead[name] {
			live[name] = through
			_ = procs[name].cmd.Process.Kill()
		}
	}
	if !run.await(10*time.Second, func() bool { return len(run.ended) == len(order) }) {
		t.Fatal("the candidates' output did not end")
	}

	// What was recorded: the stream of leaders, now that no candidate is left.
	entries, err := rdb.Do(ctx, rdb.B().Xrange().Key("relock_election:{"+election+"}").Start("-").End("+").Build()).AsXRange()
	if err != nil {
		t.Fatal(err)
	}
	var recorded []leaderOf
	for _, e := range entries {
		term, err := strconv.ParseUint(e.FieldValues["term"], 10, 64)
		if err != nil {
			t.Fatalf("stream entry %v: %v", e, err)
		}
		recorded = append(recorded, leaderOf{term, e.FieldValues["value"]})
	}
	if len(recorded) > 0 && !run.await(5*time.Second, func() bool { return len(mine) > 0 && mine[len(mine)-1].term >= recorded[len(recorded)-1].term }) {
		s.violations++
		s.note("the test's observer did not see the last leader recorded")
	}
	stopObserving()
	<-observed

	run.mu.Lock()
	defer run.mu.Unlock()
	var wrong []string
	// (1) The fenced store.
	writes, err := store.accepted(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wrong = append(wrong, checkFencedWrites(writes, recorded)...)
	// Every leader's term was recorded with its name, and no term was told to two leaders.
	wrong = append(wrong, run.dupTerms...)
	isRecorded := map[leaderOf]bool{}
	for _, l := range recorded {
		isRecorded[l] = true
	}
	for _, l := range run.leads {
		if !isRecorded[leaderOf{l.term, l.proc}] {
			wrong = append(wrong, fmt.Sprintf("%s led with term %d, not recorded", l.proc, l.term))
		}
	}
	// (2) The observers.
	seqs := map[string][]leaderOf{"test": mine}
	for name, obs := range run.observed {
		seqs[name] = obs
	}
	wrong = append(wrong, checkObserved(recorded, seqs, live)...)
	s.violations += int64(len(wrong))
	for i, w := range wrong {
		if i == 5 {
			s.note("%d more", len(wrong)-5)
			break
		}
		s.note("%s", w)
	}
	if len(run.odd) > 0 {
		t.Errorf("lines not understood: %v", run.odd)
	}

	// (3) The hand-overs.
	var afterFaults []time.Duration
	var byKind []string
	for _, kind := range []string{"resign", "stop", "kill", "partition", "restart", "resign-restart"} {
		ds := handovers[kind]
		if len(ds) == 0 {
			continue
		}
		slices.Sort(ds)
		if kind != "resign" {
			afterFaults = append(afterFaults, ds...)
		}
		byKind = append(byKind, fmt.Sprintf("%s %v/%v (%d)", kind, percentile(ds, 0.5).Round(time.Millisecond), percentile(ds, 0.99).Round(time.Millisecond), len(ds)))
	}
	slices.Sort(afterFaults)
	s.ops = int64(len(writes))
	s.note("%d leaders recorded, %d candidates, %d writes accepted, %d stale writes rejected", len(recorded), len(order), len(writes), staleRejected)
	s.note("hand-over after a fault p50 %v p99 %v (%d; bound %v + 2 x restart), p50/p99 by kind: %s",
		percentile(afterFaults, 0.5).Round(time.Millisecond), percentile(afterFaults, 0.99).Round(time.Millisecond), len(afterFaults), bound(0), strings.Join(byKind, ", "))
	s.note("a cut-off leader told %v from its successor's lead (negative: before)", toldVsNext)
	s.note("leadership kept across %d of %d restarts under a leader; resignations across a restart tried again %d times, %d returned an error; %d campaigns failed",
		kept, rounds, resignTries, resignErrs, run.failed)
	if len(recorded) < 4*rounds {
		t.Errorf("%d leaders recorded in %d rounds: the scenario did not run", len(recorded), rounds)
	}
	s.report(t, true)
}

// TestElectionCheckersCatchViolations: the election scenario's checkers report what they are for: a write
// from a replaced leader accepted after its successor's (read back from a store that was made to take it),
// one term written by two writers, a term nobody was recorded to lead; an observer that skipped a leader,
// saw another value, stopped short or started with a leader never recorded, and recorded terms that do not
// increase. They report nothing for histories that are right.
func TestElectionCheckersCatchViolations(t *testing.T) {
	t.Parallel()
	recorded := []leaderOf{{3, "a"}, {5, "b"}, {8, "c"}}
	for _, c := range []struct {
		name   string
		writes []storeWrite
		want   int
	}{
		{"in order", []storeWrite{{3, "a"}, {3, "a"}, {5, "b"}, {8, "c"}, {8, "c"}}, 0},
		{"a replaced leader's write after its successor's", []storeWrite{{3, "a"}, {5, "b"}, {3, "a"}, {8, "c"}}, 1},
		{"one term, two writers", []storeWrite{{3, "a"}, {5, "b"}, {5, "c"}}, 1},
		{"a term nobody was recorded to lead", []storeWrite{{3, "a"}, {4, "a"}}, 1},
		{"a term recorded for another", []storeWrite{{3, "b"}}, 1},
	} {
		if got := checkFencedWrites(c.writes, recorded); len(got) != c.want {
			t.Errorf("%s: %q, want %d", c.name, got, c.want)
		}
	}

	// Through a store in Redis: it rejects the stale write itself; one put in its log behind its back (as a
	// store that does not fence would take it) is read back and reported.
	srv := server(t)
	store := fencedLog{rdb: rawClient(t, srv.Addr()), key: "fenced"}
	ctx := ctxTimeout(t, 10*time.Second)
	for _, w := range []struct {
		storeWrite
		ok bool
	}{{storeWrite{3, "a"}, true}, {storeWrite{5, "b"}, true}, {storeWrite{3, "a"}, false}, {storeWrite{5, "b"}, true}} {
		if ok, err := store.write(ctx, w.term, w.writer); ok != w.ok || err != nil {
			t.Fatalf("write %+v = %v, %v; want %v", w.storeWrite, ok, err, w.ok)
		}
	}
	writes, err := store.accepted(ctx)
	if err != nil || len(writes) != 3 {
		t.Fatalf("accepted = %v, %v; want 3 writes", writes, err)
	}
	if got := checkFencedWrites(writes, recorded); len(got) != 0 {
		t.Fatalf("the store's own history: %q", got)
	}
	do(t, store.rdb, "RPUSH", "fenced:log", "3 a")
	writes, _ = store.accepted(ctx)
	if got := checkFencedWrites(writes, recorded); len(got) != 1 {
		t.Fatalf("a stale write in the log: %q, want it reported", got)
	}

	for _, c := range []struct {
		name     string
		recorded []leaderOf
		seqs     map[string][]leaderOf
		complete map[string]uint64
		want     int
	}{
		{"right", recorded, map[string][]leaderOf{"x": recorded, "y": recorded[1:], "z": recorded[:1], "w": nil},
			map[string]uint64{"x": 0, "y": 0, "z": 3}, 0},
		{"a leader skipped", recorded, map[string][]leaderOf{"x": {{3, "a"}, {8, "c"}}}, nil, 1},
		{"another value", recorded, map[string][]leaderOf{"x": {{3, "a"}, {5, "z"}}}, nil, 1},
		{"a leader never recorded", recorded, map[string][]leaderOf{"x": {{8, "c"}, {9, "d"}}, "y": {{4, "q"}}}, nil, 2},
		{"stopped short", recorded, map[string][]leaderOf{"x": recorded[:2], "y": nil}, map[string]uint64{"x": 0, "y": 0}, 2},
		{"terms not increasing", []leaderOf{{3, "a"}, {2, "b"}}, nil, nil, 1},
	} {
		if got := checkObserved(c.recorded, c.seqs, c.complete); len(got) != c.want {
			t.Errorf("%s: %q, want %d", c.name, got, c.want)
		}
	}
}
