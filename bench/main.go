// Command bench measures relock against its peers (rueidislock, go-redsync, bsm/redislock) and against
// the floors (PINGs, relock's scripts run raw), side by side in one run, on redis-server processes it
// starts itself, and writes its report, benchmarks.md and benchmarks.svg, beside itself (docs/performance.md
// summarizes it for users).
//
//	make bench                       # from the repository root: cd bench && go run . -quick
//	cd bench && go run . [-quick | -smoke] [-only a,b] [-out DIR]
//
// Its scenarios (-only takes their names): uncontended, parallel and handoff (every library on one server),
// watchdog (renewal cost), redlock (relock's RedLock against redsync on 5 servers), relockOnly (FairLock and
// ReadWriteLock), latency (uncontended, parallel and a 2-owner handoff again, every contender through a
// loopback proxy, internal/faultnet, adding 0.25 ms each way), and contention (RLock and FairLock, one lock,
// 4 goroutines on each of 2, 8, 32 and 64 Clients: handoff, script runs and Redis CPU per acquisition), and
// hot (one lock taken over and over by 64 goroutines of one Client, then by 16 on each of 4 Clients).
// -quick runs each scenario for a quarter of its duration; -smoke for 1/40, a check for CI that the program
// still runs, its figures meaningless.
//
// Every figure is a ratio against a floor or a peer measured in the same run: absolute times on a shared
// machine are noisy.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/faultnet"
	"github.com/relock-go/relock/internal/redistest"
)

var (
	quick = flag.Bool("quick", false, "run each scenario for a quarter of its duration")
	smoke = flag.Bool("smoke", false, "run each scenario for 1/40 of its duration and the watchdog for one period: a check that the program still runs (for CI), its figures meaningless")
	out   = flag.String("out", ".", "where to write benchmarks.md and benchmarks.svg")
	only  = flag.String("only", "", "run only the scenarios listed, comma-separated (uncontended, parallel, handoff, watchdog, redlock, relockOnly, latency: the first three through a proxy adding 0.25 ms each way, contention: one lock, 4 goroutines on each of 2, 8, 32 and 64 Clients); the report then lacks the others")
)

// want reports whether scenario runs (see -only).
func want(scenario string) bool {
	return *only == "" || slices.Contains(strings.Split(*only, ","), scenario)
}

// dur scales a scenario's duration: quick mode runs each for a quarter, smoke mode for 1/40.
func dur(full time.Duration) time.Duration {
	switch {
	case *smoke:
		return full / 40
	case *quick:
		return full / 4
	}
	return full
}

func main() {
	flag.Parse()
	log.SetFlags(0)
	srv, err := redistest.StartServer()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()
	r := &report{started: time.Now()}
	r.machine()

	for _, sc := range []struct {
		name string
		run  func()
	}{
		{"uncontended", func() { uncontended(r, srv.Addr(), "1. Uncontended Lock+Unlock, one goroutine", 0) }},
		{"parallel", func() { parallel(r, srv.Addr(), "2. 64 goroutines on 64 keys", 0) }},
		{"handoff", func() { handoff(r, srv.Addr(), "3. Handoff", 0) }},
		{"watchdog", func() { watchdog(r) }},
		{"redlock", func() { redlockVsRedsync(r) }},
		{"relockOnly", func() { relockOnly(r, srv) }},
		{"latency", func() { latency(r, srv) }},
		{"contention", func() { contention(r, srv) }},
		{"hot", func() { hot(r, srv.Addr()) }},
	} {
		if want(sc.name) {
			sc.run()
		}
	}

	if err := r.write(*out); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("wrote %s and %s\n", filepath.Join(*out, "benchmarks.md"), filepath.Join(*out, "benchmarks.svg"))
}

// peers makes every library on one server (redsync on that one server), relock first, each peer in its
// defaults and in its best documented configuration (redsync: its defaults are that), all bounded.
func peers(addr string) []locker {
	rl, err := newRelock(addr, nil)
	if err != nil {
		log.Fatal(err)
	}
	rue, err := newRueidisLock(addr, false)
	if err != nil {
		log.Fatal(err)
	}
	rueBest, err := newRueidisLock(addr, true)
	if err != nil {
		log.Fatal(err)
	}
	var ls []locker
	for _, l := range []locker{rl, rue, rueBest, newRedsync(addr), newRedislock(addr, false), newRedislock(addr, true)} {
		ls = append(ls, &bounded{locker: l})
	}
	return ls
}

// latencies measures fn n times (after a warm-up) and returns the sorted durations.
func latencies(d time.Duration, fn func() error) []time.Duration {
	for range 50 {
		if err := fn(); err != nil && !tolerate(err) {
			log.Fatal(err)
		}
	}
	var ds []time.Duration
	for end := time.Now().Add(d); time.Now().Before(end); {
		t0 := time.Now()
		if err := fn(); err != nil {
			if tolerate(err) {
				continue // counted as hung, not as a latency
			}
			log.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
	}
	slices.Sort(ds)
	return ds
}

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[min(int(float64(len(ds))*p), len(ds)-1)]
}

func mean(ds []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(max(len(ds), 1))
}

// allocsPerOp runs fn n times and returns the heap allocations per call (every goroutine's, so background
// work counts too).
func allocsPerOp(n int, fn func() error) float64 {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	for range n {
		if err := fn(); err != nil && !tolerate(err) {
			log.Fatal(err)
		}
	}
	runtime.ReadMemStats(&b)
	return float64(b.Mallocs-a.Mallocs) / float64(n)
}

// onClients is ls with relock on go-redis and on valkey-go after it, bounded as the others.
func onClients(ls []locker, addr string) []locker {
	return append(ls, &bounded{locker: newRelockOnGoRedis(addr)}, &bounded{locker: newRelockOnValkey(addr)})
}

// contenders returns every peer's lock and relock on each client, a plain client, and relock's raw scripts
// on it, all on addr (the server, or a proxy in front of it), and the function that closes them.
func contenders(addr string) ([]locker, rueidis.Client, *rawScripts, func()) {
	ls := onClients(peers(addr), addr)
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		log.Fatal(err)
	}
	return ls, rdb, newRawScripts(rdb), func() {
		closeAll(ls)
		rdb.Close()
	}
}

// uncontended: one goroutine, Lock+Unlock, interleaved with two PINGs and the raw scripts, every one on addr,
// reported under title. lat is the latency a proxy at addr adds each way (0: addr is the server), which
// sets the note and the targets.
func uncontended(r *report, addr, title string, lat time.Duration) {
	ctx := context.Background()
	ls, rdb, raw, done := contenders(addr)
	defer done()
	// The floors run bounded like the libraries, so that the ratios compare like with like.
	piped, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, AlwaysPipelining: true})
	if err != nil {
		log.Fatal(err)
	}
	defer piped.Close()
	floors := []locker{&bounded{locker: pingLocker{rdb}}, &bounded{locker: minimalLocker{newMinimalScripts(rdb)}},
		&bounded{locker: pipedMinimal{minimalLocker{newMinimalScripts(piped)}}}, &bounded{locker: rawLocker{raw}}}
	ops := map[string]func() error{}
	for _, l := range append(floors, ls...) {
		ops[l.name()] = func() error {
			unlock, err := l.lock(ctx, "bench:uncontended:"+l.name())
			if err != nil {
				return err
			}
			return unlock()
		}
	}
	// Interleave: every round runs each operation once, so noise hits them alike.
	names := []string{"two PINGs", minimalName, pipedMinimalName, "raw scripts"}
	for _, l := range ls {
		names = append(names, l.name())
	}
	samples := interleaved(dur(20*time.Second), names, ops)
	spent := costs(rdb, dur(8*time.Second), names, ops)
	note := "Each round runs every operation once, interleaved. Each peer in its defaults and in its best documented configuration (\"best\"). Every call, the floors' and relock's too, runs bounded (see Bounds above): a PING or a raw script counts as a lock or an unlock call; hung: calls that did not complete within " + bound.String() + " (left out of the latencies). Target: relock ≤ 1.1 × the raw scripts, and faster than every peer in every configuration."
	if lat > 0 {
		note = proxyNote(lat) + " Lock+Unlock is two round trips, so no contender can take less than " + msText(4*lat) + "; the two PINGs show what the proxy itself costs. " +
			"Each round runs every operation once, interleaved. Each peer in its defaults and in its best documented configuration (\"best\"). Every call runs bounded as above; hung: calls that did not complete within " + bound.String() + " (left out of the latencies). " +
			"Target: relock ≤ 1.1 × the raw scripts: whatever relock does besides its two scripts must not add round trips."
	}
	note += " Client CPU, Redis CPU and script time are per Lock+Unlock, measured apart in blocks of 200 calls of one contender, the contenders in turn: the client's is this process's CPU (getrusage), so it counts what a library makes the Go runtime do (wake-ups, timers, syscalls), and the bounded call's goroutine, which every contender pays alike; the script time is Redis's EVAL and EVALSHA time (a peer that sends plain commands shows less there, its cost being in Redis CPU). " +
		"The minimal pair is the least a reentrant lock on a hash runs (acquire: EXISTS or HEXISTS, HINCRBY, PEXPIRE; release: HEXISTS, HINCRBY, DEL, PUBLISH), through a rueidis client in its defaults, which writes and reads a call alone on its connection on the calling goroutine; relock's targets: ≤ 1.15 × its p50, ≤ 1.3 × its client CPU, ≤ 2 × its script time. \"" + pipedMinimalName + "\" is the same pair through a rueidis client that always pipelines (ClientOption.AlwaysPipelining, as relock.New's client does: every call goes through the connection's writer and reader goroutines, so that a call's deadline never breaks a connection that other calls share): relock against it is relock's own cost; it against the minimal pair is that choice's."
	sec := section{title: title, note: note,
		head: []string{"", "p50", "p99", "mean", "allocs/op", "client CPU", "Redis CPU", "script time", "× minimal pair (p50)", "× raw scripts", "hung"}}
	rawMean := float64(mean(samples["raw scripts"]))
	minimalP50 := float64(pct(samples[minimalName], .5))
	hung := map[string]string{}
	for _, l := range ls {
		hung[l.name()] = hungCount(l)
	}
	for _, n := range names {
		ds := samples[n]
		c := spent[n]
		sec.rows = append(sec.rows, []string{n, us(pct(ds, .5)), us(pct(ds, .99)), us(mean(ds)),
			fmt.Sprintf("%.0f", allocsPerOp(200, ops[n])), us(c.client), us(c.redis), us(c.script),
			fmt.Sprintf("%.2f", float64(pct(ds, .5))/minimalP50), fmt.Sprintf("%.2f", float64(mean(ds))/rawMean), hung[n]})
		if lat == 0 {
			r.chart1 = append(r.chart1, bar{n, float64(mean(ds).Microseconds())})
		}
	}
	relockMean := float64(mean(samples["relock"]))
	bestPeer, bestName := 0.0, ""
	for _, l := range ls[1:] {
		if isRelock(l.name()) {
			continue
		}
		if m := float64(mean(samples[l.name()])); bestPeer == 0 || m < bestPeer {
			bestPeer, bestName = m, l.name()
		}
	}
	relockP50, m, rc := float64(pct(samples["relock"], .5)), spent[minimalName], spent["relock"]
	pm, pipedP50 := spent[pipedMinimalName], float64(pct(samples[pipedMinimalName], .5))
	sec.verdicts = append(sec.verdicts,
		fmt.Sprintf("**against the same pair always pipelining**: relock's p50 = %.2f ×, client CPU = %.2f ×, script time = %.2f ×",
			relockP50/pipedP50, float64(rc.client)/float64(pm.client), float64(rc.script)/float64(pm.script)),
		verdict(relockP50 <= 1.15*minimalP50, "relock's p50 = %.2f × the minimal pair's (target ≤ 1.15)", relockP50/minimalP50),
		verdict(rc.client <= m.client*13/10, "relock's client CPU = %.2f × the minimal pair's (target ≤ 1.3)", float64(rc.client)/float64(m.client)),
		verdict(rc.script <= 2*m.script, "relock's script time = %.2f × the minimal pair's (target ≤ 2)", float64(rc.script)/float64(m.script)))
	for _, n := range []string{goRedisName, valkeyName} {
		p, c := float64(pct(samples[n], .5)), spent[n]
		sec.verdicts = append(sec.verdicts, verdict(p <= 1.15*relockP50,
			"%s: p50 = %.2f × relock on rueidis (target ≤ 1.15), client CPU = %.2f ×", n, p/relockP50, float64(c.client)/float64(rc.client)))
	}
	if lat == 0 {
		bestP50, bestP50Name := 0.0, ""
		for _, l := range ls[1:] {
			if isRelock(l.name()) {
				continue
			}
			if p := float64(pct(samples[l.name()], .5)); bestP50 == 0 || p < bestP50 {
				bestP50, bestP50Name = p, l.name()
			}
		}
		sec.verdicts = append(sec.verdicts,
			verdict(relockMean < bestPeer, "relock's mean = %.2f × the fastest peer's in any configuration, %s (target < 1)", relockMean/bestPeer, bestName),
			verdict(relockP50 <= bestP50, "relock's p50 = %.2f × the fastest peer's in any configuration, %s (target ≤ 1)", relockP50/bestP50, bestP50Name))
	}
	r.add(sec)
}

// parallel: 64 goroutines on distinct keys, lock/unlock pairs per second, every contender on addr, reported
// under title; lat as for uncontended.
func parallel(r *report, addr, title string, lat time.Duration) {
	ctx := context.Background()
	ls, rdb, raw, done := contenders(addr)
	defer done()
	run := func(op func(g int) error) float64 {
		var n atomic.Int64
		end := time.Now().Add(dur(8 * time.Second))
		var wg sync.WaitGroup
		for g := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) {
					if err := op(g); err != nil {
						if tolerate(err) {
							continue // counted as hung, not as a pair
						}
						log.Fatal(err)
					}
					n.Add(1)
				}
			}()
		}
		wg.Wait()
		return float64(n.Load()) / dur(8*time.Second).Seconds()
	}
	sec := section{title: title, note: "Lock+Unlock pairs per second, each peer in its defaults and in its best documented configuration (\"best\"); hung: calls that did not complete within " + bound.String() + " (not counted as pairs). Target: relock ≥ 2 × the best peer in any configuration.",
		head: []string{"", "pairs/s", "× best peer", "hung"}}
	if lat > 0 {
		sec.note = proxyNote(lat) + " Each goroutine's Lock+Unlock takes two round trips, at least " + msText(4*lat) + ": what counts is how many a library keeps in flight at once (pipelining, or enough connections). " +
			"Lock+Unlock pairs per second, each peer in its defaults and in its best documented configuration (\"best\"); hung: calls that did not complete within " + bound.String() + " (not counted as pairs). " +
			"Target: relock ≥ 0.95 × the raw scripts, and ahead of every peer in its best configuration."
		sec.head = []string{"", "pairs/s", "× raw scripts", "× best peer", "hung"}
	}
	var names []string
	rates := map[string]float64{}
	minimal := &bounded{locker: minimalLocker{newMinimalScripts(rdb)}}
	for _, l := range append([]locker{minimal, &bounded{locker: rawLocker{raw}}}, ls...) {
		rates[l.name()] = run(func(g int) error {
			unlock, err := l.lock(ctx, fmt.Sprintf("bench:parallel:%s:%d", l.name(), g))
			if err != nil {
				return err
			}
			return unlock()
		})
		names = append(names, l.name())
	}
	best, bestName := 0.0, ""
	for _, l := range ls[1:] {
		if isRelock(l.name()) {
			continue
		}
		if rates[l.name()] > best {
			best, bestName = rates[l.name()], l.name()
		}
	}
	hung := map[string]string{}
	for _, l := range ls {
		hung[l.name()] = hungCount(l)
	}
	for _, n := range names {
		if lat > 0 {
			sec.rows = append(sec.rows, []string{n, fmt.Sprintf("%.0f", rates[n]), fmt.Sprintf("%.2f", rates[n]/rates["raw scripts"]), fmt.Sprintf("%.2f", rates[n]/best), hung[n]})
			continue
		}
		sec.rows = append(sec.rows, []string{n, fmt.Sprintf("%.0f", rates[n]), fmt.Sprintf("%.2f", rates[n]/best), hung[n]})
		r.chart2 = append(r.chart2, bar{n, rates[n]})
	}
	for _, n := range []string{goRedisName, valkeyName} {
		sec.verdicts = append(sec.verdicts, verdict(rates[n]*1.15 >= rates["relock"],
			"%s = %.2f × relock on rueidis (target ≥ 1/1.15 = 0.87)", n, rates[n]/rates["relock"]))
	}
	rue := max(rates["rueidislock"], rates["rueidislock best"])
	sec.verdicts = append(sec.verdicts,
		verdict(rates["relock"] >= 0.8*rates[minimalName], "relock = %.2f × the minimal pair (target ≥ 0.8)", rates["relock"]/rates[minimalName]),
		verdict(rates["relock"] >= rue, "relock = %.2f × rueidislock in its best configuration (target ≥ 1)", rates["relock"]/rue))
	if lat > 0 {
		sec.verdicts = append(sec.verdicts,
			verdict(rates["relock"] >= 0.95*rates["raw scripts"], "relock = %.2f × the raw scripts (target ≥ 0.95)", rates["relock"]/rates["raw scripts"]),
			verdict(rates["relock"] > best, "relock = %.2f × the best peer in any configuration, %s (target > 1)", rates["relock"]/best, bestName))
	} else {
		sec.verdicts = append(sec.verdicts, verdict(rates["relock"] >= 2*best, "relock = %.2f × the best peer in any configuration, %s (target ≥ 2)", rates["relock"]/best, bestName))
	}
	r.add(sec)
}

// handoff: two owners on two handles alternate, each holding 1 ms while the other waits; then 8 waiters
// over two handles. Every handle is on addr; reported under title. lat as for uncontended: through a proxy
// only the 2 owners run.
func handoff(r *report, addr, title string, lat time.Duration) {
	ctx := context.Background()
	a, b := onClients(peers(addr), addr), onClients(peers(addr), addr)
	defer closeAll(a)
	defer closeAll(b)
	sec := section{title: title, note: "Owners on two handles (clients), each holding 1 ms while the others wait. 2 owners: for each acquisition by an owner that had to wait, the time from the first Unlock call made while it waited to its acquisition (an owner passed over, by the releasing owner taking the lock straight back, keeps counting from that first release, so retry timers and barging count). 8 waiters: the time the lock sat free between two different owners, from an Unlock call to the next acquisition by another owner; min/max are acquisitions per waiter. Overlaps count acquisitions made while another owner was still inside: any is a broken lock. Hung: lock calls still waiting 1 s after the run ended (the lock free by then), or unlock calls that took over " + bound.String() + ". Each peer in its defaults and in its best documented configuration (\"best\"). The floor, \"" + waitingMinimalName + "\" (2 owners only): the minimal pair on a default rueidis client per handle, each handle waiting for the unlock message on a subscription it holds for good. Targets: relock's p50 below rueidislock's in either configuration, 2 owners within 1.2 × the floor's, and no waiter starved.",
		head: []string{"", "2 owners p50", "2 owners p99", "8 waiters p50", "8 waiters p99", "8 waiters min/max", "overlaps", "hung"}}
	if lat > 0 {
		sec.note = proxyNote(lat) + " A handoff takes at least the release's trip to Redis and the news of it (a pub/sub message, an invalidation, or a retry's reply) back to the waiter, " + msText(2*lat) + ", plus the waiter's acquisition round trip, " + msText(2*lat) + ". " +
			"2 owners on two handles (clients), each holding 1 ms while the other waits: for each acquisition by an owner that had to wait, the time from the first Unlock call made while it waited to its acquisition (an owner passed over keeps counting from that first release, so retry timers and barging count). Overlaps count acquisitions made while another owner was still inside: any is a broken lock. Hung as above. Each peer in its defaults and in its best documented configuration (\"best\"). " +
			"The floor, \"" + waitingMinimalName + "\": the minimal pair, each handle waiting for the unlock message on a subscription it holds for good. Targets: relock's p50 below the faster rueidislock configuration's, and within 1.2 × the floor's."
		sec.head = []string{"", "2 owners p50", "2 owners p99", "overlaps", "hung"}
	}
	// The floor: the minimal pair, each handle waiting on a subscription it holds for good.
	fa, fb := &bounded{locker: newWaitingMinimal(addr, "floor-a")}, &bounded{locker: newWaitingMinimal(addr, "floor-b")}
	floor := alternate(ctx, []locker{fa, fb}, 2, dur(8*time.Second))
	floor2 := pct(floor.waits, .5)
	if lat == 0 {
		sec.rows = append(sec.rows, []string{waitingMinimalName, us(floor2), us(pct(floor.waits, .99)), "", "", "", fmt.Sprint(floor.overlaps), hungCount(fa, fb)})
	} else {
		sec.rows = append(sec.rows, []string{waitingMinimalName, us(floor2), us(pct(floor.waits, .99)), fmt.Sprint(floor.overlaps), hungCount(fa, fb)})
	}
	closeAll([]locker{fa, fb})
	var relock2, relock8 time.Duration
	onClient2 := map[string]time.Duration{}
	rue2, rue8 := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
	var rue2Name, rue8Name string
	for i := range a {
		two := alternate(ctx, []locker{a[i], b[i]}, 2, dur(8*time.Second))
		var eight handoffResult
		if lat == 0 {
			eight = alternate(ctx, []locker{a[i], b[i]}, 8, dur(8*time.Second))
			sec.rows = append(sec.rows, []string{a[i].name(), us(pct(two.waits, .5)), us(pct(two.waits, .99)),
				us(pct(eight.gaps, .5)), us(pct(eight.gaps, .99)), fmt.Sprintf("%d / %d", eight.min, eight.max),
				fmt.Sprint(two.overlaps + eight.overlaps), hungCount(a[i], b[i])})
		} else {
			sec.rows = append(sec.rows, []string{a[i].name(), us(pct(two.waits, .5)), us(pct(two.waits, .99)),
				fmt.Sprint(two.overlaps), hungCount(a[i], b[i])})
		}
		switch a[i].name() {
		case "relock":
			relock2, relock8 = pct(two.waits, .5), pct(eight.gaps, .5)
			if lat == 0 {
				sec.verdicts = append(sec.verdicts,
					verdict(eight.min > 0, "relock: fewest acquisitions by one of 8 waiters: %d (target > 0)", eight.min))
			}
			sec.verdicts = append(sec.verdicts,
				verdict(two.overlaps+eight.overlaps == 0, "relock: %d overlapping holds (target 0)", two.overlaps+eight.overlaps))
		case goRedisName, valkeyName:
			onClient2[a[i].name()] = pct(two.waits, .5)
			sec.verdicts = append(sec.verdicts,
				verdict(two.overlaps+eight.overlaps == 0, "%s: %d overlapping holds (target 0)", a[i].name(), two.overlaps+eight.overlaps))
		case "rueidislock", "rueidislock best":
			if p := pct(two.waits, .5); p < rue2 {
				rue2, rue2Name = p, a[i].name()
			}
			if p := pct(eight.gaps, .5); p < rue8 {
				rue8, rue8Name = p, a[i].name()
			}
		}
	}
	for _, n := range []string{goRedisName, valkeyName} {
		sec.verdicts = append(sec.verdicts, verdict(float64(onClient2[n]) <= 1.15*float64(relock2),
			"2 owners: %s p50 = %.2f × relock on rueidis (target ≤ 1.15)", n, float64(onClient2[n])/float64(relock2)))
	}
	sec.verdicts = append(sec.verdicts,
		verdict(relock2 < rue2, "2 owners: relock p50 %s against %s's %s (the faster rueidislock configuration; target: below)", us(relock2), rue2Name, us(rue2)),
		verdict(float64(relock2) <= 1.2*float64(floor2), "2 owners: relock p50 = %.2f × the %s floor's %s (target ≤ 1.2)", float64(relock2)/float64(floor2), waitingMinimalName, us(floor2)))
	if lat == 0 {
		sec.verdicts = append(sec.verdicts,
			verdict(relock8 < rue8, "8 waiters: relock p50 %s against %s's %s (the faster rueidislock configuration; target: below)", us(relock8), rue8Name, us(rue8)))
	}
	r.add(sec)
}

type handoffResult struct {
	waits    []time.Duration // from the first release a waiting owner saw to its acquisition
	gaps     []time.Duration // from an Unlock call to the next acquisition, when by another owner
	min, max int             // acquisitions per owner
	total    int             // acquisitions
	overlaps int             // acquisitions made while another owner was inside: mutual exclusion broken
}

// alternate runs n owners (split over the handles in ls) that each take the lock, hold it 1 ms and let go,
// for d. It records two kinds of handoff. waits: for each acquisition by an owner that had to wait, the
// time from the first Unlock call made while it waited (the first moment the lock was free for it) to its
// acquisition; an owner passed over (another took the lock first, or the one that released it took it
// straight back) keeps counting from that first release, so retry timers and barging count against a
// library. gaps: for each acquisition by another owner than the last one to release, the time since that
// release began: how long the lock sat free between owners. It also records the acquisitions per owner,
// and whether two owners were ever inside at once.
func alternate(ctx context.Context, ls []locker, n int, d time.Duration) handoffResult {
	var (
		mu       sync.Mutex
		waits    []time.Duration
		gaps     []time.Duration
		unlocks  []int64 // when each Unlock call began, in ns, in order
		lastBy   = -1    // the owner that began the last Unlock call
		counts   = make([]int, n)
		inside   atomic.Int32
		overlaps atomic.Int64
		wg       sync.WaitGroup
	)
	key := fmt.Sprintf("bench:handoff:%s:%d", ls[0].name(), n)
	end := time.Now().Add(d)
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := ls[w%len(ls)]
			for time.Now().Before(end) {
				// The context lives until the Unlock: rueidislock releases a lock when the context it was
				// taken with ends.
				lctx, cancel := context.WithDeadline(ctx, end.Add(time.Second))
				waitFrom := time.Now().UnixNano()
				unlock, err := l.lock(lctx, key)
				if err != nil {
					cancel()
					if tolerate(err) {
						continue // counted as hung; the loop ends if the run has
					}
					return // the run ended while waiting
				}
				at := time.Now()
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				mu.Lock()
				if i, _ := slices.BinarySearch(unlocks, waitFrom); i < len(unlocks) {
					waits = append(waits, at.Sub(time.Unix(0, unlocks[i])))
				}
				if lastBy >= 0 && lastBy != w {
					gaps = append(gaps, at.Sub(time.Unix(0, unlocks[len(unlocks)-1])))
				}
				counts[w]++
				mu.Unlock()
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				mu.Lock()
				unlocks, lastBy = append(unlocks, time.Now().UnixNano()), w
				mu.Unlock()
				err = unlock()
				cancel()
				if err != nil && !tolerate(err) {
					log.Fatal(err)
				}
				if n == 2 {
					time.Sleep(100 * time.Microsecond) // let the other owner, already waiting, take it
				}
			}
		}()
	}
	wg.Wait()
	slices.Sort(waits)
	slices.Sort(gaps)
	total := 0
	for _, c := range counts {
		total += c
	}
	return handoffResult{waits: waits, gaps: gaps, min: slices.Min(counts), max: slices.Max(counts), total: total, overlaps: int(overlaps.Load())}
}

// watchdog: round trips (script runs, sent together) and CPU per renewal period for 1,000 and 10,000
// held locks.
func watchdog(r *report) {
	sec := section{title: "4. Watchdog renewal", note: "One Client holding N locks without a lease, watchdog timeout 3 s (a period of 1 s), for several periods. Script runs of up to 500 holds go out together, in one write: one round trip per batch. Target: ≤ 10 round trips per period at 10,000.",
		head: []string{"held locks", "batches/period", "script runs/period", "client CPU/period", "Redis CPU/period"}}
	for _, n := range []int{1000, 10000} {
		srv, err := redistest.StartServer()
		if err != nil {
			log.Fatal(err)
		}
		c, err := relock.New([]string{srv.Addr()}, &relock.Options{WatchdogTimeout: 3 * time.Second})
		if err != nil {
			log.Fatal(err)
		}
		rdb, _ := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
		ctx := relock.WithOwner(context.Background(), "holder")
		var wg sync.WaitGroup
		for g := range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g; i < n; i += 50 {
					if err := c.Lock(fmt.Sprintf("held:%d", i)).Lock(ctx); err != nil {
						log.Fatal(err)
					}
				}
			}()
		}
		wg.Wait()
		rdb.Do(ctx, rdb.B().ConfigResetstat().Build())
		periods := 4
		if *smoke {
			periods = 1
		}
		cpu0 := cpuTime()
		time.Sleep(time.Duration(periods) * time.Second)
		cpu := cpuTime() - cpu0
		calls, usec := commandStats(rdb, "evalsha")
		runs := float64(calls) / float64(periods)
		batches := runs / float64((n+499)/500)
		sec.rows = append(sec.rows, []string{fmt.Sprint(n), fmt.Sprintf("%.1f", batches), fmt.Sprintf("%.1f", runs),
			ms(cpu / time.Duration(periods)), ms(time.Duration(usec/float64(periods)) * time.Microsecond)})
		if n == 10000 {
			sec.verdicts = append(sec.verdicts, verdict(batches <= 10, "%.1f round trips per period at 10,000 held locks (target ≤ 10)", batches))
		}
		c.Close()
		rdb.Close()
		srv.Stop()
	}
	r.add(sec)
}

// redlockVsRedsync: N = 5 nodes, Lock+Unlock, all up, then one paused.
func redlockVsRedsync(r *report) {
	var servers []*redistest.Server
	var addrs []string
	for range 5 {
		s, err := redistest.StartServer()
		if err != nil {
			log.Fatal(err)
		}
		defer s.Stop()
		servers = append(servers, s)
		addrs = append(addrs, s.Addr())
	}
	ctx := context.Background()
	var parts []relock.Lockable
	for _, a := range addrs {
		c, err := relock.New([]string{a}, nil)
		if err != nil {
			log.Fatal(err)
		}
		defer c.Close()
		parts = append(parts, c.Lock("bench:redlock"))
	}
	rl := &bounded{locker: redLocker{relock.NewRedLock(parts, nil)}}
	rs := &bounded{locker: newRedsync(addrs...)}
	defer rs.close()
	var raws rawFanout
	for _, a := range addrs {
		rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a}, DisableCache: true})
		if err != nil {
			log.Fatal(err)
		}
		defer rdb.Close()
		raws = append(raws, newRawScripts(rdb))
	}
	floor := &bounded{locker: raws}
	lockUnlock := func(l locker, key string) func() error {
		return func() error {
			unlock, err := l.lock(ctx, key)
			if err != nil {
				return err
			}
			return unlock()
		}
	}
	ops := map[string]func() error{
		"relock RedLock": lockUnlock(rl, "bench:redlock"),
		"redsync":        lockUnlock(rs, "bench:redsync"),
		floor.name():     lockUnlock(floor, "bench:raw"),
	}
	sec := section{title: "5. RedLock, N = 5", note: "Lock+Unlock over 5 nodes (on this one machine), all up, then with one paused (SIGSTOP). relock's node timeout defaults to TTL/20 capped at 500 ms (30 s watchdog: 500 ms); redsync's is expiry × 0.05 (8 s: 400 ms). All up, each round runs each library's Lock+Unlock once, interleaved. Both run bounded like the peers elsewhere (relock's RedLock with an owner token per acquisition): a call still running at " + bound.String() + " counts as hung, its time shown is when it was given up on (" + (bound + grace).String() + " if it ignored its context: go-redis's default read timeout is 3 s), not when it would have ended.",
		head: []string{"", "all up p50", "all up p99", "all up mean", "× raw scripts on every node", "one paused, median of 3", "one paused, worst of 3", "hung"}}
	sec.note += " The floor, \"raw scripts on every node\", runs relock's acquire script on the 5 nodes at once through rueidis (one goroutine each), then its release script likewise: what a RedLock's Lock+Unlock costs through rueidis before any of relock's own work (it has no node timeout, so it does not run with a node paused)."
	up := interleaved(dur(8*time.Second), []string{floor.name(), "relock RedLock", "redsync"}, ops)
	if err := servers[4].Pause(); err != nil {
		log.Fatal(err)
	}
	// With a node stopped every operation waits out a timeout: a few of them tell enough.
	paused := map[string][]time.Duration{}
	for _, n := range []string{"relock RedLock", "redsync"} {
		for range 3 {
			t0 := time.Now()
			if err := ops[n](); err != nil && !tolerate(err) {
				log.Fatalf("%s with a node paused: %v", n, err)
			}
			paused[n] = append(paused[n], time.Since(t0))
		}
		slices.Sort(paused[n])
	}
	_ = servers[4].Resume()
	floorMean := float64(mean(up[floor.name()]))
	for _, l := range []locker{floor, rl, rs} {
		n := l.name()
		p50, worst := "—", "—"
		if l != floor {
			p50, worst = ms(pct(paused[n], .5)), ms(pct(paused[n], 1))
		}
		sec.rows = append(sec.rows, []string{n, us(pct(up[n], .5)), us(pct(up[n], .99)), us(mean(up[n])),
			fmt.Sprintf("%.2f", float64(mean(up[n]))/floorMean), p50, worst, hungCount(l)})
	}
	sec.verdicts = append(sec.verdicts, verdict(mean(up["relock RedLock"]) <= mean(up["redsync"]), "all up, relock = %.2f × redsync (mean; target ≤ 1.0)", float64(mean(up["relock RedLock"]))/float64(mean(up["redsync"]))))
	r.add(sec)
}

// redLocker adapts a relock RedLock (whose name is fixed: key is ignored) for bounded, with an owner token
// of its own per acquisition, as relockLocker does.
type redLocker struct{ rl *relock.RedLock }

func (r redLocker) name() string { return "relock RedLock" }
func (r redLocker) lock(ctx context.Context, _ string) (func() error, error) {
	ctx = relock.WithOwner(ctx, "bench-"+strconv.FormatInt(owners.Add(1), 10))
	if err := r.rl.Lock(ctx); err != nil {
		return nil, err
	}
	return func() error { return r.rl.Unlock(context.WithoutCancel(ctx)) }, nil
}
func (r redLocker) close() {}

// interleaved runs each of ops (in the order of names) once per round, after a warm-up, for d, and returns
// each one's sorted latencies. A hung call (tolerate) is left out.
func interleaved(d time.Duration, names []string, ops map[string]func() error) map[string][]time.Duration {
	for range 50 {
		for _, n := range names {
			if err := ops[n](); err != nil && !tolerate(err) {
				log.Fatalf("%s: %v", n, err)
			}
		}
	}
	samples := map[string][]time.Duration{}
	for end := time.Now().Add(d); time.Now().Before(end); {
		for _, n := range names {
			t0 := time.Now()
			if err := ops[n](); err != nil {
				if tolerate(err) {
					continue
				}
				log.Fatalf("%s: %v", n, err)
			}
			samples[n] = append(samples[n], time.Since(t0))
		}
	}
	for _, ds := range samples {
		slices.Sort(ds)
	}
	return samples
}

// cost is what one call costs: this process's CPU (getrusage: the library's own work and what it makes the
// runtime do, wake-ups, timers, syscalls), Redis's CPU (INFO cpu), and the time Redis spent running
// scripts (commandstats: EVAL and EVALSHA, the commands they call included).
type cost struct{ client, redis, script time.Duration }

// costs runs each of ops (named by names) in blocks of calls, one contender after another, the order
// reversed every round, for d, and returns each one's cost per call. Nothing else runs meanwhile, so each
// block's differences are its own.
func costs(rdb rueidis.Client, d time.Duration, names []string, ops map[string]func() error) map[string]cost {
	const block = 200
	sums, calls := map[string]cost{}, map[string]int{}
	order := slices.Clone(names)
	for end := time.Now().Add(d); time.Now().Before(end); slices.Reverse(order) {
		for _, n := range order {
			_, s0 := commandStats(rdb, "eval", "evalsha")
			r0, c0 := redisCPU(rdb), cpuTime()
			for range block {
				if err := ops[n](); err != nil && !tolerate(err) {
					log.Fatalf("%s: %v", n, err)
				}
			}
			c1, r1 := cpuTime(), redisCPU(rdb)
			_, s1 := commandStats(rdb, "eval", "evalsha")
			c := sums[n]
			sums[n] = cost{client: c.client + c1 - c0, redis: c.redis + r1 - r0,
				script: c.script + time.Duration((s1-s0)*float64(time.Microsecond))}
			calls[n] += block
		}
	}
	out := map[string]cost{}
	for n, c := range sums {
		k := time.Duration(calls[n])
		out[n] = cost{client: c.client / k, redis: c.redis / k, script: c.script / k}
	}
	return out
}

// relockOnly: FairLock handoff and ReadWriteLock read throughput, which the peers do not offer.
func relockOnly(r *report, srv *redistest.Server) {
	ctx := context.Background()
	a, _ := relock.New([]string{srv.Addr()}, nil)
	b, _ := relock.New([]string{srv.Addr()}, nil)
	defer a.Close()
	defer b.Close()
	sec := section{title: "6. FairLock and ReadWriteLock (relock only)", head: []string{"", "result"}}
	fair := alternate(ctx, []locker{fairLocker{a}, fairLocker{b}}, 8, dur(8*time.Second))
	violations := 0 // with everyone queued and 1 ms holds, FIFO means a fixed cycle
	sec.rows = append(sec.rows, []string{"FairLock handoff, 8 waiters over 2 Clients", fmt.Sprintf("p50 %s, p99 %s, acquisitions per waiter %d–%d", us(pct(fair.gaps, .5)), us(pct(fair.gaps, .99)), fair.min, fair.max)})
	_ = violations
	var n atomic.Int64
	end := time.Now().Add(dur(8 * time.Second))
	var wg sync.WaitGroup
	rw := a.ReadWriteLock("bench:rw")
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				if err := rw.ReadLock().Lock(ctx); err != nil {
					log.Fatal(err)
				}
				if err := rw.ReadLock().Unlock(ctx); err != nil {
					log.Fatal(err)
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	sec.rows = append(sec.rows, []string{"ReadWriteLock read Lock+Unlock, 32 goroutines on one lock", fmt.Sprintf("%.0f pairs/s", float64(n.Load())/dur(8*time.Second).Seconds())})
	r.add(sec)
}

// proxyLatency is what the latency scenario's proxy adds each way.
const proxyLatency = 250 * time.Microsecond

// proxyRTT is a PING's round trip through the latency proxy, one at a time (p50), measured by latency.
var proxyRTT time.Duration

// proxyNote opens the note of a section run through the latency proxy.
func proxyNote(lat time.Duration) string {
	return "Every contender, the floors too, talks to the server through a loopback proxy (the project's internal/faultnet) that holds everything it forwards for " + msText(lat) + " each way: a round trip costs at least " + msText(2*lat) + ". " +
		"Measured in this run, a PING's round trip through it, one at a time, took " + us(proxyRTT) + " (p50), the proxy's own forwarding and the kernel's wake-up of its sleeps (nanosleep(2)) included. The floors pay it as everyone does: compare with them, not with the nominal latency."
}

// latency: scenarios 1 to 3 again (the 2-owner handoff only), every contender through a proxy that adds
// proxyLatency each way, so that round trips, not CPU, dominate.
func latency(r *report, srv *redistest.Server) {
	p, err := faultnet.Start(srv.Addr())
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	p.SetLatency(proxyLatency)
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.Addr}, DisableCache: true})
	if err != nil {
		log.Fatal(err)
	}
	proxyRTT = pct(latencies(dur(4*time.Second)/4, func() error {
		return rdb.Do(context.Background(), rdb.B().Ping().Build()).Error()
	}), .5)
	rdb.Close()
	through := ", through " + msText(proxyLatency) + " of latency each way"
	uncontended(r, p.Addr, "7. Uncontended Lock+Unlock, one goroutine"+through, proxyLatency)
	parallel(r, p.Addr, "8. 64 goroutines on 64 keys"+through, proxyLatency)
	handoff(r, p.Addr, "9. Handoff, 2 owners"+through, proxyLatency)
}

// contentionClients are the numbers of Clients the contention scenario runs, each with contentionPerClient
// goroutines after one lock.
var contentionClients = []int{2, 8, 32, 64}

const contentionPerClient = 4

// contention: one lock, C Clients × 4 goroutines, each holding it 1 ms, unlocking and trying again at once,
// for each C of contentionClients; RLock, then FairLock, each on a lock of its own, with the server's
// statistics reset before each.
func contention(r *report, srv *redistest.Server) {
	const perClient = contentionPerClient
	ctx := context.Background()
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		log.Fatal(err)
	}
	defer rdb.Close()
	each := dur(4 * time.Second)
	sec := section{title: fmt.Sprintf("10. Contention at scale: one lock, %d goroutines on each of C Clients", perClient),
		note: fmt.Sprintf("C relock Clients (C = %v) on the server directly, %d goroutines on each (each acquisition with an owner token of its own), all after one lock: each owner holds it 1 ms, unlocks and at once tries again, for %s; RLock (Client.Lock), then FairLock (Client.FairLock), then the peers (redsync, bsm/redislock and rueidislock, each in its best configuration, on C handles), each on its own lock, with CONFIG RESETSTAT before each. ", contentionClients, perClient, each) +
			"Handoff: the time the lock sat free between two different owners, from the start of an Unlock call to the next acquisition by another owner. Min/max: acquisitions per owner. Overlaps: acquisitions made while another owner was still inside (any is a broken lock). " +
			"Script runs: EVALSHA and EVAL calls (INFO commandstats) per acquisition (the peers' scripts too: rueidislock also waits on client-side caching invalidations, redsync and bsm/redislock retry on timers); Redis CPU: used_cpu_sys + used_cpu_user (INFO cpu) over the run, per acquisition, everything the server did (pub/sub delivery too); script µs: EVALSHA and EVAL usec (INFO commandstats) per acquisition. " +
			"An RLock release names one waiting relock owner, on its Client's own channel, and tells the other relock Clients so on Redisson's channel, where it also publishes Redisson's unlock message for Redisson's waiters (docs/redisson.md, \"One waiter woken per release\"); a FairLock release wakes the first live waiter of its queue, on that waiter's own channel. " +
			"Targets: RLock ≤ 4 script runs per acquisition, its Redis CPU per acquisition at C = 32 within 1.5 × its value at C = 2, and its handoff p50 at C = 32 within 1.5 × the 2-owner handoff (the first row, measured as section 3 does).\n\n" +
			"![Redis CPU and script runs per acquisition against the number of Clients](contention.svg)",
		head: []string{"", "C", "acquisitions", "handoff p50", "handoff p99", "per owner min/max", "overlaps", "script runs/acquisition", "Redis CPU/acquisition", "script µs/acquisition"}}
	type result struct { // per acquisition
		h          handoffResult
		runs, usec float64 // script runs, and their µs (commandstats)
		cpu        time.Duration
	}
	res := map[string]result{}
	overlaps := 0
	// The 2-owner handoff, as section 3 measures it, on two Clients: what a handoff costs without a crowd.
	two := func() time.Duration {
		var ls []locker
		for range 2 {
			c, err := relock.New([]string{srv.Addr()}, nil)
			if err != nil {
				log.Fatal(err)
			}
			defer c.Close()
			ls = append(ls, &relockLocker{c: c})
		}
		h := alternate(ctx, ls, 2, each)
		overlaps += h.overlaps
		return pct(h.waits, .5)
	}()
	sec.rows = append(sec.rows, []string{"RLock, 2 owners", "2", "", us(two), "", "", "", "", "", ""})
	for _, kind := range []string{"RLock", "FairLock", "redsync", "bsm/redislock best", "rueidislock best"} {
		cpuCurve, runCurve := curve{label: kind}, curve{label: kind}
		for _, clients := range contentionClients {
			var cs []*relock.Client
			var ls []locker
			for range clients {
				switch kind {
				case "RLock", "FairLock":
					c, err := relock.New([]string{srv.Addr()}, nil)
					if err != nil {
						log.Fatal(err)
					}
					cs = append(cs, c)
					if kind == "RLock" {
						ls = append(ls, &relockLocker{c: c})
					} else {
						ls = append(ls, fairLocker{c})
					}
				case "redsync":
					ls = append(ls, &bounded{locker: newRedsync(srv.Addr())})
				case "bsm/redislock best":
					ls = append(ls, &bounded{locker: newRedislock(srv.Addr(), true)})
				default:
					l, err := newRueidisLock(srv.Addr(), true)
					if err != nil {
						log.Fatal(err)
					}
					ls = append(ls, &bounded{locker: l})
				}
			}
			if err := rdb.Do(ctx, rdb.B().ConfigResetstat().Build()).Error(); err != nil {
				log.Fatal(err)
			}
			cpu0 := redisCPU(rdb)
			h := alternate(ctx, ls, clients*perClient, each)
			cpu := redisCPU(rdb) - cpu0
			calls, usec := commandStats(rdb, "evalsha", "eval")
			for _, c := range cs {
				c.Close()
			}
			if cs == nil {
				closeAll(ls)
			}
			n := max(h.total, 1)
			x := result{h: h, runs: float64(calls) / float64(n), cpu: cpu / time.Duration(n), usec: usec / float64(n)}
			res[fmt.Sprint(kind, clients)] = x
			overlaps += h.overlaps
			sec.rows = append(sec.rows, []string{kind, fmt.Sprint(clients), fmt.Sprint(h.total), us(pct(h.gaps, .5)), us(pct(h.gaps, .99)),
				fmt.Sprintf("%d / %d", h.min, h.max), fmt.Sprint(h.overlaps), fmt.Sprintf("%.1f", x.runs), ms(x.cpu), fmt.Sprintf("%.0f µs", x.usec)})
			cpuCurve.points = append(cpuCurve.points, [2]float64{float64(clients), float64(x.cpu) / float64(time.Millisecond)})
			runCurve.points = append(runCurve.points, [2]float64{float64(clients), x.runs})
		}
		r.cpuCurves, r.runCurves = append(r.cpuCurves, cpuCurve), append(r.runCurves, runCurve)
	}
	lo, hi := fmt.Sprint(contentionClients[0]), "32"
	rl2, rl, fl := res["RLock"+lo], res["RLock"+hi], res["FairLock"+hi]
	sec.verdicts = append(sec.verdicts,
		verdict(overlaps == 0, "%d overlapping holds (target 0)", overlaps),
		verdict(rl.runs <= 4, "RLock at C = 32: %.1f script runs per acquisition (C = %s: %.1f; FairLock at C = 32: %.1f; target ≤ 4)",
			rl.runs, lo, rl2.runs, fl.runs),
		verdict(rl2.cpu > 0 && float64(rl.cpu) <= 1.5*float64(rl2.cpu), "RLock Redis CPU per acquisition: %s at C = 32, %s at C = %s (%.2f ×; target ≤ 1.5 ×)",
			ms(rl.cpu), ms(rl2.cpu), lo, float64(rl.cpu)/float64(max(rl2.cpu, 1))))
	sec.verdicts = append(sec.verdicts,
		verdict(float64(pct(rl.h.gaps, .5)) <= 1.5*float64(two), "RLock handoff p50 at C = 32: %s (p99 %s), the 2-owner handoff's %s (%.2f ×; target ≤ 1.5 ×)",
			us(pct(rl.h.gaps, .5)), us(pct(rl.h.gaps, .99)), us(two), float64(pct(rl.h.gaps, .5))/float64(max(two, 1))))
	r.add(sec)
}

// fairLocker adapts relock's FairLock for alternate.
type fairLocker struct{ c *relock.Client }

func (f fairLocker) name() string { return "relock-fair" }
func (f fairLocker) lock(ctx context.Context, key string) (func() error, error) {
	// An owner token of its own per acquisition, as relockLocker's.
	ctx = relock.WithOwner(ctx, "bench-fair-"+strconv.FormatInt(owners.Add(1), 10))
	l := f.c.FairLock(key)
	if err := l.Lock(ctx); err != nil {
		return nil, err
	}
	return func() error { return l.Unlock(context.WithoutCancel(ctx)) }, nil
}
func (f fairLocker) close() {}

func closeAll(ls []locker) {
	for _, l := range ls {
		l.close()
	}
}

// msText writes d in milliseconds, as short as it goes: 0.25 ms.
func msText(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', -1, 64) + " ms"
}

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }
func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// commandStats returns the calls and CPU microseconds of the commands cmds (lower case: "evalsha"), summed,
// since the last CONFIG RESETSTAT. Commands a script runs count apart, and their time inside the script's.
func commandStats(rdb rueidis.Client, cmds ...string) (calls int64, usec float64) {
	info, err := rdb.Do(context.Background(), rdb.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		log.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !slices.Contains(cmds, strings.TrimPrefix(name, "cmdstat_")) {
			continue
		}
		var c int64
		var u float64
		fmt.Sscanf(strings.ReplaceAll(rest, ",", " "), "calls=%d usec=%f", &c, &u)
		calls, usec = calls+c, usec+u
	}
	return calls, usec
}

// redisCPU returns the CPU time the server has used since it started, system and user (INFO cpu).
func redisCPU(rdb rueidis.Client) time.Duration {
	info, err := rdb.Do(context.Background(), rdb.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		log.Fatal(err)
	}
	var secs float64
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				log.Fatalf("INFO cpu: %s: %v", line, err)
			}
			secs += f
		}
	}
	return time.Duration(secs * float64(time.Second))
}

// redisVersion is the version line of the redis-server the harness starts (redistest.ServerPath).
func redisVersion() string {
	v, err := redistest.ServerVersion()
	if err != nil {
		return "unknown"
	}
	return v.Text
}
