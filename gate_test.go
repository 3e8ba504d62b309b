package relock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// A hot lock: many goroutines of one Client taking one lock in turn. They wait in the Client's gate, and
// a release hands the lock to the next of them in its own script run (see docs/performance.md, "Hot
// locks"): about one script run per acquisition, each acquisition a new holder with a new fencing token.
func TestHotLockIsHandedOver(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 30*time.Second)
	l := c.Lock("hot", relock.WithFencing())
	// The scripts are loaded first, so that each run below is one EVALSHA.
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	do(t, rdb, "CONFIG", "RESETSTAT")
	const goroutines, each = 16, 20
	var (
		mu     sync.Mutex
		tokens []uint64 // in acquisition order: one holder at a time appends
		inside atomic.Int32
		wg     sync.WaitGroup
	)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := relock.WithOwner(ctx, fmt.Sprint("g", g))
			for range each {
				if err := l.Lock(owner); err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					t.Error("two owners inside")
				}
				token, err := l.FencingToken(owner)
				if err != nil {
					t.Error(err)
				}
				hold, err := l.HoldContext(owner)
				if err != nil || hold.Err() != nil {
					t.Errorf("HoldContext of a hold just acquired: %v, %v", err, hold.Err())
				}
				mu.Lock()
				tokens = append(tokens, token)
				mu.Unlock()
				inside.Add(-1)
				if err := l.Unlock(owner); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	calls := commandCalls(t, rdb)
	scripts := calls["evalsha"] + calls["eval"]
	n := goroutines * each
	t.Logf("%d acquisitions, %d script runs (%.2f each)", n, scripts, float64(scripts)/float64(n))
	if len(tokens) != n {
		t.Fatalf("%d acquisitions, want %d", len(tokens), n)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("fencing token %d after %d: a hold handed over is a new holder's, with a greater token", tokens[i], tokens[i-1])
		}
	}
	// Lock and Unlock would be two runs each; a handoff is one for both, with some attempts of the gate's
	// head and one release through Redis every few handoffs.
	if per := float64(scripts) / float64(n); per > 1.5 {
		t.Fatalf("%.2f script runs per acquisition; want at most 1.5 (handoffs)", per)
	}
	if left, _ := do(t, rdb, "EXISTS", "hot", "relock_lock_waiters:{hot}").AsInt64(); left != 0 {
		t.Fatalf("%d of the lock's keys left after the last Unlock", left)
	}
}

// The waiters in a Client's gate wait without a round trip, and give up as any waiter does: at their
// ctx's end, or their wait's; the head, which waits in Redis, then still gets the lock when it is free.
func TestGateWaitersGiveUp(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	holder, c := newClient(t, srv, nil), newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 30*time.Second)
	head := waitBehind(t, rdb, holder, c, "queue", ctx, relock.WithOwner(ctx, "head"), 1)
	cctx, cancel := context.WithCancel(relock.WithOwner(ctx, "cancelled"))
	defer cancel()
	cancelled := make(chan error, 1)
	go func() { cancelled <- c.Lock("queue").Lock(cctx) }()
	eventually(t, 5*time.Second, "a second waiter queues", func() bool { return relock.GateWaiters(c, "queue") == 2 })

	do(t, rdb, "CONFIG", "RESETSTAT")
	start := time.Now()
	ok, err := c.Lock("queue").TryLock(relock.WithOwner(ctx, "short"), 150*time.Millisecond, 0)
	if took := time.Since(start); ok || err != nil || took < 150*time.Millisecond || took > time.Second {
		t.Fatalf("TryLock(150 ms) behind two waiters = %v, %v after %v; want false, nil after 150 ms", ok, err, took)
	}
	cancel()
	select {
	case err := <-cancelled:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the cancelled waiter = %v, want its ctx's error", err)
		}
	case <-time.After(time.Second):
		t.Fatal("the cancelled waiter still waits 1 s later")
	}
	if calls := commandCalls(t, rdb); calls["evalsha"]+calls["eval"] != 0 {
		t.Fatalf("queued waiters ran %d scripts; want none", calls["evalsha"]+calls["eval"])
	}
	if got := relock.GateWaiters(c, "queue"); got != 1 {
		t.Fatalf("%d waiters in the gate after two gave up; want the head alone", got)
	}

	if err := holder.Lock("queue").Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-head:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the head still waits 5 s after the lock was released")
	}
	if err := c.Lock("queue").Unlock(relock.WithOwner(ctx, "head")); err != nil {
		t.Fatal(err)
	}
	if got := relock.GateWaiters(c, "queue"); got != 0 {
		t.Fatalf("%d waiters in the gate after the last left", got)
	}
}

// A Client hands a lock to its own waiters a few times in a row at most (see gates): then it lets the
// others go first, so that another Client's waiter, and a Redisson client's, both get the lock in turn
// while the Client's goroutines take it over and over.
func TestHandoffsLetOtherClientsIn(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	busy, other := newClient(t, srv, nil), newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 30*time.Second)
	const name = "shared"
	run, stop := context.WithTimeout(ctx, 2*time.Second)
	defer stop()
	var inside, busyN, otherN, redissonN atomic.Int32
	var longest atomic.Int64 // the other Client's longest wait, ns
	enter := func() {
		if inside.Add(1) != 1 {
			t.Error("two owners inside")
		}
		time.Sleep(500 * time.Microsecond)
		inside.Add(-1)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := relock.WithOwner(ctx, fmt.Sprint("busy", g))
			for run.Err() == nil {
				if err := busy.Lock(name).Lock(owner); err != nil {
					t.Error(err)
					return
				}
				enter()
				busyN.Add(1)
				if err := busy.Lock(name).Unlock(owner); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		for run.Err() == nil {
			start := time.Now()
			if err := other.Lock(name).Lock(ctx); err != nil {
				t.Error(err)
				return
			}
			if d := int64(time.Since(start)); d > longest.Load() {
				longest.Store(d)
			}
			enter()
			otherN.Add(1)
			if err := other.Lock(name).Unlock(ctx); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		redissonTakesTurns(t, run, rdb, srv, name, func() { enter(); redissonN.Add(1) })
	}()
	wg.Wait()
	t.Logf("acquisitions: the busy Client %d, the other %d (longest wait %v), Redisson %d", busyN.Load(), otherN.Load(),
		time.Duration(longest.Load()), redissonN.Load())
	if otherN.Load() < 10 || redissonN.Load() < 2 {
		t.Fatalf("in 2 s, the other Client acquired %d times and Redisson %d; want them let in every few handoffs", otherN.Load(), redissonN.Load())
	}
}

// redissonTakesTurns takes the Lock name over and over until ctx ends, as Redisson's RLock does: its
// acquire script, and a wait on its channel for the unlock message (or the holder's TTL) when it is taken;
// took runs while it holds the lock.
func redissonTakesTurns(t *testing.T, ctx context.Context, rdb rueidis.Client, srv *redistest.Server, name string, took func()) {
	const field = "6f6e6c79-6a61-4761-8000-000000000000:7" // a Redisson (version 4 UUID) owner
	acquire := rueidis.NewLuaScript(`if redis.call('exists', KEYS[1]) == 0 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])`)
	release := rueidis.NewLuaScript(`if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return nil end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], '0')
return 1`)
	channel := "redisson_lock__channel:{" + name + "}"
	sub := rawClient(t, srv)
	unlocked := make(chan struct{}, 1)
	subscribed := make(chan struct{})
	go func() {
		_ = sub.Receive(ctx, sub.B().Subscribe().Channel(channel).Build(), func(m rueidis.PubSubMessage) {
			if m.Message == "0" {
				select {
				case unlocked <- struct{}{}:
				default:
				}
			}
		})
	}()
	go func() { // Receive confirms nothing: wait until Redis counts the subscriber
		defer close(subscribed)
		for ctx.Err() == nil {
			if n, _ := do(t, rdb, "PUBSUB", "NUMSUB", channel).AsIntSlice(); len(n) == 0 {
				if m, _ := do(t, rdb, "PUBSUB", "NUMSUB", channel).ToArray(); len(m) == 2 {
					if k, _ := m[1].AsInt64(); k > 0 {
						return
					}
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
	<-subscribed
	for ctx.Err() == nil {
		// Not cut short by ctx's end: an acquisition Redis ran whose reply the end of ctx dropped would keep
		// the lock 30 s with nobody to release it.
		ttl, err := acquire.Exec(context.WithoutCancel(ctx), rdb, []string{name}, []string{"30000", field}).AsInt64()
		if rueidis.IsRedisNil(err) {
			took()
			if err := release.Exec(context.WithoutCancel(ctx), rdb, []string{name, channel}, []string{field}).Error(); err != nil {
				t.Error(err)
			}
			continue
		}
		if err != nil {
			t.Error(err)
			return
		}
		select {
		case <-unlocked:
		case <-time.After(time.Duration(ttl) * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// A gate outlives its last waiter while the lock it handed over is held (its handoffs in a row count on):
// an acquisition that comes then must ask Redis, and wait there, as any first waiter does. Were it to
// wait in the gate behind nobody, only a handoff could reach it: a release through Redis (here a forced
// one, from another Client) would leave it asleep with the lock free.
func TestWaiterAfterAHandoffWaitsInRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, other := newClient(t, srv, nil), newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 30*time.Second)
	l := c.Lock("after")
	a, b, cc := relock.WithOwner(ctx, "A"), relock.WithOwner(ctx, "B"), relock.WithOwner(ctx, "C")
	if err := l.Lock(a); err != nil {
		t.Fatal(err)
	}
	gotB := make(chan error, 1)
	go func() { gotB <- l.Lock(b) }()
	awaitWaitingOwners(t, rdb, "after", 1)
	if err := l.Unlock(a); err != nil { // hands the lock to B
		t.Fatal(err)
	}
	receive(t, gotB, 5*time.Second, "B gets the lock")
	gotC := make(chan error, 1)
	go func() { gotC <- l.Lock(cc) }()
	awaitWaitingOwners(t, rdb, "after", 1) // C waits in Redis
	if ok, err := other.Lock("after").ForceUnlock(ctx); !ok || err != nil {
		t.Fatalf("ForceUnlock = %v, %v", ok, err)
	}
	receive(t, gotC, 5*time.Second, "C gets the lock the forced release freed")
}

// A release that lets other Clients go first may wake nobody who wants the lock: a process that only
// listens on Redisson's channel (a monitor, a Redisson client that is about to give up). The Client's own
// waiters must then still get the lock, a moment later, not at the holder's TTL (see gates.yielded).
func TestYieldingToAListenerThatDoesNotTakeTheLock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	const name = "listened"
	sub := rawClient(t, srv)
	channel := "redisson_lock__channel:{" + name + "}"
	go func() {
		_ = sub.Receive(ctx, sub.B().Subscribe().Channel(channel).Build(), func(rueidis.PubSubMessage) {})
	}()
	eventually(t, 5*time.Second, "the listener subscribes", func() bool { return numsub(t, rawClient(t, srv), channel) == 1 })
	start := time.Now()
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := relock.WithOwner(ctx, fmt.Sprint("g", g))
			for range 40 {
				if err := c.Lock(name).Lock(owner); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(200 * time.Microsecond)
				if err := c.Lock(name).Unlock(owner); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// 80 acquisitions, about 9 of them after a release that yielded: a few ms each, not the 30 s TTL.
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("80 acquisitions took %v: waiters slept after releases that woke only a listener", took)
	} else {
		t.Logf("80 acquisitions in %v", took)
	}
}

// A waiter in the gate whose owner gets the lock meanwhile (two goroutines sharing a WithOwner token) does
// not wait behind the gate's queue for a lock its owner holds: it re-enters at once. (It waited behind the
// whole queue, and a holder that waits for a sibling goroutine deadlocked.)
func TestGateWaiterReentersWhenItsOwnerGetsTheLock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	l := c.Lock("sibling")
	x := relock.WithOwner(ctx, "x")
	if err := l.Lock(x); err != nil {
		t.Fatal(err)
	}
	// In the gate, in order: the head (owner h), then the shared owner's first goroutine, another owner,
	// and the shared owner's second goroutine.
	type result struct {
		who string
		err error
	}
	done := make(chan result, 4)
	enter := func(who, owner string, want int) {
		go func() {
			oc := relock.WithOwner(ctx, owner)
			err := l.Lock(oc)
			done <- result{who, err}
		}()
		eventually(t, 5*time.Second, who+" waits in the gate", func() bool { return relock.GateWaiters(c, "sibling") == want })
	}
	enter("head", "h", 1)
	enter("shared-1", "shared", 2)
	enter("other", "o", 3)
	enter("shared-2", "shared", 4)
	// x's release hands the lock to the first of the queue: the shared owner's first goroutine.
	if err := l.Unlock(x); err != nil {
		t.Fatal(err)
	}
	shared := relock.WithOwner(ctx, "shared")
	for range 2 {
		select {
		case r := <-done:
			if r.err != nil || r.who != "shared-1" && r.who != "shared-2" {
				t.Fatalf("%s: %v; want the shared owner's goroutines first", r.who, r.err)
			}
		case <-time.After(3 * time.Second):
			t.Fatal("the shared owner's second goroutine still waits, although its owner holds the lock")
		}
	}
	if n, err := l.HoldCount(shared); err != nil || n != 2 {
		t.Fatalf("the shared owner's hold count = %d, %v; want 2 (a reentry)", n, err)
	}
	for range 2 {
		if err := l.Unlock(shared); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 { // the others get it in turn
		r := <-done
		if r.err != nil {
			t.Fatalf("%s: %v", r.who, r.err)
		}
		if err := l.Unlock(relock.WithOwner(ctx, map[string]string{"head": "h", "other": "o"}[r.who])); err != nil {
			t.Fatal(err)
		}
	}
}

// A gate is dropped as soon as nobody is in it, however the chain of handoffs through it ends: by an
// Unlock whose ctx had ended (a release in the background), by a hold's loss, or by the holder's Client
// closing. (A gate that had handed the lock over was kept for its streak, and never dropped when the
// chain ended outside the handoff path: 50 of 50 left.)
func TestGatesAreDroppedWhenHandoffChainsEnd(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := rawClient(t, srv)
	ends := map[string]func(c *relock.Client, l *relock.RLock, w context.Context){
		"unlock with an ended ctx": func(_ *relock.Client, l *relock.RLock, w context.Context) {
			ended, cancel := context.WithCancel(w)
			cancel()
			_ = l.Unlock(ended)
		},
		"loss": func(_ *relock.Client, l *relock.RLock, w context.Context) {
			do(t, rdb, "DEL", l.Name())
			hc, err := l.HoldContext(w)
			if err == nil {
				eventually(t, 5*time.Second, "the loss is told", func() bool { return hc.Err() != nil })
			}
		},
	}
	ends["close"] = func(*relock.Client, *relock.RLock, context.Context) {} // the Client closes after the chains
	for how, end := range ends {
		c := newClient(t, srv, nil)
		ctx := ctxTimeout(t, 30*time.Second)
		for i := range 50 {
			l := c.Lock(fmt.Sprintf("chain-%s-%d", how, i))
			a, w := relock.WithOwner(ctx, "a"), relock.WithOwner(ctx, "w")
			if err := l.Lock(a); err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() { got <- l.Lock(w) }()
			eventually(t, 5*time.Second, "w waits in the gate", func() bool { return relock.GateWaiters(c, l.Name()) == 1 })
			if err := l.Unlock(a); err != nil { // handed to w
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Fatal(err)
			}
			end(c, l, w)
		}
		if how == "close" {
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		}
		eventually(t, 5*time.Second, how+": every gate dropped", func() bool { return relock.Gates(c) == 0 },
			func() string { return fmt.Sprint(relock.Gates(c), " gates left") })
	}
}

// A Redisson client's waiter gets the lock within the bound docs/redisson.md gives (no more than 36 relock
// holds in a row: an offer at least every 9 holds of a relock Client, a few of them missed), however many
// relock Clients hand a busy lock over among their own waiters: each Client's yield gives Redisson's waiters a head start that no relock waiter cuts short.
// (Once a relock Client's waiter had heard the lock's channel it took the unlock message meant for
// Redisson's waiters, and two relock Clients yielding to each other named each other's waiters first:
// 99 to 234 relock holds in a row.)
func TestRedissonWaiterGetsItsTurnBetweenBusyClients(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clients := []*relock.Client{newClient(t, srv, nil), newClient(t, srv, nil)}
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 30*time.Second)
	const name = "shared-by-three"
	run, stop := context.WithTimeout(ctx, 3*time.Second)
	defer stop()
	var mu sync.Mutex
	var inRow, longest, relockN, redissonN int
	enter := func(redisson bool) {
		mu.Lock()
		if redisson {
			redissonN++
			longest = max(longest, inRow)
			inRow = 0
		} else {
			relockN++
			inRow++
		}
		mu.Unlock()
		time.Sleep(300 * time.Microsecond)
	}
	var wg sync.WaitGroup
	for i, c := range clients {
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				owner := relock.WithOwner(ctx, fmt.Sprint("c", i, "g", g))
				l := c.Lock(name)
				for run.Err() == nil {
					if err := l.Lock(owner); err != nil {
						t.Error(err)
						return
					}
					enter(false)
					if err := l.Unlock(owner); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		redissonTakesTurns(t, run, rdb, srv, name, func() { enter(true) })
	}()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	longest = max(longest, inRow)
	t.Logf("relock holds %d, Redisson's %d; longest run of relock holds %d", relockN, redissonN, longest)
	// A chance every 9 holds; a Redisson waiter on a loaded machine may miss a few of them.
	if bound := 4 * (maxHandoffsInRow + 1); longest > bound || redissonN < relockN/(bound*2) {
		t.Fatalf("the Redisson waiter waited through %d relock holds in a row (and had %d of %d holds); want at most %d",
			longest, redissonN, relockN+redissonN, bound)
	}
}

// maxHandoffsInRow is how many times a Client hands a lock over in a row (see gates).
const maxHandoffsInRow = 8
