package main

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// setParentDeathSignal makes the kernel send the command SIGKILL when run dies, however it dies (SIGKILL,
// the OOM killer): the hold then expires within the watchdog timeout, and the command must not go on
// without it. SIGKILL rather than SIGTERM: nothing would be left to follow a SIGTERM that the command
// ignores with a SIGKILL. Only the command gets it, not the processes it starts (the kernel clears it
// in children, and in a set-user-ID program it execs). The signal is sent when the thread that started
// the command exits: procs.start keeps that thread locked until the command has exited.
func setParentDeathSignal(a *syscall.SysProcAttr) {
	a.Pdeathsig = syscall.SIGKILL
}

// reapOrphans makes relock the parent of its descendants that lose theirs (a child subreaper), rather
// than the system's init: the processes run's command leaves behind, which run then reaps (procs.gone).
// Without it, one that exits after the command is a zombie in the command's process group until init
// reaps it, and run waits for that (an init may take seconds, or never reap).
func reapOrphans() {
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}
