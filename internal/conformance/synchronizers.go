package conformance

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/testutil"
)

// syncTests are the conformance tests of the synchronizers (semaphores, latches), run once per place.
var syncTests = []struct {
	name string
	test func(t *testing.T, d *Deployment)
}{
	{"SemaphoreLimit", semaphoreLimit},
	{"PermitSemaphoreLimit", permitSemaphoreLimit},
	{"PermitLoss", permitLoss},
	{"CountDownLatch", countDownLatch},
	{"Election", election},
}

// permitsKey is the sorted set of a PermitSemaphore's permits taken (Redisson's suffixName rule).
func permitsKey(name string) string {
	if strings.Contains(name, "{") {
		return name + ":timeout"
	}
	return "{" + name + "}:timeout"
}

// limited runs goroutines on two Clients that each, rounds times, take a permit with acquire, check that
// no more than limit are inside, and give it back with release; it fails t if more ever were.
func limited(t *testing.T, d *Deployment, limit int, acquire func(c *relock.Client) (release func() error, err error)) {
	clients := []*relock.Client{d.Client(t, nil), d.Client(t, nil)}
	goroutines, rounds := 6, 30
	if d.Light {
		rounds = 6
	}
	var wg sync.WaitGroup
	var inside, most atomic.Int32
	for _, c := range clients {
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					release, err := acquire(c)
					if err != nil {
						t.Error(err)
						return
					}
					n := inside.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					if n > int32(limit) {
						t.Errorf("%d holders of %d permits", n, limit)
					}
					time.Sleep(time.Millisecond)
					inside.Add(-1)
					if err := release(); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if most.Load() < 2 {
		t.Errorf("at most %d holder at once: the permits were never shared", most.Load())
	}
}

func semaphoreLimit(t *testing.T, d *Deployment) {
	ctx := testutil.Ctx(t, 60*time.Second)
	name := d.name("semaphore")
	const limit = 3
	if ok, err := d.Client(t, nil).Semaphore(name).TrySetPermits(ctx, limit); !ok || err != nil {
		t.Fatalf("TrySetPermits = %v, %v", ok, err)
	}
	limited(t, d, limit, func(c *relock.Client) (func() error, error) {
		s := c.Semaphore(name)
		return func() error { return s.Release(ctx, 1) }, s.Acquire(ctx, 1)
	})
	if n, err := d.Client(t, nil).Semaphore(name).AvailablePermits(ctx); n != limit || err != nil {
		t.Fatalf("AvailablePermits at the end = %d, %v; want %d", n, err, limit)
	}
}

func permitSemaphoreLimit(t *testing.T, d *Deployment) {
	ctx := testutil.Ctx(t, 60*time.Second)
	name := d.name("permits")
	const limit = 3
	if ok, err := d.Client(t, nil).PermitSemaphore(name).TrySetPermits(ctx, limit); !ok || err != nil {
		t.Fatalf("TrySetPermits = %v, %v", ok, err)
	}
	var byOwner atomic.Bool
	limited(t, d, limit, func(c *relock.Client) (func() error, error) {
		s := c.PermitSemaphore(name)
		p, err := s.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		if byOwner.Swap(!byOwner.Load()) { // half the releases by owner (the goroutine), half by Permit
			return func() error { return s.Release(ctx, 1) }, nil
		}
		return func() error { return p.Release(ctx) }, nil
	})
	rdb := d.Raw(t)
	if n, _ := testutil.Do(t, rdb, "ZCARD", permitsKey(name)).AsInt64(); n != 0 {
		t.Fatalf("%d permits still taken at the end", n)
	}
	if n, err := d.Client(t, nil).PermitSemaphore(name).AvailablePermits(ctx); n != limit || err != nil {
		t.Fatalf("AvailablePermits at the end = %d, %v; want %d", n, err, limit)
	}
}

// A permit that expires in Redis (as when its holder's renewals fail) is lost: its holder is told, another
// Client takes it, and the holder's Release is ErrNotHeld.
func permitLoss(t *testing.T, d *Deployment) {
	a, b := d.Client(t, fastWatchdog), d.Client(t, fastWatchdog)
	ctx := relock.WithOwner(testutil.Ctx(t, 30*time.Second), "holder")
	name := d.name("lost-permit")
	if _, err := a.PermitSemaphore(name).TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	p, err := a.PermitSemaphore(name).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held, err := p.Context(ctx)
	if err != nil {
		t.Fatal(err)
	}
	taken, err := d.Raw(t).Do(ctx, d.Raw(t).B().Zrange().Key(permitsKey(name)).Min("0").Max("0").Build()).AsStrSlice()
	if err != nil || len(taken) != 1 {
		t.Fatalf("the permit in Redis: %q, %v", taken, err)
	}
	testutil.Do(t, d.Raw(t), "ZADD", permitsKey(name), "1", taken[0]) // expired long ago
	q, ok, err := b.PermitSemaphore(name).TryAcquire(ctx, 5*time.Second, 0)
	if err != nil || !ok {
		t.Fatalf("the expired permit was not taken by another Client: %v, %v", q, err)
	}
	select {
	case <-held.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the holder was not told its permit was lost")
	}
	if !errors.Is(context.Cause(held), relock.ErrLockLost) {
		t.Fatalf("the lost permit's context ended with %v, want ErrLockLost", context.Cause(held))
	}
	if err := a.PermitSemaphore(name).Release(ctx, 1); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("the owner's Release of its lost permit = %v, want ErrNotHeld", err)
	}
	if err := q.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Waiters on two Clients are woken when the count reaches zero; the latch leaves no key behind.
func countDownLatch(t *testing.T, d *Deployment) {
	a, b := d.Client(t, nil), d.Client(t, nil)
	ctx := testutil.Ctx(t, 30*time.Second)
	name := d.name("latch")
	if ok, err := a.CountDownLatch(name).TrySetCount(ctx, 2); !ok || err != nil {
		t.Fatalf("TrySetCount = %v, %v", ok, err)
	}
	woken := make(chan error, 4)
	for _, c := range []*relock.Client{a, a, b, b} {
		go func() { woken <- c.CountDownLatch(name).Await(ctx) }()
	}
	time.Sleep(100 * time.Millisecond)
	for range 2 {
		select {
		case err := <-woken:
			t.Fatalf("a waiter returned before the latch opened: %v", err)
		default:
		}
		if err := b.CountDownLatch(name).CountDown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		select {
		case err := <-woken:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a waiter was not woken when the latch opened")
		}
	}
	if n, err := a.CountDownLatch(name).Count(ctx); n != 0 || err != nil {
		t.Fatalf("Count = %d, %v", n, err)
	}
	if keys := d.Keys(t, name); len(keys) != 0 {
		t.Fatalf("the open latch left %v", keys)
	}
}

// Candidates on two Clients lead one at a time, in the order they campaigned, with increasing terms; an
// observer sees each leader in order; a leader whose Client closes (Close resigns) is replaced.
func election(t *testing.T, d *Deployment) {
	a, b, dead := d.Client(t, fastWatchdog), d.Client(t, fastWatchdog), d.Client(t, fastWatchdog)
	ctx := testutil.Ctx(t, 30*time.Second)
	name := d.name("election")
	leaders, err := b.Election(name).Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first, err := dead.Election(name).Campaign(ctx, "dead")
	if err != nil {
		t.Fatal(err)
	}
	type won struct {
		value string
		term  uint64
		err   error
	}
	wins := make(chan won, 2)
	for i, c := range []*relock.Client{a, b} {
		value := []string{"a", "b"}[i]
		owner := relock.WithOwner(ctx, "candidate-"+value)
		go func() {
			term, err := c.Election(name).Campaign(owner, value)
			wins <- won{value, term, err}
			if err == nil {
				time.Sleep(50 * time.Millisecond)
				_ = c.Election(name).Resign(owner)
			}
		}()
		time.Sleep(100 * time.Millisecond) // a queues before b
	}
	if l, err := a.Election(name).Leader(ctx); err != nil || l.Value != "dead" || l.Term != first {
		t.Fatalf("Leader = %+v, %v; want the first candidate", l, err)
	}
	dead.Close() // closes leading: it resigns
	want := []won{{"dead", first, nil}}
	for range 2 {
		select {
		case w := <-wins:
			if w.err != nil || w.term <= want[len(want)-1].term {
				t.Fatalf("%+v won after %+v", w, want[len(want)-1])
			}
			want = append(want, w)
		case <-time.After(10 * time.Second):
			t.Fatal("no candidate took over")
		}
	}
	if want[1].value != "a" || want[2].value != "b" {
		t.Fatalf("leaders %+v: want a, then b", want)
	}
	for _, w := range want {
		select {
		case l := <-leaders:
			if l.Value != w.value || l.Term != w.term {
				t.Fatalf("observed %+v, want %+v", l, w)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("the observer did not see %+v", w)
		}
	}
}
