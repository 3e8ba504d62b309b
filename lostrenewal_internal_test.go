package relock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/relock-go/relock/internal/redistest"
)

// A hold whose renewals run in Redis but whose replies are lost is told it is lost at its expiry, though
// Redis still has it. The Client then gives it up there: another owner gets the lock at once, and the owner's
// next Lock starts a new hold that its one Unlock ends. (Before, the next Lock re-entered the stale hold:
// hold count 2, and after the Unlock the lock stayed held, renewed by the watchdog, by an owner that had
// released it.) The renewals run on real Redis; the gate loses their replies (gatedRunner.lose).
func TestHoldLostWithRepliesLostIsGivenUp(t *testing.T) {
	srv := redistest.Start(t)
	opts := &Options{WatchdogTimeout: 2 * time.Second}
	c, err := New([]string{srv.Addr()}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	other, err := New([]string{srv.Addr()}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	g := gateScripts(c)
	kinds := []struct {
		name string
		lock func(c *Client, name string) Lockable
	}{
		{"lock", func(c *Client, name string) Lockable { return c.Lock(name) }},
		{"fair", func(c *Client, name string) Lockable { return c.FairLock(name) }},
		{"write", func(c *Client, name string) Lockable { return c.ReadWriteLock(name).WriteLock() }},
		{"read", func(c *Client, name string) Lockable { return c.ReadWriteLock(name).ReadLock() }},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			name := "lost-replies-" + k.name
			owner := WithOwner(ctx, "owner")
			l := k.lock(c, name)
			if err := l.Lock(owner); err != nil {
				t.Fatal(err)
			}
			held, err := l.HoldContext(owner)
			if err != nil {
				t.Fatal(err)
			}
			g.lose.Store(true)
			select {
			case <-held.Done():
			case <-time.After(10 * time.Second):
				g.lose.Store(false)
				t.Fatal("the holder was not told that its renewals got no answer")
			}
			lostAt := time.Now()
			if !errors.Is(context.Cause(held), ErrLockLost) {
				t.Fatalf("the hold's context: %v, want ErrLockLost", context.Cause(held))
			}
			// Redis still had the hold, renewed a moment ago: the Client gives it up, and the other owner
			// gets in well before the hold's time to live (the watchdog timeout) runs out.
			got, err := k.lock(other, name).TryLock(WithOwner(ctx, "other"), 10*time.Second, 0)
			if err != nil || !got {
				t.Fatalf("the other owner's TryLock = %v, %v", got, err)
			}
			if waited := time.Since(lostAt); waited > time.Second {
				t.Errorf("the other owner got the lock %v after the loss, want at once (the Client gives the hold up)", waited)
			}
			if err := k.lock(other, name).Unlock(WithOwner(ctx, "other")); err != nil {
				t.Fatal(err)
			}
			g.lose.Store(false)

			// The owner's next hold is a new one: one Unlock ends it.
			if err := l.Lock(owner); err != nil {
				t.Fatal(err)
			}
			if n, err := l.HoldCount(owner); err != nil || n != 1 {
				t.Fatalf("HoldCount after the next Lock = %d, %v; want 1", n, err)
			}
			if err := l.Unlock(owner); err != nil {
				t.Fatal(err)
			}
			if locked, err := k.lock(other, name).IsLocked(ctx); err != nil || locked {
				t.Fatalf("after the owner's one Unlock: IsLocked = %v, %v; want free", locked, err)
			}
		})
	}
}

// The same loss while the hold is still in Redis, but the owner locks again before the Client could give
// the hold up: the next Lock waits for that, and then starts a new hold. Its one Unlock ends it.
func TestLockAfterLostRepliesWaitsForTheGiveUp(t *testing.T) {
	srv := redistest.Start(t)
	c, err := New([]string{srv.Addr()}, &Options{WatchdogTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g := gateScripts(c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const name = "lost-replies-relock"
	l := c.Lock(name)
	owner := WithOwner(ctx, "owner")
	if err := l.Lock(owner); err != nil {
		t.Fatal(err)
	}
	held, err := l.HoldContext(owner)
	if err != nil {
		t.Fatal(err)
	}
	// The give-up's release waits at the gate, once its reply came: the hold is gone from Redis, but the
	// Client has not heard yet.
	gate, resume := g.arm(scriptRelease, true)
	defer resume()
	g.lose.Store(true)
	select {
	case <-held.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the holder was not told that its renewals got no answer")
	}
	g.lose.Store(false)
	select {
	case <-gate:
	case <-time.After(5 * time.Second):
		t.Fatal("the Client did not give the lost hold up")
	}
	locked := make(chan error, 1)
	go func() { locked <- l.Lock(owner) }()
	select {
	case err := <-locked:
		t.Fatalf("Lock returned (%v) before the give-up it must wait for was over", err)
	case <-time.After(200 * time.Millisecond):
	}
	resume()
	if err := <-locked; err != nil {
		t.Fatal(err)
	}
	if n, err := l.HoldCount(owner); err != nil || n != 1 {
		t.Fatalf("HoldCount = %d, %v; want 1", n, err)
	}
	if err := l.Unlock(owner); err != nil {
		t.Fatal(err)
	}
	if locked, err := l.IsLocked(ctx); err != nil || locked {
		t.Fatalf("after one Unlock: IsLocked = %v, %v; want free", locked, err)
	}
}

// A hold lost while Redis is down: the Client cannot give it up, and the owner's next Lock does not wait for
// that give-up to end (as long as the hold's time to live): it fails at once with ErrUnavailable, and
// succeeds once Redis is back and the give-up is over.
func TestLockAfterHoldLostWhileRedisIsDownFailsFast(t *testing.T) {
	srv := redistest.Start(t)
	c, err := New([]string{srv.Addr()}, &Options{WatchdogTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	owner := WithOwner(ctx, "owner")
	l := c.Lock("lost-while-down")
	if err := l.Lock(owner); err != nil {
		t.Fatal(err)
	}
	held, err := l.HoldContext(owner)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the holder was not told that its renewals failed")
	}
	start := time.Now()
	if err := l.Lock(owner); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Lock while Redis is down: %v, want ErrUnavailable", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Lock while Redis is down took %v, want it to fail at once", took)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := l.Lock(owner)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Lock after Redis came back: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n, err := l.HoldCount(owner); err != nil || n != 1 {
		t.Fatalf("HoldCount = %d, %v; want 1", n, err)
	}
	if err := l.Unlock(owner); err != nil {
		t.Fatal(err)
	}
}
