package relockgocron_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/relock-go/relock"
	relockgocron "github.com/relock-go/relock/gocron"
)

// Three replicas of a service schedule the same job every second; each tick runs once, on one of them.
// Here they are three Clients in one process; in production, one per process, each process doing what
// replica does. The examples connect to redisAddr, a redis-server the tests start; in your code it is
// your Redis address, such as "127.0.0.1:6379".
func ExampleLocker() {
	var mu sync.Mutex
	runs := make(map[int64]int) // per tick (a second), its runs over all replicas

	replica := func() (stop func()) {
		c, err := relock.New([]string{redisAddr}, nil)
		if err != nil {
			panic(err)
		}
		// The lock is kept at least half the interval: a replica whose tick comes up to 0.5 s after
		// the first one's skips it, even when the run is over by then.
		locker, err := relockgocron.NewLocker(c, &relockgocron.LockerOptions{MinHold: 500 * time.Millisecond})
		if err != nil {
			panic(err)
		}
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
		if err != nil {
			panic(err)
		}
		_, err = s.NewJob(gocron.CronJob("* * * * * *", true), // every second
			gocron.NewTask(func() {
				mu.Lock()
				runs[time.Now().Unix()]++
				mu.Unlock()
			}),
			gocron.WithName("example:report")) // the lock's name: gocron:example:report
		if err != nil {
			panic(err)
		}
		s.Start()
		return func() {
			_ = s.Shutdown()
			_ = c.Close()
		}
	}

	var stops []func()
	for range 3 {
		stops = append(stops, replica())
	}
	time.Sleep(3500 * time.Millisecond)
	for _, stop := range stops {
		stop()
	}

	mu.Lock()
	defer mu.Unlock()
	once := len(runs) >= 3
	for _, n := range runs {
		once = once && n == 1
	}
	fmt.Println("every tick ran once:", once)
	// Output: every tick ran once: true
}

// With an Elector, only the replica that leads the election runs the scheduler's jobs.
func ExampleElector() {
	c, err := relock.New([]string{redisAddr}, nil)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	elector, err := relockgocron.NewElector(c, "example:scheduler", "host-a")
	if err != nil {
		panic(err)
	}
	s, err := gocron.NewScheduler(gocron.WithDistributedElector(elector))
	if err != nil {
		panic(err)
	}
	_, _ = s.NewJob(gocron.DurationJob(time.Minute), gocron.NewTask(func() { /* the leader's work */ }))
	s.Start()

	for elector.IsLeader(context.Background()) != nil { // alone, this replica leads at once
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("leading")

	_ = s.Shutdown()
	// Close resigns: another replica leads at once.
	_ = elector.Close(context.Background())
	// Output: leading
}
