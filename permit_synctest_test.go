package relock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// These tests drive PermitSemaphore's releases and the watchdog through exact interleavings, with a fake
// runner (see holds_synctest_test.go); permitsemaphore_test.go and permit_internal_test.go test the same
// on Redis.

// takenPermit acquires a permit of s, whose Client's fake runner grants it, for owner.
func takenPermit(t *testing.T, f *fakeRunner, s *PermitSemaphore, owner context.Context) (*Permit, context.Context) {
	t.Helper()
	f.mu.Lock()
	f.acquire = func(scriptCall) ([4]int64, error) { return [4]int64{1, 0, 0}, nil }
	f.mu.Unlock()
	p, ok, err := s.TryAcquire(owner, 0, 0)
	if err != nil || !ok {
		t.Fatalf("TryAcquire = %v, %v, %v", p, ok, err)
	}
	hc, err := p.Context(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return p, hc
}

// given answers a permit release script: each id given back (1) or not (0), as given says.
func given(given int64) func(scriptCall) ([]int64, error) {
	return func(call scriptCall) ([]int64, error) {
		out := make([]int64, len(call.args)-2) // ARGV[1] is the publish command, ARGV[2] the marks' TTL
		for i := range out {
			out[i] = given
		}
		return out, nil
	}
}

// A permit whose renewal Redis ran in time, but whose reply is handled after the permit's local expiry,
// is renewed and stays its owner's: Held counts it again, and Release(n) gives it back. While the reply
// is late, it is not counted as held.
func TestSyncLateRenewalKeepsPermitWithItsOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		answer := make(chan struct{})
		f := &fakeRunner{batch: func(call scriptCall) ([]int64, error) {
			<-answer
			return allRenewed(call)
		}, ints: given(1)}
		c := newFakeClient(t, f, 3*time.Second)
		defer closeFake(c)
		reply := sync.OnceFunc(func() { close(answer) })
		defer reply()
		s := c.PermitSemaphore("jobs")
		owner := WithOwner(context.Background(), "owner")
		_, hc := takenPermit(t, f, s, owner)
		time.Sleep(3*time.Second + 100*time.Millisecond) // its renewal, sent at 1 s, has no reply at its expiry
		if n, err := s.Held(owner); n != 0 || err != nil {
			t.Fatalf("Held past the permit's expiry, its renewal unanswered = %d, %v; want 0", n, err)
		}
		reply() // Redis renewed it at 1 s: it expires at 4 s
		synctest.Wait()
		if hc.Err() != nil {
			t.Fatalf("the renewed permit ended: %v", context.Cause(hc))
		}
		if n, err := s.Held(owner); n != 1 || err != nil {
			t.Fatalf("Held after the late renewal = %d, %v; want 1", n, err)
		}
		if err := s.Release(owner, 1); err != nil {
			t.Fatalf("Release(1) of the renewed permit = %v", err)
		}
		if !errors.Is(context.Cause(hc), context.Canceled) {
			t.Fatalf("the permit ended with %v, want released", context.Cause(hc))
		}
	})
}

// Permit.Release and PermitSemaphore.Release of the same permit at once: one gives it back, the other
// finds it gone (ErrNotHeld). Whichever reply is handled first, the permit ends released, not lost. Only
// when neither gave it back was it lost; and when the one that might have did not run, the other's reply
// that it was gone tells the loss.
func TestSyncPermitReleasedTwiceAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name       string
		first      func(s *PermitSemaphore, p *Permit, owner context.Context) error // its reply is held
		second     func(s *PermitSemaphore, p *Permit, owner context.Context) error
		firstReply func(scriptCall) ([]int64, error)
		want       error // the permit's end
	}{
		{"PermitSemaphore.Release gives it back", releaseOne, releasePermit, given(1), context.Canceled},
		{"Permit.Release gives it back", releasePermit, releaseOne, given(1), context.Canceled},
		{"neither gives it back", releaseOne, releasePermit, given(0), ErrLockLost},
		{"the first fails", releaseOne, releasePermit, func(scriptCall) ([]int64, error) { return nil, errUnexpectedReply }, ErrLockLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				answer := make(chan struct{})
				calls := 0
				f := &fakeRunner{batch: allRenewed, ints: func(call scriptCall) ([]int64, error) {
					if calls++; calls == 1 {
						<-answer
						return tc.firstReply(call)
					}
					return given(0)(call) // the second finds it gone
				}}
				c := newFakeClient(t, f, 3*time.Second)
				defer closeFake(c)
				reply := sync.OnceFunc(func() { close(answer) })
				defer reply()
				s := c.PermitSemaphore("jobs")
				owner := WithOwner(context.Background(), "owner")
				p, hc := takenPermit(t, f, s, owner)
				firstErr := make(chan error, 1)
				go func() { firstErr <- tc.first(s, p, owner) }()
				synctest.Wait()
				if err := tc.second(s, p, owner); !errors.Is(err, ErrNotHeld) {
					t.Fatalf("the second release = %v, want ErrNotHeld", err)
				}
				if tc.want == context.Canceled && hc.Err() != nil {
					t.Fatalf("the permit ended with %v before the release that gave it back was answered", context.Cause(hc))
				}
				reply()
				err := <-firstErr
				if !errors.Is(context.Cause(hc), tc.want) {
					t.Fatalf("the permit ended with %v, want %v (first release: %v)", context.Cause(hc), tc.want, err)
				}
				if n, _ := s.Held(owner); n != 0 {
					t.Fatalf("Held = %d after both releases", n)
				}
			})
		})
	}
}

func releaseOne(s *PermitSemaphore, _ *Permit, owner context.Context) error {
	return s.Release(owner, 1)
}
func releasePermit(_ *PermitSemaphore, p *Permit, owner context.Context) error {
	return p.Release(owner)
}

// A renewal that finds a permit gone because its owner's release, under way, just gave it back is no
// loss: the release decides, and the permit ends released.
func TestSyncRenewalDuringPermitReleaseIsNoLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		releaseRan := make(chan struct{})
		f := &fakeRunner{
			batch: func(call scriptCall) ([]int64, error) {
				<-releaseRan // the renewal runs after the release: the permit is gone
				return make([]int64, holdsOf(call)), nil
			},
			ints: func(call scriptCall) ([]int64, error) {
				close(releaseRan)
				time.Sleep(time.Millisecond) // the release's reply is handled after the renewal's
				return given(1)(call)
			}}
		c := newFakeClient(t, f, 3*time.Second)
		defer closeFake(c)
		s := c.PermitSemaphore("jobs")
		owner := WithOwner(context.Background(), "owner")
		p, hc := takenPermit(t, f, s, owner)
		time.Sleep(time.Second) // the renewal is sent, and waits
		synctest.Wait()
		if err := p.Release(owner); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(context.Cause(hc), context.Canceled) {
			t.Fatalf("the permit ended with %v, want released", context.Cause(hc))
		}
	})
}

// The same for a lock: a renewal that finds the hold gone because its owner's Unlock just released it is
// no loss.
func TestSyncRenewalDuringUnlockIsNoLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		releaseRan := make(chan struct{})
		f := &fakeRunner{
			acquire: func(scriptCall) ([4]int64, error) { return [4]int64{1, 1, 0}, nil },
			batch: func(call scriptCall) ([]int64, error) {
				<-releaseRan
				return make([]int64, holdsOf(call)), nil
			},
			int: func(call scriptCall) (int64, error) {
				close(releaseRan)
				time.Sleep(time.Millisecond)
				return 0, nil // released: no hold left
			}}
		c := newFakeClient(t, f, 3*time.Second)
		defer closeFake(c)
		l := c.Lock("renewed")
		owner := WithOwner(context.Background(), "owner")
		if err := l.Lock(owner); err != nil {
			t.Fatal(err)
		}
		hc, _ := l.HoldContext(owner)
		time.Sleep(time.Second)
		synctest.Wait()
		if err := l.Unlock(owner); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(context.Cause(hc), context.Canceled) {
			t.Fatalf("the hold ended with %v, want released", context.Cause(hc))
		}
	})
}

// A renewal that finds a hold gone while an Unlock is under way that then does not run: the hold was lost,
// and ends so when the Unlock's failure is known (the renewal's reply was not forgotten while it waited).
func TestSyncRenewalGoneThenUnlockFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		renewalRan := make(chan struct{})
		f := &fakeRunner{
			acquire: func(scriptCall) ([4]int64, error) { return [4]int64{1, 1, 0}, nil },
			batch: func(call scriptCall) ([]int64, error) {
				defer close(renewalRan)
				return make([]int64, holdsOf(call)), nil
			},
			int: func(call scriptCall) (int64, error) {
				<-renewalRan
				time.Sleep(time.Millisecond)
				return 0, errUnexpectedReply
			}}
		c := newFakeClient(t, f, 3*time.Second)
		defer closeFake(c)
		l := c.Lock("lost")
		owner := WithOwner(context.Background(), "owner")
		if err := l.Lock(owner); err != nil {
			t.Fatal(err)
		}
		hc, _ := l.HoldContext(owner)
		time.Sleep(999 * time.Millisecond)
		unlocked := make(chan error, 1)
		go func() { unlocked <- l.Unlock(owner) }()
		if err := <-unlocked; !errors.Is(err, errUnexpectedReply) {
			t.Fatalf("Unlock = %v", err)
		}
		if !errors.Is(context.Cause(hc), errHoldGone) {
			t.Fatalf("the hold ended with %v, want gone", context.Cause(hc))
		}
	})
}
