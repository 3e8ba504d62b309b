package relock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/relock-go/relock"
)

// The examples connect to redisAddr, a redis-server the tests start; in your code it is your Redis
// address, such as "127.0.0.1:6379".

func Example() {
	ctx := context.Background()
	c, err := relock.New([]string{redisAddr}, nil)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	l := c.Lock("example:orders:42")
	if err := l.Lock(ctx); err != nil {
		panic(err)
	}
	// Unlock even if ctx has ended by then: WithoutCancel keeps ctx's owner, drops its deadline.
	defer l.Unlock(context.WithoutCancel(ctx))

	fmt.Println("holding", l.Name())
	// Output: holding example:orders:42
}

// A goroutine that holds a lock may take it again; each Lock needs its Unlock.
func ExampleRLock_Lock_reentrant() {
	ctx := context.Background()
	c, _ := relock.New([]string{redisAddr}, nil)
	defer c.Close()
	l := c.Lock("example:reentrant")

	_ = l.Lock(ctx)
	_ = l.Lock(ctx) // same goroutine: reentry
	n, _ := l.HoldCount(ctx)
	fmt.Println("hold count:", n)

	_ = l.Unlock(ctx)
	_ = l.Unlock(ctx)
	locked, _ := l.IsLocked(ctx)
	fmt.Println("locked after two unlocks:", locked)
	// Output:
	// hold count: 2
	// locked after two unlocks: false
}

// TryLock waits a bounded time and reports whether it got the lock; a lease makes the hold expire on
// its own.
func ExampleRLock_TryLock() {
	ctx := context.Background()
	c, _ := relock.New([]string{redisAddr}, nil)
	defer c.Close()
	other, _ := relock.New([]string{redisAddr}, nil)
	defer other.Close()

	// Another process holds the report lock for 200 ms.
	_ = other.Lock("example:report").LockWithLease(ctx, 200*time.Millisecond)

	ok, err := c.Lock("example:report").TryLock(ctx, 50*time.Millisecond, 10*time.Second)
	fmt.Println("after 50 ms:", ok, err)

	ok, err = c.Lock("example:report").TryLock(ctx, 2*time.Second, 10*time.Second)
	fmt.Println("within 2 s:", ok, err)
	_ = c.Lock("example:report").Unlock(ctx)
	// Output:
	// after 50 ms: false <nil>
	// within 2 s: true <nil>
}

// An owner token in the context lets several goroutines act as one owner: here workers share a hold
// taken by their coordinator, and a different goroutine releases it.
func ExampleWithOwner() {
	c, _ := relock.New([]string{redisAddr}, nil)
	defer c.Close()
	ctx := relock.WithOwner(context.Background(), "batch-2026-11-21")
	l := c.Lock("example:batch")

	if err := l.Lock(ctx); err != nil {
		panic(err)
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			held, _ := l.IsHeld(ctx) // the same owner on another goroutine
			if !held {
				panic("worker does not see the owner's hold")
			}
		}()
	}
	wg.Wait()

	done := make(chan error)
	go func() { done <- l.Unlock(ctx) }()
	fmt.Println("released by another goroutine:", <-done)
	// Output: released by another goroutine: <nil>
}

// Do holds a lock while a function runs, and tells the function (through its context) and the caller
// (through the error) when the lock was lost before the function finished.
func ExampleDo() {
	c, _ := relock.New([]string{redisAddr}, nil)
	defer c.Close()

	err := relock.Do(context.Background(), c.Lock("example:nightly-report"), func(ctx context.Context) error {
		// ctx is cancelled, with cause relock.ErrLockLost, if the lock is lost: stop writing then.
		fmt.Println("building the report")
		return ctx.Err()
	})
	if errors.Is(err, relock.ErrLockLost) {
		fmt.Println("another process may have run concurrently: discard the result")
	}
	fmt.Println("done:", err)
	// Output:
	// building the report
	// done: <nil>
}

// HoldContext gives work a context that ends when the hold does: on the final Unlock, or when the lock
// is lost (context.Cause is then relock.ErrLockLost).
func ExampleRLock_HoldContext() {
	ctx := context.Background()
	c, _ := relock.New([]string{redisAddr}, nil)
	defer c.Close()
	l := c.Lock("example:hold-context")

	_ = l.Lock(ctx)
	held, _ := l.HoldContext(ctx)
	_ = l.Unlock(ctx)

	<-held.Done()
	fmt.Println("cause:", context.Cause(held))
	fmt.Println("lost:", errors.Is(context.Cause(held), relock.ErrLockLost))
	// Output:
	// cause: context canceled
	// lost: false
}

// A fenced lock hands each new owner a larger token; the protected store keeps the largest token it has
// seen and rejects writes that carry a smaller one, so a holder that was paused past its hold cannot
// overwrite its successor's work.
func ExampleWithFencing() {
	ctx := context.Background()
	c, _ := relock.New([]string{redisAddr}, nil)
	defer c.Close()
	l := c.Lock("example:fenced", relock.WithFencing())

	var highest uint64 // the store's memory of the largest token it accepted
	write := func(token uint64) error {
		if token < highest {
			return errors.New("rejected: stale fencing token")
		}
		highest = token
		return nil
	}

	_ = l.Lock(ctx)
	first, _ := l.FencingToken(ctx)
	_ = l.Unlock(ctx)

	_ = l.Lock(ctx) // a later holder
	second, _ := l.FencingToken(ctx)
	fmt.Println("later holder's write:", write(second))
	_ = l.Unlock(ctx)

	fmt.Println("earlier holder's late write:", write(first))
	// Output:
	// later holder's write: <nil>
	// earlier holder's late write: rejected: stale fencing token
}

// A MultiLock holds several locks as one: here a transfer locks both accounts, whatever order other
// transfers name them in, without deadlocking.
func ExampleNewMultiLock() {
	ctx := context.Background()
	c, _ := relock.New([]string{redisAddr}, nil)
	defer c.Close()

	transfer := relock.NewMultiLock(c.Lock("example:account:alice"), c.Lock("example:account:bob"))
	if err := transfer.Lock(ctx); err != nil {
		panic(err)
	}
	aliceLocked, _ := c.Lock("example:account:alice").IsLocked(ctx)
	bobLocked, _ := c.Lock("example:account:bob").IsLocked(ctx)
	fmt.Println("both locked:", aliceLocked && bobLocked)
	fmt.Println("unlock:", transfer.Unlock(ctx))
	// Output:
	// both locked: true
	// unlock: <nil>
}

// A read-write lock lets readers share and a writer exclude everyone; WithWriterPriority keeps a stream of
// readers from starving writers.
func ExampleClient_ReadWriteLock() {
	ctx := context.Background()
	c, _ := relock.New([]string{redisAddr}, nil)
	defer c.Close()
	rw := c.ReadWriteLock("example:config", relock.WithWriterPriority())

	_ = rw.ReadLock().Lock(ctx)
	other := relock.WithOwner(ctx, "another-reader")
	ok, _ := rw.ReadLock().TryLock(other, 0, 0)
	fmt.Println("second reader:", ok)
	writer := relock.WithOwner(ctx, "writer")
	ok, _ = rw.WriteLock().TryLock(writer, 0, 0)
	fmt.Println("writer while reading:", ok)

	_ = rw.ReadLock().Unlock(ctx)
	_ = rw.ReadLock().Unlock(other)
	ok, _ = rw.WriteLock().TryLock(writer, 0, 0)
	fmt.Println("writer after readers left:", ok)
	_ = rw.WriteLock().Unlock(writer)
	// Output:
	// second reader: true
	// writer while reading: false
	// writer after readers left: true
}

// Inspect tells who holds a lock, for how long, and who waits: for health pages and operators' tools (the
// relock command's inspect, list and watch are built on it).
func ExampleClient_Inspect() {
	ctx := relock.WithOwner(context.Background(), "nightly-report")
	c, _ := relock.New([]string{redisAddr}, nil)
	defer c.Close()
	l := c.Lock("example:inspect", relock.WithFencing())
	_ = l.Lock(ctx)
	defer l.Unlock(ctx)

	st, err := c.Inspect(ctx, "example:inspect")
	if err != nil {
		panic(err)
	}
	h := st.Holders[0]
	fmt.Println(st.Kind, st.Locked, h.Token, h.Count, h.ClientID == c.ID(), st.FencingToken > 0)
	// Output: rlock true nightly-report 1 true true
}

// A holder that must not act on a lock it may no longer have stops as soon as its hold is at risk (the
// watchdog could not renew it), not only once it is lost; Options.Logger logs both.
func ExampleHoldRisk() {
	ctx := context.Background()
	c, _ := relock.New([]string{redisAddr}, &relock.Options{
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)), // Warn: a renewal failed; Error: a hold lost
	})
	defer c.Close()
	l := c.Lock("example:at-risk")
	if err := l.Lock(ctx); err != nil {
		panic(err)
	}
	defer l.Unlock(context.WithoutCancel(ctx))
	held, _ := l.HoldContext(ctx)

	atRisk, changed, err := relock.HoldRisk(held)
	fmt.Println("at risk:", atRisk, err)
	select {
	case <-changed: // at risk (or lost: held is then done): stop writing
	case <-time.After(10 * time.Millisecond): // the work, done while the hold is sound
		fmt.Println("work done")
	}
	// Output:
	// at risk: false <nil>
	// work done
}

// A fair lock hands itself to waiters in the order they came: here three workers queue behind a holder,
// and take the lock in turn.
func ExampleClient_FairLock() {
	ctx := context.Background()
	c, _ := relock.New([]string{redisAddr}, nil)
	defer c.Close()
	l := c.FairLock("example:fair")

	_ = l.Lock(relock.WithOwner(ctx, "holder"))
	var order []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, worker := range []string{"first", "second", "third"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := relock.WithOwner(ctx, worker)
			if err := l.Lock(owner); err != nil {
				panic(err)
			}
			mu.Lock()
			order = append(order, worker)
			mu.Unlock()
			_ = l.Unlock(owner)
		}()
		// Queued before the next one comes (Inspect shows the queue).
		for queued := 0; queued < i+1; {
			st, _ := c.Inspect(ctx, "example:fair")
			queued = st.QueueLen
			time.Sleep(time.Millisecond)
		}
	}
	_ = l.Unlock(relock.WithOwner(ctx, "holder"))
	wg.Wait()
	fmt.Println(order)
	// Output: [first second third]
}

// A RedLock is held when a majority of its parts are, each part a lock on its own Client and Redis
// master; it rides out a minority of nodes down. (Here, to run anywhere, the three parts share one server.)
func ExampleNewRedLock() {
	ctx := context.Background()
	var parts []relock.Lockable
	for _, node := range []string{"a", "b", "c"} {
		c, _ := relock.New([]string{redisAddr}, nil) // in production: a different master for each part
		defer c.Close()
		parts = append(parts, c.Lock("example:redlock:"+node))
	}
	rl := relock.NewRedLock(parts, nil)
	if err := rl.Lock(ctx); err != nil {
		panic(err)
	}
	validity, _ := rl.Validity(ctx)
	fmt.Println("valid for a while:", validity > time.Second)
	fmt.Println("unlock:", rl.Unlock(ctx))
	// Output:
	// valid for a while: true
	// unlock: <nil>
}

// A semaphore bounds how many processes do something at once: here at most 2 exports run.
func ExampleClient_Semaphore() {
	ctx := context.Background()
	c, _ := relock.New([]string{redisAddr}, nil)
	defer c.Close()
	sem := c.Semaphore("example:exports")
	_, _ = sem.TrySetPermits(ctx, 2) // once, whoever comes first

	_ = sem.Acquire(ctx, 1)
	_ = sem.Acquire(ctx, 1)
	third, _ := sem.TryAcquire(ctx, 1, 10*time.Millisecond)
	fmt.Println("a third export may start:", third)
	_ = sem.Release(ctx, 2)
	n, _ := sem.AvailablePermits(ctx)
	fmt.Println("permits available:", n)
	// Output:
	// a third export may start: false
	// permits available: 2
}

// A count-down latch lets a process wait until others have done their part.
func ExampleClient_CountDownLatch() {
	ctx := context.Background()
	c, _ := relock.New([]string{redisAddr}, nil)
	defer c.Close()
	parts := c.CountDownLatch("example:batch")
	_, _ = parts.TrySetCount(ctx, 3)
	for range 3 {
		go func() { _ = parts.CountDown(ctx) }() // three workers, each done with its part
	}
	if err := parts.Await(ctx); err != nil {
		panic(err)
	}
	fmt.Println("all parts done")
	// Output: all parts done
}

// A leader election: each candidate campaigns with its address and, once it leads, works under its
// leadership's context and passes its term to what it writes; observers see every leader in order.
func ExampleElection() {
	ctx := context.Background()
	c, _ := relock.New([]string{redisAddr}, nil)
	defer c.Close()
	e := c.Election("example:scheduler")

	watch, cancel := context.WithCancel(ctx)
	defer cancel()
	leaders, _ := e.Observe(watch)

	for _, addr := range []string{"10.0.0.1:8080", "10.0.0.2:8080"} {
		owner := relock.WithOwner(ctx, "candidate-"+addr) // one candidate per process, in practice
		term, err := e.Campaign(owner, addr)              // blocks until this candidate leads
		if err != nil {
			panic(err)
		}
		lead, _ := e.LeadershipContext(owner) // ends with ErrLockLost if the leadership is lost
		_ = lead
		_ = term // pass the term to the stores the leader writes, which reject lower terms
		current, _ := e.Leader(ctx)
		fmt.Println("leading:", current.Value)
		_ = e.Resign(owner) // the next candidate leads at once
	}
	first, second := <-leaders, <-leaders
	fmt.Println("observed:", first.Value, "then", second.Value, "terms increasing:", second.Term > first.Term)
	// Output:
	// leading: 10.0.0.1:8080
	// leading: 10.0.0.2:8080
	// observed: 10.0.0.1:8080 then 10.0.0.2:8080 terms increasing: true
}

// TryAcquire reports whether it got a permit, as every Try method does: false, with a nil error, when
// the wait ran out. Check ok before using the permit: a nil *Permit's methods are safe (Release returns
// ErrNotHeld), but it is no permit.
func ExamplePermitSemaphore_TryAcquire() {
	ctx := context.Background()
	c, _ := relock.New([]string{redisAddr}, nil)
	defer c.Close()
	uploads := c.PermitSemaphore("example:uploads")
	_, _ = uploads.TrySetPermits(ctx, 1)

	permit, ok, err := uploads.TryAcquire(ctx, 0, time.Minute) // wait, then lease
	if err != nil || !ok {
		panic(fmt.Sprint("no permit: ", err))
	}
	defer permit.Release(context.WithoutCancel(ctx))

	none, ok, err := uploads.TryAcquire(ctx, 50*time.Millisecond, 0)
	fmt.Println("second permit within 50 ms:", ok, err)
	fmt.Println("releasing no permit:", errors.Is(none.Release(ctx), relock.ErrNotHeld))
	// Output:
	// second permit within 50 ms: false <nil>
	// releasing no permit: true
}

// A semaphore whose permits come back when their holder dies: each permit is kept alive by the watchdog
// and belongs to the owner that took it.
func ExampleClient_PermitSemaphore() {
	ctx := relock.WithOwner(context.Background(), "worker-1")
	c, _ := relock.New([]string{redisAddr}, nil)
	defer c.Close()
	jobs := c.PermitSemaphore("example:jobs")
	_, _ = jobs.TrySetPermits(ctx, 2)

	permit, err := jobs.Acquire(ctx)
	if err != nil {
		panic(err)
	}
	work, err := permit.Context(ctx) // ends with ErrLockLost if the permit is lost
	if err != nil {
		panic(err) // lost already
	}
	_ = work
	_, _ = jobs.Acquire(ctx)
	held, _ := jobs.Held(ctx)
	fmt.Println("permits held by worker-1:", held)
	err = jobs.Release(ctx, 3)
	fmt.Println("releasing 3:", errors.Is(err, relock.ErrNotHeld))
	_ = jobs.Release(ctx, 2) // the longest held first
	n, _ := jobs.AvailablePermits(ctx)
	fmt.Println("permits available:", n)
	// Output:
	// permits held by worker-1: 2
	// releasing 3: true
	// permits available: 2
}

func ExampleRLock_Extend() {
	ctx := context.Background()
	c, _ := relock.New([]string{redisAddr}, nil)
	defer c.Close()
	l := c.Lock("example:extend")

	_ = l.LockWithLease(ctx, 2*time.Second)
	// The work takes longer than planned: give the hold a new lease, as long as it is still ours.
	if err := l.Extend(ctx, 10*time.Second); err != nil {
		fmt.Println("the hold is gone:", errors.Is(err, relock.ErrNotHeld))
		return
	}
	ttl, _ := l.RemainingTTL(ctx)
	fmt.Println("extended:", ttl > 5*time.Second)
	_ = l.Unlock(ctx)
	// Output:
	// extended: true
}

func ExampleWithMaxHold() {
	ctx := context.Background()
	c, _ := relock.New([]string{redisAddr}, nil)
	defer c.Close()
	// Whatever the job does, nobody keeps this lock more than 200 ms: the watchdog renews the hold until
	// then, and no longer.
	l := c.Lock("example:max-hold", relock.WithMaxHold(200*time.Millisecond))

	_ = l.Lock(ctx)
	held, _ := l.HoldContext(ctx)
	<-held.Done() // a job would run under held, and stop here
	fmt.Println("budget reached:", errors.Is(context.Cause(held), relock.ErrMaxHoldReached))
	fmt.Println("Unlock:", l.Unlock(ctx) != nil)
	// Output:
	// budget reached: true
	// Unlock: true
}

func ExampleRLock_GuardedWrite() {
	ctx := context.Background()
	c, _ := relock.New([]string{redisAddr}, nil)
	defer c.Close()
	l := c.Lock("{example:order}", relock.WithFencing())

	_ = l.Lock(ctx)
	// Written only if this owner still holds the lock, checked in the same script run as the writes.
	replies, err := l.GuardedWrite(ctx,
		c.B().Set().Key("{example:order}:state").Value("paid").Build(),
		c.B().Incr().Key("{example:order}:version").Build())
	if errors.Is(err, relock.ErrNotHeld) {
		fmt.Println("the hold is over; nothing was written")
		return
	}
	state, _ := replies[0].ToString()
	fmt.Println("SET:", state)
	_ = l.Unlock(ctx)

	// Once the hold is over, nothing lands.
	_, err = l.GuardedWrite(ctx, c.B().Set().Key("{example:order}:state").Value("late").Build())
	fmt.Println("after Unlock:", errors.Is(err, relock.ErrNotHeld))
	// Output:
	// SET: OK
	// after Unlock: true
}

func ExampleRLock_Revoke() {
	ctx := context.Background()
	worker, _ := relock.New([]string{redisAddr}, nil)
	defer worker.Close()
	deployer, _ := relock.New([]string{redisAddr}, nil)
	defer deployer.Close()

	// A worker holds the lock, and listens for requests to release it.
	job := worker.Lock("example:revoke")
	owner := relock.WithOwner(ctx, "job-7") // it releases from another goroutine
	_ = job.Lock(owner)
	requests, _ := job.ReleaseRequests(owner)
	released := make(chan struct{})
	go func() {
		defer close(released)
		req := <-requests
		fmt.Println("asked to release:", req.Reason)
		_ = job.Unlock(owner) // after a checkpoint
	}()

	// The deployer asks, and would take the lock over after 30 s if the worker kept it.
	if err := deployer.Lock("example:revoke").Revoke(ctx, "deploying v2", 30*time.Second); err != nil {
		fmt.Println(err)
		return
	}
	<-released
	fmt.Println("the deployer holds the lock")
	_ = deployer.Lock("example:revoke").Unlock(ctx)
	// Output:
	// asked to release: deploying v2
	// the deployer holds the lock
}

func ExampleRLock_HoldContext_lost() {
	ctx := context.Background()
	holder, _ := relock.New([]string{redisAddr}, nil)
	defer holder.Close()
	operator, _ := relock.New([]string{redisAddr}, nil)
	defer operator.Close()

	l := holder.Lock("example:lost")
	_ = l.Lock(ctx)
	held, _ := l.HoldContext(ctx)
	time.Sleep(20 * time.Millisecond) // the Client watches a hold once it has lasted a few milliseconds

	// An operator forces the lock open behind the holder's back: the holder is told within milliseconds,
	// not at the watchdog's next check (10 s later by default).
	_, _ = operator.Lock("example:lost").ForceUnlock(ctx)
	select {
	case <-held.Done():
		fmt.Println("lost:", errors.Is(context.Cause(held), relock.ErrLockLost))
	case <-time.After(5 * time.Second):
		fmt.Println("not told within 5 s")
	}
	// Output:
	// lost: true
}
