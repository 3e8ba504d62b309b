package relock_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// trackingKeys returns Redis's count of keys in its tracking table (INFO stats tracking_total_keys).
func trackingKeys(t testing.TB, rdb rueidis.Client) int {
	t.Helper()
	info, err := do(t, rdb, "INFO", "stats").ToString()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "tracking_total_keys:"); ok {
			var n int
			fmt.Sscan(v, &n)
			return n
		}
	}
	t.Fatal("INFO stats has no tracking_total_keys")
	return 0
}

// The watch of holds tracks the keys of the holds it reads. A hold released leaves no entry in Redis's
// tracking table behind, whichever comes first at the watch, the release's invalidation or its
// reply: after many names held past the watch's first read and released, the table is back to what it
// was. (Before, 89 to 172 of 200 such names left an entry until the name was written again.)
func TestWatchLeavesNoTrackingEntries(t *testing.T) {
	t.Parallel()
	const names = 200
	for _, kind := range []struct {
		name string
		hold func(c *relock.Client, ctx context.Context, name string) (release func() error, err error)
	}{
		{"rlock", func(c *relock.Client, ctx context.Context, name string) (func() error, error) {
			l := c.Lock(name)
			return func() error { return l.Unlock(ctx) }, l.Lock(ctx)
		}},
		{"fair", func(c *relock.Client, ctx context.Context, name string) (func() error, error) {
			l := c.FairLock(name)
			return func() error { return l.Unlock(ctx) }, l.Lock(ctx)
		}},
		{"read", func(c *relock.Client, ctx context.Context, name string) (func() error, error) {
			l := c.ReadWriteLock(name).ReadLock()
			return func() error { return l.Unlock(ctx) }, l.Lock(ctx)
		}},
		{"write", func(c *relock.Client, ctx context.Context, name string) (func() error, error) {
			l := c.ReadWriteLock(name).WriteLock()
			return func() error { return l.Unlock(ctx) }, l.Lock(ctx)
		}},
		{"permit", func(c *relock.Client, ctx context.Context, name string) (func() error, error) {
			s := c.PermitSemaphore(name)
			if _, err := s.TrySetPermits(ctx, 1); err != nil {
				return nil, err
			}
			p, err := s.Acquire(ctx)
			if err != nil {
				return nil, err
			}
			return func() error { return p.Release(ctx) }, nil
		}},
	} {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			c := newClient(t, srv, nil)
			rdb := rawClient(t, srv)
			ctx := ctxTimeout(t, 60*time.Second)
			base := trackingKeys(t, rdb)
			var wg sync.WaitGroup
			for i := range names {
				wg.Add(1)
				go func() {
					defer wg.Done()
					own := relock.WithOwner(ctx, fmt.Sprint("o", i))
					release, err := kind.hold(c, own, fmt.Sprintf("%s-%d", kind.name, i))
					if err != nil {
						t.Error(err)
						return
					}
					time.Sleep(20 * time.Millisecond) // past the watch's first read (5 ms)
					if err := release(); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			var left int
			for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				if left = trackingKeys(t, rdb) - base; left <= 2 {
					return
				}
			}
			t.Fatalf("%d of %d names released left an entry in Redis's tracking table", left, names)
		})
	}
}

// A hold whose lease runs out leaves no entry in Redis's tracking table either: when the key expires, the
// watch does not read it again (the watchdog ends the hold).
func TestWatchLeavesNoTrackingEntriesOfExpiredLeases(t *testing.T) {
	t.Parallel()
	watchedHoldsEnd(t, "leased-", "whose lease ran out", func(l *relock.RLock, own context.Context) error {
		return l.LockWithLease(own, 300*time.Millisecond)
	}, nil)
}

// A hold lost by a DEL behind its holder's back leaves no entry in Redis's tracking table: the watch reads
// the deleted key again on its invalidation, untracked, and tracks only a key it found there. (Before,
// every such name left one until it was written again.)
func TestWatchLeavesNoTrackingEntriesOfDeletedHolds(t *testing.T) {
	t.Parallel()
	watchedHoldsEnd(t, "deleted-", "deleted behind their holders' backs", func(l *relock.RLock, own context.Context) error {
		return l.Lock(own)
	}, func(rdb rueidis.Client, name string) { do(t, rdb, "DEL", name) })
}

// watchedHoldsEnd takes 100 locks named prefix and a number with lock, waits until the watch has read
// them, ends each with end (nil: they end by themselves), waits for their hold contexts to end, and fails t
// unless Redis's tracking table is back to what it was (within 2).
func watchedHoldsEnd(t *testing.T, prefix, how string, lock func(*relock.RLock, context.Context) error, end func(rdb rueidis.Client, name string)) {
	const names = 100
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 60*time.Second)
	base := trackingKeys(t, rdb)
	holds := make([]context.Context, names)
	for i := range names {
		l := c.Lock(fmt.Sprint(prefix, i))
		own := relock.WithOwner(ctx, "o")
		if err := lock(l, own); err != nil {
			t.Fatal(err)
		}
		hctx, err := l.HoldContext(own)
		if err != nil {
			t.Fatal(err)
		}
		holds[i] = hctx
	}
	time.Sleep(100 * time.Millisecond) // past the watch's first read (5 ms)
	if n := trackingKeys(t, rdb) - base; n < names {
		t.Fatalf("%d of %d held names are tracked: the watch did not read them", n, names)
	}
	if end != nil {
		for i := range names {
			end(rdb, fmt.Sprint(prefix, i))
		}
	}
	for i, h := range holds {
		select {
		case <-h.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("hold %d did not end", i)
		}
	}
	var left int
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if left = trackingKeys(t, rdb) - base; left <= 2 {
			return
		}
	}
	t.Fatalf("%d of %d names %s left an entry in Redis's tracking table", left, names, how)
}

// A hold whose key changes all the time (its owner reenters and leaves it in a loop, so that the watch's
// transactions are voided again and again) is still read, and tracked in the end: its loss is seen long
// before the watchdog's check, and, with churn on many other names, no name is left in the tracking table.
func TestWatchKeepsUpWithAKeyThatKeepsChanging(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 60*time.Second)
	base := trackingKeys(t, rdb)
	own := relock.WithOwner(ctx, "hot")
	l := c.Lock("hot")
	if err := l.Lock(own); err != nil {
		t.Fatal(err)
	}
	held, err := l.HoldContext(own)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // reentries: each changes the key
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if l.Lock(own) != nil || l.Unlock(own) != nil {
				return // the hold is lost
			}
		}
	}()
	for i := range 8 { // churn on other names
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := relock.WithOwner(ctx, fmt.Sprint("o", i))
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				m := c.Lock(fmt.Sprintf("churn-%d-%d", i, n))
				if err := m.Lock(o); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(6 * time.Millisecond)
				if err := m.Unlock(o); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	do(t, rdb, "DEL", "hot")
	select {
	case <-held.Done():
		t.Logf("the loss of a hold whose key kept changing was seen after %v", time.Since(start))
	case <-time.After(3 * time.Second):
		t.Fatal("the loss of a hold whose key kept changing was not seen within 3 s (the watchdog's check is 10 s later)")
	}
	close(stop)
	wg.Wait()
	var left int
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if left = trackingKeys(t, rdb) - base; left <= 1 {
			return
		}
	}
	t.Fatalf("%d names left in Redis's tracking table", left)
}
