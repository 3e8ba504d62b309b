package relock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/faultnet"
	"github.com/relock-go/relock/internal/redistest"
)

// atOnce is how soon, after Close began, a waiter on another Client must get what Close gave up: far below
// the watchdog timeout (the default, 30 s), after which the holds would have expired anyway.
const atOnce = 3 * time.Second

// shutdownCase is one kind of thing a Client holds or waits for when it is closed: hold takes it on the
// closing Client a (its owner is in ctx) and returns the contexts that must end; want starts, on the other
// Client b, what must get in at once after Close; left says what of a's is still in Redis ("": nothing).
type shutdownCase struct {
	name string
	hold func(e shutdownEnv) []context.Context
	want func(ctx context.Context, b *relock.Client, name string) error
	left func(e shutdownEnv) string
	// after, if set, runs as soon as Close has returned (b's holder lets the waiters in).
	after func(ctx context.Context, b *relock.Client, name string) error
}

// shutdownEnv is where a shutdownCase runs.
type shutdownEnv struct {
	t    *testing.T
	ctx  context.Context // a's owner
	a, b *relock.Client  // a closes
	d    *deployment
	rdb  rueidis.Client // d's (a cluster client on a cluster)
	name string
}

// leftOf reports every trace of a's owners in the keys whose names contain name: key names (a reader's
// hold levels), hash fields, sorted set and list members, string values that hold a's ID (the stream of an
// election's leaders is its history, and is left out).
func leftOf(e shutdownEnv) string {
	t, rdb, a := e.t, e.rdb, e.a
	t.Helper()
	keys := e.d.keysContaining(t, e.name)
	var left []string
	for _, k := range keys {
		typ, _ := do(t, rdb, "TYPE", k).ToString()
		if strings.Contains(k, a.ID()) {
			left = append(left, fmt.Sprintf("%s %s", typ, k))
		}
		var items []string
		switch typ {
		case "hash":
			items, _ = do(t, rdb, "HKEYS", k).AsStrSlice()
		case "zset":
			items, _ = do(t, rdb, "ZRANGE", k, "0", "-1").AsStrSlice()
		case "list":
			items, _ = do(t, rdb, "LRANGE", k, "0", "-1").AsStrSlice()
		case "string":
			v, _ := do(t, rdb, "GET", k).ToString()
			items = []string{v}
		}
		for _, item := range items {
			if strings.Contains(item, a.ID()) {
				left = append(left, fmt.Sprintf("%s %s: %s", typ, k, item))
			}
		}
	}
	return strings.Join(left, "; ")
}

func lockCase(name string, lock func(c *relock.Client, name string) relock.Lockable, times int, lease time.Duration,
	other func(c *relock.Client, name string) relock.Lockable) shutdownCase {
	return shutdownCase{
		name: name,
		hold: func(e shutdownEnv) []context.Context {
			t, ctx := e.t, e.ctx
			l := lock(e.a, e.name)
			for range times {
				if ok, err := l.TryLock(ctx, 0, lease); !ok || err != nil {
					t.Fatalf("TryLock = %v, %v", ok, err)
				}
			}
			held, err := l.(relock.Locker).HoldContext(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return []context.Context{held}
		},
		want: func(ctx context.Context, b *relock.Client, name string) error { return other(b, name).Lock(ctx) },
		left: leftOf,
	}
}

func shutdownCases() []shutdownCase {
	rlock := func(c *relock.Client, name string) relock.Lockable { return c.Lock(name) }
	fair := func(c *relock.Client, name string) relock.Lockable { return c.FairLock(name) }
	read := func(c *relock.Client, name string) relock.Lockable { return c.ReadWriteLock(name).ReadLock() }
	write := func(c *relock.Client, name string) relock.Lockable { return c.ReadWriteLock(name).WriteLock() }
	return []shutdownCase{
		lockCase("RLock reentrant", rlock, 2, 0, rlock),
		lockCase("RLock leased", rlock, 1, time.Hour, rlock),
		lockCase("FairLock", fair, 2, 0, fair),
		lockCase("ReadLock", read, 2, 0, write),
		lockCase("WriteLock", write, 2, 0, read),
		lockCase("WriteLock leased", write, 1, time.Hour, write),
		{
			name: "MultiLock",
			hold: func(e shutdownEnv) []context.Context {
				t, ctx := e.t, e.ctx
				m := relock.NewMultiLock(e.a.Lock(e.name+":1"), e.a.FairLock(e.name+":2"))
				if err := m.Lock(ctx); err != nil {
					t.Fatal(err)
				}
				held, err := m.HoldContext(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return []context.Context{held}
			},
			want: func(ctx context.Context, b *relock.Client, name string) error {
				return b.FairLock(name + ":2").Lock(ctx) // a waiter woken by the release (a MultiLock polls)
			},
			left: leftOf,
		},
		{
			name: "PermitSemaphore",
			hold: func(e shutdownEnv) []context.Context {
				t, ctx := e.t, e.ctx
				s := e.a.PermitSemaphore(e.name)
				if _, err := s.TrySetPermits(ctx, 2); err != nil {
					t.Fatal(err)
				}
				var held []context.Context
				for _, lease := range []time.Duration{0, time.Hour} {
					p, ok, err := s.TryAcquire(ctx, 0, lease)
					if !ok || err != nil {
						t.Fatalf("TryAcquire = %v, %v, %v", p, ok, err)
					}
					pc, err := p.Context(ctx)
					if err != nil {
						t.Fatal(err)
					}
					held = append(held, pc)
				}
				return held
			},
			want: func(ctx context.Context, b *relock.Client, name string) error {
				_, err := b.PermitSemaphore(name).Acquire(ctx)
				return err
			},
			// The permits are back: the counter and the taken permits add up to 2, of which b has 1.
			left: func(e shutdownEnv) string {
				// One read of both (the waiter may be taking its permit meanwhile).
				counts, err := do(e.t, e.rdb, "EVAL", "return {tonumber(redis.call('get', KEYS[1])), redis.call('zcard', KEYS[2])}",
					"2", e.name, "{"+e.name+"}:timeout").AsIntSlice()
				if err != nil || len(counts) != 2 {
					e.t.Fatalf("reading the permits: %v %v", counts, err)
				}
				n, taken := counts[0], counts[1]
				if n+taken != 2 || taken > 1 {
					return fmt.Sprintf("%d permits available and %d taken, want 2 in all, 1 at most taken (by the waiter)", n, taken)
				}
				return ""
			},
		},
		{
			name: "Election leader",
			hold: func(e shutdownEnv) []context.Context {
				el := e.a.Election(e.name)
				if _, err := el.Campaign(e.ctx, "a"); err != nil {
					e.t.Fatal(err)
				}
				lead, err := el.LeadershipContext(e.ctx)
				if err != nil {
					e.t.Fatal(err)
				}
				return []context.Context{lead}
			},
			want: func(ctx context.Context, b *relock.Client, name string) error {
				_, err := b.Election(name).Campaign(ctx, "b")
				return err
			},
			left: leftOf,
		},
		{
			// The closing Client waits in a fair lock's queue, behind b's holder and ahead of b's waiter: it
			// leaves the queue, so that b's waiter gets the lock as soon as the holder unlocks (a dead waiter
			// at the head would hold it up for a watchdog timeout).
			name: "FairLock waiter",
			hold: queued(func(ctx context.Context, a *relock.Client, name string) error { return a.FairLock(name).Lock(ctx) },
				func(ctx context.Context, b *relock.Client, name string) error { return b.FairLock(name).Lock(ctx) }),
			want: func(ctx context.Context, b *relock.Client, name string) error { return b.FairLock(name).Lock(ctx) },
			after: func(ctx context.Context, b *relock.Client, name string) error {
				return b.FairLock(name).Unlock(relock.WithOwner(ctx, "holder"))
			},
			left: leftOf,
		},
		{
			// The closing Client's writer waits with priority behind b's reader, holding new readers back: its
			// claim is gone at once, and a new reader gets in.
			name: "priority writer waiting",
			hold: queued(func(ctx context.Context, a *relock.Client, name string) error {
				return a.ReadWriteLock(name, relock.WithWriterPriority()).WriteLock().Lock(ctx)
			}, func(ctx context.Context, b *relock.Client, name string) error {
				return b.ReadWriteLock(name).ReadLock().Lock(ctx)
			}),
			want: func(ctx context.Context, b *relock.Client, name string) error {
				return b.ReadWriteLock(name).ReadLock().Lock(ctx)
			},
			left: leftOf,
		},
		{
			// The closing Client campaigns behind b's leader and ahead of b's next candidate, who leads as
			// soon as the leader resigns.
			name: "Election candidate",
			hold: queued(func(ctx context.Context, a *relock.Client, name string) error {
				_, err := a.Election(name).Campaign(ctx, "a")
				return err
			}, func(ctx context.Context, b *relock.Client, name string) error {
				_, err := b.Election(name).Campaign(ctx, "b")
				return err
			}),
			want: func(ctx context.Context, b *relock.Client, name string) error {
				_, err := b.Election(name).Campaign(ctx, "next")
				return err
			},
			after: func(ctx context.Context, b *relock.Client, name string) error {
				return b.Election(name).Resign(relock.WithOwner(ctx, "holder"))
			},
			left: leftOf,
		},
	}
}

// queued is a case's hold for a closing Client that waits (wait, on a) behind b's holder (take, as owner
// "holder"): it returns once a's waiter is queued, and the waiter must end with ErrClosed at Close.
func queued(wait func(ctx context.Context, a *relock.Client, name string) error,
	take func(ctx context.Context, b *relock.Client, name string) error) func(e shutdownEnv) []context.Context {
	return func(e shutdownEnv) []context.Context {
		t := e.t
		if err := take(relock.WithOwner(e.ctx, "holder"), e.b, e.name); err != nil {
			t.Fatal(err)
		}
		ended := make(chan error, 1)
		go func() { ended <- wait(e.ctx, e.a, e.name) }()
		eventually(t, 5*time.Second, "the closing Client's waiter is queued", func() bool { return leftOf(e) != "" })
		t.Cleanup(func() {
			select {
			case err := <-ended:
				if !errors.Is(err, relock.ErrClosed) {
					t.Errorf("a waiter of the closing Client ended with %v, want ErrClosed", err)
				}
			case <-time.After(atOnce):
				t.Error("a waiter of the closing Client did not end")
			}
		})
		return nil
	}
}

// subscribersOf counts the subscriptions to the channels whose names contain name.
func subscribersOf(t *testing.T, rdb rueidis.Client, name string) int64 {
	t.Helper()
	channels, err := do(t, rdb, "PUBSUB", "CHANNELS", "*"+name+"*").AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, ch := range channels {
		n += numsub(t, rdb, ch)
	}
	return n
}

// Close gives up everything its Client holds, of every kind, and takes its waiters out of every queue, at
// once: when it returns, nothing of the Client's is left in Redis, the holds' contexts have ended with a
// cause matching ErrClosed and context.Canceled (not ErrLockLost), and a waiter on another Client, woken
// by the releases, has got in, far sooner than the watchdog timeout (30 s) after which the holds would
// have expired. Before, Close left every hold to expire. On one server and on a cluster (sharded pub/sub).
func TestCloseGivesUpEverything(t *testing.T) {
	t.Parallel()
	for _, place := range []string{"standalone", "cluster"} {
		t.Run(place, func(t *testing.T) {
			t.Parallel()
			d := standalone
			if place == "cluster" {
				d = func(t testing.TB) *deployment { return onCluster(t, "shut:") }
			}
			closeGivesUpEverything(t, d(t))
		})
	}
}

func closeGivesUpEverything(t *testing.T, d *deployment) {
	rdb := d.raw(t)
	for _, tc := range shutdownCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			name := d.name("shut-" + strings.ReplaceAll(tc.name, " ", "-") + "#") // no name is a part of another
			a, err := relock.New(d.addrs, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.Close() })
			b := d.client(t, nil)
			ctx := ctxTimeout(t, 60*time.Second)
			e := shutdownEnv{t: t, ctx: relock.WithOwner(ctx, "a-owner"), a: a, b: b, d: d, rdb: rdb, name: name}
			held := tc.hold(e)
			standalone := d.kind == "standalone"
			var before int64
			if standalone { // on a cluster the waiter may or may not be asleep already when Close comes
				before = subscribersOf(t, rdb, name)
			}
			got := make(chan error, 1)
			go func() { got <- tc.want(relock.WithOwner(ctx, "b-waiter"), b, name) }()
			if standalone {
				eventually(t, 5*time.Second, "b's waiter waits", func() bool { return subscribersOf(t, rdb, name) > before })
			}
			select {
			case err := <-got:
				t.Fatalf("b's waiter got in before Close: %v", err)
			default:
			}
			var published <-chan string
			if standalone && strings.HasPrefix(tc.name, "RLock") { // what a Redisson waiter hears
				published = subscribe(t, d.servers[0], "redisson_lock__channel:{"+name+"}")
			}

			start := time.Now()
			if err := a.Close(); err != nil {
				t.Fatalf("Close = %v", err)
			}
			took := time.Since(start)
			if left := tc.left(e); left != "" {
				t.Fatalf("after Close (%v): %s", took, left)
			}
			if tc.after != nil {
				if err := tc.after(ctx, b, name); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatalf("b's waiter: %v", err)
				}
			case <-time.After(atOnce - time.Since(start)):
				t.Fatalf("b's waiter did not get in within %v of Close (it took %v)", atOnce, took)
			}
			for i, h := range held {
				select {
				case <-h.Done():
				default:
					t.Fatalf("hold context %d did not end with Close", i)
				}
				if cause := context.Cause(h); !errors.Is(cause, relock.ErrClosed) || !errors.Is(cause, context.Canceled) ||
					errors.Is(cause, relock.ErrLockLost) {
					t.Fatalf("hold context %d ended with %v; want ErrClosed and context.Canceled, not ErrLockLost", i, cause)
				}
			}
			if published != nil {
				// relock's named message (b's waiter was woken by name), then Redisson's unlock message.
				for _, want := range []string{"-1", "0"} {
					select {
					case msg := <-published:
						if msg != want {
							t.Fatalf("release message %q, want %q (relock's named message, then Redisson's \"0\")", msg, want)
						}
					case <-time.After(time.Second):
						t.Fatalf("no %q published", want)
					}
				}
			}
			t.Logf("Close took %v; b got in %v after it began", took, time.Since(start))
		})
	}
}

// subscribe returns the messages published on channel, from a connection of its own.
func subscribe(t *testing.T, srv *redistest.Server, channel string) <-chan string {
	t.Helper()
	rdb := rawClient(t, srv)
	msgs := make(chan string, 16)
	subscribed := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = rdb.Receive(rueidis.WithOnSubscriptionHook(ctx, func(rueidis.PubSubSubscription) { close(subscribed) }),
			rdb.B().Subscribe().Channel(channel).Build(), func(m rueidis.PubSubMessage) {
				select {
				case msgs <- m.Message:
				default:
				}
			})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case <-subscribed:
	case <-time.After(5 * time.Second):
		t.Fatal("SUBSCRIBE not confirmed")
	}
	return msgs
}

// With Redis down or stalled, Close still returns within its bound (CloseContext's ctx; Close's
// DefaultCloseTimeout), with an error matching context.DeadlineExceeded, and the holds' contexts end as it
// begins, not when it returns: work under them stops at once.
func TestCloseWithRedisDownReturnsWithinItsBound(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"killed", "paused"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			a, err := relock.New([]string{srv.Addr()}, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.Close() })
			ctx := relock.WithOwner(ctxTimeout(t, 60*time.Second), "owner")
			var held []context.Context
			for _, l := range []*relock.RLock{a.Lock("down"), a.FairLock("down-fair"), a.ReadWriteLock("down-rw").ReadLock()} {
				if err := l.Lock(ctx); err != nil {
					t.Fatal(err)
				}
				h, err := l.HoldContext(ctx)
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, h)
			}
			s := a.PermitSemaphore("down-permits")
			if _, err := s.TrySetPermits(ctx, 1); err != nil {
				t.Fatal(err)
			}
			p, err := s.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			pc, err := p.Context(ctx)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, pc)

			bound, closeIt := relock.DefaultCloseTimeout, a.Close
			if how == "killed" {
				if err := srv.Kill(); err != nil {
					t.Fatal(err)
				}
				bound = time.Second
				closeIt = func() error {
					cctx, cancel := context.WithTimeout(context.Background(), bound)
					defer cancel()
					return a.CloseContext(cctx)
				}
			} else {
				if err := srv.Pause(); err != nil {
					t.Fatal(err)
				}
				defer srv.Resume()
			}
			start := time.Now()
			closed := make(chan error, 1)
			go func() { closed <- closeIt() }()
			for i, h := range held {
				select {
				case <-h.Done():
				case <-time.After(time.Second):
					t.Fatalf("hold context %d still going 1 s after Close began", i)
				}
				if cause := context.Cause(h); !errors.Is(cause, relock.ErrClosed) {
					t.Fatalf("hold context %d: %v, want ErrClosed", i, cause)
				}
			}
			select {
			case err := <-closed:
				took := time.Since(start)
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("Close = %v, want an error matching context.DeadlineExceeded", err)
				}
				if took < bound-100*time.Millisecond {
					t.Fatalf("Close returned after %v, before its bound %v: it did not try until then", took, bound)
				}
				t.Logf("Close with Redis %s returned after %v (bound %v): %v", how, took, bound, err)
			case <-time.After(bound + 1500*time.Millisecond):
				t.Fatalf("Close still going %v after it began (bound %v)", time.Since(start), bound)
			}
		})
	}
}

// An Acquire or DrainPermits abandoned in flight (its ctx ended while Redis was stalled) has its permits
// given back, even when Close comes first: Close finishes the give-back (Redis stalled 0.5 s, a 100 ms
// ctx, then Close). Before, the give-back was refused once Close had begun, and the permit was lost: for
// good on a Semaphore, until its expiry (the watchdog timeout) on a PermitSemaphore.
func TestCloseFinishesGiveBacks(t *testing.T) {
	t.Parallel()
	acquire := func(ctx context.Context, c *relock.Client) error { return c.Semaphore("s").Acquire(ctx, 1) }
	drain := func(ctx context.Context, c *relock.Client) error {
		_, err := c.Semaphore("s").DrainPermits(ctx)
		return err
	}
	permit := func(ctx context.Context, c *relock.Client) error {
		p, err := c.PermitSemaphore("s").Acquire(ctx)
		if err == nil {
			err = p.Release(ctx)
		}
		return err
	}
	// take is the call abandoned in flight; warm runs its script once first, so that the abandoned call
	// runs it at once when Redis resumes (EVALSHA), rather than learn of NOSCRIPT after Close.
	cases := []struct {
		name       string
		take, warm func(ctx context.Context, c *relock.Client) error
	}{
		{"Semaphore.Acquire", acquire, func(ctx context.Context, c *relock.Client) error {
			if err := acquire(ctx, c); err != nil {
				return err
			}
			return c.Semaphore("s").Release(ctx, 1)
		}},
		{"Semaphore.DrainPermits", drain, func(ctx context.Context, c *relock.Client) error {
			if err := drain(ctx, c); err != nil {
				return err
			}
			return c.Semaphore("s").Release(ctx, 1)
		}},
		{"PermitSemaphore.Acquire", func(ctx context.Context, c *relock.Client) error {
			_, err := c.PermitSemaphore("s").Acquire(ctx)
			return err
		}, permit},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			rdb := rawClient(t, srv)
			c, err := relock.New([]string{srv.Addr()}, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			ctx := ctxTimeout(t, 10*time.Second)
			if _, err := c.Semaphore("s").TrySetPermits(ctx, 1); err != nil {
				t.Fatal(err)
			}
			if err := tc.warm(ctx, c); err != nil {
				t.Fatal(err)
			}
			if err := srv.Pause(); err != nil {
				t.Fatal(err)
			}
			resumed := make(chan struct{})
			go func() {
				defer close(resumed)
				time.Sleep(500 * time.Millisecond)
				if err := srv.Resume(); err != nil {
					t.Error(err)
				}
			}()
			short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			if err := tc.take(short, c); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("take with a 100 ms ctx on a stalled Redis = %v, want context.DeadlineExceeded", err)
			}
			start := time.Now()
			if err := c.Close(); err != nil {
				t.Errorf("Close = %v", err)
			}
			<-resumed
			n, err := do(t, rdb, "GET", "s").AsInt64()
			taken, _ := do(t, rdb, "ZCARD", "{s}:timeout").AsInt64()
			if n != 1 || taken != 0 || err != nil {
				t.Fatalf("after Close (%v): %d permits available (%v), %d taken; want 1, 0", time.Since(start), n, err, taken)
			}
			t.Logf("Close took %v", time.Since(start))
		})
	}
}

// A give-back of a plain Semaphore's permits that meets a server loading its data (LOADING: the release
// did not run) is sent again until it gets through. Before, it was tried once, and the permit was lost for
// good. The acquisition's reply is held back by a proxy until the server reloads (DEBUG RELOAD, slowed
// down to about 2 s).
func TestSemaphoreGiveBackRidesOutLoading(t *testing.T) {
	t.Parallel()
	args, populate := slowLoading(t)
	srv := redistest.Start(t, args...)
	rdb, reloader := rawClient(t, srv), rawClient(t, srv)
	do(t, rdb, populate...)
	proxy := startProxy(t, srv)
	c := clientAt(t, proxy.Addr, nil)
	s := c.Semaphore("loading-sem")
	ctx := ctxTimeout(t, 30*time.Second)
	if _, err := s.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// The scripts are loaded: EVALSHA runs them (its NOSCRIPT would be held back too).
	if err := s.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, 1); err != nil {
		t.Fatal(err)
	}
	proxy.Stall(faultnet.Downstream, true)
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := s.Acquire(short, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire whose reply is held back = %v, want context.DeadlineExceeded", err)
	}
	eventually(t, 5*time.Second, "the acquisition ran", func() bool {
		n, err := do(t, rdb, "GET", "loading-sem").AsInt64()
		return n == 0 && err == nil
	})
	reloaded := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		reloaded <- reloader.Do(ctx, reloader.B().Arbitrary("DEBUG", "RELOAD").Build()).Error()
	}()
	eventually(t, 5*time.Second, "LOADING", func() bool {
		err := do(t, rdb, "PING").Error()
		return err != nil && strings.Contains(err.Error(), "LOADING")
	})
	proxy.Stall(faultnet.Downstream, false) // the reply comes: the give-back meets LOADING
	if err := <-reloaded; err != nil {
		t.Fatalf("DEBUG RELOAD: %v", err)
	}
	eventually(t, 10*time.Second, "the permit given back", func() bool {
		n, err := do(t, rdb, "GET", "loading-sem").AsInt64()
		return n == 1 && err == nil
	}, func() string {
		v, err := do(t, rdb, "GET", "loading-sem").ToString()
		return fmt.Sprintf("the semaphore holds %q (%v)", v, err)
	})
}

// An undo of an acquisition whose reply was lost (Redis stalled 1.5 s, its ctx 100 ms), and a release that
// Unlock left to the background (its ctx had ended, Redis unreachable for 1.5 s), both under way when
// Close is called, are finished by Close: the lock is free when it returns. Before, Close cancelled the
// undo at once, and gave the release a second: the lock stayed taken by nobody until the watchdog timeout.
func TestCloseFinishesUndosAndReleases(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// partition: Redis is unreachable (the proxy refuses connections) rather than stalled (paused)
		partition bool
		// before runs with Redis up; during runs with Redis out of reach, and must fail with its ctx's error.
		before, during func(ctx context.Context, l *relock.RLock) error
	}{
		{"Lock undone", false, nil, func(ctx context.Context, l *relock.RLock) error { return l.Lock(ctx) }},
		{"Unlock in the background", true, func(ctx context.Context, l *relock.RLock) error { return l.Lock(ctx) },
			func(ctx context.Context, l *relock.RLock) error {
				ended, cancel := context.WithCancel(ctx) // nothing is sent: the release is all in the background
				cancel()
				if err := l.Unlock(ended); !errors.Is(err, context.Canceled) {
					return fmt.Errorf("Unlock with an ended ctx = %w", err)
				}
				<-ctx.Done()
				return ctx.Err()
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			rdb := rawClient(t, srv)
			proxy := startProxy(t, srv)
			c, err := relock.New([]string{proxy.Addr}, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			ctx := relock.WithOwner(ctxTimeout(t, 20*time.Second), "owner")
			l := c.Lock("finish")
			if err := l.Lock(ctx); err != nil { // the scripts are loaded: EVALSHA runs them
				t.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if tc.before != nil {
				if err := tc.before(ctx, l); err != nil {
					t.Fatal(err)
				}
			}
			cut, heal := srv.Pause, srv.Resume
			if tc.partition {
				cut = func() error { proxy.Partition(true); return nil }
				heal = func() error { proxy.Partition(false); return nil }
			}
			if err := cut(); err != nil {
				t.Fatal(err)
			}
			healed := make(chan struct{})
			go func() {
				defer close(healed)
				time.Sleep(1500 * time.Millisecond)
				if err := heal(); err != nil {
					t.Error(err)
				}
			}()
			short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			if err := tc.during(short, l); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("with Redis out of reach and a 100 ms ctx: %v, want context.DeadlineExceeded", err)
			}
			start := time.Now()
			if err := c.Close(); err != nil {
				t.Errorf("Close = %v", err)
			}
			took := time.Since(start)
			<-healed
			if n, err := do(t, rdb, "EXISTS", "finish").AsInt64(); n != 0 || err != nil {
				hold, _ := do(t, rdb, "HGETALL", "finish").ToAny()
				t.Fatalf("after Close (%v): the lock is held: %v (%v)", took, hold, err)
			}
			t.Logf("Close took %v", took)
		})
	}
}

// A Client closed with a ctx that never ends, while its FairLock waiter is queued and Redis does not
// answer, still returns: Close tries to take the waiter out of the queue (whose entries Redis keeps past
// their liveness) for a watchdog timeout at least, then gives up and closes. (Trying with no bound, as
// commit 30c6bd2 did, Close never returned while Redis was paused.)
func TestCloseWithAFairWaiterReturnsWhileRedisDoesNotAnswer(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := rawClient(t, srv)
	c, err := relock.New([]string{srv.Addr()}, fastWatchdog)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 30*time.Second)
	if err := c.FairLock("fair").Lock(relock.WithOwner(ctx, "holder")); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- c.FairLock("fair").Lock(relock.WithOwner(ctx, "w")) }()
	waitQueueLen(t, rdb, 1)
	time.Sleep(100 * time.Millisecond) // the waiter's reply is back: the Client keeps its entry alive
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer srv.Resume()
	start := time.Now()
	closed := make(chan error, 1)
	go func() { closed <- c.CloseContext(context.Background()) }()
	select {
	case err := <-closed:
		took := time.Since(start)
		t.Logf("Close returned after %v: %v", took, err)
		// Without a fair waiter, the holder's give-up alone takes Close about 4 s here with Redis paused.
		if took > 8*time.Second {
			t.Fatalf("Close took %v with Redis paused, want the holder's give-up and a watchdog timeout (1s) at most", took)
		}
	case <-time.After(12 * time.Second):
		t.Fatal("Close did not return within 12s with Redis paused and a fair waiter queued")
	}
	if err := <-waited; !errors.Is(err, relock.ErrClosed) {
		t.Fatalf("the waiter's Lock: %v, want ErrClosed", err)
	}
}
