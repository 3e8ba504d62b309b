package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// relock run's end-to-end tests: the built binary (and once run in process), its commands real child
// processes (sh scripts), against real redis-server processes.

// childPrelude starts the sh scripts the tests run under relock run. started writes what the child sees
// ("NAME TOKEN PID") to $D/started, atomically; waitfor waits until a file exists, for about 30 s at
// most, so that no child outlives a failed test by long (the children run in process groups of their
// own: a relock run killed by the test's timeout leaves its child behind).
const childPrelude = `D="$1"; ` +
	`started() { echo "$RELOCK_NAME $RELOCK_FENCING_TOKEN $$" > "$D/started.tmp" && mv "$D/started.tmp" "$D/started"; }; ` +
	`waitfor() { i=0; while [ ! -e "$1" ]; do i=$((i+1)); if [ $i -gt 1500 ]; then exit 99; fi; sleep 0.02; done; }; `

// childArgs returns the arguments, after "--", of a child running script (after childPrelude) with $D
// set to dir.
func childArgs(dir, script string) []string {
	return []string{"sh", "-c", childPrelude + script, "sh", dir}
}

// runArgs returns the arguments of relock run with flags, NAME and the child running script in dir.
func runArgs(addr, name, dir, script string, flags ...string) []string {
	args := append([]string{"run", "--redis", addr}, flags...)
	args = append(append(args, name, "--"), childArgs(dir, script)...)
	return args
}

// childSeen is what a child wrote to its started file.
type childSeen struct {
	name  string
	token uint64
	pid   int
}

// waitStarted waits until the child of the relock run whose result comes on done has written
// dir/started, and returns what it wrote. It fails t if relock run ends first, or nothing comes within a
// minute.
func waitStarted(t *testing.T, dir string, done <-chan binResult) childSeen {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "started")); err == nil {
			f := strings.Fields(string(b))
			if len(f) != 3 {
				t.Fatalf("the child wrote %q", b)
			}
			token, err1 := strconv.ParseUint(f[1], 10, 64)
			pid, err2 := strconv.Atoi(f[2])
			if err1 != nil || err2 != nil {
				t.Fatalf("the child wrote %q", b)
			}
			return childSeen{name: f[0], token: token, pid: pid}
		}
		select {
		case r := <-done:
			t.Fatalf("relock run ended before its command started: exit %d, %v\nstdout:\n%s\nstderr:\n%s", r.code, r.err, r.stdout, r.stderr)
		case <-deadline:
			t.Fatal("the command did not start within a minute")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// result waits for the result of a relock run, and fails t if it could not be run or crashed.
func result(t *testing.T, done <-chan binResult) binResult {
	t.Helper()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if strings.Contains(r.stderr, "panic") || strings.Contains(r.stderr, "DATA RACE") {
		t.Fatalf("relock run crashed:\n%s", r.stderr)
	}
	return r
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// touch creates path, empty.
func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// processGone reports whether no process has pid (or it is a zombie nobody waited for yet).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return err == nil && strings.Contains(string(b), ") Z ")
}

// The command runs while the lock is held, fenced with the lock's token (larger at each run), with the
// lock's name; another Client cannot take the lock meanwhile; once the command exits the lock is free
// again (at once: with the default 30 s watchdog timeout, only a release frees it so soon), and relock
// run exits with the command's status.
func TestRunHoldsTheLock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	addr := srv.Addr()
	c := newLockClient(t, []string{addr})
	ctx := testCtx(t)
	name := "jobs:nightly"
	other := c.Lock(name, relock.WithFencing())
	var last uint64
	for i, status := range []int{7, 0} {
		dir := t.TempDir()
		done := startBin(runArgs(addr, name, dir, `started; waitfor "$D/go"; exit `+strconv.Itoa(status))...)
		seen := waitStarted(t, dir, done)
		if seen.name != name {
			t.Errorf("run %d: RELOCK_NAME %q, want %q", i, seen.name, name)
		}
		j := inspectJSON(t, addr, name)
		if !j.Locked || len(j.Holders) != 1 || !strings.HasPrefix(j.Holders[0].Token, "relock-run:") || j.FencingToken != seen.token {
			t.Fatalf("run %d: while the command runs, the lock is %+v; the command saw token %d", i, j, seen.token)
		}
		if h := j.Holders[0]; h.Connections == nil || len(*h.Connections) == 0 {
			t.Errorf("run %d: the holder's connections %v: want relock run's, named by relock.New", i, h.Connections)
		}
		if seen.token <= last {
			t.Errorf("run %d: token %d, not above the last one, %d", i, seen.token, last)
		}
		last = seen.token
		if ok, err := other.TryLock(ctx, 0, 0); err != nil || ok {
			t.Fatalf("run %d: another Client's TryLock while the command runs: %v, %v; want false", i, ok, err)
		}
		touch(t, filepath.Join(dir, "go"))
		r := result(t, done)
		if r.code != status || r.stderr != "" {
			t.Fatalf("run %d: exit %d, stderr %q; want %d and nothing", i, r.code, r.stderr, status)
		}
		ok, err := other.TryLock(ctx, 0, 0)
		if err != nil || !ok {
			t.Fatalf("run %d: another Client's TryLock after the command exited: %v, %v; want the lock released", i, ok, err)
		}
		if last, err = other.FencingToken(ctx); err != nil {
			t.Fatal(err)
		}
		if err := other.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// What relock run exits with when its command ends otherwise: by a signal (128 + the signal, as shells
// say), not found (127), not executable (126). The command's standard streams are relock run's.
func TestRunStatuses(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	addr := srv.Addr()
	out, _ := mustRun(t, 0, "hello from stdin", "run", "--redis", addr, "x", "--", "sh", "-c", `cat; echo " and $RELOCK_NAME"; echo err >&2`)
	if out != "hello from stdin and x\n" {
		t.Errorf("stdout %q: want the command's, with stdin passed to it", out)
	}
	mustRun(t, 128+int(syscall.SIGKILL), "", "run", "--redis", addr, "x", "--", "sh", "-c", `kill -KILL $$`)
	_, errOut := mustRun(t, 127, "", "run", "--redis", addr, "x", "--", "relock-no-such-command")
	if !strings.Contains(errOut, `relock run: cannot run "relock-no-such-command"`) {
		t.Errorf("stderr %q", errOut)
	}
	notExec := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\ntouch \"$0.ran\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut := mustRun(t, 126, "", "run", "--redis", addr, "x", "--", notExec); !strings.Contains(errOut, "permission denied") {
		t.Errorf("stderr %q", errOut)
	}
	if exists(notExec + ".ran") {
		t.Error("the script ran")
	}
	if j := inspectJSON(t, addr, "x"); j.Locked {
		t.Fatalf("the lock is left held: %+v", j)
	}
}

// A hold lost while the command runs (an operator's ForceUnlock, a DEL of the key) ends the command: it
// gets SIGTERM, within a third of the watchdog timeout, and relock run exits with status 3. A command that
// ignores SIGTERM gets SIGKILL --grace later.
func TestRunHoldLost(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	addr := srv.Addr()
	c := newLockClient(t, []string{addr})
	ctx := testCtx(t)
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()

	t.Run("SIGTERM", func(t *testing.T) {
		dir, name := t.TempDir(), "jobs:lost"
		done := startBin(runArgs(addr, name, dir, `trap 'touch "$D/terminated"; exit 0' TERM; started; waitfor "$D/never"`,
			"--watchdog-timeout", "1s")...)
		waitStarted(t, dir, done)
		if ok, err := c.Lock(name).ForceUnlock(ctx); err != nil || !ok {
			t.Fatalf("ForceUnlock: %v, %v", ok, err)
		}
		r := result(t, done)
		if r.code != exitHoldLost || !exists(filepath.Join(dir, "terminated")) {
			t.Fatalf("exit %d (want %d), the command terminated by SIGTERM: %v\nstderr:\n%s", r.code, exitHoldLost,
				exists(filepath.Join(dir, "terminated")), r.stderr)
		}
		for _, want := range []string{`relock run: lost lock "jobs:lost" while "sh" (pid `, "relock: lock lost",
			"it was sent SIGTERM, and exited with status 0"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
			}
		}
	})

	t.Run("SIGKILL after grace", func(t *testing.T) {
		dir, name := t.TempDir(), "jobs:stubborn"
		grace := 500 * time.Millisecond
		done := startBin(runArgs(addr, name, dir, `trap '' TERM; started; waitfor "$D/never"`,
			"--watchdog-timeout", "1s", "--grace", grace.String(), "--json")...)
		seen := waitStarted(t, dir, done)
		if err := rdb.Do(ctx, rdb.B().Del().Key(name).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		deleted := time.Now()
		r := result(t, done)
		took := time.Since(deleted)
		if r.code != exitHoldLost || took < grace {
			t.Fatalf("exit %d after %v; want %d, after at least --grace %v\nstderr:\n%s", r.code, took, exitHoldLost, grace, r.stderr)
		}
		var j errorJSON
		if err := json.Unmarshal([]byte(r.stderr), &j); err != nil || j.Kind != errKindHoldLost || j.Command != "run" ||
			!strings.Contains(j.Error, "did not exit within --grace 500ms, was sent SIGKILL, and exited with status 137") {
			t.Fatalf("stderr %q (%v): want a hold_lost error saying the command was killed", r.stderr, err)
		}
		if !processGone(seen.pid) {
			t.Fatalf("the command (pid %d) still runs", seen.pid)
		}
	})
}

// When --wait runs out (the lock is held by another owner, or another candidate leads), relock run exits
// with status 4 and never starts its command; with --wait and a free lock, it runs it.
func TestRunWaitRunsOut(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	addr := srv.Addr()
	c := newLockClient(t, []string{addr})
	ctx := relock.WithOwner(testCtx(t), "holder-7")
	name, elected := "jobs:busy", "jobs:leader"
	l := c.Lock(name, relock.WithFencing())
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	el := c.Election(elected)
	if _, err := el.Campaign(ctx, "the-leader"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		flags []string
		want  string
	}{
		{name, []string{"--wait", "300ms"}, `lock "jobs:busy" not acquired within --wait 300ms (held by owner holder-7 of client `},
		{name, []string{"--wait", "0"}, `lock "jobs:busy" not acquired within --wait 0s`},
		{elected, []string{"--election", "--wait", "300ms"}, `election "jobs:leader" not won within --wait 300ms (held by owner holder-7 of client `},
	} {
		dir := t.TempDir()
		start := time.Now()
		r := result(t, startBin(runArgs(addr, tc.name, dir, `touch "$D/ran"`, tc.flags...)...))
		if r.code != exitNotAcquired || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "the command was not run") {
			t.Errorf("run %v: exit %d, stderr %q; want %d, saying %q", tc.flags, r.code, r.stderr, exitNotAcquired, tc.want)
		}
		if wait := tc.flags[len(tc.flags)-1]; wait == "300ms" && time.Since(start) < 300*time.Millisecond {
			t.Errorf("run %v: gave up after %v", tc.flags, time.Since(start))
		}
		if exists(filepath.Join(dir, "ran")) {
			t.Errorf("run %v: the command ran", tc.flags)
		}
	}
	_, errOut := mustRun(t, exitNotAcquired, "", runArgs(addr, name, t.TempDir(), "true", "--wait", "0", "--json")...)
	var j errorJSON
	if err := json.Unmarshal([]byte(errOut), &j); err != nil || j.Kind != errKindNotAcquired {
		t.Errorf("--json: stderr %q (%v), want a not_acquired error", errOut, err)
	}
	if j := inspectJSON(t, addr, name); len(j.Holders) != 1 || j.Holders[0].Token != "holder-7" || j.QueueLen != 0 {
		t.Errorf("the lock after the runs: %+v", j)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mustRun(t, 0, "", runArgs(addr, name, dir, `touch "$D/ran"`, "--wait", "0")...)
	if !exists(filepath.Join(dir, "ran")) {
		t.Error("with the lock free, --wait 0: the command did not run")
	}
}

// With --election, the command runs as the leader, its term in RELOCK_FENCING_TOKEN and its --value
// recorded; relock run resigns once it exits (at once: with the default 30 s watchdog timeout, only a
// resignation ends the leadership so soon), and the next run leads with a larger term.
func TestRunElection(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	addr := srv.Addr()
	c := newLockClient(t, []string{addr})
	ctx := testCtx(t)
	name := "svc:scheduler"
	el := c.Election(name)
	var last uint64
	for i := range 2 {
		dir := t.TempDir()
		value := "10.0.0." + strconv.Itoa(i+1) + ":8080"
		done := startBin(runArgs(addr, name, dir, `started; waitfor "$D/go"`, "--election", "--value", value)...)
		seen := waitStarted(t, dir, done)
		leader, err := el.Leader(ctx)
		if err != nil || leader.Term != seen.token || leader.Value != value || seen.name != name {
			t.Fatalf("run %d: leader %+v, %v; the command saw %+v; want it leading with %q", i, leader, err, seen, value)
		}
		if seen.token <= last {
			t.Errorf("run %d: term %d, not above the last one, %d", i, seen.token, last)
		}
		last = seen.token
		touch(t, filepath.Join(dir, "go"))
		if r := result(t, done); r.code != 0 || r.stderr != "" {
			t.Fatalf("run %d: exit %d, stderr %q", i, r.code, r.stderr)
		}
		if l, err := el.Leader(ctx); !errors.Is(err, relock.ErrNoLeader) {
			t.Fatalf("run %d: after the command exited, the leader is %+v (%v); want none: relock run resigns", i, l, err)
		}
	}
}

// SIGTERM to relock run is passed on to its command as SIGTERM; relock run then releases the lock and
// exits with the command's status.
func TestRunForwardsSIGTERM(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	addr := srv.Addr()
	dir, name := t.TempDir(), "jobs:stopped"
	ctx, cancel := context.WithTimeout(context.Background(), binTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, relockBin, runArgs(addr, name, dir, `trap 'touch "$D/terminated"; exit 5' TERM; started; waitfor "$D/never"`)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan binResult, 1)
	go func() {
		err := cmd.Wait()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			err = nil
		}
		done <- binResult{code: cmd.ProcessState.ExitCode(), err: err}
	}()
	waitStarted(t, dir, done)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.code != 5 || !exists(filepath.Join(dir, "terminated")) {
		t.Fatalf("exit %d (%v), want 5; the command terminated: %v\nstderr:\n%s", r.code, r.err, exists(filepath.Join(dir, "terminated")), &errOut)
	}
	if want := `relock run: interrupted: "sh" (pid `; !strings.Contains(errOut.String(), want) ||
		!strings.Contains(errOut.String(), `was sent SIGTERM, and exited with status 5; lock "jobs:stopped" was released`) {
		t.Errorf("stderr %q", &errOut)
	}
	if j := inspectJSON(t, addr, name); j.Locked {
		t.Fatalf("after relock run ended, the lock is held: %+v", j)
	}
}

// relock run in this process, cancelled (as by SIGINT, SIGTERM or SIGHUP) while its command runs: the
// command gets SIGTERM, the lock is released, and nothing is left behind, no goroutine either.
func TestRunInProcessInterrupt(t *testing.T) {
	srv := redistest.Start(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	addr := srv.Addr()
	dir, name := t.TempDir(), "jobs:in-process"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut bytes.Buffer
	done := make(chan binResult, 1)
	go func() {
		done <- binResult{code: run(ctx, env{args: runArgs(addr, name, dir, `trap 'touch "$D/terminated"; exit 0' TERM; started; waitfor "$D/never"`),
			stdout: &out, stderr: &errOut})}
	}()
	waitStarted(t, dir, done)
	cancel()
	if r := <-done; r.code != 0 || !exists(filepath.Join(dir, "terminated")) || !strings.Contains(errOut.String(), "interrupted") {
		t.Fatalf("exit %d, the command terminated: %v, stderr %q", r.code, exists(filepath.Join(dir, "terminated")), &errOut)
	}
	if j := inspectJSON(t, addr, name); j.Locked {
		t.Fatalf("after relock run ended, the lock is held: %+v", j)
	}
}

// relock run's usage errors: status 2, before anything is run or connected to.
func TestRunUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "x"}, `want NAME -- CMD [ARGS...]`},
		{[]string{"run", "x", "--"}, `want NAME -- CMD [ARGS...]`},
		{[]string{"run", "x", "true"}, `want NAME -- CMD [ARGS...]`},
		{[]string{"run", "--", "true"}, `want one lock name before "--", got 0 arguments`},
		{[]string{"run", "x", "y", "--", "true"}, `want one lock name before "--", got 2 arguments`},
		{[]string{"run", "--timeout", "0", "x", "--", "true"}, `invalid value "0" for flag -timeout: must be above zero`},
		{[]string{"run", "x", "--value", "v", "--", "true"}, `--value is for --election`},
		{[]string{"run", "--election", "--wait", "0", "x", "--", "true"}, `--election needs a --wait above zero`},
		{[]string{"run", "--wait", "-1s", "x", "--", "true"}, `invalid value "-1s" for flag -wait: must not be negative`},
		{[]string{"run", "--grace", "-1s", "x", "--", "true"}, `invalid value "-1s" for flag -grace: must not be negative`},
		{[]string{"run", "--watchdog-timeout", "50ms", "x", "--", "true"}, `--watchdog-timeout 50ms: must be at least 100ms`},
	} {
		_, errOut := mustRun(t, 2, "", append([]string{tc.args[0], "--redis", "127.0.0.1:1"}, tc.args[1:]...)...)
		if !strings.Contains(errOut, tc.want) {
			t.Errorf("relock %s: stderr %q, want %q", strings.Join(tc.args, " "), errOut, tc.want)
		}
	}
	_, errOut := mustRun(t, 0, "", "run", "-h")
	if !strings.HasPrefix(errOut, "Usage: relock run [--election [--value V]] [--wait D] [--grace D] [flags] NAME -- CMD [ARGS...]") {
		t.Errorf("run -h: %q", errOut)
	}
}
