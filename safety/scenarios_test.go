package safety

import (
	"testing"
	"time"
)

// watchdog is the watchdog timeout of the scenarios' Clients: short, so that a fault past it is short too.
const watchdog = 500 * time.Millisecond

// TestPausedHolder: the holder's links stall, so its renewals fail, and it sleeps past the watchdog timeout
// between its last check and its write (a GC pause). Another client takes the lock meanwhile. Fenced, the
// store rejects the stale write and every history is linearizable; unfenced, the stale write lands and the
// checker finds the violation.
func TestPausedHolder(t *testing.T) {
	for _, k := range []lockKind{kindRLock, kindFairLock, kindWriteLock, kindPermit, kindElection, kindRedLock} {
		for _, fenced := range []bool{true, false} {
			if fenced && !k.fenceable() {
				continue
			}
			sc := scenario{name: "paused-holder", kind: k, fenced: fenced, expect: mustBeCaught, watchdog: watchdog,
				fault: 3 * watchdog, inSection: pauseHolder, after: 300 * time.Millisecond}
			if fenced {
				sc.expect = mustBeSafe
			}
			if k == kindRedLock {
				sc.servers = 3
			}
			t.Run(string(k)+"/"+sc.variant(), func(t *testing.T) { run(t, sc) })
		}
	}
}
