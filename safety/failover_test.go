package safety

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// nodeCommand runs a command on one node of a cluster (not on the node that serves a key).
func nodeCommand(addr string, words ...string) error {
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		return err
	}
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return rdb.Do(ctx, rdb.B().Arbitrary(words...).Build()).Error()
}

// failoverWatchdog outlasts a failover (about 2.5 s on loopback with the harness's 1 s node timeout), so
// that a hold the promoted replica has is renewed there, not lost.
const failoverWatchdog = 6 * time.Second

// failover orchestrates a round on a cluster: the replica of the lock's master is stopped (SIGSTOP), so it
// misses what follows; worker 0 alone may take the lock; then the master is killed, the replica resumed,
// and once it has taken over the other workers start. Without WithReplicaAck, worker 0's hold was granted
// by the master alone and the promoted replica lacks it: another worker takes the lock while worker 0,
// still in its section (failoverSection), believes it holds it. With WithReplicaAck, worker 0's acquisition
// waits for the stopped replica and fails with the master. Between rounds the killed master is restarted,
// and rejoins as a replica.
func failover(r *round) {
	cl := r.env.cluster
	master, err := cl.MasterOf(r.name)
	if err != nil {
		r.t.Fatal(err)
	}
	replica, err := cl.ReplicaOf(master)
	if err != nil {
		r.t.Fatal(err)
	}
	// A stopped replica still receives what the master sends (the kernel buffers it), and would apply it
	// once resumed: the master drops its link too, and the stopped replica cannot reconnect.
	start := r.hist.Now()
	if err := replica.Pause(); err != nil {
		r.t.Fatal(err)
	}
	if err := nodeCommand(master.Addr(), "CLIENT", "KILL", "TYPE", "replica"); err != nil {
		r.t.Fatal(err)
	}
	close(r.gates[0])
	for deadline := time.Now().Add(500 * time.Millisecond); !r.fired.Load() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if err := master.Kill(); err != nil {
		r.t.Fatal(err)
	}
	if err := replica.Resume(); err != nil {
		r.t.Fatal(err)
	}
	r.faults.Add(1)
	promoted, err := cl.WaitMasterOf(r.name, 30*time.Second)
	if err != nil {
		r.t.Fatal(err)
	}
	promotedAt := r.hist.Now()
	r.hist.Annotate("fault", start, promotedAt, fmt.Sprintf("replica stopped, master killed, %s promoted", promoted.Addr()))
	close(r.failedOver)
	for _, g := range r.gates[1:] {
		close(g)
	}
	// The killed master comes back as a replica of the promoted one (with WithReplicaAck, no acquisition
	// succeeds until then), and for the next round.
	if err := master.Restart(); err != nil {
		r.t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		if s, err := cl.ReplicaOf(promoted); err == nil && s == master {
			break
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s did not rejoin as a replica of %s", master.Addr(), promoted.Addr())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cl.WaitOK(30 * time.Second); err != nil {
		r.t.Fatal(err)
	}
	rejoinedAt := r.hist.Now()
	time.Sleep(r.sc.after)
	r.measure("replica promoted after", time.Duration(promotedAt-start))
	r.measure("old master back as a replica after", time.Duration(rejoinedAt-promotedAt))
	for _, op := range r.hist.Ops() {
		if op.ClientId != 0 && op.Call > promotedAt {
			r.measure("another worker's first section after the promotion", time.Duration(op.Call-promotedAt))
			break
		}
	}
}

// failoverSection is worker 0's section during the failover: it works on, checking its hold, until the
// replica has taken over, and for the fault's length after that; then it checks once more and writes.
// In a scenario unsafe by design, it writes without checking once another worker has written (see
// staleWrite).
func failoverSection(r *round, h *hold) bool {
	unsafe := r.sc.expect == mustBeCaught
	var before int64
	var told <-chan struct{}
	if unsafe {
		before, _ = r.store.Read(context.Background(), 0)
	} else {
		told = h.ctx.Done()
	}
	select {
	case <-r.failedOver:
	case <-told:
		return true
	case <-time.After(time.Minute):
		r.t.Error("no failover within a minute")
		return true
	}
	working(h, r.sc.fault)
	if unsafe {
		return r.staleWrite(before)
	}
	return true
}

// TestFailover: the lock's master fails over to a replica that missed the latest writes (asynchronous
// replication). Without WithReplicaAck, a hold granted by the master alone is lost: another client takes
// the lock on the promoted replica and writes, while the holder, which works on after the promotion and
// then writes without checking (unfenced), believes it holds it, and the checker must find the violation (fenced, the
// fencing counter's latest increments are lost too, so a token may be given twice, and the result is
// measured). With WithReplicaAck, no hold is granted that the replica lacks (acquisitions fail while it
// cannot acknowledge, and until the old master is back as a replica): every history is linearizable.
func TestFailover(t *testing.T) {
	for _, ack := range []bool{false, true} {
		for _, fenced := range []bool{true, false} {
			sc := scenario{name: "failover", kind: kindRLock, fenced: fenced, replicaAck: ack, cluster: true,
				watchdog: failoverWatchdog, fault: 100 * time.Millisecond, orchestrate: failover, inSection: failoverSection,
				after: time.Second, rounds: 1}
			switch {
			case ack:
				sc.expect = mustBeSafe
			case fenced:
				sc.expect = measured
			default:
				// The holder writes without checking once another worker has written (staleWrite): told at
				// its renewal's next attempt on the promoted replica (failed renewals are tried again every
				// timeout/10), a holder that checked learnt of the loss before its write in every round of 10
				// under load. 5 rounds. Its Client runs without the watch of holds, which could tell it
				// sooner (the scenario shows what a holder told late does; the fenced variants run with the
				// watch, measured).
				sc.expect, sc.rounds, sc.noHoldWatch = mustBeCaught, 5, true
			}
			t.Run(sc.variant(), func(t *testing.T) { run(t, sc) })
		}
	}
}
