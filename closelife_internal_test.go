package relock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/redistest"
)

// Close against the operations in flight, a model test on real Redis (docs/development.md, "Lifecycles":
// Close meets everything in flight). In each round a Client has a holder and 0 to 2 waiters of its own in
// the lock's gate; one operation is in flight, held at a random point of its script run (before it is
// sent, or after Redis ran it and before its reply is handed back): the holder's Unlock (a handoff when a
// waiter waits, else a plain release) or another owner's acquisition attempt; Close begins, and the
// operation goes on a random moment later. Whatever the interleaving, Close returns, every waiter returns,
// and nothing of the Client is left in Redis once Close has returned (CloseContext's promise); and work
// that must reach Redis is never dropped (mustRun's invariant).
func TestCloseAgainstInFlightOperations(t *testing.T) {
	srv := redistest.Start(t)
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	for round := range 30 {
		name := fmt.Sprint("close-model-", round)
		waiters := r.IntN(3)
		op := r.IntN(3) // 0: the holder's Unlock; 1: the same with no waiter; 2: another owner's attempt
		if op == 1 {
			waiters = 0
		}
		after := r.IntN(2) == 0
		c, err := New([]string{srv.Addr()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		g := gateScripts(c)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		holder := WithOwner(ctx, "holder")
		if err := c.Lock(name).Lock(holder); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, waiters)
		for i := range waiters {
			go func() { got <- c.Lock(name).Lock(WithOwner(ctx, fmt.Sprint("w", i))) }()
		}
		until(t, "the waiters wait in the gate", func() bool { return c.gates.waiters(name) == waiters })
		if waiters > 0 {
			until(t, "the gate's head sleeps", func() bool {
				c.gates.mu.Lock()
				defer c.gates.mu.Unlock()
				gt := c.gates.m[name]
				return gt != nil && gt.head != nil && gt.head.phase == wSleeping
			})
		}
		var held <-chan struct{}
		var resume func()
		done := make(chan error, 1)
		switch {
		case op == 2:
			rawDo(t, rdb, "DEL", name) // the lock free: the attempt takes it
			held, resume = g.arm(scriptAcquire, after)
			go func() { _, err := c.Lock(name).TryLock(WithOwner(ctx, "late"), 0, 0); done <- err }()
		case waiters > 0:
			held, resume = g.arm(scriptHandoff, after)
			go func() { done <- c.Lock(name).Unlock(holder) }()
		default:
			held, resume = g.arm(scriptRelease, after)
			go func() { done <- c.Lock(name).Unlock(holder) }()
		}
		<-held
		closed := make(chan error, 1)
		go func() { closed <- c.Close() }()
		time.Sleep(time.Duration(r.IntN(50)) * time.Millisecond)
		resume()
		<-done
		select {
		case err := <-closed:
			if err != nil {
				t.Fatalf("round %d (op %d, after %v, %d waiters): Close = %v", round, op, after, waiters, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d (op %d, after %v, %d waiters): Close still runs 10 s later", round, op, after, waiters)
		}
		for range waiters {
			<-got
		}
		if n, _ := rdb.Do(context.Background(), rdb.B().Exists().Key(name).Build()).AsInt64(); n != 0 {
			t.Fatalf("round %d (op %d, after %v, %d waiters): the lock is still in Redis after Close returned", round, op, after, waiters)
		}
		cancel()
	}
}

// rawDo runs a command given as words on rdb, failing t on an error.
func rawDo(t *testing.T, rdb rueidis.Client, words ...string) {
	t.Helper()
	if err := rdb.Do(context.Background(), rdb.B().Arbitrary(words...).Build()).Error(); err != nil {
		t.Fatal(err)
	}
}

// Close takes a FairLock waiter out of Redisson's queue even when its Client counts the entry expired (its
// process was starved past the entry's alive time before Close, here its expiry moved into the past):
// the queue and the Redisson scores have no time to live, and Redisson's clients would wait behind the
// entry until its score passed, minutes later.
func TestCloseTakesAnExpiredFairWaiterOutOfTheQueue(t *testing.T) {
	srv := redistest.Start(t)
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	c, err := New([]string{srv.Addr()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const name = "close-fair"
	if err := c.FairLock(name).Lock(WithOwner(ctx, "holder")); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- c.FairLock(name).Lock(WithOwner(ctx, "w")) }()
	queued := func() int64 {
		n, err := rdb.Do(ctx, rdb.B().Llen().Key("redisson_lock_queue:{"+name+"}").Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	entry := holdKey{key: "relock_lock_alive:{" + name + "}", field: c.ID() + ":w"}
	// The entry is in Redis once the waiter's attempt ran, and in the hold table once its reply came.
	until(t, "the waiter is queued, and its entry kept alive", func() bool {
		c.holds.mu.Lock()
		kept := c.holds.holds[entry] != nil
		c.holds.mu.Unlock()
		return kept && queued() == 1
	})
	c.holds.mu.Lock()
	c.holds.holds[entry].expiresAt = time.Now().Add(-time.Second)
	c.holds.mu.Unlock()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; !errors.Is(err, ErrClosed) {
		t.Fatalf("the waiter's Lock: %v, want ErrClosed", err)
	}
	if n := queued(); n != 0 {
		t.Fatalf("%d waiters left queued after Close", n)
	}
	if n, _ := rdb.Do(ctx, rdb.B().Exists().Key("redisson_lock_timeout:{"+name+"}", "redisson_lock_queue:{"+name+"}", name).Build()).AsInt64(); n != 0 {
		t.Fatalf("%d of the lock's keys left after Close", n)
	}
}
