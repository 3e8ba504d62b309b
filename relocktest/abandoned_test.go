package relocktest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/relocktest"
)

// recordingTB is a test's testing.TB that records the errors reported to it instead of failing the test.
type recordingTB struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recordingTB) errors() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.errs...)
}

// A lock a goroutine took and did not release before it returned fails the test when it ends, saying
// what to do; the test's own holds, WithOwner holds, and a release still under way in the background
// (an Unlock whose context had ended) fail nothing.
func TestHoldOfAReturnedGoroutineFailsTheTest(t *testing.T) {
	t.Parallel()
	rec := &recordingTB{TB: t}
	srv := relocktest.NewServer(rec)
	c := srv.Client(nil)
	ctx := ctxTimeout(t, 10*time.Second)
	done := make(chan error)
	go func() { done <- c.Lock("forgotten").Lock(ctx) }() // returns holding it
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	go func() { done <- c.ReadWriteLock("forgotten-rw").WriteLock().Lock(ctx) }()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	go func() {
		l := c.Lock("released")
		if err := l.Lock(ctx); err != nil {
			done <- err
			return
		}
		done <- l.Unlock(ctx)
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	go func() { // released in the background: its Unlock's context had ended
		l := c.Lock("released-late")
		if err := l.Lock(ctx); err != nil {
			done <- err
			return
		}
		ended, cancel := context.WithCancel(ctx)
		cancel()
		if err := l.Unlock(ended); !errors.Is(err, context.Canceled) {
			done <- fmt.Errorf("Unlock with an ended context: %v, want context.Canceled", err)
			return
		}
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := c.Lock("the-tests-own").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	go func() { done <- c.Lock("shared").Lock(relock.WithOwner(ctx, "job")) }()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	srv.Close()
	errs := rec.errors()
	if len(errs) != 2 || !strings.Contains(errs[0], `"forgotten"`) || !strings.Contains(errs[1], `the write hold of "forgotten-rw"`) {
		t.Fatalf("Close reported %d holds: %q; want forgotten's and forgotten-rw's, not the others", len(errs), errs)
	}
	if !strings.Contains(errs[0], "which has returned") || !strings.Contains(errs[0], "WithOwner") {
		t.Fatalf("the report does not say what happened and what to do: %s", errs[0])
	}
	t.Log(errs[0])
}

// A Server left Down when the test ends is brought Up by its Close, so that its Clients give up their
// holds at once instead of each waiting out relock.DefaultCloseTimeout.
func TestCloseOfAServerLeftDownDoesNotWait(t *testing.T) {
	t.Parallel()
	c, srv := relocktest.NewClient(t, &relock.Options{WatchdogTimeout: 30 * time.Second})
	if err := c.Lock("held-while-down").Lock(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	srv.Down()
	began := time.Now()
	srv.Close()
	if took := time.Since(began); took >= relock.DefaultCloseTimeout-time.Second {
		t.Fatalf("Close of a Server left Down took %v: its Client waited for a server it could not reach", took)
	}
}
