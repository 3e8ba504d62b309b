//go:build linux || freebsd

package faultnet

import (
	"syscall"
	"time"
)

// sleep waits d. The runtime's timers wake an otherwise idle process no sooner than about a millisecond
// after they are due (epoll's timeouts are whole milliseconds), which would turn a latency of 0.25 ms
// into 1 ms; short delays therefore sleep in nanosleep(2), which blocks this goroutine's thread (the
// runtime hands its processor to others) and wakes within tens of microseconds.
func sleep(d time.Duration) {
	if d >= 5*time.Millisecond {
		time.Sleep(d)
		return
	}
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}
