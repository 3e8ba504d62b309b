package redistest

import (
	"fmt"
	"os"
	"time"
)

// A test binary must leave no process behind, as goleak makes sure it leaves no goroutine: a
// redis-server, a helper process, or a grandchild that a child killed with SIGKILL left running (the
// relock demo's redis-server, say). Each test binary's TestMain calls AdoptOrphans first and
// CheckProcesses last.

// AdoptOrphans makes this process the parent of every descendant whose own parent dies (a child
// subreaper, on Linux), so that CheckProcesses sees a grandchild orphaned by a child that was killed.
// Elsewhere it does nothing.
func AdoptOrphans() { adoptOrphans() }

// CheckProcesses returns code, or 1 when child processes of this process (adopted orphans included) are
// still running grace after it is called: it prints each to stderr, then kills it (SIGKILL) and reaps
// it, so that none outlives the test binary. Exited children nobody waited for are reaped. On systems
// other than Linux it returns code.
func CheckProcesses(code int, grace time.Duration) int {
	left := processesLeft(grace)
	if len(left) == 0 {
		return code
	}
	fmt.Fprintf(os.Stderr, "processes left running at the end of the tests (killed now):\n")
	for _, p := range left {
		fmt.Fprintf(os.Stderr, "  %s\n", p)
	}
	return 1
}
