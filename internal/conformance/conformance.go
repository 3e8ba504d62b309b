// Package conformance holds the tests every deployment of relock must pass, whatever serves Redis:
// reentrancy, owner-only unlock, lease expiry, mutual exclusion, fencing and loss, for every exclusive lock
// kind; permit limits, permit loss, latches and elections for the synchronizers. The library runs them
// against redis-server (a single server and a cluster), and relocktest against its in-process server, so
// that both are held to one suite.
package conformance

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
	"github.com/relock-go/relock/internal/testutil"
)

// Deployment is where one test's locks live.
type Deployment struct {
	// Client returns a new relock Client on the deployment, closed when t ends.
	Client func(t testing.TB, opts *relock.Options) *relock.Client
	// Raw returns a plain rueidis client on the deployment (a cluster client on a cluster), for reading
	// and writing keys behind relock's back.
	Raw func(t testing.TB) rueidis.Client
	// Keys returns the names of the deployment's keys that contain substr (on a cluster, of every node).
	Keys func(t testing.TB, substr string) []string
	// Prefix starts every key name the test uses, to keep it out of the way of other tests sharing the
	// deployment ("" for a deployment of its own).
	Prefix string
	// Light runs the load test (MutualExclusion) with a fifth of its acquisitions: for a deployment tested
	// for its commands or its transport (an ACL user, TLS) or that is slow by nature (miniredis), not for
	// contention, which the plain deployments test in full. It keeps CI's 2 cores from being starved.
	Light bool
}

// name returns a lock or key name for this deployment.
func (d *Deployment) name(base string) string { return d.Prefix + base }

// keys returns the deployment's keys whose names contain its prefix (all of them when it has none).
func (d *Deployment) keys(t testing.TB) []string {
	t.Helper()
	return d.Keys(t, d.Prefix)
}

// Lock is what the conformance tests use of a reentrant lock type.
type Lock interface {
	relock.Locker
	Name() string
	LockWithLease(ctx context.Context, lease time.Duration) error
	TryLock(ctx context.Context, wait, lease time.Duration) (bool, error)
	HoldCount(ctx context.Context) (int, error)
	IsLocked(ctx context.Context) (bool, error)
	FencingToken(ctx context.Context) (uint64, error)
}

// kinds are the exclusive lock types every conformance test runs against.
var kinds = []struct {
	name    string
	newLock func(c *relock.Client, name string, opts ...relock.LockOption) Lock
}{
	{"rlock", func(c *relock.Client, name string, opts ...relock.LockOption) Lock { return c.Lock(name, opts...) }},
	{"fair", func(c *relock.Client, name string, opts ...relock.LockOption) Lock {
		return c.FairLock(name, opts...)
	}},
	{"write", func(c *relock.Client, name string, opts ...relock.LockOption) Lock {
		return c.ReadWriteLock(name, opts...).WriteLock()
	}},
	{"write-priority", func(c *relock.Client, name string, opts ...relock.LockOption) Lock {
		return c.ReadWriteLock(name, append(opts, relock.WithWriterPriority())...).WriteLock()
	}},
}

// tests are the conformance tests, by name.
var tests = []struct {
	name string
	test func(t *testing.T, d *Deployment, newLock func(*relock.Client, string, ...relock.LockOption) Lock)
}{
	{"Reentrancy", reentrancy},
	{"OnlyOwnerUnlocks", onlyOwnerUnlocks},
	{"LeaseExpiry", leaseExpiry},
	{"MutualExclusion", mutualExclusion},
	{"FencingAndHoldContext", fencingAndHoldContext},
	{"WokenByRelease", wokenByRelease},
	{"CloseGivesUp", closeGivesUp},
}

// Run runs every conformance test for every lock kind and every place in where, each in a parallel
// subtest named test/kind/place, on the deployment deploy gives for that place; then the synchronizers'
// tests for every place, as test/place.
func Run(t *testing.T, where []string, deploy func(t *testing.T, place string) *Deployment) {
	for _, tc := range syncTests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, place := range where {
				t.Run(place, func(t *testing.T) {
					t.Parallel()
					tc.test(t, deploy(t, place))
				})
			}
		})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, kind := range kinds {
				for _, place := range where {
					t.Run(kind.name+"/"+place, func(t *testing.T) {
						t.Parallel()
						tc.test(t, deploy(t, place), kind.newLock)
					})
				}
			}
		})
	}
}

// fastWatchdog renews every 1/3 s, so that a loss is found quickly.
var fastWatchdog = &relock.Options{WatchdogTimeout: time.Second}

func reentrancy(t *testing.T, d *Deployment, newLock func(*relock.Client, string, ...relock.LockOption) Lock) {
	c := d.Client(t, nil)
	ctx := testutil.Ctx(t, 10*time.Second)
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
}

func onlyOwnerUnlocks(t *testing.T, d *Deployment, newLock func(*relock.Client, string, ...relock.LockOption) Lock) {
	a, b := d.Client(t, nil), d.Client(t, nil)
	ctx := testutil.Ctx(t, 10*time.Second)
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
}

func leaseExpiry(t *testing.T, d *Deployment, newLock func(*relock.Client, string, ...relock.LockOption) Lock) {
	a, b := d.Client(t, nil), d.Client(t, nil)
	ctx := testutil.Ctx(t, 10*time.Second)
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
}

func mutualExclusion(t *testing.T, d *Deployment, newLock func(*relock.Client, string, ...relock.LockOption) Lock) {
	clients := []*relock.Client{d.Client(t, nil), d.Client(t, nil)}
	rdb := d.Raw(t)
	ctx := testutil.Ctx(t, 60*time.Second)
	goroutines, increments := 8, 50
	if d.Light {
		increments = 10
	}
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
	if n, _ := testutil.Do(t, rdb, "GET", d.name("count")).AsInt64(); n != int64(len(clients)*goroutines*increments) {
		t.Fatalf("count = %d, want %d", n, len(clients)*goroutines*increments)
	}
	if keys := d.keys(t); len(keys) != 1 {
		t.Fatalf("keys left: %v, want only the counter", keys)
	}
}

func fencingAndHoldContext(t *testing.T, d *Deployment, newLock func(*relock.Client, string, ...relock.LockOption) Lock) {
	a, b := d.Client(t, fastWatchdog), d.Client(t, fastWatchdog)
	rdb := d.Raw(t)
	ctx := testutil.Ctx(t, 10*time.Second)
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
	testutil.Do(t, rdb, "DEL", d.name("fenced"))
	select {
	case <-held.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("the loss was not reported")
	}
	if !errors.Is(context.Cause(held), relock.ErrLockLost) {
		t.Fatalf("cause = %v, want ErrLockLost", context.Cause(held))
	}
}

// wokenByRelease: a waiter on another Client blocks while the lock is held (the watchdog keeps it 30 s),
// and has it within 2 s of the release: woken by the release's message, not by the lock's expiry.
func wokenByRelease(t *testing.T, d *Deployment, newLock func(*relock.Client, string, ...relock.LockOption) Lock) {
	a, b := d.Client(t, nil), d.Client(t, nil)
	ctx := testutil.Ctx(t, 20*time.Second)
	name := d.name("woken")
	if err := newLock(a, name).Lock(ctx); err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	failed := make(chan error, 1) // the waiter's Lock failed
	done := make(chan error, 1)   // the waiter's Unlock, after got
	go func() {
		l := newLock(b, name)
		if err := l.Lock(ctx); err != nil {
			failed <- err
			return
		}
		got <- time.Now()
		done <- l.Unlock(ctx)
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case <-got:
		t.Fatal("the waiter got the lock while it was held")
	default:
	}
	released := time.Now()
	if err := newLock(a, name).Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-got:
		if took := at.Sub(released); took > 2*time.Second {
			t.Fatalf("the waiter got the lock %v after the release", took)
		}
	case err := <-failed:
		t.Fatalf("the waiter's Lock: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken by the release")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// closeGivesUp: a Client's Close releases what it holds: another Client takes the lock at once, and no key
// of the closed Client's owners is left.
func closeGivesUp(t *testing.T, d *Deployment, newLock func(*relock.Client, string, ...relock.LockOption) Lock) {
	a, b := d.Client(t, nil), d.Client(t, nil)
	ctx := testutil.Ctx(t, 20*time.Second)
	name := d.name("closed")
	if err := newLock(a, name).Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	l := newLock(b, name)
	if ok, err := l.TryLock(ctx, 0, 0); !ok || err != nil {
		t.Fatalf("TryLock after the holder's Client closed = %v, %v; want true at once", ok, err)
	}
	if left := d.Keys(t, a.ID()); len(left) > 0 {
		t.Fatalf("keys of the closed Client's owners are left: %v", left)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
