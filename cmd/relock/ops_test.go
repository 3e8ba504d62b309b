package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// The operator commands' end-to-end tests: the built binary (relockBin, see testmain_test.go) against real
// redis-server processes, on locks the tests hold through the library.

func newLockClient(t *testing.T, addrs []string) *relock.Client {
	t.Helper()
	c, err := relock.New(addrs, &relock.Options{WatchdogTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mustRun runs the binary and fails t unless it exits with want.
func mustRun(t *testing.T, want int, stdin string, args ...string) (string, string) {
	t.Helper()
	out, errOut, code := runBin(t, stdin, args...)
	if code != want {
		t.Fatalf("relock %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, want, out, errOut)
	}
	for _, s := range []string{out, errOut} {
		if strings.Contains(s, "panic") || strings.Contains(s, "goroutine ") && strings.Contains(s, "[running]") {
			t.Fatalf("relock %s crashed:\n%s", strings.Join(args, " "), s)
		}
	}
	return out, errOut
}

func inspectJSON(t *testing.T, addr, name string) lockJSON {
	t.Helper()
	out, _ := mustRun(t, 0, "", "inspect", name, "--redis", addr, "--json")
	var j lockJSON
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatalf("inspect --json printed %q: %v", out, err)
	}
	return j
}

// opsOn runs the operator commands' checks on one deployment (addr: what --redis gets).
func opsOn(t *testing.T, addrs []string, prefix string) {
	addr := strings.Join(addrs, ",")
	c := newLockClient(t, addrs)
	ctx := testCtx(t)

	t.Run("inspect free", func(t *testing.T) {
		if j := inspectJSON(t, addr, prefix+"free"); j.Kind != "none" || j.Locked || len(j.Holders) != 0 {
			t.Fatalf("%+v", j)
		}
		out, _ := mustRun(t, 0, "", "inspect", prefix+"free", "--redis", addr)
		if !strings.Contains(out, "free") {
			t.Fatalf("output: %s", out)
		}
	})

	t.Run("inspect rlock", func(t *testing.T) {
		name := prefix + "orders:42"
		l := c.Lock(name, relock.WithFencing())
		job := relock.WithOwner(ctx, "job-7")
		for range 2 {
			if err := l.Lock(job); err != nil {
				t.Fatal(err)
			}
		}
		token, err := l.FencingToken(job)
		if err != nil {
			t.Fatal(err)
		}
		j := inspectJSON(t, addr, name)
		if j.Kind != "rlock" || !j.Locked || len(j.Holders) != 1 || j.FencingToken != token || j.TTLMillis <= 0 || j.TTLMillis > 1000 {
			t.Fatalf("%+v, want held by job-7 with token %d and a TTL within the 1 s watchdog timeout", j, token)
		}
		if h := j.Holders[0]; h.Token != "job-7" || h.ClientID != c.ID() || h.Count != 2 || h.Goroutine {
			t.Fatalf("holder %+v", h)
		}
		if h := j.Holders[0]; h.Connections == nil || len(*h.Connections) == 0 || !strings.HasPrefix((*h.Connections)[0], "127.0.0.1:") {
			t.Fatalf("holder's connections %v: want the holding Client's, from 127.0.0.1", h.Connections)
		}
		out, _ := mustRun(t, 0, "", "inspect", name, "--redis", addr)
		for _, want := range []string{"RLock, held", "owner job-7 of client " + c.ID(), "hold count 2", "fencing token: ",
			"its client is connected from 127.0.0.1 ("} {
			if !strings.Contains(out, want) {
				t.Errorf("inspect output lacks %q:\n%s", want, out)
			}
		}

		// A holder whose process is gone: its connections closed without unlocking (the hold lives out its
		// lease). Its Client's Close, which would release the hold, finds them closed.
		goneRdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		gone, err := relock.Wrap(goneRdb, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := gone.Lock(prefix+"abandoned").LockWithLease(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		goneRdb.Close()
		gone.Close()
		waitFor(t, func() bool {
			j := inspectJSON(t, addr, prefix+"abandoned")
			return len(j.Holders) == 1 && j.Holders[0].Connections != nil && len(*j.Holders[0].Connections) == 0
		})
		out, _ = mustRun(t, 0, "", "inspect", prefix+"abandoned", "--redis", addr)
		if want := "no connection is named relock-" + gone.ID() + ": its process is gone"; !strings.Contains(out, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, out)
		}
		mustRun(t, 0, "", "unlock", "--force", "--yes", prefix+"abandoned", "--redis", addr)

		// A lock key without expiry, written by something else than relock (here, by hand).
		raw, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		if err := raw.Do(ctx, raw.B().Hset().Key(prefix+"forever").FieldValue().FieldValue(c.ID()+":7", "1").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if j := inspectJSON(t, addr, prefix+"forever"); j.TTLMillis != -1 || !j.Locked {
			t.Fatalf("a lock without expiry: %+v", j)
		}
		out, _ = mustRun(t, 0, "", "inspect", prefix+"forever", "--redis", addr)
		if !strings.Contains(out, "TTL no expiry") || !strings.Contains(out, "warning: the lock key has no expiry") {
			t.Errorf("inspect output:\n%s", out)
		}
		mustRun(t, 0, "", "unlock", "--force", "--yes", prefix+"forever", "--redis", addr)
	})

	t.Run("inspect fair queue", func(t *testing.T) {
		name := prefix + "jobs"
		l := c.FairLock(name)
		if err := l.Lock(relock.WithOwner(ctx, "holder")); err != nil {
			t.Fatal(err)
		}
		waitCtx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		defer func() { cancel(); wg.Wait() }()
		for i, who := range []string{"w1", "w2"} {
			wg.Add(1)
			go func() { defer wg.Done(); _ = l.Lock(relock.WithOwner(waitCtx, who)) }()
			waitFor(t, func() bool { return inspectJSON(t, addr, name).QueueLen == i+1 })
		}
		j := inspectJSON(t, addr, name)
		if j.Kind != "fairlock" || len(j.Queue) != 2 || j.Queue[0].Token != "w1" || j.Queue[1].Token != "w2" ||
			j.Queue[1].Position != 2 || j.Queue[0].ExpiresMillis <= 0 {
			t.Fatalf("%+v", j)
		}
		out, _ := mustRun(t, 0, "", "inspect", name, "--redis", addr)
		for _, want := range []string{"FairLock, held", "queue (2):", "1. owner w1", "2. owner w2"} {
			if !strings.Contains(out, want) {
				t.Errorf("inspect output lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("list rlock waiters", func(t *testing.T) {
		// An RLock's waiters wait in their own processes, in no queue Redis keeps: list does not say 0.
		name := prefix + "waited"
		l := c.Lock(name)
		if err := l.Lock(relock.WithOwner(ctx, "holder")); err != nil {
			t.Fatal(err)
		}
		waitCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = l.Lock(relock.WithOwner(waitCtx, "waiter")) }()
		out, _ := mustRun(t, 0, "", "list", name, "--redis", addr)
		cancel()
		<-done
		if err := l.Unlock(relock.WithOwner(ctx, "holder")); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) < 2 || !strings.Contains(lines[0], "WAITING") {
			t.Fatalf("list output:\n%s", out)
		}
		if fields := strings.Fields(lines[1]); len(fields) < 7 || fields[len(fields)-2] != "-" {
			t.Errorf("list's WAITING for an RLock is not \"-\" (its waiters are not counted):\n%s", out)
		}
	})

	t.Run("inspect rwlock", func(t *testing.T) {
		name := prefix + "config"
		rw := c.ReadWriteLock(name)
		for _, who := range []string{"r1", "r2"} {
			if err := rw.ReadLock().Lock(relock.WithOwner(ctx, who)); err != nil {
				t.Fatal(err)
			}
		}
		j := inspectJSON(t, addr, name)
		if j.Kind != "rwlock" || j.Mode != "read" || len(j.Holders) != 2 || j.Holders[0].Mode != "read" || j.Holders[1].Token != "r2" {
			t.Fatalf("%+v", j)
		}
		out, _ := mustRun(t, 0, "", "inspect", name, "--redis", addr)
		if !strings.Contains(out, "ReadWriteLock, held for reading by 2 owners") || !strings.Contains(out, "reader  owner r1") {
			t.Fatalf("output:\n%s", out)
		}
	})

	t.Run("list", func(t *testing.T) {
		out, _ := mustRun(t, 0, "", "list", prefix+"*", "--redis", addr, "--json")
		var all []lockJSON
		if err := json.Unmarshal([]byte(out), &all); err != nil {
			t.Fatalf("list --json printed %q: %v", out, err)
		}
		var names []string
		for _, j := range all {
			names = append(names, strings.TrimPrefix(j.Name, prefix)+"/"+j.Kind)
		}
		// jobs is a FairLock whose waiters left: without a queue it looks like an RLock (see relock.KindRLock).
		if got, want := strings.Join(names, " "), "config/rwlock jobs/rlock orders:42/rlock"; got != want {
			t.Fatalf("list found %q, want %q", got, want)
		}
		out, _ = mustRun(t, 0, "", "list", prefix+"*", "--redis", addr)
		if !strings.Contains(out, "NAME") || !strings.Contains(out, prefix+"orders:42") || strings.Contains(out, prefix+"free") {
			t.Fatalf("list output:\n%s", out)
		}
		out, _ = mustRun(t, 0, "", "list", prefix+"nothing-here-*", "--redis", addr)
		if !strings.Contains(out, "no locks held") {
			t.Fatalf("empty list output:\n%s", out)
		}
	})

	t.Run("unlock force", func(t *testing.T) {
		name := prefix + "stuck"
		holder := relock.WithOwner(ctx, "stuck-job")
		l := c.Lock(name)
		if err := l.Lock(holder); err != nil {
			t.Fatal(err)
		}
		hold, err := l.HoldContext(holder)
		if err != nil {
			t.Fatal(err)
		}
		// A waiter on another Client, blocked in Lock.
		other := newLockClient(t, addrs)
		got := make(chan error, 1)
		go func() { got <- other.Lock(name).Lock(relock.WithOwner(ctx, "next")) }()

		mustRun(t, 2, "", "unlock", name, "--redis", addr) // no --force
		out, errOut := mustRun(t, 1, "n\n", "unlock", "--force", name, "--redis", addr)
		if !strings.Contains(errOut, "not released") {
			t.Fatalf("answering n: %s", errOut)
		}
		// The holders are not told by the release: their Client finds out, by the watch of holds in
		// milliseconds, else by the watchdog within a third of its timeout.
		if !strings.Contains(out, "Its holders are not told by the release: a relock holder finds out in milliseconds where its Client watches its holds (the default), else at its watchdog's next check, within a third of its watchdog timeout") {
			t.Fatalf("the question does not say when the holders find out:\n%s", out)
		}
		if j := inspectJSON(t, addr, name); len(j.Holders) != 1 || j.Holders[0].Token != "stuck-job" {
			t.Fatalf("after answering n: %+v", j)
		}
		out, _ = mustRun(t, 0, "y\n", "unlock", "--force", name, "--redis", addr)
		if !strings.Contains(out, "released") {
			t.Fatalf("output: %s", out)
		}
		acquiredBy(t, got, "the waiter was not woken by the forced unlock")
		select {
		case <-hold.Done():
			if !errors.Is(context.Cause(hold), relock.ErrLockLost) {
				t.Fatalf("holder's context ended with %v", context.Cause(hold))
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the holder was not told it lost the lock")
		}
		if j := inspectJSON(t, addr, name); len(j.Holders) != 1 || j.Holders[0].Token != "next" {
			t.Fatalf("after the forced unlock: %+v", j)
		}
		out, _ = mustRun(t, 0, "", "unlock", "--force", "--yes", "--json", name, "--redis", addr)
		var u unlockJSON
		if err := json.Unmarshal([]byte(out), &u); err != nil || !u.Released || u.Before.Holders[0].Token != "next" {
			t.Fatalf("unlock --json: %s (%v)", out, err)
		}
		out, _ = mustRun(t, 0, "", "unlock", "--force", "--yes", name, "--redis", addr)
		if !strings.Contains(out, "not held") {
			t.Fatalf("unlocking a free lock: %s", out)
		}
	})

	t.Run("unlock force fair", func(t *testing.T) {
		name := prefix + "fair-stuck"
		l := c.FairLock(name)
		if err := l.Lock(relock.WithOwner(ctx, "stuck")); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() { got <- l.Lock(relock.WithOwner(ctx, "head")) }()
		waitFor(t, func() bool { return inspectJSON(t, addr, name).QueueLen == 1 })
		mustRun(t, 0, "", "unlock", "--force", "--yes", name, "--redis", addr)
		acquiredBy(t, got, "the head of the queue was not woken")
	})

	t.Run("unlock force rwlock", func(t *testing.T) {
		name := prefix + "rw-stuck"
		rw := c.ReadWriteLock(name)
		if err := rw.ReadLock().Lock(relock.WithOwner(ctx, "reader")); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() { got <- rw.WriteLock().Lock(relock.WithOwner(ctx, "writer")) }()
		mustRun(t, 0, "", "unlock", "--force", "--yes", name, "--redis", addr)
		acquiredBy(t, got, "the waiting writer was not woken")
		if j := inspectJSON(t, addr, name); j.Mode != "write" || j.Holders[0].Token != "writer" {
			t.Fatalf("%+v", j)
		}
	})
}

// acquiredBy fails t unless a Lock call, whose result comes on got, succeeds within 10 s.
func acquiredBy(t *testing.T, got <-chan error, failure string) {
	t.Helper()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("%s: %v", failure, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal(failure)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestOperatorCommands(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	opsOn(t, []string{srv.Addr()}, "svc:")
}

func TestOperatorCommandsOnCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	opsOn(t, cl.Addrs(), "svc:")
}

func TestErrors(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	addr := srv.Addr()
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	for _, cmd := range []rueidis.Completed{
		rdb.B().Set().Key("a-string").Value("x").Build(),
		rdb.B().Hset().Key("a-hash").FieldValue().FieldValue("views", "10").Build(),
	} {
		if err := rdb.Do(testCtx(t), cmd).Error(); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"inspect", "a-string", "--redis", addr}, 1, `"a-string" is not a lock: the key is a string`},
		{[]string{"inspect", "a-hash", "--redis", addr}, 1, `"a-hash" is not a lock`},
		{[]string{"unlock", "--force", "--yes", "a-string", "--redis", addr}, 1, `is not a lock`},
		{[]string{"watch", "a-string", "--redis", addr}, 1, `is not a lock`},
		{[]string{"inspect", "x", "--redis", "127.0.0.1:1"}, 1, "cannot connect to Redis at 127.0.0.1:1"},
		{[]string{"list", "--redis", "127.0.0.1:1"}, 1, "cannot connect to Redis at 127.0.0.1:1"},
		{[]string{"inspect", "x", "--redis", "not-an-address"}, 2, "want host:port"},
		{[]string{"inspect", "--redis", addr}, 2, "want one lock name"},
		{[]string{"inspect", "", "--redis", addr}, 2, "not a valid lock name"},
		{[]string{"inspect", "x", "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"unlock", "--force", "--yes", "x", "--sharded-pubsub", "maybe", "--redis", addr}, 2, "want auto, on or off"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
	} {
		_, errOut := mustRun(t, tc.code, "", tc.args...)
		if !strings.Contains(errOut, tc.want) {
			t.Errorf("relock %s: stderr %q, want %q", strings.Join(tc.args, " "), errOut, tc.want)
		}
		if n := strings.Count(strings.TrimSpace(errOut), "\n"); tc.code == 1 && n > 0 {
			t.Errorf("relock %s: error on %d lines, want one: %q", strings.Join(tc.args, " "), n+1, errOut)
		}
	}
}

func TestWatch(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newLockClient(t, []string{srv.Addr()})
	ctx := testCtx(t)
	name := "watched"
	done := startBin("watch", name, "--redis", srv.Addr(), "--json", "--interval", "20ms", "--for", "3s")
	// Let watch read the initial state, then lock, re-enter, and unlock, pausing long enough for each step
	// to be seen.
	time.Sleep(time.Second)
	l := c.Lock(name, relock.WithFencing())
	w := relock.WithOwner(ctx, "w1")
	for _, step := range []func(context.Context) error{l.Lock, l.Lock, l.Unlock, l.Unlock} {
		if err := step(w); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.code != 0 {
		t.Fatalf("watch: exit %d: %s", r.code, r.stderr)
	}
	var events []string
	for _, ev := range parseWatch(t, r.stdout) {
		events = append(events, ev.Text)
	}
	want := []string{`watching lock "watched" (Ctrl-C stops)`, "lock acquired by owner w1 of client " + c.ID(), "fencing token 0 -> 1",
		"lock re-entered by owner w1 of client " + c.ID() + " (hold count 1 -> 2)",
		"lock partly released by owner w1 of client " + c.ID() + " (hold count 2 -> 1)",
		"lock released by owner w1 of client " + c.ID()}
	var got []string
	for _, ev := range events {
		ev = strings.SplitN(ev, " (hold count 1, TTL", 2)[0]
		got = append(got, ev)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("watch events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// watch outlives a Redis restart: it reports the failure once and goes on when Redis is back.
func TestWatchRidesOutRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	done := startBin("watch", "w", "--redis", srv.Addr(), "--interval", "50ms", "--timeout", "500ms", "--for", "4s")
	time.Sleep(time.Second)
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	c := newLockClient(t, []string{srv.Addr()})
	if err := c.Lock("w").Lock(relock.WithOwner(testCtx(t), "after-restart")); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.code != 0 {
		t.Fatalf("watch: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	lost := strings.Index(r.stdout, "Redis at "+srv.Addr())
	back := strings.Index(r.stdout, "lock acquired by owner after-restart")
	if lost < 0 || back < lost {
		t.Fatalf("watch output: want the outage, then the acquisition after it:\n%s", r.stdout)
	}
}
