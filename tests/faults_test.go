package tests

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/relock-go/relock"
)

// TestServerFaultsUnderLoad: while Clients contend for a lock, the server is stopped (SIGSTOP) and resumed,
// writes are paused (CLIENT PAUSE), its scripts are flushed (SCRIPT FLUSH: the NOSCRIPT path), and active
// expiry is switched off and on (DEBUG SET-ACTIVE-EXPIRE): no update is lost, no sections overlap, no hold
// is lost (every fault is shorter than the 2 s watchdog timeout).
func TestServerFaultsUnderLoad(t *testing.T) {
	t.Parallel()
	srv := server(t)
	rdb := rawClient(t, srv.Addr())
	opts := &relock.Options{WatchdogTimeout: 2 * time.Second}
	clients := []*relock.Client{newClient(t, []string{srv.Addr()}, opts), newClient(t, []string{srv.Addr()}, opts)}
	s := &summary{scenario: "server-faults"}
	stop := make(chan struct{})
	var faults atomic.Int64
	var injected sync.WaitGroup
	injected.Add(1)
	go func() {
		defer injected.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(150+rand.IntN(200)) * time.Millisecond):
			}
			switch i % 4 {
			case 0:
				_ = srv.Pause()
				time.Sleep(300 * time.Millisecond)
				_ = srv.Resume()
			case 1:
				do(t, rdb, "CLIENT", "PAUSE", "300", "WRITE")
			case 2:
				do(t, rdb, "SCRIPT", "FLUSH")
			case 3:
				do(t, rdb, "DEBUG", "SET-ACTIVE-EXPIRE", strconv.Itoa(i/4%2))
			}
			faults.Add(1)
		}
	}()
	ops, violations := contend(t, clients, srv.Addr(), "faulty", workload(4*time.Second), time.Millisecond)
	close(stop)
	injected.Wait()
	do(t, rdb, "DEBUG", "SET-ACTIVE-EXPIRE", "1")
	s.ops, s.faults, s.violations = ops, faults.Load(), violations
	s.report(t, true)
}

// TestReadWriteUnderFaults: readers and writers on two Clients, through a proxy that adds latency spikes
// and now and then cuts every connection: a writer never overlaps anyone.
func TestReadWriteUnderFaults(t *testing.T) {
	t.Parallel()
	srv := server(t)
	proxy := startProxy(t, srv)
	opts := &relock.Options{WatchdogTimeout: 2 * time.Second}
	clients := []*relock.Client{newClient(t, []string{proxy.Addr}, opts), newClient(t, []string{proxy.Addr}, opts)}
	s := &summary{scenario: "read-write-under-faults"}
	stop := make(chan struct{})
	var faults atomic.Int64
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				proxy.SetLatency(0)
				return
			case <-time.After(time.Duration(100+rand.IntN(200)) * time.Millisecond):
			}
			if i%5 == 4 {
				proxy.Cut()
			} else {
				proxy.SetLatency(time.Duration(rand.IntN(100)) * time.Millisecond)
			}
			faults.Add(1)
		}
	}()
	var readers, writers atomic.Int32
	var ops, violations, errs atomic.Int64
	end := time.Now().Add(workload(4 * time.Second))
	var wg sync.WaitGroup
	for _, c := range clients {
		rw := c.ReadWriteLock("rw")
		for g := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; time.Now().Before(end); i++ {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					write := (g+i)%3 == 0
					var l relock.Locker = rw.ReadLock()
					if write {
						l = rw.WriteLock()
					}
					if err := l.Lock(ctx); err != nil {
						errs.Add(1) // a cut connection fails the call: not a violation
						cancel()
						continue
					}
					if write {
						if writers.Add(1) != 1 || readers.Load() != 0 {
							violations.Add(1)
						}
						time.Sleep(time.Millisecond)
						writers.Add(-1)
					} else {
						readers.Add(1)
						if writers.Load() != 0 {
							violations.Add(1)
						}
						time.Sleep(time.Millisecond)
						readers.Add(-1)
					}
					if l.Unlock(context.WithoutCancel(ctx)) == nil {
						ops.Add(1)
					}
					cancel()
				}
			}()
		}
	}
	wg.Wait()
	close(stop)
	s.ops, s.faults, s.violations = ops.Load(), faults.Load(), violations.Load()
	s.note("%d calls failed on cut connections", errs.Load())
	s.report(t, true)
}

// TestFairOrderUnderLatency: waiters queue on a fair lock in a known order, through a proxy whose latency
// keeps changing; they get the lock in exactly that order.
func TestFairOrderUnderLatency(t *testing.T) {
	t.Parallel()
	srv := server(t)
	rdb := rawClient(t, srv.Addr())
	proxy := startProxy(t, srv)
	clients := []*relock.Client{newClient(t, []string{proxy.Addr}, nil), newClient(t, []string{srv.Addr()}, nil)}
	ctx := ctxTimeout(t, 60*time.Second)
	s := &summary{scenario: "fair-order-under-latency"}
	holder := relock.WithOwner(ctx, "holder")
	if err := clients[1].FairLock("fair").Lock(holder); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var faults atomic.Int64
	var changing sync.WaitGroup
	changing.Add(1)
	go func() {
		defer changing.Done()
		for {
			select {
			case <-stop:
				proxy.SetLatency(0)
				return
			case <-time.After(10 * time.Millisecond):
				proxy.SetLatency(time.Duration(rand.IntN(30)) * time.Millisecond)
				faults.Add(1)
			}
		}
	}()
	var mu sync.Mutex
	var order, want []string
	var wg sync.WaitGroup
	for i := range 12 {
		token := "w" + strconv.Itoa(i)
		want = append(want, token)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[i%2]
			octx := relock.WithOwner(ctx, token)
			if err := c.FairLock("fair").Lock(octx); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, token)
			mu.Unlock()
			_ = c.FairLock("fair").Unlock(octx)
		}()
		for deadline := time.Now().Add(10 * time.Second); ; { // wait until it is queued
			if n, _ := do(t, rdb, "LLEN", "redisson_lock_queue:{fair}").AsInt64(); n == int64(i+1) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("a waiter did not queue")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if err := clients[1].FairLock("fair").Unlock(holder); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(stop)
	changing.Wait()
	s.ops, s.faults = int64(len(order)), faults.Load()
	for i := range want {
		if i >= len(order) || order[i] != want[i] {
			s.violations++
		}
	}
	if s.violations > 0 {
		s.note("order %v", order)
	}
	s.report(t, true)
}

// TestCancelledWaitersLeaveNothing: waiters of every lock type give up at random moments (before their
// first attempt, while subscribing, while waiting, with a bounded wait running out): afterwards no
// subscription, queue entry or goroutine of theirs is left.
func TestCancelledWaitersLeaveNothing(t *testing.T) {
	srv := server(t)
	rdb := rawClient(t, srv.Addr())
	a, b := newClient(t, []string{srv.Addr()}, nil), newClient(t, []string{srv.Addr()}, nil)
	ctx := ctxTimeout(t, 60*time.Second)
	s := &summary{scenario: "cancelled-waiters"}
	// Holders for every type, on a: waiters, on b, never get in.
	holder := relock.WithOwner(ctx, "holder")
	locks := map[string][2]relock.Locker{
		"rlock": {a.Lock("c:r"), b.Lock("c:r")},
		"fair":  {a.FairLock("c:f"), b.FairLock("c:f")},
		"read":  {a.ReadWriteLock("c:rw").WriteLock(), b.ReadWriteLock("c:rw").ReadLock()},
		"write": {a.ReadWriteLock("c:rw2").ReadLock(), b.ReadWriteLock("c:rw2", relock.WithWriterPriority()).WriteLock()},
	}
	for _, pair := range locks {
		if err := pair[0].Lock(holder); err != nil {
			t.Fatal(err)
		}
	}
	// Warm up b's subscription connection and watchdog, which live as long as b, before the goroutine
	// snapshot.
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_ = locks["rlock"][1].Lock(wctx)
	cancel()
	if err := b.Lock("c:warm").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	_ = b.Lock("c:warm").Unlock(ctx)
	time.Sleep(100 * time.Millisecond)
	// The Client's own background work (a waiter that gave up leaves its queue in the background, and
	// again later if an attempt of its may land late) ends by Close, which TestMain checks.
	ignore := []goleak.Option{goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/relock-go/relock.(*Client).goBackground.func1"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*pipe)._backgroundRead"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*pipe)._backgroundWrite"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*pipe)._background")}
	var wg sync.WaitGroup
	rounds := 3 + int(*soak/time.Second)
	for range rounds {
		for name, pair := range locks {
			for i := range 10 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					wctx, cancel := context.WithTimeout(ctx, time.Duration(rand.IntN(30))*time.Millisecond)
					defer cancel()
					got := false
					if i%3 == 0 { // a bounded wait that runs out
						type tryLocker interface {
							TryLock(ctx context.Context, wait, lease time.Duration) (bool, error)
						}
						got, _ = pair[1].(tryLocker).TryLock(relock.WithOwner(ctx, name+strconv.Itoa(i)), time.Duration(rand.IntN(30))*time.Millisecond, 0)
					} else {
						got = pair[1].Lock(relock.WithOwner(wctx, name+strconv.Itoa(i))) == nil
					}
					if got {
						t.Errorf("%s: a waiter got a held lock", name)
					}
				}()
			}
		}
		wg.Wait()
		s.ops += int64(10 * len(locks))
		s.faults += int64(10 * len(locks)) // every waiter gave up
	}
	// Subscriptions end and queue entries go as the waiters leave (in the background).
	var left []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		left = left[:0]
		channels, _ := do(t, rdb, "PUBSUB", "CHANNELS").AsStrSlice()
		left = append(left, channels...)
		for _, k := range []string{"redisson_lock_queue:{c:f}", "redisson_lock_timeout:{c:f}", "relock_lock_alive:{c:f}",
			"relock_rwlock_writers:{c:rw2}"} {
			if n, _ := do(t, rdb, "EXISTS", k).AsInt64(); n != 0 {
				left = append(left, k)
			}
		}
		if len(left) == 0 {
			break
		}
	}
	if len(left) > 0 {
		s.violations += int64(len(left))
		s.note("left behind: %v", left)
	}
	if err := goleak.Find(ignore...); err != nil {
		s.violations++
		s.note("goroutines left: %v", err)
	}
	for _, pair := range locks {
		_ = pair[0].Unlock(holder)
	}
	s.report(t, true)
}
