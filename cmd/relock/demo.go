package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The lock types of --lock.
const (
	demoRLock   = "rlock"
	demoFair    = "fair"
	demoRW      = "rw"
	demoRedLock = "redlock"
)

// Limits of the demo's flags.
const (
	demoMaxWorkers   = 256
	demoMaxDuration  = 10 * time.Minute
	demoMinWatchdog  = 100 * time.Millisecond
	demoHoldFactor   = 2.5 // the long hold of the watchdog phase, in watchdog timeouts
	demoReadyTimeout = 30 * time.Second
	demoCleanupLimit = 3 * time.Second
)

// runDemo runs relock demo.
func runDemo(ctx context.Context, e env) error {
	f, err := parseDemoFlags(e)
	if err != nil {
		return err
	}
	if f.child {
		return runDemoChild(ctx, e)
	}
	d := &demo{flags: f, e: e, tty: isTerminal(e.stdout)}
	if err := d.run(ctx); err != nil {
		if ctxOver(ctx) {
			d.endLine()
			return errors.New("interrupted")
		}
		return err
	}
	return nil
}

// demo is one run of relock demo.
type demo struct {
	flags *demoFlags
	e     env
	tty   bool
	cfg   demoConfig

	report  demoReport
	monitor []demoNode // the demo's own connections: counter reads, PTTL samples, cleanup
	line    int        // length of the live line on a terminal
}

func (d *demo) run(ctx context.Context) error {
	f := d.flags
	nodes := 1
	if f.lock == demoRedLock {
		nodes = 3
	}
	d.report = demoReport{Lock: f.lock, Workers: f.workers, Processes: f.processes,
		DurationMS: demoMillis(f.duration), PauseMS: demoMillis(f.pause), Problems: []string{}}
	d.cfg = demoConfig{Timeout: f.timeout, Lock: f.lock, Watchdog: f.watchdog, Pause: f.pause, Workers: f.workers}

	note := ""
	if f.set["redis"] {
		d.report.Server.Mode = "external"
		if f.lock == demoRedLock {
			for _, a := range strings.Split(f.redis, ",") {
				if a = strings.TrimSpace(a); a != "" {
					d.cfg.Nodes = append(d.cfg.Nodes, a)
				}
			}
			if len(d.cfg.Nodes) < 3 {
				return fmt.Errorf("%w: --lock redlock needs 3 or more independent masters in --redis (comma-separated), got %d",
					errUsage, len(d.cfg.Nodes))
			}
		} else {
			d.cfg.Nodes = []string{f.redis}
		}
		for _, n := range d.cfg.Nodes {
			if _, err := (&common{redis: n}).redisOption(); err != nil {
				return err
			}
		}
		d.report.Server.Addrs = d.cfg.Nodes
	} else {
		servers, n, err := startEmbedded(f.embedded, nodes)
		if err != nil {
			return err
		}
		defer stopEmbedded(servers)
		note = n
		d.cfg.Single = true
		d.report.Server.Mode = servers[0].kind
		for _, s := range servers {
			d.cfg.Nodes = append(d.cfg.Nodes, s.addr)
		}
		d.report.Server.Addrs = d.cfg.Nodes
	}
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	base := "relock:demo:{" + hex.EncodeToString(id) + "}"
	d.cfg.Name, d.cfg.Counter, d.cfg.Mirror = base+":lock", base+":counter", base+":mirror"
	if f.election {
		d.cfg.Name, d.cfg.Counter, d.cfg.Mirror = base+":election", "", ""
		d.cfg.Election, d.cfg.Store, d.cfg.StoreLog = true, base+":store", base+":store:log"
		d.cfg.Tick = electionTick(f.watchdog)
	}

	mon, closeMon, err := d.cfg.dial(ctx)
	if err != nil {
		return err
	}
	defer closeMon()
	d.monitor = mon
	if err := d.ping(ctx); err != nil {
		return err
	}
	d.report.Server.Version = d.version(ctx)
	defer d.cleanup(ctx)
	if f.election {
		return d.runElection(ctx, note)
	}
	d.header(note)

	runner, err := d.newRunner(ctx)
	if err != nil {
		return err
	}
	defer runner.close()

	d.say("\n1/%d  Without a lock: each worker reads the counter (GET), pauses %v, writes it plus one (SET).\n",
		d.phases(), f.pause)
	without, _, err := d.counterPhase(ctx, runner, false)
	if err != nil {
		return d.interrupted(err)
	}
	d.report.WithoutLock = without

	d.say("\n2/%d  With %s around the same read-modify-write.\n", d.phases(), d.lockTitle())
	with, stats, err := d.counterPhase(ctx, runner, true)
	if err != nil {
		return d.interrupted(err)
	}
	d.report.WithLock = with
	slices.SortFunc(stats.Holds, func(a, b demoHold) int { return cmp.Compare(a.Seq, b.Seq) })
	d.report.Handoff = demoHandoffs(stats.Holds)
	if f.lock != demoRedLock {
		d.report.Fencing = demoFencing(stats.Holds)
	}

	if f.watchdog > 0 {
		d.say("\n3/3  Watchdog: one worker holds the lock %v (%.1fx the %v watchdog timeout), no lease; another waits for it.\n",
			d.holdTime(), demoHoldFactor, f.watchdog)
		wd, err := d.watchdogPhase(ctx)
		if err != nil {
			return d.interrupted(err)
		}
		d.report.Watchdog = wd
	}
	d.judge()
	if f.json {
		enc := json.NewEncoder(d.e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(&d.report); err != nil {
			return err
		}
	} else {
		d.summary()
	}
	if !d.report.OK {
		return fmt.Errorf("BUG: %s with the lock: relock failed to exclude workers; please report this",
			strings.Join(d.report.Problems, "; "))
	}
	return nil
}

// interrupted ends the live line of a phase cut short by err, and returns err.
func (d *demo) interrupted(err error) error {
	d.endLine()
	return err
}

func (d *demo) phases() int {
	if d.flags.watchdog > 0 {
		return 3
	}
	return 2
}

func (d *demo) holdTime() time.Duration {
	return time.Duration(float64(d.flags.watchdog) * demoHoldFactor)
}

// ping checks every node answers, within --timeout, and reports one that does not in one line.
func (d *demo) ping(ctx context.Context) error {
	for i, n := range d.monitor {
		pctx, cancel := d.flags.withTimeout(ctx)
		err := n.rdb.Do(pctx, n.rdb.B().Ping().Build()).Error()
		cancel()
		if err != nil {
			return redisError(d.cfg.Nodes[i], err)
		}
	}
	return nil
}

// version returns the first node's Redis version, "" when it does not say.
func (d *demo) version(ctx context.Context) string {
	if d.report.Server.Mode == embedInProcess {
		return "miniredis"
	}
	vctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	rdb := d.monitor[0].rdb
	info, err := rdb.Do(vctx, rdb.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return ""
}

// keys returns the demo's keys on node i, to reset and remove.
func (d *demo) keys(i int) []string {
	name := d.cfg.Name
	// The lock's companions: Redisson's key layout for a name with a hash tag ("prefix:name"), and what a
	// release may leave for a moment (a repeated release's void mark lives 2 s).
	ks := []string{name, "redisson_lock_token:" + name, "redisson_lock_queue:" + name, "redisson_lock_timeout:" + name,
		"relock_lock_alive:" + name, "relock_release:" + name, "relock_rwlock_release:" + name, "relock_undone:" + name,
		"relock_release_void:" + name}
	if d.cfg.Election {
		// The fencing counter (the terms) and the stream of leaders persist by design: the demo removes
		// them, with the fenced store and its log.
		return append(ks, "relock_election:"+name, d.cfg.Store, d.cfg.StoreLog)
	}
	if i == 0 {
		ks = append(ks, d.cfg.Counter, d.cfg.Mirror)
	}
	return ks
}

// reset deletes the counter and its mirror before a phase.
func (d *demo) reset(ctx context.Context) error {
	rdb := d.monitor[0].rdb
	for _, k := range []string{d.cfg.Counter, d.cfg.Mirror} {
		if err := rdb.Do(ctx, rdb.B().Del().Key(k).Build()).Error(); err != nil {
			return redisError(d.cfg.Nodes[0], err)
		}
	}
	return nil
}

// cleanup removes the demo's keys, even after ctx ended.
func (d *demo) cleanup(ctx context.Context) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), demoCleanupLimit)
	defer cancel()
	for i, n := range d.monitor {
		for _, k := range d.keys(i) {
			_ = n.rdb.Do(cctx, n.rdb.B().Del().Key(k).Build()).Error()
		}
	}
}

// newRunner starts the workers: goroutines, or --processes worker processes.
func (d *demo) newRunner(ctx context.Context) (demoRunner, error) {
	if d.flags.processes == 0 {
		cfg := d.cfg
		for i := range d.flags.workers {
			cfg.IDs = append(cfg.IDs, i)
		}
		return newLocalRunner(ctx, &cfg)
	}
	return startProcRunner(ctx, &d.cfg, d.flags.workers, d.flags.processes)
}
