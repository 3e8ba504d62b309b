package main

import (
	"os"
	"os/exec"
	"path/filepath"
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
