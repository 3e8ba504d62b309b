package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/relock-go/relock/internal/redistest"
)

func init() {
	helpers["init-that-never-reaps"] = initThatNeverReaps
}

// initThatNeverReaps is a helper process that stands for an init that never reaps the orphans it is
// given: a child subreaper that runs args and waits for that process alone. It exits with its status.
func initThatNeverReaps(args []string) int {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return 100
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	_ = cmd.Run()
	return cmd.ProcessState.ExitCode()
}

// On Linux relock run reaps the processes its command leaves behind (it is their subreaper), so it does
// not wait for an init to reap them: under an init that never reaps, a worker the command left, ended by
// SIGTERM, is gone at once, and relock run exits without waiting for SIGKILL or after it.
func TestRunReapsWhatTheCommandLeft(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	addr := srv.Addr()
	dir, name := t.TempDir(), "jobs:reaped"
	p, done := startRunProc(t, helperCommand(t, "init-that-never-reaps"),
		runArgs(addr, name, dir, `sleep 30 & echo $! > "$D/worker"; started; exit 0`, "--grace", "10s")...)
	defer p.Kill() // the helper: its zombies go with it
	seen := waitStarted(t, dir, done)
	killGroupIfFailed(t, seen.pid)
	start := time.Now()
	r := result(t, done)
	took := time.Since(start)
	if r.code != 0 || took > 5*time.Second {
		t.Fatalf("exit %d, %v after the command started; want 0, well within --grace 10s\nstderr:\n%s", r.code, took, r.stderr)
	}
	if want := `exited with status 0, leaving processes in its process group: they were sent SIGTERM` + "\n"; !strings.HasSuffix(r.stderr, want) {
		t.Errorf("stderr %q, want it to end with %q", r.stderr, want)
	}
	if pid := readPid(t, filepath.Join(dir, "worker")); !processGone(pid) {
		t.Errorf("the worker (pid %d) still runs", pid)
	}
	t.Logf("relock run exited %v after its command started", took)
}

// relock run killed (SIGKILL, as the OOM killer does) does not leave its command running without the lock:
// on Linux the command gets SIGKILL as relock run dies (its parent-death signal), though the guard that
// would end its group (TestRunKilledEndsItsGroup) was killed first.
func TestRunKilledKillsItsCommand(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	addr := srv.Addr()
	dir, name := t.TempDir(), "jobs:orphan"
	p, done := startRunProc(t, nil, runArgs(addr, name, dir, `started; waitfor "$D/never"`)...)
	seen := waitStarted(t, dir, done)
	killGroupIfFailed(t, seen.pid)
	guard := childrenOf(t, p.Pid, "relock-run-guard")
	if len(guard) != 1 {
		t.Fatalf("relock run's guards: %v, want one", guard)
	}
	if err := unix.Kill(guard[0], unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil {
		t.Fatal(r.err)
	}
	killed := time.Now()
	for !processGone(seen.pid) {
		if time.Since(killed) > 5*time.Second {
			t.Fatalf("relock run was killed 5 s ago, and its command (pid %d) still runs", seen.pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("the command was gone %v after relock run was killed", time.Since(killed))
}

// childrenOf returns the pids of the processes whose parent is ppid and whose command line has word.
func childrenOf(t *testing.T, ppid int, word string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err1 := os.ReadFile("/proc/" + e.Name() + "/stat")
		cmdline, err2 := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err1 != nil || err2 != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(ppid) && bytes.Contains(cmdline, []byte(word)) {
			pids = append(pids, pid)
		}
	}
	return pids
}
