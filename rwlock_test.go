package relock_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

func TestReadWriteInvariant(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clients := []*relock.Client{newClient(t, srv, nil), newClient(t, srv, nil)}
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 60*time.Second)
	var readers, writers, maxReaders atomic.Int32
	var wg sync.WaitGroup
	for _, c := range clients {
		rw := c.ReadWriteLock("rw")
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 40 {
					if (g+i)%4 == 0 { // a quarter of the sections write
						l := rw.WriteLock()
						if err := l.Lock(ctx); err != nil {
							t.Error(err)
							return
						}
						if writers.Add(1) != 1 || readers.Load() != 0 {
							t.Error("a writer overlaps another holder")
						}
						time.Sleep(200 * time.Microsecond)
						writers.Add(-1)
						if err := l.Unlock(ctx); err != nil {
							t.Error(err)
							return
						}
						continue
					}
					l := rw.ReadLock()
					if err := l.Lock(ctx); err != nil {
						t.Error(err)
						return
					}
					n := readers.Add(1)
					if writers.Load() != 0 {
						t.Error("a reader overlaps a writer")
					}
					for m := maxReaders.Load(); n > m && !maxReaders.CompareAndSwap(m, n); m = maxReaders.Load() {
					}
					time.Sleep(500 * time.Microsecond)
					readers.Add(-1)
					if err := l.Unlock(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if maxReaders.Load() < 2 {
		t.Errorf("readers never shared the lock (at most %d at once)", maxReaders.Load())
	}
	if keys, _ := do(t, rdb, "KEYS", "*").AsStrSlice(); len(keys) != 0 {
		t.Fatalf("keys left: %v", keys)
	}
}

func TestManyReadersOutliveWatchdogPeriods(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clients := []*relock.Client{newClient(t, srv, fastWatchdog), newClient(t, srv, fastWatchdog)}
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 30*time.Second)
	const n = 50
	var wg sync.WaitGroup
	holding, release := make(chan struct{}, n), make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := clients[i%2].ReadWriteLock("rw").ReadLock()
			if err := l.Lock(ctx); err != nil {
				t.Error(err)
				return
			}
			held, err := l.HoldContext(ctx)
			if err != nil {
				t.Error(err)
			}
			holding <- struct{}{}
			<-release
			if held.Err() != nil {
				t.Errorf("a reader's hold ended while held: %v", context.Cause(held))
			}
			if err := l.Unlock(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	for range n {
		<-holding
	}
	time.Sleep(3 * time.Second) // three watchdog timeouts
	fields, _ := do(t, rdb, "HLEN", "rw").AsInt64()
	if fields != n+1 {
		t.Fatalf("HLEN = %d after 3 s; want %d readers and the mode", fields, n)
	}
	close(release)
	wg.Wait()
	if keys, _ := do(t, rdb, "KEYS", "*").AsStrSlice(); len(keys) != 0 {
		t.Fatalf("keys left after every reader unlocked: %v", keys)
	}
}

func TestWriteUnlockWakesBlockedReaders(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 30*time.Second)
	w := a.ReadWriteLock("rw").WriteLock()
	if err := w.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 20
	var wg sync.WaitGroup
	acquired := make(chan time.Time, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := []*relock.Client{a, b}[i%2].ReadWriteLock("rw").ReadLock()
			if err := l.Lock(ctx); err != nil {
				t.Error(err)
				return
			}
			acquired <- time.Now()
			time.Sleep(50 * time.Millisecond)
			_ = l.Unlock(ctx)
		}()
	}
	eventually(t, 5*time.Second, "the readers subscribe", func() bool { return numsub(t, rdb, "redisson_rwlock:{rw}") == 2 })
	time.Sleep(100 * time.Millisecond)
	released := time.Now()
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(acquired)
	got := 0
	for at := range acquired {
		got++
		if d := at.Sub(released); d > time.Second {
			t.Errorf("a reader got the lock %v after the write unlock", d)
		}
	}
	if got != n {
		t.Fatalf("%d of %d readers got the lock", got, n)
	}
}

func TestDeadReaderStopsBlockingWriter(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	dead, err := relock.New([]string{srv.Addr()}, fastWatchdog)
	if err != nil {
		t.Fatal(err)
	}
	alive, writer := newClient(t, srv, fastWatchdog), newClient(t, srv, fastWatchdog)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 30*time.Second)
	if err := dead.ReadWriteLock("rw").ReadLock().Lock(ctx); err != nil {
		t.Fatal(err)
	}
	liveCtx := relock.WithOwner(ctx, "live-reader")
	if err := alive.ReadWriteLock("rw").ReadLock().Lock(liveCtx); err != nil {
		t.Fatal(err)
	}
	relock.Abandon(dead) // its reader is never released and no longer renewed
	got := make(chan time.Time, 1)
	go func() {
		if err := writer.ReadWriteLock("rw").WriteLock().Lock(ctx); err != nil {
			t.Error(err)
			return
		}
		got <- time.Now()
		_ = writer.ReadWriteLock("rw").WriteLock().Unlock(ctx)
	}()
	// The live reader keeps the lock for three watchdog timeouts; the dead one's hold expires meanwhile.
	time.Sleep(3 * time.Second)
	select {
	case <-got:
		t.Fatal("the writer got the lock while a live reader held it")
	default:
	}
	keys, _ := do(t, rdb, "KEYS", "{rw}:"+dead.ID()+":*").AsStrSlice()
	if len(keys) != 0 {
		t.Fatalf("the dead reader's hold was kept alive: %v", keys)
	}
	released := time.Now()
	if err := alive.ReadWriteLock("rw").ReadLock().Unlock(liveCtx); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-got:
		if d := at.Sub(released); d > 500*time.Millisecond {
			t.Fatalf("the writer got the lock %v after the last live reader left", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a dead reader still blocks the writer")
	}
}

func TestDowngradeAndUpgrade(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	rw := a.ReadWriteLock("rw")
	if err := rw.WriteLock().Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rw.ReadLock().Lock(ctx); err != nil {
		t.Fatalf("the writer cannot take the read lock: %v", err)
	}
	other := b.ReadWriteLock("rw")
	if ok, err := other.ReadLock().TryLock(ctx, 0, 0); ok || err != nil {
		t.Fatalf("another reader entered beside a writer: %v, %v", ok, err)
	}
	if err := rw.WriteLock().Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if held, err := rw.ReadLock().IsHeld(ctx); !held || err != nil {
		t.Fatalf("after the downgrade the owner no longer reads: %v, %v", held, err)
	}
	if locked, _ := rw.ReadLock().IsLocked(ctx); !locked {
		t.Fatal("the lock is not in read mode after the downgrade")
	}
	if ok, err := other.ReadLock().TryLock(ctx, 0, 0); !ok || err != nil {
		t.Fatalf("another reader cannot enter after the downgrade: %v, %v", ok, err)
	}
	if ok, err := other.WriteLock().TryLock(relock.WithOwner(ctx, "writer"), 50*time.Millisecond, 0); ok || err != nil {
		t.Fatalf("a writer entered beside readers: %v, %v", ok, err)
	}

	// Read, then write: would wait for itself; fails at once.
	start := time.Now()
	err := rw.WriteLock().Lock(ctx)
	if !errors.Is(err, relock.ErrUpgrade) {
		t.Fatalf("write lock while holding the read lock = %v, want ErrUpgrade", err)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("ErrUpgrade came after %v", d)
	}
	if _, err := rw.WriteLock().TryLock(ctx, time.Second, 0); !errors.Is(err, relock.ErrUpgrade) {
		t.Fatalf("TryLock write while reading = %v, want ErrUpgrade", err)
	}
	_ = rw.ReadLock().Unlock(ctx)
	_ = other.ReadLock().Unlock(ctx)
	if ok, err := other.WriteLock().TryLock(relock.WithOwner(ctx, "writer"), time.Second, 0); !ok || err != nil {
		t.Fatalf("the writer cannot enter once the readers left: %v, %v", ok, err)
	}
}

// A read hold the writer takes under its own write lock (a downgrade not yet made) never makes the write
// lock outlive its lease: other readers get in when the write lease ends, and the writer's read hold, which
// lived within the write hold, ends with it: its owner is told as the write hold's lease ends, not when
// Redis happens to drop the key (Redis's active expiry is off here: nothing but an access would). Before,
// the read hold's lease or renewals kept the lock in write mode: a waiting reader slept for as long as the
// writer read.
func TestReadUnderTheWriteLockEndsWithTheWriteLease(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	if err := do(t, rdb, "DEBUG", "SET-ACTIVE-EXPIRE", "0").Error(); err != nil {
		t.Fatal(err)
	}
	for _, readLease := range []time.Duration{0, 10 * time.Second} { // renewed by the watchdog; a long lease
		t.Run("readLease="+readLease.String(), func(t *testing.T) {
			name := "rw-downgrade-lease-" + readLease.String()
			rw := a.ReadWriteLock(name)
			if err := rw.WriteLock().LockWithLease(ctx, 300*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			lock := rw.ReadLock().Lock
			if readLease > 0 {
				lock = func(ctx context.Context) error { return rw.ReadLock().LockWithLease(ctx, readLease) }
			}
			if err := lock(ctx); err != nil {
				t.Fatal(err)
			}
			writeHold, err := rw.WriteLock().HoldContext(ctx)
			if err != nil {
				t.Fatal(err)
			}
			readHold, err := rw.ReadLock().HoldContext(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if pttl, _ := do(t, rdb, "PTTL", name).AsInt64(); pttl > 300 {
				t.Fatalf("the read hold under the write lock gave the lock %d ms to live, past the write lease", pttl)
			}
			select {
			case <-writeHold.Done():
			case <-time.After(2 * time.Second):
				t.Fatal("the write lease did not end")
			}
			select {
			case <-readHold.Done():
			case <-time.After(100 * time.Millisecond):
				t.Fatal("the writer was not told that its read hold ended with its write hold")
			}
			if cause := context.Cause(readHold); !errors.Is(cause, relock.ErrLockLost) {
				t.Fatalf("the read hold ended with %v, want ErrLockLost", cause)
			}
			if ok, err := b.ReadWriteLock(name).ReadLock().TryLock(ctx, 2*time.Second, 0); !ok || err != nil {
				t.Fatalf("a reader waiting for the write lease's end got %v, %v", ok, err)
			}
			if err := rw.WriteLock().Unlock(ctx); !errors.Is(err, relock.ErrNotHeld) {
				t.Fatalf("write unlock after its lease = %v, want ErrNotHeld", err)
			}
			if err := b.ReadWriteLock(name).ReadLock().Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A downgrade made before the write lease ends keeps the read hold for its own lease: the lock then lives
// by the read hold, readers may enter, writers wait for it.
func TestDowngradeKeepsTheReadLease(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	rw := a.ReadWriteLock("rw")
	if err := rw.WriteLock().LockWithLease(ctx, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := rw.ReadLock().LockWithLease(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := rw.WriteLock().Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if pttl, _ := do(t, rdb, "PTTL", "rw").AsInt64(); pttl < 4000 {
		t.Fatalf("after the downgrade the lock lives %d ms, want its read hold's 5 s", pttl)
	}
	time.Sleep(500 * time.Millisecond) // past the write lease
	if held, err := rw.ReadLock().IsHeld(ctx); !held || err != nil {
		t.Fatalf("the downgraded read hold ended with the write lease: %v, %v", held, err)
	}
	other := b.ReadWriteLock("rw")
	if ok, err := other.ReadLock().TryLock(ctx, 0, 0); !ok || err != nil {
		t.Fatalf("another reader cannot enter after the downgrade: %v, %v", ok, err)
	}
	if err := other.ReadLock().Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := other.WriteLock().TryLock(ctx, 100*time.Millisecond, 0); ok || err != nil {
		t.Fatalf("a writer entered beside the downgraded reader: %v, %v", ok, err)
	}
	if err := rw.ReadLock().Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := do(t, rdb, "EXISTS", "rw").AsInt64(); n != 0 {
		t.Fatal("the lock is left after its last reader's release")
	}
}

func TestWriterPriorityHoldsBackNewReaders(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	readers, writerClient := newClient(t, srv, nil), newClient(t, srv, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	for _, priority := range []bool{false, true} {
		t.Run("priority="+strconv.FormatBool(priority), func(t *testing.T) {
			name := "rw-priority-" + strconv.FormatBool(priority)
			wait := writerWaitUnderReaderStream(t, ctx, readers, writerClient, name, priority, 2*time.Second)
			if priority && wait > time.Second {
				t.Fatalf("with writer priority the writer waited %v under a reader stream", wait)
			}
			if !priority && wait < 2*time.Second {
				t.Logf("without priority the writer got in after %v (overlapping readers may starve it)", wait)
			}
		})
	}
}

// writerWaitUnderReaderStream keeps 8 readers taking the lock in staggered 20 ms holds, then measures
// how long a writer waits for it, giving up at limit.
func writerWaitUnderReaderStream(t testing.TB, ctx context.Context, readers, writer *relock.Client, name string, priority bool, limit time.Duration) time.Duration {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := readers.ReadWriteLock(name).ReadLock()
			time.Sleep(time.Duration(i) * 20 * time.Millisecond / 8) // staggered: some reader always holds
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := l.Lock(ctx); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(20 * time.Millisecond)
				_ = l.Unlock(ctx)
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	time.Sleep(100 * time.Millisecond)
	var opts []relock.LockOption
	if priority {
		opts = append(opts, relock.WithWriterPriority())
	}
	w := writer.ReadWriteLock(name, opts...).WriteLock()
	start := time.Now()
	ok, err := w.TryLock(ctx, limit, 0)
	if err != nil {
		t.Fatal(err)
	}
	wait := time.Since(start)
	if ok {
		_ = w.Unlock(ctx)
	}
	return wait
}

func TestLastLiveReaderDeletesLockDespiteDeadReaders(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	dead, err := relock.New([]string{srv.Addr()}, fastWatchdog)
	if err != nil {
		t.Fatal(err)
	}
	alive := newClient(t, srv, fastWatchdog)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 30*time.Second)
	if err := dead.ReadWriteLock("rw").ReadLock().Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := alive.ReadWriteLock("rw").ReadLock().Lock(ctx); err != nil {
		t.Fatal(err)
	}
	relock.Abandon(dead)
	time.Sleep(1500 * time.Millisecond) // the dead reader's hold expires; the live one is renewed
	if n, _ := do(t, rdb, "HLEN", "rw").AsInt64(); n != 3 {
		t.Fatalf("HLEN = %d; want the mode and both readers' fields", n)
	}
	if err := alive.ReadWriteLock("rw").ReadLock().Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// The last live reader's release sees the dead reader's field has no live hold: the lock is free now,
	// not when its hash would expire.
	if keys, _ := do(t, rdb, "KEYS", "*").AsStrSlice(); len(keys) != 0 {
		t.Fatalf("keys left after the last live reader left: %v", keys)
	}
}

// A reader whose leased hold ran out while another reader kept the lock's hash holds nothing: its next
// read acquisition is a first hold (count 1), and one Unlock releases it, ending its HoldContext. Before,
// the expired level's count stayed in the hash: the new hold counted 2, the Unlock left a read hold
// nobody knew of, and the HoldContext lived on (safety/explore found it: "ReadLock.Unlock returned nil,
// and its HoldContext still lives").
func TestReadHoldAfterItsLeaseRanOutBesideAnotherReader(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := rawClient(t, srv)
	c := newClient(t, srv, nil)
	ctx := relock.WithOwner(ctxTimeout(t, 30*time.Second), "expired")
	other := relock.WithOwner(ctx, "other")
	r := c.ReadWriteLock("leased-reader").ReadLock()
	if err := r.LockWithLease(ctx, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := r.Lock(other); err != nil { // keeps the hash alive
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if err := r.Unlock(ctx); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("Unlock after the lease ran out: %v, want ErrNotHeld", err)
	}
	if err := r.LockWithLease(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n, err := r.HoldCount(ctx); n != 1 || err != nil {
		t.Fatalf("HoldCount = %d, %v; want 1", n, err)
	}
	held, err := r.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("the HoldContext lives on after the owner's only Unlock")
	}
	if n, _ := do(t, rdb, "HEXISTS", "leased-reader", c.ID()+":expired").AsInt64(); n != 0 {
		t.Fatalf("the reader's field is still in the hash: %v", do(t, rdb, "HGETALL", "leased-reader"))
	}
	if err := r.Unlock(other); err != nil {
		t.Fatal(err)
	}
}

// A writer waits for the readers that still hold the lock, not for the hash's time to live: a reader
// whose lease runs out frees the lock for a waiting writer then, though an earlier reader's watchdog gave
// the hash a longer life (30 s here). (The explorer found the writer asleep past the last reader.)
func TestWriterWaitsForLiveReadersOnly(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, other := newClient(t, srv, nil), newClient(t, srv, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	rw := c.ReadWriteLock("live-readers")
	a, b := relock.WithOwner(ctx, "a"), relock.WithOwner(ctx, "b")
	if err := rw.ReadLock().Lock(a); err != nil { // the watchdog's hold: the hash lives 30 s
		t.Fatal(err)
	}
	if err := rw.ReadLock().LockWithLease(b, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := rw.ReadLock().Unlock(a); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := other.ReadWriteLock("live-readers").WriteLock().Lock(wctx); err != nil {
		t.Fatalf("the writer, 5 s after the last reader's 300 ms lease: %v", err)
	}
	t.Logf("the writer got the lock after %v", time.Since(start))
}

// The read levels of one owner are alike: two goroutines sharing a WithOwner token each hold one, with
// leases of their own. When the shorter lease has run out, its goroutine's Unlock takes one level off:
// the level left must be the live one, whose HoldContext lives on, and which keeps writers out until its
// lease ends. (A release once deleted the top level, the live one, leaving a hold its Client believed in
// with no live level: a writer got in.)
func TestReadLevelReleasedAfterItsLeaseLeavesTheLiveOne(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, other := newClient(t, srv, nil), newClient(t, srv, nil)
	ctx := relock.WithOwner(ctxTimeout(t, 30*time.Second), "shared")
	read := c.ReadWriteLock("rw-levels").ReadLock()
	if ok, err := read.TryLock(ctx, 0, 300*time.Millisecond); !ok || err != nil {
		t.Fatalf("first level: %v, %v", ok, err)
	}
	if ok, err := read.TryLock(ctx, 0, 5*time.Second); !ok || err != nil { // the other goroutine's level
		t.Fatalf("second level: %v, %v", ok, err)
	}
	hold, err := read.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the first level's lease has run out
	if err := read.Unlock(ctx); err != nil && !errors.Is(err, relock.ErrNotHeld) {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if hold.Err() != nil {
		t.Fatalf("the live level's HoldContext ended: %v", context.Cause(hold))
	}
	if ok, err := other.ReadWriteLock("rw-levels").WriteLock().TryLock(ctx, 0, 0); ok || err != nil {
		t.Fatalf("a writer's TryLock while a read level lives = %v, %v; want false", ok, err)
	}
	if err := read.Unlock(ctx); err != nil {
		t.Fatalf("the live level's Unlock: %v", err)
	}
	if ok, err := other.ReadWriteLock("rw-levels").WriteLock().TryLock(ctx, 0, 0); !ok || err != nil {
		t.Fatalf("a writer's TryLock once the reader left = %v, %v; want true", ok, err)
	}
}

// A reader's release that leaves it holding records the request (for a repeat of it); once the reader
// holds nothing (here its last level's lease ran out while another reader kept the lock), its next
// release, answered ErrNotHeld, takes that record out: nothing of the owner outlives its hold. (The
// explorer found it so: a hold given up at its budget's end, by releases that met its levels expired,
// left its record after the Client closed.) Its field stays in the lock, holding nothing, as an expired
// permit's entry does: a release by an owner that holds nothing changes nothing of the lock (see
// TestExpiredReaderHoldsNothing); the lock's next writer, or its expiry, drops it.
func TestReadReleaseOfAnOwnerHoldingNothingLeavesNoRecord(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	rw := c.ReadWriteLock("rw-record")
	a, b := relock.WithOwner(ctx, "a"), relock.WithOwner(ctx, "b")
	if err := rw.ReadLock().Lock(b); err != nil { // keeps the lock while a's levels expire
		t.Fatal(err)
	}
	for range 2 {
		if err := rw.ReadLock().LockWithLease(a, 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if err := rw.ReadLock().Unlock(a); err != nil {
		t.Fatal(err)
	}
	const record = "relock_rwlock_release:{rw-record}"
	field := c.ID() + ":a"
	if n, _ := do(t, rdb, "HEXISTS", record, field).AsInt64(); n != 1 {
		t.Fatalf("no release record of a's release that left it holding (HEXISTS %d): the test shows nothing", n)
	}
	time.Sleep(500 * time.Millisecond) // a's last level expires
	if err := rw.ReadLock().Unlock(a); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("Unlock of a reader whose lease ran out: %v, want ErrNotHeld", err)
	}
	if n, _ := do(t, rdb, "HEXISTS", record, field).AsInt64(); n != 0 {
		ttl, _ := do(t, rdb, "PTTL", record).AsInt64()
		t.Fatalf("a's release record is left (for %d ms more) after a released with nothing held", ttl)
	}
	if err := rw.ReadLock().Unlock(b); err != nil {
		t.Fatal(err)
	}
}
