package main

import "syscall"

// setParentDeathSignal makes the kernel send the command SIGKILL when run dies, however it dies (SIGKILL,
// the OOM killer): the hold then expires within the watchdog timeout, and the command must not go on
// without it. SIGKILL rather than SIGTERM: nothing would be left to follow a SIGTERM that the command
// ignores with a SIGKILL. Only the command gets it, not the processes it starts (the kernel clears it
// in children, and in a set-user-ID program it execs). The signal is sent when the thread that started
// the command exits: procs.start keeps that thread locked until the command has exited.
func setParentDeathSignal(a *syscall.SysProcAttr) {
	a.Pdeathsig = syscall.SIGKILL
}
