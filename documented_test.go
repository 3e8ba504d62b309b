package relock_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/relock-go/relock/internal/redistest"
)

// The behaviours the synchronizers' docs warn of, pinned: a change to them must change the docs too.

// DrainPermits on a negative count sets it to zero and returns the negative count, as Redisson's does.
func TestDrainPermitsForgivesANegativeCount(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	s := c.Semaphore("owed")
	if _, err := s.TrySetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.AddPermits(ctx, -3); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DrainPermits(ctx); n != -2 || err != nil {
		t.Fatalf("DrainPermits of a count at -2 = %d, %v, want -2", n, err)
	}
	if n, err := s.AvailablePermits(ctx); n != 0 || err != nil {
		t.Fatalf("after DrainPermits: %d permits (%v), want 0", n, err)
	}
}

// A latch that opens and is set again before its waiters have read the count is missed by them: they
// wait for its next opening (Redisson's waiters have the same window). The opening and the new count
// come in one script here, so that the window is certain.
func TestLatchSetAgainAtOnceIsMissed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	const name, channel = "round", "redisson_countdownlatch__channel__{round}"
	l := c.CountDownLatch(name)
	if ok, err := l.TrySetCount(ctx, 1); !ok || err != nil {
		t.Fatalf("TrySetCount = %v, %v", ok, err)
	}
	opened := make(chan bool, 1)
	go func() {
		ok, _ := l.TryAwait(ctx, 2*time.Second)
		opened <- ok
	}()
	eventually(t, 5*time.Second, "the waiter subscribes", func() bool { return numsub(t, rdb, channel) == 1 })
	// CountDown's opening (delete, announce "0"), then TrySetCount's (set, announce "1"), back to back.
	script := "redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], 0); " +
		"redis.call('set', KEYS[1], 1); redis.call('publish', KEYS[2], 1); return 1"
	if err := do(t, rdb, "EVAL", script, "2", name, channel).Error(); err != nil {
		t.Fatal(err)
	}
	if <-opened {
		t.Fatal("the waiter saw an opening that was undone before it read the count")
	}
	if n, err := l.Count(ctx); n != 1 || err != nil {
		t.Fatalf("Count = %d, %v, want 1", n, err)
	}
}

// A PermitSemaphore's expired permit is given back by the next acquisition, not by a release of another
// permit: AvailablePermits does not count it until then (InspectSemaphore does, as expired).
func TestExpiredPermitComesBackAtTheNextAcquisition(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	s := c.PermitSemaphore("pool")
	if _, err := s.TrySetPermits(ctx, 2); err != nil {
		t.Fatal(err)
	}
	p, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Another client's permit (a Redisson client's, say), taken and expired a second ago.
	past := strconv.FormatInt(time.Now().UnixMilli()-1000, 10)
	do(t, rdb, "DECR", "pool")
	do(t, rdb, "ZADD", "{pool}:timeout", past, "expired-permit")
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := s.AvailablePermits(ctx); n != 1 || err != nil {
		t.Fatalf("after the release: %d permits (%v), want 1: the release gives back its own permit only", n, err)
	}
	if st, err := c.InspectSemaphore(ctx, "pool"); err != nil || st.PermitsExpired != 1 {
		t.Fatalf("InspectSemaphore = %+v, %v, want the expired permit", st, err)
	}
	if _, err := s.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := c.InspectSemaphore(ctx, "pool"); err != nil || st.Value != 1 || st.PermitsTaken != 1 || st.PermitsExpired != 0 {
		t.Fatalf("after an acquisition: %+v, %v, want the expired permit given back, and 1 of 2 taken", st, err)
	}
}
