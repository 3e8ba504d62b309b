package relock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

func TestCountDownLatch(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	l := a.CountDownLatch("batch")

	if err := l.Await(ctx); err != nil { // never set: open
		t.Fatalf("Await of a latch never set: %v", err)
	}
	if ok, err := l.TrySetCount(ctx, 3); !ok || err != nil {
		t.Fatalf("TrySetCount = %v, %v", ok, err)
	}
	if ok, _ := b.CountDownLatch("batch").TrySetCount(ctx, 5); ok {
		t.Fatal("TrySetCount on a latch counting down set it again")
	}
	if v, _ := do(t, rdb, "GET", "batch").ToString(); v != "3" {
		t.Fatalf("the latch in Redis is %q, want 3 (Redisson's layout: the count at the name)", v)
	}
	waiters := make(chan error, 4)
	for _, c := range []*relock.Client{a, a, b, b} {
		go func() { waiters <- c.CountDownLatch("batch").Await(ctx) }()
	}
	if ok, err := l.TryAwait(ctx, 100*time.Millisecond); ok || err != nil {
		t.Fatalf("TryAwait of a latch at 3 = %v, %v", ok, err)
	}
	for want := int64(2); want >= 1; want-- {
		if err := l.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
		if n, _ := l.Count(ctx); n != want {
			t.Fatalf("Count = %d, want %d", n, want)
		}
	}
	select {
	case err := <-waiters:
		t.Fatalf("a waiter returned before the latch opened: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := b.CountDownLatch("batch").CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		receive(t, waiters, 3*time.Second, "a waiter was not woken when the latch opened")
	}
	if n, _ := do(t, rdb, "EXISTS", "batch").AsInt64(); n != 0 {
		t.Fatal("an open latch's key is still there")
	}
	if err := l.CountDown(ctx); err != nil { // open: nothing changes
		t.Fatal(err)
	}
	if n, _ := do(t, rdb, "EXISTS", "batch").AsInt64(); n != 0 {
		t.Fatal("counting down an open latch wrote it")
	}
	if ok, _ := l.TrySetCount(ctx, 1); !ok {
		t.Fatal("an open latch could not be set again")
	}

	// Bad input: a typed error, nothing written.
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"TrySetCount 0", func() error { _, err := a.CountDownLatch("bad").TrySetCount(ctx, 0); return err }(), relock.ErrInvalidCount},
		{"braces", a.CountDownLatch("x{y}").CountDown(ctx), relock.ErrInvalidName},
		{"negative wait", func() error { _, err := l.TryAwait(ctx, -time.Second); return err }(), relock.ErrInvalidDuration},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	if n, _ := do(t, rdb, "EXISTS", "bad").AsInt64(); n != 0 {
		t.Fatal("a refused TrySetCount wrote the latch")
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := l.Await(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Await until ctx ends = %v, want context.DeadlineExceeded", err)
	}
}

// Redisson's protocol, driven by hand: its countDown to zero (DECR, DEL, "0" published on
// redisson_countdownlatch__channel__{name}) wakes relock's waiters, and relock's publishes the same.
func TestCountDownLatchRedissonProtocol(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	l := c.CountDownLatch("shared-latch")
	if _, err := l.TrySetCount(ctx, 1); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- l.Await(ctx) }()
	time.Sleep(200 * time.Millisecond)
	do(t, rdb, "DECR", "shared-latch")
	do(t, rdb, "DEL", "shared-latch")
	do(t, rdb, "PUBLISH", "redisson_countdownlatch__channel__{shared-latch}", "0")
	receive(t, got, 3*time.Second, "a Redisson-style count down did not wake relock's waiter")

	messages := subscribeRaw(t, srv, "redisson_countdownlatch__channel__{shared-latch}")
	if _, err := l.TrySetCount(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := l.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1", "0"} { // a new count, then open
		select {
		case m := <-messages:
			if m != want {
				t.Fatalf("relock published %q, want %q", m, want)
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("relock published nothing (want %q)", want)
		}
	}
}

// A semaphore and a latch on Redis Cluster: each object lives in one slot (its key and its channel), and
// waiters on another Client are woken through the cluster's pub/sub.
func TestSemaphoreAndLatchOnCluster(t *testing.T) {
	t.Parallel()
	d := onCluster(t, "synchronizers:")
	a, b := d.client(t, nil), d.client(t, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	sem := a.Semaphore(d.name("sem"))
	if _, err := sem.TrySetPermits(ctx, 0); err != nil {
		t.Fatal(err)
	}
	latch := a.CountDownLatch(d.name("latch"))
	if _, err := latch.TrySetCount(ctx, 2); err != nil {
		t.Fatal(err)
	}
	woken := make(chan error, 2)
	go func() { woken <- b.Semaphore(d.name("sem")).Acquire(ctx, 1) }()
	go func() { woken <- b.CountDownLatch(d.name("latch")).Await(ctx) }()
	time.Sleep(300 * time.Millisecond)
	if err := sem.Release(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := latch.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		receive(t, woken, 5*time.Second, "a waiter on the cluster was not woken")
	}
	if n, _ := sem.AvailablePermits(ctx); n != 0 {
		t.Fatalf("available = %d, want 0", n)
	}

	// An expirable semaphore's counter, taken permits and channel share the name's slot too.
	ps := a.PermitSemaphore(d.name("permits"))
	if _, err := ps.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	p, err := ps.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		q, err := b.PermitSemaphore(d.name("permits")).Acquire(ctx)
		if err == nil {
			err = q.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond)
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	receive(t, got, 5*time.Second, "a permit waiter on the cluster was not woken")
}
