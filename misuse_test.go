package relock_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relock-go/relock"
)

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
	// Nobody of this Client holds it: the message still says who the caller is and what the default is.
	err = w.Unlock(ctx)
	if msg := fmt.Sprint(err); !errors.Is(err, relock.ErrNotHeld) || strings.Contains(msg, "held instead") ||
		!strings.Contains(msg, "the default owner is the calling goroutine") {
		t.Errorf("Unlock of a free lock: %v", err)
	}
}
