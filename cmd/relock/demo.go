package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/relock-go/relock"
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

// demoReport is what relock demo --json prints: one JSON object. Its field names are stable; durations are
// milliseconds (fractional).
//
//	lock           "rlock", "fair", "rw" or "redlock"
//	server         {"mode": "redis-server" | "inprocess" | "external", "addrs": [...], "version": "7.0.15"}
//	               (addrs: one per RedLock master; version: "" when the server does not say)
//	workers        how many workers raced (rw: the even-numbered ones write, the others read)
//	processes      how many OS processes ran them (0: goroutines of the demo's own process)
//	duration_ms    how long each of the two counter phases ran
//	pause_ms       each worker's pause between its GET and its SET of the counter
//	without_lock   the phase without a lock: see demoPhaseJSON
//	with_lock      the same work under the lock: see demoPhaseJSON
//	handoff        null, or how long the lock took to pass from one worker to another: from a worker's
//	               Unlock call to the next (different) worker's acquisition, in with_lock (rw: writers)
//	               {"count", "p50_ms", "p99_ms", "max_ms"}
//	fencing        null (RedLock has no fencing token), or the fencing tokens of with_lock's holds, in
//	               the order of the holds: {"holds", "first", "last", "increasing"}
//	watchdog       null (--watchdog 0), or the long-hold phase: see demoWatchdogJSON
//	ok             true when nothing went wrong under the lock: no lost update, no torn read, fencing
//	               tokens increasing, nobody else got in during the long hold
//	problems       what went wrong under the lock, [] when ok
type demoReport struct {
	Lock        string            `json:"lock"`
	Server      demoServerJSON    `json:"server"`
	Workers     int               `json:"workers"`
	Processes   int               `json:"processes"`
	DurationMS  float64           `json:"duration_ms"`
	PauseMS     float64           `json:"pause_ms"`
	WithoutLock demoPhaseJSON     `json:"without_lock"`
	WithLock    demoPhaseJSON     `json:"with_lock"`
	Handoff     *demoHandoffJSON  `json:"handoff"`
	Fencing     *demoFencingJSON  `json:"fencing"`
	Watchdog    *demoWatchdogJSON `json:"watchdog"`
	OK          bool              `json:"ok"`
	Problems    []string          `json:"problems"`
}

// demoServerJSON is the "server" of demoReport.
type demoServerJSON struct {
	Mode    string   `json:"mode"`
	Addrs   []string `json:"addrs"`
	Version string   `json:"version"`
}

// demoPhaseJSON is one counter phase of demoReport.
//
//	expected               increments the writers made (each read the counter and wrote it back plus one)
//	counted                the counter's value at the end
//	lost                   expected - counted: increments overwritten by a concurrent writer
//	reads, torn_reads      rw only: the readers' reads, and those that saw a half-done update (the counter
//	                       and its mirror key different)
//	elapsed_ms             how long the phase took
//	increments_per_second  expected / elapsed
type demoPhaseJSON struct {
	Expected  int64   `json:"expected"`
	Counted   int64   `json:"counted"`
	Lost      int64   `json:"lost"`
	Reads     int64   `json:"reads"`
	TornReads int64   `json:"torn_reads"`
	ElapsedMS float64 `json:"elapsed_ms"`
	PerSecond float64 `json:"increments_per_second"`
}

// demoHandoffJSON is the "handoff" of demoReport.
type demoHandoffJSON struct {
	Count int     `json:"count"`
	P50MS float64 `json:"p50_ms"`
	P99MS float64 `json:"p99_ms"`
	MaxMS float64 `json:"max_ms"`
}

// demoFencingJSON is the "fencing" of demoReport.
type demoFencingJSON struct {
	Holds      int    `json:"holds"`
	First      uint64 `json:"first"`
	Last       uint64 `json:"last"`
	Increasing bool   `json:"increasing"`
}

// demoWatchdogJSON is the long-hold phase: a holder keeps the lock, without a lease, for held_ms (2.5
// watchdog timeouts) while a contender on another Client waits for it; the lock's PTTL is sampled
// meanwhile (on the first master, for a RedLock; min_pttl_ms is over all of them).
//
//	timeout_ms                 the watchdog timeout (--watchdog)
//	held_ms                    how long the holder held the lock
//	samples                    PTTL samples taken while it was held
//	renewals                   how many times the PTTL went back up: the watchdog's renewals
//	min_pttl_ms                the lowest PTTL seen while held (-1: no sample; a key gone shows as -2)
//	lost                       the holder's HoldContext said the lock was lost
//	contender_acquired         the contender got the lock (after the holder's Unlock, or before: other_got_in)
//	other_got_in               the contender acquired the lock before the holder's Unlock
//	contender_waited_ms        from the contender's Lock call to its acquisition
//	contender_after_unlock_ms  from the holder's Unlock call to the contender's acquisition
//	token_holder, token_contender  their fencing tokens (0 without fencing)
type demoWatchdogJSON struct {
	TimeoutMS         float64 `json:"timeout_ms"`
	HeldMS            float64 `json:"held_ms"`
	Samples           int     `json:"samples"`
	Renewals          int     `json:"renewals"`
	MinPTTLMS         float64 `json:"min_pttl_ms"`
	Lost              bool    `json:"lost"`
	OtherGotIn        bool    `json:"other_got_in"`
	ContenderWaitedMS float64 `json:"contender_waited_ms"`
	ContenderAfterMS  float64 `json:"contender_after_unlock_ms"`
	TokenHolder       uint64  `json:"token_holder"`
	TokenContender    uint64  `json:"token_contender"`
	ContenderAcquired bool    `json:"contender_acquired"`
}

// demoConfig is what every process of a demo needs to run workers; the demo sends it to its worker
// processes (--processes) as JSON.
type demoConfig struct {
	Nodes    []string      `json:"nodes"`    // one --redis value per node: several only for a RedLock
	Single   bool          `json:"single"`   // connect with ForceSingleClient (embedded servers)
	Timeout  time.Duration `json:"timeout"`  // --timeout
	Lock     string        `json:"lock"`     // --lock
	Name     string        `json:"name"`     // the lock's name
	Counter  string        `json:"counter"`  // the counter's key
	Mirror   string        `json:"mirror"`   // rw: the key writers set to the counter's value after it
	Watchdog time.Duration `json:"watchdog"` // the Clients' watchdog timeout; 0: relock's default
	Pause    time.Duration `json:"pause"`    // between GET and SET
	IDs      []int         `json:"ids"`      // the workers this process runs
	Workers  int           `json:"workers"`  // how many workers there are in all
}

// writer reports whether worker id increments the counter (the others read it: rw only).
func (cfg *demoConfig) writer(id int) bool { return cfg.Lock != demoRW || id%2 == 0 }

// demoNode is one connection to one Redis node: a relock Client and its rueidis client.
type demoNode struct {
	lc    *relock.Client
	rdb   rueidis.Client
	close func()
}

// dial connects to every node of cfg, each with its own Client. The caller must call the returned close.
func (cfg *demoConfig) dial(ctx context.Context) ([]demoNode, func(), error) {
	var opts relock.Options
	if cfg.Watchdog > 0 {
		opts.WatchdogTimeout = cfg.Watchdog
	}
	var nodes []demoNode
	closeAll := func() {
		for _, n := range nodes {
			n.close()
		}
	}
	for _, spec := range cfg.Nodes {
		n, err := cfg.dialNode(ctx, spec, &opts)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		nodes = append(nodes, n)
	}
	return nodes, closeAll, nil
}

func (cfg *demoConfig) dialNode(ctx context.Context, spec string, opts *relock.Options) (demoNode, error) {
	if !cfg.Single {
		c := common{redis: spec, timeout: cfg.Timeout}
		lc, rdb, closeFn, err := c.connect(ctx, opts)
		if err != nil {
			return demoNode{}, err
		}
		return demoNode{lc: lc, rdb: rdb, close: closeFn}, nil
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	o := rueidis.ClientOption{InitAddress: []string{spec}, DisableCache: true, ForceSingleClient: true,
		ConnWriteTimeout: timeout}
	o.Dialer.Timeout = timeout
	rdb, err := rueidis.NewClient(o)
	if err != nil {
		return demoNode{}, redisError(spec, err)
	}
	lc, err := relock.Wrap(rdb, opts)
	if err != nil {
		rdb.Close()
		return demoNode{}, err
	}
	return demoNode{lc: lc, rdb: rdb, close: func() { lc.Close(); rdb.Close() }}, nil
}

// demoLock is a worker's lock: the write (or only) lock, the read lock for rw readers.
type demoLock struct {
	l     relock.Locker
	fence func(ctx context.Context) (uint64, error) // nil without fencing (RedLock)
}

// newLock makes the lock of cfg on nodes; writer selects a ReadWriteLock's half.
func (cfg *demoConfig) newLock(nodes []demoNode, writer bool) demoLock {
	c := nodes[0].lc
	switch cfg.Lock {
	case demoFair:
		l := c.FairLock(cfg.Name, relock.WithFencing())
		return demoLock{l: l, fence: l.FencingToken}
	case demoRW:
		rw := c.ReadWriteLock(cfg.Name, relock.WithFencing(), relock.WithWriterPriority())
		if !writer {
			return demoLock{l: rw.ReadLock()}
		}
		return demoLock{l: rw.WriteLock(), fence: rw.WriteLock().FencingToken}
	case demoRedLock:
		parts := make([]relock.Lockable, len(nodes))
		for i, n := range nodes {
			parts[i] = n.lc.Lock(cfg.Name)
		}
		// The default node timeout, TTL/20, is 50 ms with the demo's 1 s watchdog timeout: too tight on a
		// loaded machine. A quarter of the TTL still leaves most of it as validity.
		return demoLock{l: relock.NewRedLock(parts, &relock.RedLockOptions{NodeTimeout: cfg.Watchdog / 4})}
	default:
		l := c.Lock(cfg.Name, relock.WithFencing())
		return demoLock{l: l, fence: l.FencingToken}
	}
}

// demoHold is one hold of the lock by a writer in the locked phase. Seq is the counter value it wrote,
// which orders the holds; times are Unix nanoseconds, comparable between the processes of one host.
type demoHold struct {
	Seq      int64  `json:"s"`
	Worker   int    `json:"w"`
	Acquired int64  `json:"a"`
	Released int64  `json:"r"` // when Unlock was called
	Token    uint64 `json:"t"`
}

// demoStats is what workers did in a phase.
type demoStats struct {
	Increments int64      `json:"increments"`
	Reads      int64      `json:"reads"`
	Torn       int64      `json:"torn"`
	Holds      []demoHold `json:"holds"`
}

func (s *demoStats) add(o demoStats) {
	s.Increments += o.Increments
	s.Reads += o.Reads
	s.Torn += o.Torn
	s.Holds = append(s.Holds, o.Holds...)
}

// demoWorker is one worker: its own connections (a Client per node, as a separate service would have)
// and its lock.
type demoWorker struct {
	id    int
	cfg   *demoConfig
	nodes []demoNode
	lock  demoLock
}

// run runs the worker until phase ends (or ctx, which also cuts short a critical section).
func (w *demoWorker) run(ctx, phase context.Context, locked bool, progress *atomic.Int64) (demoStats, error) {
	if w.cfg.writer(w.id) {
		return w.write(ctx, phase, locked, progress)
	}
	return w.read(ctx, phase, locked)
}

// write increments the counter, racily (GET, pause, SET), under the lock when locked, until phase ends.
func (w *demoWorker) write(ctx, phase context.Context, locked bool, progress *atomic.Int64) (demoStats, error) {
	var st demoStats
	rdb := w.nodes[0].rdb
	for phase.Err() == nil {
		var (
			acquired, released time.Time
			token              uint64
			n                  int64
		)
		over, err := w.underLock(ctx, phase, locked, "lock", func() error {
			acquired = time.Now()
			if locked && w.lock.fence != nil {
				token, _ = w.lock.fence(ctx)
			}
			var err error
			n, err = w.increment(ctx, rdb)
			released = time.Now()
			return err
		})
		if over || err != nil {
			return st, err
		}
		st.Increments++
		progress.Add(1)
		if locked {
			st.Holds = append(st.Holds, demoHold{Seq: n, Worker: w.id, Acquired: acquired.UnixNano(),
				Released: released.UnixNano(), Token: token})
		}
		if w.cfg.Lock == demoRW {
			// Writers have priority (a waiting writer holds back new readers): each then works elsewhere
			// for as long as all writers' updates take, which leaves the readers room.
			demoSleep(phase, time.Duration((w.cfg.Workers+1)/2)*released.Sub(acquired))
		}
	}
	return st, nil
}

// increment is the deliberately racy read-modify-write: GET, pause, SET (rw: pause, then SET the mirror
// too, so that a reader between the two sees a half-done update). It returns the value written.
func (w *demoWorker) increment(ctx context.Context, rdb rueidis.Client) (int64, error) {
	n, err := rdb.Do(ctx, rdb.B().Get().Key(w.cfg.Counter).Build()).AsInt64()
	if err != nil && !rueidis.IsRedisNil(err) {
		return 0, redisError(w.cfg.Nodes[0], err)
	}
	if !demoSleep(ctx, w.cfg.Pause) {
		return 0, ctx.Err()
	}
	n++
	v := strconv.FormatInt(n, 10)
	if err := rdb.Do(ctx, rdb.B().Set().Key(w.cfg.Counter).Value(v).Build()).Error(); err != nil {
		return 0, redisError(w.cfg.Nodes[0], err)
	}
	if w.cfg.Lock == demoRW {
		if !demoSleep(ctx, w.cfg.Pause) {
			return 0, ctx.Err()
		}
		if err := rdb.Do(ctx, rdb.B().Set().Key(w.cfg.Mirror).Value(v).Build()).Error(); err != nil {
			return 0, redisError(w.cfg.Nodes[0], err)
		}
	}
	return n, nil
}

// read reads the counter and its mirror in one MGET, under the read lock when locked, and counts the
// reads that saw them differ: a writer's update half done.
func (w *demoWorker) read(ctx, phase context.Context, locked bool) (demoStats, error) {
	var st demoStats
	rdb := w.nodes[0].rdb
	for phase.Err() == nil {
		over, err := w.underLock(ctx, phase, locked, "read lock", func() error {
			vals, err := rdb.Do(ctx, rdb.B().Mget().Key(w.cfg.Counter, w.cfg.Mirror).Build()).ToArray()
			if err != nil {
				return redisError(w.cfg.Nodes[0], err)
			}
			if len(vals) == 2 {
				a, _ := vals[0].ToString()
				b, _ := vals[1].ToString()
				st.Reads++
				if a != b {
					st.Torn++
				}
			}
			demoSleep(ctx, w.cfg.Pause) // the reader works with what it read
			return nil
		})
		if over || err != nil {
			return st, err
		}
		if !demoSleep(phase, w.cfg.Pause) { // and leaves the writers room
			break
		}
	}
	return st, nil
}

// demoAcquire takes l for the owner of ctx. A RedLock's Lock fails at once when too few masters answer
// its first attempt in time (relock.ErrNoQuorum; a loaded machine); like an application would, the demo
// then tries again.
func demoAcquire(ctx context.Context, l relock.Locker) error {
	for {
		err := l.Lock(ctx)
		if err == nil || !errors.Is(err, relock.ErrNoQuorum) || ctxOver(ctx) {
			return err
		}
	}
}

// underLock runs body, under the worker's lock when locked. It reports over when the phase (or the demo)
// ended meanwhile: then the worker stops, without an error.
func (w *demoWorker) underLock(ctx, phase context.Context, locked bool, what string, body func() error) (over bool, err error) {
	if locked {
		if err := demoAcquire(phase, w.lock.l); err != nil {
			if ctxOver(phase) {
				return true, nil
			}
			return false, fmt.Errorf("worker %d: %s: %w", w.id, what, err)
		}
	}
	err = body()
	if locked {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), demoCleanupLimit)
		uerr := w.lock.l.Unlock(uctx)
		cancel()
		if err == nil && uerr != nil {
			err = fmt.Errorf("worker %d: releasing the %s: %w", w.id, what, uerr)
		}
	}
	if err != nil && ctx.Err() != nil {
		return true, nil
	}
	return false, err
}

// demoSleep sleeps d, or until ctx ends; it reports whether it slept the whole d.
func demoSleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// demoRunner runs a phase's workers, as goroutines of this process or in worker processes.
type demoRunner interface {
	// run runs every worker for d and returns what they did together.
	run(ctx context.Context, locked bool, d time.Duration) (demoStats, error)
	// progress returns the increments made so far in the current phase.
	progress() int64
	close()
}

// localRunner runs workers as goroutines of this process.
type localRunner struct {
	workers []*demoWorker
	closers []func()
	done    atomic.Int64
}

// newLocalRunner connects the workers of cfg.IDs.
func newLocalRunner(ctx context.Context, cfg *demoConfig) (*localRunner, error) {
	r := &localRunner{}
	for _, id := range cfg.IDs {
		nodes, closeFn, err := cfg.dial(ctx)
		if err != nil {
			r.close()
			return nil, err
		}
		r.closers = append(r.closers, closeFn)
		r.workers = append(r.workers, &demoWorker{id: id, cfg: cfg, nodes: nodes, lock: cfg.newLock(nodes, cfg.writer(id))})
	}
	return r, nil
}

func (r *localRunner) run(ctx context.Context, locked bool, d time.Duration) (demoStats, error) {
	r.done.Store(0)
	phase, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	stats := make([]demoStats, len(r.workers))
	errs := make([]error, len(r.workers))
	var wg sync.WaitGroup
	for i, w := range r.workers {
		wg.Go(func() {
			stats[i], errs[i] = w.run(ctx, phase, locked, &r.done)
			if errs[i] != nil {
				cancel() // one worker failing ends the phase for all
			}
		})
	}
	wg.Wait()
	var total demoStats
	for _, s := range stats {
		total.add(s)
	}
	if err := ctx.Err(); err != nil {
		return total, err
	}
	return total, demoFirst(errs)
}

// demoFirst returns the first error of errs that is not nil: the one that ended the phase for the others.
func demoFirst(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *localRunner) progress() int64 { return r.done.Load() }

func (r *localRunner) close() {
	for _, c := range r.closers {
		c()
	}
	r.closers = nil
}

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
	fs.StringVar(&f.embedded, "embedded", embedAuto, "the embedded server: auto, redis-server or inprocess")
	fs.BoolVar(&f.child, "child", false, "run as a worker process (reads its configuration on stdin)")
	fs.Usage = func() { demoUsage(e.stderr, fs) }
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

Without --redis the demo starts its own Redis: a redis-server child process when one is on PATH, else an
in-process server. It exits with status 1 if the locked phase loses an update.

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
	// The lock's companions: Redisson's key layout for a name with a hash tag ("prefix:name").
	ks := []string{name, "redisson_lock_token:" + name, "redisson_lock_queue:" + name, "redisson_lock_timeout:" + name,
		"relock_lock_alive:" + name}
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

// counterPhase runs the workers for --duration, with or without the lock, showing progress.
func (d *demo) counterPhase(ctx context.Context, r demoRunner, locked bool) (demoPhaseJSON, demoStats, error) {
	if err := d.reset(ctx); err != nil {
		return demoPhaseJSON{}, demoStats{}, err
	}
	start := time.Now()
	stop := d.live(ctx, func() string {
		n, _ := d.counter(ctx)
		return fmt.Sprintf("%5.1fs  %s increments  counter %s", time.Since(start).Seconds(),
			demoNum(r.progress()), demoNum(n))
	})
	stats, err := r.run(ctx, locked, d.flags.duration)
	elapsed := time.Since(start)
	stop()
	if err != nil {
		return demoPhaseJSON{}, stats, err
	}
	counted, err := d.counter(ctx)
	if err != nil {
		return demoPhaseJSON{}, stats, err
	}
	p := demoPhaseJSON{Expected: stats.Increments, Counted: counted, Lost: stats.Increments - counted,
		Reads: stats.Reads, TornReads: stats.Torn, ElapsedMS: demoMillis(elapsed)}
	if elapsed > 0 {
		p.PerSecond = math.Round(float64(stats.Increments) / elapsed.Seconds())
	}
	line := fmt.Sprintf("%5.1fs  %s increments  counter %s  lost %s", elapsed.Seconds(), demoNum(p.Expected),
		demoNum(p.Counted), demoNum(p.Lost))
	if d.cfg.Lock == demoRW {
		line += fmt.Sprintf("  reads %s, %s saw a half-done update", demoNum(p.Reads), demoNum(p.TornReads))
	}
	d.final(line)
	return p, stats, nil
}

// counter reads the counter's value (0 when absent).
func (d *demo) counter(ctx context.Context) (int64, error) {
	rdb := d.monitor[0].rdb
	n, err := rdb.Do(ctx, rdb.B().Get().Key(d.cfg.Counter).Build()).AsInt64()
	if err != nil && !rueidis.IsRedisNil(err) {
		return 0, redisError(d.cfg.Nodes[0], err)
	}
	return n, nil
}

// pttl returns the lock key's PTTL on node i (-2: no key, -1: no expiry).
func (d *demo) pttl(ctx context.Context, i int) (int64, error) {
	rdb := d.monitor[i].rdb
	return rdb.Do(ctx, rdb.B().Pttl().Key(d.cfg.Name).Build()).AsInt64()
}

// watchdogPhase holds the lock, without a lease, for demoHoldFactor watchdog timeouts on one Client,
// while a contender on another Client waits for it, and samples the lock's PTTL meanwhile.
func (d *demo) watchdogPhase(ctx context.Context) (*demoWatchdogJSON, error) {
	holderNodes, closeH, err := d.cfg.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer closeH()
	contNodes, closeC, err := d.cfg.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer closeC()
	holder, contender := d.cfg.newLock(holderNodes, true), d.cfg.newLock(contNodes, true)
	hold := d.holdTime()
	wd := &demoWatchdogJSON{TimeoutMS: demoMillis(d.flags.watchdog), MinPTTLMS: -1}

	var (
		acquired     = make(chan struct{}) // the holder has the lock, or failed (holderErr)
		unlocking    = make(chan struct{}) // the holder is about to call Unlock (or failed)
		holderErr    error                 // written before acquired or unlocking is closed
		unlockErr    error                 // read after wg.Wait
		contenderErr error
		heldAt       time.Time
		unlockAt     time.Time
		contAt       time.Time
		contStart    time.Time
		wg           sync.WaitGroup
	)
	wg.Go(func() { // the holder: Lock, HoldContext and Unlock on one goroutine, its owner
		if err := demoAcquire(ctx, holder.l); err != nil {
			holderErr = err
			close(acquired)
			close(unlocking)
			return
		}
		heldAt = time.Now()
		if holder.fence != nil {
			wd.TokenHolder, _ = holder.fence(ctx)
		}
		held, err := holder.l.HoldContext(ctx)
		close(acquired)
		demoSleep(ctx, hold)
		if err != nil || errors.Is(context.Cause(held), relock.ErrLockLost) {
			wd.Lost = true
		}
		unlockAt = time.Now()
		wd.HeldMS = demoMillis(unlockAt.Sub(heldAt))
		close(unlocking)
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), demoCleanupLimit)
		defer cancel()
		if err := holder.l.Unlock(uctx); err != nil && !wd.Lost {
			unlockErr = fmt.Errorf("unlock: %w", err)
		}
	})
	<-acquired
	failed := holderErr != nil
	if !failed {
		wg.Go(func() { // the contender waits for the lock, on its own Client
			lctx, cancel := context.WithTimeout(ctx, hold+10*time.Second)
			defer cancel()
			contStart = time.Now()
			if err := demoAcquire(lctx, contender.l); err != nil {
				contenderErr = err
				return
			}
			contAt = time.Now()
			wd.ContenderAcquired = true
			if contender.fence != nil {
				wd.TokenContender, _ = contender.fence(ctx)
			}
			uctx, cancel2 := context.WithTimeout(context.WithoutCancel(ctx), demoCleanupLimit)
			defer cancel2()
			_ = contender.l.Unlock(uctx)
		})
	}

	// Sample the PTTL until the holder is about to unlock; a sample whose reply arrives after that is
	// dropped, since the key may be gone by then.
	var prev int64 = -1
	start := time.Now()
	var lastPTTL atomic.Int64
	var renewals atomic.Int64
	stop := d.live(ctx, func() string {
		return fmt.Sprintf("%5.1fs  PTTL %4dms  renewed %d times  the other worker waits",
			time.Since(start).Seconds(), lastPTTL.Load(), renewals.Load())
	})
	tick := time.NewTicker(10 * time.Millisecond)
sample:
	for !failed {
		select {
		case <-unlocking:
			break sample
		case <-tick.C:
		}
		var low int64 = math.MaxInt64
		var first int64
		for i := range d.monitor {
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			v, err := d.pttl(sctx, i)
			cancel()
			if err != nil {
				continue
			}
			if i == 0 {
				first = v
			}
			low = min(low, v)
		}
		select {
		case <-unlocking:
			break sample
		default:
		}
		if low == math.MaxInt64 {
			continue
		}
		wd.Samples++
		if prev >= 0 && first > prev+int64(d.flags.watchdog/time.Millisecond)/10 {
			renewals.Add(1)
		}
		prev = first
		lastPTTL.Store(first)
		if wd.MinPTTLMS < 0 || float64(low) < wd.MinPTTLMS {
			wd.MinPTTLMS = float64(low)
		}
	}
	tick.Stop()
	wg.Wait()
	stop()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err := errors.Join(holderErr, unlockErr); err != nil {
		return nil, fmt.Errorf("watchdog phase: the holder: %w", err)
	}
	if contenderErr != nil && !wd.Lost {
		return nil, fmt.Errorf("watchdog phase: the waiting worker: %w", contenderErr)
	}
	wd.Renewals = int(renewals.Load())
	if wd.ContenderAcquired {
		wd.ContenderWaitedMS = demoMillis(contAt.Sub(contStart))
		wd.ContenderAfterMS = demoMillis(contAt.Sub(unlockAt))
		wd.OtherGotIn = contAt.Before(unlockAt)
	}
	d.final(fmt.Sprintf("%5.1fs  held, renewed %d times, PTTL never below %s", wd.HeldMS/1000, wd.Renewals,
		demoMS(wd.MinPTTLMS)))
	return wd, nil
}

// judge decides whether the lock did its job, and why not.
func (d *demo) judge() {
	r := &d.report
	if r.WithLock.Lost != 0 {
		r.Problems = append(r.Problems, fmt.Sprintf("%d updates lost (%d increments, counter %d)",
			r.WithLock.Lost, r.WithLock.Expected, r.WithLock.Counted))
	}
	if r.WithLock.TornReads != 0 {
		r.Problems = append(r.Problems, fmt.Sprintf("%d reads saw a half-done update", r.WithLock.TornReads))
	}
	if r.Fencing != nil && !r.Fencing.Increasing {
		r.Problems = append(r.Problems, "fencing tokens did not increase from hold to hold")
	}
	if w := r.Watchdog; w != nil {
		switch {
		case w.OtherGotIn && w.Lost:
			r.Problems = append(r.Problems, "the long hold was lost (its process stalled past the watchdog timeout?) and another worker got in")
		case w.OtherGotIn:
			r.Problems = append(r.Problems, "another worker got in during the long hold")
		case w.Lost:
			r.Problems = append(r.Problems, "the long hold was lost (its process stalled past the watchdog timeout?)")
		}
	}
	r.OK = len(r.Problems) == 0
}

// demoHandoffs measures, over holds sorted in counter order, the time from a holder's Unlock call to the next
// holder's acquisition when the next holder is another worker.
func demoHandoffs(holds []demoHold) *demoHandoffJSON {
	var ds []float64
	for i := 1; i < len(holds); i++ {
		a, b := holds[i-1], holds[i]
		if b.Seq != a.Seq+1 || b.Worker == a.Worker {
			continue
		}
		ds = append(ds, demoMillis(time.Duration(max(b.Acquired-a.Released, 0))))
	}
	if len(ds) == 0 {
		return nil
	}
	slices.Sort(ds)
	rank := func(p float64) float64 { return ds[max(int(math.Ceil(p*float64(len(ds))))-1, 0)] }
	return &demoHandoffJSON{Count: len(ds), P50MS: rank(0.50), P99MS: rank(0.99), MaxMS: ds[len(ds)-1]}
}

// demoFencing checks the holds' fencing tokens increase in counter order. holds must be sorted.
func demoFencing(holds []demoHold) *demoFencingJSON {
	if len(holds) == 0 {
		return nil
	}
	f := &demoFencingJSON{Holds: len(holds), First: holds[0].Token, Last: holds[len(holds)-1].Token, Increasing: true}
	for i := 1; i < len(holds); i++ {
		if holds[i].Token <= holds[i-1].Token {
			f.Increasing = false
		}
	}
	return f
}

// lockTitle names the lock in sentences.
func (d *demo) lockTitle() string {
	switch d.cfg.Lock {
	case demoFair:
		return "a FairLock (fenced)"
	case demoRW:
		return "a ReadWriteLock (writers: its write lock, fenced, with writer priority; readers: its read lock)"
	case demoRedLock:
		return "a RedLock over 3 masters"
	}
	return "an RLock (fenced)"
}

// header prints what the demo is about to do.
func (d *demo) header(note string) {
	f := d.flags
	how := "goroutines of this process, each with its own Client"
	if f.processes > 0 {
		how = fmt.Sprintf("spread over %d worker processes", f.processes)
	}
	d.say("relock demo: %d workers (%s) race on one counter in Redis.\n", f.workers, how)
	if f.lock == demoRW {
		d.say("With --lock rw, workers 0, 2, 4... write (increment) and the others read.\n")
	}
	where := strings.Join(d.cfg.Nodes, ", ")
	switch d.report.Server.Mode {
	case embedRedisServer:
		d.say("Redis: embedded redis-server %s at %s (--redis ADDR to use yours).\n", d.report.Server.Version, where)
	case embedInProcess:
		d.say("Redis: embedded in-process server (miniredis) at %s (--redis ADDR to use yours).\n", where)
	default:
		d.say("Redis: %s", where)
		if v := d.report.Server.Version; v != "" {
			d.say(" (Redis %s)", v)
		}
		d.say(".\n")
	}
	if note != "" {
		d.say("Note: %s.\n", note)
	}
	d.say("Lock: %q. Ctrl-C stops the demo.\n", d.cfg.Name)
}

// summary prints the results.
func (d *demo) summary() {
	r := &d.report
	w := d.e.stdout
	fmt.Fprintln(w, "\nResults")
	wo := r.WithoutLock
	fmt.Fprintf(w, "  without a lock:  %s increments, counter %s: %s updates lost (%s)\n",
		demoNum(wo.Expected), demoNum(wo.Counted), demoNum(wo.Lost), demoPercent(wo.Lost, wo.Expected))
	wl := r.WithLock
	verdict := "none lost"
	if wl.Lost != 0 {
		verdict = fmt.Sprintf("%s LOST", demoNum(wl.Lost))
	}
	fmt.Fprintf(w, "  with the lock:   %s increments, counter %s: %s (%s increments/s)\n",
		demoNum(wl.Expected), demoNum(wl.Counted), verdict, demoNum(int64(wl.PerSecond)))
	if d.cfg.Lock == demoRW {
		fmt.Fprintf(w, "  readers:         %s of %s reads saw a half-done update without the lock, %s of %s with it\n",
			demoNum(wo.TornReads), demoNum(wo.Reads), demoNum(wl.TornReads), demoNum(wl.Reads))
	}
	if h := r.Handoff; h != nil {
		fmt.Fprintf(w, "  handoff:         p50 %s, p99 %s, max %s from a worker's Unlock to the next worker's acquisition (%s handoffs)\n",
			demoMS(h.P50MS), demoMS(h.P99MS), demoMS(h.MaxMS), demoNum(int64(h.Count)))
	}
	switch fe := r.Fencing; {
	case fe != nil && fe.Increasing:
		fmt.Fprintf(w, "  fencing:         tokens %s to %s over %s holds, always increasing: a store that rejects old tokens stops a stale holder\n",
			demoNum(int64(fe.First)), demoNum(int64(fe.Last)), demoNum(int64(fe.Holds)))
	case fe != nil:
		fmt.Fprintf(w, "  fencing:         tokens %s to %s over %s holds, NOT always increasing\n",
			demoNum(int64(fe.First)), demoNum(int64(fe.Last)), demoNum(int64(fe.Holds)))
	case d.cfg.Lock == demoRedLock:
		fmt.Fprintln(w, "  fencing:         none: a RedLock has no fencing token (see relock.RedLock)")
	}
	if wd := r.Watchdog; wd != nil {
		fmt.Fprintf(w, "  watchdog:        held %s with a %s watchdog timeout and no lease: renewed %d times, PTTL never below %s\n",
			demoMS(wd.HeldMS), demoMS(wd.TimeoutMS), wd.Renewals, demoMS(wd.MinPTTLMS))
		switch {
		case wd.OtherGotIn:
			fmt.Fprintf(w, "                   the other worker got in %s BEFORE the Unlock\n", demoMS(-wd.ContenderAfterMS))
		case wd.ContenderAcquired:
			tokens := ""
			if wd.TokenContender > 0 {
				tokens = fmt.Sprintf(" (token %s after %s)", demoNum(int64(wd.TokenContender)), demoNum(int64(wd.TokenHolder)))
			}
			fmt.Fprintf(w, "                   the other worker waited %s and got in %s after the Unlock%s, never before\n",
				demoMS(wd.ContenderWaitedMS), demoMS(wd.ContenderAfterMS), tokens)
		}
	}
	if r.OK {
		fmt.Fprintln(w, "\nOK: the lock lost no update.")
	}
}

// live shows a phase's progress until the returned stop is called: on a terminal one line, rewritten in
// place every 100 ms; otherwise a line every second; with --json nothing.
func (d *demo) live(ctx context.Context, status func() string) (stop func()) {
	if d.flags.json {
		return func() {}
	}
	every := time.Second
	if d.tty {
		every = 100 * time.Millisecond
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				d.progressLine(status())
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// progressLine prints a progress line: in place on a terminal.
func (d *demo) progressLine(s string) {
	if !d.tty {
		fmt.Fprintf(d.e.stdout, "      %s\n", s)
		return
	}
	pad := max(d.line-len(s), 0)
	fmt.Fprintf(d.e.stdout, "\r      %s%s", s, strings.Repeat(" ", pad))
	d.line = len(s)
}

// final prints a phase's last line, in place of the live one on a terminal.
func (d *demo) final(s string) {
	if d.flags.json {
		return
	}
	d.progressLine(s)
	d.endLine()
}

// endLine ends the live line on a terminal.
func (d *demo) endLine() {
	if d.tty && d.line > 0 && !d.flags.json {
		fmt.Fprintln(d.e.stdout)
	}
	d.line = 0
}

// say prints text for people (not with --json).
func (d *demo) say(format string, args ...any) {
	if !d.flags.json {
		fmt.Fprintf(d.e.stdout, format, args...)
	}
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// demoMillis converts d to fractional milliseconds, to 3 decimals.
func demoMillis(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)) / 1000
}

// demoMS formats a number of milliseconds for people.
func demoMS(v float64) string {
	switch {
	case v >= 1000:
		return strconv.FormatFloat(v/1000, 'f', 2, 64) + "s"
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 0, 64) + "ms"
	}
	return strconv.FormatFloat(v, 'f', 2, 64) + "ms"
}

// demoNum formats n with thousands separators.
func demoNum(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// demoPercent formats part/whole as a percentage.
func demoPercent(part, whole int64) string {
	if whole == 0 {
		return "0%"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(part)/float64(whole))
}

// demoMsg is a line a worker process writes on its stdout.
type demoMsg struct {
	Type  string     `json:"type"` // "ready", "progress", "result" or "error"
	N     int64      `json:"n,omitempty"`
	Stats *demoStats `json:"stats,omitempty"`
	Error string     `json:"error,omitempty"`
}

// demoPhaseReq is a line the demo writes to a worker process's stdin: run a phase.
type demoPhaseReq struct {
	Locked   bool          `json:"locked"`
	Duration time.Duration `json:"duration"`
}

// procRunner runs workers in worker processes: this executable, run as "relock demo --child", each with a
// block of the workers. Each reads its demoConfig, then one demoPhaseReq per phase, as JSON lines on
// stdin, and answers with demoMsg lines on stdout. A worker process whose stdin closes (the demo ended, or
// died) stops and exits, so none outlives the demo.
type procRunner struct {
	children []*demoChild
}

// demoChild is one worker process.
type demoChild struct {
	idx    int
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	msgs   chan demoMsg  // every message but progress; closed at EOF
	quit   chan struct{} // closed by close: the reader stops delivering
	read   sync.WaitGroup
	stderr demoBuffer
	done   atomic.Int64 // increments so far in the current phase
}

// startProcRunner starts processes worker processes for workers workers and waits until they are
// connected.
func startProcRunner(ctx context.Context, cfg *demoConfig, workers, processes int) (*procRunner, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("--processes: cannot find this program to run it again: %w", err)
	}
	r := &procRunner{}
	for p := range processes {
		c := *cfg
		c.IDs = nil
		for id := p * workers / processes; id < (p+1)*workers/processes; id++ {
			c.IDs = append(c.IDs, id)
		}
		child, err := startDemoChild(ctx, exe, p, &c)
		if err != nil {
			r.close()
			return nil, err
		}
		r.children = append(r.children, child)
	}
	timeout := time.NewTimer(demoReadyTimeout)
	defer timeout.Stop()
	for _, c := range r.children {
		select {
		case m, ok := <-c.msgs:
			if ok && m.Type == "ready" {
				continue
			}
			r.close()
			return nil, c.failed(m, ok)
		case <-ctx.Done():
			r.close()
			return nil, ctx.Err()
		case <-timeout.C:
			r.close()
			return nil, fmt.Errorf("worker process %d did not start within %v", c.idx, demoReadyTimeout)
		}
	}
	return r, nil
}

func startDemoChild(ctx context.Context, exe string, idx int, cfg *demoConfig) (*demoChild, error) {
	c := &demoChild{idx: idx, msgs: make(chan demoMsg, 16), quit: make(chan struct{})}
	c.cmd = exec.CommandContext(ctx, exe, "demo", "--child")
	c.cmd.Cancel = func() error { return c.cmd.Process.Signal(os.Interrupt) }
	c.cmd.WaitDelay = demoCleanupLimit
	c.cmd.Stderr = &c.stderr
	stdin, err := c.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	c.stdin = stdin
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting worker process %d: %w", idx, err)
	}
	c.read.Go(func() {
		defer close(c.msgs)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64*1024), 256<<20)
		for sc.Scan() {
			var m demoMsg
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				m = demoMsg{Type: "error", Error: "unreadable message: " + sc.Text()}
			}
			if m.Type == "progress" {
				c.done.Store(m.N)
				continue
			}
			select {
			case c.msgs <- m:
			case <-c.quit:
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	})
	if err := c.send(cfg); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// send writes v to the worker process as a JSON line.
func (c *demoChild) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := c.stdin.Write(append(b, '\n')); err != nil {
		return c.failed(demoMsg{}, false)
	}
	return nil
}

// failed describes a worker process that sent m (ok) or nothing more (!ok).
func (c *demoChild) failed(m demoMsg, ok bool) error {
	if ok && m.Type == "error" {
		return fmt.Errorf("worker process %d: %s", c.idx, m.Error)
	}
	if ok {
		return fmt.Errorf("worker process %d: unexpected %q message", c.idx, m.Type)
	}
	msg := strings.TrimSpace(c.stderr.String())
	if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
		msg = msg[i+1:]
	}
	if msg == "" {
		msg = "no message"
	}
	return fmt.Errorf("worker process %d ended: %s", c.idx, msg)
}

// stop closes the worker process's stdin, which makes it exit, and waits for it; one that does not exit
// within demoCleanupLimit is killed.
func (c *demoChild) stop() {
	_ = c.stdin.Close()
	close(c.quit)
	exited := make(chan struct{})
	go func() {
		c.read.Wait()
		close(exited)
	}()
	select {
	case <-exited:
	case <-time.After(demoCleanupLimit):
		_ = c.cmd.Process.Kill()
		<-exited
	}
	_ = c.cmd.Wait()
}

func (r *procRunner) run(ctx context.Context, locked bool, d time.Duration) (demoStats, error) {
	for _, c := range r.children {
		c.done.Store(0)
		if err := c.send(demoPhaseReq{Locked: locked, Duration: d}); err != nil {
			return demoStats{}, err
		}
	}
	var total demoStats
	limit := time.NewTimer(d + demoReadyTimeout)
	defer limit.Stop()
	var errs []error
	for _, c := range r.children {
		select {
		case m, ok := <-c.msgs:
			if ok && m.Type == "result" && m.Stats != nil {
				total.add(*m.Stats)
				continue
			}
			errs = append(errs, c.failed(m, ok))
		case <-ctx.Done():
			return total, ctx.Err()
		case <-limit.C:
			return total, fmt.Errorf("worker process %d did not finish the phase in time", c.idx)
		}
	}
	return total, demoFirst(errs)
}

func (r *procRunner) progress() int64 {
	var n int64
	for _, c := range r.children {
		n += c.done.Load()
	}
	return n
}

func (r *procRunner) close() {
	var wg sync.WaitGroup
	for _, c := range r.children {
		wg.Go(c.stop)
	}
	wg.Wait()
	r.children = nil
}

// demoBuffer is a bytes.Buffer safe for concurrent use.
type demoBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *demoBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *demoBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// runDemoChild is a worker process (relock demo --child): see procRunner.
func runDemoChild(ctx context.Context, e env) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	send := func(m demoMsg) error {
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		_, err = e.stdout.Write(append(b, '\n'))
		return err
	}
	sc := bufio.NewScanner(e.stdin)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	if !sc.Scan() {
		return fmt.Errorf("%w: --child is for worker processes: it reads its configuration on stdin", errUsage)
	}
	var cfg demoConfig
	if err := json.Unmarshal(sc.Bytes(), &cfg); err != nil || len(cfg.Nodes) == 0 || len(cfg.IDs) == 0 {
		return fmt.Errorf("%w: --child: bad configuration on stdin", errUsage)
	}
	r, err := newLocalRunner(ctx, &cfg)
	if err != nil {
		_ = send(demoMsg{Type: "error", Error: err.Error()})
		return err
	}
	defer r.close()
	if err := send(demoMsg{Type: "ready"}); err != nil {
		return err
	}
	reqs := make(chan demoPhaseReq)
	go func() { // stdin's EOF means the demo is done, or gone: stop
		defer cancel()
		defer close(reqs)
		for sc.Scan() {
			var req demoPhaseReq
			if json.Unmarshal(sc.Bytes(), &req) != nil || req.Duration <= 0 {
				continue
			}
			select {
			case reqs <- req:
			case <-ctx.Done():
				return
			}
		}
	}()
	for req := range reqs {
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					_ = send(demoMsg{Type: "progress", N: r.progress()})
				}
			}
		})
		stats, err := r.run(ctx, req.Locked, req.Duration)
		close(done)
		wg.Wait()
		if err != nil {
			if ctx.Err() == nil {
				_ = send(demoMsg{Type: "error", Error: err.Error()})
			}
			return err
		}
		if err := send(demoMsg{Type: "result", Stats: &stats}); err != nil {
			return err
		}
	}
	return nil
}
