package main

import (
	"flag"
	"fmt"
	"io"
	"time"
)

// demoFlags are relock demo's flags.
type demoFlags struct {
	common
	workers   int
	duration  time.Duration
	lock      string
	processes int
	watchdog  time.Duration
	pause     time.Duration
	embedded  string
	election  bool
	child     bool
	set       map[string]bool // the flags given on the command line
}

// demoHidden are the flags the usage does not show: --embedded forces a kind of embedded server (for
// tests), --child makes the process a worker process of another demo.
var demoHidden = map[string]bool{"embedded": true, "child": true}

func parseDemoFlags(e env) (*demoFlags, error) {
	f := &demoFlags{set: map[string]bool{}}
	fs := newFlags("demo", "demo [flags]", e)
	f.common.register(fs, 5*time.Second)
	fs.IntVar(&f.workers, "workers", 4, "how many workers race on the counter (`n`)")
	fs.DurationVar(&f.duration, "duration", 1500*time.Millisecond, "how long each of the two counter phases runs")
	fs.StringVar(&f.lock, "lock", demoRLock, "the lock: rlock, fair, rw (writers increment, readers check) or redlock (3 masters)")
	fs.IntVar(&f.processes, "processes", 0, "spread the workers over `n` OS processes (0: goroutines of this process)")
	fs.DurationVar(&f.watchdog, "watchdog", time.Second, "the watchdog timeout; the last phase holds the lock 2.5 times as long (0: skip that phase)")
	fs.DurationVar(&f.pause, "pause", time.Millisecond, "each worker's pause between reading and writing the counter")
	fs.BoolVar(&f.election, "election", false, "show leader election instead (see above): --workers sets the candidates (default 3),\n"+
		"--duration each leader's tenure (default 500ms), --processes runs one candidate per process")
	fs.StringVar(&f.embedded, "embedded", embedAuto, "the embedded server: auto, redis-server or inprocess")
	fs.BoolVar(&f.child, "child", false, "run as a worker process (reads its configuration on stdin)")
	fs.Usage = func() { demoUsage(fs.Output(), fs) }
	pos, err := parse(fs, e.args)
	if err != nil {
		return nil, err
	}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	if f.child {
		return f, nil
	}
	switch {
	case len(pos) > 0:
		return nil, fmt.Errorf("%w: unexpected argument %q", errUsage, pos[0])
	case f.lock != demoRLock && f.lock != demoFair && f.lock != demoRW && f.lock != demoRedLock:
		return nil, fmt.Errorf("%w: --lock %q: want rlock, fair, rw or redlock", errUsage, f.lock)
	case f.processes < 0:
		return nil, fmt.Errorf("%w: --processes %d: want 0 or more", errUsage, f.processes)
	case f.processes > demoMaxWorkers:
		return nil, fmt.Errorf("%w: --processes %d: at most %d", errUsage, f.processes, demoMaxWorkers)
	}
	if f.election {
		if err := f.electionDefaults(); err != nil {
			return nil, err
		}
	}
	if f.processes > f.workers && !f.set["workers"] {
		f.workers = f.processes // one worker per process
	}
	switch {
	case f.workers < 1 || f.workers > demoMaxWorkers:
		return nil, fmt.Errorf("%w: --workers %d: want 1 to %d", errUsage, f.workers, demoMaxWorkers)
	case f.processes > f.workers:
		return nil, fmt.Errorf("%w: --processes %d is more than --workers %d", errUsage, f.processes, f.workers)
	case f.duration <= 0 || f.duration > demoMaxDuration:
		return nil, fmt.Errorf("%w: --duration %v: want more than 0, at most %v", errUsage, f.duration, demoMaxDuration)
	case f.watchdog != 0 && (f.watchdog < demoMinWatchdog || f.watchdog > time.Minute):
		return nil, fmt.Errorf("%w: --watchdog %v: want 0 (skip) or %v to 1m", errUsage, f.watchdog, demoMinWatchdog)
	case f.pause < 0 || f.pause > time.Second:
		return nil, fmt.Errorf("%w: --pause %v: want 0 to 1s", errUsage, f.pause)
	case f.embedded != embedAuto && f.embedded != embedRedisServer && f.embedded != embedInProcess:
		return nil, fmt.Errorf("%w: --embedded %q: want auto, redis-server or inprocess", errUsage, f.embedded)
	case f.set["embedded"] && f.set["redis"]:
		return nil, fmt.Errorf("%w: --embedded and --redis exclude each other", errUsage)
	}
	return f, nil
}

// demoUsage prints the usage of relock demo, without its hidden flags.
func demoUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, `Usage: relock demo [flags]

Workers increment a counter in Redis with a racy read-modify-write (GET, pause, SET): first without a lock,
losing updates, then with the lock, losing none; the lock's handoff latency is measured. A last phase holds
the lock for longer than the watchdog timeout and shows the watchdog renewing it while another worker waits.

With --election it shows leader election instead (Client.Election): candidates, each with its own Client,
campaign, an observer prints each new leader, and the leader writes its term to a fenced store, which rejects
a write whose term is below the highest it accepted. Then the leader resigns (the next one leads at once),
the next leader dies without resigning (its Client cut off and closed, or its process killed: replaced
within about the watchdog timeout), and the next one stalls past the watchdog timeout: once it resumes, the
store rejects its write, whose term is stale.

Without --redis the demo starts its own Redis: a redis-server child process when one is on PATH, else an
in-process server. It exits with status 1 if the locked phase loses an update, or if the election goes
wrong (writes accepted out of term order, a leader the observer missed, a hand-over slower than two watchdog
timeouts, the stale write accepted, the stalled leader not told that it lost the leadership).

Flags:
`)
	shown := flag.NewFlagSet("demo", flag.ContinueOnError)
	shown.SetOutput(w)
	fs.VisitAll(func(f *flag.Flag) {
		switch {
		case demoHidden[f.Name]:
		case f.Name == "redis":
			shown.String(f.Name, "", "use the Redis at `address` (host:port, cluster seeds or a redis:// URL; "+
				"redlock: 3 or more comma-separated independent masters) instead of an embedded one")
		default:
			shown.Var(f.Value, f.Name, f.Usage)
		}
	})
	shown.PrintDefaults()
}

// electionDefaults checks the flags that --election does not take, and sets the defaults it has of its
// own: 3 candidates (one per process with --processes), a 500 ms tenure.
func (f *demoFlags) electionDefaults() error {
	for _, name := range []string{"lock", "pause"} {
		if f.set[name] {
			return fmt.Errorf("%w: --election and --%s exclude each other (--%s is for the counter phases)", errUsage, name, name)
		}
	}
	switch {
	case f.processes > 0 && f.set["workers"] && f.workers != f.processes:
		return fmt.Errorf("%w: --election runs one candidate per process: --processes %d and --workers %d differ",
			errUsage, f.processes, f.workers)
	case f.processes > 0:
		f.workers = f.processes
	case !f.set["workers"]:
		f.workers = demoElectionCandidates
	}
	if f.workers < demoElectionCandidates || f.workers > demoMaxWorkers {
		flag := "--workers"
		if f.processes > 0 {
			flag = "--processes"
		}
		return fmt.Errorf("%w: %s %d: --election wants %d to %d candidates (a resignation, a death and a stall each need a successor)",
			errUsage, flag, f.workers, demoElectionCandidates, demoMaxWorkers)
	}
	if f.watchdog < demoMinWatchdog || f.watchdog > time.Minute {
		return fmt.Errorf("%w: --watchdog %v: --election wants a watchdog timeout of %v to 1m", errUsage, f.watchdog, demoMinWatchdog)
	}
	if !f.set["duration"] {
		f.duration = demoElectionTenure
	}
	return nil
}
