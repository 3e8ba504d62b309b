//go:build !linux

package redistest

import (
	"syscall"
	"time"
)

func adoptOrphans() {}

// setParentDeath does nothing: only Linux has a parent-death signal. A redis-server whose test binary or
// relock demo is killed outright keeps running there.
func setParentDeath(*syscall.SysProcAttr) {}

func processesLeft(time.Duration) []string { return nil }
