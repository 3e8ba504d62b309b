package relock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/faultnet"
	"github.com/relock-go/relock/internal/redistest"
)

func TestSemaphore(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	s := a.Semaphore("sem")

	if n, err := s.AvailablePermits(ctx); n != 0 || err != nil {
		t.Fatalf("a semaphore never set: %d, %v", n, err)
	}
	if ok, _ := s.TryAcquire(ctx, 1, 0); ok {
		t.Fatal("took a permit of a semaphore never set")
	}
	if ok, err := s.TrySetPermits(ctx, 3); !ok || err != nil {
		t.Fatalf("TrySetPermits = %v, %v", ok, err)
	}
	if ok, _ := b.Semaphore("sem").TrySetPermits(ctx, 10); ok {
		t.Fatal("a second TrySetPermits set the permits again")
	}
	if v, _ := do(t, rdb, "GET", "sem").ToString(); v != "3" {
		t.Fatalf("the semaphore in Redis is %q, want 3 (Redisson's layout: the count at the name)", v)
	}
	if err := s.Acquire(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.TryAcquire(ctx, 2, 0); ok {
		t.Fatal("took 2 permits when 1 was available")
	}
	if n, _ := s.AvailablePermits(ctx); n != 1 {
		t.Fatalf("available = %d, want 1", n)
	}

	// Waiters on another Client are woken by a release, as many as it gives permits.
	var wg sync.WaitGroup
	got := make(chan error, 3)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got <- b.Semaphore("sem").Acquire(ctx, 1)
		}()
	}
	for range 1 { // one takes the permit that is left
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // the other two wait
	if err := s.Release(ctx, 2); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		receive(t, got, 3*time.Second, "a release of 2 permits did not wake 2 waiters")
	}
	wg.Wait()
	if n, _ := s.AvailablePermits(ctx); n != 0 {
		t.Fatalf("available = %d, want 0", n)
	}
	if err := s.AddPermits(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if err := s.AddPermits(ctx, -2); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.DrainPermits(ctx); n != 3 {
		t.Fatalf("DrainPermits = %d, want 3", n)
	}
	if ok, err := s.TryAcquire(ctx, 1, 200*time.Millisecond); ok || err != nil {
		t.Fatalf("TryAcquire of a drained semaphore = %v, %v", ok, err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := s.Acquire(short, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire until ctx ends = %v, want context.DeadlineExceeded", err)
	}
}

// Bad input gets a typed error and changes nothing in Redis.
func TestSemaphoreBadInput(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	s := c.Semaphore("bad")
	if _, err := s.TrySetPermits(ctx, 2); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"Acquire 0", func() error { return s.Acquire(ctx, 0) }, relock.ErrInvalidPermits},
		{"TryAcquire -1", func() error { _, err := s.TryAcquire(ctx, -1, 0); return err }, relock.ErrInvalidPermits},
		{"TryAcquire negative wait", func() error { _, err := s.TryAcquire(ctx, 1, -time.Second); return err }, relock.ErrInvalidDuration},
		{"Release 0", func() error { return s.Release(ctx, 0) }, relock.ErrInvalidPermits},
		{"AddPermits 0", func() error { return s.AddPermits(ctx, 0) }, relock.ErrInvalidPermits},
		{"TrySetPermits -1", func() error { _, err := c.Semaphore("bad2").TrySetPermits(ctx, -1); return err }, relock.ErrInvalidPermits},
		{"empty name", func() error { return c.Semaphore("").Release(ctx, 1) }, relock.ErrInvalidName},
		{"ended context", func() error {
			ended, cancel := context.WithCancel(ctx)
			cancel()
			return s.Release(ended, 1)
		}, context.Canceled},
	} {
		if err := tc.call(); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if v, _ := do(t, rdb, "GET", "bad").ToString(); v != "2" {
		t.Fatalf("bad input changed the semaphore to %q", v)
	}
	if n, _ := do(t, rdb, "EXISTS", "bad2").AsInt64(); n != 0 {
		t.Fatal("a refused TrySetPermits wrote the semaphore")
	}
}

// Redisson's protocol, driven by hand: its release (INCRBY, then the new count published on
// redisson_sc:{name}) wakes relock's waiters, and relock's release publishes what Redisson's waiters expect.
func TestSemaphoreRedissonProtocol(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	s := c.Semaphore("shared")
	if _, err := s.TrySetPermits(ctx, 0); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- s.Acquire(ctx, 1) }()
	time.Sleep(200 * time.Millisecond)
	// A Redisson release: INCRBY and publish the new count.
	do(t, rdb, "INCRBY", "shared", "1")
	do(t, rdb, "PUBLISH", "redisson_sc:{shared}", "1")
	receive(t, got, 3*time.Second, "a Redisson-style release did not wake relock's waiter")

	messages := subscribeRaw(t, srv, "redisson_sc:{shared}")
	if err := s.Release(ctx, 2); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-messages:
		if m != "2" {
			t.Fatalf("relock's release published %q, want the permits available, 2", m)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("relock's release published nothing on redisson_sc:{shared}")
	}
}

// subscribeRaw subscribes to channel on its own connection to srv, as another client (a Redisson JVM)
// would, and returns the messages it gets; it returns once Redis counts the subscription.
func subscribeRaw(t *testing.T, srv *redistest.Server, channel string) <-chan string {
	t.Helper()
	sub := rawClient(t, srv)
	rdb := rawClient(t, srv)
	messages := make(chan string, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		<-done
	})
	before := numsub(t, rdb, channel)
	go func() {
		defer close(done)
		_ = sub.Receive(ctx, sub.B().Subscribe().Channel(channel).Build(), func(m rueidis.PubSubMessage) {
			messages <- m.Message
		})
	}()
	eventually(t, 3*time.Second, "the raw subscription", func() bool { return numsub(t, rdb, channel) > before })
	return messages
}

// An Acquire (or DrainPermits) whose ctx ends while its script is in flight returns ctx's error, and the
// permits the script took, if it ran, come back: nobody holds them. Without the give-back they would be
// taken for good, as a semaphore's permits have no owner and no expiry.
func TestSemaphoreCancelledInFlight(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := startProxy(t, srv)
	c := clientAt(t, proxy.Addr, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	s := c.Semaphore("sem-inflight")
	if ok, err := s.TrySetPermits(ctx, 3); !ok || err != nil {
		t.Fatalf("TrySetPermits = %v, %v", ok, err)
	}
	available := func() int64 {
		n, _ := do(t, rdb, "GET", "sem-inflight").AsInt64()
		return n
	}
	// Load the scripts, so that the first sending under latency is the one that takes permits (not an
	// EVALSHA answered NOSCRIPT).
	if err := s.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DrainPermits(ctx); n != 2 || err != nil {
		t.Fatalf("DrainPermits = %d, %v", n, err)
	}
	if err := s.Release(ctx, 3); err != nil {
		t.Fatal(err)
	}
	proxy.SetLatency(150 * time.Millisecond) // each way: the script runs 150 ms after it was sent
	for _, call := range []struct {
		name string
		run  func(ctx context.Context) error
	}{
		{"Acquire", func(ctx context.Context) error { return s.Acquire(ctx, 2) }},
		{"TryAcquire", func(ctx context.Context) error { _, err := s.TryAcquire(ctx, 1, time.Second); return err }},
		{"DrainPermits", func(ctx context.Context) error { _, err := s.DrainPermits(ctx); return err }},
	} {
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		err := call.run(short)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s with a context ending in flight = %v, want context.DeadlineExceeded", call.name, err)
		}
		// The script runs after the cancellation (150 ms after it was sent), and takes permits; they are
		// given back when its reply arrives (150 ms later), through the proxy (300 ms more).
		eventually(t, 3*time.Second, call.name+": the script sent before the cancellation takes permits", func() bool {
			return available() < 3
		})
		eventually(t, 3*time.Second, call.name+": the permits taken in flight come back", func() bool {
			return available() == 3
		}, func() string { return fmt.Sprintf("available %d", available()) })
	}
	proxy.SetLatency(0)
	if err := s.Acquire(ctx, 3); err != nil {
		t.Fatal(err)
	}
}

// A waiting Acquire whose attempt ran but whose reply was lost to a broken connection is not tried again:
// the permit the attempt took is held by nobody, and another attempt would take one more, unseen. The
// caller is told instead, with an error saying permits may have been taken.
func TestSemaphoreWaiterReplyLost(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := startProxy(t, srv)
	waiter := clientAt(t, proxy.Addr, nil)
	holder := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	const name = "sem-reply-lost"
	if ok, err := holder.Semaphore(name).TrySetPermits(ctx, 1); !ok || err != nil {
		t.Fatalf("TrySetPermits = %v, %v", ok, err)
	}
	// Load the script on the waiter's connection, so that its attempt under latency is the one that runs.
	if err := waiter.Semaphore(name).Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := waiter.Semaphore(name).Release(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := holder.Semaphore(name).Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- waiter.Semaphore(name).Acquire(ctx, 1) }()
	eventually(t, 5*time.Second, "the waiter subscribes", func() bool { return numsub(t, rdb, "redisson_sc:{"+name+"}") == 1 })
	time.Sleep(50 * time.Millisecond) // and waits
	proxy.SetLatency(200 * time.Millisecond)
	if err := holder.Semaphore(name).Release(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// The announcement reaches the waiter 200 ms later; its attempt runs 200 ms after that, and its reply
	// would arrive 200 ms later still: hold it back, then break the connection.
	eventually(t, 5*time.Second, "the waiter's attempt runs", func() bool {
		n, _ := do(t, rdb, "GET", name).AsInt64()
		return n == 0
	})
	proxy.Stall(faultnet.Downstream, true)
	proxy.Cut()
	proxy.Stall(faultnet.Downstream, false)
	proxy.SetLatency(0)
	select {
	case err := <-got:
		if err == nil || !strings.Contains(err.Error(), "reply was lost") {
			t.Fatalf("Acquire = %v, want the error of a lost reply", err)
		}
		t.Logf("Acquire: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter tries again after its attempt's reply was lost (it would strand the permit unseen)")
	}
	if n, _ := do(t, rdb, "GET", name).AsInt64(); n != 0 {
		t.Fatalf("available = %d, want 0: the attempt ran", n)
	}
}

// Two waiters of a semaphore on one Client, and two permits released one after the other at once, again
// and again: both waiters must get one every time. The first release wakes the older waiter; when its
// attempt runs before the second release and the second announcement reaches it before it has left the
// hub, that wake-up was lost (16 of 40 rounds in the report; here, before the fix, 1 round of 40
// or 80: the race is narrow on an idle machine). handoff_test.go puts waiters in that race every time,
// and wait_test.go in every other way a wake-up can go unused; this is the user's view.
func TestSemaphoreBackToBackReleasesWakeBothWaiters(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	waiters, releaser := newClient(t, srv, nil), newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 2*time.Minute)
	const rounds = 40
	lost := 0
	for round := range rounds {
		name := fmt.Sprintf("sem-back-to-back-%d", round)
		if _, err := releaser.Semaphore(name).TrySetPermits(ctx, 0); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 2)
		rctx, cancel := context.WithCancel(ctx)
		for range 2 {
			go func() { got <- waiters.Semaphore(name).Acquire(rctx, 1) }()
		}
		eventually(t, 5*time.Second, "the waiters subscribe", func() bool { return numsub(t, rdb, "redisson_sc:{"+name+"}") == 1 })
		time.Sleep(20 * time.Millisecond) // and sleep
		for range 2 {
			if err := releaser.Semaphore(name).Release(ctx, 1); err != nil {
				t.Fatal(err)
			}
		}
		timeout := time.After(2 * time.Second)
		for range 2 {
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
			case <-timeout:
				lost++
				cancel()
				<-got
			}
		}
		cancel()
	}
	if lost > 0 {
		t.Fatalf("in %d of %d rounds a waiter still waited 2 s after both permits were released", lost, rounds)
	}
}
