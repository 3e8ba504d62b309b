package relocktest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/relocktest"
)

// processJob is the code under test: it takes the job's lock, works under the hold's context, and stops
// when the hold is lost, returning the cause. started is closed once it holds the lock.
func processJob(ctx context.Context, c *relock.Client, job string, started chan<- struct{}) error {
	l := c.Lock("job:" + job)
	if err := l.Lock(ctx); err != nil {
		return err
	}
	defer l.Unlock(context.WithoutCancel(ctx))
	held, err := l.HoldContext(ctx)
	if err != nil {
		return err
	}
	close(started)
	for step := 0; step < 100; step++ { // 100 steps of work, 50 ms each
		select {
		case <-held.Done():
			return context.Cause(held) // lost: another worker may have the job now
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// A test of processJob that makes it lose its lock midway. In a test function, relocktest.NewClient(t,
// nil) gives the Client and the Server, and closes both when the test ends.
func Example() {
	srv, err := relocktest.Start()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	c := srv.Client(nil) // a real *relock.Client, on the in-process server

	started := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- processJob(context.Background(), c, "42", started) }()
	<-started

	st := srv.Inspect("job:42")
	fmt.Println("holders:", len(st.Holders), "count:", st.Holders[0].Count)

	srv.Expire("job:42") // the hold is deleted now; processJob does not know yet
	err = <-done         // processJob hears of it at its watchdog's next renewal, within 1/3 s
	fmt.Println("lost:", errors.Is(err, relock.ErrLockLost))
	fmt.Println("held now:", srv.Inspect("job:42").Locked)
	// Output:
	// holders: 1 count: 1
	// lost: true
	// held now: false
}
