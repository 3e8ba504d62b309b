package relock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/redistest"
)

// The same release request, sent twice (as after a lost reply), releases one level of a hold, not two.
func TestRepeatedReleaseRequestReleasesOnce(t *testing.T) {
	srv := redistest.Start(t)
	c, err := New([]string{srv.Addr()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, r := range []*RLock{c.Lock("repeated"), c.FairLock("repeated-fair")} {
		t.Run(r.kind.String(), func(t *testing.T) {
			lock := func() {
				t.Helper()
				if _, err := r.tryLock(ctx, "lock", -1, 0); err != nil {
					t.Fatal(err)
				}
			}
			lock()
			lock()
			field, err := c.ownerField(ctx)
			if err != nil {
				t.Fatal(err)
			}
			first := newRelease(field)
			for i := range 3 {
				left, err := r.release(ctx, first)
				if err != nil || left != 1 {
					t.Fatalf("sending the request a %d. time: %d, %v; want 1 hold left", i+1, left, err)
				}
				first = repeating(first) // what Unlock does once a reply is lost
			}
			if n, err := r.holdCount(ctx, "holdcount"); n != 1 || err != nil {
				t.Fatalf("hold count = %d, %v; want 1", n, err)
			}
			// A new request releases the last hold; repeated, it finds nothing held and changes nothing.
			last := newRelease(field)
			if left, err := r.release(ctx, last); left != 0 || err != nil {
				t.Fatalf("last release = %d, %v; want 0", left, err)
			}
			last = repeating(last)
			if left, err := r.release(ctx, last); left != -1 || err != nil {
				t.Fatalf("repeated last release = %d, %v; want -1 (not held)", left, err)
			}
		})
	}
}

// An undo that reaches Redis before the acquisition attempt it undoes (delayed on a slow link, or queued
// on a connection) makes that attempt change nothing when it arrives; an undo that comes after its attempt
// releases the level the attempt took. The owner already holds each lock once, so the attempts are
// reentries. Here the late attempt is sent by hand after its undo, with the id the undo named.
func TestUndoOvertakingItsAttempt(t *testing.T) {
	srv := redistest.Start(t)
	c, err := New([]string{srv.Addr()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(WithOwner(context.Background(), "owner"), 10*time.Second)
	defer cancel()
	rw := c.ReadWriteLock("overtaken-rw")
	for _, l := range []*RLock{c.Lock("overtaken"), c.FairLock("overtaken-fair"), rw.ReadLock(), rw.WriteLock()} {
		t.Run(l.kind.String(), func(t *testing.T) {
			if _, err := l.tryLock(ctx, "lock", -1, 0); err != nil {
				t.Fatal(err)
			}
			owner, err := c.ownerField(ctx)
			if err != nil {
				t.Fatal(err)
			}
			field := l.spec.field(owner)
			k := holdKey{key: l.name, field: field}
			count := func() string {
				t.Helper()
				n, err := c.rdb.Do(ctx, c.rdb.B().Hget().Key(l.name).Field(field).Build()).ToString()
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
			attempt := func(id string) [4]int64 { // the attempt, arriving; its reply goes nowhere
				t.Helper()
				reply, err := c.scripts.runAcquire(ctx, l.spec.acquire(acquireCall{
					ttl: c.watchdogTimeoutArg, owner: owner, field: field, attempt: id}, nil))
				if err != nil {
					t.Fatal(err)
				}
				return reply
			}

			late := c.attemptID()
			l.undoAcquire(k, c.watchdogTimeout, late)
			l.settled(ctx)
			if got := attempt(late); got != [4]int64{-2, 0, 0} {
				t.Fatalf("the attempt arriving after its undo replied %v, want [-2 0 0]", got)
			}
			if n := count(); n != "1" {
				t.Fatalf("hold count after the undone attempt arrived: %s, want 1", n)
			}

			early := c.attemptID()
			if got := attempt(early); got[0] != 1 || got[1] != 2 {
				t.Fatalf("the attempt replied %v, want [1 2 _]", got)
			}
			l.undoAcquire(k, c.watchdogTimeout, early)
			l.settled(ctx)
			if n := count(); n != "1" {
				t.Fatalf("hold count after the undo of an attempt that ran: %s, want 1", n)
			}

			if err := l.unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if n, err := c.rdb.Do(ctx, c.rdb.B().Hexists().Key(l.name).Field(field).Build()).AsBool(); n || err != nil {
				t.Fatalf("the owner's field after its last Unlock: %v, %v", n, err)
			}
		})
	}
}

// An owner that gives up after a release named it, leaving its wake unused while the lock is still free,
// announces the release again as it leaves, so that the next waiter does not sleep until the holder's TTL
// (lua/rlock_leave.lua).
func TestLeaveAfterAnUnusedNamedWakeWakesTheNext(t *testing.T) {
	srv := redistest.Start(t)
	var cs [2]*Client
	for i := range cs {
		c, err := New([]string{srv.Addr()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs[i] = c
	}
	holder, waiting := cs[0], cs[1]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	do := func(args ...string) rueidis.RedisResult {
		return holder.rdb.Do(ctx, holder.rdb.B().Arbitrary(args[0]).Args(args[1:]...).Build())
	}
	if err := holder.Lock("handed").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- waiting.Lock("handed").Lock(ctx) }()
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		if n, _ := do("ZCARD", "relock_lock_waiters:{handed}").AsInt64(); n == 1 {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("the waiter is not known to Redis")
		}
	}
	// What a release that named an owner who then gave up leaves: the lock free, nobody else woken.
	if err := do("DEL", "handed").Error(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		t.Fatalf("the waiter acquired (%v) before anybody woke it", err)
	case <-time.After(200 * time.Millisecond): // it sleeps until the holder's TTL
	}
	q := holder.Lock("handed").spec.queue()
	if n, err := q.leaveOnce(ctx, holdKey{key: q.entries, field: holder.id + ":gave-up"}); n != 0 || err != nil {
		t.Fatalf("leave = %d, %v; want 0 (not waiting)", n, err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the waiter was not woken by the leave of an owner whose named wake went unused")
	}
}
