//go:build !(linux || freebsd)

package faultnet

import "time"

// sleep waits d (with the runtime's timer resolution).
func sleep(d time.Duration) { time.Sleep(d) }
