package tests

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/relock-go/relock"
)

func init() {
	// permit-holder takes a permit of the expirable semaphore SEM on REDIS_ADDR (1 s watchdog timeout),
	// prints "permit", and holds it until its context ends, then prints how it ended.
	helpers["permit-holder"] = func() error {
		c, err := relock.New([]string{os.Getenv("REDIS_ADDR")}, &relock.Options{WatchdogTimeout: time.Second})
		if err != nil {
			return err
		}
		defer c.Close()
		ctx := context.Background()
		p, err := c.PermitSemaphore(os.Getenv("SEM")).Acquire(ctx)
		if err != nil {
			return err
		}
		held, err := p.Context(ctx)
		if err != nil {
			return err
		}
		fmt.Println("permit")
		<-held.Done()
		fmt.Printf("ended cause=%q\n", context.Cause(held))
		return nil
	}
}

// TestPermitsUnderFaults: holders of an expirable semaphore's permits are killed (SIGKILL) and stopped
// (SIGSTOP) past the watchdog timeout. A checker samples the semaphore all along: the permits taken never
// exceed the limit, and available + taken always equals it (no permit lost for good, none made up). A
// killed holder's permit comes back to a waiter within the timeout; a stopped one's too, and the stopped
// holder, resumed, is told its permit was lost.
func TestPermitsUnderFaults(t *testing.T) {
	t.Parallel()
	srv := server(t)
	rdb := rawClient(t, srv.Addr())
	c := newClient(t, []string{srv.Addr()}, &relock.Options{WatchdogTimeout: time.Second})
	const limit = 2
	s := &summary{scenario: "permits-under-faults"}
	ctx := ctxTimeout(t, 60*time.Second)
	rounds := 1 + int(*soak/(10*time.Second))
	var worstBack time.Duration
	for round := range rounds {
		sem := "permits:" + strconv.Itoa(round)
		if _, err := c.PermitSemaphore(sem).TrySetPermits(ctx, limit); err != nil {
			t.Fatal(err)
		}
		// The checker: available + taken == limit, taken <= limit, at every sample.
		stop := make(chan struct{})
		var samples, bad atomic.Int64
		checked := make(chan struct{})
		go func() {
			defer close(checked)
			for {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
				resps := rdb.DoMulti(context.Background(), rdb.B().Get().Key(sem).Build(), rdb.B().Zcard().Key("{"+sem+"}:timeout").Build())
				available, err1 := resps[0].AsInt64()
				taken, err2 := resps[1].AsInt64()
				if err1 != nil || err2 != nil {
					continue
				}
				samples.Add(1)
				if taken > limit || available+taken != limit {
					if bad.Add(1) == 1 {
						s.note("round %d: available %d + taken %d", round, available, taken)
					}
				}
			}
		}()

		killed, killedLines := startHelper(t, "permit-holder", "REDIS_ADDR="+srv.Addr(), "SEM="+sem)
		expectLine(t, killedLines, "permit", 10*time.Second)
		stopped, stoppedLines := startHelper(t, "permit-holder", "REDIS_ADDR="+srv.Addr(), "SEM="+sem)
		expectLine(t, stoppedLines, "permit", 10*time.Second)
		s.ops += 2

		// Killed: its permit comes back to a waiter within the watchdog timeout.
		if err := killed.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		s.faults++
		start := time.Now()
		p1, err := c.PermitSemaphore(sem).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		worstBack = max(worstBack, time.Since(start))
		// Stopped past the timeout: its permit comes back too, and it is told when it resumes.
		if err := stopped.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		s.faults++
		start = time.Now()
		p2, err := c.PermitSemaphore(sem).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		worstBack = max(worstBack, time.Since(start))
		s.ops += 2
		if err := stopped.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		ended := expectLine(t, stoppedLines, "ended ", 10*time.Second)
		if !strings.Contains(ended, "lock lost") {
			s.violations++
			s.note("round %d: the stopped holder's permit ended with %s, want a loss", round, ended)
		}
		for _, p := range []*relock.Permit{p1, p2} {
			if err := p.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		close(stop)
		<-checked
		_ = stopped.Wait()
		_ = killed.Wait()
		if bad.Load() > 0 {
			s.violations += bad.Load()
		}
		if n, _ := c.PermitSemaphore(sem).AvailablePermits(ctx); n != limit {
			s.violations++
			s.note("round %d: %d permits available at the end, want %d", round, n, limit)
		}
		s.note("round %d: %d samples", round, samples.Load())
	}
	s.note("a dead or stopped holder's permit back within %v (watchdog timeout 1s)", worstBack.Round(time.Millisecond))
	s.report(t, true)
}
