package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/relock-go/relock"
	"go.uber.org/goleak"

	"github.com/relock-go/relock/internal/redistest"
)

// Short phases keep each run to a couple of seconds; the watchdog phase holds 2.5 x 500 ms.
var quick = []string{"--duration", "300ms", "--watchdog", "500ms"}

func demoArgs(extra ...string) []string {
	return append(append([]string{"demo"}, quick...), extra...)
}

// checkClean fails t if the output of a run shows a panic or a stack trace.
func checkClean(t *testing.T, outs ...string) {
	t.Helper()
	for _, s := range outs {
		if strings.Contains(s, "goroutine ") || strings.Contains(s, "panic") {
			t.Fatalf("output shows a panic or stack trace:\n%s", s)
		}
	}
}

// runDemoJSON runs relock demo --json with args, expects exit status 0, and checks the report is
// consistent: no update lost with the lock, counts add up, the watchdog kept the lock.
func runDemoJSON(t *testing.T, args ...string) demoReport {
	t.Helper()
	out, errOut, code := runBin(t, "", append(demoArgs("--json"), args...)...)
	checkClean(t, out, errOut)
	if code != 0 {
		t.Fatalf("relock demo --json %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, out, errOut)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out)
	}
	for _, k := range []string{"lock", "server", "workers", "processes", "duration_ms", "pause_ms", "without_lock",
		"with_lock", "handoff", "fencing", "watchdog", "ok", "problems"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("JSON has no %q field", k)
		}
	}
	var r demoReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if !r.OK || len(r.Problems) != 0 {
		t.Errorf("ok %v, problems %q", r.OK, r.Problems)
	}
	wl, wo := r.WithLock, r.WithoutLock
	if wl.Lost != 0 || wl.Expected != wl.Counted || wl.Expected <= 0 {
		t.Errorf("with_lock: %+v: want increments, none lost", wl)
	}
	if wl.TornReads != 0 {
		t.Errorf("with_lock: %d torn reads", wl.TornReads)
	}
	if wo.Expected <= 0 || wo.Lost != wo.Expected-wo.Counted || wo.Counted > wo.Expected {
		t.Errorf("without_lock: %+v: inconsistent counts", wo)
	}
	if wo.Lost == 0 {
		t.Logf("without_lock lost no update this time (unlikely, not an error): %+v", wo)
	}
	if r.Lock != demoRedLock {
		if r.Fencing == nil || !r.Fencing.Increasing || r.Fencing.Holds != int(wl.Expected) {
			t.Errorf("fencing: %+v, want increasing tokens over %d holds", r.Fencing, wl.Expected)
		}
	} else if r.Fencing != nil {
		t.Errorf("redlock: fencing %+v, want null", r.Fencing)
	}
	if h := r.Handoff; h != nil && (h.Count <= 0 || h.P50MS > h.P99MS || h.P99MS > h.MaxMS) {
		t.Errorf("handoff: %+v", h)
	}
	if w := r.Watchdog; w != nil {
		// The hold lasts 2.5 timeouts, renewed every timeout/3: about 7 renewals.
		if w.Lost || w.OtherGotIn || !w.ContenderAcquired || w.Renewals < 3 || w.MinPTTLMS <= 0 ||
			w.HeldMS < 2*w.TimeoutMS || w.ContenderWaitedMS < w.HeldMS/2 {
			t.Errorf("watchdog: %+v", w)
		}
		if r.Lock != demoRedLock && w.TokenContender <= w.TokenHolder {
			t.Errorf("watchdog: contender token %d not above holder's %d", w.TokenContender, w.TokenHolder)
		}
	}
	return r
}

func TestDemoDefault(t *testing.T) {
	out, errOut, code := runBin(t, "", demoArgs()...)
	checkClean(t, out, errOut)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{"Without a lock", "updates lost", "none lost", "handoff:", "fencing:",
		"watchdog:", "renewed", "OK: the lock lost no update."} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`with the lock: +[0-9,]+ increments, counter [0-9,]+: none lost`).MatchString(out) {
		t.Errorf("output does not say the lock lost none:\n%s", out)
	}
	if strings.Contains(out, "\r") {
		t.Errorf("progress uses \\r though stdout is not a terminal")
	}
}

func TestDemoInProcessLocks(t *testing.T) {
	for _, lock := range []string{demoRLock, demoFair, demoRW, demoRedLock} {
		t.Run(lock, func(t *testing.T) {
			r := runDemoJSON(t, "--embedded=inprocess", "--lock", lock)
			if r.Server.Mode != embedInProcess {
				t.Errorf("server mode %q", r.Server.Mode)
			}
			if n := len(r.Server.Addrs); (lock == demoRedLock) != (n == 3) {
				t.Errorf("%d servers", n)
			}
			if lock == demoRW && (r.WithLock.Reads == 0 || r.WithoutLock.Reads == 0) {
				t.Errorf("rw: readers did not read: %+v %+v", r.WithoutLock, r.WithLock)
			}
		})
	}
}

func TestDemoRedisServer(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip(redistest.InstallHint)
	}
	r := runDemoJSON(t, "--embedded=redis-server")
	if r.Server.Mode != embedRedisServer || r.Server.Version == "" {
		t.Errorf("server %+v", r.Server)
	}
	r = runDemoJSON(t, "--embedded=redis-server", "--lock", demoRedLock, "--watchdog", "0")
	if len(r.Server.Addrs) != 3 || r.Watchdog != nil {
		t.Errorf("redlock: server %+v, watchdog %+v", r.Server, r.Watchdog)
	}
}

func TestDemoProcesses(t *testing.T) {
	r := runDemoJSON(t, "--processes", "2", "--embedded=inprocess", "--watchdog", "0")
	if r.Processes != 2 || r.Workers != 4 {
		t.Errorf("processes %d, workers %d", r.Processes, r.Workers)
	}
	// More processes than the default 4 workers: one worker per process.
	r = runDemoJSON(t, "--processes", "5", "--lock", demoFair, "--watchdog", "0")
	if r.Processes != 5 || r.Workers != 5 {
		t.Errorf("processes %d, workers %d", r.Processes, r.Workers)
	}
}

// dbsize returns how many keys the server at addr has.
func dbsize(t *testing.T, addr string) int64 {
	t.Helper()
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	n, err := rdb.Do(context.Background(), rdb.B().Dbsize().Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestDemoExternalRedis(t *testing.T) {
	srv := redistest.Start(t)
	r := runDemoJSON(t, "--redis", srv.Addr(), "--lock", demoRW)
	if r.Server.Mode != "external" || r.Server.Addrs[0] != srv.Addr() {
		t.Errorf("server %+v", r.Server)
	}
	if n := dbsize(t, srv.Addr()); n != 0 {
		t.Errorf("the demo left %d keys behind", n)
	}

	servers := redistest.StartN(t, 3)
	addrs := []string{servers[0].Addr(), servers[1].Addr(), servers[2].Addr()}
	runDemoJSON(t, "--redis", strings.Join(addrs, ","), "--lock", demoRedLock)
	for _, a := range addrs {
		if n := dbsize(t, a); n != 0 {
			t.Errorf("the demo left %d keys behind on %s", n, a)
		}
	}
}

func TestDemoErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--redis", "127.0.0.1:1"}, 1, "cannot connect to Redis at 127.0.0.1:1"},
		{[]string{"--redis", "127.0.0.1:1", "--json"}, 1, "cannot connect to Redis at 127.0.0.1:1"},
		{[]string{"--redis", "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "--lock", "redlock"}, 1, "127.0.0.1:1"},
		{[]string{"--redis", "127.0.0.1:1,127.0.0.1:2", "--lock", "redlock"}, 2, "3 or more"},
		{[]string{"--redis", "nocolon"}, 2, "want host:port"},
		{[]string{"--lock", "mutex"}, 2, "--lock"},
		{[]string{"--workers", "0"}, 2, "--workers"},
		{[]string{"--workers", "2", "--processes", "3"}, 2, "--processes"},
		{[]string{"--duration", "0s"}, 2, "--duration"},
		{[]string{"--watchdog", "1ms"}, 2, "--watchdog"},
		{[]string{"--embedded", "docker"}, 2, "--embedded"},
		{[]string{"--embedded", "inprocess", "--redis", "127.0.0.1:6379"}, 2, "exclude"},
		{[]string{"extra"}, 2, "unexpected argument"},
	} {
		out, errOut, code := runBin(t, "", append([]string{"demo"}, tc.args...)...)
		checkClean(t, out, errOut)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("demo %v: exit %d, stderr %q; want exit %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
		if tc.code == 1 && strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("demo %v: want a one-line error, got:\n%s", tc.args, errOut)
		}
		if out != "" {
			t.Errorf("demo %v: stdout %q, want nothing", tc.args, out)
		}
	}
	out, errOut, code := runBin(t, "", "demo", "-h")
	if code != 0 || !strings.Contains(errOut, "-workers") || strings.Contains(errOut, "-embedded") || strings.Contains(errOut, "-child") {
		t.Errorf("demo -h: exit %d, stdout %q, stderr:\n%s", code, out, errOut)
	}
}

// demoChildren returns the pids of worker processes of relockBin.
func demoChildren(t *testing.T) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skip("no /proc")
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.HasPrefix(cmdline, []byte(relockBin+"\x00demo\x00--child")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestDemoInterrupt sends SIGINT to a demo with worker processes and an embedded redis-server, at several
// points, and checks it ends promptly, leaving no process behind.
func TestDemoInterrupt(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip(redistest.InstallHint)
	}
	addrRE := regexp.MustCompile(`at (127\.0\.0\.1:[0-9]+)`)
	for _, after := range []time.Duration{700 * time.Millisecond, 2500 * time.Millisecond} {
		cmd := exec.Command(relockBin, "demo", "--processes", "2", "--duration", "1s", "--embedded=redis-server")
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(after)
		if len(demoChildren(t)) == 0 {
			t.Errorf("after %v: no worker process seen", after)
		}
		_ = cmd.Process.Signal(syscall.SIGINT)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if cmd.ProcessState.ExitCode() != 1 || !strings.Contains(errOut.String(), "interrupted") {
				t.Errorf("after SIGINT at %v: %v, stderr %q", after, err, errOut.String())
			}
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("SIGINT at %v: the demo did not end", after)
		}
		checkClean(t, out.String(), errOut.String())
		if pids := demoChildren(t); len(pids) != 0 {
			t.Errorf("after SIGINT at %v: worker processes %v still running", after, pids)
		}
		if m := addrRE.FindStringSubmatch(out.String()); m == nil {
			t.Errorf("no server address in the output:\n%s", out.String())
		} else if c, err := net.DialTimeout("tcp", m[1], time.Second); err == nil {
			c.Close()
			t.Errorf("after SIGINT at %v: the embedded redis-server at %s still answers", after, m[1])
		}
	}
}

// TestDemoInProcess runs the demo in this process, under the race detector when it is on, and checks
// it leaves no goroutine behind, whether it completes or is cancelled.
func TestDemoInProcess(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, lock := range []string{demoRLock, demoRW} {
		var out, errOut bytes.Buffer
		args := demoArgs("--embedded=inprocess", "--lock", lock, "--workers", "3")
		if code := run(context.Background(), env{args: args, stdout: &out, stderr: &errOut}); code != 0 {
			t.Fatalf("%s: exit %d\n%s%s", lock, code, &out, &errOut)
		}
		if !strings.Contains(out.String(), "none lost") {
			t.Errorf("%s: output:\n%s", lock, &out)
		}
	}
	for _, after := range []time.Duration{200 * time.Millisecond, 900 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), after)
		var out, errOut bytes.Buffer
		start := time.Now()
		code := run(ctx, env{args: demoArgs("--embedded=inprocess"), stdout: &out, stderr: &errOut})
		cancel()
		if code != 1 || !strings.Contains(errOut.String(), "interrupted") || time.Since(start) > after+5*time.Second {
			t.Errorf("cancelled after %v: exit %d after %v, stderr %q", after, code, time.Since(start), &errOut)
		}
	}
}

// TestMiniredisLocks checks relock's locks work against the in-process server: mutual exclusion across
// Clients, waiters woken by the release message (not by the holder's TTL running out), leases expiring in
// real time, and the watchdog renewing holds.
func TestMiniredisLocks(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s, err := startInProcess()
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	ctx := context.Background()
	cfg := &demoConfig{Nodes: []string{s.addr}, Single: true, Timeout: 5 * time.Second}
	var clients []*relock.Client
	for range 3 {
		nodes, closeFn, err := cfg.dial(ctx) // default watchdog timeout: 30 s
		if err != nil {
			t.Fatal(err)
		}
		defer closeFn()
		clients = append(clients, nodes[0].lc)
	}
	type lockers struct {
		excl, shared func(c *relock.Client) relock.Locker
	}
	kinds := map[string]lockers{
		"rlock": {excl: func(c *relock.Client) relock.Locker { return c.Lock("m:rlock") }},
		"fair":  {excl: func(c *relock.Client) relock.Locker { return c.FairLock("m:fair") }},
		"rw": {
			excl:   func(c *relock.Client) relock.Locker { return c.ReadWriteLock("m:rw").WriteLock() },
			shared: func(c *relock.Client) relock.Locker { return c.ReadWriteLock("m:rw").ReadLock() },
		},
	}
	for name, k := range kinds {
		t.Run(name+"/exclusion", func(t *testing.T) {
			var inside, readers, maxReaders atomic.Int32
			var wg sync.WaitGroup
			for i := range 6 {
				c := clients[i%len(clients)]
				wg.Go(func() {
					for range 20 {
						shared := k.shared != nil && i%2 == 1
						l := k.excl(c)
						if shared {
							l = k.shared(c)
						}
						if err := l.Lock(ctx); err != nil {
							t.Error(err)
							return
						}
						if shared {
							n := readers.Add(1)
							if n > maxReaders.Load() {
								maxReaders.Store(n)
							}
							if inside.Load() != 0 {
								t.Error("a reader got in while a writer held the lock")
							}
							time.Sleep(time.Millisecond)
							readers.Add(-1)
						} else {
							if inside.Add(1) != 1 || readers.Load() != 0 {
								t.Error("two holders at once")
							}
							time.Sleep(200 * time.Microsecond)
							inside.Add(-1)
						}
						if err := l.Unlock(ctx); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
		})
		t.Run(name+"/wakeup", func(t *testing.T) {
			// The holder keeps the lock 300 ms; its TTL is the 30 s watchdog timeout, so a waiter that gets
			// the lock soon after the Unlock was woken by the release message.
			holder := k.excl(clients[0])
			if err := holder.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			waiters := []relock.Locker{k.excl(clients[1])}
			if k.shared != nil {
				waiters = append(waiters, k.shared(clients[2]))
			}
			got := make(chan time.Time, len(waiters))
			var wg sync.WaitGroup
			for _, w := range waiters {
				wg.Go(func() {
					wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					defer cancel()
					if err := w.Lock(wctx); err != nil {
						t.Error(err)
						got <- time.Time{}
						return
					}
					got <- time.Now()
					_ = w.Unlock(ctx)
				})
			}
			time.Sleep(300 * time.Millisecond)
			released := time.Now()
			if err := holder.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			close(got)
			for at := range got {
				if d := at.Sub(released); at.IsZero() || d > 3*time.Second {
					t.Errorf("a waiter got the lock %v after the release: not woken by pub/sub", d)
				}
			}
		})
	}
	t.Run("lease expires in real time", func(t *testing.T) {
		l := clients[0].Lock("m:lease")
		if err := l.LockWithLease(ctx, 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := clients[1].Lock("m:lease").Lock(ctx); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < 200*time.Millisecond || d > 3*time.Second {
			t.Errorf("got a lock with a 300 ms lease after %v", d)
		}
		_ = clients[1].Lock("m:lease").Unlock(ctx)
	})
	t.Run("watchdog renews", func(t *testing.T) {
		c := &demoConfig{Nodes: []string{s.addr}, Single: true, Timeout: 5 * time.Second, Watchdog: 300 * time.Millisecond}
		nodes, closeFn, err := c.dial(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer closeFn()
		for _, l := range []relock.Locker{nodes[0].lc.Lock("m:wd"), nodes[0].lc.FairLock("m:wdf"),
			nodes[0].lc.ReadWriteLock("m:wdrw").WriteLock(), nodes[0].lc.ReadWriteLock("m:wdrw2").ReadLock()} {
			if err := l.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			held, err := l.HoldContext(ctx)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second) // over 3 watchdog timeouts
			if err := context.Cause(held); err != nil {
				t.Errorf("%T: hold lost: %v", l, err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Errorf("%T: unlock after the hold outlived its TTL: %v", l, err)
			}
		}
	})
}

// With no redis-server on PATH, the default demo runs on the in-process server: Go alone is enough. (The
// redis-server RELOCK_REDIS_SERVER names, when the suite runs on another version, is hidden too.)
func TestDemoDefaultWithoutRedisServer(t *testing.T) {
	cmd := exec.Command(relockBin, demoArgs("--json")...)
	cmd.Env = append(os.Environ(), "PATH="+t.TempDir(), "RELOCK_REDIS=", redistest.ServerEnv+"=")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("relock demo with an empty PATH: %v\n%s%s", err, &out, &errOut)
	}
	var r demoReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v\n%s", err, &out)
	}
	if r.Server.Mode != embedInProcess || !r.OK || r.WithLock.Lost != 0 {
		t.Fatalf("server %+v, ok %v, with_lock %+v: want the in-process server, nothing lost", r.Server, r.OK, r.WithLock)
	}
}

// electionArgs are relock demo --election's arguments in tests, then extra: short tenures, and a 1 s
// watchdog timeout (a hand-over after a death or a stall waits for it; a shorter one leaves a loaded
// machine little room).
func electionArgs(extra ...string) []string {
	return append([]string{"demo", "--election", "--duration", "300ms", "--watchdog", "1s"}, extra...)
}

// runElectionJSON runs relock demo --election --json with args, expects exit status 0, and checks the
// report holds together: leaders in increasing terms, the three hand-overs in order between them, timely,
// the store's writes in term order, the stalled leader's late write rejected and the leader told.
func runElectionJSON(t *testing.T, args ...string) demoElectionReport {
	t.Helper()
	out, errOut, code := runBin(t, "", electionArgs(append([]string{"--json"}, args...)...)...)
	checkClean(t, out, errOut)
	if code != 0 {
		t.Fatalf("relock demo --election --json %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, out, errOut)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out)
	}
	for _, k := range []string{"election", "server", "candidates", "processes", "watchdog_ms", "tenure_ms", "leaders",
		"handovers", "writes", "stale_write", "stalled_lost", "ok", "problems"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("JSON has no %q field", k)
		}
	}
	var r demoElectionReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if !r.Election || !r.OK || len(r.Problems) != 0 {
		t.Errorf("election %v, ok %v, problems %q", r.Election, r.OK, r.Problems)
	}
	if r.WatchdogMS != 1000 || r.TenureMS != 300 {
		t.Errorf("watchdog_ms %v, tenure_ms %v", r.WatchdogMS, r.TenureMS)
	}
	// The first candidate leads first; each event hands over to a leader with a larger term.
	if len(r.Leaders) < 4 || r.Leaders[0].Value != "candidate-0" {
		t.Fatalf("leaders %+v: want candidate-0 first, then a leader after each of 3 events", r.Leaders)
	}
	var accepted, rejected int
	for i, l := range r.Leaders {
		if i > 0 && l.Term <= r.Leaders[i-1].Term {
			t.Errorf("leaders %+v: terms not increasing", r.Leaders)
		}
		if !strings.HasPrefix(l.Value, "candidate-") {
			t.Errorf("leader %+v", l)
		}
		accepted += l.WritesAccepted
		rejected += l.WritesRejected
	}
	w := r.Writes
	if !w.InTermOrder || w.Accepted <= 0 || accepted != w.Accepted || rejected != w.Rejected {
		t.Errorf("writes %+v; by the leaders: %d accepted, %d rejected", w, accepted, rejected)
	}
	if len(r.Handovers) != 3 {
		t.Fatalf("handovers %+v: want 3", r.Handovers)
	}
	for i, h := range r.Handovers {
		want := []string{handResign, handDeath, handStall}[i]
		next := r.Leaders[i+1]
		if h.Event != want || h.To != next.Value || h.ToTerm != next.Term || h.From != r.Leaders[i].Value ||
			h.FromTerm != r.Leaders[i].Term || h.ToTerm <= h.FromTerm {
			t.Errorf("hand-over %d: %+v; leaders %+v", i, h, r.Leaders)
		}
		// A resignation hands over at once. A dead or stalled leader's hold, renewed every third of the
		// watchdog timeout, has at least two thirds of it left: its successor waits for that, no longer than
		// two timeouts (judge's limit).
		switch {
		case h.TookMS < 0 || h.TookMS > 2*r.WatchdogMS:
			t.Errorf("hand-over %+v: over twice the watchdog timeout", h)
		case h.Event == handResign && h.TookMS > r.WatchdogMS/2:
			t.Errorf("hand-over %+v: a resignation did not hand over at once", h)
		case h.Event != handResign && h.TookMS < r.WatchdogMS/2:
			t.Errorf("hand-over %+v: sooner than the dead or stalled leader's hold could expire", h)
		}
	}
	stall := r.Handovers[2]
	if s := r.StaleWrite; s != nil {
		if s.Accepted || s.Value != stall.From || s.Term != stall.FromTerm || s.StoreTerm < stall.ToTerm || w.Rejected < 1 {
			t.Errorf("stale_write %+v after the stall %+v: want it rejected, the store at the new term or above", s, stall)
		}
	} else if r.Processes == 0 {
		// In this process the stalled leader's write is held back with its commands: it always has one.
		t.Errorf("stale_write null: the stalled leader's write was not seen")
	} else {
		// The demo pauses a worker process just after one of its writes, mid-sleep, so that it writes as soon
		// as it resumes; a demo a tick late to pause it may catch its next write on the way to Redis, after
		// which the leader sees its leadership end and writes no more.
		t.Logf("the paused leader made no write after it resumed (possible, rare): %+v", r)
	}
	if !r.StalledLost {
		t.Errorf("stalled_lost false: the stalled leader was not told")
	}
	return r
}

func TestDemoElection(t *testing.T) {
	t.Run("inprocess", func(t *testing.T) {
		r := runElectionJSON(t, "--embedded=inprocess")
		if r.Server.Mode != embedInProcess || r.Candidates != 3 || r.Processes != 0 {
			t.Errorf("server %+v, candidates %d, processes %d", r.Server, r.Candidates, r.Processes)
		}
	})
	t.Run("redis-server", func(t *testing.T) {
		if _, err := exec.LookPath("redis-server"); err != nil {
			t.Skip(redistest.InstallHint)
		}
		r := runElectionJSON(t, "--embedded=redis-server", "--workers", "4")
		if r.Server.Mode != embedRedisServer || r.Server.Version == "" || r.Candidates != 4 {
			t.Errorf("server %+v, candidates %d", r.Server, r.Candidates)
		}
	})
	t.Run("processes", func(t *testing.T) {
		r := runElectionJSON(t, "--embedded=inprocess", "--processes", "3")
		if r.Candidates != 3 || r.Processes != 3 {
			t.Errorf("candidates %d, processes %d", r.Candidates, r.Processes)
		}
		if pids := demoChildren(t); len(pids) != 0 {
			t.Errorf("worker processes %v still running", pids)
		}
	})
	t.Run("external", func(t *testing.T) {
		// The stream of leaders and the fencing counter persist by design: the demo removes them.
		srv := redistest.Start(t)
		r := runElectionJSON(t, "--redis", srv.Addr())
		if r.Server.Mode != "external" || r.Server.Addrs[0] != srv.Addr() {
			t.Errorf("server %+v", r.Server)
		}
		if n := dbsize(t, srv.Addr()); n != 0 {
			t.Errorf("the demo left %d keys behind", n)
		}
	})
}

// TestDemoElectionInProcess runs the election demo in this process, under the race detector when it is
// on, and checks its story and that it leaves no goroutine behind, whether it completes or is cancelled
// (before the first event, while a dead leader's hold runs out, during the stall).
func TestDemoElectionInProcess(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var out, errOut bytes.Buffer
	if code := run(context.Background(), env{args: electionArgs("--embedded=inprocess"), stdout: &out, stderr: &errOut}); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, &out, &errOut)
	}
	for _, re := range []string{
		`candidate-0 leads, with term 1\n`,
		`observer: the leader is candidate-0, term 1\n`,
		`candidate-1, candidate-2 wait in the queue, in that order`,
		`candidate-0 resigns \([0-9]+ writes? accepted with term 1\), and campaigns again`,
		`candidate-1 leads, with term 2, [0-9.]+ms after the resignation`,
		`candidate-1 dies \(`,
		`candidate-2 leads, with term 3, [0-9.]+m?s after the death`,
		`candidate-2 stalls \(`,
		`candidate-0 leads, with term 4, [0-9.]+m?s after the stall`,
		`observer: the leader is candidate-0, term 4\n`,
		`candidate-2's write with term 3 is rejected: the store is at term 4`,
		`candidate-2 learns that it lost the leadership \(relock: lock lost`,
		`hand-overs: +resignation [0-9.]+ms, death [0-9.]+m?s, stall [0-9.]+m?s \(watchdog timeout 1.00s\)`,
		`store: +[0-9]+ writes accepted, in term order; 1 rejected`,
		`OK: one leader at a time`,
	} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("output lacks %q:\n%s", re, &out)
		}
	}
	for _, after := range []time.Duration{200 * time.Millisecond, 1500 * time.Millisecond, 2300 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), after)
		var out, errOut bytes.Buffer
		start := time.Now()
		code := run(ctx, env{args: electionArgs("--embedded=inprocess"), stdout: &out, stderr: &errOut})
		cancel()
		if code != 1 || !strings.Contains(errOut.String(), "interrupted") || time.Since(start) > after+5*time.Second {
			t.Errorf("cancelled after %v: exit %d after %v, stderr %q\n%s", after, code, time.Since(start), &errOut, &out)
		}
	}
}

// TestDemoElectionInterrupt sends SIGINT to an election demo with worker processes and an embedded
// redis-server, as soon as it says a leader died (its hold runs out) and as soon as it says a leader's
// process is paused (SIGSTOP), and checks it ends promptly, leaving no process behind: not even the paused
// one.
func TestDemoElectionInterrupt(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip(redistest.InstallHint)
	}
	addrRE := regexp.MustCompile(`at (127\.0\.0\.1:[0-9]+)`)
	for _, at := range []string{" dies (", " stalls ("} {
		cmd := exec.Command(relockBin, electionArgs("--processes", "3", "--embedded=redis-server")...)
		cmd.Env = append(os.Environ(), "RELOCK_REDIS=")
		var errOut bytes.Buffer
		cmd.Stderr = &errOut
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		guard := time.AfterFunc(time.Minute, func() { _ = cmd.Process.Kill() })
		var out strings.Builder
		var sent time.Time
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			if sent.IsZero() && strings.Contains(sc.Text(), at) {
				if len(demoChildren(t)) == 0 {
					t.Errorf("at %q: no worker process seen", at)
				}
				_ = cmd.Process.Signal(syscall.SIGINT)
				sent = time.Now()
			}
		}
		err = cmd.Wait()
		guard.Stop()
		took := time.Since(sent)
		t.Logf("SIGINT at %q: the demo ended %v later", at, took)
		checkClean(t, out.String(), errOut.String())
		if sent.IsZero() {
			t.Fatalf("the demo never said %q: %v\n%s%s", at, err, &out, &errOut)
		}
		// Every worker process ends of itself (the paused one once resumed): none waits to be killed.
		if took >= demoCleanupLimit {
			t.Errorf("SIGINT at %q: the demo took %v to end", at, took)
		}
		if cmd.ProcessState.ExitCode() != 1 || !strings.Contains(errOut.String(), "interrupted") {
			t.Errorf("SIGINT at %q: %v, stderr %q\n%s", at, err, errOut.String(), &out)
		}
		if pids := demoChildren(t); len(pids) != 0 {
			t.Errorf("after SIGINT at %q: worker processes %v still running", at, pids)
		}
		if m := addrRE.FindStringSubmatch(out.String()); m == nil {
			t.Errorf("no server address in the output:\n%s", &out)
		} else if c, err := net.DialTimeout("tcp", m[1], time.Second); err == nil {
			c.Close()
			t.Errorf("after SIGINT at %q: the embedded redis-server at %s still answers", at, m[1])
		}
	}
}

// Flags that --election does not take, or takes otherwise, are usage errors, told in one line.
func TestDemoElectionErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--lock", "fair"}, "--election and --lock exclude each other"},
		{[]string{"--pause", "2ms"}, "--election and --pause exclude each other"},
		{[]string{"--workers", "2"}, "--workers 2: --election wants 3 to"},
		{[]string{"--processes", "2"}, "--processes 2: --election wants 3 to"},
		{[]string{"--processes", "3", "--workers", "4"}, "one candidate per process"},
		{[]string{"--watchdog", "0"}, "--election wants a watchdog timeout"},
		{[]string{"--watchdog", "10ms"}, "--election wants a watchdog timeout"},
		{[]string{"--duration", "0s"}, "--duration"},
	} {
		out, errOut, code := runBin(t, "", append([]string{"demo", "--election"}, tc.args...)...)
		checkClean(t, out, errOut)
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if code != 2 || len(lines) != 2 || !strings.HasPrefix(lines[0], "relock demo: usage: ") ||
			!strings.Contains(lines[0], tc.want) || lines[1] != "Run 'relock demo -h' for usage." {
			t.Errorf("demo --election %v: exit %d, stderr %q; want exit 2 and one line with %q, then the hint", tc.args, code, errOut, tc.want)
		}
		if out != "" {
			t.Errorf("demo --election %v: stdout %q, want nothing", tc.args, out)
		}
	}
	_, errOut, code := runBin(t, "", "demo", "-h")
	if code != 0 || !strings.Contains(errOut, "-election") || !strings.Contains(errOut, "With --election") {
		t.Errorf("demo -h: exit %d, stderr:\n%s", code, errOut)
	}
}

// TestDemoKilledLeavesNoServer kills a demo that runs an embedded redis-server and worker processes with
// SIGKILL, which it cannot catch: its redis-server and its workers must end with it, not run on orphaned
// (on Linux, the kernel's parent-death signal ends them).
func TestDemoKilledLeavesNoServer(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only Linux has a parent-death signal")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip(redistest.InstallHint)
	}
	addrRE := regexp.MustCompile(`at (127\.0\.0\.1:[0-9]+)`)
	cmd := exec.Command(relockBin, "demo", "--processes", "2", "--duration", "20s", "--embedded=redis-server")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := addrRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	var server string
	select {
	case server = <-addr:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal("the demo printed no server address")
	}
	waitFor(t, func() bool { return len(demoChildren(t)) == 2 })
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", server, time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("the embedded redis-server at %s still answers 5 s after the demo was killed", server)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); len(demoChildren(t)) > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("worker processes %v still run 5 s after the demo was killed", demoChildren(t))
		}
	}
}
