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
	"github.com/relock-go/relock/internal/redistest"
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

func forEachKind(t *testing.T, test func(t *testing.T, srv *redistest.Server, newLock func(*relock.Client, string, ...relock.LockOption) testLock)) {
	t.Parallel()
	for _, kind := range lockKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			test(t, redistest.Start(t), kind.newLock)
		})
	}
}

func TestConformanceReentrancy(t *testing.T) {
	forEachKind(t, func(t *testing.T, srv *redistest.Server, newLock func(*relock.Client, string, ...relock.LockOption) testLock) {
		c := newClient(t, srv, nil)
		rdb := rawClient(t, srv)
		ctx := ctxTimeout(t, 10*time.Second)
		l := newLock(c, "reentrant")
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
		if keys, _ := do(t, rdb, "KEYS", "*").AsStrSlice(); len(keys) != 0 {
			t.Fatalf("keys left after the last Unlock: %v", keys)
		}
	})
}

func TestConformanceOnlyOwnerUnlocks(t *testing.T) {
	forEachKind(t, func(t *testing.T, srv *redistest.Server, newLock func(*relock.Client, string, ...relock.LockOption) testLock) {
		a, b := newClient(t, srv, nil), newClient(t, srv, nil)
		ctx := ctxTimeout(t, 10*time.Second)
		if err := newLock(a, "owned").Lock(ctx); err != nil {
			t.Fatal(err)
		}
		other := newLock(a, "owned")
		errc := make(chan error, 1)
		go func() { errc <- other.Unlock(ctx) }() // another goroutine: another owner
		if err := <-errc; !errors.Is(err, relock.ErrNotHeld) {
			t.Fatalf("Unlock from another goroutine = %v, want ErrNotHeld", err)
		}
		if err := newLock(b, "owned").Unlock(ctx); !errors.Is(err, relock.ErrNotHeld) {
			t.Fatalf("Unlock from another Client = %v, want ErrNotHeld", err)
		}
		if n, err := newLock(a, "owned").HoldCount(ctx); n != 1 || err != nil {
			t.Fatalf("hold count = %d, %v; want 1", n, err)
		}
	})
}

func TestConformanceLeaseExpiry(t *testing.T) {
	forEachKind(t, func(t *testing.T, srv *redistest.Server, newLock func(*relock.Client, string, ...relock.LockOption) testLock) {
		a, b := newClient(t, srv, nil), newClient(t, srv, nil)
		ctx := ctxTimeout(t, 10*time.Second)
		if err := newLock(a, "leased").LockWithLease(ctx, 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := newLock(b, "leased").Lock(ctx); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < 250*time.Millisecond || d > 800*time.Millisecond {
			t.Fatalf("acquired %v after a 300ms lease was taken", d)
		}
		if err := newLock(a, "leased").Unlock(ctx); !errors.Is(err, relock.ErrNotHeld) {
			t.Fatalf("expired owner's Unlock = %v, want ErrNotHeld", err)
		}
	})
}

func TestConformanceMutualExclusion(t *testing.T) {
	forEachKind(t, func(t *testing.T, srv *redistest.Server, newLock func(*relock.Client, string, ...relock.LockOption) testLock) {
		clients := []*relock.Client{newClient(t, srv, nil), newClient(t, srv, nil)}
		rdb := rawClient(t, srv)
		ctx := ctxTimeout(t, 60*time.Second)
		const goroutines, increments = 8, 50
		var wg sync.WaitGroup
		var inside atomic.Int32
		for _, c := range clients {
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					l := newLock(c, "exclusive")
					for range increments {
						if err := l.Lock(ctx); err != nil {
							t.Error(err)
							return
						}
						if inside.Add(1) != 1 {
							t.Error("two owners inside the critical section")
						}
						n, err := rdb.Do(ctx, rdb.B().Get().Key("count").Build()).AsInt64()
						if err != nil && !rueidis.IsRedisNil(err) {
							t.Error(err)
						}
						rdb.Do(ctx, rdb.B().Set().Key("count").Value(strconv.FormatInt(n+1, 10)).Build())
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
		if n, _ := do(t, rdb, "GET", "count").AsInt64(); n != int64(len(clients)*goroutines*increments) {
			t.Fatalf("count = %d, want %d", n, len(clients)*goroutines*increments)
		}
		if keys, _ := do(t, rdb, "KEYS", "*").AsStrSlice(); len(keys) != 1 {
			t.Fatalf("keys left: %v, want only the counter", keys)
		}
	})
}

func TestConformanceFencingAndHoldContext(t *testing.T) {
	forEachKind(t, func(t *testing.T, srv *redistest.Server, newLock func(*relock.Client, string, ...relock.LockOption) testLock) {
		a, b := newClient(t, srv, fastWatchdog), newClient(t, srv, fastWatchdog)
		rdb := rawClient(t, srv)
		ctx := ctxTimeout(t, 10*time.Second)
		var last uint64
		for i, c := range []*relock.Client{a, b, a} {
			l := newLock(c, "fenced", relock.WithFencing())
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
		l := newLock(a, "fenced", relock.WithFencing())
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
		do(t, rdb, "DEL", "fenced")
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
