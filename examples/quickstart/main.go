// Command quickstart shows relock's reentrant lock against a Redis server: two Clients (think two
// processes) and their goroutines take turns on one lock to update a shared counter without losing an
// update, a goroutine re-enters a lock it holds, and TryLock gives up after a bounded wait.
//
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/quickstart
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
)

func main() {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Two Clients stand for two processes: each has its own UUID and connections.
	a, err := relock.New([]string{addr}, nil)
	if err != nil {
		log.Fatalf("connecting to %s: %v", addr, err)
	}
	defer a.Close()
	b, err := relock.New([]string{addr}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		log.Fatal(err)
	}
	defer rdb.Close()

	// 1. Mutual exclusion: 8 goroutines per Client each add 1 to a counter 25 times, by reading it and
	// writing it back, which loses updates unless the lock keeps everyone else out.
	const counter = "relock:quickstart:counter"
	rdb.Do(ctx, rdb.B().Del().Key(counter).Build())
	start := time.Now()
	var wg sync.WaitGroup
	for _, c := range []*relock.Client{a, b} {
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l := c.Lock("relock:quickstart:lock")
				for range 25 {
					if err := l.Lock(ctx); err != nil {
						log.Fatal(err)
					}
					n, _ := rdb.Do(ctx, rdb.B().Get().Key(counter).Build()).AsInt64()
					rdb.Do(ctx, rdb.B().Set().Key(counter).Value(strconv.FormatInt(n+1, 10)).Build())
					if err := l.Unlock(ctx); err != nil {
						log.Fatal(err)
					}
				}
			}()
		}
	}
	wg.Wait()
	n, _ := rdb.Do(ctx, rdb.B().Get().Key(counter).Build()).AsInt64()
	fmt.Printf("counter = %d after 400 locked increments from 2 clients x 8 goroutines (%v)\n", n, time.Since(start).Round(time.Millisecond))

	// 2. Reentrancy: the goroutine that holds a lock may take it again.
	l := a.Lock("relock:quickstart:reentrant")
	_ = l.Lock(ctx)
	_ = l.Lock(ctx)
	count, _ := l.HoldCount(ctx)
	fmt.Printf("hold count after two Locks on one goroutine: %d\n", count)
	_ = l.Unlock(ctx)
	_ = l.Unlock(ctx)

	// 3. TryLock with a bounded wait, against a hold with a 300 ms lease on the other Client.
	_ = b.Lock("relock:quickstart:lease").LockWithLease(ctx, 300*time.Millisecond)
	ok, _ := a.Lock("relock:quickstart:lease").TryLock(ctx, 100*time.Millisecond, 0)
	fmt.Printf("TryLock(wait 100ms) while another Client holds it: %v\n", ok)
	begin := time.Now()
	ok, _ = a.Lock("relock:quickstart:lease").TryLock(ctx, time.Second, 0)
	fmt.Printf("TryLock(wait 1s): %v after %v, when the other hold's lease ran out\n", ok, time.Since(begin).Round(10*time.Millisecond))
	_ = a.Lock("relock:quickstart:lease").Unlock(ctx)
}
