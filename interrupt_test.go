package relock_test

import (
	"testing"
	"time"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// A MultiLock waiting for a part another owner holds rides out broken connections, as an RLock's waiter
// does, and gets the lock once it is free.
func TestMultiLockWaiterRidesOutBrokenConnections(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := startProxy(t, srv)
	c := clientAt(t, proxy.Addr, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	holder := newClient(t, srv, nil)
	if err := holder.Lock("ride-held").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	proxy.SetLatency(20 * time.Millisecond) // rounds spend most of their time in flight
	multi := relock.NewMultiLock(c.Lock("ride-held"), c.Lock("ride-free"))
	owner := relock.WithOwner(ctx, "waiter")
	waited := make(chan error, 1)
	go func() { waited <- multi.Lock(owner) }()
	time.Sleep(300 * time.Millisecond) // waiting, past its first round
	for range 10 {
		proxy.Cut() // every call in flight fails: the connection broke
		time.Sleep(50 * time.Millisecond)
		select {
		case err := <-waited:
			t.Fatalf("the waiter gave up on a broken connection: %v", err)
		default:
		}
	}
	if err := holder.Lock("ride-held").Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("the waiter: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the lock once it was free")
	}
	if err := multi.Unlock(owner); err != nil {
		t.Fatal(err)
	}
}
