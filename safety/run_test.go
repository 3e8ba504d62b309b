package safety

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/faultnet"
	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/internal/testutil"
)

// expectation is what a scenario must show.
type expectation int

const (
	mustBeSafe   expectation = iota // every history linearizable
	mustBeCaught                    // unsafe by design: the checker must find a violation in some round
	measured                        // reported, not asserted
)

// scenario is one fault, one lock kind, one variant (fenced or not).
type scenario struct {
	name   string
	kind   lockKind
	fenced bool
	// writesOnly makes a fenced store fence only the writes (FencedWrites), to show what that loses.
	writesOnly bool
	counter    bool // the object is a counter (each section writes read+1); else a register (unique values)
	// guarded keeps the register on the lock's server and writes it with the hold's GuardedWrite, which
	// lands only while the hold is current (checked in the same script run): no token check in the store.
	guarded bool
	expect  expectation

	servers    int      // the lock's servers: 1, or the nodes of a RedLock
	serverArgs []string // extra redis-server arguments (persistence)
	watchdog   time.Duration
	workers    int           // clients, each a goroutine on its own relock Client through its own proxies
	work       time.Duration // how long a section works between its read and its write, checking its hold
	fault      time.Duration // how long the fault lasts

	// inSection, when set, injects the fault once a round, inside worker 0's first section, after its read,
	// its work and a check that it still holds; it returns whether the section must check again before
	// writing (false: the fault is a pause between the check and the write, which no check can see).
	inSection func(r *round, h *hold) bool
	// background, when set, injects faults while the round runs, until stop is closed, and undoes them.
	background func(r *round, stop <-chan struct{})
	// orchestrate, when set, drives the round's fault itself (and the workers' gates, see round).
	orchestrate func(r *round)
	cluster     bool // the lock's servers are a cluster of 3 masters with a replica each
	replicaAck  bool // acquisitions wait for a replica's acknowledgement (WithReplicaAck)
	// noHoldWatch gives the Clients Options.NoHoldWatch: only the watchdog tells a holder of its loss, as on
	// a cluster, where the watch of holds does not run.
	noHoldWatch bool
	// after is how long a round goes on after an in-section fault (after the rejoin, for a failover); for
	// background faults, the round's length.
	after  time.Duration
	rounds int // rounds in the short version
}

func (sc *scenario) variant() string {
	v := "unfenced"
	switch {
	case sc.fenced && sc.writesOnly:
		v = "fenced-writes-only"
	case sc.fenced:
		v = "fenced"
	}
	if sc.guarded {
		v += "+guarded"
	}
	if sc.replicaAck {
		v += "+replica-ack"
	}
	if sc.noHoldWatch {
		v += "+no-hold-watch"
	}
	return v
}

// env is a scenario's lock servers, and each worker's proxies and Clients to them.
type env struct {
	cluster *redistest.Cluster // when the scenario runs on one
	servers []*redistest.Server
	proxies [][]*faultnet.Proxy // [worker][server]
	clients [][]*relock.Client  // [worker][server]
	admin   []rueidis.Client    // direct to each server
}

func newEnv(t *testing.T, sc *scenario) *env {
	if sc.cluster { // no proxies: a cluster client follows the nodes' own addresses
		cl := redistest.StartCluster(t, 3, 1)
		e := &env{cluster: cl, servers: cl.Servers}
		for range sc.workers {
			e.clients = append(e.clients, []*relock.Client{testutil.Client(t, cl.Addrs(), &relock.Options{WatchdogTimeout: sc.watchdog, NoHoldWatch: sc.noHoldWatch})})
		}
		return e
	}
	e := &env{servers: redistest.StartN(t, sc.servers, sc.serverArgs...)}
	for range sc.workers {
		var ps []*faultnet.Proxy
		var cs []*relock.Client
		for _, srv := range e.servers {
			p := testutil.Proxy(t, srv.Addr())
			ps = append(ps, p)
			cs = append(cs, testutil.Client(t, []string{p.Addr}, &relock.Options{WatchdogTimeout: sc.watchdog, NoHoldWatch: sc.noHoldWatch}))
		}
		e.proxies = append(e.proxies, ps)
		e.clients = append(e.clients, cs)
	}
	for _, srv := range e.servers {
		e.admin = append(e.admin, testutil.Raw(t, srv.Addr()))
	}
	return e
}

// round is one run of a scenario's workers on a fresh lock and register.
type round struct {
	t     *testing.T
	store *Store // the register
	sc    *scenario
	env   *env
	name  string // the lock's name
	hist  *History
	// gates, when set (by an orchestrated scenario), hold each worker back until its gate is closed.
	gates  []chan struct{}
	faults atomic.Int64
	fired  atomic.Bool
	toldWG sync.WaitGroup
	// faulted is closed when the in-section fault is over.
	faulted chan struct{}
	errs    atomic.Int64 // acquisitions and store calls that failed (not violations)
	// told is how long after the in-section fault began the holder's hold context ended with a loss; -1
	// when it did not within toldWithin (or ended otherwise: released, the hold having survived).
	told atomic.Int64
	// failedOver is closed when an orchestrated failover is over.
	failedOver chan struct{}
	// measures are the round's own durations for the summary, which gives each one's range over the rounds.
	measuresMu sync.Mutex
	measures   []measure
}

// measure records a named duration of the round.
func (r *round) measure(name string, d time.Duration) {
	r.measuresMu.Lock()
	r.measures = append(r.measures, measure{name, d})
	r.measuresMu.Unlock()
}

// measure is a named duration.
type measure struct {
	name string
	d    time.Duration
}

// toldWithin bounds the wait for the holder to be told of a loss after an in-section fault.
const toldWithin = 5 * time.Second

// watchTold records in r.told when h ends with a loss, counted from start.
func (r *round) watchTold(h *hold, start time.Time) {
	r.toldWG.Go(func() {
		select {
		case <-h.ctx.Done():
			if errors.Is(context.Cause(h.ctx), relock.ErrLockLost) {
				r.told.Store(int64(time.Since(start)))
			}
		case <-time.After(toldWithin):
		}
	})
}

// working spends d in a section, checking every few milliseconds that h is still held, as a correct user
// does; it reports whether h is held at the end.
func working(h *hold, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if h.ctx.Err() != nil {
			return false
		}
		left := time.Until(deadline)
		if left <= 0 {
			return true
		}
		time.Sleep(min(left, 5*time.Millisecond))
	}
}

// section is one critical section of worker w under h: read, work, check the hold, write; recorded as one
// operation from just before the read to just after the write's reply.
func (r *round) section(w int, h *hold, store *Store, seq *int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	call := r.hist.Now()
	read, err := store.Read(ctx, h.token)
	if err != nil { // nothing was written: nothing to record
		r.errs.Add(1)
		return
	}
	held := working(h, r.sc.work)
	check := true
	if held && w == 0 && r.sc.inSection != nil && r.fired.CompareAndSwap(false, true) {
		r.watchTold(h, time.Now())
		check = r.sc.inSection(r, h)
		close(r.faulted)
	}
	if check && h.ctx.Err() != nil {
		r.hist.Add(w, call, r.hist.Now(), Input{Token: h.token}, Output{Read: read, ReadOnly: true})
		return
	}
	*seq++
	v := RegisterValue(w, *seq)
	if r.sc.counter {
		v = read + 1
	}
	var accepted bool
	if r.sc.guarded {
		accepted, err = h.guard(ctx, store.key, v)
	} else {
		accepted, err = store.Write(ctx, h.token, v)
	}
	r.hist.Add(w, call, r.hist.Now(), Input{Token: h.token, Write: v}, Output{Read: read, Accepted: accepted, Unknown: err != nil})
}

// worker takes the lock, runs a section and gives the lock back, until ctx ends.
func (r *round) worker(ctx context.Context, w int, lk locker, store *Store) {
	if r.gates != nil {
		select {
		case <-r.gates[w]:
		case <-ctx.Done():
			return
		}
	}
	var seq int64
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		h, err := lk(actx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				r.errs.Add(1)
				time.Sleep(10 * time.Millisecond)
			}
			continue
		}
		r.section(w, h, store, &seq)
		rctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		_ = h.release(rctx)
		cancel()
	}
}

// roundResult is what one round's history showed.
type roundResult struct {
	ops                []porcupine.Operation
	result             porcupine.CheckResult
	info               porcupine.LinearizationInfo
	annotations        []porcupine.Annotation
	faults, errs       int64
	readOnly, rejected int64
	told               time.Duration // see round.told
	measures           []measure
}

func (sc *scenario) runRound(t *testing.T, e *env, i int) roundResult {
	name := fmt.Sprintf("%s-%s-%s-%d", sc.name, sc.kind, sc.variant(), i)
	setupCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The previous round may have restarted the server: the first call on a Client's broken connection
	// fails (EOF) and the next reconnects.
	for err := setUp(setupCtx, sc.kind, e.clients[0][0], name); err != nil; err = setUp(setupCtx, sc.kind, e.clients[0][0], name) {
		if setupCtx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	fencing := Unfenced
	switch {
	case sc.fenced && sc.writesOnly:
		fencing = FencedWrites
	case sc.fenced:
		fencing = Fenced
	}
	store := NewStore(dataClient(t), "store:"+name, fencing)
	if sc.guarded { // on the lock's server, read plainly, written by GuardedWrite
		store = NewStore(e.admin[0], "store:"+name, Unfenced)
	}
	r := &round{t: t, sc: sc, env: e, name: name, hist: NewHistory(), faulted: make(chan struct{}), store: store}
	r.told.Store(-1)
	if sc.orchestrate != nil {
		r.gates = make([]chan struct{}, sc.workers)
		for w := range r.gates {
			r.gates[w] = make(chan struct{})
		}
		r.failedOver = make(chan struct{})
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range sc.workers {
		lk := newLocker(sc.kind, sc.fenced, sc.replicaAck, e.clients[w], name)
		wg.Go(func() { r.worker(ctx, w, lk, store) })
	}
	switch {
	case sc.orchestrate != nil:
		sc.orchestrate(r)
	case sc.inSection != nil:
		select {
		case <-r.faulted:
		case <-time.After(30 * time.Second):
			t.Errorf("round %d: worker 0 never got to the fault", i)
		}
		time.Sleep(sc.after)
	default:
		done := make(chan struct{})
		faultsStop := make(chan struct{})
		go func() {
			defer close(done)
			sc.background(r, faultsStop)
		}()
		time.Sleep(sc.after)
		close(faultsStop)
		<-done
	}
	stop()
	wg.Wait()
	r.toldWG.Wait()
	res := roundResult{ops: r.hist.Ops(), annotations: r.hist.Annotations(), faults: r.faults.Load(), errs: r.errs.Load(),
		told: time.Duration(r.told.Load()), measures: slices.Clone(r.measures)}
	for _, op := range res.ops {
		if op.Output.(Output).ReadOnly {
			res.readOnly++
		}
	}
	switch {
	case sc.guarded:
		for _, op := range res.ops {
			if o := op.Output.(Output); !o.ReadOnly && !o.Accepted && !o.Unknown {
				res.rejected++
			}
		}
	case sc.fenced:
		_, res.rejected, _ = store.Counts(setupCtx)
	}
	// A guarded write that lands proves the hold current: a refused one is a rejection, as a fenced store's.
	res.result, res.info = Check(sc.fenced || sc.guarded, res.ops, *checkTimeout)
	return res
}

// run runs sc's rounds (its short version, or for -soak) and reports them.
func run(t *testing.T, sc scenario) {
	t.Parallel()
	if sc.servers == 0 {
		sc.servers = 1
	}
	if sc.workers == 0 {
		sc.workers = 3
	}
	if sc.rounds == 0 {
		sc.rounds = 2
	}
	e := newEnv(t, &sc)
	s := &summary{scenario: sc.name, kind: string(sc.kind), variant: sc.variant()}
	var errs int64
	var told []time.Duration
	ranges := map[string][]time.Duration{}
	var names []string
	notTold := 0
	visualized := false
	start := time.Now()
	// A scenario unsafe by design shows its violation in some rounds, not all: on a loaded machine fewer
	// operations fall in the window the fault opens. Until one is caught, it runs up to twice its rounds.
	more := func(i int) bool {
		return sc.expect == mustBeCaught && s.violations == 0 && i < 2*sc.rounds
	}
	for i := 0; i < sc.rounds || more(i) || time.Since(start) < *soak; i++ {
		res := sc.runRound(t, e, i)
		s.rounds++
		s.ops += int64(len(res.ops))
		s.faults += res.faults
		s.readOnly += res.readOnly
		s.rejected += res.rejected
		errs += res.errs
		for _, m := range res.measures {
			if _, ok := ranges[m.name]; !ok {
				names = append(names, m.name)
			}
			ranges[m.name] = append(ranges[m.name], m.d)
		}
		if sc.inSection != nil {
			if res.told >= 0 {
				told = append(told, res.told)
			} else {
				notTold++
			}
		}
		switch res.result {
		case porcupine.Illegal:
			s.violations++
			_, window := Overlaps(res.ops)
			s.window = max(s.window, window)
			if *visualize != "" && !visualized {
				visualized = true
				res.info.AddAnnotations(res.annotations)
				path := filepath.Join(*visualize, fmt.Sprintf("safety-%s-%s-%s.html", sc.name, sc.kind, sc.variant()))
				if err := os.MkdirAll(*visualize, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := porcupine.VisualizePath(Model(sc.fenced), res.info, path); err != nil {
					t.Fatal(err)
				}
				t.Logf("wrote %s", path)
			}
		case porcupine.Unknown:
			s.unknown++
		}
		if len(res.ops) == 0 {
			t.Errorf("round %d recorded no section", i)
		}
	}
	for _, name := range names {
		ds := ranges[name]
		slices.Sort(ds)
		s.note("%s %v to %v", name, ds[0].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
	}
	if len(told) > 0 {
		slices.Sort(told)
		s.note("holder told of the loss %v to %v after the fault began", told[0].Round(time.Millisecond), told[len(told)-1].Round(time.Millisecond))
	}
	if notTold > 0 {
		s.note("holder not told of a loss in %d rounds", notTold)
	}
	if errs > 0 {
		s.note("%d acquisitions or store calls failed", errs)
	}
	s.report(t)
	switch sc.expect {
	case mustBeSafe:
		if s.violations > 0 || s.unknown > 0 {
			t.Errorf("%d of %d histories not linearizable, %d undecided, in a scenario that must be safe", s.violations, s.rounds, s.unknown)
		}
	case mustBeCaught:
		if s.violations == 0 {
			t.Errorf("the checker found no violation in %d rounds of a scenario that is unsafe by design", s.rounds)
		}
	}
}

// pauseHolder stalls the holder's links (its renewals fail) and sleeps past the watchdog timeout between its
// check and its write, as a long GC pause would.
func pauseHolder(r *round, h *hold) bool {
	start := r.hist.Now()
	for _, p := range r.env.proxies[0] {
		p.Stall(faultnet.Upstream, true)
		p.Stall(faultnet.Downstream, true)
	}
	time.Sleep(r.sc.fault)
	for _, p := range r.env.proxies[0] {
		p.Stall(faultnet.Upstream, false)
		p.Stall(faultnet.Downstream, false)
	}
	r.hist.Annotate("fault", start, r.hist.Now(), fmt.Sprintf("holder paused %v", r.sc.fault))
	r.faults.Add(1)
	return false
}

// revokeHolder takes the lock from the holder between its check and its write (TakeOver, on worker 1's
// Client, as an owner of its own), runs a section of its own under that hold, recorded as one more client
// of the history, writing through the guard, and releases the lock. The holder then writes without
// checking again: the guard must refuse its write.
func revokeHolder(r *round, h *hold) bool {
	start := r.hist.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	owner := relock.WithOwner(ctx, "revoker")
	var opts []relock.LockOption
	if r.sc.fenced {
		opts = append(opts, relock.WithFencing())
	}
	c := r.env.clients[1][0]
	l := c.Lock(r.name, opts...)
	if err := l.TakeOver(owner); err != nil {
		r.t.Errorf("TakeOver: %v", err)
		return false
	}
	var token uint64
	if r.sc.fenced {
		token, _ = l.FencingToken(owner)
	}
	call := r.hist.Now()
	read, err := r.store.Read(ctx, token)
	if err == nil {
		v := RegisterValue(r.sc.workers, 1)
		if r.sc.counter {
			v = read + 1
		}
		_, werr := l.GuardedWrite(owner, c.B().Set().Key(r.store.key).Value(strconv.FormatInt(v, 10)).Build())
		r.hist.Add(r.sc.workers, call, r.hist.Now(), Input{Token: token, Write: v}, Output{Read: read, Accepted: werr == nil, Unknown: werr != nil && !errors.Is(werr, relock.ErrNotHeld)})
	}
	time.Sleep(r.sc.fault)
	if err := l.Unlock(owner); err != nil {
		r.t.Errorf("the revoker's Unlock: %v", err)
	}
	r.hist.Annotate("fault", start, r.hist.Now(), "lock taken over")
	r.faults.Add(1)
	return false
}

// partitionHolder partitions the holder from the lock's servers while it keeps working (checking its hold)
// for the fault's length, then heals the partition.
func partitionHolder(r *round, h *hold) bool {
	start := r.hist.Now()
	for _, p := range r.env.proxies[0] {
		p.Partition(true)
	}
	working(h, r.sc.fault)
	for _, p := range r.env.proxies[0] {
		p.Partition(false)
	}
	r.hist.Annotate("fault", start, r.hist.Now(), "holder partitioned")
	r.faults.Add(1)
	return true
}

// restartServer kills and restarts the lock's server while the holder is in its section, which then keeps
// working (checking its hold) for the fault's length.
func restartServer(r *round, h *hold) bool {
	unsafe := r.sc.expect == mustBeCaught
	var before int64
	if unsafe {
		before, _ = r.store.Read(context.Background(), 0)
	}
	start := r.hist.Now()
	began := time.Now()
	if err := r.env.servers[0].Restart(); err != nil {
		r.t.Error(err)
	}
	r.measure("restart took", time.Since(began))
	r.faults.Add(1)
	r.hist.Annotate("fault", start, r.hist.Now(), "lock server restarted")
	working(h, r.sc.fault)
	if !unsafe {
		return true
	}
	return r.staleWrite(before)
}

// staleWrite is the end of the holder's section in a scenario unsafe by design, which shows the checker
// the unsafety it must catch: the holder writes without checking its hold, as most code does, once
// another worker has written over before, the value the holder read (up to 3 s). It returns false: do
// not check. A holder that checks writes only while no renewal has told it of the loss yet, and another
// worker gets in only once its Client has found the lock free again: on a loaded machine, where the fault
// and the rest take longer, either could hide the unsafety in every round.
func (r *round) staleWrite(before int64) bool {
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if v, err := r.store.Read(context.Background(), 0); err == nil && v != before {
			break
		}
	}
	return false
}

// latencySpikes sets every link's latency to a random value up to the fault's length, every 100 to 300 ms.
func latencySpikes(r *round, stop <-chan struct{}) {
	set := func(d func() time.Duration) {
		for _, ps := range r.env.proxies {
			for _, p := range ps {
				p.SetLatency(d())
			}
		}
	}
	defer set(func() time.Duration { return 0 })
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(100+rand.IntN(200)) * time.Millisecond):
			set(func() time.Duration { return time.Duration(rand.Int64N(int64(r.sc.fault))) })
			r.faults.Add(1)
		}
	}
}

// pauseServer stops the lock's server (SIGSTOP) for the fault's length, every 300 to 600 ms.
func pauseServer(r *round, stop <-chan struct{}) {
	srv := r.env.servers[0]
	everyFault(r, stop, "lock server paused", func() error {
		if err := srv.Pause(); err != nil {
			return err
		}
		time.Sleep(r.sc.fault)
		return srv.Resume()
	})
}

// clientPause pauses every client of the lock's server (CLIENT PAUSE ... ALL) for the fault's length,
// every 300 to 600 ms.
func clientPause(r *round, stop <-chan struct{}) {
	admin := r.env.admin[0]
	everyFault(r, stop, "CLIENT PAUSE", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := admin.Do(ctx, admin.B().ClientPause().Timeout(r.sc.fault.Milliseconds()).All().Build()).Error()
		cancel()
		if err == nil {
			time.Sleep(r.sc.fault)
		}
		return err
	})
}

// everyFault runs fault, which lasts until the fault is over, every 300 to 600 ms until stop, annotating
// the history with label and counting each; an error fails the round and ends the loop.
func everyFault(r *round, stop <-chan struct{}, label string, fault func() error) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(300+rand.IntN(300)) * time.Millisecond):
		}
		start := r.hist.Now()
		if err := fault(); err != nil {
			r.t.Error(err)
			return
		}
		r.hist.Annotate("fault", start, r.hist.Now(), label)
		r.faults.Add(1)
	}
}
