package relock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// The hub's subscription connection survives a busy server: while a slow script runs, Redis answers BUSY
// to nearly every command, UNSUBSCRIBE included, and rueidis (v1.0.79) then takes that reply for the PING it
// sends after an UNSUBSCRIBE and panics on the PING's own reply, ending the process (safety/explore found
// it: a waiter gave up while Redis was busy). The hub never sends UNSUBSCRIBE: a channel nobody needs
// lingers while others are needed, and then moves the others to a new connection (see rotatingConn).
func TestHubSurvivesBusyServer(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	holder, waiters := newClient(t, srv, nil), newClient(t, srv, nil)
	rdb, busy := rawClient(t, srv), rawClient(t, srv)
	ctx := ctxTimeout(t, 30*time.Second)
	do(t, rdb, "CONFIG", "SET", "lua-time-limit", "100") // BUSY replies once a script has run 100 ms
	for _, name := range []string{"busy-a", "busy-b"} {
		if err := holder.Lock(name).Lock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	actx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	a, b := make(chan error, 1), make(chan error, 1)
	go func() { a <- waiters.Lock("busy-a").Lock(actx) }()
	bctx := relock.WithOwner(ctx, "b")
	go func() { b <- waiters.Lock("busy-b").Lock(bctx) }()
	wake := func(name string) string { return "relock_lock_wake:{" + name + "}:" + waiters.ID() }
	eventually(t, 5*time.Second, "both waiters listen", func() bool {
		return listening(t, rdb, wake("busy-a")) && listening(t, rdb, wake("busy-b"))
	})
	// Redis is busy for 2.5 s; 200 ms in, a's waiter gives up: its channel is needed no more, b's is.
	scriptDone := make(chan error, 1)
	go func() {
		scriptDone <- busy.Do(ctx, busy.B().Eval().Script(busyScript).Numkeys(0).Arg("2500").Build()).Error()
	}()
	time.Sleep(200 * time.Millisecond)
	giveUp()
	if err := <-a; !errors.Is(err, context.Canceled) {
		t.Fatalf("a's waiter = %v; want its ctx's error", err)
	}
	if err := <-scriptDone; err != nil {
		t.Fatalf("the busy script: %v", err)
	}
	if n := max(commandStat(t, rdb, "unsubscribe", "calls"), 0) + max(commandStat(t, rdb, "unsubscribe", "rejected_calls"), 0); n != 0 {
		t.Fatalf("UNSUBSCRIBE sent %d times", n)
	}
	// The hub goes on: b's waiter gets its lock when it is released, and a's channel goes.
	if err := holder.Lock("busy-b").Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-b:
		if err != nil {
			t.Fatalf("b's waiter: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("b's waiter still waits 5 s after its lock was released")
	}
	eventually(t, 5*time.Second, "a's channel is dropped", func() bool { return !listening(t, rdb, wake("busy-a")) })
	if err := waiters.Lock("busy-b").Unlock(bctx); err != nil {
		t.Fatal(err)
	}
	if err := holder.Lock("busy-a").Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// The same on a cluster, where the hub holds each channel on a connection of its own: a waiter that gives up
// while the nodes run a slow script must not crash the process (rueidis's Receive, which the hub used, left
// the hub to send UNSUBSCRIBE, and crashed here), and the other waiters go on.
func TestClusterHubSurvivesBusyNode(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	d := &deployment{kind: "cluster", addrs: cl.Addrs(), servers: cl.Servers}
	holder, waiters := d.client(t, nil), d.client(t, nil)
	ctx := ctxTimeout(t, 60*time.Second)
	const a, b = "{busy}-a", "{busy}-b" // one node for both
	var nodes, busy []rueidis.Client    // every node is busy: the channels' nodes among them
	for _, srv := range cl.Servers {
		for _, to := range []*[]rueidis.Client{&nodes, &busy} {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true, ForceSingleClient: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			*to = append(*to, c)
		}
		do(t, nodes[len(nodes)-1], "CONFIG", "SET", "lua-time-limit", "100")
	}
	for _, name := range []string{a, b} {
		if err := holder.Lock(name).Lock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	actx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	ach, bch := make(chan error, 1), make(chan error, 1)
	go func() { ach <- waiters.Lock(a).Lock(actx) }()
	bctx := relock.WithOwner(ctx, "b")
	go func() { bch <- waiters.Lock(b).Lock(bctx) }()
	time.Sleep(500 * time.Millisecond) // both waiters listen
	scriptDone := make(chan error, len(busy))
	for _, c := range busy {
		go func() {
			scriptDone <- c.Do(ctx, c.B().Eval().Script(busyScript).Numkeys(0).Arg("2500").Build()).Error()
		}()
	}
	time.Sleep(200 * time.Millisecond)
	giveUp()
	if err := <-ach; !errors.Is(err, context.Canceled) {
		t.Fatalf("a's waiter = %v; want its ctx's error", err)
	}
	for range busy {
		if err := <-scriptDone; err != nil {
			t.Fatalf("the busy script: %v", err)
		}
	}
	for _, node := range nodes {
		if n := max(commandStat(t, node, "unsubscribe", "calls"), 0) + max(commandStat(t, node, "unsubscribe", "rejected_calls"), 0); n != 0 {
			t.Fatalf("UNSUBSCRIBE sent %d times", n)
		}
	}
	if err := holder.Lock(b).Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-bch:
		if err != nil {
			t.Fatalf("b's waiter: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("b's waiter still waits 5 s after its lock was released")
	}
	if err := waiters.Lock(b).Unlock(bctx); err != nil {
		t.Fatal(err)
	}
	if err := holder.Lock(a).Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
