package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// relock run and the processes of its command: its process group ended whole, when the hold is lost, when
// relock run is signalled (SIGHUP too) and when the command exits and leaves some behind; and the command
// ended when relock run is killed. The built binary, real redis-server processes, sh scripts.

// workerScript starts, in the background, a worker of the command's process group that ignores SIGTERM and
// appends a line to $D/marker every 50 ms (for 30 s at most), writes its pid to $D/worker, and waits until
// the worker ignores SIGTERM.
const workerScript = `( trap '' TERM; touch "$D/ready"; i=0; while [ $i -lt 600 ]; do echo x >> "$D/marker"; i=$((i+1)); sleep 0.05; done ) & ` +
	`echo $! > "$D/worker"; waitfor "$D/ready"; `

// startRunProc starts relockBin with args (prefixed by prefix, a command that execs it, when not nil),
// without stdin, and returns its process and its result, which arrives once it has exited. Its stderr is
// in the result.
func startRunProc(t *testing.T, prefix []string, args ...string) (*os.Process, <-chan binResult) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), binTimeout)
	argv := append(append(prefix, relockBin), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "RELOCK_REDIS=")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan binResult, 1)
	go func() {
		defer cancel()
		err := cmd.Wait()
		var exit *exec.ExitError
		if errors.As(err, &exit) || ctx.Err() == nil {
			err = nil
		}
		done <- binResult{stdout: out.String(), stderr: errOut.String(), code: cmd.ProcessState.ExitCode(), err: err}
	}()
	return cmd.Process, done
}

// groupAlive reports whether some process is in the process group pgid.
func groupAlive(pgid int) bool {
	return !errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}

// killGroupIfFailed kills what is left of the process group pgid when t has failed, so that a failed test
// leaves nothing behind for long (a passing test leaves no group: its id may be another's by then).
func killGroupIfFailed(t *testing.T, pgid int) {
	t.Cleanup(func() {
		if t.Failed() {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	})
}

// readPid reads the pid a child wrote to path.
func readPid(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil && pid > 0 {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no pid within 10 s (%q, %v)", path, b, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// waitGrowing waits until the file at path has grown at least once (its writer is at work).
func waitGrowing(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var first int64 = -1
	for time.Now().Before(deadline) {
		if fi, err := os.Stat(path); err == nil {
			if first >= 0 && fi.Size() > first {
				return
			}
			if first < 0 {
				first = fi.Size()
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s does not grow", path)
}

// A hold lost while the command runs ends its whole process group: a worker the command started in the
// background, which ignores SIGTERM, is sent SIGKILL --grace after the SIGTERM, though the command itself
// exited at the SIGTERM; relock run exits with status 3 only once no process of the group is left, so the
// worker writes nothing after it, and the next holder runs alone.
func TestRunHoldLostEndsTheGroup(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	addr := srv.Addr()
	c := newLockClient(t, []string{addr})
	ctx := testCtx(t)
	dir, name := t.TempDir(), "jobs:group"
	marker := filepath.Join(dir, "marker")
	grace := 300 * time.Millisecond
	done := startBin(runArgs(addr, name, dir, workerScript+`trap 'exit 0' TERM; started; waitfor "$D/never"`,
		"--watchdog-timeout", "1s", "--grace", grace.String())...)
	seen := waitStarted(t, dir, done)
	killGroupIfFailed(t, seen.pid)
	worker := readPid(t, filepath.Join(dir, "worker"))
	waitGrowing(t, marker)

	if ok, err := c.Lock(name).ForceUnlock(ctx); err != nil || !ok {
		t.Fatalf("ForceUnlock: %v, %v", ok, err)
	}
	lost := time.Now()
	r := result(t, done)
	took := time.Since(lost)
	if r.code != exitHoldLost {
		t.Fatalf("exit %d, want %d\nstderr:\n%s", r.code, exitHoldLost, r.stderr)
	}
	if groupAlive(seen.pid) {
		t.Fatalf("relock run exited %v after the loss, and its command's process group %d is still there (worker %d gone: %v)\nstderr:\n%s",
			took, seen.pid, worker, processGone(worker), r.stderr)
	}
	if took < grace {
		t.Errorf("relock run exited %v after the loss: before --grace %v, when the worker ignores SIGTERM", took, grace)
	}
	t.Logf("relock run exited %v after the loss (--grace %v)", took, grace)
	if want := "it was sent SIGTERM (processes of its group still there --grace 300ms later were sent SIGKILL), and exited with status 0"; !strings.Contains(r.stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
	}
	size := fileSize(t, marker)

	// The next holder, at once.
	out, errOut := mustRun(t, 0, "", "run", "--redis", addr, "--wait", "0", name, "--", "sh", "-c", `echo "$RELOCK_FENCING_TOKEN"`)
	if token, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64); err != nil || token <= seen.token || errOut != "" {
		t.Errorf("the next holder: token %q (%v), stderr %q; want a token above %d", out, err, errOut, seen.token)
	}
	time.Sleep(200 * time.Millisecond) // 4 of the worker's periods
	if now := fileSize(t, marker); now != size {
		t.Fatalf("the marker grew from %d to %d bytes after relock run exited", size, now)
	}
}

// A command that exits and leaves a process in its process group (a worker started in the background)
// has it ended before the lock is released: the worker is sent SIGTERM while the lock is still held (it
// reads the lock then, with relock inspect), relock run exits with the command's status once it is gone,
// and says so on stderr.
func TestRunEndsWhatTheCommandLeft(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	addr := srv.Addr()
	dir, name := t.TempDir(), "jobs:leftover"
	worker := `( trap '"` + relockBin + `" inspect --redis ` + addr + ` ` + name + ` --json > "$D/at-term.tmp"; mv "$D/at-term.tmp" "$D/at-term"; exit 0' TERM; ` +
		`touch "$D/ready"; i=0; while [ $i -lt 600 ]; do i=$((i+1)); sleep 0.05; done ) & echo $! > "$D/worker"; waitfor "$D/ready"; `
	done := startBin(runArgs(addr, name, dir, worker+`started; exit 7`, "--grace", "20s")...)
	seen := waitStarted(t, dir, done)
	killGroupIfFailed(t, seen.pid)
	pid := readPid(t, filepath.Join(dir, "worker"))
	r := result(t, done)
	if r.code != 7 {
		t.Fatalf("exit %d, want the command's, 7\nstderr:\n%s", r.code, r.stderr)
	}
	if !processGone(pid) || groupAlive(seen.pid) {
		t.Fatalf("relock run exited, and the worker (pid %d) the command left in its group still runs", pid)
	}
	b, err := os.ReadFile(filepath.Join(dir, "at-term"))
	var j lockJSON
	if err == nil {
		err = json.Unmarshal(b, &j)
	}
	if err != nil || !j.Locked || len(j.Holders) != 1 || !strings.HasPrefix(j.Holders[0].Token, "relock-run:") || j.FencingToken != seen.token {
		t.Fatalf("when the worker was sent SIGTERM, the lock was %+v (%q, %v): want it still held by relock run", j, b, err)
	}
	if want := `relock run: "sh" (pid ` + strconv.Itoa(seen.pid) + `) exited with status 7, leaving processes in its process group: they were sent SIGTERM`; !strings.Contains(r.stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
	}
	if j := inspectJSON(t, addr, name); j.Locked {
		t.Fatalf("after relock run exited, the lock is held: %+v", j)
	}
}

// SIGHUP to relock run (its terminal hung up) is handled as SIGTERM is: the command's process group is
// sent SIGTERM (a worker that ignores it, SIGKILL --grace later), the lock is released, and relock run
// exits with the command's status; while relock run waits for the lock, it gives up (status 1). When
// relock run was started with SIGHUP ignored (nohup), it stays ignored.
func TestRunSIGHUP(t *testing.T) {
	t.Parallel()
	// A test run under nohup has SIGHUP ignored, which relock run would inherit and keep (as the last
	// subtest checks on purpose). Handled here, it starts with its default disposition in the processes
	// the test starts.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	srv := redistest.Start(t)
	addr := srv.Addr()
	c := newLockClient(t, []string{addr})
	ctx := testCtx(t)

	t.Run("ends the command", func(t *testing.T) {
		dir, name := t.TempDir(), "jobs:hangup"
		p, done := startRunProc(t, nil, runArgs(addr, name, dir, workerScript+`trap 'exit 5' TERM; started; waitfor "$D/never"`,
			"--grace", "300ms")...)
		seen := waitStarted(t, dir, done)
		killGroupIfFailed(t, seen.pid)
		worker := readPid(t, filepath.Join(dir, "worker"))
		if err := p.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		r := result(t, done)
		if r.code != 5 || groupAlive(seen.pid) || !processGone(worker) {
			t.Fatalf("exit %d, want the command's 5; its group left: %v (worker gone: %v)\nstderr:\n%s", r.code, groupAlive(seen.pid), processGone(worker), r.stderr)
		}
		if want := `relock run: interrupted: "sh" (pid `; !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, `lock "jobs:hangup" was released`) {
			t.Errorf("stderr %q", r.stderr)
		}
		if ok, err := c.Lock(name).TryLock(ctx, 0, 0); err != nil || !ok {
			t.Fatalf("another Client's TryLock after relock run exited: %v, %v; want the lock released", ok, err)
		}
	})

	t.Run("while waiting for the lock", func(t *testing.T) {
		dir, name := t.TempDir(), "jobs:hangup-waiting"
		octx := relock.WithOwner(ctx, "holder-1")
		l := c.Lock(name)
		if err := l.Lock(octx); err != nil {
			t.Fatal(err)
		}
		defer l.Unlock(octx)
		raw, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		p, done := startRunProc(t, nil, runArgs(addr, name, dir, `touch "$D/ran"`)...)
		waitFor(t, func() bool { // relock run waits for a release: subscribed to a channel of the lock's
			chs, err := raw.Do(ctx, raw.B().PubsubChannels().Pattern("*{"+name+"}*").Build()).AsStrSlice()
			return err == nil && len(chs) > 0
		})
		if err := p.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		r := result(t, done)
		if r.code != 1 || !strings.Contains(r.stderr, `relock run: interrupted while waiting for "jobs:hangup-waiting": the command was not run`) {
			t.Fatalf("exit %d, stderr %q; want 1, interrupted", r.code, r.stderr)
		}
		if exists(filepath.Join(dir, "ran")) {
			t.Error("the command ran")
		}
	})

	t.Run("ignored by nohup", func(t *testing.T) {
		dir, name := t.TempDir(), "jobs:nohup"
		p, done := startRunProc(t, []string{"sh", "-c", `trap '' HUP; exec "$@"`, "sh"},
			runArgs(addr, name, dir, `started; waitfor "$D/go"; exit 0`)...)
		seen := waitStarted(t, dir, done)
		killGroupIfFailed(t, seen.pid)
		if err := p.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-done:
			t.Fatalf("relock run, started with SIGHUP ignored, ended at a SIGHUP: exit %d\nstderr:\n%s", r.code, r.stderr)
		case <-time.After(300 * time.Millisecond):
		}
		touch(t, filepath.Join(dir, "go"))
		if r := result(t, done); r.code != 0 || r.stderr != "" {
			t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
		}
	})
}

// relock run killed (SIGKILL, as the OOM killer does) does not leave what its command started running
// without the lock: its guard sends the command's process group SIGKILL, a worker that ignores SIGTERM
// included.
func TestRunKilledEndsItsGroup(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	addr := srv.Addr()
	dir, name := t.TempDir(), "jobs:orphans"
	marker := filepath.Join(dir, "marker")
	p, done := startRunProc(t, nil, runArgs(addr, name, dir, workerScript+`started; waitfor "$D/never"`)...)
	seen := waitStarted(t, dir, done)
	killGroupIfFailed(t, seen.pid)
	worker := readPid(t, filepath.Join(dir, "worker"))
	waitGrowing(t, marker)
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil {
		t.Fatal(r.err)
	}
	killed := time.Now()
	for !processGone(worker) || !processGone(seen.pid) {
		if time.Since(killed) > 5*time.Second {
			t.Fatalf("relock run was killed 5 s ago; its command (pid %d) gone: %v, the worker it started (pid %d) gone: %v",
				seen.pid, processGone(seen.pid), worker, processGone(worker))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("the command and its worker were gone %v after relock run was killed", time.Since(killed))
	size := fileSize(t, marker)
	time.Sleep(200 * time.Millisecond) // 4 of the worker's periods
	if now := fileSize(t, marker); now != size {
		t.Fatalf("the marker grew from %d to %d bytes after the worker was gone", size, now)
	}
}

// How long relock run waits for its command's process group to be gone is bounded: killWait after
// SIGKILL. Here the group keeps a zombie that relock run cannot reap: a process that left the group
// (setsid) is its parent, and never reaps it. relock run says so, and exits.
func TestRunGroupWaitIsBounded(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	addr := srv.Addr()
	dir, name := t.TempDir(), "jobs:zombie"
	// The subshell starts a sleep of the group, then leaves the group (setsid), says so, and becomes a
	// sleep that never reaps it.
	script := `( sleep 0.1 & exec setsid sh -c 'echo $$ > "$1/escaped"; exec sleep 30' sh "$D" >/dev/null 2>&1 ) & ` +
		`waitfor "$D/escaped"; started; exit 0`
	done := startBin(runArgs(addr, name, dir, script, "--grace", "100ms")...)
	seen := waitStarted(t, dir, done)
	escaped := readPid(t, filepath.Join(dir, "escaped"))
	defer syscall.Kill(escaped, syscall.SIGKILL)
	start := time.Now()
	r := result(t, done)
	took := time.Since(start)
	if r.code != 0 || took > killWait+3*time.Second {
		t.Fatalf("exit %d after %v; want 0, within --grace and killWait (%v)\nstderr:\n%s", r.code, took, killWait, r.stderr)
	}
	if want := "; its process group " + strconv.Itoa(seen.pid) + " was still there 5s after SIGKILL"; !strings.Contains(r.stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
	}
	if j := inspectJSON(t, addr, name); j.Locked {
		t.Fatalf("after relock run exited, the lock is held: %+v", j)
	}
	t.Logf("relock run exited %v after its command started", took)
}
