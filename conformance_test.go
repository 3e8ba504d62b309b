package relock_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
)

// testLock is what the conformance tests use of a reentrant lock type.
type testLock interface {
	relock.Locker
	Name() string
	LockWithLease(ctx context.Context, lease time.Duration) error
	TryLock(ctx context.Context, wait, lease time.Duration) (bool, error)
	HoldCount(ctx context.Context) (int, error)
	IsLocked(ctx context.Context) (bool, error)
	FencingToken(ctx context.Context) (uint64, error)
}

// lockKinds are the exclusive lock types every conformance test runs against.
var lockKinds = []struct {
	name    string
	newLock func(c *relock.Client, name string, opts ...relock.LockOption) testLock
}{
	{"rlock", func(c *relock.Client, name string, opts ...relock.LockOption) testLock { return c.Lock(name, opts...) }},
	{"fair", func(c *relock.Client, name string, opts ...relock.LockOption) testLock {
		return c.FairLock(name, opts...)
	}},
	{"write", func(c *relock.Client, name string, opts ...relock.LockOption) testLock {
		return c.ReadWriteLock(name, opts...).WriteLock()
	}},
	{"write-priority", func(c *relock.Client, name string, opts ...relock.LockOption) testLock {
		return c.ReadWriteLock(name, append(opts, relock.WithWriterPriority())...).WriteLock()
	}},
}

// conformance runs test for every lock kind, on a server of its own and on the shared cluster.
func conformance(t *testing.T, test func(t *testing.T, d *deployment, newLock func(*relock.Client, string, ...relock.LockOption) testLock)) {
	t.Parallel()
	for _, kind := range lockKinds {
		for _, where := range []string{"standalone", "cluster"} {
			t.Run(kind.name+"/"+where, func(t *testing.T) {
				t.Parallel()
				d := onCluster(t, t.Name()+":")
				if where == "standalone" {
					d = standalone(t)
				}
				test(t, d, kind.newLock)
			})
		}
	}
}

func TestConformanceReentrancy(t *testing.T) {
	conformance(t, func(t *testing.T, d *deployment, newLock func(*relock.Client, string, ...relock.LockOption) testLock) {
		c := d.client(t, nil)
		ctx := ctxTimeout(t, 10*time.Second)
		l := newLock(c, d.name("reentrant"))
		for i, step := range []struct {
			lock bool
			want int
		}{{true, 1}, {true, 2}, {false, 1}, {false, 0}} {
			var err error
			if step.lock {
				err = l.Lock(ctx)
			} else {
				err = l.Unlock(ctx)
			}
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			if n, err := l.HoldCount(ctx); n != step.want || err != nil {
				t.Fatalf("step %d: hold count %d, %v; want %d", i, n, err, step.want)
			}
		}
		if err := l.Unlock(ctx); !errors.Is(err, relock.ErrNotHeld) {
			t.Fatalf("extra Unlock = %v, want ErrNotHeld", err)
		}
		if keys := d.keys(t); len(keys) != 0 {
			t.Fatalf("keys left after the last Unlock: %v", keys)
		}
	})
}

func TestConformanceOnlyOwnerUnlocks(t *testing.T) {
	conformance(t, func(t *testing.T, d *deployment, newLock func(*relock.Client, string, ...relock.LockOption) testLock) {
		a, b := d.client(t, nil), d.client(t, nil)
		ctx := ctxTimeout(t, 10*time.Second)
		if err := newLock(a, d.name("owned")).Lock(ctx); err != nil {
			t.Fatal(err)
		}
		other := newLock(a, d.name("owned"))
		errc := make(chan error, 1)
		go func() { errc <- other.Unlock(ctx) }() // another goroutine: another owner
		if err := <-errc; !errors.Is(err, relock.ErrNotHeld) {
			t.Fatalf("Unlock from another goroutine = %v, want ErrNotHeld", err)
		}
		if err := newLock(b, d.name("owned")).Unlock(ctx); !errors.Is(err, relock.ErrNotHeld) {
			t.Fatalf("Unlock from another Client = %v, want ErrNotHeld", err)
		}
		if n, err := newLock(a, d.name("owned")).HoldCount(ctx); n != 1 || err != nil {
			t.Fatalf("hold count = %d, %v; want 1", n, err)
		}
	})
}

func TestConformanceLeaseExpiry(t *testing.T) {
	conformance(t, func(t *testing.T, d *deployment, newLock func(*relock.Client, string, ...relock.LockOption) testLock) {
		a, b := d.client(t, nil), d.client(t, nil)
		ctx := ctxTimeout(t, 10*time.Second)
		if err := newLock(a, d.name("leased")).LockWithLease(ctx, 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := newLock(b, d.name("leased")).Lock(ctx); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < 250*time.Millisecond || d > 800*time.Millisecond {
			t.Fatalf("acquired %v after a 300ms lease was taken", d)
		}
		if err := newLock(a, d.name("leased")).Unlock(ctx); !errors.Is(err, relock.ErrNotHeld) {
			t.Fatalf("expired owner's Unlock = %v, want ErrNotHeld", err)
		}
	})
}

func TestConformanceMutualExclusion(t *testing.T) {
	conformance(t, func(t *testing.T, d *deployment, newLock func(*relock.Client, string, ...relock.LockOption) testLock) {
		clients := []*relock.Client{d.client(t, nil), d.client(t, nil)}
		rdb := d.raw(t)
		ctx := ctxTimeout(t, 60*time.Second)
		const goroutines, increments = 8, 50
		var wg sync.WaitGroup
		var inside atomic.Int32
		for _, c := range clients {
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					l := newLock(c, d.name("exclusive"))
					for range increments {
						if err := l.Lock(ctx); err != nil {
							t.Error(err)
							return
						}
						if inside.Add(1) != 1 {
							t.Error("two owners inside the critical section")
						}
						n, err := rdb.Do(ctx, rdb.B().Get().Key(d.name("count")).Build()).AsInt64()
						if err != nil && !rueidis.IsRedisNil(err) {
							t.Error(err)
						}
						rdb.Do(ctx, rdb.B().Set().Key(d.name("count")).Value(strconv.FormatInt(n+1, 10)).Build())
						inside.Add(-1)
						if err := l.Unlock(ctx); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		if n, _ := do(t, rdb, "GET", d.name("count")).AsInt64(); n != int64(len(clients)*goroutines*increments) {
			t.Fatalf("count = %d, want %d", n, len(clients)*goroutines*increments)
		}
		if keys := d.keys(t); len(keys) != 1 {
			t.Fatalf("keys left: %v, want only the counter", keys)
		}
	})
}

func TestConformanceFencingAndHoldContext(t *testing.T) {
	conformance(t, func(t *testing.T, d *deployment, newLock func(*relock.Client, string, ...relock.LockOption) testLock) {
		a, b := d.client(t, fastWatchdog), d.client(t, fastWatchdog)
		rdb := d.raw(t)
		ctx := ctxTimeout(t, 10*time.Second)
		var last uint64
		for i, c := range []*relock.Client{a, b, a} {
			l := newLock(c, d.name("fenced"), relock.WithFencing())
			if err := l.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			tok, err := l.FencingToken(ctx)
			if err != nil || tok <= last {
				t.Fatalf("holder %d: token %d, %v after %d", i, tok, err, last)
			}
			last = tok
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		l := newLock(a, d.name("fenced"), relock.WithFencing())
		if err := l.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		held, err := l.HoldContext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(1200 * time.Millisecond) // renewed past the 1 s watchdog timeout
		if held.Err() != nil {
			t.Fatalf("hold context ended while held: %v", context.Cause(held))
		}
		do(t, rdb, "DEL", d.name("fenced"))
		select {
		case <-held.Done():
		case <-time.After(2 * time.Second):
			t.Fatal("the loss was not reported")
		}
		if !errors.Is(context.Cause(held), relock.ErrLockLost) {
			t.Fatalf("cause = %v, want ErrLockLost", context.Cause(held))
		}
	})
}
