package relock_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"golang.org/x/sync/errgroup"

	"github.com/relock-go/relock"
)

// minimalScript loads the minimal reentrant-hash pair's script name (testdata/minimal: what a reentrant
// lock on a Redis hash must run at least), the floor BenchmarkSingleOperation compares relock with.
func minimalScript(b *testing.B, name string) *rueidis.Lua {
	src, err := os.ReadFile(filepath.Join("testdata", "minimal", name+".lua"))
	if err != nil {
		b.Fatal(err)
	}
	return rueidis.NewLuaScript(string(src))
}

// processCPU is this process's CPU time so far, user and system: the client's whole cost, the runtime's
// wake-ups, timers and syscalls included.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// schedulings estimates how many times the runtime has made a goroutine run after it became runnable
// (goroutines woken by channels, timers, the network poller): the runtime records one in 8 of them
// (gTrackingPeriod) in /sched/latencies:seconds, so it is that histogram's count times 8.
func schedulings() uint64 {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	var n uint64
	for _, c := range s[0].Value.Float64Histogram().Counts {
		n += c
	}
	return 8 * n
}

// scriptUsec is the time Redis has spent running scripts (EVAL and EVALSHA), in microseconds, and its
// main thread's CPU time.
func scriptUsec(b *testing.B, rdb rueidis.Client) (scripts, cpu float64) {
	ctx := context.Background()
	stats, err := rdb.Do(ctx, rdb.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(stats, "\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
			continue
		}
		for f := range strings.SplitSeq(strings.TrimSpace(line[strings.IndexByte(line, ':')+1:]), ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, _ := strconv.ParseFloat(v, 64)
				scripts += n
			}
		}
	}
	info, err := rdb.Do(ctx, rdb.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		for _, k := range []string{"used_cpu_sys_main_thread:", "used_cpu_user_main_thread:"} {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), k); ok {
				n, _ := strconv.ParseFloat(v, 64)
				cpu += n * 1e6
			}
		}
	}
	return scripts, cpu
}

// BenchmarkSingleOperation interleaves blocks of uncontended Lock+Unlock pairs on one goroutine: the
// minimal reentrant-hash pair and relock's Lock+Unlock, each on two rueidis clients: one with rueidis's
// defaults, on which a call alone on its connection is written and read by the calling goroutine (relock
// through Wrap: "wrap"), and one that always pipelines (ClientOption.AlwaysPipelining), on which every call
// goes through the connection's writer and reader goroutines, as on every Client that New makes ("new";
// see NewContext for why it does). For each it reports the median pair's time, this process's CPU per pair
// (getrusage: everything the pair makes the runtime do), Redis's main-thread CPU, the time Redis spent in
// scripts, the allocations (MemStats.Mallocs) and the goroutine wake-ups (estimated: see schedulings) per
// pair; and relock's ratios to the minimal pair on the same kind of client. "scripts-wrap" and
// "scripts-new" are relock's own two scripts run raw through rueidis, with the keys and arguments relock
// gives them, on the same two clients: relock against them is its client-side cost, they against the
// minimal pair what its scripts cost more than the minimal pair's. "minimal-used" is the pair on a default
// client on whose connections calls have once overlapped: rueidis pipelines through the same goroutines
// from then on, as on New's client, so that it is what a default client costs in a service that calls
// Redis from more than one goroutine. With "new-key", every pair is on a name
// never used before (relock's makes its lock object for it, as a caller locking per order or user does);
// with "same-key", on one name, and one lock object.
//
//	go test -run '^$' -bench SingleOperation -benchtime 20x -count 1
func BenchmarkSingleOperation(b *testing.B) {
	for _, same := range []bool{false, true} {
		b.Run(map[bool]string{false: "new-key", true: "same-key"}[same], func(b *testing.B) {
			singleOperation(b, same)
		})
	}
}

func singleOperation(b *testing.B, sameKey bool) {
	rdb, wrapped := benchClient(b)
	piped, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}, DisableCache: true, AlwaysPipelining: true})
	if err != nil {
		b.Fatal(err)
	}
	defer piped.Close()
	// A default client once two calls overlapped on a connection, as in any service that calls concurrently:
	// rueidis then hands every later call, also a lone one, to the connection's writer and reader goroutines
	// for the connection's life. The floor relock's New is held to.
	used, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	defer used.Close()
	overlap(b, used)
	made, err := relock.New([]string{redisAddr}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer made.Close()
	ctx := context.Background()
	const field = "00000000-0000-0000-0000-000000000000:1"
	const block = 200 // pairs a contender runs in a row
	// Every contender takes the same names, one after the other: rueidis picks a connection by a key's
	// slot, so that different names would measure different connections. What a block needs is made
	// before it starts: the harness's own allocations are not counted.
	type target struct {
		name    string
		minimal [2][]string      // the minimal pair's keys: acquire, release
		locks   [2]*relock.RLock // same-key only: the lock objects, wrap's and new's
		scripts [2]*rawLock      // relock's own scripts run raw, on wrap's client and on new's kind of client
	}
	targets := make([]target, block)
	scriptsAcquire, scriptsRelease := rawScript(b, "rlock_acquire"), rawScript(b, "rlock_release")
	prepare := func(round int) {
		for k := range targets {
			name := "bench:single"
			if !sameKey {
				name = fmt.Sprintf("bench:single:%d:%d", round, k)
			} else if targets[k].name == name {
				continue
			}
			targets[k] = target{name: name, locks: [2]*relock.RLock{wrapped.Lock(name), made.Lock(name)},
				minimal: [2][]string{{name}, {name, "redisson_lock__channel:{" + name + "}"}},
				scripts: [2]*rawLock{newRawLockWith(rdb, scriptsAcquire, scriptsRelease, name, "1"),
					newRawLockWith(piped, scriptsAcquire, scriptsRelease, name, "1")}}
		}
	}
	minimalAcquire, minimalRelease := minimalScript(b, "acquire"), minimalScript(b, "release")
	minimalAcquireArgs, minimalReleaseArgs := []string{"30000", field}, []string{field, "0", "30000"}
	minimal := func(rdb rueidis.Client) func(t *target) error {
		return func(t *target) error {
			if err := minimalAcquire.Exec(ctx, rdb, t.minimal[0], minimalAcquireArgs).Error(); err != nil && !rueidis.IsRedisNil(err) {
				return err
			}
			return minimalRelease.Exec(ctx, rdb, t.minimal[1], minimalReleaseArgs).Error()
		}
	}
	lock := func(c *relock.Client, i int) func(t *target) error {
		return func(t *target) error {
			l := t.locks[i]
			if !sameKey {
				l = c.Lock(t.name)
			}
			if err := l.Lock(ctx); err != nil {
				return err
			}
			return l.Unlock(ctx)
		}
	}
	type contender struct {
		name                  string
		pair                  func(t *target) error
		lat                   []time.Duration
		cpu, redisCPU, script float64
		mallocs, scheds       uint64
		n                     int
	}
	contenders := []*contender{
		{name: "minimal-wrap", pair: minimal(rdb)},
		{name: "relock-wrap", pair: lock(wrapped, 0)},
		{name: "minimal-new", pair: minimal(piped)},
		{name: "minimal-used", pair: minimal(used)},
		{name: "relock-new", pair: lock(made, 1)},
		{name: "scripts-wrap", pair: func(t *target) error { return t.scripts[0].lockUnlock(ctx) }},
		{name: "scripts-new", pair: func(t *target) error { return t.scripts[1].lockUnlock(ctx) }},
	}
	for _, ct := range contenders {
		ct.lat = make([]time.Duration, 0, 64*block)
	}
	round := 0
	for b.Loop() {
		prepare(round)
		order := slices.Clone(contenders)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		round++
		for _, ct := range order {
			s0, r0 := scriptUsec(b, rdb)
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			g0 := schedulings()
			c0 := processCPU()
			for k := range targets {
				t := time.Now()
				if err := ct.pair(&targets[k]); err != nil {
					b.Fatal(ct.name, err)
				}
				ct.lat = append(ct.lat, time.Since(t))
			}
			ct.cpu += float64(processCPU() - c0)
			ct.scheds += schedulings() - g0
			runtime.ReadMemStats(&m1)
			ct.mallocs += m1.Mallocs - m0.Mallocs
			s1, r1 := scriptUsec(b, rdb)
			ct.script += s1 - s0
			ct.redisCPU += r1 - r0
			ct.n += block
		}
	}
	res := map[string][4]float64{}
	for _, ct := range contenders {
		n := float64(ct.n)
		slices.Sort(ct.lat)
		res[ct.name] = [4]float64{float64(ct.lat[len(ct.lat)/2].Nanoseconds()) / 1e3, ct.cpu / n / 1e3, ct.redisCPU / n, ct.script / n}
		b.ReportMetric(res[ct.name][0], ct.name+"-p50-µs")
		b.ReportMetric(res[ct.name][1], ct.name+"-cpu-µs")
		b.ReportMetric(res[ct.name][2], ct.name+"-rediscpu-µs")
		b.ReportMetric(res[ct.name][3], ct.name+"-script-µs")
		b.ReportMetric(float64(ct.mallocs)/n, ct.name+"-allocs")
		b.ReportMetric(float64(ct.scheds)/n, ct.name+"-wakeups")
	}
	for _, c := range []string{"wrap", "new"} {
		r, m := res["relock-"+c], res["minimal-"+c]
		b.ReportMetric(r[0]/m[0], c+"-p50/minimal")
		b.ReportMetric(r[1]/m[1], c+"-cpu/minimal")
		b.ReportMetric(r[3]/m[3], c+"-script/minimal")
		s := res["scripts-"+c]
		b.ReportMetric(s[0]/m[0], c+"-scripts-p50/minimal")
		b.ReportMetric(r[0]/s[0], c+"-p50/scripts")
		b.ReportMetric(r[1]/s[1], c+"-cpu/scripts")
	}
	r, m := res["relock-new"], res["minimal-used"]
	b.ReportMetric(r[0]/m[0], "new-p50/minimal-used")
	b.ReportMetric(r[1]/m[1], "new-cpu/minimal-used")
}

// overlap makes calls overlap on each of rdb's connections (rueidis picks one by a key's slot): 8
// goroutines, each running EXISTS on 64 names.
func overlap(b *testing.B, rdb rueidis.Client) {
	var g errgroup.Group
	for range 8 {
		g.Go(func() error {
			for k := range 64 {
				if err := rdb.Do(context.Background(), rdb.B().Exists().Key(fmt.Sprint("bench:overlap:", k)).Build()).Error(); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
}
