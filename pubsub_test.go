package relock

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// The hub's state machine on a scripted Redis (pubsub_fake_test.go), in synctest bubbles: no Redis, no wall
// clock. Real-Redis behaviour is proven by the Wait/Wake/Subscribe/Cluster tests of the other files.

func TestHubSubscribesOncePerChannel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, r, _ := testHub(t, false, false)
		var joins []<-chan joined
		for range 5 {
			joins = append(joins, joinAsync(context.Background(), h, "a"))
		}
		for range 2 {
			joins = append(joins, joinAsync(context.Background(), h, "b"))
		}
		var as, bs []*waiter
		for i, res := range joins {
			j := <-res
			if j.err != nil {
				t.Fatalf("join: %v", j.err)
			}
			if i < 5 {
				as = append(as, j.w)
			} else {
				bs = append(bs, j.w)
			}
		}
		as = append(as, mustJoin(t, h, "a")) // joins a subscribed channel at once
		synctest.Wait()
		if r.count("subscribe", "a") != 1 || r.count("subscribe", "b") != 1 {
			t.Fatalf("7 waiters on 2 channels sent %q, want one SUBSCRIBE per channel", r.commands())
		}
		if got := len(r.times("dial")); got != 1 {
			t.Fatalf("%d connections dialled, want 1", got)
		}

		for _, w := range as[1:] {
			h.leave(w)
		}
		synctest.Wait()
		if n := r.count("unsubscribe", "a"); n != 0 {
			t.Fatalf("UNSUBSCRIBE a sent while a waiter is left: %q", r.commands())
		}
		h.leave(as[0])
		synctest.Wait()
		// a lingers, subscribed, while b is needed (dropping it costs a new connection: see rotatingConn),
		// and goes lingerFor later.
		if n := r.count("unsubscribe", "a"); n != 0 {
			t.Fatalf("UNSUBSCRIBE a sent at once, while b is needed: %q", r.commands())
		}
		time.Sleep(lingerFor)
		synctest.Wait()
		if r.count("unsubscribe", "a") != 1 || r.subscribed("a") != 0 || r.subscribed("b") != 1 {
			t.Fatalf("after a's last waiter left: %q, a subscribed %d times, b %d, want one UNSUBSCRIBE a",
				r.commands(), r.subscribed("a"), r.subscribed("b"))
		}
		if got := h.channels(); !slices.Equal(got, []string{"b"}) {
			t.Fatalf("hub keeps %q, want [b]", got)
		}
		for _, w := range bs {
			h.leave(w)
		}
		synctest.Wait()
		// b, the last channel, lingers too: a wait that comes within lingerFor finds it subscribed.
		if n := r.count("unsubscribe", "b"); n != 0 {
			t.Fatalf("UNSUBSCRIBE b sent at once: %q", r.commands())
		}
		time.Sleep(lingerFor)
		synctest.Wait()
		if r.count("unsubscribe", "b") != 1 || r.subscribed("b") != 0 || len(h.channels()) != 0 {
			t.Fatalf("after every waiter left: %q, kept %q", r.commands(), h.channels())
		}
	})
}

// Waits that come one at a time on one channel, as two Clients handing a lock back and forth make them,
// share one connection and one SUBSCRIBE: the channel lingers, subscribed, between them (however long
// they go on), and a wait that finds it so returns at once, hearing releases from the start. Once nobody
// has waited for lingerFor, the channel and its connection go.
func TestHubLoneWaitsShareOneSubscription(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, r, _ := testHub(t, false, false)
		for range 8 {
			w := mustJoin(t, h, "a")
			if r.publish("a", unlockMessage) != 1 || !woken(w) {
				t.Fatalf("a release did not reach the waiter: %q", r.commands())
			}
			h.leave(w)
			synctest.Wait()
			time.Sleep(lingerFor / 3)
		}
		want := []string{"dial", "subscribe a"}
		if got := r.commands(); !slices.Equal(got, want) {
			t.Fatalf("8 waits over more than 2 lingerFor, each begun lingerFor/3 after the last one's end, sent %q, want %q", got, want)
		}
		time.Sleep(lingerFor)
		synctest.Wait()
		want = append(want, "unsubscribe a")
		if got := r.commands(); !slices.Equal(got, want) || r.subscribed("a") != 0 || len(h.channels()) != 0 {
			t.Fatalf("lingerFor after the last wait: %q (want %q), a subscribed %d times, kept %q", got, want, r.subscribed("a"), h.channels())
		}
	})
}

// A channel whose UNSUBSCRIBE is on its way must be subscribed anew, after it, before a new waiter may
// count on hearing its releases.
func TestHubJoinAfterUnsubscribeWaitsForFreshSubscribe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, r, _ := testHub(t, false, false)
		w := mustJoin(t, h, "a")
		r.hold()
		h.leave(w)
		time.Sleep(lingerFor)
		synctest.Wait() // UNSUBSCRIBE a sent, not yet answered

		res := joinAsync(context.Background(), h, "a")
		synctest.Wait()
		select {
		case <-res:
			t.Fatalf("join returned while UNSUBSCRIBE a was unanswered: %q", r.commands())
		default:
		}
		r.answer() // the UNSUBSCRIBE
		synctest.Wait()
		select {
		case <-res:
			t.Fatalf("join returned before its SUBSCRIBE was answered: %q", r.commands())
		default:
		}
		r.answer() // the fresh SUBSCRIBE
		j := <-res
		if j.err != nil {
			t.Fatal(j.err)
		}
		want := []string{"dial", "subscribe a", "unsubscribe a", "subscribe a"}
		if got := r.commands(); !slices.Equal(got, want) {
			t.Fatalf("commands %q, want %q", got, want)
		}
		if r.publish("a", unlockMessage) != 1 || !woken(j.w) {
			t.Fatal("a release after the join did not reach the new waiter")
		}
		h.leave(j.w)
	})
}

// A lost connection wakes every waiter at once (a release may have gone unheard), and again when its
// channel is subscribed anew on a new connection.
func TestHubConnectionLossWakesWaitersAndResubscribes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, r, _ := testHub(t, false, false)
		a1, a2, b := mustJoin(t, h, "a"), mustJoin(t, h, "a"), mustJoin(t, h, "b")
		r.hold()
		r.drop()
		synctest.Wait()
		for _, w := range []*waiter{a1, a2, b} {
			if !woken(w) {
				t.Fatal("a waiter was not woken when the connection was lost")
			}
		}
		if got := r.commands()[len(r.commands())-2:]; !slices.Equal(got, []string{"dial", "subscribe a b"}) {
			t.Fatalf("after the loss: %q, want a new connection subscribing a and b at once", r.commands())
		}
		r.answer()
		synctest.Wait()
		for _, w := range []*waiter{a1, a2, b} {
			if !woken(w) {
				t.Fatal("a waiter was not woken when its channel was subscribed again")
			}
		}
		if r.subscribed("a") != 1 || r.subscribed("b") != 1 || r.openConns() != 1 {
			t.Fatalf("subscriptions a %d, b %d on %d connections, want 1, 1 on 1", r.subscribed("a"), r.subscribed("b"), r.openConns())
		}
		r.release()
		for _, w := range []*waiter{a1, a2, b} {
			h.leave(w)
		}
	})
}

// pausesOK reports whether the tries at times came after a failure at from, each after the pause its
// backoff allows: from retryPauseMin/2 to retryPauseMin for the first, each limit doubling up to
// retryPauseMax.
func pausesOK(from time.Duration, times []time.Duration) bool {
	pause := retryPauseMin
	for _, at := range times {
		if gap := at - from; gap < pause/2 || gap > pause {
			return false
		}
		from, pause = at, min(2*pause, retryPauseMax)
	}
	return true
}

// While the connection cannot be restored, the hub tries again after about 50 ms, then twice as long each
// time, and starts from 50 ms again once it succeeded.
func TestHubResubscribesWithBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, r, _ := testHub(t, false, false)
		w := mustJoin(t, h, "a")

		r.fail(errConnReset, errConnReset, errConnReset)
		time.Sleep(time.Second)
		r.drop()
		time.Sleep(time.Second)
		got := r.times("subscribe a")
		if len(got) != 5 || got[0] != 0 || got[1] != time.Second || !pausesOK(time.Second, got[2:]) {
			t.Fatalf("SUBSCRIBE a sent at %v, want at 0, at 1s, and after 3 growing pauses", got)
		}
		if r.subscribed("a") != 1 || r.openConns() != 1 {
			t.Fatalf("after the outage: a subscribed %d times on %d connections, want 1 on 1", r.subscribed("a"), r.openConns())
		}

		r.fail(errConnReset)
		r.drop()
		time.Sleep(time.Second)
		got = r.times("subscribe a")
		if len(got) != 7 || got[5] != 2*time.Second || !pausesOK(2*time.Second, got[6:]) {
			t.Fatalf("SUBSCRIBE a sent at %v, want at 2s and after the first pause: the backoff starts again", got)
		}
		h.leave(w)
	})
}

// A SUBSCRIBE that Redis does not answer within subscribeTimeout counts as a broken connection: its
// joiners fail, and the hub connects again.
func TestHubSubscribeTimeoutFailsJoin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, r, _ := testHub(t, false, false)
		r.hold()
		start := time.Now()
		_, err := h.join(context.Background(), "a", nil, 1, "", "", true)
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != subscribeTimeout {
			t.Fatalf("join with an unanswered SUBSCRIBE: %v after %v, want a deadline error after %v", err, time.Since(start), subscribeTimeout)
		}
		r.release()
		w := mustJoin(t, h, "a")
		if got := time.Since(start) - subscribeTimeout; got < retryPauseMin/2 || got > retryPauseMin {
			t.Fatalf("next join returned %v after the failed one, want %v to %v (the first pause)", got, retryPauseMin/2, retryPauseMin)
		}
		if n := len(r.times("dial")); n != 2 || r.subscribed("a") != 1 {
			t.Fatalf("%d connections dialled, a subscribed %d times; want 2, 1", n, r.subscribed("a"))
		}
		h.leave(w)
	})
}

// A join whose ctx ends while its SUBSCRIBE is on the way returns ctx's error, and leaves nothing behind:
// the subscription made for it is undone.
func TestHubJoinCancelledLeavesNoSubscription(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, r, _ := testHub(t, false, false)
		r.hold()
		ctx, cancel := context.WithCancel(context.Background())
		res := joinAsync(ctx, h, "a")
		synctest.Wait()
		cancel()
		if j := <-res; !errors.Is(j.err, context.Canceled) {
			t.Fatalf("cancelled join: %v", j.err)
		}
		r.release()
		time.Sleep(lingerFor)
		synctest.Wait()
		want := []string{"dial", "subscribe a", "unsubscribe a"}
		if got := r.commands(); !slices.Equal(got, want) || r.subscribed("a") != 0 || len(h.channels()) != 0 {
			t.Fatalf("commands %q (want %q), a subscribed %d times, kept %q", got, want, r.subscribed("a"), h.channels())
		}
	})
}

// An unlock message ("0") wakes the oldest waiter without a pending notification; a read-unlock message
// ("1") wakes every waiter of the channel. Messages on other channels wake nobody.
func TestHubWakesOneOrAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, r, _ := testHub(t, false, false)
		ws := []*waiter{mustJoin(t, h, "a"), mustJoin(t, h, "a"), mustJoin(t, h, "a")}
		other := mustJoin(t, h, "b")
		state := func() []bool {
			return []bool{pending(ws[0]), pending(ws[1]), pending(ws[2]), pending(other)}
		}
		r.publish("a", unlockMessage)
		if got := state(); !slices.Equal(got, []bool{true, false, false, false}) {
			t.Fatalf("after one unlock message: pending %v, want the oldest waiter only", got)
		}
		r.publish("a", unlockMessage)
		if got := state(); !slices.Equal(got, []bool{true, true, false, false}) {
			t.Fatalf("after two unlock messages: pending %v, want the two oldest waiters", got)
		}
		woken(ws[0])
		woken(ws[1])
		r.publish("a", readUnlockMessage)
		if got := state(); !slices.Equal(got, []bool{true, true, true, false}) {
			t.Fatalf("after a read-unlock message: pending %v, want every waiter of a", got)
		}
		for _, w := range append(ws, other) {
			h.leave(w)
		}
	})
}

// A waiter that leaves hands every notification it did not use to the next waiter, whether or not it
// got the lock: one still pending (a release after its last attempt began), and one it took that no
// answered attempt looked at (its ctx ended, its attempt failed). A notification an answered attempt
// looked at is used, and one that had none hands nothing on.
func TestHubLeaveHandsUnusedWakeOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, r, _ := testHub(t, false, false)
		w1, w2, w3, w4 := mustJoin(t, h, "a"), mustJoin(t, h, "a"), mustJoin(t, h, "a"), mustJoin(t, h, "a")
		r.publish("a", unlockMessage)
		h.leave(w1) // gave up with its notification pending
		if !pending(w2) || pending(w3) {
			t.Fatalf("after the woken waiter gave up: pending %v %v, want the next waiter woken", pending(w2), pending(w3))
		}
		w2.attempting()
		h.answered(w2, true)
		if pending(w3) {
			t.Fatal("a notification an answered attempt looked at was handed on")
		}
		r.publish("a", unlockMessage) // a second release, before the winner has left
		if !pending(w2) || pending(w3) {
			t.Fatalf("the second release: pending %v %v, want the winner woken (the oldest)", pending(w2), pending(w3))
		}
		h.leave(w2)
		if !pending(w3) {
			t.Fatal("a waiter that got the lock dropped a notification that came after its attempt")
		}
		<-w3.wake // taken; its attempt then fails without an answer (its ctx ended)
		w3.took()
		h.leave(w3)
		if !pending(w4) {
			t.Fatal("a notification taken but never looked at by an answered attempt was dropped")
		}
		w4.attempting()
		h.answered(w4, false)
		w5 := mustJoin(t, h, "a")
		h.leave(w4)
		if pending(w5) {
			t.Fatal("a waiter without an unused notification handed one on")
		}
		h.leave(w5)
	})
}

// An attempt that a notification woke, and that found too few permits free for its waiter, wakes waiters
// that want fewer (up to its weight - 1 of them): the release may have freed what they want. Handing on
// goes only to lighter waiters, so it ends.
func TestHubFailedHeavyAttemptWakesLighterWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, r, _ := testHub(t, false, false)
		join := func(weight int) *waiter {
			w, err := h.join(context.Background(), "s", semaphoreWakes, weight, "", "", true)
			if err != nil {
				t.Fatal(err)
			}
			return w
		}
		heavy, middle, light1, light2 := join(3), join(2), join(1), join(1)
		state := func() []bool { return []bool{pending(heavy), pending(middle), pending(light1), pending(light2)} }
		r.publish("s", "1") // one permit free: wakes the oldest waiter
		if got := state(); !slices.Equal(got, []bool{true, false, false, false}) {
			t.Fatalf("after a release leaving 1 permit: pending %v, want the oldest waiter", got)
		}
		heavy.attempting()
		h.answered(heavy, false) // it wants 3
		if got := state(); !slices.Equal(got, []bool{false, true, true, false}) {
			t.Fatalf("after the heavy waiter's attempt failed: pending %v, want the 2 oldest lighter waiters", got)
		}
		middle.attempting()
		h.answered(middle, false) // it wants 2: light1 has a notification already
		if got := state(); !slices.Equal(got, []bool{false, false, true, true}) {
			t.Fatalf("after the middle waiter's attempt failed: pending %v, want the other light waiter too", got)
		}
		light1.attempting()
		h.answered(light1, false)
		light2.attempting()
		h.answered(light2, false)
		if got := state(); !slices.Equal(got, []bool{false, false, false, false}) {
			t.Fatalf("after the light waiters' attempts failed: pending %v, want none", got)
		}
		for _, w := range []*waiter{heavy, middle, light1, light2} {
			h.leave(w)
		}
	})
}

// A SUBSCRIBE that fails makes its joiners fail with its error; later joins wait for the connection to
// be restored after the backoff.
func TestHubSubscribeErrorFailsJoin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, r, _ := testHub(t, false, false)
		r.fail(errConnReset)
		if _, err := h.join(context.Background(), "a", nil, 1, "", "", true); !errors.Is(err, errConnReset) {
			t.Fatalf("join with a failing SUBSCRIBE: %v, want %v", err, errConnReset)
		}
		start := time.Now()
		w := mustJoin(t, h, "a")
		if d := time.Since(start); d < retryPauseMin/2 || d > retryPauseMin {
			t.Fatalf("next join returned after %v, want %v to %v (the first pause)", d, retryPauseMin/2, retryPauseMin)
		}
		h.leave(w)
	})
}

// On a cluster each channel has one receiver, whatever its waiters, which unsubscribes (SUNSUBSCRIBE or
// UNSUBSCRIBE, as it subscribed) when the last waiter leaves.
func TestHubClusterOneReceiverPerChannel(t *testing.T) {
	for _, sharded := range []bool{true, false} {
		sub, unsub := "subscribe", "unsubscribe"
		if sharded {
			sub, unsub = "ssubscribe", "sunsubscribe"
		}
		t.Run(sub, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, r, _ := testHub(t, true, sharded)
				var joins []<-chan joined
				for range 4 {
					joins = append(joins, joinAsync(context.Background(), h, "a"))
				}
				var ws []*waiter
				for _, res := range joins {
					j := <-res
					if j.err != nil {
						t.Fatal(j.err)
					}
					ws = append(ws, j.w)
				}
				b := mustJoin(t, h, "b")
				synctest.Wait()
				if r.count(sub, "a") != 1 || r.count(sub, "b") != 1 || r.subscribed("a") != 1 {
					t.Fatalf("commands %q, want one %s per channel", r.commands(), sub)
				}
				if r.publish("a", readUnlockMessage) != 1 {
					t.Fatal("no receiver for a")
				}
				for _, w := range ws {
					if !woken(w) {
						t.Fatal("a waiter of a missed its read-unlock message")
					}
				}
				if pending(b) {
					t.Fatal("a waiter of b was woken by a message on a")
				}
				for _, w := range ws[1:] {
					h.leave(w)
				}
				synctest.Wait()
				if r.count(unsub, "a") != 0 {
					t.Fatalf("%s a while a waiter is left: %q", unsub, r.commands())
				}
				// The last waiter leaves: the channel lingers, subscribed, and a join meanwhile uses it.
				h.leave(ws[0])
				synctest.Wait()
				if r.count(unsub, "a") != 0 || r.subscribed("a") != 1 {
					t.Fatalf("right after a's last waiter left: %q; want a lingering", r.commands())
				}
				time.Sleep(lingerFor / 2)
				w := mustJoin(t, h, "a")
				if r.count(sub, "a") != 1 {
					t.Fatalf("a join while a lingered: %q, want no new %s a", r.commands(), sub)
				}
				h.leave(w)
				time.Sleep(lingerFor - time.Millisecond)
				synctest.Wait()
				if r.count(unsub, "a") != 0 {
					t.Fatalf("a left before lingering lingerFor since its last waiter: %q", r.commands())
				}
				time.Sleep(2 * time.Millisecond)
				synctest.Wait()
				if r.count(unsub, "a") != 1 || r.subscribed("a") != 0 || !slices.Equal(h.channels(), []string{"b"}) {
					t.Fatalf("lingerFor after a's last waiter left: %q, a subscribed %d times, kept %q", r.commands(), r.subscribed("a"), h.channels())
				}
				w = mustJoin(t, h, "a")
				if r.count(sub, "a") != 2 || r.subscribed("a") != 1 {
					t.Fatalf("a join after the receiver ended: %q, want a fresh %s a", r.commands(), sub)
				}
				h.leave(w)
				h.leave(b)
			})
		})
	}
}

// A cluster subscription lost to a failover wakes its waiters, is made again after a backoff that grows
// while subscribing fails (each failure wakes them too), and wakes them again once made.
func TestHubClusterResubscribesWithBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, r, _ := testHub(t, true, true)
		w := mustJoin(t, h, "a")
		time.Sleep(time.Second)
		r.fail(errConnReset, errConnReset, errConnReset)
		r.dropReceivers("a")
		synctest.Wait()
		if !woken(w) {
			t.Fatal("the waiter was not woken when its subscription was lost")
		}
		time.Sleep(400 * ms) // past the last failure, at 1350 ms
		woken(w)
		time.Sleep(600 * ms)
		if got := r.times("ssubscribe a"); len(got) != 5 || got[0] != 0 || !pausesOK(time.Second, got[1:]) {
			t.Fatalf("SSUBSCRIBE a sent at %v, want at 0, then after 4 growing pauses from 1s", got)
		}
		if !woken(w) || r.subscribed("a") != 1 {
			t.Fatalf("after the outage: a subscribed %d times; want 1, and the waiter woken", r.subscribed("a"))
		}
		h.leave(w)
	})
}

// Close makes joiners waiting for a subscription return ErrClosed, or the error its subscription ended
// with as the Client's lifetime ended.
func TestHubCloseEndsJoins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, r, stop := testHub(t, false, false)
		r.hold()
		res := joinAsync(context.Background(), h, "a")
		synctest.Wait()
		stop()
		if j := <-res; !errors.Is(j.err, ErrClosed) && !errors.Is(j.err, context.Canceled) {
			t.Fatalf("join during Close: %v", j.err)
		}
		if _, err := h.join(context.Background(), "a", nil, 1, "", "", true); !errors.Is(err, ErrClosed) {
			t.Fatalf("join after Close: %v, want ErrClosed", err)
		}
	})
}
