package explore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/faultnet"
	"github.com/relock-go/relock/internal/redistest"
)

// plan is a schedule drawn from a seed: who acts, for how long, with which timings, and which faults hit
// when. The same seed gives the same plan; the interleaving on real servers is the machine's.
type plan struct {
	seed      uint64
	clients   int // Clients with actors
	perClient int // actors (goroutines) on each
	observers int // Clients that only observe (elections)
	watchdog  time.Duration
	length    time.Duration // how long the actors act
	aof       bool          // the servers keep an AOF (appendfsync always)
	permits   int           // a semaphore's permits, a latch's count
	maxHold   time.Duration
	maxThink  time.Duration
	maxWait   time.Duration // an acquisition's ctx: up to this
	// sparse plans act seldom and wait long: releases come one at a time, and a waiter asleep while what
	// it waits for is free stays so long enough to be seen (busy plans hand over at once, hiding it).
	sparse bool
	// tick, when set, makes a burst plan: see sched.burstHolder. Its releases are spread over spread.
	tick, spread time.Duration
	// latency is each Client's link's delay, for the whole schedule: it widens every race's window.
	latency []time.Duration
	jitter  []time.Duration // and a random part of it, drawn for each read: replies and messages overtake
	// replyLag delays each Client's replies, not its pub/sub messages: a release's message reaches the
	// Client before the reply of a command that ran before the release (a waiter's attempt).
	replyLag []time.Duration
	faults   []step
	ops      ops // what the actors do besides acquiring and releasing (ops_test.go)
}

// step is one fault of a plan.
type step struct {
	at, dur time.Duration
	what    string
	target  int // a Client (proxy) or a server, as the fault says
}

func (p *plan) String() string {
	s := fmt.Sprintf("seed %d: %d clients × %d actors, %d observers, watchdog %v, %v, aof %v, permits %d, hold ≤ %v, think ≤ %v, wait ≤ %v, sparse %v, tick %v (spread %v), latency %v, jitter %v, reply lag %v",
		p.seed, p.clients, p.perClient, p.observers, p.watchdog, p.length, p.aof, p.permits, p.maxHold, p.maxThink, p.maxWait, p.sparse, p.tick, p.spread, p.latency, p.jitter, p.replyLag)
	s += p.ops.String()
	for _, f := range p.faults {
		s += fmt.Sprintf("; %s(%d) at %v for %v", f.what, f.target, f.at, f.dur)
	}
	return s
}

// The faults a plan draws from. Each kind allows a subset (kind.faults).
const (
	fLatency     = "latency"       // a Client's link delays everything by a few ms
	fCut         = "cut"           // a Client's connections reset
	fReplyLost   = "reply-lost"    // a Client's replies held, then its connections reset: commands ran, replies lost
	fDown        = "refused"       // a Client's dials refused (ECONNREFUSED), its connections reset
	fPartition   = "partition"     // a Client's dials accepted and closed at once, its connections reset
	fIsolated    = "isolated"      // a Client's link stalled both ways past the watchdog timeout
	fRedisPause  = "redis-sigstop" // a server stopped (SIGSTOP) and continued
	fClientPause = "client-pause"  // CLIENT PAUSE ALL on a server
	fRestartAOF  = "restart-aof"   // a server killed and restarted on its AOF (appendfsync always)
	fRestartNone = "restart-empty" // a server killed and restarted without persistence: every key lost
	fPubSubKill  = "pubsub-kill"   // CLIENT KILL TYPE pubsub: subscriptions dropped, messages in flight lost
	fSpurious    = "spurious"      // extra release messages published on the kind's channel (duplicated in time)
	fStarve      = "starved"       // GOMAXPROCS=1 with spinners: every watchdog of the process starved
	// The faults added with the operations beyond acquiring and releasing (kind.extra; drawn apart, see
	// newPlan).
	fBusy      = "busy"         // a script runs for a while: Redis replies BUSY to everything else
	fLoading   = "loading"      // DEBUG RELOAD of a dataset that loads slowly: Redis replies LOADING
	fWatchKill = "watch-kill"   // CLIENT KILL of the connections with tracking on (the watch of holds')
	fForce     = "force-unlock" // ForceUnlock by another Client: the holder loses its hold, waiters are woken
	fDelete    = "deleted"      // the lock's key deleted behind its holder's back (DEL): nothing announced
	fClose     = "close"        // a Client closed while its actors wait, hold and hand over
)

// newPlan draws a plan for k from seed.
func newPlan(k *kind, seed uint64) *plan {
	rng := rand.New(rand.NewPCG(seed, 0x5ca1ab1e))
	p := &plan{
		seed:      seed,
		clients:   2 + rng.IntN(2),
		perClient: 1 + rng.IntN(3),
		observers: k.observers,
		watchdog:  time.Duration(1000+rng.IntN(5)*500) * time.Millisecond,
		length:    time.Duration(800+rng.IntN(1400)) * time.Millisecond,
		permits:   1 + rng.IntN(3),
		maxHold:   time.Duration(5+rng.IntN(150)) * time.Millisecond,
		maxThink:  time.Duration(1+rng.IntN(60)) * time.Millisecond,
	}
	p.aof = k.needsAOF || rng.IntN(2) == 0
	p.maxWait = 1500 * time.Millisecond
	switch rng.IntN(3) {
	case 0:
		p.sparse = true
	case 1:
		p.tick = time.Duration(900+rng.IntN(400)) * time.Millisecond
		p.permits = 2 + rng.IntN(2)
		p.maxWait = 3 * time.Second
		p.length = 3*p.tick + time.Duration(rng.IntN(int(p.tick)))
	}
	for range p.clients + p.observers {
		var d time.Duration
		if rng.IntN(2) == 0 {
			d = time.Duration(200+rng.IntN(4000)) * time.Microsecond
		}
		p.latency = append(p.latency, d)
		var j time.Duration
		if rng.IntN(2) == 0 {
			j = time.Duration(500+rng.IntN(5000)) * time.Microsecond
		}
		p.jitter = append(p.jitter, j)
	}
	if p.sparse {
		p.maxThink = time.Duration(100+rng.IntN(500)) * time.Millisecond
		p.maxHold = time.Duration(1+rng.IntN(60)) * time.Millisecond
		p.maxWait = 3 * time.Second
		p.length += time.Second
	}
	n := rng.IntN(5)
	for range n {
		what := k.faults[rng.IntN(len(k.faults))]
		if what == fRestartNone || what == fRestartAOF { // the servers' persistence decides which
			what = fRestartNone
			if p.aof {
				what = fRestartAOF
			}
		}
		f := step{what: what, at: time.Duration(float64(p.length) * (0.05 + 0.7*rng.Float64())),
			dur: time.Duration(30+rng.IntN(500)) * time.Millisecond}
		switch what {
		case fLatency, fCut, fReplyLost, fDown, fPartition, fIsolated:
			f.target = rng.IntN(p.clients + p.observers)
		default:
			f.target = rng.IntN(k.servers)
		}
		switch what {
		case fIsolated, fStarve: // past the watchdog timeout, or not
			f.dur = time.Duration(float64(p.watchdog) * (0.5 + rng.Float64()))
		case fDown, fPartition: // Redis out of reach for as long as a restart takes
			f.dur = time.Duration(200+rng.IntN(1800)) * time.Millisecond
		}
		p.faults = append(p.faults, f)
	}
	// Drawn from a stream of its own, so that the plans of the seeds drawn before it stay the same.
	lag := rand.New(rand.NewPCG(seed, 0x1a9))
	for i := range p.clients + p.observers {
		odds := 3
		if i == 0 && p.tick > 0 {
			odds = 2 // a burst's waiters: its releases' messages may overtake their attempts' replies
		}
		var d time.Duration
		if lag.IntN(odds) == 0 {
			d = time.Duration(1000+lag.IntN(7000)) * time.Microsecond
		}
		p.replyLag = append(p.replyLag, d)
	}
	// A burst's releases come a few ms apart, or as far apart as a waiter's round trip through its link:
	// then a release may run while the attempt a release before woke is on its way (see sched.holdTime).
	p.spread = 8 * time.Millisecond
	if lag.IntN(2) == 0 {
		p.spread = time.Duration(10+lag.IntN(30)) * time.Millisecond
	}
	if p.tick > 0 && (k.name == "Semaphore" || k.name == "PermitSemaphore") && lag.IntN(2) == 0 {
		// As many permits as the burst's waiters: each is for one of them, and one that sleeps while its
		// permit is free is seen (with more permits than waiters, any waiter woken gets one).
		p.permits = p.perClient
	}
	drawOps(k, p, rand.New(rand.NewPCG(seed, 0x0b5)))
	if *withoutFlag != "" { // faults, or operations, left out (the rest of the plan stays the seed's)
		skip := strings.Split(*withoutFlag, ",")
		p.faults = slices.DeleteFunc(p.faults, func(f step) bool { return slices.Contains(skip, f.what) })
		for _, op := range skip {
			switch op {
			case "max-hold":
				p.ops.maxHold = 0
			case "revoke":
				p.ops.revokers = 0
			case "shared":
				p.ops.shared = false
			}
		}
	}
	return p
}

// env is a schedule's servers, and each Client's proxies and relock Clients to them.
type env struct {
	servers  []*redistest.Server
	proxies  [][]*faultnet.Proxy    // [client][server]
	clients  [][]*relock.Client     // [client][server]
	admin    []rueidis.Client       // direct to each server
	serverMu []sync.Mutex           // one fault at a time on each server (two restarts would race for its port)
	clientMu []sync.Mutex           // one fault at a time on each Client's link
	forcers  map[int]*relock.Client // the harness's Clients for ForceUnlock, by server
}

func newEnv(k *kind, p *plan) (*env, error) {
	e := &env{}
	var args []string
	if p.aof {
		args = []string{"--appendonly", "yes", "--appendfsync", "always"}
	}
	e.serverMu = make([]sync.Mutex, k.servers)
	e.clientMu = make([]sync.Mutex, p.clients+p.observers)
	for range k.servers {
		srv, err := redistest.StartServer(args...)
		if err != nil {
			e.close()
			return nil, err
		}
		e.servers = append(e.servers, srv)
		rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true, DisableRetry: true})
		if err != nil {
			e.close()
			return nil, err
		}
		e.admin = append(e.admin, rdb)
	}
	for range p.clients + p.observers {
		var ps []*faultnet.Proxy
		var cs []*relock.Client
		for _, srv := range e.servers {
			px, err := faultnet.Start(srv.Addr())
			if err != nil {
				e.close()
				return nil, err
			}
			px.SetLatency(p.latency[len(e.proxies)])
			px.SetJitter(p.jitter[len(e.proxies)])
			px.SetReplyLag(p.replyLag[len(e.proxies)])
			ps = append(ps, px)
			c, err := relock.New([]string{px.Addr}, &relock.Options{WatchdogTimeout: p.watchdog})
			if err != nil {
				e.close()
				return nil, err
			}
			cs = append(cs, c)
		}
		e.proxies = append(e.proxies, ps)
		e.clients = append(e.clients, cs)
	}
	for _, f := range p.faults {
		if f.what == fForce && e.forcers[f.target] == nil { // the harness's Client for ForceUnlock, straight to the server
			c, err := relock.New([]string{e.servers[f.target].Addr()}, &relock.Options{WatchdogTimeout: p.watchdog})
			if err != nil {
				e.close()
				return nil, err
			}
			if e.forcers == nil {
				e.forcers = make(map[int]*relock.Client)
			}
			e.forcers[f.target] = c
		}
	}
	return e, nil
}

// closeClients closes every relock Client (giving up what they hold), bounded by DefaultCloseTimeout.
func (e *env) closeClients() {
	var wg sync.WaitGroup
	for _, cs := range e.clients {
		for _, c := range cs {
			wg.Go(func() { c.Close() })
		}
	}
	wg.Wait()
	e.clients = nil
}

func (e *env) close() {
	e.closeClients()
	for _, c := range e.forcers {
		c.Close()
	}
	for _, ps := range e.proxies {
		for _, p := range ps {
			p.Close()
		}
	}
	for _, a := range e.admin {
		a.Close()
	}
	for _, s := range e.servers {
		s.Stop()
	}
}

// do runs an admin command on server i, bounded, trying again on a connection a restart broke.
func (e *env) do(i int, words ...string) rueidis.RedisResult {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		r := e.admin[i].Do(ctx, e.admin[i].B().Arbitrary(words...).Build())
		if _, isReply := rueidis.IsRedisErr(r.Error()); r.Error() == nil || isReply || ctx.Err() != nil {
			return r
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// starving is the process's starvation fault: one at a time, since it starves every schedule running.
var starving sync.Mutex

// global records the faults that hit the whole process (starvation), in wall time, for every schedule.
var global struct {
	sync.Mutex
	windows []struct{ start, end time.Time }
}

// inject runs p's faults on e, recording each in h, until they are all over (or stop is closed, which
// ends the one under way early).
func inject(t *testing.T, s *sched, stop <-chan struct{}) {
	k, p, e, h, name := s.k, s.p, s.e, s.h, s.name
	var wg sync.WaitGroup
	for _, f := range p.faults {
		wg.Go(func() {
			select {
			case <-time.After(f.at):
			case <-stop:
				return
			}
			wait := func(d time.Duration) {
				select {
				case <-time.After(d):
				case <-stop:
				}
			}
			switch strings.SplitN(f.what, "+", 2)[0] {
			case fRedisPause, fClientPause, fRestartAOF, fRestartNone, fBusy, fLoading:
				e.serverMu[f.target].Lock()
				defer e.serverMu[f.target].Unlock()
			case fLatency, fReplyLost, fDown, fPartition, fIsolated: // one at a time on a link: one's end must not undo another
				e.clientMu[f.target].Lock()
				defer e.clientMu[f.target].Unlock()
			}
			start := h.now()
			w := window{what: f.what, start: start, target: f.target}
			switch f.what {
			case fLatency:
				for _, px := range e.proxies[f.target] {
					px.SetLatency(time.Millisecond + f.dur/50)
				}
				wait(f.dur)
				for _, px := range e.proxies[f.target] {
					px.SetLatency(p.latency[f.target])
				}
			case fCut:
				for _, px := range e.proxies[f.target] {
					px.Cut()
				}
			case fReplyLost:
				for _, px := range e.proxies[f.target] {
					px.Stall(faultnet.Downstream, true)
				}
				wait(min(f.dur, 200*time.Millisecond))
				for _, px := range e.proxies[f.target] {
					px.Cut()
					px.Stall(faultnet.Downstream, false)
				}
			case fDown:
				for _, px := range e.proxies[f.target] {
					px.Down()
				}
				wait(f.dur)
				for _, px := range e.proxies[f.target] {
					if err := px.Up(); err != nil {
						h.fail("harness: proxy Up: %v", err)
					}
				}
			case fPartition:
				for _, px := range e.proxies[f.target] {
					px.Partition(true)
				}
				wait(f.dur)
				for _, px := range e.proxies[f.target] {
					px.Partition(false)
				}
			case fIsolated:
				for _, px := range e.proxies[f.target] {
					px.Stall(faultnet.Upstream, true)
					px.Stall(faultnet.Downstream, true)
				}
				wait(f.dur)
				for _, px := range e.proxies[f.target] {
					px.Stall(faultnet.Upstream, false)
					px.Stall(faultnet.Downstream, false)
				}
			case fRedisPause:
				e.servers[f.target].Pause()
				wait(f.dur)
				e.servers[f.target].Resume()
			case fClientPause:
				e.do(f.target, "CLIENT", "PAUSE", strconv.Itoa(int(f.dur/time.Millisecond)), "ALL")
				wait(f.dur)
			case fRestartAOF, fRestartNone:
				w.excuses = f.what == fRestartNone
				if err := e.servers[f.target].Restart(); err != nil {
					h.fail("harness: restart: %v", err)
				}
			case fPubSubKill:
				e.do(f.target, "CLIENT", "KILL", "TYPE", "pubsub")
			case fSpurious:
				for range 3 {
					for _, m := range k.spurious(name) {
						e.do(f.target, "PUBLISH", m[0], m[1])
					}
					wait(f.dur / 3)
				}
			case fStarve:
				w.excuses = true
				starving.Lock()
				w.start = h.now()
				wall := time.Now()
				prev := runtime.GOMAXPROCS(1)
				done := make(chan struct{})
				var spin sync.WaitGroup
				for range 2 {
					spin.Go(func() {
						for {
							select {
							case <-done:
								return
							default:
							}
							for i := 0; i < 1e5; i++ {
							}
						}
					})
				}
				wait(f.dur)
				close(done)
				spin.Wait()
				runtime.GOMAXPROCS(prev)
				global.Lock()
				global.windows = append(global.windows, struct{ start, end time.Time }{wall, time.Now()})
				global.Unlock()
				starving.Unlock()
			default:
				s.extraFault(f, &w, wait)
			}
			w.end = h.now()
			h.fault(w)
		})
	}
	wg.Wait()
}

// addGlobal copies into h the process-wide faults that overlapped it.
func addGlobal(h *history) {
	global.Lock()
	defer global.Unlock()
	for _, g := range global.windows {
		s, e := g.start.Sub(h.base), g.end.Sub(h.base)
		if e < 0 || s > h.end {
			continue
		}
		if !slices.ContainsFunc(h.faults, func(w window) bool { return w.what == fStarve && w.start == s }) {
			h.faults = append(h.faults, window{what: fStarve + " (another schedule's)", start: s, end: e, excuses: true})
		}
	}
}
