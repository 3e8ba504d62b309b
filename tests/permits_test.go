package tests

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

func init() {
	// permit-holder takes a permit of the expirable semaphore SEM on REDIS_ADDR (1 s watchdog timeout),
	// prints "permit", and holds it until its context ends, then prints how it ended.
	helpers["permit-holder"] = func() error {
		c, err := relock.New([]string{os.Getenv("REDIS_ADDR")}, &relock.Options{WatchdogTimeout: time.Second})
		if err != nil {
			return err
		}
		defer c.Close()
		ctx := context.Background()
		p, err := c.PermitSemaphore(os.Getenv("SEM")).Acquire(ctx)
		if err != nil {
			return err
		}
		held, err := p.Context(ctx)
		if err != nil {
			return err
		}
		fmt.Println("permit")
		<-held.Done()
		fmt.Printf("ended cause=%q\n", context.Cause(held))
		return nil
	}
}

// TestPermitsUnderFaults: holders of an expirable semaphore's permits are killed (SIGKILL) and stopped
// (SIGSTOP) past the watchdog timeout. A checker samples the semaphore all along: the permits taken never
// exceed the limit, and available + taken always equals it (no permit lost for good, none made up). A
// killed holder's permit comes back to a waiter within the timeout; a stopped one's too, and the stopped
// holder, resumed, is told its permit was lost.
func TestPermitsUnderFaults(t *testing.T) {
	t.Parallel()
	srv := server(t)
	rdb := rawClient(t, srv.Addr())
	c := newClient(t, []string{srv.Addr()}, &relock.Options{WatchdogTimeout: time.Second})
	const limit = 2
	s := &summary{scenario: "permits-under-faults"}
	ctx := ctxTimeout(t, 60*time.Second)
	rounds := 1 + int(*soak/(10*time.Second))
	var worstBack time.Duration
	for round := range rounds {
		sem := "permits:" + strconv.Itoa(round)
		if _, err := c.PermitSemaphore(sem).TrySetPermits(ctx, limit); err != nil {
			t.Fatal(err)
		}
		// The checker: available + taken == limit, taken <= limit, at every sample.
		check := checkPermits(rdb, sem, "{"+sem+"}:timeout", limit)

		killed, killedLines := startHelper(t, "permit-holder", "REDIS_ADDR="+srv.Addr(), "SEM="+sem)
		expectLine(t, killedLines, "permit", 10*time.Second)
		stopped, stoppedLines := startHelper(t, "permit-holder", "REDIS_ADDR="+srv.Addr(), "SEM="+sem)
		expectLine(t, stoppedLines, "permit", 10*time.Second)
		s.ops += 2

		// Killed: its permit comes back to a waiter within the watchdog timeout.
		if err := killed.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		s.faults++
		start := time.Now()
		p1, err := c.PermitSemaphore(sem).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		worstBack = max(worstBack, time.Since(start))
		// Stopped past the timeout: its permit comes back too, and it is told when it resumes.
		if err := stopped.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		s.faults++
		start = time.Now()
		p2, err := c.PermitSemaphore(sem).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		worstBack = max(worstBack, time.Since(start))
		s.ops += 2
		if err := stopped.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		ended := expectLine(t, stoppedLines, "ended ", 10*time.Second)
		if !strings.Contains(ended, "lock lost") {
			s.violations++
			s.note("round %d: the stopped holder's permit ended with %s, want a loss", round, ended)
		}
		for _, p := range []*relock.Permit{p1, p2} {
			if err := p.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		_ = stopped.Wait()
		_ = killed.Wait()
		if back, state := permitsBack(c, rdb, sem, limit, 5*time.Second); !back {
			s.violations++
			s.note("round %d: the permits are not back at the end: %s", round, state)
		}
		samples, bad, first, _ := check.finish()
		if bad > 0 {
			s.violations += bad
			s.note("round %d: %d bad samples, the first: %s", round, bad, first)
		}
		s.note("round %d: %d samples", round, samples)
	}
	s.note("a dead or stopped holder's permit back within %v (watchdog timeout 1s)", worstBack.Round(time.Millisecond))
	s.report(t, true)
}

// TestPermitsCheckerCatchesViolations: the permit checker reports a semaphore whose counter was raised
// behind its back (a permit made up), one with a fake permit in its taken set, and one whose counter is
// gone; and none while permits move between the counter and the set, one script at a time, as fast as a
// client can move them.
func TestPermitsCheckerCatchesViolations(t *testing.T) {
	t.Parallel()
	srv := server(t)
	rdb := rawClient(t, srv.Addr())
	c := newClient(t, []string{srv.Addr()}, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	const sem, timeouts, limit = "checked", "{checked}:timeout", 3
	if ok, err := c.PermitSemaphore(sem).TrySetPermits(ctx, limit); !ok || err != nil {
		t.Fatalf("TrySetPermits = %v, %v", ok, err)
	}
	check := checkPermits(rdb, sem, timeouts, limit)
	sampled := func(want int64) {
		t.Helper()
		before := check.samples.Load()
		for deadline := time.Now().Add(5 * time.Second); check.samples.Load() < before+5; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the checker takes no samples")
			}
		}
		if bad := check.bad.Load(); (want == 0) != (bad == 0) {
			t.Fatalf("bad samples = %d, want %s", bad, map[bool]string{true: "none", false: "some"}[want == 0])
		}
	}
	// Permits taken and given back by relock, and moved by a script of the test's own, in a tight loop.
	move := rueidis.NewLuaScript(`
if redis.call('zrem', KEYS[2], ARGV[1]) == 1 then
  redis.call('incr', KEYS[1])
elseif tonumber(redis.call('get', KEYS[1])) > 0 then
  redis.call('decr', KEYS[1])
  redis.call('zadd', KEYS[2], 9999999999999, ARGV[1])
end`)
	var wg sync.WaitGroup
	moving := time.Now().Add(500 * time.Millisecond)
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(moving); i++ {
				if g == 0 {
					p, err := c.PermitSemaphore(sem).Acquire(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					if err := p.Release(ctx); err != nil {
						t.Error(err)
						return
					}
					continue
				}
				_ = move.Exec(ctx, rdb, []string{sem, timeouts}, []string{"mover" + strconv.Itoa(i%2)}).Error()
			}
		}()
	}
	wg.Wait()
	sampled(0)
	samples, _, _, _ := check.finish()
	// Put back what the mover holds (in two commands: no checker runs now).
	for _, id := range []string{"mover0", "mover1"} {
		if n, _ := do(t, rdb, "ZREM", timeouts, id).AsInt64(); n == 1 {
			do(t, rdb, "INCR", sem)
		}
	}

	for _, c := range []struct {
		name         string
		break_, mend []string
	}{
		{"a permit made up", []string{"INCRBY", sem, "1"}, []string{"DECRBY", sem, "1"}},
		{"a fake permit taken", []string{"ZADD", timeouts, "1", "fake"}, []string{"ZREM", timeouts, "fake"}},
		{"a permit lost", []string{"DECRBY", sem, "1"}, []string{"INCRBY", sem, "1"}},
		{"the counter gone", []string{"RENAME", sem, sem + ":away"}, []string{"RENAME", sem + ":away", sem}},
	} {
		check = checkPermits(rdb, sem, timeouts, limit)
		sampled(0)
		do(t, rdb, c.break_...)
		sampled(1)
		do(t, rdb, c.mend...)
		_, bad, first, _ := check.finish()
		t.Logf("%s: %d bad samples, the first: %s", c.name, bad, first)
	}
	// And a plain semaphore's checker: more available than its limit.
	do(t, rdb, "SET", "plain", "3")
	check = checkPermits(rdb, "plain", "", limit)
	sampled(0)
	do(t, rdb, "INCR", "plain")
	sampled(1)
	check.finish()
	t.Logf("%d samples while permits moved, none bad", samples)
}

// permitsBack waits until every permit of the expirable semaphore name is back (available == limit, none
// taken), and returns the state it saw last. A permit whose holder is gone comes back once it expired, when
// an acquisition or a release finds it so: permitsBack takes and gives back a permit through c now and then.
func permitsBack(c *relock.Client, rdb rueidis.Client, name string, limit int64, within time.Duration) (bool, string) {
	keys := []string{name, "{" + name + "}:timeout"}
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		v, err := permitSample.Exec(ctx, rdb, keys, nil).AsIntSlice()
		if err == nil && len(v) == 3 && v[0] == 1 && v[1] == limit && v[2] == 0 {
			cancel()
			return true, ""
		}
		state := fmt.Sprintf("set, available, taken = %v (%v)", v, err)
		if time.Now().After(deadline) {
			cancel()
			return false, state
		}
		if p, ok, err := c.PermitSemaphore(name).TryAcquire(ctx, 0, 0); err == nil && ok {
			_ = p.Release(ctx)
		}
		cancel()
		time.Sleep(50 * time.Millisecond)
	}
}

// permitStats counts what permit holders saw.
type permitStats struct {
	held, lost, acquireErrs, releaseRetries, stuck atomic.Int64
	oddEnd                                         atomic.Value // a cause of a permit's end that is not a loss
	ids                                            sync.Map     // the ids of the permits taken
}

// holdPermit takes a permit of sem under ctx, holds it for d, and gives it back. It records in iv when it
// believed it held the permit: from Acquire's return until it went to release it, or until the permit's
// context ended with a loss (ErrLockLost), if that came first. A release whose outcome is unknown is sent
// again (a permit is released by its id, never twice) until it is answered. beforeRelease, if not nil, runs
// just before the release is sent. It reports whether it got a permit.
func holdPermit(ctx context.Context, sem *relock.PermitSemaphore, d time.Duration, iv *intervals, st *permitStats, beforeRelease func()) bool {
	p, err := sem.Acquire(ctx)
	if err != nil {
		st.acquireErrs.Add(1)
		return false
	}
	start := time.Now()
	end := start
	st.ids.Store(p.ID(), true)
	if held, err := p.Context(context.Background()); err != nil {
		st.lost.Add(1) // lost before it could be watched: it counts for no time
	} else {
		timer := time.NewTimer(d)
		select {
		case <-held.Done():
			end = time.Now()
			st.lost.Add(1)
			if cause := context.Cause(held); !errors.Is(cause, relock.ErrLockLost) {
				st.oddEnd.Store(cause.Error())
			}
		case <-timer.C:
			end = time.Now()
		}
		timer.Stop()
	}
	iv.add(start, end)
	st.held.Add(1)
	if beforeRelease != nil {
		beforeRelease()
	}
	for deadline := time.Now().Add(15 * time.Second); ; {
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := p.Release(rctx)
		cancel()
		if err == nil || errors.Is(err, relock.ErrNotHeld) {
			return true
		}
		if time.Now().After(deadline) {
			st.stuck.Add(1)
			return true
		}
		st.releaseRetries.Add(1)
		time.Sleep(20 * time.Millisecond)
	}
}

// permitsOutcome adds to s what a scenario's checkers saw: bad samples, more holders at once than the
// limit, permits not back at the end; and notes what the holders saw.
func permitsOutcome(s *summary, check *permitChecker, iv *intervals, st *permitStats, limit int, back bool, state string) {
	samples, bad, first, errs := check.finish()
	over, most := iv.beyond(limit)
	s.violations += bad + over
	if !back {
		s.violations++
		s.note("the permits are not back at the end: %s", state)
	}
	s.note("%d atomic samples (%d failed reads), %d bad", samples, errs, bad)
	if bad > 0 {
		s.note("the first bad sample: %s", first)
	}
	s.note("at most %d of %d holders at once, %d times more", most, limit, over)
	s.note("%d permits lost (their holders told), %d acquisitions failed, %d releases sent again", st.lost.Load(), st.acquireErrs.Load(), st.releaseRetries.Load())
	if n := st.stuck.Load(); n > 0 {
		s.violations += n
		s.note("%d releases never answered", n)
	}
	if odd := st.oddEnd.Load(); odd != nil {
		s.violations++
		s.note("a permit ended while held without a loss: %v", odd)
	}
}

// TestPermitsUnderLatencySpikes: 12 goroutines on 3 Clients take and give back permits of an expirable
// semaphore of 3, through a proxy whose latency jumps from 0 to 200-400 ms each way and back, again and
// again (a 3 s watchdog timeout renews every second). At no instant do more than 3 holders believe they
// hold a permit (a holder told of a loss stops counting then), every atomic sample has available + taken
// == 3, and every permit is back at the end.
func TestPermitsUnderLatencySpikes(t *testing.T) {
	t.Parallel()
	srv := server(t)
	proxy := startProxy(t, srv)
	rdb := rawClient(t, srv.Addr())
	opts := &relock.Options{WatchdogTimeout: 3 * time.Second}
	direct := newClient(t, []string{srv.Addr()}, opts)
	var clients []*relock.Client
	for range 3 {
		clients = append(clients, newClient(t, []string{proxy.Addr}, opts))
	}
	const name, limit = "spiky-permits", 3
	ctx := ctxTimeout(t, 60*time.Second)
	if ok, err := direct.PermitSemaphore(name).TrySetPermits(ctx, limit); !ok || err != nil {
		t.Fatalf("TrySetPermits = %v, %v", ok, err)
	}
	s := &summary{scenario: "permits-latency-spikes"}
	check := checkPermits(rdb, name, "{"+name+"}:timeout", limit)
	stop := make(chan struct{})
	var faults atomic.Int64
	var spiking sync.WaitGroup
	spiking.Add(1)
	go func() {
		defer spiking.Done()
		defer proxy.SetLatency(0)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(100+rand.IntN(200)) * time.Millisecond):
			}
			proxy.SetLatency(time.Duration(200+rand.IntN(200)) * time.Millisecond)
			faults.Add(1)
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(100+rand.IntN(300)) * time.Millisecond):
			}
			proxy.SetLatency(0)
		}
	}()
	var iv intervals
	var st permitStats
	end := time.Now().Add(workload(4 * time.Second))
	var wg sync.WaitGroup
	for _, c := range clients {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem := c.PermitSemaphore(name)
				for time.Now().Before(end) {
					actx, cancel := context.WithTimeout(ctx, 10*time.Second)
					holdPermit(actx, sem, time.Duration(5+rand.IntN(25))*time.Millisecond, &iv, &st, nil)
					cancel()
				}
			}()
		}
	}
	wg.Wait()
	close(stop)
	spiking.Wait()
	back, state := permitsBack(direct, rdb, name, limit, 5*time.Second)
	s.ops, s.faults = st.held.Load(), faults.Load()
	permitsOutcome(s, check, &iv, &st, limit, back, state)
	if st.held.Load() == 0 {
		t.Error("no permit was taken")
	}
	s.report(t, true)
}

// aof makes a test server persist every write before it answers (appendonly yes, appendfsync always), so
// that what a client was told survives a restart.
var aof = []string{"--appendonly", "yes", "--appendfsync", "always"}

// restartEvery restarts srv (SIGKILL, then a new process on the same port, which loads the AOF) every
// 600-1000 ms until stop is closed, and counts the restarts and those made while permits were taken.
func restartEvery(t *testing.T, srv *redistest.Server, rdb rueidis.Client, timeouts string, stop <-chan struct{}, restarts, whileHeld *atomic.Int64) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(600+rand.IntN(400)) * time.Millisecond):
		}
		if timeouts != "" {
			if n, err := do(t, rdb, "ZCARD", timeouts).AsInt64(); err == nil && n > 0 {
				whileHeld.Add(1)
			}
		}
		if err := srv.Restart(); err != nil {
			t.Error(err)
			return
		}
		restarts.Add(1)
	}
}

// underRestarts runs 6 workers on the workload's time while restartEvery restarts srv, and returns the
// restarts made and how many of them found permits taken (timeouts: see restartEvery). Worker g calls
// hold with a hold time, 20-150 ms (worker 0: 1.2 s, across a restart), until the time is up; hold reports
// whether it got the permit, and a worker that did not waits 20 ms before it tries again, so as not to spin
// while the server is down.
func underRestarts(t *testing.T, srv *redistest.Server, rdb rueidis.Client, timeouts string, ctx context.Context,
	hold func(ctx context.Context, g int, d time.Duration) bool) (restarts, whileHeld int64) {
	stop := make(chan struct{})
	var made, held atomic.Int64
	var restarting sync.WaitGroup
	restarting.Add(1)
	go func() {
		defer restarting.Done()
		restartEvery(t, srv, rdb, timeouts, stop, &made, &held)
	}()
	end := time.Now().Add(workload(4 * time.Second))
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				d := time.Duration(20+rand.IntN(130)) * time.Millisecond
				if g == 0 {
					d = 1200 * time.Millisecond // across a restart
				}
				actx, cancel := context.WithTimeout(ctx, 10*time.Second)
				if !hold(actx, g, d) {
					time.Sleep(20 * time.Millisecond)
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	close(stop)
	restarting.Wait()
	return made.Load(), held.Load()
}

// TestPermitsAcrossAOFRestart: goroutines on 2 Clients take and give back permits of an expirable semaphore
// of 3 (one of them holding each for 1.2 s) while redis-server, persisting every write (AOF, fsync always),
// is killed and restarted on its port again and again. Permits held across a restart are still held after
// it (none is lost); at no instant do more than 3 holders believe they hold, every atomic sample has available + taken ==
// 3 (a failed read while the server is down is not a sample), and every permit is back at the end: none lost
// for good.
func TestPermitsAcrossAOFRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, aof...)
	rdb := rawClient(t, srv.Addr())
	opts := &relock.Options{WatchdogTimeout: 3 * time.Second}
	clients := []*relock.Client{newClient(t, []string{srv.Addr()}, opts), newClient(t, []string{srv.Addr()}, opts)}
	const name, limit = "restarted-permits", 3
	ctx := ctxTimeout(t, 60*time.Second)
	if ok, err := clients[0].PermitSemaphore(name).TrySetPermits(ctx, limit); !ok || err != nil {
		t.Fatalf("TrySetPermits = %v, %v", ok, err)
	}
	s := &summary{scenario: "permits-aof-restart"}
	check := checkPermits(rdb, name, "{"+name+"}:timeout", limit)
	var iv intervals
	var st permitStats
	restarts, whileHeld := underRestarts(t, srv, rdb, "{"+name+"}:timeout", ctx, func(ctx context.Context, g int, hold time.Duration) bool {
		return holdPermit(ctx, clients[g%2].PermitSemaphore(name), hold, &iv, &st, nil)
	})
	back, state := permitsBack(clients[0], rdb, name, limit, 6*time.Second)
	s.ops, s.faults = st.held.Load(), restarts
	permitsOutcome(s, check, &iv, &st, limit, back, state)
	s.note("%d restarts, %d of them with permits taken", restarts, whileHeld)
	// The AOF keeps every permit a holder was told it took, and a restart is far shorter than the watchdog
	// timeout: a permit lost across one is a violation.
	s.violations += st.lost.Load()
	if restarts == 0 || st.held.Load() == 0 {
		t.Errorf("%d restarts, %d permits taken: the scenario did not run", restarts, st.held.Load())
	}
	s.report(t, true)
}
