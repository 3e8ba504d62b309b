//go:build !linux

package main

import "syscall"

// setParentDeathSignal does nothing but on Linux: elsewhere a command outlives a run that is killed.
func setParentDeathSignal(*syscall.SysProcAttr) {}

// reapOrphans does nothing but on Linux: elsewhere the processes run's command leaves behind are given
// to init when their parent exits, and run waits until init has reaped them.
func reapOrphans() {}
