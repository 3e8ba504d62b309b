package relock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/relock-go/relock/internal/redistest"
)

// A permit whose renewal Redis ran in time, but whose reply is handled after the permit's local expiry
// (the Client's goroutine ran late), is renewed and stays its owner's: Held counts it again once the reply
// is handled, and Release(n) gives it back.
func TestPermitRenewedLateStaysWithItsOwner(t *testing.T) {
	srv := redistest.Start(t)
	c, r := newHookedClient(t, srv, &Options{WatchdogTimeout: 6 * time.Second})
	late := make(chan struct{})
	reply := sync.OnceFunc(func() { close(late) })
	defer reply()
	r.set(&r.batchAnswered, func() { <-late })
	ctx, cancel := context.WithTimeout(WithOwner(context.Background(), "owner"), 30*time.Second)
	defer cancel()
	s := c.PermitSemaphore("late-renewal")
	if _, err := s.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	p, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	acquired := time.Now()
	hc, err := p.Context(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The renewal, sent at 2 s, ran in Redis then (the permit now expires there at 8 s); its reply is held
	// past the permit's local expiry, 6 s after its acquisition was sent.
	time.Sleep(time.Until(acquired.Add(6*time.Second + 200*time.Millisecond)))
	if n, err := s.Held(ctx); n != 0 || err != nil {
		t.Fatalf("Held past the permit's local expiry, its renewal's reply not handled = %d, %v; want 0", n, err)
	}
	reply()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := s.Held(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Held = %d after the renewal's reply was handled, want 1 (context: %v)", n, context.Cause(hc))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.Release(ctx, 1); err != nil {
		t.Fatalf("Release(1) of the renewed permit = %v", err)
	}
	if !errors.Is(context.Cause(hc), context.Canceled) {
		t.Fatalf("the permit ended with %v, want released", context.Cause(hc))
	}
	if n, err := s.AvailablePermits(ctx); n != 1 || err != nil {
		t.Fatalf("AvailablePermits = %d, %v after the release, want 1", n, err)
	}
}

// A renewal that Redis runs just after the owner's release gave the hold back finds it gone; when its
// reply is handled before the release's, the hold still ends released, not lost: for a permit
// (Permit.Release) and for a lock (Unlock).
func TestRenewalDuringReleaseIsNoLoss(t *testing.T) {
	for _, kind := range []string{"permit", "lock"} {
		t.Run(kind, func(t *testing.T) {
			srv := redistest.Start(t)
			c, r := newHookedClient(t, srv, &Options{WatchdogTimeout: 3 * time.Second})
			ctx, cancel := context.WithTimeout(WithOwner(context.Background(), "owner"), 30*time.Second)
			defer cancel()
			batchWaiting, sendBatch := make(chan struct{}), make(chan struct{})
			send := sync.OnceFunc(func() { close(sendBatch) })
			defer send()
			r.set(&r.batchSent, func() { close(batchWaiting); <-sendBatch })

			var hc context.Context
			var release func() error
			answered := &r.intAnswered
			switch kind {
			case "permit":
				s := c.PermitSemaphore("renewed-while-released")
				if _, err := s.TrySetPermits(ctx, 1); err != nil {
					t.Fatal(err)
				}
				p, err := s.Acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				hc, _ = p.Context(context.Background())
				release, answered = func() error { return p.Release(ctx) }, &r.intsAnswered
			case "lock":
				l := c.Lock("renewed-while-released")
				if err := l.Lock(ctx); err != nil {
					t.Fatal(err)
				}
				hc, _ = l.HoldContext(WithOwner(context.Background(), "owner"))
				release = func() error { return l.Unlock(ctx) }
			}
			<-batchWaiting // the renewal is due, and held before it is sent
			releaseRan, letRelease := make(chan struct{}), make(chan struct{})
			let := sync.OnceFunc(func() { close(letRelease) })
			defer let()
			r.set(answered, func() { close(releaseRan); <-letRelease })
			released := make(chan error, 1)
			go func() { released <- release() }()
			<-releaseRan // Redis ran the release; its reply is held
			renewalAnswered := make(chan struct{})
			r.set(&r.batchAnswered, func() { close(renewalAnswered) })
			send() // the renewal runs: the hold is gone
			<-renewalAnswered
			select { // the watchdog handles the renewal's reply
			case <-hc.Done():
			case <-time.After(500 * time.Millisecond):
			}
			let()
			if err := <-released; err != nil {
				t.Fatal(err)
			}
			if !errors.Is(context.Cause(hc), context.Canceled) {
				t.Fatalf("the hold ended with %v, want released", context.Cause(hc))
			}
		})
	}
}

// PermitSemaphore.Release and Permit.Release of the same permit at once, on Redis: the first to run gives
// it back; the other finds it gone and returns ErrNotHeld, its reply handled first here. The permit ends
// released, not lost.
func TestPermitReleasedTwiceAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	c, r := newHookedClient(t, srv, &Options{WatchdogTimeout: 3 * time.Second})
	ctx, cancel := context.WithTimeout(WithOwner(context.Background(), "owner"), 30*time.Second)
	defer cancel()
	s := c.PermitSemaphore("released-twice")
	if _, err := s.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	p, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hc, _ := p.Context(context.Background())
	firstRan, letFirst := make(chan struct{}), make(chan struct{})
	let := sync.OnceFunc(func() { close(letFirst) })
	defer let()
	r.set(&r.intsAnswered, func() { close(firstRan); <-letFirst })
	first := make(chan error, 1)
	go func() { first <- s.Release(ctx, 1) }()
	<-firstRan // Redis gave the permit back; the reply is held
	if err := p.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Permit.Release after PermitSemaphore.Release gave the permit back = %v, want ErrNotHeld", err)
	}
	if hc.Err() != nil {
		t.Fatalf("the permit ended with %v before the release that gave it back was answered", context.Cause(hc))
	}
	let()
	if err := <-first; err != nil {
		t.Fatalf("PermitSemaphore.Release = %v", err)
	}
	if !errors.Is(context.Cause(hc), context.Canceled) {
		t.Fatalf("the permit ended with %v, want released", context.Cause(hc))
	}
	if n, err := s.AvailablePermits(ctx); n != 1 || err != nil {
		t.Fatalf("AvailablePermits = %d, %v, want 1: given back once", n, err)
	}
}
