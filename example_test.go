package relock_test

import (
	"context"
	"fmt"
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
