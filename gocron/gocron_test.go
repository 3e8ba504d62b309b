package relockgocron_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"go.uber.org/goleak"

	"github.com/relock-go/relock"
	relockgocron "github.com/relock-go/relock/gocron"
	"github.com/relock-go/relock/internal/redistest"
)

// redisAddr is the address of a redis-server the tests start, for the examples.
var redisAddr string

func TestMain(m *testing.M) {
	if replicaMain() {
		return
	}
	redistest.AdoptOrphans()
	srv, err := redistest.StartServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	redisAddr = srv.Addr()
	code := m.Run()
	if err := srv.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(redistest.CheckProcesses(code, 5*time.Second))
}

func newClient(t *testing.T, addr string, opts *relock.Options) *relock.Client {
	t.Helper()
	c, err := relock.New([]string{addr}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newLocker(t *testing.T, c *relock.Client, minHold time.Duration) *relockgocron.Locker {
	t.Helper()
	l, err := relockgocron.NewLocker(c, &relockgocron.LockerOptions{MinHold: minHold})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// A run's lock is held while it runs, and at least MinHold after it was taken: a replica that asks
// within MinHold, even after the run ended, is refused; once MinHold has passed, it gets the lock.
func TestLockerKeepsTheLockMinHold(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newLocker(t, newClient(t, srv.Addr(), nil), 600*time.Millisecond), newLocker(t, newClient(t, srv.Addr(), nil), 0)
	ctx := ctxTimeout(t, 10*time.Second)
	start := time.Now()
	lock, err := a.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Lock(ctx, "job"); !errors.Is(err, relockgocron.ErrLocked) {
		t.Fatalf("Lock while a run holds the lock: %v, want ErrLocked", err)
	}
	if err := lock.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Lock(ctx, "job"); !errors.Is(err, relockgocron.ErrLocked) || time.Since(start) >= 600*time.Millisecond {
		t.Fatalf("Lock after the run ended, within MinHold (%v after it was taken): %v, want ErrLocked", time.Since(start), err)
	}
	var got error = relockgocron.ErrLocked
	for errors.Is(got, relockgocron.ErrLocked) && time.Since(start) < 3*time.Second {
		time.Sleep(20 * time.Millisecond)
		var l gocron.Lock
		if l, got = b.Lock(ctx, "job"); got == nil {
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got != nil {
		t.Fatalf("Lock after MinHold: %v", got)
	}
	if since := time.Since(start); since < 600*time.Millisecond || since > 1500*time.Millisecond {
		t.Fatalf("the lock was free %v after it was taken, want MinHold (600ms) to about 1s", since)
	}
}

// Two runs of one job on one replica exclude each other, as runs on two replicas do; Release gives up the
// locks kept for MinHold at once.
func TestLockerRunsOfOneReplicaExcludeEachOther(t *testing.T) {
	srv := redistest.Start(t)
	l := newLocker(t, newClient(t, srv.Addr(), nil), time.Hour)
	ctx := ctxTimeout(t, 10*time.Second)
	lock, err := l.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Lock(ctx, "job"); !errors.Is(err, relockgocron.ErrLocked) {
		t.Fatalf("a second run's Lock on the same replica: %v, want ErrLocked", err)
	}
	if err := lock.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Lock(ctx, "job"); !errors.Is(err, relockgocron.ErrLocked) {
		t.Fatalf("Lock within MinHold: %v, want ErrLocked", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lock, err = l.Lock(ctx, "job")
	if err != nil {
		t.Fatalf("Lock after Release: %v", err)
	}
	if err := lock.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestNewLockerAndElectorRefuseBadInput(t *testing.T) {
	if _, err := relockgocron.NewLocker(nil, nil); !errors.Is(err, relock.ErrNilClient) {
		t.Fatalf("NewLocker(nil): %v", err)
	}
	if _, err := relockgocron.NewElector(nil, "e", "v"); !errors.Is(err, relock.ErrNilClient) {
		t.Fatalf("NewElector(nil): %v", err)
	}
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), nil)
	if _, err := relockgocron.NewLocker(c, &relockgocron.LockerOptions{MinHold: -time.Second}); !errors.Is(err, relock.ErrInvalidDuration) {
		t.Fatalf("NewLocker with a negative MinHold: %v", err)
	}
}

// late delays a Locker's Lock calls: a replica whose clock, or scheduler, is behind the others'.
type late struct {
	gocron.Locker
	by time.Duration
}

func (l late) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	time.Sleep(l.by)
	return l.Locker.Lock(ctx, key)
}

// runs records, per tick (the second a run began in), which replicas ran it.
type runs struct {
	mu     sync.Mutex
	ticks  map[int64][]int
	inside atomic.Int32
	most   atomic.Int32 // the most runs ever inside the job at once, over all replicas
}

func (r *runs) job(replica int, d time.Duration) func() {
	return func() {
		n := r.inside.Add(1)
		defer r.inside.Add(-1)
		for {
			m := r.most.Load()
			if n <= m || r.most.CompareAndSwap(m, n) {
				break
			}
		}
		tick := time.Now().Unix()
		r.mu.Lock()
		r.ticks[tick] = append(r.ticks[tick], replica)
		r.mu.Unlock()
		time.Sleep(d)
	}
}

// schedule runs, on each of the lockers (a replica each), a job named "tick" every second for d, taking
// run d each, and returns what ran.
func schedule(t *testing.T, lockers []gocron.Locker, job, d time.Duration) *runs {
	t.Helper()
	r := &runs{ticks: make(map[int64][]int)}
	var ss []gocron.Scheduler
	for i, l := range lockers {
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(l))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.NewJob(gocron.CronJob("* * * * * *", true), gocron.NewTask(r.job(i, job)), gocron.WithName("tick")); err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s)
	}
	for _, s := range ss {
		s.Start()
	}
	time.Sleep(d)
	for _, s := range ss {
		if err := s.Shutdown(); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// Three replicas tick every second, one of them 150 ms late. Each tick runs once, on one replica, when
// the lock is kept MinHold (here half the interval); released when the run ends (MinHold 0), the late
// replica runs the ticks again: the weaker promise gocron's Locker contract makes, which MinHold fixes.
func TestLockerRunsEachTickOnce(t *testing.T) {
	srv := redistest.Start(t)
	for _, minHold := range []time.Duration{500 * time.Millisecond, 0} {
		t.Run(fmt.Sprint("MinHold=", minHold), func(t *testing.T) {
			var lockers []gocron.Locker
			for i := range 3 {
				l := gocron.Locker(newLocker(t, newClient(t, srv.Addr(), nil), minHold))
				if i == 2 {
					l = late{l, 150 * time.Millisecond}
				}
				lockers = append(lockers, l)
			}
			r := schedule(t, lockers, time.Millisecond, 4500*time.Millisecond)
			twice := 0
			for tick, by := range r.ticks {
				if len(by) > 1 {
					twice++
					if minHold > 0 {
						t.Errorf("tick %d ran %d times, by replicas %v", tick, len(by), by)
					}
				}
			}
			if len(r.ticks) < 3 {
				t.Fatalf("%d ticks ran in 4.5 s, want at least 3: %v", len(r.ticks), r.ticks)
			}
			if minHold == 0 && twice == 0 {
				t.Fatalf("without MinHold, the late replica ran no tick again (%v): the test shows nothing", r.ticks)
			}
		})
	}
}

// A run that outlasts its interval (2.2 s, ticking every second) is not started again, on any replica,
// before it ended; the first tick after it runs.
func TestLockerRunOutlastingItsTickIsNotRunTwiceAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	var lockers []gocron.Locker
	for range 3 {
		lockers = append(lockers, newLocker(t, newClient(t, srv.Addr(), nil), 500*time.Millisecond))
	}
	r := schedule(t, lockers, 2200*time.Millisecond, 5500*time.Millisecond)
	if most := r.most.Load(); most != 1 {
		t.Fatalf("%d runs at once", most)
	}
	if len(r.ticks) < 2 {
		t.Fatalf("%d runs in 5.5 s of a 2.2 s job ticking every second, want 2: %v", len(r.ticks), r.ticks)
	}
}

// Of two Electors, one leads; closed, it resigns, and the other leads at once. An Elector whose Client is
// closed stops campaigning, and IsLeader says why.
func TestElectorHandsOverOnClose(t *testing.T) {
	srv := redistest.Start(t)
	ctx := ctxTimeout(t, 20*time.Second)
	ca, cb := newClient(t, srv.Addr(), nil), newClient(t, srv.Addr(), nil)
	a, err := relockgocron.NewElector(ca, "e", "a")
	if err != nil {
		t.Fatal(err)
	}
	leads := func(e *relockgocron.Elector) bool { return e.IsLeader(ctx) == nil }
	for !leads(a) {
		if ctx.Err() != nil {
			t.Fatal("the first Elector never led")
		}
		time.Sleep(5 * time.Millisecond)
	}
	b, err := relockgocron.NewElector(cb, "e", "b")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if err := b.IsLeader(ctx); !errors.Is(err, relockgocron.ErrNotLeader) {
		t.Fatalf("the second Elector while the first leads: %v, want ErrNotLeader", err)
	}
	closed := time.Now()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if leads(a) {
		t.Fatal("a closed Elector leads")
	}
	for !leads(b) {
		if ctx.Err() != nil {
			t.Fatal("the second Elector never led")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if took := time.Since(closed); took > time.Second {
		t.Fatalf("the second Elector led %v after the first closed, want at once (its watchdog timeout is 30 s)", took)
	}
	if err := cb.Close(); err != nil {
		t.Fatal(err)
	}
	for err := b.IsLeader(ctx); !errors.Is(err, relock.ErrClosed); err = b.IsLeader(ctx) {
		if ctx.Err() != nil {
			t.Fatalf("IsLeader after the Client closed: %v, want ErrClosed", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
