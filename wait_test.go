package relock

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/rueidis"
)

// The wait loop (acquireWaiting) on a hub over a scripted Redis, with a scripted attempt function, in
// synctest bubbles: every sleep is on the bubble's clock, so the tests are exact and take no time.

// scriptedLock is an attempt function whose answers the test decides: answer gets the attempt's number
// (from 1) and its time since the lock was made.
type scriptedLock struct {
	start  time.Time
	answer func(n int, at time.Duration) (bool, time.Duration, error)

	mu sync.Mutex
	at []time.Duration // when each attempt ran
}

func newScriptedLock(answer func(n int, at time.Duration) (bool, time.Duration, error)) *scriptedLock {
	return &scriptedLock{start: time.Now(), answer: answer}
}

func (l *scriptedLock) try(ctx context.Context) (bool, time.Duration, bool, error) {
	l.mu.Lock()
	at := time.Since(l.start)
	l.at = append(l.at, at)
	n := len(l.at)
	l.mu.Unlock()
	ok, ttl, err := l.answer(n, at)
	return ok, ttl, false, err
}

func (l *scriptedLock) attempts() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.at)
}

type waited struct {
	ok  bool
	err error
	at  time.Duration
}

// waitAsync runs the wait loop in a goroutine of its own.
func waitAsync(ctx context.Context, c *Client, wait time.Duration, l *scriptedLock) <-chan waited {
	res := make(chan waited, 1)
	go func() {
		ok, err := c.acquireWaiting(ctx, &acquireOp{channel: "a", wait: wait}, l.try)
		res <- waited{ok, err, time.Since(l.start)}
	}()
	return res
}

// testWaitClient returns a Client with nothing but a hub on a fake Redis: all the wait loop uses.
func testWaitClient(t *testing.T) (*Client, *fakeRedis, func()) {
	h, r, stop := testHub(t, false, false)
	return &Client{hub: h}, r, stop
}

const ms = time.Millisecond

// A waiter makes no attempt while the lock is held with no expiry known, however long that is, and tries
// again as soon as a release is announced.
func TestWaitSleepsUntilRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, r, _ := testWaitClient(t)
		var mu sync.Mutex
		held := true
		l := newScriptedLock(func(int, time.Duration) (bool, time.Duration, error) {
			mu.Lock()
			defer mu.Unlock()
			return !held, -1, nil
		})
		res := waitAsync(context.Background(), c, -1, l)
		time.Sleep(time.Hour)
		if got := l.attempts(); !slices.Equal(got, []time.Duration{0, 0}) {
			t.Fatalf("attempts at %v while the lock was held, want [0 0] (before and after subscribing)", got)
		}
		mu.Lock()
		held = false
		mu.Unlock()
		r.publish("a", unlockMessage)
		w := <-res
		if !w.ok || w.err != nil || w.at != time.Hour {
			t.Fatalf("wait = %v, %v at %v; want the lock at 1h, on the release", w.ok, w.err, w.at)
		}
		time.Sleep(lingerFor) // the channel lingers that long after its last waiter (see pubsub_conn.go)
		synctest.Wait()
		if r.subscribed("a") != 0 {
			t.Fatalf("the waiter left its subscription behind: %q", r.commands())
		}
	})
}

// A release announced while the waiter is busy with an attempt is not lost: the next sleep ends at once.
func TestWaitKeepsReleaseHeardDuringAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, r, _ := testWaitClient(t)
		l := newScriptedLock(func(n int, _ time.Duration) (bool, time.Duration, error) {
			if n == 2 {
				r.publish("a", unlockMessage) // released just after this attempt read the lock
			}
			return n == 3, -1, nil
		})
		w := <-waitAsync(context.Background(), c, -1, l)
		if !w.ok || w.err != nil || !slices.Equal(l.attempts(), []time.Duration{0, 0, 0}) {
			t.Fatalf("wait = %v, %v; attempts at %v, want the lock on the third attempt, at once", w.ok, w.err, l.attempts())
		}
	})
}

// A waiter never sleeps past the holder's TTL, nor past its wait: it tries again when either runs out,
// and reports false once the wait has.
func TestWaitSleepsUntilHolderTTLOrWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _, _ := testWaitClient(t)
		l := newScriptedLock(func(int, time.Duration) (bool, time.Duration, error) { return false, 400 * ms, nil })
		w := <-waitAsync(context.Background(), c, time.Second, l)
		want := []time.Duration{0, 0, 400 * ms, 800 * ms, 1000 * ms}
		if w.ok || w.err != nil || w.at != time.Second || !slices.Equal(l.attempts(), want) {
			t.Fatalf("wait = %v, %v at %v, attempts at %v; want false, nil at 1s, attempts at %v", w.ok, w.err, w.at, l.attempts(), want)
		}
	})
}

// A waiter's ctx bounds its wait: it returns ctx's error when ctx ends.
func TestWaitEndsWithCtx(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _, _ := testWaitClient(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		l := newScriptedLock(func(int, time.Duration) (bool, time.Duration, error) { return false, -1, nil })
		w := <-waitAsync(ctx, c, -1, l)
		if w.ok || !errors.Is(w.err, context.DeadlineExceeded) || w.at != 2*time.Second {
			t.Fatalf("wait = %v, %v at %v; want ctx's deadline error at 2s", w.ok, w.err, w.at)
		}
	})
}

// A zero wait is one attempt, with no subscription; an error on the first attempt is returned at once.
func TestWaitZeroOrFirstErrorMakesOneAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, r, _ := testWaitClient(t)
		l := newScriptedLock(func(int, time.Duration) (bool, time.Duration, error) { return false, -1, nil })
		if w := <-waitAsync(context.Background(), c, 0, l); w.ok || w.err != nil || len(l.attempts()) != 1 {
			t.Fatalf("zero wait = %v, %v after %d attempts, want false, nil after 1", w.ok, w.err, len(l.attempts()))
		}
		l = newScriptedLock(func(int, time.Duration) (bool, time.Duration, error) { return false, 0, errConnReset })
		if w := <-waitAsync(context.Background(), c, -1, l); !errors.Is(w.err, errConnReset) || len(l.attempts()) != 1 {
			t.Fatalf("first attempt failing: %v after %d attempts, want its error after 1", w.err, len(l.attempts()))
		}
		synctest.Wait()
		if len(r.commands()) != 0 {
			t.Fatalf("subscribed for a single attempt: %q", r.commands())
		}
	})
}

// A waiter rides out transient errors (a broken connection, a failover), trying again after about 50 ms,
// then twice as long each time up to 0.5 s (each pause drawn from its upper half), and fails with the error
// once they have lasted past transientGrace.
func TestWaitRidesOutTransientErrorsThenFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _, _ := testWaitClient(t)
		l := newScriptedLock(func(n int, _ time.Duration) (bool, time.Duration, error) {
			if n == 1 {
				return false, -1, nil
			}
			return false, 0, errConnReset
		})
		w := <-waitAsync(context.Background(), c, -1, l)
		at := l.attempts()
		if !errors.Is(w.err, errConnReset) || len(at) < 3 || at[0] != 0 || at[1] != 0 {
			t.Fatalf("wait = %v after attempts at %v; want the error, after two attempts at once", w.err, at)
		}
		// The first failure was at 0: the waiter fails at its first attempt past the grace.
		if last, before := at[len(at)-1], at[len(at)-2]; last <= transientGrace || before > transientGrace {
			t.Fatalf("attempts at %v: want the last one the first past %v", at, transientGrace)
		}
		pause := retryPauseMin
		for i := 2; i < len(at); i++ {
			if gap := at[i] - at[i-1]; gap < pause/2 || gap > pause {
				t.Fatalf("attempts at %v: pause %d is %v, want %v to %v", at, i-1, gap, pause/2, pause)
			}
			pause = min(2*pause, retryPauseMax)
		}
	})
}

// The grace counts one run of transient errors: an answer from Redis in between starts it again.
func TestWaitTransientGraceRestartsAfterAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _, _ := testWaitClient(t)
		l := newScriptedLock(func(n int, at time.Duration) (bool, time.Duration, error) {
			switch {
			case n == 1:
				return false, -1, nil
			case at < 9*time.Second, at >= 9500*ms && at < 18*time.Second:
				return false, 0, errConnReset
			case at < 18*time.Second:
				return false, 100 * ms, nil // held, by an owner whose hold ends in 100 ms
			}
			return true, 0, nil
		})
		w := <-waitAsync(context.Background(), c, -1, l)
		if !w.ok || w.err != nil || w.at < 18*time.Second {
			t.Fatalf("wait = %v, %v at %v; want the lock after 18s of mostly failing attempts", w.ok, w.err, w.at)
		}
	})
}

// An error that waiting cannot mend (here a Redis error reply) ends the wait at once.
func TestWaitFailsAtOnceOnLastingError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _, _ := testWaitClient(t)
		reply := &rueidis.RedisError{} // an error reply: Redis answered, and will answer the same again
		l := newScriptedLock(func(n int, _ time.Duration) (bool, time.Duration, error) {
			if n < 3 {
				return false, 300 * ms, nil
			}
			return false, 0, reply
		})
		w := <-waitAsync(context.Background(), c, -1, l)
		if !errors.Is(w.err, reply) || w.at != 300*ms {
			t.Fatalf("wait = %v at %v; want the error reply at 300ms", w.err, w.at)
		}
	})
}

// Close ends every wait at once with ErrClosed.
func TestWaitEndsAtOnceOnClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _, stop := testWaitClient(t)
		l := newScriptedLock(func(int, time.Duration) (bool, time.Duration, error) { return false, -1, nil })
		res := waitAsync(context.Background(), c, -1, l)
		time.Sleep(time.Hour)
		stop()
		w := <-res
		if !errors.Is(w.err, ErrClosed) || w.at != time.Hour {
			t.Fatalf("wait = %v at %v; want ErrClosed at once, at 1h", w.err, w.at)
		}
	})
}

// relock's own errors met while waiting (an upgrade the owner made impossible meanwhile) end the wait at
// once: they are definite, not a connection's trouble to ride out.
func TestWaitFailsAtOnceOnRelocksOwnError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _, _ := testWaitClient(t)
		l := newScriptedLock(func(n int, _ time.Duration) (bool, time.Duration, error) {
			if n < 3 {
				return false, 300 * ms, nil
			}
			return false, 0, ErrUpgrade
		})
		w := <-waitAsync(context.Background(), c, -1, l)
		if !errors.Is(w.err, ErrUpgrade) || w.at != 300*ms {
			t.Fatalf("wait = %v at %v; want ErrUpgrade at 300ms", w.err, w.at)
		}
	})
}

// fakeSync is a lock or synchronizer whose state the test holds: units free to take (a latch's are looked
// at, never taken), each release announced on the channel "a" with its kind's message.
type fakeSync struct {
	r       *fakeRedis
	message func(free int) string
	looks   bool // attempts only look (a latch): free > 0 is open

	mu   sync.Mutex
	free int
	// onTake, if set, runs once, after the first attempt that takes a unit, before the attempt returns
	// (as a release that comes after the winner's script ran, before its reply did).
	onTake func()
}

func (s *fakeSync) release(n int) {
	s.mu.Lock()
	s.free += n
	free := s.free
	s.mu.Unlock()
	s.r.publish("a", s.message(free))
}

func (s *fakeSync) take(n int) bool {
	s.mu.Lock()
	if s.free < n {
		s.mu.Unlock()
		return false
	}
	if !s.looks {
		s.free -= n
	}
	onTake := s.onTake
	s.onTake = nil
	s.mu.Unlock()
	if onTake != nil {
		onTake()
	}
	return true
}

// syncKinds are the wake policies of every kind, each with what its release announces.
var syncKinds = []struct {
	name    string
	wakes   wakePolicy
	message func(free int) string
	looks   bool
}{
	{"lock", nil, func(int) string { return unlockMessage }, false},
	{"read", nil, func(int) string { return readUnlockMessage }, false},
	{"semaphore", semaphoreWakes, strconv.Itoa, false},
	{"latch", latchWakes, func(int) string { return "0" }, true},
}

// waitOn runs the wait loop for a waiter that wants weight units of s, in a goroutine of its own; each
// attempt first asks before (when not nil), which may answer instead of s.
func waitOn(ctx context.Context, c *Client, s *fakeSync, wakes wakePolicy, weight int, wait time.Duration,
	before func(n int) (bool, error, bool)) <-chan waited {
	start := time.Now()
	l := newScriptedLock(func(n int, _ time.Duration) (bool, time.Duration, error) {
		if before != nil {
			if ok, err, answered := before(n); answered {
				return ok, -1, err
			}
		}
		return s.take(weight), -1, nil
	})
	res := make(chan waited, 1)
	go func() {
		ok, err := c.acquireWaiting(ctx, &acquireOp{channel: "a", wakes: wakes, weight: weight, wait: wait}, l.try)
		res <- waited{ok, err, time.Since(start)}
	}()
	return res
}

// A notification that reached a waiter which did not use it goes on to another waiter, for every kind's
// wake policy: waiter A (the older) is woken by a release; then, before A leaves, a second release comes
// (A took the first), or A's ctx ends, or A's attempt fails. B must not sleep while a unit is free: it
// gets one at once (it waits at most an hour, in the bubble's time).
func TestWaitHandsOnUnusedWakeUps(t *testing.T) {
	cases := []struct {
		name string
		// second: the first unit taken is followed by a second release, before its taker's reply
		second bool
		// a, if set, is A's attempt n once a release woke it (n: 1 before joining, 2 after, 3 once woken)
		a func(n int, cancel context.CancelFunc, ctx context.Context) (bool, error)
	}{
		{"second release before the winner leaves", true, nil},
		{"ctx ended as it was woken", false, func(n int, cancel context.CancelFunc, ctx context.Context) (bool, error) {
			cancel() // the attempt ends with its ctx, unanswered
			return false, ctx.Err()
		}},
		{"attempt failed as it was woken", false, func(int, context.CancelFunc, context.Context) (bool, error) {
			return false, &rueidis.RedisError{} // an error reply: Redis answered nothing about the lock
		}},
	}
	for _, k := range syncKinds {
		for _, tc := range cases {
			t.Run(k.name+"/"+tc.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					c, r, _ := testWaitClient(t)
					s := &fakeSync{r: r, message: k.message, looks: k.looks}
					if tc.second {
						s.onTake = func() { s.release(1) }
					}
					actx, cancel := context.WithCancel(context.Background())
					defer cancel()
					a := waitOn(actx, c, s, k.wakes, 1, -1, func(n int) (bool, error, bool) {
						if n < 3 || tc.a == nil {
							return false, nil, false
						}
						ok, err := tc.a(n, cancel, actx)
						return ok, err, true
					})
					synctest.Wait()
					b := waitOn(context.Background(), c, s, k.wakes, 1, time.Hour, nil)
					synctest.Wait()
					s.release(1)
					if w := <-a; w.ok != tc.second {
						t.Fatalf("A = %v, %v; want %v", w.ok, w.err, tc.second)
					}
					if w := <-b; !w.ok || w.err != nil || w.at != 0 {
						t.Fatalf("B = %v, %v at %v; want a unit at once: B slept while one was free", w.ok, w.err, w.at)
					}
				})
			})
		}
	}
}

// A semaphore waiter that wants more permits than a release freed does not keep the others asleep: A
// (the older) wants 3, B wants 1, one permit is released: B gets it at once, A waits on.
func TestWaitHeavyWaiterDoesNotHoldUpLighterOnes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, r, _ := testWaitClient(t)
		s := &fakeSync{r: r, message: strconv.Itoa}
		actx, cancel := context.WithCancel(context.Background())
		a := waitOn(actx, c, s, semaphoreWakes, 3, -1, nil)
		synctest.Wait()
		b := waitOn(context.Background(), c, s, semaphoreWakes, 1, time.Hour, nil)
		synctest.Wait()
		s.release(1)
		if w := <-b; !w.ok || w.err != nil || w.at != 0 {
			t.Fatalf("B = %v, %v at %v; want the permit at once", w.ok, w.err, w.at)
		}
		s.release(2)
		synctest.Wait()
		select {
		case w := <-a:
			t.Fatalf("A = %v, %v with 2 permits free; it wants 3", w.ok, w.err)
		default:
		}
		s.release(1)
		if w := <-a; !w.ok || w.err != nil {
			t.Fatalf("A = %v, %v once 3 permits were free", w.ok, w.err)
		}
		cancel()
	})
}

// A waiter whose wait runs out as the release that would let it in arrives either takes the unit or leaves
// it to the other waiter, never to nobody.
func TestWaitTimedOutAsWokenLeavesNothingFreeUnseen(t *testing.T) {
	for _, k := range syncKinds {
		t.Run(k.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, r, _ := testWaitClient(t)
				s := &fakeSync{r: r, message: k.message, looks: k.looks}
				a := waitOn(context.Background(), c, s, k.wakes, 1, time.Second, nil)
				synctest.Wait()
				b := waitOn(context.Background(), c, s, k.wakes, 1, time.Hour, nil)
				synctest.Wait()
				time.AfterFunc(time.Second, func() { s.release(1) }) // as A's wait runs out
				wa, wb := <-a, <-b
				if wa.err != nil || wb.err != nil || !wa.ok && (!wb.ok || wb.at != time.Second) || k.looks && !wb.ok {
					t.Fatalf("A = %v, %v at %v, B = %v, %v at %v: a unit stayed free while B slept", wa.ok, wa.err, wa.at, wb.ok, wb.err, wb.at)
				}
			})
		})
	}
}

// takenLock answers op.taken as the test decides, and counts the reads.
type takenLock struct {
	mu     sync.Mutex
	reads  int
	answer func() (bool, time.Duration, error)
}

func (l *takenLock) taken(context.Context) (bool, time.Duration, error) {
	l.mu.Lock()
	l.reads++
	l.mu.Unlock()
	return l.answer()
}

func (l *takenLock) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reads
}

func waitAsyncTaken(ctx context.Context, c *Client, l *scriptedLock, tk *takenLock) <-chan waited {
	res := make(chan waited, 1)
	go func() {
		ok, err := c.acquireWaiting(ctx, &acquireOp{channel: "a", wait: -1, taken: tk.taken}, l.try)
		res <- waited{ok, err, time.Since(l.start)}
	}()
	return res
}

// For a kind whose waiters are woken only by releases that free the lock (op.taken), a waiter that finds
// the lock still taken once it listens reads it instead of attempting again, sleeps until the shorter of
// the two holder TTLs it knows, and tries again then, or on a release.
func TestWaitReadsTheLockInsteadOfASecondAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, r, _ := testWaitClient(t)
		l := newScriptedLock(func(n int, _ time.Duration) (bool, time.Duration, error) {
			return n == 3, 10 * time.Second, nil
		})
		tk := &takenLock{answer: func() (bool, time.Duration, error) { return true, 4 * time.Second, nil }}
		res := waitAsyncTaken(context.Background(), c, l, tk)
		time.Sleep(time.Second)
		if got := l.attempts(); !slices.Equal(got, []time.Duration{0}) || tk.count() != 1 {
			t.Fatalf("attempts at %v and %d reads while the lock was taken, want [0] and 1", got, tk.count())
		}
		time.Sleep(4 * time.Second) // the read's TTL (4 s) is the shorter: an attempt at 4 s
		if got := l.attempts(); !slices.Equal(got, []time.Duration{0, 4 * time.Second}) {
			t.Fatalf("attempts at %v, want [0 4s]", got)
		}
		r.publish("a", unlockMessage)
		if w := <-res; !w.ok || w.err != nil || w.at != 5*time.Second {
			t.Fatalf("wait = %v, %v at %v; want the lock at 5s, on the release", w.ok, w.err, w.at)
		}
		if n := tk.count(); n != 1 {
			t.Fatalf("%d reads, want 1: only as the waiter begins to listen", n)
		}
	})
}

// A release between the first attempt and the subscription is not missed: the read finds the lock free
// (or cannot tell) and the waiter attempts at once.
func TestWaitReadingAFreeLockAttemptsAtOnce(t *testing.T) {
	for _, answer := range []struct {
		name  string
		taken bool
		err   error
	}{{"free", false, nil}, {"error", true, errors.New("read failed")}} {
		t.Run(answer.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, _, _ := testWaitClient(t)
				l := newScriptedLock(func(n int, _ time.Duration) (bool, time.Duration, error) {
					return n == 2, time.Hour, nil
				})
				tk := &takenLock{answer: func() (bool, time.Duration, error) { return answer.taken, time.Hour, answer.err }}
				w := <-waitAsyncTaken(context.Background(), c, l, tk)
				if !w.ok || w.err != nil || !slices.Equal(l.attempts(), []time.Duration{0, 0}) {
					t.Fatalf("wait = %v, %v; attempts at %v, want the lock on the second attempt, at once", w.ok, w.err, l.attempts())
				}
			})
		})
	}
}
