//go:build !linux

package main

import "syscall"

// setParentDeathSignal does nothing but on Linux: elsewhere a command outlives a run that is killed.
func setParentDeathSignal(*syscall.SysProcAttr) {}
