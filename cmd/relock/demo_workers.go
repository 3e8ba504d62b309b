package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/relock-go/relock"
	"golang.org/x/sync/errgroup"
)

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

	// --election: Name is the election's, the candidates are the workers.
	Election bool          `json:"election"`
	Store    string        `json:"store"`     // the fenced store's key (a hash: term, value)
	StoreLog string        `json:"store_log"` // the list where the store logs every write, accepted or not
	Tick     time.Duration `json:"tick"`      // how often a leader writes to the store
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
	return cfg.dialWith(ctx, nil)
}

// dialWith is dial, with the rueidis client of each node passed through wrap (when not nil) before a relock
// Client is made on it; the nodes' rdb is what wrap returned.
func (cfg *demoConfig) dialWith(ctx context.Context, wrap func(rueidis.Client) rueidis.Client) ([]demoNode, func(), error) {
	// The demo's report tells what its holders lose; relock's own records would interleave with it.
	opts := relock.Options{Logger: slog.New(slog.DiscardHandler)}
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
		n, err := cfg.dialNode(ctx, spec, &opts, wrap)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		nodes = append(nodes, n)
	}
	return nodes, closeAll, nil
}

func (cfg *demoConfig) dialNode(ctx context.Context, spec string, opts *relock.Options, wrap func(rueidis.Client) rueidis.Client) (demoNode, error) {
	if !cfg.Single {
		c := common{redis: spec, timeout: cfg.Timeout}
		lc, rdb, closeFn, err := c.connectWith(ctx, opts, wrap)
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
	use := rdb
	if wrap != nil {
		use = wrap(rdb)
	}
	lc, err := relock.Wrap(use, opts)
	if err != nil {
		rdb.Close()
		return demoNode{}, err
	}
	return demoNode{lc: lc, rdb: use, close: func() { lc.Close(); rdb.Close() }}, nil
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
	g, phase := errgroup.WithContext(phase) // one worker failing ends the phase for all
	stats := make([]demoStats, len(r.workers))
	for i, w := range r.workers {
		g.Go(func() (err error) {
			stats[i], err = w.run(ctx, phase, locked, &r.done)
			return err
		})
	}
	err := g.Wait() // the first error: the one that ended the phase for the others
	var total demoStats
	for _, s := range stats {
		total.add(s)
	}
	if cerr := ctx.Err(); cerr != nil {
		return total, cerr
	}
	return total, err
}

func (r *localRunner) progress() int64 { return r.done.Load() }

func (r *localRunner) close() {
	for _, c := range r.closers {
		c()
	}
	r.closers = nil
}
