package relock

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/relock-go/relock/internal/goid"
)

// A worker runs the next function given while it is idle, ends after workerIdle without one, and ends
// when the Client closes; functions given at once run on goroutines of their own.
func TestWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &Client{}
		c.life, c.end = context.WithCancel(context.Background())
		w := newWorkers(c)
		runOn := func() uint64 {
			t.Helper()
			ids := make(chan uint64, 1)
			if !w.run(func() { ids <- goid.ID() }) {
				t.Fatal("run refused on an open Client")
			}
			id := <-ids
			synctest.Wait() // the worker is idle again
			return id
		}
		first := runOn()
		if again := runOn(); again != first {
			t.Fatalf("an idle worker was there, yet the function ran on goroutine %d, not %d", again, first)
		}

		// Two functions at once: the second cannot wait for the first.
		release := make(chan struct{})
		started := make(chan uint64, 2)
		for range 2 {
			w.run(func() {
				started <- goid.ID()
				<-release
			})
		}
		a, b := <-started, <-started
		close(release)
		if a == b {
			t.Fatal("two functions given at once ran on one goroutine")
		}
		synctest.Wait()

		time.Sleep(workerIdle + time.Second)
		synctest.Wait() // every worker has ended
		if later := runOn(); later == first || later == a || later == b {
			t.Fatalf("a worker idle for %v still ran a function", workerIdle)
		}

		c.bgMu.Lock()
		c.closed.Store(true)
		c.bgMu.Unlock()
		c.end()
		w.close(time.Hour) // the worker ends with the Client's life
		if w.run(func() { t.Error("ran on a closed Client") }) {
			t.Fatal("run accepted a function on a closed Client")
		}
	})
}
