package relock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/relock-go/relock"
)

// Run is the whole life of a job that must run on one instance at a time: it campaigns, runs the job while
// this instance leads, campaigns again if the leadership is lost, and resigns when the job returns or ctx
// ends, so that the next candidate leads at once. In a service, ctx is the process's:
//
//	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//	defer stop()
//
// and Ctrl-C or SIGTERM (a rolling deploy) hands the job over. Here the first instance shuts itself down
// after three runs of its job; a second instance, standing by, takes over, does its job once and returns.
func ExampleElection_Run() {
	c, err := relock.New([]string{redisAddr}, nil)
	if err != nil {
		panic(err)
	}
	defer c.Close() // after Run: Close waits for a resignation still on its way to Redis
	scheduler := c.Election("example:billing-scheduler")

	ctx, shutdown := context.WithCancel(context.Background()) // signal.NotifyContext's, in a service
	standby := make(chan error, 1)
	// One candidate per instance: its owner names it (two Runs need two owners).
	first := relock.WithOwner(ctx, "instance-1")
	err = scheduler.Run(first, "10.0.0.1:8080", func(ctx context.Context, term uint64) error {
		// Leading: ctx ends when the leadership does. Pass term to the stores the job writes, which
		// reject writes with a term below the highest they have seen (see relock.WithFencing).
		fmt.Println("10.0.0.1:8080 leads")
		go func() { // another instance starts, and waits for its turn
			second := relock.WithOwner(context.Background(), "instance-2")
			standby <- scheduler.Run(second, "10.0.0.2:8080", func(ctx context.Context, term uint64) error {
				fmt.Println("10.0.0.2:8080 leads")
				return nil // job done: Run resigns and returns nil
			})
		}()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for runs := 1; ; runs++ {
			select {
			case <-ctx.Done():
				// context.Cause(ctx) is relock.ErrLockLost when the leadership was lost (Run then
				// campaigns again, and calls this function again once it leads), ctx's cause on shutdown.
				fmt.Println("10.0.0.1:8080 stops:", context.Cause(ctx))
				return nil
			case <-tick.C:
				if runs == 3 {
					shutdown() // SIGTERM, in a service
				}
			}
		}
	})
	second := <-standby
	fmt.Println("first instance's Run ended by its shutdown:", errors.Is(err, context.Canceled))
	fmt.Println("second instance's Run:", second)
	// Output:
	// 10.0.0.1:8080 leads
	// 10.0.0.1:8080 stops: context canceled
	// 10.0.0.2:8080 leads
	// first instance's Run ended by its shutdown: true
	// second instance's Run: <nil>
}
