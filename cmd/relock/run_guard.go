package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
)

// The guard of a command's process group: a small process, started by run beside its command, that ends
// the command's group with SIGKILL when run dies without having seen the group gone (SIGKILL, the OOM
// killer, a crash). The kernel tells it: run holds the only write end of the pipe the guard reads, and a
// dead process's files are closed, so the guard reads the end of the file. The parent-death signal of
// the command (setParentDeathSignal) reaches the command alone; the guard reaches the processes it
// started too, on every system.

// guardScript is the guard's program (sh): it reads the group's id (nothing: run died before it started
// the command), then "done" once run has seen the group gone; anything else, or the end of its input,
// and it sends the group SIGKILL. It ignores the signals an operator or a terminal sends a process tree
// (they are for run, which ends the group itself); SIGKILL ends it.
const guardScript = `trap '' HUP INT TERM QUIT; read -r pgid || exit 0; read -r done; ` +
	`[ "$done" = done ] || kill -s KILL -- "-$pgid" 2>/dev/null`

// guard is a running guard (see guardScript).
type guard struct {
	cmd      *exec.Cmd
	w        *os.File // the write end of the guard's input
	watching bool     // it was given a group's id
}

// startGuard starts a guard, which waits for watch.
func startGuard() (*guard, error) {
	r, w, err := os.Pipe() // close-on-exec: the command does not get w, and cannot keep the guard waiting
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command("/bin/sh", "-c", guardScript, "relock-run-guard")
	cmd.Stdin = r
	cmd.Dir = "/" // not to keep run's directory busy
	// A process group of its own: what is sent to run's (a Ctrl-C) is not for it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, err
	}
	return &guard{cmd: cmd, w: w}, nil
}

// watch tells g the process group to end if run dies. run starts the command before (the group's id is
// the command's pid): a run killed between the two leaves the command to its parent-death signal.
func (g *guard) watch(pgid int) {
	if g != nil {
		_, err := fmt.Fprintf(g.w, "%d\n", pgid)
		g.watching = err == nil
	}
}

// stop ends g: once the group is gone (gone), saying so, so that it exits without sending anything (the
// group's id may be another group's by then); otherwise it sends the group SIGKILL, again, as it exits.
// A guard that watches no group exits at the end of its input.
func (g *guard) stop(gone bool) {
	if g == nil {
		return
	}
	if gone && g.watching {
		_, _ = io.WriteString(g.w, "done\n")
	}
	_ = g.w.Close()
	_ = g.cmd.Wait()
}
