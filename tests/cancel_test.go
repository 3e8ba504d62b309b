package tests

import (
	"context"
	"encoding/hex"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/faultnet"
)

// The phases in which the cancelled-waiters scenarios end a waiter's context.
const (
	phaseBefore   = iota // before it calls Acquire
	phaseInFlight        // 0-120 ms after, through a proxy adding 10-60 ms each way: often while its script is in flight
	phaseWaiting         // 100-300 ms after, while it waits for a release
	phaseAtWake          // right as a release is sent, or up to 60 ms after: as the release wakes it
	phases
)

var phaseNames = [phases]string{"before", "in flight", "waiting", "at wake"}

// phaseStats counts, for one phase, the waiters that got a permit anyway and those that gave up.
type phaseStats struct{ got, gaveUp atomic.Int64 }

// wakeCancels holds the cancel functions of waiters to end as the next release wakes them.
type wakeCancels struct {
	mu  sync.Mutex
	fns []context.CancelFunc
}

func (w *wakeCancels) add(f context.CancelFunc) {
	w.mu.Lock()
	w.fns = append(w.fns, f)
	w.mu.Unlock()
}

// fire ends them all, each 0-60 ms from now on a goroutine of its own: a release sent now reaches a waiter
// behind the proxy 10-60 ms later, so the ends and the wake-ups race.
func (w *wakeCancels) fire() {
	w.mu.Lock()
	fns := w.fns
	w.fns = nil
	w.mu.Unlock()
	for _, f := range fns {
		go func() {
			time.Sleep(time.Duration(rand.IntN(60)) * time.Millisecond)
			f()
		}()
	}
}

// holder takes a permit through Client c under ctx, holds it for d, runs beforeRelease and gives it back;
// it reports whether it got one.
type holder func(c *relock.Client, ctx context.Context, d time.Duration, beforeRelease func()) bool

// cancelWaiters runs the cancelled-waiters workload for d: a holder on every Client takes and gives back
// permits, 10-60 ms each, while batches of 12 waiters on every Client give up in each phase (a waiter that
// gets a permit holds it 5 ms). The proxy's latency moves between 10 and 60 ms each way. It notes in s
// what each phase saw, and counts the waiters that gave up as its faults; a waiter whose context ended
// before it called Acquire and that got a permit is a violation.
func cancelWaiters(t *testing.T, s *summary, clients []*relock.Client, proxy *faultnet.Proxy, d time.Duration, hold holder) {
	t.Helper()
	var st [phases]phaseStats
	var wakers wakeCancels
	stop := make(chan struct{})
	var background sync.WaitGroup
	background.Add(1)
	go func() {
		defer background.Done()
		defer proxy.SetLatency(0)
		for {
			proxy.SetLatency(time.Duration(10+rand.IntN(50)) * time.Millisecond)
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(200+rand.IntN(200)) * time.Millisecond):
			}
		}
	}()
	end := time.Now().Add(d)
	for _, c := range clients {
		background.Add(1)
		go func() {
			defer background.Done()
			for time.Now().Before(end) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				hold(c, ctx, time.Duration(10+rand.IntN(50))*time.Millisecond, wakers.fire)
				cancel()
			}
		}()
	}
	var beforeGot atomic.Int64
	for time.Now().Before(end) {
		var batch sync.WaitGroup
		for i := range 12 * len(clients) {
			c, phase := clients[i%len(clients)], i/len(clients)%phases
			var ctx context.Context
			var cancel context.CancelFunc
			switch phase {
			case phaseBefore:
				ctx, cancel = context.WithCancel(context.Background())
				cancel()
			case phaseInFlight:
				ctx, cancel = context.WithTimeout(context.Background(), time.Duration(rand.IntN(120))*time.Millisecond)
			case phaseWaiting:
				ctx, cancel = context.WithTimeout(context.Background(), time.Duration(100+rand.IntN(200))*time.Millisecond)
			case phaseAtWake:
				ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second) // ended by a release, or at the end
				wakers.add(cancel)
			}
			batch.Add(1)
			go func() {
				defer batch.Done()
				defer cancel()
				if hold(c, ctx, 5*time.Millisecond, nil) {
					st[phase].got.Add(1)
					if phase == phaseBefore {
						beforeGot.Add(1)
					}
				} else {
					st[phase].gaveUp.Add(1)
				}
			}()
		}
		done := make(chan struct{})
		go func() { batch.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Until(end) + 100*time.Millisecond): // waiting for a release that will not come
			wakers.fire()
			<-done
		}
	}
	close(stop)
	background.Wait()
	wakers.fire()
	if n := beforeGot.Load(); n > 0 {
		s.violations += n
		s.note("%d waiters whose context had ended before they called Acquire got a permit", n)
	}
	for p := range phases {
		s.faults += st[p].gaveUp.Load()
		s.note("%s: %d gave up, %d got a permit", phaseNames[p], st[p].gaveUp.Load(), st[p].got.Load())
	}
}

// takenIDs samples the members of a taken-permits set every 2 ms until stop, and returns those it saw.
func takenIDs(rdb rueidis.Client, timeouts string, stop <-chan struct{}) <-chan map[string]bool {
	out := make(chan map[string]bool, 1)
	go func() {
		seen := map[string]bool{}
		defer func() { out <- seen }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			ids, _ := rdb.Do(ctx, rdb.B().Zrange().Key(timeouts).Min("0").Max("-1").Build()).AsStrSlice()
			cancel()
			for _, id := range ids {
				seen[hex.EncodeToString([]byte(id))] = true
			}
		}
	}()
	return out
}

// TestPermitsCancelledWaiters: waiters on an expirable semaphore of 3, on 3 Clients (2 behind a proxy
// adding 10-60 ms each way), give up before calling Acquire, while their script is in flight, while they
// wait, and right as a release wakes them, while holders take and give back permits. A permit taken by a
// waiter that gave up (its script ran after its context ended) is given back: at the end every permit is
// back and the taken set is empty. All along, atomic samples have available + taken == 3, and at no instant
// do more than 3 holders believe they hold.
func TestPermitsCancelledWaiters(t *testing.T) {
	t.Parallel()
	srv := server(t)
	proxy := startProxy(t, srv)
	rdb := rawClient(t, srv.Addr())
	opts := &relock.Options{WatchdogTimeout: 2 * time.Second}
	direct := newClient(t, []string{srv.Addr()}, opts)
	clients := []*relock.Client{newClient(t, []string{proxy.Addr}, opts), newClient(t, []string{proxy.Addr}, opts), direct}
	const name, limit = "cancelled-permits", 3
	timeouts := "{" + name + "}:timeout"
	ctx := ctxTimeout(t, 60*time.Second)
	if ok, err := direct.PermitSemaphore(name).TrySetPermits(ctx, limit); !ok || err != nil {
		t.Fatalf("TrySetPermits = %v, %v", ok, err)
	}
	s := &summary{scenario: "permits-cancelled-waiters"}
	check := checkPermits(rdb, name, timeouts, limit)
	stopIDs := make(chan struct{})
	seen := takenIDs(rdb, timeouts, stopIDs)
	var iv intervals
	var st permitStats
	cancelWaiters(t, s, clients, proxy, workload(4*time.Second), func(c *relock.Client, ctx context.Context, d time.Duration, beforeRelease func()) bool {
		return holdPermit(ctx, c.PermitSemaphore(name), d, &iv, &st, beforeRelease)
	})
	// A permit whose give-back overtook its acquisition comes back at its expiry (the watchdog timeout).
	back, state := permitsBack(direct, rdb, name, limit, 5*time.Second)
	close(stopIDs)
	orphans := 0
	for id := range <-seen {
		if _, ok := st.ids.Load(id); !ok {
			orphans++
		}
	}
	s.ops = st.held.Load()
	permitsOutcome(s, check, &iv, &st, limit, back, state)
	s.note("%d permits seen taken for waiters that had given up", orphans)
	s.report(t, true)
}

// giveBacks counts the spans of a plain semaphore's give-backs (relock.semaphore.giveback), and those that
// ended in an error.
type giveBacks struct {
	sdktrace.SpanProcessor
	n, failed atomic.Int64
}

func (g *giveBacks) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

func (g *giveBacks) OnEnd(s sdktrace.ReadOnlySpan) {
	if s.Name() == "relock.semaphore.giveback" {
		g.n.Add(1)
		if s.Status().Code == codes.Error {
			g.failed.Add(1)
		}
	}
}

func (g *giveBacks) Shutdown(context.Context) error   { return nil }
func (g *giveBacks) ForceFlush(context.Context) error { return nil }

// TestSemaphoreCancelledWaiters: the cancelled-waiters workload on a plain semaphore of 3. A waiter whose
// context ends while its Acquire's script is in flight gets ctx's error at once, and the permit the script
// took, if it ran, is given back when its reply comes: at the end the count is back to 3, exactly. All
// along no sample has more than 3 available, and at no instant do more than 3 holders believe they hold.
func TestSemaphoreCancelledWaiters(t *testing.T) {
	t.Parallel()
	srv := server(t)
	proxy := startProxy(t, srv)
	rdb := rawClient(t, srv.Addr())
	var gb giveBacks
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(&gb))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	opts := &relock.Options{WatchdogTimeout: 2 * time.Second, TracerProvider: tp}
	direct := newClient(t, []string{srv.Addr()}, opts)
	clients := []*relock.Client{newClient(t, []string{proxy.Addr}, opts), newClient(t, []string{proxy.Addr}, opts), direct}
	const name, limit = "cancelled-semaphore", 3
	ctx := ctxTimeout(t, 60*time.Second)
	if ok, err := direct.Semaphore(name).TrySetPermits(ctx, limit); !ok || err != nil {
		t.Fatalf("TrySetPermits = %v, %v", ok, err)
	}
	s := &summary{scenario: "semaphore-cancelled-waiters"}
	check := checkPermits(rdb, name, "", limit)
	var iv intervals
	var st semaphoreStats
	cancelWaiters(t, s, clients, proxy, workload(4*time.Second), func(c *relock.Client, ctx context.Context, d time.Duration, beforeRelease func()) bool {
		return holdSemaphore(ctx, c.Semaphore(name), d, &iv, &st, beforeRelease)
	})
	// A reply still in flight is awaited for up to the watchdog timeout, then its permit given back.
	final := semaphoreBack(rdb, name, limit, 5*time.Second)
	samples, bad, first, errs := check.finish()
	over, most := iv.beyond(limit)
	s.ops = st.held.Load()
	s.violations += bad + over
	s.note("%d atomic samples (%d failed reads), %d bad", samples, errs, bad)
	if bad > 0 {
		s.note("the first bad sample: %s", first)
	}
	s.note("at most %d of %d holders at once, %d times more", most, limit, over)
	s.note("%d permits taken by waiters that had given up were given back (%d give-backs failed)", gb.n.Load(), gb.failed.Load())
	if n := st.replyLost.Load() + st.releaseUnknown.Load(); n > 0 {
		s.note("%d calls failed with an unknown outcome", n) // none is expected here: no connection is broken
	}
	if final != limit {
		s.violations++
		s.note("%d permits available at the end, want %d", final, limit)
	} else {
		s.note("all %d permits back at the end", limit)
	}
	s.report(t, true)
}
