package explore

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/invariant"
	"github.com/relock-go/relock/internal/redistest"
)

var (
	seedFlag    = flag.Uint64("seed", 0, "replay the schedule of this seed (with -run 'TestExplore/<kind>')")
	exploreFlag = flag.Duration("explore", 0, "run fresh seeds for this long, per kind (default: the CI budget, -budget)")
	budgetFlag  = flag.Duration("budget", 7*time.Second, "the CI budget: fresh seeds for this long, per kind")
	parFlag     = flag.Int("par", 4, "schedules run at once")
	keepGoing   = flag.Bool("keep-going", false, "go on exploring after a violation (count them all)")
	withoutFlag = flag.String("without", "", "faults or operations (max-hold, revoke, shared) to leave out of the plans, comma-separated (e.g. busy,busy+watch-kill): to look past a defect found")
)

func TestMain(m *testing.M) {
	flag.Parse()
	invariant.Enable() // the library's lifecycles check themselves after every transition
	redistest.AdoptOrphans()
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(redistest.CheckProcesses(code, 5*time.Second))
}

// TestExplore runs, for every kind, fresh seeds for the budget (or -explore), or the one schedule of
// -seed, and fails with the seed, the plan, the violation and the history around it.
func TestExplore(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) { exploreKind(t, k) })
	}
}

// outcome is what one schedule gave.
type outcome struct {
	p          *plan
	h          *history
	violations []violation
	elapsed    time.Duration
}

func exploreKind(t *testing.T, k *kind) {
	if *seedFlag != 0 {
		o := runSchedule(t, k, *seedFlag)
		t.Logf("%s", o.p)
		if testing.Verbose() {
			t.Logf("history:\n%s", o.h.around(0, forever))
		}
		report(t, k, o)
		summary(t, k, 1, len(o.h.faults), len(o.violations), o.h.lagExcused, o.h.redissonMost, o.h.redissonRow, o.elapsed, "")
		return
	}
	budget := *budgetFlag
	if *exploreFlag > 0 {
		budget = *exploreFlag
	}
	start := time.Now()
	var schedules, faults, violations, lagExcused, redissonMost, redissonRow atomic.Int64
	var mu sync.Mutex
	var first *outcome
	var firstAt string
	stop := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for range max(1, *parFlag) {
		wg.Go(func() {
			for time.Since(start) < budget {
				select {
				case <-stop:
					return
				default:
				}
				o := runSchedule(t, k, rand.Uint64()>>1|1)
				n := schedules.Add(1)
				faults.Add(int64(len(o.h.faults)))
				lagExcused.Add(int64(o.h.lagExcused))
				atomicMax(&redissonMost, o.h.redissonMost)
				atomicMax(&redissonRow, o.h.redissonRow)
				if len(o.violations) == 0 {
					continue
				}
				violations.Add(int64(len(o.violations)))
				if *keepGoing { // each schedule's violations, in a line each (the first schedule's in full below)
					for i, v := range o.violations {
						t.Logf("seed %d (%.1f s in): %s", o.p.seed, time.Since(start).Seconds(), v)
						if testing.Verbose() && i < 3 { // with -v, each one's history too
							t.Logf("history around it:\n%s", o.h.around(v.from-300*time.Millisecond, v.to+100*time.Millisecond))
						}
					}
				}
				mu.Lock()
				if first == nil {
					first = &o
					firstAt = fmt.Sprintf("first found after %d schedules, %.1f s", n, time.Since(start).Seconds())
				}
				mu.Unlock()
				if !*keepGoing {
					once.Do(func() { close(stop) })
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if first != nil {
		report(t, k, *first)
	}
	summary(t, k, schedules.Load(), int(faults.Load()), int(violations.Load()), int(lagExcused.Load()), int(redissonMost.Load()), int(redissonRow.Load()), elapsed, firstAt)
}

// report fails t with o's violations: the seed to replay, the plan, and the history around each.
func report(t *testing.T, k *kind, o outcome) {
	t.Helper()
	if len(o.violations) == 0 {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d violations; replay with: go test -race ./safety/explore/ -run 'TestExplore/%s$' -seed %d -v\n  plan: %s\n",
		k.name, len(o.violations), k.name, o.p.seed, o.p)
	for i, v := range o.violations {
		if i == 3 {
			fmt.Fprintf(&b, "  … and %d more\n", len(o.violations)-i)
			break
		}
		fmt.Fprintf(&b, "  %s\n  history around it:\n%s", v, o.h.around(v.from-300*time.Millisecond, v.to+100*time.Millisecond))
	}
	t.Error(b.String())
}

// atomicMax raises m to v if v is more.
func atomicMax(m *atomic.Int64, v int) {
	for o := m.Load(); int64(v) > o && !m.CompareAndSwap(o, int64(v)); o = m.Load() {
	}
}

// summary logs, and appends to $RELOCK_CHAOS_SUMMARY, the kind's line: schedules, faults, violations.
// lagExcused counts the overruns excused because the test process itself did not run (history.monitorLag).
// redissonMost is the most holds a relock Client got during one Redisson wait (the Redisson kind).
func summary(t *testing.T, k *kind, schedules int64, faults, violations, lagExcused, redissonMost, redissonRow int, elapsed time.Duration, first string) {
	line := fmt.Sprintf("explore: kind=%s schedules=%d faults=%d violations=%d lag-excused=%d seconds=%.1f schedules/s=%.2f",
		k.name, schedules, faults, violations, lagExcused, elapsed.Seconds(), float64(schedules)/elapsed.Seconds())
	if k.name == "Redisson" {
		line += fmt.Sprintf(" redisson-most=%d redisson-row=%d", redissonMost, redissonRow)
	}
	if first != "" {
		line += " (" + first + ")"
	}
	t.Log(line)
	if path := os.Getenv("RELOCK_CHAOS_SUMMARY"); path != "" {
		if f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintln(f, line)
			f.Close()
		}
	}
}

// runSchedule runs the schedule of seed for k: servers, Clients, actors, faults; then closes the Clients,
// checks what is left in Redis, and checks the history.
func runSchedule(t *testing.T, k *kind, seed uint64) outcome {
	began := time.Now()
	p := newPlan(k, seed)
	// A panic in a goroutine of the library (or of rueidis) ends the process before any report: the
	// schedules under way are on stderr, which go test shows for a package that failed.
	fmt.Fprintf(os.Stderr, "explore: %s seed %d begins\n", k.name, seed)
	defer fmt.Fprintf(os.Stderr, "explore: %s seed %d ends\n", k.name, seed)
	e, err := newEnv(k, p)
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	defer e.close()
	s := &sched{k: k, p: p, e: e, h: newHistory(), name: fmt.Sprintf("x%d", seed%100000), stop: make(chan struct{})}
	if k.setup != nil {
		if err := k.setup(s); err != nil {
			t.Fatalf("seed %d: setup: %v", seed, err)
		}
	}
	lagDone := make(chan struct{})
	lagStop := make(chan struct{})
	go func() {
		s.h.monitorLag(lagStop)
		close(lagDone)
	}()
	var wg sync.WaitGroup
	id := 0
	for ci := range p.clients {
		for j := range p.actorsOf(ci) {
			token := fmt.Sprintf("c%d-a%d", ci, j)
			r := role{}
			switch {
			case k.name == "Election": // two actors of a Client share an owner: Campaigns of one owner at once
				token = fmt.Sprintf("c%d-o%d", ci, j/2)
			case p.ops.shared && j/2*2+1 < p.actorsOf(ci): // two goroutines of one WithOwner token
				token, r.shared = fmt.Sprintf("c%d-s%d", ci, j/2), true
			}
			r.revoker = j < p.ops.revokers && ci == p.clients-1
			if p.ops.maxHold > 0 && id%3 == 1 {
				r.maxHold = p.ops.maxHold
			}
			a := &actor{id: id, client: ci, owner: token, rng: rand.New(rand.NewPCG(seed, uint64(id)+1)),
				base: relock.WithOwner(context.Background(), token), role: r}
			id++
			wg.Go(func() { k.actor(s, a) })
		}
	}
	for i := range p.ops.redisson {
		a := &actor{id: id, client: -1 - i, rng: rand.New(rand.NewPCG(seed, uint64(id)+1)), base: context.Background(), role: role{redisson: true}}
		id++
		wg.Go(func() { k.actor(s, a) })
	}
	for i := range p.observers {
		wg.Go(func() { s.observe(p.clients + i) })
	}
	faultsDone := make(chan struct{})
	go func() {
		inject(t, s, nil)
		close(faultsDone)
	}()
	time.Sleep(p.length)
	close(s.stop)
	<-faultsDone
	wg.Wait()
	close(lagStop)
	<-lagDone
	s.h.update(func() { s.h.end = s.h.now() })
	e.closeClients()
	s.readLogs()
	clean(s)
	s.h.update(func() { addGlobal(s.h) })
	vs := check(s.h, k.res(p), defaultBounds(p.watchdog))
	return outcome{p: p, h: s.h, violations: vs, elapsed: time.Since(began)}
}

// deadQueue reports whether key is a fair lock's queue or Redisson scores (a FairLock's, an Election's)
// holding only waiters that relock's scripts count as dead: relock Clients' owners (version 8 UUIDs)
// without a live alive entry. A Client that could not take its waiter out of the queue at Close (its
// process starved past the waiter's alive time, so that it counted the entry as gone) leaves it so, as a
// killed process does: the next acquisition on the name drops it (docs/locks.md, FairLock), and nothing
// is left to expire it before then (the queue and scores are Redisson's, without a time to live).
func deadQueue(s *sched, server int, key string) bool {
	if key != "redisson_lock_queue:{"+s.name+"}" && key != "redisson_lock_timeout:{"+s.name+"}" {
		return false
	}
	dead, err := s.e.do(server, "EVAL", `local t = redis.call('time')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local owners = redis.call('lrange', KEYS[1], 0, -1)
for _, o in ipairs(redis.call('zrange', KEYS[2], 0, -1)) do table.insert(owners, o) end
for _, o in ipairs(owners) do
  if string.sub(o, 15, 15) ~= '8' or string.sub(o, 37, 37) ~= ':' then return 0 end
  local alive = redis.call('zscore', KEYS[3], o)
  if alive and tonumber(alive) > now then return 0 end
end
return 1`, "3", "redisson_lock_queue:{"+s.name+"}", "redisson_lock_timeout:{"+s.name+"}", "relock_lock_alive:{"+s.name+"}").AsInt64()
	return err == nil && dead == 1
}

// clean checks that, once every Client is closed, nothing of the actors is left in Redis beyond what the
// kind documents: what is left must go within the watchdog timeout (a hold whose release could not be
// sent expires), or the 2 s a release's void marks live after its last repeat (relock_release_void, see
// docs/locks.md), plus a second.
func clean(s *sched) {
	within := max(s.p.watchdog, 2*time.Second) + time.Second
	deadline := time.Now().Add(within)
	for {
		var left []string
		for i := range s.e.servers {
			keys, err := s.e.do(i, "KEYS", "*").AsStrSlice()
			if err != nil {
				s.h.fail("harness: KEYS: %v", err)
				return
			}
			for _, key := range keys {
				if s.k.name == "PermitSemaphore" && key == "{"+s.name+"}:timeout" {
					// Permits that expired are given back by the next acquisition (documented): such
					// entries may stay; a permit still renewed may not.
					live, err := s.e.do(i, "EVAL", "local t = redis.call('time') "+
						"return redis.call('zcount', KEYS[1], '('..(t[1] * 1000 + math.floor(t[2] / 1000)), '+inf')", "1", key).AsInt64()
					if err == nil && live == 0 {
						continue
					}
				}
				if deadQueue(s, i, key) {
					continue
				}
				if !s.k.stays(s.name, key) {
					ttl, _ := s.e.do(i, "PTTL", key).AsInt64()
					what := fmt.Sprintf("%s (server %d, pttl %d ms", key, i, ttl)
					if typ, _ := s.e.do(i, "TYPE", key).ToString(); typ == "zset" || typ == "hash" {
						content, _ := s.e.do(i, "EVAL", "local t = redis.call('time') "+
							"local c = redis.call('type', KEYS[1]).ok == 'zset' and redis.call('zrange', KEYS[1], 0, -1, 'withscores') or redis.call('hgetall', KEYS[1]) "+
							"for i = 1, #c do if not tonumber(c[i]) then c[i] = string.gsub(c[i], '.', function(x) return string.format('%02x', string.byte(x)) end) end end "+
							"table.insert(c, 'now=' .. (t[1] * 1000 + math.floor(t[2] / 1000))) return c", "1", key).AsStrSlice()
						what += fmt.Sprintf(", %s %v", typ, content)
					}
					left = append(left, what+")")
				}
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			slices.Sort(left)
			s.h.fail("cleanliness: left in Redis %v after every Client closed: %s", within, strings.Join(left, ", "))
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
