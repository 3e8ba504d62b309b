package relock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// A hold Redis lost, whose owner then locks again, is not re-entered: Redis makes a new hold (a first
// one, with a new token when fenced), and the old hold ends as lost, so that work under its HoldContext
// stops. (It was filed as a reentry: the old HoldContext lived on and a fenced GuardedWrite passed.) The
// Client does not watch its holds, as when the watch's connection is down: only the reply tells.
func TestLostHoldRetakenIsANewHold(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a := newClient(t, srv, &relock.Options{NoHoldWatch: true})
	b := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	for _, fenced := range []bool{true, false} {
		name := "retaken-plain"
		var opts []relock.LockOption
		if fenced {
			name = "retaken-fenced"
			opts = append(opts, relock.WithFencing())
		}
		ctx := relock.WithOwner(ctxTimeout(t, 10*time.Second), "worker")
		l := a.Lock(name, opts...)
		if err := l.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		old, err := l.HoldContext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		first, _ := l.FencingToken(ctx)
		// The hold is lost behind its owner's back, and another owner holds the lock for a while.
		do(t, rdb, "DEL", name)
		lb := b.Lock(name, opts...)
		if err := lb.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := lb.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		// The owner locks again, believing it re-enters.
		if err := l.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-old.Done():
			if cause := context.Cause(old); !errors.Is(cause, relock.ErrLockLost) {
				t.Fatalf("fenced=%v: the old hold ended with %v; want ErrLockLost", fenced, cause)
			}
		default:
			t.Fatalf("fenced=%v: the old HoldContext lives on after Redis made a new hold", fenced)
		}
		if n, err := l.HoldCount(ctx); err != nil || n != 1 {
			t.Fatalf("fenced=%v: HoldCount = %d, %v; want 1 (a new hold)", fenced, n, err)
		}
		if fenced {
			if tok, err := l.FencingToken(ctx); err != nil || tok <= first+1 {
				t.Fatalf("FencingToken = %d, %v; want a new token, past %d and the other owner's", tok, err, first)
			}
		}
		hc, err := l.HoldContext(ctx)
		if err != nil || hc.Err() != nil {
			t.Fatalf("fenced=%v: the new hold has no live HoldContext: %v", fenced, err)
		}
		// One Unlock ends the new hold: it had one level.
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if locked, err := l.IsLocked(ctx); err != nil || locked {
			t.Fatalf("fenced=%v: IsLocked after the one Unlock = %v, %v", fenced, locked, err)
		}
		if !errors.Is(context.Cause(hc), context.Canceled) || errors.Is(context.Cause(hc), relock.ErrLockLost) {
			t.Fatalf("fenced=%v: the new hold ended with %v; want context.Canceled", fenced, context.Cause(hc))
		}
	}
}

// An owner's HoldCount or IsHeld that finds Redis without a hold its Client believes in ends the hold's
// context at once (lost), as an Extend that finds it gone does: here without the watch, whose absence
// would otherwise leave it to the watchdog's next check, 10 s away. A hold acquired afresh after the read
// was sent is not the one it saw.
func TestReadThatFindsTheHoldGoneEndsIt(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, &relock.Options{NoHoldWatch: true})
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	rw := c.ReadWriteLock("read-gone-rw")
	for _, tc := range []struct {
		name string
		l    *relock.RLock
		read func(*relock.RLock, context.Context) (bool, error)
	}{
		{"lock/HoldCount", c.Lock("read-gone"), func(l *relock.RLock, ctx context.Context) (bool, error) {
			n, err := l.HoldCount(ctx)
			return n > 0, err
		}},
		{"fair/IsHeld", c.FairLock("read-gone-fair"), (*relock.RLock).IsHeld},
		{"write/IsHeld", rw.WriteLock(), (*relock.RLock).IsHeld},
		{"read/HoldCount", rw.ReadLock(), func(l *relock.RLock, ctx context.Context) (bool, error) {
			n, err := l.HoldCount(ctx)
			return n > 0, err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			own := relock.WithOwner(ctx, "o")
			if err := tc.l.Lock(own); err != nil {
				t.Fatal(err)
			}
			hctx, err := tc.l.HoldContext(own)
			if err != nil {
				t.Fatal(err)
			}
			if held, err := tc.read(tc.l, own); !held || err != nil {
				t.Fatalf("held = %v, %v", held, err)
			}
			if hctx.Err() != nil {
				t.Fatal("a read that found the hold there ended it")
			}
			do(t, rdb, "DEL", tc.l.Name())
			if held, err := tc.read(tc.l, own); held || err != nil {
				t.Fatalf("after DEL: held = %v, %v", held, err)
			}
			if hctx.Err() == nil {
				t.Fatal("the read found the hold gone, and its HoldContext lives on")
			}
			if cause := context.Cause(hctx); !errors.Is(cause, relock.ErrLockLost) {
				t.Fatalf("cause %v, want ErrLockLost", cause)
			}
			if err := tc.l.Unlock(own); !errors.Is(err, relock.ErrNotHeld) {
				t.Fatalf("Unlock = %v, want ErrNotHeld", err)
			}
			if err := tc.l.Lock(own); err != nil { // the owner takes it afresh
				t.Fatal(err)
			}
			if err := tc.l.Unlock(own); err != nil {
				t.Fatal(err)
			}
		})
	}
}
