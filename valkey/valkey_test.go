package relockvalkey_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/internal/testutil"
	relockvalkey "github.com/relock-go/relock/valkey"
)

func TestNewRefusesNil(t *testing.T) {
	t.Parallel()
	if _, err := relockvalkey.New(nil, nil); !errors.Is(err, relock.ErrNilClient) {
		t.Fatalf("New(nil) = %v, want ErrNilClient", err)
	}
}

// On a single server the watch of holds runs on valkey-go as on rueidis: a hold deleted behind relock's
// back is seen lost at once, long before the renewal (10 s here) would find it.
func TestHoldLossSeenAtOnceOnASingleServer(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	d := &deployment{addrs: []string{srv.Addr()}}
	c := d.client(t, nil)
	raw := testutil.Raw(t, srv.Addr())
	ctx := testutil.Ctx(t, 20*time.Second)
	l := c.Lock("watched")
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	hctx, err := l.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the watch reads the hold, tracked
	start := time.Now()
	testutil.Do(t, raw, "DEL", "watched")
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
}

// A waiter is woken by the holder's release, not by the lock's expiry (30 s).
func TestWaitersAreWokenByTheRelease(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	d := &deployment{addrs: []string{srv.Addr()}}
	holder, waiter := d.client(t, nil), d.client(t, nil)
	ctx := testutil.Ctx(t, 20*time.Second)
	if err := holder.Lock("woken").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	go func() {
		if err := waiter.Lock("woken").Lock(ctx); err != nil {
			t.Error(err)
		}
		got <- time.Now()
		_ = waiter.Lock("woken").Unlock(ctx)
	}()
	time.Sleep(300 * time.Millisecond)
	released := time.Now()
	if err := holder.Lock("woken").Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-got:
		if took := at.Sub(released); took > 2*time.Second {
			t.Fatalf("the waiter got the lock %v after the release", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken by the release")
	}
}
