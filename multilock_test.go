package relock_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

func TestMultiLockExclusive(t *testing.T) {
	t.Parallel()
	servers := redistest.StartN(t, 2)
	a, b := newClient(t, servers[0], nil), newClient(t, servers[1], nil)
	ctx := ctxTimeout(t, 60*time.Second)
	var inside, entries atomic.Int32
	var wg sync.WaitGroup
	for g := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Parts of three kinds, on two servers; every goroutine builds its own MultiLock.
			c := []*relock.Client{a, b}[g%2]
			m := relock.NewMultiLock(c.Lock("m:a"), a.FairLock("m:b"), b.ReadWriteLock("m:c").WriteLock())
			for range 10 {
				if err := m.Lock(ctx); err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					t.Error("two owners hold the MultiLock")
				}
				entries.Add(1)
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if err := m.Unlock(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if entries.Load() != 100 {
		t.Fatalf("%d of 100 sections ran", entries.Load())
	}
	for i, s := range servers {
		if keys, _ := do(t, rawClient(t, s), "KEYS", "*").AsStrSlice(); len(keys) != 0 {
			t.Fatalf("server %d keeps %v", i, keys)
		}
	}
}

func TestOverlappingMultiLocksBothFinish(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	ctx := ctxTimeout(t, 60*time.Second)
	var wg sync.WaitGroup
	var done [2]atomic.Int32
	for i, names := range [][]string{{"x", "y"}, {"y", "z"}, {"z", "x"}} {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m := relock.NewMultiLock(c.Lock(names[0]), c.Lock(names[1]))
				for range 20 {
					if err := m.Lock(ctx); err != nil {
						t.Error(err)
						return
					}
					time.Sleep(200 * time.Microsecond)
					if err := m.Unlock(ctx); err != nil {
						t.Error(err)
						return
					}
				}
				done[min(i, 1)].Add(1)
			}()
		}
	}
	wg.Wait() // a deadlock would end the test at its deadline
	if done[0].Load()+done[1].Load() != 6 {
		t.Fatalf("%d of 6 goroutines finished", done[0].Load()+done[1].Load())
	}
}

func TestMultiLockAllOrNothingAndLeases(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	if err := b.Lock("p2").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	m := relock.NewMultiLock(a.Lock("p1"), a.Lock("p2"), a.Lock("p3"))
	start := time.Now()
	if ok, err := m.TryLock(ctx, 200*time.Millisecond, 0); ok || err != nil {
		t.Fatalf("TryLock with one part held elsewhere = %v, %v", ok, err)
	}
	if d := time.Since(start); d < 190*time.Millisecond || d > 700*time.Millisecond {
		t.Fatalf("TryLock(200ms) returned after %v", d)
	}
	if n, _ := do(t, rdb, "EXISTS", "p1", "p3").AsInt64(); n != 0 {
		t.Fatal("a failed MultiLock kept the parts it got")
	}
	if err := b.Lock("p2").Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// A lease applies to every part as asked.
	if err := m.LockWithLease(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"p1", "p2", "p3"} {
		if ttl, _ := do(t, rdb, "PTTL", k).AsInt64(); ttl <= 0 || ttl > 2000 {
			t.Fatalf("%s: PTTL %d ms under a 2 s lease", k, ttl)
		}
	}
	held, err := m.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	do(t, rdb, "DEL", "p3") // one part lost: the whole hold is
	if err := m.Unlock(ctx); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("Unlock with one part gone = %v, want it to report ErrNotHeld", err)
	}
	select { // the parts' contexts end at once; the MultiLock's follows them (context.AfterFunc)
	case <-held.Done():
	case <-time.After(time.Second):
		t.Fatal("the MultiLock's hold context outlived its parts")
	}
	if err := m.Unlock(ctx); err == nil {
		t.Fatal("Unlock of a released MultiLock returned nil")
	}
}
