package relock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// These tests drive the hold table, the watchdog and the undo protocol without Redis and without the wall
// clock: a fakeRunner answers their scripts as each test says, inside a synctest bubble whose clock only
// moves when every goroutine waits. The real-Redis suites test the same behaviour end to end.

// errNoAnswer is a failure whose outcome is unknown (as a broken connection's is): not a reply from Redis.
var errNoAnswer = errors.New("connection reset")

// fakeRunner answers scripts with the functions a test sets, and records the batches it was sent.
type fakeRunner struct {
	mu      sync.Mutex
	int     func(call scriptCall) (int64, error)
	acquire func(call scriptCall) ([4]int64, error)
	ints    func(call scriptCall) ([]int64, error)
	batch   func(call scriptCall) ([]int64, error) // one run of a batch
	batches []fakeBatch
}

// fakeBatch is one runBatch: when it was sent, and its runs.
type fakeBatch struct {
	at    time.Time
	calls []scriptCall
}

// The fake's functions may keep the calls they are given: each gets its own copy of the args, which the
// caller reuses once the run returns (argLists).

func (f *fakeRunner) runInt(_ context.Context, call scriptCall) (int64, error) {
	call.args = slices.Clone(call.args)
	f.mu.Lock()
	fn := f.int
	f.mu.Unlock()
	return fn(call)
}

func (f *fakeRunner) runAcquire(_ context.Context, call scriptCall) ([4]int64, error) {
	call.args = slices.Clone(call.args)
	f.mu.Lock()
	fn := f.acquire
	f.mu.Unlock()
	return fn(call)
}

func (f *fakeRunner) runInts(_ context.Context, call scriptCall) ([]int64, error) {
	call.args = slices.Clone(call.args)
	f.mu.Lock()
	fn := f.ints
	f.mu.Unlock()
	return fn(call)
}

func (f *fakeRunner) runBatch(_ context.Context, calls []scriptCall) ([][]int64, []error) {
	f.mu.Lock()
	f.batches = append(f.batches, fakeBatch{at: time.Now(), calls: calls})
	fn := f.batch
	f.mu.Unlock()
	replies, errs := make([][]int64, len(calls)), make([]error, len(calls))
	for i, call := range calls {
		replies[i], errs[i] = fn(call)
	}
	return replies, errs
}

func (f *fakeRunner) sent() []fakeBatch {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeBatch(nil), f.batches...)
}

// holdsOf returns how many holds a run of a renewal script carries (ARGV[1] is the timeout).
func holdsOf(call scriptCall) int { return len(call.keys) }

// allRenewed answers a renewal run: every hold renewed.
func allRenewed(call scriptCall) ([]int64, error) {
	out := make([]int64, holdsOf(call))
	for i := range out {
		out[i] = 1
	}
	return out, nil
}

// newFakeClient returns a Client whose scripts f answers, with the given watchdog timeout, and no Redis
// connection; its subscription hub has no connection either: only what does not wait for a release
// works. The test must call closeFake.
func newFakeClient(t testing.TB, f *fakeRunner, timeout time.Duration) *Client {
	life, end := context.WithCancel(context.Background())
	closing, beginClose := context.WithCancel(life)
	c := &Client{id: "client", watchdogTimeout: timeout, watchdogTimeoutArg: fmtMillis(timeout), life: life, end: end,
		closing: closing, beginClose: beginClose, scripts: f}
	c.pubsub.Store(pubPlain)
	c.hub = newHub(nil, c.id, life, false, nil)
	c.holds = newHoldTable(c, timeout)
	var err error
	if c.tel, err = newTelemetry(tracenoop.NewTracerProvider(), noop.NewMeterProvider(), c.holds.heldByKind); err != nil {
		t.Fatal(err)
	}
	return c
}

// closeFake is Close for a Client made by newFakeClient.
func closeFake(c *Client) {
	c.closed.Store(true)
	c.bg.close()
	c.end()
	c.holds.close()
	_ = c.bg.wait(context.Background())
}

// acquireFake records a successful acquisition of lock name by owner, as the engine does: a first one, or
// a reentry (the count Redis would answer: one more than the owner has).
func acquireFake(c *Client, name, owner string, lease time.Duration) holdKey {
	k := holdKey{key: name, field: c.id + ":" + owner}
	c.holds.acquired(k, &acquisition{kind: kindRLock, name: name, count: c.holds.count(k) + 1, lease: lease, sentAt: time.Now(),
		renew: renewal{script: scriptRenew, keys: []string{name}, args: []string{k.field}}, parent: context.Background()})
	return k
}

// The watchdog renews every hold once per timeout/3, all of them in one batch (split into runs of
// renewBatchSize), however many there are; holds acquired within timeout/6 of each other share it.
func TestSyncWatchdogRenewsInOneBatchPerPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRunner{batch: allRenewed}
		c := newFakeClient(t, f, 3*time.Second)
		defer closeFake(c)
		start := time.Now()
		for i := range 1100 {
			acquireFake(c, "lock", string(rune('a'+i%26))+"-"+fmtMillis(time.Duration(i)*time.Millisecond), 0)
		}
		time.Sleep(400 * time.Millisecond)
		late := acquireFake(c, "late", "owner", 0) // within timeout/6 of the others' renewal
		time.Sleep(2*time.Second + 100*time.Millisecond)
		synctest.Wait()
		batches := f.sent()
		if len(batches) != 2 {
			t.Fatalf("%d batches in 2.5 s, want 2 (at 1 s and 2 s)", len(batches))
		}
		for i, b := range batches {
			if want := start.Add(time.Duration(i+1) * time.Second); !b.at.Equal(want) {
				t.Errorf("batch %d sent at +%v, want +%v", i, b.at.Sub(start), want.Sub(start))
			}
			n := 0
			for _, call := range b.calls {
				if holdsOf(call) > renewBatchSize || call.args[0] != "3000" {
					t.Errorf("a run of %d holds with timeout %q", holdsOf(call), call.args[0])
				}
				n += holdsOf(call)
			}
			if n != 1101 || len(b.calls) != 3 {
				t.Errorf("batch %d: %d holds in %d runs, want 1101 in 3", i, n, len(b.calls))
			}
		}
		if _, _, ok := c.holds.expiry(late); !ok {
			t.Fatal("the late hold is gone")
		}
	})
}

// A hold with a lease is checked every timeout/3 (timeout 0: nothing extended) until its lease ends, and
// then ends without a round trip.
func TestSyncLeaseHoldsAreCheckedNotRenewed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRunner{batch: allRenewed}
		c := newFakeClient(t, f, 3*time.Second)
		defer closeFake(c)
		start := time.Now()
		k := acquireFake(c, "leased", "owner", 2500*time.Millisecond)
		held, err := c.holds.holdContext(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2400 * time.Millisecond)
		synctest.Wait()
		if held.Err() != nil {
			t.Fatalf("ended before its lease: %v", context.Cause(held))
		}
		time.Sleep(200 * time.Millisecond)
		synctest.Wait()
		if !errors.Is(context.Cause(held), errLeaseExpired) {
			t.Fatalf("cause %v, want the lease's end", context.Cause(held))
		}
		batches := f.sent()
		if len(batches) != 2 {
			t.Fatalf("%d checks, want 2 (at 1 s and 2 s)", len(batches))
		}
		for i, b := range batches {
			if b.calls[0].args[0] != "0" {
				t.Errorf("check %d sent timeout %q, want 0 (check only)", i, b.calls[0].args[0])
			}
			if want := start.Add(time.Duration(i+1) * time.Second); !b.at.Equal(want) {
				t.Errorf("check %d at +%v", i, b.at.Sub(start))
			}
		}
	})
}

// A renewal answered 0 ends the hold at once as lost (gone from Redis); renewals that get no answer are
// tried again every timeout/10 until the hold's expiry, which ends it as not renewed in time.
func TestSyncRenewalOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRunner{batch: func(call scriptCall) ([]int64, error) {
			return make([]int64, holdsOf(call)), nil // gone
		}}
		c := newFakeClient(t, f, 3*time.Second)
		defer closeFake(c)
		gone, _ := c.holds.holdContext(context.Background(), acquireFake(c, "gone", "owner", 0))
		time.Sleep(time.Second)
		synctest.Wait()
		if !errors.Is(context.Cause(gone), errHoldGone) {
			t.Fatalf("cause %v after a renewal found the hold gone", context.Cause(gone))
		}

		f.mu.Lock()
		f.batch = func(scriptCall) ([]int64, error) { return nil, errNoAnswer }
		f.mu.Unlock()
		start := time.Now()
		before := len(f.sent())
		silent, _ := c.holds.holdContext(context.Background(), acquireFake(c, "silent", "owner", 0))
		time.Sleep(2900 * time.Millisecond)
		synctest.Wait()
		if silent.Err() != nil {
			t.Fatalf("a hold ended %v before its expiry: %v", time.Since(start), context.Cause(silent))
		}
		time.Sleep(200 * time.Millisecond)
		synctest.Wait()
		if !errors.Is(context.Cause(silent), errRenewTimeout) {
			t.Fatalf("cause %v, want not renewed in time", context.Cause(silent))
		}
		// At 1 s, then every 300 ms until 3 s: 1.0, 1.3, ..., 2.8, and the last try at 3.0 is past expiry.
		if tries := len(f.sent()) - before; tries < 6 || tries > 8 {
			t.Fatalf("%d renewal tries without an answer, want about 7", tries)
		}
	})
}

// An acquisition whose reply is lost is undone in the background: the release carries the count the
// acquisition would have made, and is repeated until Redis answers. Meanwhile the owner's next operation
// on the lock waits for it, but not past one of its sendings that gets no answer: the operation then fails
// with that failure (ErrUnavailable), sending nothing. (It waited for the undo however long that took:
// until the hold it might undo would have expired, 30 s by default, while Redis was down.)
func TestSyncLostAcquisitionIsUndone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var undos []scriptCall
		answered := make(chan struct{})
		f := &fakeRunner{batch: allRenewed}
		f.acquire = func(scriptCall) ([4]int64, error) { return [4]int64{}, errNoAnswer }
		f.int = func(call scriptCall) (int64, error) {
			undos = append(undos, call)
			if len(undos) < 3 {
				return 0, errNoAnswer
			}
			if call.script == scriptUndoAcquire {
				return 1, nil // the attempt ran: release its level
			}
			close(answered)
			return 0, nil
		}
		c := newFakeClient(t, f, 3*time.Second)
		defer closeFake(c)
		l := c.Lock("undone")
		ctx := WithOwner(context.Background(), "owner")
		if _, err := l.TryLock(ctx, 0, 0); !errors.Is(err, errNoAnswer) {
			t.Fatalf("TryLock = %v", err)
		}
		f.mu.Lock()
		acquisitions := 0
		f.acquire = func(scriptCall) ([4]int64, error) { acquisitions++; return [4]int64{1, 1, 0}, nil }
		f.mu.Unlock()
		// The owner's next attempt waits for the undo's next sending, which gets no answer.
		if ok, err := l.TryLock(ctx, 0, 0); ok || !errors.Is(err, ErrUnavailable) || !errors.Is(err, errNoAnswer) {
			t.Fatalf("TryLock while the undo gets no answer = %v, %v, want ErrUnavailable and its failure", ok, err)
		}
		if acquisitions != 0 {
			t.Fatal("an attempt was sent while the undo was under way")
		}
		// Once the undo is answered (3 sendings, 50 ms apart), the next attempt goes through at once.
		start := time.Now()
		<-answered
		synctest.Wait()
		if waited := time.Since(start); waited > 2*retryBackoff {
			t.Errorf("the undo was answered %v later, want at most %v", waited, 2*retryBackoff)
		}
		if ok, err := l.TryLock(ctx, 0, 0); !ok || err != nil {
			t.Fatalf("TryLock after the undo = %v, %v", ok, err)
		}
		if len(undos) != 4 {
			t.Fatalf("the undo sent %d scripts, want 4 (3 decisions, the last answered, then the release)", len(undos))
		}
		for _, u := range undos[:3] {
			// ARGV: owner field, expected count, attempt id, mark TTL.
			if u.script != scriptUndoAcquire || u.args[0] != c.id+":owner" || u.args[1] != "1" || u.args[2] != undos[0].args[2] {
				t.Fatalf("undo sent %s %v, want the decision on the owner's count 1 and the lost attempt", u.script.name, u.args)
			}
		}
		// ARGV: owner field, message, expected count, request, publish command.
		if u := undos[3]; u.script != scriptRelease || u.args[0] != c.id+":owner" || u.args[2] != "1" || u.args[3] != "" {
			t.Fatalf("undo sent %s %v, want the owner's release of count 1", u.script.name, u.args)
		}
	})
}

// An Unlock whose ctx has ended ends the hold at once (no renewal after it) and releases in the background,
// again and again until Redis answers.
func TestSyncUnlockWithEndedContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		releases := 0
		f := &fakeRunner{batch: allRenewed,
			acquire: func(scriptCall) ([4]int64, error) { return [4]int64{1, 1, 0}, nil },
			int: func(call scriptCall) (int64, error) {
				releases++
				if releases < 4 {
					return 0, errNoAnswer
				}
				if call.args[3][0] != '?' {
					t.Errorf("a background release sent as a first request: %q", call.args[3])
				}
				return 0, nil
			}}
		c := newFakeClient(t, f, 3*time.Second)
		defer closeFake(c)
		l := c.Lock("ended")
		owner := WithOwner(context.Background(), "owner")
		if err := l.Lock(owner); err != nil {
			t.Fatal(err)
		}
		held, _ := l.HoldContext(owner)
		ended, cancel := context.WithCancel(owner)
		cancel()
		if err := l.Unlock(ended); !errors.Is(err, context.Canceled) {
			t.Fatalf("Unlock = %v", err)
		}
		if !errors.Is(context.Cause(held), context.Canceled) {
			t.Fatalf("hold context %v right after Unlock, want released", context.Cause(held))
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if releases != 4 {
			t.Fatalf("%d releases sent, want 4 (three unanswered)", releases)
		}
		if n := len(f.sent()); n != 0 {
			t.Fatalf("%d renewal batches after the final Unlock", n)
		}
		if _, err := l.HoldContext(owner); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("HoldContext after the release = %v", err)
		}
	})
}

// prepareDuringSettling starts a settling of k, then a prepare of k on another goroutine, and returns once
// prepare waits for the settling (in a synctest bubble); prepare's error comes on the channel.
func prepareDuringSettling(c *Client, k holdKey) (*settling, <-chan error) {
	_, settling := c.holds.settle(k)
	got := make(chan error, 1)
	go func() {
		_, err := c.holds.prepare(context.Background(), k)
		got <- err
	}()
	synctest.Wait()
	return settling, got
}

// An operation that gave up waiting for a settling whose attempt failed reports that attempt's failure,
// even when the settling ended before the operation read it (it reported "%!w(<nil>)" then:
// safety/explore, ReadWriteLock).
func TestPrepareReportsTheSettlingsFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newFakeClient(t, &fakeRunner{}, 3*time.Second)
		defer closeFake(c)
		k := holdKey{key: "k", field: "f"}
		settling, got := prepareDuringSettling(c, k)
		c.holds.settleFailing(k, errConnReset)
		settling.done(-1) // the settling ends before prepare runs again
		err := <-got
		if !errors.Is(err, errConnReset) || !errors.Is(err, ErrUnavailable) || strings.Contains(err.Error(), "%!") {
			t.Fatalf("prepare = %v, want the settling's failure (%v), matching ErrUnavailable", err, errConnReset)
		}
	})
}

// A settling whose key's record the table dropped meanwhile (the watchdog ends a queue entry whose
// refreshes fail, settling or not) still tells an operation waiting for it that its attempt failed: the
// operation returns at once with the failure. Before, the failure was looked up by key, found no record,
// and the operation waited for the settling to end (safety/explore, FairLock: a Lock made while Redis
// refused connections took 800 ms, the queue leave being retried for the watchdog timeout). A settling is
// now a record of its own (settle.go), whatever becomes of the key's hold.
func TestPrepareHearsASettlingWhoseRecordWasDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newFakeClient(t, &fakeRunner{}, 3*time.Second)
		defer closeFake(c)
		k := acquireFake(c, "entries", "f", 0)
		settling, got := prepareDuringSettling(c, k)
		c.holds.mu.Lock()
		var out stepped
		c.holds.stepLocked(c.holds.holds[k], &holdEvent{ev: evShut, cause: errRenewTimeout}, &out) // the table drops the record
		c.holds.mu.Unlock()
		out.finish(c.tel)
		settling.failing(errConnReset)
		synctest.Wait()
		select {
		case err := <-got:
			if !errors.Is(err, errConnReset) || !errors.Is(err, ErrUnavailable) {
				t.Fatalf("prepare = %v, want the settling's failure (%v), matching ErrUnavailable", err, errConnReset)
			}
		default:
			t.Fatal("prepare still waits after the settling's attempt failed")
		}
		settling.done(-1)
	})
}
