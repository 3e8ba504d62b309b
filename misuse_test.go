package relock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relock-go/relock"
)

// TryAcquire that gets no permit says so with ok = false (and a nil error), as every Try method does; the
// nil *Permit it returns is safe to use: Release (as in `defer p.Release(ctx)`), Context and ID report
// that there is no permit instead of panicking.
func TestTryAcquireWithoutPermitIsSafe(t *testing.T) {
	t.Parallel()
	d := standalone(t)
	c := d.client(t, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	s := c.PermitSemaphore("one-permit")
	if _, err := s.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	held, ok, err := s.TryAcquire(ctx, 0, 0)
	if !ok || err != nil || held == nil {
		t.Fatalf("TryAcquire of a free permit = %v, %v, %v", held, ok, err)
	}
	p, ok, err := s.TryAcquire(ctx, 100*time.Millisecond, 0)
	if ok || err != nil || p != nil {
		t.Fatalf("TryAcquire whose wait ran out = %v, %v, %v; want nil, false, nil", p, ok, err)
	}
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("a nil *Permit's method panicked: %v", r)
			}
		}()
		if err := p.Release(ctx); !errors.Is(err, relock.ErrNotHeld) {
			t.Errorf("nil Permit.Release = %v, want ErrNotHeld", err)
		}
		if hc, err := p.Context(ctx); hc != nil || !errors.Is(err, relock.ErrNotHeld) {
			t.Errorf("nil Permit.Context = %v, %v; want nil, ErrNotHeld", hc, err)
		}
		if id := p.ID(); id != "" {
			t.Errorf("nil Permit.ID = %q", id)
		}
		var zero relock.Permit
		if err := zero.Release(ctx); !errors.Is(err, relock.ErrNotHeld) {
			t.Errorf("zero Permit.Release = %v, want ErrNotHeld", err)
		}
	}()
	if n, _ := s.AvailablePermits(ctx); n != 0 {
		t.Fatalf("available permits = %d after the nil permit's Release, want 0: the held one stays held", n)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Every method of a nil *Semaphore, *PermitSemaphore, *CountDownLatch and *Election returns ErrNilClient,
// as a nil *RLock's do, and a nil *Permit's ErrNotHeld: none panics.
func TestNilSynchronizersReturnTypedErrors(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeout(t, 10*time.Second)
	var (
		s *relock.Semaphore
		p *relock.PermitSemaphore
		l *relock.CountDownLatch
		e *relock.Election
		q *relock.Permit
	)
	calls := map[string]func() error{
		"Semaphore.Acquire":                func() error { return s.Acquire(ctx, 1) },
		"Semaphore.TryAcquire":             func() error { _, err := s.TryAcquire(ctx, 1, 0); return err },
		"Semaphore.Release":                func() error { return s.Release(ctx, 1) },
		"Semaphore.AddPermits":             func() error { return s.AddPermits(ctx, 1) },
		"Semaphore.TrySetPermits":          func() error { _, err := s.TrySetPermits(ctx, 1); return err },
		"Semaphore.AvailablePermits":       func() error { _, err := s.AvailablePermits(ctx); return err },
		"Semaphore.DrainPermits":           func() error { _, err := s.DrainPermits(ctx); return err },
		"PermitSemaphore.Acquire":          func() error { _, err := p.Acquire(ctx); return err },
		"PermitSemaphore.TryAcquire":       func() error { _, _, err := p.TryAcquire(ctx, 0, 0); return err },
		"PermitSemaphore.Release":          func() error { return p.Release(ctx, 1) },
		"PermitSemaphore.Held":             func() error { _, err := p.Held(ctx); return err },
		"PermitSemaphore.AddPermits":       func() error { return p.AddPermits(ctx, 1) },
		"PermitSemaphore.TrySetPermits":    func() error { _, err := p.TrySetPermits(ctx, 1); return err },
		"PermitSemaphore.AvailablePermits": func() error { _, err := p.AvailablePermits(ctx); return err },
		"CountDownLatch.TrySetCount":       func() error { _, err := l.TrySetCount(ctx, 1); return err },
		"CountDownLatch.CountDown":         func() error { return l.CountDown(ctx) },
		"CountDownLatch.Count":             func() error { _, err := l.Count(ctx); return err },
		"CountDownLatch.Await":             func() error { return l.Await(ctx) },
		"CountDownLatch.TryAwait":          func() error { _, err := l.TryAwait(ctx, 0); return err },
		"Election.Campaign":                func() error { _, err := e.Campaign(ctx, "v"); return err },
		"Election.Resign":                  func() error { return e.Resign(ctx) },
		"Election.LeadershipContext":       func() error { _, err := e.LeadershipContext(ctx); return err },
		"Election.Leader":                  func() error { _, err := e.Leader(ctx); return err },
		"Election.Observe":                 func() error { _, err := e.Observe(ctx); return err },
		"Election.Run":                     func() error { return e.Run(ctx, "v", func(context.Context, uint64) error { return nil }) },
		"Permit.Release":                   func() error { return q.Release(ctx) },
		"Permit.Context":                   func() error { _, err := q.Context(ctx); return err },
	}
	for name, call := range calls {
		want := relock.ErrNilClient
		if strings.HasPrefix(name, "Permit.") {
			want = relock.ErrNotHeld
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s on a nil receiver panicked: %v", name, r)
				}
			}()
			if err := call(); !errors.Is(err, want) {
				t.Errorf("%s on a nil receiver = %v, want %v", name, err, want)
			}
		}()
	}
	if s.Name() != "" || p.Name() != "" || l.Name() != "" || e.Name() != "" || q.ID() != "" {
		t.Error("a nil receiver's Name or ID is not empty")
	}
}

// An Unlock (or HoldContext, FencingToken, a permit's Release, a Resign) by an owner that does not hold
// the lock, while another owner of the same Client does, says who the caller's owner is and who holds it,
// and that the default owner is the calling goroutine (WithOwner for another): the commonest mistake, a
// release from another goroutine than the one that locked. It still matches ErrNotHeld.
func TestNotHeldSaysWhoTheOwnerIs(t *testing.T) {
	t.Parallel()
	d := standalone(t)
	c := d.client(t, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	l := c.Lock("owned", relock.WithFencing())
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	s := c.PermitSemaphore("owned-permits")
	if _, err := s.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Election("owned-election").Campaign(ctx, "v"); err != nil {
		t.Fatal(err)
	}
	holder := relock.CallerToken(ctx)
	var errs []error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // another goroutine, without WithOwner: another owner
		defer wg.Done()
		errs = append(errs, l.Unlock(ctx))
		_, err := l.HoldContext(ctx)
		errs = append(errs, err)
		_, err = l.FencingToken(ctx)
		errs = append(errs, err)
		errs = append(errs, s.Release(ctx, 1))
		errs = append(errs, c.Election("owned-election").Resign(ctx))
	}()
	wg.Wait()
	for i, err := range errs {
		msg := fmt.Sprint(err)
		if !errors.Is(err, relock.ErrNotHeld) || !strings.Contains(msg, "held instead by goroutine "+holder) ||
			!strings.Contains(msg, "of this Client") || !strings.Contains(msg, "the default owner is the calling goroutine") ||
			!strings.Contains(msg, "WithOwner") {
			t.Errorf("call %d from another goroutine: %v; want ErrNotHeld naming the caller and goroutine %s, and WithOwner", i, err, holder)
		}
	}
	for _, err := range errs {
		t.Logf("from another goroutine: %v", err)
	}

	// With owner tokens: the caller's token and the holder's are named.
	w := c.Lock("owned-by-token")
	if err := w.Lock(relock.WithOwner(ctx, "job-1")); err != nil {
		t.Fatal(err)
	}
	err := w.Unlock(relock.WithOwner(ctx, "job-2"))
	if msg := fmt.Sprint(err); !errors.Is(err, relock.ErrNotHeld) || !strings.Contains(msg, `owner token "job-2" of this Client`) ||
		!strings.Contains(msg, `held instead by owner token "job-1"`) {
		t.Errorf("Unlock with another token: %v", err)
	}
	t.Logf("with another token: %v", err)
	if err := w.Unlock(relock.WithOwner(ctx, "job-1")); err != nil {
		t.Fatal(err)
	}
	// Nobody of this Client holds it: the message says who the caller is, and that no owner of this Client
	// holds it; no WithOwner hint, which would send the reader after a mix-up of owners that did not happen.
	err = w.Unlock(ctx)
	if msg := fmt.Sprint(err); !errors.Is(err, relock.ErrNotHeld) || strings.Contains(msg, "held instead") ||
		!strings.Contains(msg, "no owner of this Client holds it") || strings.Contains(msg, "WithOwner") {
		t.Errorf("Unlock of a free lock: %v", err)
	}
	t.Logf("of a free lock: %v", err)
}
