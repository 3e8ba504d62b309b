package relock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

const (
	fairQueue     = "redisson_lock_queue:{fair}"
	fairDeadlines = "redisson_lock_timeout:{fair}"
)

// queue returns the fair lock's queue, head first.
func queue(t testing.TB, rdb rueidis.Client) []string {
	t.Helper()
	q, err := do(t, rdb, "LRANGE", fairQueue, "0", "-1").AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func waitQueueLen(t testing.TB, rdb rueidis.Client, n int) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("%d waiters queue", n), func() bool { return len(queue(t, rdb)) == n },
		func() string { return fmt.Sprint(queue(t, rdb)) })
}

// fairWaiter queues on Client c as the owner token, and when it gets the lock appends token to order,
// holds the lock for hold, and unlocks.
func fairWaiter(t *testing.T, wg *sync.WaitGroup, c *relock.Client, token string, hold time.Duration, mu *sync.Mutex, order *[]string) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctx := relock.WithOwner(context.Background(), token)
		l := c.FairLock("fair")
		if err := l.Lock(ctx); err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		*order = append(*order, token)
		mu.Unlock()
		time.Sleep(hold)
		if err := l.Unlock(ctx); err != nil {
			t.Error(err)
		}
	}()
}

func TestFairLockExactFIFO(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 30*time.Second)
	holder := relock.WithOwner(ctx, "holder")
	if err := a.FairLock("fair").Lock(holder); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var order, want []string
	for i := range 10 {
		c := []*relock.Client{a, b}[i%2]
		token := "w" + strconv.Itoa(i)
		want = append(want, token)
		fairWaiter(t, &wg, c, token, time.Millisecond, &mu, &order)
		waitQueueLen(t, rdb, i+1) // queue them in a known order
	}
	if err := a.FairLock("fair").Unlock(holder); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if !slices.Equal(order, want) {
		t.Fatalf("acquisition order %v, want %v", order, want)
	}
	if keys, _ := do(t, rdb, "KEYS", "*").AsStrSlice(); len(keys) != 0 {
		t.Fatalf("keys left when everyone is done: %v", keys)
	}
}

func TestFairLock200WaitersInQueueOrder(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clients := []*relock.Client{newClient(t, srv, nil), newClient(t, srv, nil)}
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 60*time.Second)
	holder := relock.WithOwner(ctx, "holder")
	if err := clients[0].FairLock("fair").Lock(holder); err != nil {
		t.Fatal(err)
	}
	const n = 200
	var wg sync.WaitGroup
	var mu sync.Mutex
	var order []string
	for i := range n {
		fairWaiter(t, &wg, clients[i%2], "w"+strconv.Itoa(i), 0, &mu, &order)
	}
	waitQueueLen(t, rdb, n)
	var queued []string // the order in which they queued, as owner tokens
	for _, field := range queue(t, rdb) {
		queued = append(queued, field[len(clients[0].ID())+1:])
	}
	if err := clients[0].FairLock("fair").Unlock(holder); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if len(order) != n {
		t.Fatalf("%d of %d waiters acquired", len(order), n)
	}
	if !slices.Equal(order, queued) {
		for i := range order {
			if order[i] != queued[i] {
				t.Fatalf("acquisition %d was %s; the queue had %s there", i, order[i], queued[i])
			}
		}
	}
	if keys, _ := do(t, rdb, "KEYS", "*").AsStrSlice(); len(keys) != 0 {
		t.Fatalf("keys left when everyone is done: %v", keys)
	}
}

func TestFairLockDeadWaiterDoesNotBlockQueue(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, fastWatchdog)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 30*time.Second)
	holder := relock.WithOwner(ctx, "holder")
	if err := c.FairLock("fair").Lock(holder); err != nil {
		t.Fatal(err)
	}
	// A waiter in another process queues first, then a local one.
	helper := startHelper(t, "fair-waiter", "REDIS_ADDR="+srv.Addr(), "LOCK_NAME=fair", "OWNER=doomed")
	waitQueueLen(t, rdb, 1)
	got := make(chan time.Time, 1)
	unlocked := make(chan error, 1)
	go func() {
		if err := c.FairLock("fair").Lock(ctx); err != nil {
			t.Error(err)
			return
		}
		got <- time.Now()
		unlocked <- c.FairLock("fair").Unlock(ctx)
	}()
	waitQueueLen(t, rdb, 2)
	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := c.FairLock("fair").Unlock(holder); err != nil {
		t.Fatal(err)
	}
	// The dead waiter's entry stops being refreshed; it lives at most one watchdog timeout (1 s) past
	// its last refresh, then the next waiter takes the lock.
	select {
	case at := <-got:
		if d := at.Sub(killed); d > 1500*time.Millisecond {
			t.Fatalf("the live waiter got the lock %v after the head died; bound is the 1s watchdog timeout", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("a dead waiter blocks the queue: %v", queue(t, rdb))
	}
	if err := <-unlocked; err != nil {
		t.Fatal(err)
	}
	if keys, err := do(t, rdb, "KEYS", "*").AsStrSlice(); len(keys) != 0 || err != nil {
		t.Fatalf("keys left: %v, %v", keys, err)
	}
}

func TestFairLockWaiterThatGivesUpLeavesQueue(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 30*time.Second)
	holder := relock.WithOwner(ctx, "holder")
	if err := a.FairLock("fair").Lock(holder); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var order []string
	fairWaiter(t, &wg, a, "first", 0, &mu, &order)
	waitQueueLen(t, rdb, 1)

	timedOut := make(chan error, 1)
	go func() {
		ok, err := b.FairLock("fair").TryLock(relock.WithOwner(ctx, "impatient"), 300*time.Millisecond, 0)
		if ok {
			err = errors.New("TryLock got a held lock")
		}
		timedOut <- err
	}()
	waitQueueLen(t, rdb, 2)
	cancelCtx, cancel := context.WithCancel(relock.WithOwner(ctx, "cancelled"))
	cancelled := make(chan error, 1)
	go func() { cancelled <- a.FairLock("fair").Lock(cancelCtx) }()
	waitQueueLen(t, rdb, 3)
	fairWaiter(t, &wg, b, "last", 0, &mu, &order)
	waitQueueLen(t, rdb, 4)

	cancel()
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock = %v", err)
	}
	if err := <-timedOut; err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "the two that gave up leave the queue", func() bool { return len(queue(t, rdb)) == 2 })
	if q := queue(t, rdb); q[0] != a.ID()+":first" || q[1] != b.ID()+":last" {
		t.Fatalf("queue after two left = %v", q)
	}
	if n, _ := do(t, rdb, "ZCARD", fairDeadlines).AsInt64(); n != 2 {
		t.Fatalf("%d deadlines for 2 waiters", n)
	}
	if err := a.FairLock("fair").Unlock(holder); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if !slices.Equal(order, []string{"first", "last"}) {
		t.Fatalf("order = %v", order)
	}
}

func TestFairLockClientPauseLeavesNoQueue(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 30*time.Second)
	if err := a.FairLock("fair").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.FairLock("fair").TryLock(ctx, 0, 0); ok || err != nil { // load the script before the pause
		t.Fatalf("TryLock = %v, %v", ok, err)
	}
	// Writes (every script) are held back for a second: the TryLock's queueing attempt, its undo and its
	// leave all wait, and run in order when the pause ends.
	if err := do(t, rdb, "CLIENT", "PAUSE", "1000", "WRITE").Error(); err != nil {
		t.Fatal(err)
	}
	tryCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	ok, err := b.FairLock("fair").TryLock(tryCtx, 5*time.Second, 0)
	cancel()
	if ok || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryLock during CLIENT PAUSE WRITE = %v, %v", ok, err)
	}
	eventually(t, 5*time.Second, "the queue and deadline keys are empty", func() bool {
		n, _ := do(t, rdb, "EXISTS", fairQueue, fairDeadlines).AsInt64()
		return n == 0
	}, func() string { return fmt.Sprint(queue(t, rdb)) })
	time.Sleep(500 * time.Millisecond) // and stay so
	if n, _ := do(t, rdb, "EXISTS", fairQueue, fairDeadlines).AsInt64(); n != 0 {
		t.Fatalf("queue keys came back: %v", queue(t, rdb))
	}
	if err := a.FairLock("fair").Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestFairLockHeadTakesExpiredLease(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 30*time.Second)
	if err := a.FairLock("fair").LockWithLease(ctx, 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	acquired := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var order []string
	for i := range 3 {
		fairWaiter(t, &wg, b, "w"+strconv.Itoa(i), 0, &mu, &order)
		waitQueueLen(t, rdb, i+1)
	}
	got := make(chan time.Time, 1)
	go func() {
		wg.Wait()
		got <- time.Now()
	}()
	select {
	case at := <-got:
		// No Unlock comes: the head must take the lock when the lease ends, and the rest follow it.
		if d := at.Sub(acquired); d > 500*time.Millisecond+400*time.Millisecond {
			t.Fatalf("the queue drained %v after a 500ms lease began", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the head waits past the expired lease: queue %v", queue(t, rdb))
	}
	if !slices.Equal(order, []string{"w0", "w1", "w2"}) {
		t.Fatalf("order = %v", order)
	}
}

func TestFairLockUnlockWakesOnlyTheHead(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 30*time.Second)
	holder := relock.WithOwner(ctx, "holder")
	// Lock twice and unlock once: the release script is loaded, so that its EVALSHA runs at once below.
	for _, step := range []func(context.Context) error{a.FairLock("fair").Lock, a.FairLock("fair").Lock, a.FairLock("fair").Unlock} {
		if err := step(holder); err != nil {
			t.Fatal(err)
		}
	}
	release := make(chan struct{})
	var wg sync.WaitGroup
	acquired := make(chan string, 8)
	for i := range 8 {
		token := "w" + strconv.Itoa(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := relock.WithOwner(ctx, token)
			if err := b.FairLock("fair").Lock(ctx); err != nil {
				t.Error(err)
				return
			}
			acquired <- token
			<-release
			_ = b.FairLock("fair").Unlock(ctx)
		}()
		waitQueueLen(t, rdb, i+1)
	}
	time.Sleep(100 * time.Millisecond)
	do(t, rdb, "CONFIG", "RESETSTAT")
	if err := a.FairLock("fair").Unlock(holder); err != nil {
		t.Fatal(err)
	}
	if token := <-acquired; token != "w0" {
		t.Fatalf("%s got the lock before the head", token)
	}
	time.Sleep(100 * time.Millisecond)
	calls := commandCalls(t, rdb)
	if scripts := calls["evalsha"] + calls["eval"]; scripts != 2 || calls["publish"] != 1 {
		t.Fatalf("after one release: %d script runs (want 2: the release, the head's attempt), %d publishes (want 1): %v",
			scripts, calls["publish"], calls)
	}
	close(release)
	wg.Wait()
}

// A waiter that finds the lock taken runs the acquire script once before it is woken: as it begins to
// listen, one PTTL tells it the lock is still taken (any release from then on wakes it), instead of a
// second attempt. A release that came before it listened is not missed: see
// TestWaitReadingAFreeLockAttemptsAtOnce.
func TestFairLockWaiterAttemptsOnceBeforeItIsWoken(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 30*time.Second)
	holder := relock.WithOwner(ctx, "holder")
	if err := a.FairLock("fair").Lock(holder); err != nil {
		t.Fatal(err)
	}
	do(t, rdb, "CONFIG", "RESETSTAT")
	got := make(chan error, 1)
	waiter := relock.WithOwner(ctx, "waiter")
	go func() { got <- b.FairLock("fair").Lock(waiter) }()
	waitQueueLen(t, rdb, 1)
	time.Sleep(200 * time.Millisecond)
	calls := commandCalls(t, rdb)
	if scripts := calls["evalsha"] + calls["eval"]; scripts != 1 || calls["subscribe"] != 1 {
		t.Fatalf("a waiter on a taken lock: %d script runs (want 1), %d subscriptions (want 1): %v", scripts, calls["subscribe"], calls)
	}
	if err := a.FairLock("fair").Unlock(holder); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if err := b.FairLock("fair").Unlock(waiter); err != nil {
		t.Fatal(err)
	}
}

func TestFairLockQueueOrderHoldsForFreeLockAndLongWaits(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, fastWatchdog)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 30*time.Second)
	// Another process's waiter is at the head of the queue, alive for 3 s more (its Client would refresh
	// it); the lock itself is free.
	now, err := do(t, rdb, "TIME").AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	secs, _ := strconv.ParseInt(now[0], 10, 64)
	micros, _ := strconv.ParseInt(now[1], 10, 64)
	ghostAlive := secs*1000 + micros/1000 + 3000
	do(t, rdb, "RPUSH", fairQueue, "ghost")
	do(t, rdb, "ZADD", fairDeadlines, strconv.FormatInt(ghostAlive, 10), "ghost")
	start := time.Now()

	// Nobody may jump the queue: not a single attempt, not a waiter.
	if ok, err := c.FairLock("fair").TryLock(ctx, 0, 0); ok || err != nil {
		t.Fatalf("TryLock(0) with a waiter queued = %v, %v", ok, err)
	}
	got := make(chan time.Time, 1)
	unlocked := make(chan error, 1)
	go func() {
		if err := c.FairLock("fair").Lock(relock.WithOwner(ctx, "patient")); err != nil {
			t.Error(err)
			return
		}
		got <- time.Now()
		unlocked <- c.FairLock("fair").Unlock(relock.WithOwner(ctx, "patient"))
	}()
	waitQueueLen(t, rdb, 2)

	// The patient waiter waits two of its watchdog timeouts: its entry is kept alive all along.
	time.Sleep(2 * time.Second)
	if q := queue(t, rdb); len(q) != 2 || q[1] != c.ID()+":patient" {
		t.Fatalf("queue after a long wait = %v", q)
	}
	alive, err := do(t, rdb, "ZSCORE", fairDeadlines, c.ID()+":patient").AsFloat64()
	if err != nil || int64(alive) < ghostAlive-1000 {
		t.Fatalf("the waiter's entry is not being refreshed: alive until %v (ghost %d), %v", alive, ghostAlive, err)
	}
	select {
	case <-got:
		t.Fatal("the waiter took the lock ahead of the queue's head")
	default:
	}
	// The ghost stops being refreshed: its entry expires at 3 s and the patient waiter gets the lock.
	select {
	case at := <-got:
		if d := at.Sub(start); d < 2900*time.Millisecond || d > 3500*time.Millisecond {
			t.Fatalf("the waiter got the lock %v after the ghost queued; its entry expired at 3s", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the waiter never got the lock: %v", queue(t, rdb))
	}
	if err := <-unlocked; err != nil {
		t.Fatal(err)
	}
	if keys, _ := do(t, rdb, "KEYS", "*").AsStrSlice(); len(keys) != 0 {
		t.Fatalf("keys left: %v", keys)
	}
}

// TestQueuedOwnerStaysQueuedWhileOneOfItsWaitersGivesUp: two goroutines of one owner (WithOwner) wait in
// a lock's queue, which holds one entry for the owner. When one of them gives up, the owner must stay
// queued for the other: the release must wake it at once, not after its longest sleep (a third of the
// watchdog timeout, 10 s here), as when the first one's leave took the owner out of the queue.
func TestQueuedOwnerStaysQueuedWhileOneOfItsWaitersGivesUp(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	for kind, newLock := range lockers(c, "FairLock", "WriteLock") {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			l, other, ctx := heldByOther(t, newLock, "queued-owner-"+kind)
			mine := relock.WithOwner(ctx, "mine")
			stays := make(chan error, 1)
			go func() { stays <- l.Lock(mine) }()
			short, cancel := context.WithTimeout(mine, 300*time.Millisecond)
			defer cancel()
			if err := l.Lock(short); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("the waiter that gives up: %v; want context.DeadlineExceeded", err)
			}
			time.Sleep(200 * time.Millisecond) // its leave, if any, is done
			if err := l.Unlock(other); err != nil {
				t.Fatal(err)
			}
			receive(t, stays, 3*time.Second, "the owner's remaining waiter slept on after the release")
			if err := l.Unlock(mine); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A relock waiter (its Client's ID a version 8 UUID) queued without an alive entry is dead: its Client
// joined it with one, and it outlived it (the set of alive entries expires with the longest-lived one, so
// the last relock waiter to die leaves none). A free lock is not kept from the next relock waiter by its
// Redisson score, which relock raises ahead of its alive time by the fair lock wait per waiter before it
// (here 5 minutes ahead). A Redisson waiter's entry, which has no alive entry ever, is still judged by its
// score, as Redisson's scripts judge it.
func TestFairLockDeadRelockWaiterWithoutAliveEntryDoesNotBlock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	later := strconv.FormatInt(time.Now().Add(5*time.Minute).UnixMilli(), 10)
	queueKey, timeouts := "redisson_lock_queue:{fair}", "redisson_lock_timeout:{fair}"

	redissonWaiter := "0b6c1c9e-3f1e-4d2a-9c55-2b1f0a9e7d31:7"
	do(t, rdb, "RPUSH", queueKey, redissonWaiter)
	do(t, rdb, "ZADD", timeouts, later, redissonWaiter)
	if ok, err := c.FairLock("fair").TryLock(ctx, 300*time.Millisecond, 0); ok || err != nil {
		t.Fatalf("TryLock behind a Redisson waiter whose score is 5 minutes ahead: %v, %v; want false (Redisson's rule)", ok, err)
	}
	do(t, rdb, "DEL", queueKey, timeouts, "relock_lock_alive:{fair}")

	deadRelockWaiter := "5b2f6a30-1c2d-8e4f-9a0b-1c2d3e4f5a6b:doomed"
	do(t, rdb, "RPUSH", queueKey, deadRelockWaiter)
	do(t, rdb, "ZADD", timeouts, later, deadRelockWaiter)
	start := time.Now()
	lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := c.FairLock("fair").Lock(lctx); err != nil {
		t.Fatalf("Lock behind a dead relock waiter without an alive entry: %v (queue %v)", err, queue(t, rdb))
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Lock took %v behind a dead relock waiter", took)
	}
	if err := c.FairLock("fair").Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := do(t, rdb, "EXISTS", queueKey, timeouts).AsInt64(); n != 0 {
		t.Fatalf("the dead waiter's entry is still queued: %v", queue(t, rdb))
	}
}
