package relock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/relock-go/relock/internal/redistest"
)

// The gate's handoffs in their races, on real Redis (see gates): a waiter that gives up while a release
// hands it the lock, and a handoff whose reply is lost. Either way the lock must not stay with nobody.

// behindLocalHolder has owner "A" of a new Client take the Lock name, then starts a Lock of owner "W" on
// the same Client with wctx, and returns once W sleeps in the Client's gate as its head, asking Redis no
// more: a release of A's hands it the lock.
func behindLocalHolder(t *testing.T, srv *redistest.Server, name string, wctx context.Context) (*Client, *gatedRunner, context.Context, <-chan error) {
	t.Helper()
	c := newTestClient(t, srv)
	g := gateScripts(c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	a := WithOwner(ctx, "A")
	if err := c.Lock(name).Lock(a); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- c.Lock(name).Lock(WithOwner(wctx, "W")) }()
	until(t, "W sleeps in the gate", func() bool {
		c.gates.mu.Lock()
		defer c.gates.mu.Unlock()
		gt := c.gates.m[name]
		return gt != nil && gt.head != nil && gt.head.phase == wSleeping && g.ran(scriptAcquire) == 3 // A's, and W's two
	})
	return c, g, a, got
}

func TestHandoffToAWaiterThatGaveUpIsUndone(t *testing.T) {
	srv := redistest.Start(t)
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	c, g, a, got := behindLocalHolder(t, srv, "gave-up", wctx)
	held, resume := g.arm(scriptHandoff, false)
	defer resume()
	unlocked := make(chan error, 1)
	go func() { unlocked <- c.Lock("gave-up").Unlock(a) }()
	<-held // the release that hands W the lock waits to be sent
	wcancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("W = %v, want its ctx's error", err)
	}
	resume()
	if err := <-unlocked; err != nil {
		t.Fatalf("A's Unlock: %v", err)
	}
	// The hold handed to W, which had gone, is released: the lock is free again.
	rdb := c.rdb
	until(t, "the lock is free", func() bool {
		n, _ := rdb.Do(context.Background(), rdb.B().Exists().Key("gave-up").Build()).AsInt64()
		return n == 0
	})
	if ok, err := c.Lock("gave-up").TryLock(WithOwner(context.Background(), "B"), 0, 0); !ok || err != nil {
		t.Fatalf("TryLock after W gave up = %v, %v; want the lock", ok, err)
	}
}

func TestHandoffWhoseReplyIsLostIsUndone(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, g, a, got := behindLocalHolder(t, srv, "cut", ctx)
	g.cut.Store(scriptHandoff)
	// The release ran, but its reply was lost: A's Unlock cannot tell it released (a repeat finds A holds
	// nothing), and W's handoff is undone, after which W acquires as a waiter does.
	if err := c.Lock("cut").Unlock(a); err != nil && !errors.Is(err, ErrNotHeld) {
		t.Fatalf("A's Unlock = %v; want nil or ErrNotHeld", err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("W: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("W still waits 5 s after the lock was released")
	}
	w := WithOwner(ctx, "W")
	if n, err := c.Lock("cut").HoldCount(w); n != 1 || err != nil {
		t.Fatalf("W's hold count = %d, %v; want 1 (the handoff's hold was undone, or taken as W's only hold)", n, err)
	}
	if err := c.Lock("cut").Unlock(w); err != nil {
		t.Fatal(err)
	}
	rdb := c.rdb
	if n, _ := rdb.Do(ctx, rdb.B().Exists().Key("cut").Build()).AsInt64(); n != 0 {
		t.Fatal("the lock is still there after W's Unlock")
	}
}
