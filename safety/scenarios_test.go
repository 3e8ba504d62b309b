package safety

import (
	"testing"
	"time"
)

// watchdog is the watchdog timeout of the scenarios' Clients: short, so that a fault past it is short too.
const watchdog = 500 * time.Millisecond

// TestPausedHolder: the holder's links stall, so its renewals fail, and it sleeps for 3 times the watchdog
// timeout between its last check and its write (a GC pause). Another client takes the lock meanwhile.
// Fenced, the store rejects the stale write and every history is linearizable; unfenced, the stale write
// lands and the checker finds the violation.
func TestPausedHolder(t *testing.T) {
	eachKind(t, allKinds, func(k lockKind, fenced bool) scenario {
		sc := scenario{name: "paused-holder", kind: k, fenced: fenced, expect: mustBeCaught, watchdog: watchdog,
			work: 20 * time.Millisecond, fault: 3 * watchdog, inSection: pauseHolder, after: 300 * time.Millisecond}
		if fenced {
			sc.expect = mustBeSafe
		}
		return sc
	})
}

// TestReadModifyWrite: a counter's read-modify-write, with sections that work 200 ms between the read and
// the write, and a holder paused for 1.2 times the watchdog timeout, so that its stale write tends to land
// inside the next holder's section, between its read and its write. A store that fences reads and writes
// rejects it (the next holder's read registered a higher token): every history must be linearizable. A
// store that fences only its writes accepts it (no higher token has been written yet), and the next
// holder's write overwrites it unseen: the checker must find that lost update.
func TestReadModifyWrite(t *testing.T) {
	for _, writesOnly := range []bool{false, true} {
		sc := scenario{name: "read-modify-write", kind: kindRLock, fenced: true, writesOnly: writesOnly, counter: true,
			expect: mustBeSafe, watchdog: watchdog, work: 200 * time.Millisecond, fault: 6 * watchdog / 5,
			inSection: pauseHolder, after: 500 * time.Millisecond, rounds: 3}
		if writesOnly {
			sc.expect = mustBeCaught
		}
		t.Run(sc.variant(), func(t *testing.T) { run(t, sc) })
	}
}

// TestGuardedWrites: the register lives on the lock's server and every write is a GuardedWrite, which lands
// only while the writer's hold is current. The holder is paused past its hold between its check and its
// write (as in TestPausedHolder), in a register and in a read-modify-write counter: its stale write is
// refused by the guard, with no token in the store, and every history must be linearizable, fenced lock or
// not.
func TestGuardedWrites(t *testing.T) {
	for _, k := range []lockKind{kindRLock, kindFairLock, kindWriteLock} {
		for _, fenced := range []bool{true, false} {
			for _, counter := range []bool{false, true} {
				sc := scenario{name: "guarded-writes", kind: k, fenced: fenced, guarded: true, counter: counter,
					expect: mustBeSafe, watchdog: watchdog, work: 20 * time.Millisecond, fault: 3 * watchdog,
					inSection: pauseHolder, after: 300 * time.Millisecond}
				if counter {
					sc.name, sc.work, sc.fault, sc.after = "guarded-read-modify-write", 200*time.Millisecond, 6*watchdog/5, 500*time.Millisecond
				}
				t.Run(string(k)+"/"+sc.name+"/"+sc.variant(), func(t *testing.T) { run(t, sc) })
			}
		}
	}
}

// TestRevokedHolder: between worker 0's check and its write, another Client takes the lock over
// (TakeOver), writes the register under it through the guard, and releases it; worker 0 then writes
// without checking again. Its guarded write must be refused: every history linearizable, fenced lock or
// not, register or counter.
func TestRevokedHolder(t *testing.T) {
	for _, fenced := range []bool{true, false} {
		for _, counter := range []bool{false, true} {
			sc := scenario{name: "revoked-holder", kind: kindRLock, fenced: fenced, guarded: true, counter: counter,
				expect: mustBeSafe, watchdog: watchdog, work: 20 * time.Millisecond, fault: 100 * time.Millisecond,
				inSection: revokeHolder, after: 300 * time.Millisecond}
			if counter {
				sc.name = "revoked-holder-counter"
			}
			t.Run(sc.name+"/"+sc.variant(), func(t *testing.T) { run(t, sc) })
		}
	}
}

// eachKind runs, for each of kinds and each variant it has (fenced when it gives a token, and unfenced), the
// scenario f returns, as a parallel subtest.
func eachKind(t *testing.T, kinds []lockKind, f func(k lockKind, fenced bool) scenario) {
	for _, k := range kinds {
		for _, fenced := range []bool{true, false} {
			if fenced && !k.fenceable() {
				continue
			}
			sc := f(k, fenced)
			if k == kindRedLock {
				sc.servers = 3
			}
			t.Run(string(k)+"/"+sc.variant(), func(t *testing.T) { run(t, sc) })
		}
	}
}

var allKinds = []lockKind{kindRLock, kindFairLock, kindWriteLock, kindPermit, kindElection, kindRedLock}

// TestLatencySpikes: every link's latency jumps between 0 and a quarter of the watchdog timeout (1 s here),
// every 100 to 300 ms, while the clients contend. No hold is lost: every history is linearizable, fenced or
// not. The object is a counter.
func TestLatencySpikes(t *testing.T) {
	eachKind(t, allKinds, func(k lockKind, fenced bool) scenario {
		return scenario{name: "latency-spikes", kind: k, fenced: fenced, counter: true, expect: mustBeSafe,
			watchdog: 1 * time.Second, work: 5 * time.Millisecond, fault: 250 * time.Millisecond,
			background: latencySpikes, after: 2 * time.Second, rounds: 1}
	})
}

// TestPartitionedHolder: inside its section, the holder is partitioned from the lock's servers for 3 times
// the watchdog timeout, and keeps working, checking its hold every 5 ms, then checks once more and writes
// if it still holds. Another client takes the lock once the hold expires. Fenced, every history must be
// linearizable; unfenced, the holder's check against its hold's local expiry is all that protects the
// register, and the result is measured, not asserted.
func TestPartitionedHolder(t *testing.T) {
	eachKind(t, allKinds, func(k lockKind, fenced bool) scenario {
		sc := scenario{name: "partitioned-holder", kind: k, fenced: fenced, expect: measured,
			watchdog: watchdog, fault: 3 * watchdog, inSection: partitionHolder, after: 300 * time.Millisecond}
		if fenced {
			sc.expect = mustBeSafe
		}
		return sc
	})
}

// aof is redis-server's persistence for the restart scenarios that keep their data.
var aof = []string{"--appendonly", "yes", "--appendfsync", "always"}

// TestRestartWithAOF: the lock's server is killed and restarted, with AOF and appendfsync always, while a
// holder is in its section, which then works on for a fifth of the watchdog timeout (checking its hold) and
// writes. The restart loses nothing: every history is linearizable, fenced or not. The object is a counter.
func TestRestartWithAOF(t *testing.T) {
	eachKind(t, []lockKind{kindRLock, kindFairLock, kindWriteLock, kindElection, kindPermit}, func(k lockKind, fenced bool) scenario {
		return scenario{name: "restart-aof", kind: k, fenced: fenced, counter: true, expect: mustBeSafe,
			serverArgs: aof, watchdog: watchdog, fault: watchdog / 5, inSection: restartServer, after: 500 * time.Millisecond}
	})
}

// TestRestartWithoutPersistence: the same restart without persistence: the server comes back empty, and
// another client takes the lock while the holder still believes in its hold, until the watchdog tells it
// otherwise; a holder that writes before then overwrites the other client's writes. Unfenced, the checker
// must find the violation. Fenced, the fencing counter is lost too: the tokens start again from 1. A new
// holder's token below the store's highest has its writes rejected; one equal to the token of a holder still
// in its section (tokens are reused) has them accepted alongside the old holder's, and the checker finds that
// lost update. The fenced variant is measured, not asserted; so is a PermitSemaphore's, whose counter is
// lost too, leaving no permit to take.
//
// The Clients run without the watch of holds (Options.NoHoldWatch), as on a cluster: the watchdog tells
// the holder, at its next renewal, 120 to 220 ms after the restart. TestRestartWithoutPersistenceWatched
// measures the same restart with the watch.
func TestRestartWithoutPersistence(t *testing.T) {
	eachKind(t, []lockKind{kindRLock, kindFairLock, kindWriteLock, kindElection, kindPermit}, func(k lockKind, fenced bool) scenario {
		sc := scenario{name: "restart-no-persistence", kind: k, fenced: fenced, counter: true, expect: mustBeCaught,
			watchdog: watchdog, fault: watchdog / 5, inSection: restartServer, after: 500 * time.Millisecond, rounds: 3,
			noHoldWatch: true}
		if fenced || k == kindPermit {
			// A PermitSemaphore's counter is lost with its permits: no permit is left to take, and nobody
			// gets in until the permits are set again (a liveness failure, not a safety one).
			sc.expect = measured
		}
		return sc
	})
}

// TestRestartWithoutPersistenceWatched is TestRestartWithoutPersistence with the watch of holds (the
// default on a single server): the holder's connection to the watch breaks with the restart, and its
// holds, read again on the new connection, are found gone, so it is told tens of milliseconds after the
// restart instead of at its next renewal, and a holder that checks its hold before writing (here 100 ms
// after the restart) no longer writes. A holder that writes within those milliseconds still would: the
// result is measured, not asserted.
func TestRestartWithoutPersistenceWatched(t *testing.T) {
	eachKind(t, []lockKind{kindRLock, kindFairLock, kindWriteLock, kindElection}, func(k lockKind, fenced bool) scenario {
		return scenario{name: "restart-no-persistence", kind: k, fenced: fenced, counter: true, expect: measured,
			watchdog: watchdog, fault: watchdog / 5, inSection: restartServer, after: 500 * time.Millisecond, rounds: 3}
	})
}

// TestServerPause: the lock's server (a RedLock's first node) is stopped (SIGSTOP) for 1.5 times the
// watchdog timeout, every 300 to 600 ms, while the clients contend. Holders see their holds end (renewals
// fail until the local expiry) before the server, resumed, lets another client in: every history is
// linearizable, fenced or not.
func TestServerPause(t *testing.T) {
	eachKind(t, allKinds, func(k lockKind, fenced bool) scenario {
		return scenario{name: "server-pause", kind: k, fenced: fenced, expect: mustBeSafe,
			watchdog: watchdog, work: 5 * time.Millisecond, fault: 3 * watchdog / 2, background: pauseServer, after: 2 * time.Second, rounds: 1}
	})
}

// TestClientPause: CLIENT PAUSE ALL on the lock's server (a RedLock's first node) for 1.5 times the
// watchdog timeout, every 300 to 600 ms: every history is linearizable, fenced or not.
func TestClientPause(t *testing.T) {
	eachKind(t, allKinds, func(k lockKind, fenced bool) scenario {
		return scenario{name: "client-pause", kind: k, fenced: fenced, expect: mustBeSafe,
			watchdog: watchdog, work: 5 * time.Millisecond, fault: 3 * watchdog / 2, background: clientPause, after: 2 * time.Second, rounds: 1}
	})
}
