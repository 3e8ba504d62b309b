package relock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// redlockNodes starts 5 independent servers and, for each, a relock Client and a plain client.
type redlockNodes struct {
	servers []*redistest.Server
	clients []*relock.Client
	raw     []rueidis.Client
}

func startRedlockNodes(t *testing.T, opts *relock.Options) *redlockNodes {
	t.Helper()
	n := &redlockNodes{servers: redistest.StartN(t, 5)}
	for _, s := range n.servers {
		n.clients = append(n.clients, newClient(t, s, opts))
		n.raw = append(n.raw, rawClient(t, s))
	}
	return n
}

// redlock makes a RedLock called name over clients (one per node).
func redlock(clients []*relock.Client, name string, opts *relock.RedLockOptions) *relock.RedLock {
	parts := make([]relock.Lockable, len(clients))
	for i, c := range clients {
		parts[i] = c.Lock(name)
	}
	return relock.NewRedLock(parts, opts)
}

// keysOn returns the keys on node i.
func (n *redlockNodes) keysOn(t testing.TB, i int) []string {
	keys, err := do(t, n.raw[i], "KEYS", "*").AsStrSlice()
	if err != nil {
		t.Fatalf("KEYS on node %d: %v", i, err)
	}
	return keys
}

func TestRedLockNeedsAMajorityOfNodes(t *testing.T) {
	t.Parallel()
	nodes := startRedlockNodes(t, nil)
	ctx := ctxTimeout(t, 120*time.Second)
	rl := redlock(nodes.clients, "quorum", &relock.RedLockOptions{NodeTimeout: 50 * time.Millisecond})
	for down := 0; down < 1<<5; down++ {
		up := 0
		for i, s := range nodes.servers {
			if down&(1<<i) != 0 {
				if err := s.Pause(); err != nil {
					t.Fatal(err)
				}
			} else {
				up++
			}
		}
		ok, err := rl.TryLock(ctx, 0, 10*time.Second)
		if want := up >= 3; ok != want {
			t.Errorf("nodes down %05b (%d up): acquired %v, %v; want %v", down, up, ok, err, want)
		}
		if ok {
			if err := rl.Unlock(ctx); err != nil {
				t.Errorf("nodes down %05b: Unlock = %v", down, err)
			}
		} else if up < 3 && !errors.Is(err, relock.ErrNoQuorum) {
			t.Errorf("nodes down %05b: error %v, want ErrNoQuorum", down, err)
		}
		for i, s := range nodes.servers {
			if down&(1<<i) != 0 {
				if err := s.Resume(); err != nil {
					t.Fatal(err)
				}
			}
		}
		// Requests queued on the paused nodes run now (the attempts, then their releases and undos).
		eventually(t, 5*time.Second, "no key is left on any node", func() bool {
			for i := range nodes.servers {
				if len(nodes.keysOn(t, i)) != 0 {
					return false
				}
			}
			return true
		}, func() string { return fmt.Sprint(nodes.keysOn(t, 0), nodes.keysOn(t, 1)) })
	}
}

func TestRedLockPausedNodeCostsOnlyNodeTimeout(t *testing.T) {
	t.Parallel()
	nodes := startRedlockNodes(t, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	const nodeTimeout = 100 * time.Millisecond
	rl := redlock(nodes.clients, "paused", &relock.RedLockOptions{NodeTimeout: nodeTimeout})
	if err := nodes.servers[2].Pause(); err != nil {
		t.Fatal(err)
	}
	defer nodes.servers[2].Resume()
	start := time.Now()
	ok, err := rl.TryLock(ctx, 10*time.Second, 0)
	if !ok || err != nil {
		t.Fatalf("TryLock with one node paused = %v, %v", ok, err)
	}
	if d := time.Since(start); d > nodeTimeout+200*time.Millisecond {
		t.Fatalf("acquired after %v; the node timeout is %v", d, nodeTimeout)
	}
	if v, err := rl.Validity(ctx); err != nil || v <= 0 || v > relock.DefaultWatchdogTimeout {
		t.Fatalf("Validity = %v, %v", v, err)
	}
	start = time.Now()
	if err := rl.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with one node paused = %v", err)
	}
	if d := time.Since(start); d > nodeTimeout+200*time.Millisecond {
		t.Fatalf("Unlock took %v; the node timeout is %v", d, nodeTimeout)
	}
}

// Lock reports node failures that cost the majority at its first attempt; once it waits for another
// owner it rides them out, and gets the lock when the nodes are back and the owner lets go.
func TestRedLockWaiterRidesOutNodeFailures(t *testing.T) {
	t.Parallel()
	nodes := startRedlockNodes(t, nil)
	ctx := ctxTimeout(t, 60*time.Second)
	rl := redlock(nodes.clients, "waiter", &relock.RedLockOptions{NodeTimeout: 100 * time.Millisecond})
	pause := func(paused bool) {
		for _, s := range nodes.servers[:3] {
			var err error
			if paused {
				err = s.Pause()
			} else {
				err = s.Resume()
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}

	pause(true)
	start := time.Now()
	if err := rl.Lock(relock.WithOwner(ctx, "first")); !errors.Is(err, relock.ErrNoQuorum) || time.Since(start) > 2*time.Second {
		t.Fatalf("Lock with 3 of 5 nodes paused = %v after %v, want ErrNoQuorum at once", err, time.Since(start))
	}
	pause(false)
	eventually(t, 5*time.Second, "no key is left on any node", func() bool {
		for i := range nodes.servers {
			if len(nodes.keysOn(t, i)) != 0 {
				return false
			}
		}
		return true
	})

	holder := relock.WithOwner(ctx, "holder")
	if err := rl.Lock(holder); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- rl.Lock(relock.WithOwner(ctx, "waiter")) }()
	time.Sleep(300 * time.Millisecond) // the waiter is waiting
	pause(true)
	time.Sleep(time.Second) // the waiter's attempts fail for node errors meanwhile
	pause(false)
	select {
	case err := <-got:
		t.Fatalf("the waiter's Lock returned %v while the lock was held", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := rl.Unlock(holder); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the waiter's Lock = %v, want the lock", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the lock after the nodes came back and the holder let go")
	}
}

func TestRedLockLeavesForeignHoldsAlone(t *testing.T) {
	t.Parallel()
	nodes := startRedlockNodes(t, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	foreign := func(i int) {
		do(t, nodes.raw[i], "HSET", "contested", "someone-else:1", "1")
		do(t, nodes.raw[i], "PEXPIRE", "contested", "30000")
	}
	checkForeign := func(i int) {
		t.Helper()
		fields, _ := do(t, nodes.raw[i], "HGETALL", "contested").AsStrMap()
		if len(fields) != 1 || fields["someone-else:1"] != "1" {
			t.Fatalf("node %d: the foreign hold changed: %v", i, fields)
		}
	}
	// A minority held by another owner: the lock is still ours, and theirs stay as they were.
	foreign(0)
	foreign(1)
	rl := redlock(nodes.clients, "contested", nil)
	if ok, err := rl.TryLock(ctx, 0, 0); !ok || err != nil {
		t.Fatalf("TryLock with 2 of 5 nodes held elsewhere = %v, %v", ok, err)
	}
	checkForeign(0)
	checkForeign(1)
	if err := rl.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	checkForeign(0)
	checkForeign(1)
	// A majority held by another owner: the attempt fails and leaves no key of its own anywhere.
	foreign(2)
	if ok, err := rl.TryLock(ctx, 0, 0); ok || err != nil {
		t.Fatalf("TryLock with 3 of 5 nodes held elsewhere = %v, %v", ok, err)
	}
	for i := 0; i < 3; i++ {
		checkForeign(i)
	}
	// The round stops its parts once the majority is out of reach: a part's attempt cancelled in flight
	// may leave the mark of its undo (lib/undone.lua), which expires within 2 s; nothing else.
	for i := 3; i < 5; i++ {
		for _, k := range nodes.keysOn(t, i) {
			ttl, _ := do(t, nodes.raw[i], "PTTL", k).AsInt64()
			if k != "relock_undone:{contested}" || ttl <= 0 || ttl > 2000 {
				t.Fatalf("a failed attempt left %q (PTTL %d ms) on node %d", k, ttl, i)
			}
		}
	}
}

func TestRedLockRacers(t *testing.T) {
	t.Parallel()
	nodes := startRedlockNodes(t, nil)
	// A second set of Clients on the same nodes: racers in two processes.
	var others []*relock.Client
	for _, s := range nodes.servers {
		others = append(others, newClient(t, s, nil))
	}
	ctx := ctxTimeout(t, 60*time.Second)
	var wins atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rl := redlock([][]*relock.Client{nodes.clients, others}[r%2], "race", nil)
			<-start
			// Racing attempts can split the nodes so that none has a majority; each then releases and
			// tries again after a random delay. Within a second one gets it, and keeps it.
			if ok, err := rl.TryLock(ctx, time.Second, 0); err != nil {
				t.Error(err)
			} else if ok {
				wins.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d racers won the lock, want exactly 1", wins.Load())
	}

	// Mutual exclusion under contention: a read-modify-write counter on node 0.
	var inside atomic.Int32
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rl := redlock([][]*relock.Client{nodes.clients, others}[r%2], "counter", nil)
			for range 20 {
				if err := rl.Lock(ctx); err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					t.Error("two RedLock holders at once")
				}
				n, _ := do(t, nodes.raw[0], "GET", "count").AsInt64()
				do(t, nodes.raw[0], "SET", "count", strconv.FormatInt(n+1, 10))
				inside.Add(-1)
				if err := rl.Unlock(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n, _ := do(t, nodes.raw[0], "GET", "count").AsInt64(); n != 60 {
		t.Fatalf("count = %d, want 60", n)
	}
}

func TestRedLockLostWhenMajorityOfNodesDie(t *testing.T) {
	t.Parallel()
	nodes := startRedlockNodes(t, fastWatchdog)
	ctx := ctxTimeout(t, 30*time.Second)
	rl := redlock(nodes.clients, "dying", nil)
	if err := rl.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := rl.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := nodes.servers[i].Kill(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(1500 * time.Millisecond) // past the dead nodes' expiry: 3 of 5 still hold
	if held.Err() != nil {
		t.Fatalf("the hold ended with 3 of 5 nodes alive: %v", context.Cause(held))
	}
	killed := time.Now()
	if err := nodes.servers[2].Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held.Done():
		if d := time.Since(killed); d > 1500*time.Millisecond {
			t.Fatalf("the loss was reported %v after the third node died; watchdog timeout is 1s", d)
		}
		if cause := context.Cause(held); !errors.Is(cause, relock.ErrLockLost) {
			t.Fatalf("cause = %v, want ErrLockLost", cause)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the hold was not reported lost with 2 of 5 nodes left")
	}
}

func TestRedLockReentrancy(t *testing.T) {
	t.Parallel()
	nodes := startRedlockNodes(t, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	rl := redlock(nodes.clients, "reentrant", nil)
	if err := rl.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rl.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	other := make(chan bool, 1)
	go func() { // another goroutine is another owner
		ok, _ := rl.TryLock(ctx, 0, 0)
		other <- ok
	}()
	if <-other {
		t.Fatal("another owner got a held RedLock")
	}
	for range 2 {
		if err := rl.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := rl.Unlock(ctx); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("third Unlock = %v, want ErrNotHeld", err)
	}
	for i := range nodes.servers {
		if keys := nodes.keysOn(t, i); len(keys) != 0 {
			t.Fatalf("node %d keeps %v", i, keys)
		}
	}
}
