package relockgoredis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	relockgoredis "github.com/relock-go/relock/goredis"
	"github.com/relock-go/relock/internal/faultnet"
	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/internal/testutil"
)

func newGoRedis(t testing.TB, addr string, ctxTimeout bool) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: ctxTimeout})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func newClient(t testing.TB, rdb redis.UniversalClient, opts *relock.Options) *relock.Client {
	t.Helper()
	c, err := relockgoredis.New(rdb, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// New refuses what it cannot run on with a typed error, and sends nothing.
func TestNewRefusesNilAndRing(t *testing.T) {
	t.Parallel()
	if _, err := relockgoredis.New(nil, nil); !errors.Is(err, relock.ErrNilClient) {
		t.Fatalf("New(nil) = %v, want ErrNilClient", err)
	}
	var none *redis.Client
	if _, err := relockgoredis.New(none, nil); !errors.Is(err, relock.ErrNilClient) {
		t.Fatalf("New((*redis.Client)(nil)) = %v, want ErrNilClient", err)
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	if _, err := relockgoredis.New(ring, nil); !errors.Is(err, relock.ErrInvalidOptions) {
		t.Fatalf("New(ring) = %v, want ErrInvalidOptions", err)
	}
}

// A lock taken on go-redis is Redisson's layout, as on rueidis: the lock's hash with the owner's field
// and the hold count, the watchdog's time to live; and a relock Client on rueidis sees it held.
func TestSameKeysAsOnRueidis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, newGoRedis(t, srv.Addr(), true), nil)
	ctx := testutil.Ctx(t, 10*time.Second)
	own := relock.WithOwner(ctx, "job")
	if err := c.Lock("orders").Lock(own); err != nil {
		t.Fatal(err)
	}
	raw := testutil.Raw(t, srv.Addr())
	if n, err := testutil.Do(t, raw, "HGET", "orders", c.ID()+":job").AsInt64(); n != 1 || err != nil {
		t.Fatalf("HGET orders %s:job = %d, %v; want 1", c.ID(), n, err)
	}
	if ms, _ := testutil.Do(t, raw, "PTTL", "orders").AsInt64(); ms < 20000 || ms > 30000 {
		t.Fatalf("PTTL orders = %d ms, want the watchdog's 30 s", ms)
	}
	other := testutil.Client(t, []string{srv.Addr()}, nil)
	if ok, err := other.Lock("orders").TryLock(ctx, 0, 0); ok || err != nil {
		t.Fatalf("relock on rueidis: TryLock of a lock held on go-redis = %v, %v; want false", ok, err)
	}
	if err := c.Lock("orders").Unlock(own); err != nil {
		t.Fatal(err)
	}
	if ok, err := other.Lock("orders").TryLock(ctx, 0, 0); !ok || err != nil {
		t.Fatalf("relock on rueidis: TryLock once released on go-redis = %v, %v; want true", ok, err)
	}
}

// go-redis sends a command again when its connection breaks after it was written (MaxRetries, 3 by
// default). A script must not run twice: here the acquisition ran, its reply was lost, and a second run
// would have re-entered the lock (count 2), which relock's undo of the failed call would leave at 1, held
// by no one who knows it. relock's scripts go out with go-redis's NoRetry: the call fails, relock undoes
// the acquisition, and the lock is free.
func TestScriptsAreNotSentTwice(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy, err := faultnet.Start(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr, ContextTimeoutEnabled: true, MaxRetries: 3})
	t.Cleanup(func() { rdb.Close() })
	c := newClient(t, rdb, nil)
	raw := testutil.Raw(t, srv.Addr())
	ctx := testutil.Ctx(t, 20*time.Second)
	if err := rdb.Ping(ctx).Err(); err != nil { // the connection is made, and relock's scripts loaded below
		t.Fatal(err)
	}
	l := c.Lock("once")
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	proxy.Stall(faultnet.Downstream, true)
	done := make(chan error, 1)
	go func() { done <- l.LockWithLease(ctx, 10*time.Second) }()
	for testutil.Do(t, raw, "EXISTS", "once").Error() == nil {
		if n, _ := testutil.Do(t, raw, "EXISTS", "once").AsInt64(); n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	proxy.Cut() // the reply, held back, is lost with the connection
	proxy.Stall(faultnet.Downstream, false)
	err = <-done
	if err == nil {
		// The reply came before the cut after all: the hold is the one acquisition's.
		n, herr := l.HoldCount(ctx)
		for i := 0; herr != nil && i < 50; i++ { // a pooled connection the cut broke
			time.Sleep(20 * time.Millisecond)
			n, herr = l.HoldCount(ctx)
		}
		if n != 1 {
			t.Fatalf("HoldCount = %d, %v after one acquisition", n, herr)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, _ := testutil.Do(t, raw, "EXISTS", "once").AsInt64()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			count, _ := testutil.Do(t, raw, "HGETALL", "once").AsStrMap()
			t.Fatalf("the lock is still held (%v) 5 s after the call (%v): the script ran twice", count, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Without ContextTimeoutEnabled go-redis reads a reply until its ReadTimeout (3 s); relock's calls end
// at their own deadline all the same, while Redis does not answer.
func TestCallsEndAtTheirDeadlineWhileRedisIsStalled(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, newGoRedis(t, srv.Addr(), false), nil)
	ctx := testutil.Ctx(t, 20*time.Second)
	l := c.Lock("stalled")
	if err := l.Lock(ctx); err != nil { // scripts loaded, connections made
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer srv.Resume()
	for _, call := range []struct {
		name string
		run  func(ctx context.Context) error
	}{
		{"Lock of another name", func(ctx context.Context) error { return c.Lock("other").Lock(ctx) }},
		{"IsLocked", func(ctx context.Context) error { _, err := l.IsLocked(ctx); return err }},
	} {
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		start := time.Now()
		err := call.run(cctx)
		took := time.Since(start)
		cancel()
		if err == nil {
			t.Fatalf("%s while Redis is stalled: nil error", call.name)
		}
		if took > 1500*time.Millisecond {
			t.Fatalf("%s took %v with a 300 ms deadline (go-redis's ReadTimeout is 3 s): %v", call.name, took, err)
		}
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A waiter is woken by the holder's release, not by the lock's expiry (30 s here): relock's pub/sub runs
// on go-redis's PubSub. After its subscription connection is killed, relock subscribes again and a waiter
// is woken as before.
func TestWaitersAreWokenByTheRelease(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	holder := newClient(t, newGoRedis(t, srv.Addr(), true), nil)
	waiter := newClient(t, newGoRedis(t, srv.Addr(), false), nil)
	raw := testutil.Raw(t, srv.Addr())
	ctx := testutil.Ctx(t, 20*time.Second)
	for round := range 2 {
		h := relock.WithOwner(ctx, "holder")
		if err := holder.Lock("woken").Lock(h); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			w := relock.WithOwner(ctx, "waiter")
			err := waiter.Lock("woken").Lock(w)
			if err == nil {
				err = waiter.Lock("woken").Unlock(w)
			}
			got <- err
		}()
		for !subscribed(t, raw, "redisson_lock__channel:{woken}") && !subscribed(t, raw, "relock_lock_wake:{woken}:*") {
			time.Sleep(5 * time.Millisecond)
		}
		if round == 1 {
			// The waiter's subscription connection goes; relock subscribes again, and the waiter tries.
			testutil.Do(t, raw, "CLIENT", "KILL", "TYPE", "pubsub")
		}
		time.Sleep(50 * time.Millisecond)
		start := time.Now()
		if err := holder.Lock("woken").Unlock(h); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Fatalf("round %d: the waiter got the lock %v after the release", round, took)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the waiter was not woken by the release", round)
		}
	}
}

// subscribed reports whether a client is subscribed to channel (a pattern of channels' names).
func subscribed(t testing.TB, raw rueidis.Client, channel string) bool {
	channels, _ := testutil.Do(t, raw, "PUBSUB", "CHANNELS", channel).AsStrSlice()
	return len(channels) > 0
}

// The watch of holds runs on a single server: a hold deleted behind relock's back is seen lost at once,
// long before the renewal (10 s here) would find it. Its connection is made from the go-redis client's
// options: here a user, its password and a database other than 0, without which it could not read the
// hold.
func TestHoldLossSeenAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts func(addr string) *redis.Options
	}{
		{"plain", func(addr string) *redis.Options { return &redis.Options{Addr: addr} }},
		{"user-db", func(addr string) *redis.Options {
			return &redis.Options{Addr: addr, Username: "app", Password: "secret", DB: 3, ContextTimeoutEnabled: true}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			if tc.name == "user-db" { // the default user needs a password of its own: the watch must log in as app
				admin := testutil.Raw(t, srv.Addr())
				testutil.Do(t, admin, "ACL", "SETUSER", "app", "on", ">secret", "~*", "&*", "+@all")
				testutil.Do(t, admin, "ACL", "SETUSER", "default", "resetpass", ">admin")
			}
			o := tc.opts(srv.Addr())
			rdb := redis.NewClient(o)
			t.Cleanup(func() { rdb.Close() })
			c := newClient(t, rdb, nil)
			ctx := testutil.Ctx(t, 20*time.Second)
			l := c.Lock("watched")
			if err := l.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			hctx, err := l.HoldContext(ctx)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond) // the watch reads the hold, tracked
			if hctx.Err() != nil {             // a watch on another database, or another server, finds no hold
				t.Fatalf("the hold was taken as lost while it was held: %v", context.Cause(hctx))
			}
			start := time.Now()
			if err := rdb.Del(ctx, "watched").Err(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-hctx.Done():
				if took := time.Since(start); took > 2*time.Second {
					t.Fatalf("the loss was seen %v after the delete", took)
				}
				if !errors.Is(context.Cause(hctx), relock.ErrLockLost) {
					t.Fatalf("HoldContext's cause %v, want ErrLockLost", context.Cause(hctx))
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the loss was not seen within 5 s (the renewal comes at 10 s)")
			}
		})
	}
}
