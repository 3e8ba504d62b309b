package relock_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/relock-go/relock"
)

// onEach runs test on a server of its own and on the shared cluster.
func onEach(t *testing.T, test func(t *testing.T, d *deployment)) {
	t.Parallel()
	for _, where := range []string{"standalone", "cluster"} {
		t.Run(where, func(t *testing.T) {
			t.Parallel()
			d := onCluster(t, t.Name()+":")
			if where == "standalone" {
				d = standalone(t)
			}
			test(t, d)
		})
	}
}

func inspect(t *testing.T, c *relock.Client, name string) relock.LockState {
	t.Helper()
	st, err := c.Inspect(ctxTimeout(t, 5*time.Second), name)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", name, err)
	}
	return st
}

func TestInspectRLock(t *testing.T) {
	onEach(t, func(t *testing.T, d *deployment) {
		c := d.client(t, &relock.Options{WatchdogTimeout: 3 * time.Second})
		ctx := ctxTimeout(t, 10*time.Second)
		name := d.name("inspect-rlock")

		if st := inspect(t, c, name); st.Kind != relock.KindNone || st.Locked || len(st.Holders) != 0 || st.FencingToken != 0 {
			t.Fatalf("free lock: %+v", st)
		}

		l := c.Lock(name, relock.WithFencing())
		for range 2 {
			if err := l.Lock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		token, err := l.FencingToken(ctx)
		if err != nil {
			t.Fatal(err)
		}
		st := inspect(t, c, name)
		if st.Kind != relock.KindRLock || !st.Locked || st.Mode != "" || len(st.Holders) != 1 || st.FencingToken != token {
			t.Fatalf("held twice: %+v (token %d)", st, token)
		}
		h := st.Holders[0]
		if h.ClientID != c.ID() || !h.GoroutineOwner() || h.Count != 2 || h.Owner != c.ID()+":"+h.Token {
			t.Fatalf("holder %+v, client %s", h, c.ID())
		}
		if st.TTL <= 0 || st.TTL > 3*time.Second || h.TTL != st.TTL {
			t.Fatalf("TTL %v (holder %v), watchdog timeout 3s", st.TTL, h.TTL)
		}
		for range 2 {
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if st := inspect(t, c, name); st.Kind != relock.KindNone || st.Locked || st.FencingToken != token {
			t.Fatalf("released: %+v: want free, with the last token %d", st, token)
		}

		// A WithOwner token and a lease.
		jobCtx := relock.WithOwner(ctx, "job-7")
		if err := c.Lock(name).LockWithLease(jobCtx, time.Minute); err != nil {
			t.Fatal(err)
		}
		st = inspect(t, c, name)
		if len(st.Holders) != 1 || st.Holders[0].Token != "job-7" || st.Holders[0].GoroutineOwner() || st.TTL <= 50*time.Second || st.TTL > time.Minute {
			t.Fatalf("leased hold of job-7: %+v", st)
		}
	})
}

func TestInspectFairLockQueue(t *testing.T) {
	onEach(t, func(t *testing.T, d *deployment) {
		c := d.client(t, &relock.Options{WatchdogTimeout: 3 * time.Second})
		ctx := ctxTimeout(t, 20*time.Second)
		name := d.name("inspect-fair")
		l := c.FairLock(name)
		if err := l.Lock(relock.WithOwner(ctx, "holder")); err != nil {
			t.Fatal(err)
		}
		// Two waiters join the queue in turn.
		waitCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 2)
		for i, who := range []string{"first", "second"} {
			go func() { done <- l.Lock(relock.WithOwner(waitCtx, who)) }()
			eventually(t, 5*time.Second, who+" queued", func() bool {
				return inspect(t, c, name).QueueLen == i+1
			})
		}
		st := inspect(t, c, name)
		if st.Kind != relock.KindFairLock || len(st.Holders) != 1 || st.Holders[0].Token != "holder" || len(st.Queue) != 2 {
			t.Fatalf("state %+v", st)
		}
		for i, who := range []string{"first", "second"} {
			w := st.Queue[i]
			if w.Token != who || w.ClientID != c.ID() || w.Expires <= 0 || w.Expires > 3*time.Second {
				t.Fatalf("queue[%d] = %+v, want %s alive for at most the watchdog timeout", i, w, who)
			}
		}
		cancel()
		for range 2 {
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("waiter: %v", err)
			}
		}
		eventually(t, 5*time.Second, "queue empty", func() bool { return inspect(t, c, name).QueueLen == 0 })
		if st := inspect(t, c, name); st.Kind != relock.KindRLock || len(st.Queue) != 0 {
			t.Fatalf("a fair lock without waiters looks like an RLock: %+v", st)
		}
	})
}

func TestInspectReadWriteLock(t *testing.T) {
	onEach(t, func(t *testing.T, d *deployment) {
		c := d.client(t, &relock.Options{WatchdogTimeout: 3 * time.Second})
		ctx := ctxTimeout(t, 20*time.Second)
		name := d.name("inspect-rw")
		rw := c.ReadWriteLock(name, relock.WithWriterPriority())

		for i, who := range []string{"r1", "r2"} {
			for range i + 1 {
				if err := rw.ReadLock().Lock(relock.WithOwner(ctx, who)); err != nil {
					t.Fatal(err)
				}
			}
		}
		st := inspect(t, c, name)
		if st.Kind != relock.KindReadWriteLock || st.Mode != "read" || len(st.Holders) != 2 {
			t.Fatalf("two readers: %+v", st)
		}
		for i, h := range st.Holders {
			if h.Token != "r"+strconv.Itoa(i+1) || h.Count != i+1 || h.Mode != "read" || h.TTL <= 0 || h.TTL > 3*time.Second {
				t.Fatalf("reader %d: %+v", i, h)
			}
		}

		// A priority writer waits for the readers.
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- rw.WriteLock().Lock(relock.WithOwner(wctx, "w")) }()
		eventually(t, 5*time.Second, "writer waiting", func() bool { return inspect(t, c, name).QueueLen == 1 })
		st = inspect(t, c, name)
		if len(st.Queue) != 1 || st.Queue[0].Token != "w" || st.Queue[0].Expires <= 0 {
			t.Fatalf("waiting writer: %+v", st)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		for i, who := range []string{"r1", "r2"} {
			for range i + 1 {
				if err := rw.ReadLock().Unlock(relock.WithOwner(ctx, who)); err != nil {
					t.Fatal(err)
				}
			}
		}

		// A writer that also reads (a downgrade).
		wctx = relock.WithOwner(ctx, "w")
		if err := rw.WriteLock().Lock(wctx); err != nil {
			t.Fatal(err)
		}
		if err := rw.ReadLock().Lock(wctx); err != nil {
			t.Fatal(err)
		}
		st = inspect(t, c, name)
		if st.Mode != "write" || len(st.Holders) != 2 || st.Holders[0].Mode != "read" || st.Holders[1].Mode != "write" ||
			st.Holders[0].Token != "w" || st.Holders[1].Token != "w" || st.Holders[1].Owner != c.ID()+":w:write" {
			t.Fatalf("writer that reads: %+v", st)
		}
	})
}

func TestInspectRejects(t *testing.T) {
	d := standalone(t)
	c := d.client(t, nil)
	rdb := d.raw(t)
	ctx := ctxTimeout(t, 5*time.Second)
	do(t, rdb, "SET", "a-string", "x")
	do(t, rdb, "HSET", "a-hash", "views", "10")
	do(t, rdb, "HSET", "a-bad-count", "uuid:1", "many")
	do(t, rdb, "RPUSH", "a-list", "x")
	for _, tc := range []struct {
		name string
		ctx  context.Context
		c    *relock.Client
		want error
	}{
		{"a-string", ctx, c, relock.ErrNotALock},
		{"a-hash", ctx, c, relock.ErrNotALock},
		{"a-bad-count", ctx, c, relock.ErrNotALock},
		{"a-list", ctx, c, relock.ErrNotALock},
		{"", ctx, c, relock.ErrInvalidName},
		{"a}b", ctx, c, relock.ErrInvalidName},
		{"x", ctx, nil, relock.ErrNilClient},
		{"x", canceled(ctx), c, context.Canceled},
	} {
		if _, err := tc.c.Inspect(tc.ctx, tc.name); !errors.Is(err, tc.want) {
			t.Errorf("Inspect(%q) = %v, want %v", tc.name, err, tc.want)
		}
	}
	if v := do(t, rdb, "HGET", "a-hash", "views"); v.String() == "" {
		t.Fatal("Inspect changed the hash")
	}
}

func canceled(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	cancel()
	return ctx
}
