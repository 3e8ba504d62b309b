package relock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// Revocation's promise against random schedules, on real Redis: in each round a holder takes the lock,
// listening for requests or not; a requester runs Revoke with a short grace; meanwhile the holder may do
// nothing, let go, or let go and lock again at once (listening or not). Whatever the interleaving, a hold
// that Revoke takes over must have been there when the request was made and have listened for requests
// (docs/locks.md, "Revocation"): a hold that did not listen, or whose Client did not deliver it that
// Revoke's request (it began after the request, or the request reached a hold of the owner before it), is
// never taken (its HoldContext never ends with ErrLockLost). The model is the holder's own record of its
// holds and of the requests each heard.
func TestRevokeAgainstModel(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// The requester is 5 ms away: a holder that lets go and locks again at once gets the lock back first.
	proxy := startProxy(t, srv)
	proxy.SetLatency(5 * time.Millisecond)
	a, b := newClient(t, srv, nil), clientAt(t, proxy.Addr, nil)
	ctx := ctxTimeout(t, 60*time.Second)
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 39))
	const rounds = 150
	la, lb := a.Lock("revoke-model"), b.Lock("revoke-model")
	holder, requester := relock.WithOwner(ctx, "holder"), relock.WithOwner(ctx, "requester")
	type hold struct {
		began     time.Time
		listening bool
		hc        context.Context
		requests  <-chan relock.ReleaseRequest
		heard     bool // its requests channel delivered the round's request
	}
	// take has the holder take the lock (at once, or not at all when wait is false), listening or not.
	take := func(listen, wait bool) (hold, bool) {
		if wait {
			if err := la.Lock(holder); err != nil {
				t.Fatal(err)
			}
		} else if ok, err := la.TryLock(holder, 0, 0); err != nil || !ok {
			return hold{}, false // the requester, waiting, got it first
		}
		h := hold{began: time.Now(), listening: listen}
		if listen {
			var err error
			if h.requests, err = la.ReleaseRequests(holder); err != nil {
				t.Fatal(err)
			}
		}
		h.hc, _ = la.HoldContext(holder)
		return h, true
	}
	taken := 0
	for round := range rounds {
		// Two ways a round goes: the holder acts at a random moment while Revoke's grace (short) runs; or
		// it listens, hears the request, then acts while the grace (longer) still runs, as a cooperative
		// holder does.
		cooperative := r.IntN(2) == 0
		first, _ := take(cooperative || r.IntN(2) == 0, true)
		holds := []hold{first}
		grace := time.Duration(r.IntN(30)) * time.Millisecond
		if cooperative {
			grace = time.Duration(60+r.IntN(100)) * time.Millisecond
		}
		action, delay := r.IntN(3), time.Duration(r.IntN(20))*time.Millisecond
		revoked := make(chan error, 1)
		go func() { revoked <- lb.Revoke(requester, fmt.Sprint("round ", round), grace) }()
		if cooperative {
			select {
			case <-first.requests:
				holds[0].heard = true
			case <-time.After(100 * time.Millisecond):
			}
		} else {
			time.Sleep(delay)
		}
		switch action {
		case 1: // lets go
			_ = la.Unlock(holder)
		case 2: // lets go, and locks again at once
			if err := la.Unlock(holder); err == nil {
				if h, ok := take(r.IntN(2) == 0, false); ok {
					holds = append(holds, h)
				}
			}
		}
		err := <-revoked
		if err != nil && !errors.Is(err, relock.ErrNotHeard) {
			t.Fatalf("round %d: Revoke = %v", round, err)
		}
		for i, h := range holds {
			if h.listening && !h.heard {
				select {
				case req, ok := <-h.requests: // the latest request not read, kept after the hold ended
					h.heard = ok && req.Reason == fmt.Sprint("round ", round)
				default:
				}
			}
			cause := context.Cause(h.hc)
			if !errors.Is(cause, relock.ErrLockLost) {
				continue
			}
			taken++
			if !h.listening || !h.heard {
				t.Fatalf("round %d: Revoke (%v) took hold %d (of %d), which listened %v and heard its request %v (action %d after %v, grace %v, cooperative %v): %v",
					round, err, i, len(holds), h.listening, h.heard, action, delay, grace, cooperative, cause)
			}
		}
		if held, _ := lb.IsHeld(requester); held {
			if err := lb.Unlock(requester); err != nil {
				t.Fatal(err)
			}
		}
		for n, _ := la.HoldCount(holder); n > 0; n-- {
			if err := la.Unlock(holder); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("%d of %d rounds ended in a takeover", taken, rounds)
}
