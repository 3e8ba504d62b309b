package relock

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/redistest"
)

// A release request is sent again when its reply is lost ("!<id>" first, "?<id>" after), and a sending
// whose reply was lost may still reach Redis after a later one: held up on a stalled connection, or
// buffered in a proxy. Here a runner holds such sendings back, failing them as a connection that broke
// mid-reply would, and the test sends them itself, late, exactly as the Client built them: Redis cannot
// tell a sending held back on the way from one sent late. Whatever the order, a request is applied once.

// A step is what the held-back runner does with one run of the release script.
type step int

const (
	pass step = iota // run it and hand back its reply
	keep             // keep it, unsent, for the test to send later; fail it as a lost reply
	lose             // run it on Redis, and fail it as a lost reply
)

// heldBackRunner runs every script with the Client's runner, and does with the runs of one script, in
// turn, what its steps say (pass once the steps are used up). It is installed before the Client runs
// anything (holdingBack), and stays: the Client's background work reads its runner at any time.
type heldBackRunner struct {
	runner
	mu     sync.Mutex
	script *script
	steps  []step
	held   []scriptCall
}

// holdingBack puts a heldBackRunner in front of c's runner, which it returns: what the test sends late
// goes there directly.
func holdingBack(c *Client) (*heldBackRunner, runner) {
	direct := c.scripts
	r := &heldBackRunner{runner: direct}
	c.scripts = r
	return r, direct
}

// next returns what to do with call.
func (r *heldBackRunner) next(call scriptCall) step {
	r.mu.Lock()
	defer r.mu.Unlock()
	if call.script != r.script {
		return pass
	}
	do := pass
	if len(r.steps) > 0 {
		do, r.steps = r.steps[0], r.steps[1:]
	}
	if do == keep { // sent later: with its own copy of the args, which the caller reuses (argLists)
		call.args = slices.Clone(call.args)
		r.held = append(r.held, call)
	}
	return do
}

func (r *heldBackRunner) runInt(ctx context.Context, call scriptCall) (int64, error) {
	switch r.next(call) {
	case keep:
		return 0, errReplyCut
	case lose:
		if _, err := r.runner.runInt(ctx, call); err != nil {
			return 0, err
		}
		return 0, errReplyCut
	}
	return r.runner.runInt(ctx, call)
}

func (r *heldBackRunner) runInts(ctx context.Context, call scriptCall) ([]int64, error) {
	switch r.next(call) {
	case keep:
		return nil, errReplyCut
	case lose:
		if _, err := r.runner.runInts(ctx, call); err != nil {
			return nil, err
		}
		return nil, errReplyCut
	}
	return r.runner.runInts(ctx, call)
}

// plan sets what the next runs of s meet.
func (r *heldBackRunner) plan(s *script, steps ...step) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.script, r.steps, r.held = s, steps, nil
}

// late returns the sendings held back, in the order they were sent, once every planned step was met.
func (r *heldBackRunner) late(t *testing.T) []scriptCall {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.steps) != 0 {
		t.Fatalf("%d planned sendings of the release were not made", len(r.steps))
	}
	return r.held
}

// Every lock kind's release, in the orders of sendings that a lost reply allows; the late sendings change
// nothing and reply the owner's count.
func TestLateReleaseSendingChangesNothing(t *testing.T) {
	srv := redistest.Start(t)
	c, err := New([]string{srv.Addr()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(WithOwner(context.Background(), "owner"), 20*time.Second)
	defer cancel()
	r, direct := holdingBack(c)
	kinds := releaseKinds(c)
	cases := []struct {
		name    string
		holds   int    // the owner's hold count before the Unlock
		steps   []step // what the Unlock's sendings meet
		unlock  int    // Unlocks made, each releasing one level; the first meets the steps
		ended   bool   // the Unlocks' ctx has ended: they release in the background
		between bool   // another owner holds the lock, and releases it, before the owner locks again
		relock  bool   // the owner locks again once the Unlocks returned
	}{
		// The first sending is held back and its repeat applies: the late first sending must not take
		// the level the owner still holds (a double release).
		{name: "reentrant", holds: 2, steps: []step{keep}, unlock: 1},
		// The repeat releases the last hold and the owner locks again: the late first sending must not
		// end that new hold.
		{name: "final", holds: 1, steps: []step{keep}, unlock: 1, relock: true},
		// The same with a late repeat: the first sending and the first repeat are held back, the second
		// repeat releases the last hold.
		{name: "final, late repeat", holds: 1, steps: []step{keep, keep}, unlock: 1, relock: true},
		// The first sending ran and its reply was lost; a repeat is held back and the next one finds the
		// request applied; the owner's next Unlock (another request) leaves it holding once: the late
		// repeat must not take that level.
		{name: "reentrant, late repeat of an applied request", holds: 3, steps: []step{lose, keep}, unlock: 2},
		// Another owner's hold between the two holds: its final release deletes the lock's undone
		// attempts' marks, not the void marks.
		{name: "final, another owner's hold between", holds: 1, steps: []step{keep}, unlock: 1, between: true, relock: true},
		// In the background: an Unlock whose ctx had ended sends its request from the background, as a
		// repeat each time; the first is held back, the next releases the last hold.
		{name: "final, in the background", holds: 1, steps: []step{keep}, unlock: 1, ended: true, relock: true},
	}
	for j, k := range kinds {
		for i, tc := range cases {
			l := k.lock("late-" + strconv.Itoa(j) + "-" + strconv.Itoa(i))
			t.Run(l.kind.String()+"/"+tc.name, func(t *testing.T) {
				owner, err := c.ownerField(ctx)
				if err != nil {
					t.Fatal(err)
				}
				field := l.spec.field(owner)
				const want = "1" // in every case, the owner holds one level when the late sendings arrive
				count := func() string { return holdCount(t, ctx, c, l, field) }
				for range tc.holds {
					if err := l.Lock(ctx); err != nil {
						t.Fatal(err)
					}
				}
				r.plan(k.release, tc.steps...)
				for range tc.unlock {
					if !tc.ended {
						if err := l.Unlock(ctx); err != nil {
							t.Fatal(err)
						}
						continue
					}
					ended, end := context.WithCancel(ctx)
					end()
					if err := l.Unlock(ended); err == nil {
						t.Fatal("Unlock with an ended ctx returned nil")
					}
					l.settled(ctx)
				}
				late := r.late(t)
				if tc.between {
					other := WithOwner(ctx, "other")
					if err := l.Lock(other); err != nil {
						t.Fatal(err)
					}
					if err := l.Unlock(other); err != nil {
						t.Fatal(err)
					}
				}
				if tc.relock {
					if err := l.Lock(ctx); err != nil {
						t.Fatal(err)
					}
				}
				if n := count(); n != want {
					t.Fatalf("hold count before the late sendings: %q, want %q", n, want)
				}
				replies := make([]int64, len(late))
				for i, call := range late {
					if replies[i], err = direct.runInt(ctx, call); err != nil {
						t.Fatalf("late sending %s: %v", call.args[3], err)
					}
				}
				if n := count(); n != want {
					t.Fatalf("hold count once the late sendings arrived: %q, want %q (a request applied twice)", n, want)
				}
				for i, left := range replies { // a void sending reports the owner's count, as a repeat does
					if strconv.FormatInt(left, 10) != want {
						t.Errorf("late sending %s replied %d, want %s", late[i].args[3], left, want)
					}
				}
				// The void marks do not outlive their use by much: the last repeat gave them 2 s.
				voids := companion("relock_release_void", l.name)
				if ttl, err := c.rdb.Do(ctx, c.rdb.B().Pttl().Key(voids).Build()).AsInt64(); err != nil || ttl <= 0 || ttl > undoMarkTTL.Milliseconds() {
					t.Errorf("PTTL of %s = %d, %v; want within (0, %d]", voids, ttl, err, undoMarkTTL.Milliseconds())
				}
				// The owner's hold is whole: its one level left ends with one Unlock.
				if err := l.Unlock(ctx); err != nil {
					t.Fatalf("Unlock of the hold left: %v", err)
				}
				if n := count(); n != "" {
					t.Fatalf("hold count after the last Unlock: %q, want none", n)
				}
			})
		}
	}
}

// (b) for a release that hands the lock over within the Client (see gates): A's last Unlock is sent as a
// handoff to W, which waits in the Client's gate, and is held back; the handoff is undone as an attempt of
// W's, and A's repeat releases the lock, which W then takes and releases. A locks again: the late handoff
// must neither release A's new hold nor hand the lock to W (the undone attempt's mark went with the
// lock's final release).
func TestLateHandoffChangesNothing(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const name = "late-handoff"
	c := newTestClient(t, srv)
	r, direct := holdingBack(c)
	g := gateScripts(c)
	l := c.Lock(name)
	a := WithOwner(ctx, "A")
	if err := l.Lock(a); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- l.Lock(WithOwner(ctx, "W")) }()
	until(t, "W sleeps in the gate", func() bool { // as behindLocalHolder
		c.gates.mu.Lock()
		defer c.gates.mu.Unlock()
		gt := c.gates.m[name]
		return gt != nil && gt.head != nil && gt.head.phase == wSleeping && g.ran(scriptAcquire) == 3
	})
	r.plan(scriptHandoff, keep)
	if err := l.Unlock(a); err != nil {
		t.Fatalf("A's Unlock: %v", err)
	}
	late := r.late(t)
	within(t, got, "W")
	w := WithOwner(ctx, "W")
	if err := l.Unlock(w); err != nil {
		t.Fatalf("W's Unlock: %v", err)
	}
	if err := l.Lock(a); err != nil {
		t.Fatal(err)
	}
	reply, err := direct.runInts(ctx, late[0])
	if err != nil {
		t.Fatalf("late handoff: %v", err)
	}
	hold, err := c.rdb.Do(ctx, c.rdb.B().Hgetall().Key(name).Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	if len(hold) != 1 || hold[c.ID()+":A"] != "1" {
		t.Fatalf("the lock once the late handoff arrived: %v, want A's hold, once (it replied %v)", hold, reply)
	}
	if reply[0] != 1 || reply[1] != 0 {
		t.Fatalf("the late handoff replied %v, want [1 0 0]: A's count, not handed", reply)
	}
	if err := l.Unlock(a); err != nil {
		t.Fatalf("A's Unlock of its new hold: %v", err)
	}
}

// (c) No sending of a release is answered until the hold would have expired: the Client gives up
// sending it, and any of its sendings may still reach Redis after the owner's next hold began. The
// owner's next operation on the lock sends it once more first (see owedSending): the sendings arriving
// after that change nothing, and the new hold stays whole.
func TestReleaseNeverAnsweredIsVoidedByTheOwnersNextHold(t *testing.T) {
	srv := redistest.Start(t)
	c := newTestClient(t, srv)
	ctx, cancel := context.WithTimeout(WithOwner(context.Background(), "owner"), 20*time.Second)
	defer cancel()
	r, direct := holdingBack(c)
	kinds := releaseKinds(c)
	for j, k := range kinds {
		l := k.lock("unanswered-" + strconv.Itoa(j))
		t.Run(l.kind.String(), func(t *testing.T) {
			owner, err := c.ownerField(ctx)
			if err != nil {
				t.Fatal(err)
			}
			field := l.spec.field(owner)
			count := func() string { return holdCount(t, ctx, c, l, field) }
			const lease = 400 * time.Millisecond
			if ok, err := l.TryLock(ctx, 0, lease); !ok || err != nil {
				t.Fatalf("TryLock = %v, %v", ok, err)
			}
			steps := make([]step, 1000) // every sending is held back: none reaches Redis
			for i := range steps {
				steps[i] = keep
			}
			r.plan(k.release, steps...)
			if err := l.Unlock(ctx); err == nil {
				t.Fatal("Unlock whose reply was lost returned nil")
			}
			k := holdKey{key: l.name, field: field}
			for c.holds.settling(k) { // the release is sent again and again until the hold's expiry
				time.Sleep(10 * time.Millisecond)
			}
			r.mu.Lock()
			late := r.held
			r.steps = nil // from now on every sending passes
			r.mu.Unlock()
			if len(late) < 2 {
				t.Fatalf("%d sendings held back; want the first and its repeats", len(late))
			}
			// The Client stops at the hold's expiry as it reckons it, from when the acquisition was sent: Redis
			// drops the hold a little later.
			for deadline := time.Now().Add(time.Second); count() != ""; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("hold count 1 s after the hold's expiry: %q, want none", count())
				}
			}
			if err := l.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			for _, call := range late {
				if _, err := direct.runInt(ctx, call); err != nil {
					t.Fatalf("late sending %s: %v", call.args[3], err)
				}
			}
			if n := count(); n != "1" {
				t.Fatalf("hold count once the late sendings arrived: %q, want 1 (a late sending ended the owner's next hold)", n)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("Unlock of the new hold: %v", err)
			}
		})
	}
}

// releaseKind is a lock kind whose releases are made once whatever the order of their sendings: how to
// make one of c's, and its release script.
type releaseKind struct {
	lock    func(name string) *RLock
	release *script
}

func releaseKinds(c *Client) []releaseKind {
	return []releaseKind{
		{func(name string) *RLock { return c.Lock(name) }, scriptRelease},
		{func(name string) *RLock { return c.FairLock(name) }, scriptFairRelease},
		{func(name string) *RLock { return c.ReadWriteLock(name).ReadLock() }, scriptRWReadRelease},
		{func(name string) *RLock { return c.ReadWriteLock(name).WriteLock() }, scriptRWWriteRelease},
	}
}

// holdCount is the owner field's hold count in the lock's hash, as Redis has it ("" when none).
func holdCount(t *testing.T, ctx context.Context, c *Client, l *RLock, field string) string {
	t.Helper()
	n, err := c.rdb.Do(ctx, c.rdb.B().Hget().Key(l.name).Field(field).Build()).ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		t.Fatal(err)
	}
	return n
}
