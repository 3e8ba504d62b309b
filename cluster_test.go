package relock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// keySlot asks the cluster for key's slot.
func keySlot(t testing.TB, rdb rueidis.Client, key string) int64 {
	t.Helper()
	n, err := rdb.Do(context.Background(), rdb.B().ClusterKeyslot().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatalf("CLUSTER KEYSLOT %q: %v", key, err)
	}
	return n
}

func TestClusterNamesWithBraces(t *testing.T) {
	t.Parallel()
	d := onCluster(t, t.Name()+":")
	p := d.prefix
	c, other := d.client(t, nil), d.client(t, nil)
	rdb := d.raw(t)
	ctx := ctxTimeout(t, 60*time.Second)
	// Names that look alike: each must be its own lock, and each lock's keys must share one slot.
	names := []string{p + "x", "{" + p + "x}", p + "a{" + p + "x}", p + "a{" + p + "x}b", "{" + p + "}tagged"}
	for _, name := range names {
		if err := c.Lock(name).Lock(ctx); err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		fair, rw := c.FairLock(name+"/fair"), c.ReadWriteLock(name+"/rw")
		if err := fair.Lock(ctx); err != nil {
			t.Fatalf("%q fair: %v", name, err)
		}
		if err := rw.ReadLock().Lock(ctx); err != nil {
			t.Fatalf("%q read: %v", name, err)
		}
	}
	// Every key of every lock lies in its lock's slot: a script touching two slots would have failed above,
	// and here the keys are checked one by one.
	for _, key := range d.keys(t) {
		found := false
		for _, name := range append(append([]string{}, names...), names...) {
			for _, suffix := range []string{"", "/fair", "/rw"} {
				lock := name + suffix
				if key == lock || containsName(key, lock) {
					found = true
					if keySlot(t, rdb, key) != keySlot(t, rdb, lock) {
						t.Errorf("key %q is not in the slot of its lock %q", key, lock)
					}
				}
			}
		}
		if !found {
			t.Errorf("key %q belongs to no lock", key)
		}
	}
	// No lock blocks another: another owner gets each of them while the others are held.
	for _, name := range names {
		ok, err := other.Lock(name).TryLock(ctx, 0, 0)
		if ok || err != nil {
			t.Fatalf("%q: another owner got a held lock: %v, %v", name, ok, err)
		}
	}
	for _, name := range names {
		if err := c.Lock(name).Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if ok, err := other.Lock(name).TryLock(ctx, 0, 0); !ok || err != nil {
			t.Fatalf("%q: not free after its Unlock (another lock's hold counted?): %v, %v", name, ok, err)
		}
		_ = other.Lock(name).Unlock(ctx)
		_ = c.FairLock(name + "/fair").Unlock(ctx)
		_ = c.ReadWriteLock(name + "/rw").ReadLock().Unlock(ctx)
	}
	for _, bad := range []string{"}", p + "a}b", p + "{}x}", p + "open{brace", p + "a{}"} {
		if err := c.Lock(bad).Lock(ctx); !errors.Is(err, relock.ErrInvalidName) {
			t.Errorf("Lock(%q) = %v, want ErrInvalidName", bad, err)
		}
	}
}

// containsName reports whether key is one of lock's companion keys (it embeds the lock's name).
func containsName(key, lock string) bool {
	for i := 0; i+len(lock) <= len(key); i++ {
		if key[i:i+len(lock)] == lock {
			// A companion key ends with the name or its tag ("...{name}", "...}:name"), or continues with
			// ":" (read-hold keys); the name must not be part of a longer name.
			rest := key[i+len(lock):]
			if rest == "" || rest[0] == '}' || rest[0] == ':' {
				return true
			}
		}
	}
	return false
}

func TestClusterReadWriteAndMultiLockAcrossSlots(t *testing.T) {
	t.Parallel()
	d := onCluster(t, t.Name()+":")
	a, b := d.client(t, nil), d.client(t, nil)
	rdb := d.raw(t)
	ctx := ctxTimeout(t, 60*time.Second)

	rw := a.ReadWriteLock(d.name("rw"))
	other := b.ReadWriteLock(d.name("rw"))
	if err := rw.WriteLock().Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rw.ReadLock().Lock(ctx); err != nil { // downgrade
		t.Fatal(err)
	}
	readers := make(chan error, 3)
	for range 3 {
		go func() {
			readers <- other.ReadLock().Lock(relock.WithOwner(ctx, "reader-"+strconv.Itoa(int(time.Now().UnixNano()))))
		}()
	}
	time.Sleep(100 * time.Millisecond)
	if err := rw.WriteLock().Unlock(ctx); err != nil { // the readers are woken by SPUBLISH
		t.Fatal(err)
	}
	for range 3 {
		select {
		case err := <-readers:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("a reader was not woken by the write unlock on the cluster")
		}
	}

	// Three locks in three different slots, held together.
	names := []string{d.name("m-a"), d.name("m-b"), d.name("m-c")}
	slots := map[int64]bool{}
	for _, n := range names {
		slots[keySlot(t, rdb, n)] = true
	}
	if len(slots) != 3 {
		t.Fatalf("the MultiLock's parts share slots: %v", slots)
	}
	var inside atomic.Int32
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := []*relock.Client{a, b}[g%2]
			m := relock.NewMultiLock(c.Lock(names[0]), c.FairLock(names[1]), c.Lock(names[2]))
			for range 10 {
				if err := m.Lock(ctx); err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					t.Error("two owners hold the MultiLock")
				}
				inside.Add(-1)
				if err := m.Unlock(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestClusterFailoverWithWaitersAndHolder(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 1)
	d := &deployment{kind: "cluster", addrs: cl.Addrs(), servers: cl.Servers}
	// Longer than a failover (about 2.5 s here) and the topology refresh after it.
	opts := &relock.Options{WatchdogTimeout: 6 * time.Second}
	holder, waiters := d.client(t, opts), d.client(t, opts)
	ctx := ctxTimeout(t, 90*time.Second)
	const name = "failover"
	if err := holder.Lock(name).Lock(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := holder.Lock(name).HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	acquired := make(chan error, n)
	for range n {
		go func() {
			l := waiters.Lock(name)
			if err := l.Lock(ctx); err != nil {
				acquired <- err
				return
			}
			time.Sleep(10 * time.Millisecond)
			acquired <- l.Unlock(ctx)
		}()
	}
	time.Sleep(300 * time.Millisecond)
	master, err := cl.MasterOf(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := master.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.WaitMasterOf(name, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	// Asynchronous replication may or may not have carried the hold to the promoted replica. Either the
	// holder keeps it (and its renewals reach the new master), or it is told it lost it; it never believes
	// in a hold Redis no longer has.
	time.Sleep(7 * time.Second) // past the hold's expiry, had it not been renewed
	exists, err := d.raw(t).Do(ctx, d.raw(t).B().Exists().Key(name).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after the failover: hold in Redis %v, holder told of a loss %v", exists == 1, held.Err() != nil)
	switch lost := held.Err() != nil; {
	case exists == 1 && lost:
		t.Fatalf("the hold survived the failover but the holder was told it was lost: %v", context.Cause(held))
	case exists == 0 && !lost:
		t.Fatal("the hold is gone after the failover but the holder was not told")
	case lost && !errors.Is(context.Cause(held), relock.ErrLockLost):
		t.Fatalf("hold context cause = %v", context.Cause(held))
	case !lost:
		if err := holder.Lock(name).Unlock(ctx); err != nil {
			t.Fatalf("Unlock after the failover: %v", err)
		}
	}
	// Every waiter gets the lock in turn: woken by the release, or by its resubscription after the failover.
	for range n {
		select {
		case err := <-acquired:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a waiter hangs after the failover")
		}
	}
}

// holdThroughFailover takes l, kills the master of its key and waits until a replica has taken over. It
// returns the hold's context.
func holdThroughFailover(t *testing.T, ctx context.Context, cl *redistest.Cluster, l *relock.RLock) context.Context {
	t.Helper()
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := l.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	master, err := cl.MasterOf(l.Name())
	if err != nil {
		t.Fatal(err)
	}
	if err := master.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.WaitMasterOf(l.Name(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return held
}

func TestClusterReplicaAckKeepsHoldThroughFailover(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 1)
	d := &deployment{kind: "cluster", addrs: cl.Addrs(), servers: cl.Servers}
	c := d.client(t, &relock.Options{WatchdogTimeout: 6 * time.Second}) // longer than a failover
	ctx := ctxTimeout(t, 90*time.Second)
	const name = "acked"
	l := c.Lock(name, relock.WithReplicaAck(1, time.Second))
	// The replica acknowledged the hold before Lock returned: killing the master at once loses nothing.
	held := holdThroughFailover(t, ctx, cl, l)
	time.Sleep(7 * time.Second) // past the hold's expiry, had it not been renewed
	if held.Err() != nil {
		t.Fatalf("an acknowledged hold was lost in the failover: %v", context.Cause(held))
	}
	if n, err := d.raw(t).Do(ctx, d.raw(t).B().Exists().Key(name).Build()).AsInt64(); n != 1 || err != nil {
		t.Fatalf("the promoted replica lacks the hold: %d, %v", n, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestReplicaAckWithoutReplicasRollsBack(t *testing.T) {
	t.Parallel()
	d := standalone(t)
	c := d.client(t, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	l := c.Lock("unreplicated", relock.WithReplicaAck(1, 100*time.Millisecond))
	start := time.Now()
	if err := l.Lock(ctx); !errors.Is(err, relock.ErrReplicaAck) {
		t.Fatalf("Lock with no replica to acknowledge = %v, want ErrReplicaAck", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("took %v with a 100 ms WAIT", d)
	}
	if locked, err := l.IsLocked(ctx); locked || err != nil {
		t.Fatalf("the unacknowledged hold was not rolled back: %v, %v", locked, err)
	}
}

// A WAIT refused with an error reply (here an ACL denies it; relocktest's in-process server refuses it
// too) after the script took the lock: the acquisition is rolled back like an unacknowledged one, and the
// error says why.
func TestReplicaAckRefusedRollsBack(t *testing.T) {
	t.Parallel()
	d := standalone(t)
	do(t, d.raw(t), "ACL", "SETUSER", "default", "-wait")
	c := d.client(t, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	l := c.Lock("refused", relock.WithReplicaAck(1, 100*time.Millisecond))
	err := l.Lock(ctx)
	if !errors.Is(err, relock.ErrReplicaAck) || !strings.Contains(err.Error(), "WAIT refused: NOPERM") {
		t.Fatalf("Lock with WAIT denied = %v, want ErrReplicaAck saying WAIT was refused", err)
	}
	if locked, err := l.IsLocked(ctx); locked || err != nil {
		t.Fatalf("the hold WAIT did not acknowledge was not rolled back: %v, %v", locked, err)
	}
}

func TestClusterRenewsHoldsInManySlots(t *testing.T) {
	t.Parallel()
	d := onCluster(t, t.Name()+":")
	c := d.client(t, fastWatchdog)
	rdb := d.raw(t)
	ctx := ctxTimeout(t, 30*time.Second)
	owner := relock.WithOwner(ctx, "many-slots")
	var holds []context.Context
	slots := map[int64]bool{}
	for i := range 12 {
		l := c.Lock(d.name("slot-" + strconv.Itoa(i)))
		slots[keySlot(t, rdb, l.Name())] = true
		if err := l.Lock(owner); err != nil {
			t.Fatal(err)
		}
		h, err := l.HoldContext(owner)
		if err != nil {
			t.Fatal(err)
		}
		holds = append(holds, h)
	}
	if len(slots) < 6 {
		t.Fatalf("the locks fell in only %d slots", len(slots))
	}
	// Renewal batches that mixed slots would fail (CROSSSLOT) and the holds would be lost.
	time.Sleep(2500 * time.Millisecond)
	for i, h := range holds {
		if h.Err() != nil {
			t.Fatalf("hold %d lost: %v", i, context.Cause(h))
		}
	}
	for i := range 12 {
		if err := c.Lock(d.name("slot-" + strconv.Itoa(i))).Unlock(owner); err != nil {
			t.Fatal(err)
		}
	}
}

func TestClusterFailoverLosesUnreplicatedHold(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 1)
	d := &deployment{kind: "cluster", addrs: cl.Addrs(), servers: cl.Servers}
	c := d.client(t, &relock.Options{WatchdogTimeout: 6 * time.Second})
	rdb := d.raw(t)
	ctx := ctxTimeout(t, 90*time.Second)
	const name = "unreplicated"
	held := holdThroughFailover(t, ctx, cl, c.Lock(name))
	// Replication is asynchronous: the promoted replica may lack a hold its master granted just before it
	// died. (On loopback the replica gets it nearly always, so the hold is removed from it by hand: the
	// state is the same.) The holder must learn it at its next renewal.
	eventually(t, 10*time.Second, "the hold is removed from the new master", func() bool {
		return rdb.Do(ctx, rdb.B().Del().Key(name).Build()).Error() == nil
	})
	removed := time.Now()
	select {
	case <-held.Done():
		if cause := context.Cause(held); !errors.Is(cause, relock.ErrLockLost) {
			t.Fatalf("cause = %v, want ErrLockLost", cause)
		}
		if d := time.Since(removed); d > 3*time.Second {
			t.Fatalf("told %v after the hold was gone; renewals come every 2 s", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the holder still believes in a hold the new master does not have")
	}
	if ok, err := d.client(t, nil).Lock(name).TryLock(ctx, 5*time.Second, 0); !ok || err != nil {
		t.Fatalf("another owner cannot take the lost lock: %v, %v", ok, err)
	}
}

// On a cluster: a release request reaches a listening holder (on sharded or plain pub/sub, as the Client
// announces releases), guarded writes run in the lock's slot and are refused, with nothing sent, for a
// command of another slot, and a fenced write goes to its fence's slot.
func TestClusterRevokeAndGuardedWrites(t *testing.T) {
	t.Parallel()
	d := onCluster(t, t.Name()+":")
	a, b := d.client(t, nil), d.client(t, nil)
	rdb := d.raw(t)
	ctx := ctxTimeout(t, 30*time.Second)
	name := "{" + d.name("revoke") + "}"
	la, lb := a.Lock(name, relock.WithFencing()), b.Lock(name, relock.WithFencing())
	holder := relock.WithOwner(ctx, "holder")
	if err := la.Lock(holder); err != nil {
		t.Fatal(err)
	}
	requests, err := la.ReleaseRequests(holder)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if _, ok := <-requests; ok {
			_ = la.Unlock(holder)
		}
	}()
	if err := lb.Revoke(ctx, "rebalance", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if held, _ := lb.IsHeld(ctx); !held {
		t.Fatal("Revoke did not give the lock to the requester")
	}
	if _, err := lb.GuardedWrite(ctx, b.B().Set().Key(name+":data").Value("1").Build()); err != nil {
		t.Fatal(err)
	}
	other := d.name("elsewhere") // hashed whole: almost surely another slot
	if _, err := lb.GuardedWrite(ctx, b.B().Set().Key(other).Value("x").Build()); !errors.Is(err, relock.ErrCrossSlot) {
		t.Fatalf("a guarded write to another slot = %v; want ErrCrossSlot", err)
	}
	if n, _ := rdb.Do(ctx, rdb.B().Exists().Key(other).Build()).AsInt64(); n != 0 {
		t.Fatal("a refused cross-slot write landed")
	}
	fence := "{" + d.name("res") + "}:fence"
	if _, err := lb.FencedWrite(ctx, fence, b.B().Set().Key("{"+d.name("res")+"}:data").Value("1").Build()); err != nil {
		t.Fatal(err)
	}
}

// On a cluster too, a hold deleted behind its holder's back ends its HoldContext within milliseconds (the
// watch's own caching client tracks each key on its node), long before the watchdog's first check (10 s).
func TestClusterLossSeenAtOnce(t *testing.T) {
	t.Parallel()
	d := onCluster(t, t.Name()+":")
	c := d.client(t, nil)
	rdb := d.raw(t)
	ctx := ctxTimeout(t, 30*time.Second)
	for _, base := range []string{"a", "b", "c", "d"} { // names in several slots, so on several nodes
		name := d.name(base)
		l := c.Lock(name)
		if err := l.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		held, err := l.HoldContext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		start := time.Now()
		if err := rdb.Do(ctx, rdb.B().Del().Key(name).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-held.Done():
			t.Logf("%s: the holder knew after %v", name, time.Since(start))
		case <-time.After(3 * time.Second):
			t.Fatalf("%s: the hold context still runs 3 s after the hold was deleted", name)
		}
	}
}
