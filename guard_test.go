package relock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// A guarded write lands while its hold is current, and never once another owner took the lock, even
// while the first holder's Client still believes it holds it (a paused holder).
func TestGuardedWriteLandsOnlyWhileHeld(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, other := newClient(t, srv, nil), newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	for _, fenced := range []bool{false, true} {
		name := "{guarded}"
		if fenced {
			name = "{guarded-fenced}"
		}
		var opts []relock.LockOption
		if fenced {
			opts = append(opts, relock.WithFencing())
		}
		l := c.Lock(name, opts...)
		if err := l.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		data := name + ":data"
		replies, err := l.GuardedWrite(ctx,
			rdb.B().Set().Key(data).Value("a").Build(),
			rdb.B().Incr().Key(name+":n").Build(),
			rdb.B().Get().Key(data).Build())
		if err != nil {
			t.Fatal(err)
		}
		if len(replies) != 3 {
			t.Fatalf("%d replies; want 3", len(replies))
		}
		if s, _ := replies[0].ToString(); s != "OK" {
			t.Fatalf("SET replied %q", s)
		}
		if n, _ := replies[1].AsInt64(); n != 1 {
			t.Fatalf("INCR replied %d", n)
		}
		if s, _ := replies[2].ToString(); s != "a" {
			t.Fatalf("GET replied %q", s)
		}

		// Another Client takes the lock behind the holder's back; the holder's Client does not know yet.
		if ok, err := other.Lock(name).ForceUnlock(ctx); err != nil || !ok {
			t.Fatalf("ForceUnlock = %v, %v", ok, err)
		}
		if err := other.Lock(name, opts...).LockWithLease(ctx, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		_, err = l.GuardedWrite(ctx, rdb.B().Set().Key(data).Value("stale").Build())
		if !errors.Is(err, relock.ErrNotHeld) {
			t.Fatalf("a stale holder's GuardedWrite = %v; want ErrNotHeld", err)
		}
		if v, _ := do(t, rdb, "GET", data).ToString(); v != "a" {
			t.Fatalf("the stale holder's write landed: %q", v)
		}
		if err := other.Lock(name).Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// For a fenced lock, the guard also refuses a hold whose lock was acquired anew since it began (the
// fencing counter moved on), even when the owner field is in the lock again.
func TestGuardedWriteChecksTheFencingToken(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	l := c.Lock("token-guard", relock.WithFencing())
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.GuardedWrite(ctx, rdb.B().Set().Key("token-guard-data").Value("1").Build()); err != nil {
		t.Fatal(err)
	}
	do(t, rdb, "INCR", "redisson_lock_token:{token-guard}") // as another first acquisition would
	if _, err := l.GuardedWrite(ctx, rdb.B().Set().Key("token-guard-data").Value("2").Build()); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("GuardedWrite after the counter moved = %v; want ErrNotHeld", err)
	}
	if v, _ := do(t, rdb, "GET", "token-guard-data").ToString(); v != "1" {
		t.Fatalf("data = %q; want the first write's", v)
	}
}

// GuardedEval runs the caller's script with its own KEYS and ARGV only while the hold is current.
func TestGuardedEval(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, other := newClient(t, srv, nil), newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	const script = `redis.call('hset', KEYS[1], ARGV[1], ARGV[2]); return {#KEYS, #ARGV, redis.call('hget', KEYS[1], ARGV[1])}`
	l := c.Lock("{eval}", relock.WithFencing())
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	reply, err := l.GuardedEval(ctx, script, []string{"{eval}:h"}, []string{"f", "v"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := reply.ToArray()
	if err != nil || len(got) != 3 {
		t.Fatalf("reply %v, %v", got, err)
	}
	if n, _ := got[0].AsInt64(); n != 1 {
		t.Fatalf("the script saw %d keys; want its own 1", n)
	}
	if n, _ := got[1].AsInt64(); n != 2 {
		t.Fatalf("the script saw %d args; want its own 2", n)
	}
	if s, _ := got[2].ToString(); s != "v" {
		t.Fatalf("the script's HGET = %q", s)
	}
	if _, err := other.Lock("{eval}").ForceUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.GuardedEval(ctx, script, []string{"{eval}:h"}, []string{"f", "stale"}); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("GuardedEval after the hold was lost = %v; want ErrNotHeld", err)
	}
	if v, _ := do(t, rdb, "HGET", "{eval}:h", "f").ToString(); v != "v" {
		t.Fatalf("the stale script ran: %q", v)
	}
}

// A fenced write to a resource elsewhere is refused once a later holder wrote through its fence, whatever
// the stale holder believes; one holder writes as often as it likes.
func TestFencedWriteRefusesAStaleToken(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// A stands for a paused holder, which has not heard of its loss: its Client does not watch its holds.
	a, b := newClient(t, srv, &relock.Options{NoHoldWatch: true}), newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	const fence, data = "{account:7}:fence", "{account:7}:balance"
	la := a.Lock("fenced-res", relock.WithFencing())
	if err := la.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"100", "110"} {
		if _, err := la.FencedWrite(ctx, fence, rdb.B().Set().Key(data).Value(v).Build()); err != nil {
			t.Fatal(err)
		}
	}
	tokenA, _ := la.FencingToken(ctx)
	if f, _ := do(t, rdb, "GET", fence).AsUint64(); f != tokenA {
		t.Fatalf("fence = %d; want A's token %d", f, tokenA)
	}
	// A is paused; its hold is taken over, and B writes.
	if _, err := b.Lock("fenced-res").ForceUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	lb := b.Lock("fenced-res", relock.WithFencing())
	if err := lb.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := lb.FencedWrite(ctx, fence, rdb.B().Set().Key(data).Value("500").Build()); err != nil {
		t.Fatal(err)
	}
	// A resumes: its write is refused, and nothing of it lands.
	_, err := la.FencedWrite(ctx, fence, rdb.B().Set().Key(data).Value("120").Build(), rdb.B().Set().Key("{account:7}:other").Value("x").Build())
	if !errors.Is(err, relock.ErrStaleToken) {
		t.Fatalf("the stale holder's FencedWrite = %v; want ErrStaleToken", err)
	}
	if v, _ := do(t, rdb, "GET", data).ToString(); v != "500" {
		t.Fatalf("balance = %q; want B's 500", v)
	}
	if n, _ := do(t, rdb, "EXISTS", "{account:7}:other").AsInt64(); n != 0 {
		t.Fatal("part of the stale write landed")
	}
}

// Bad input and calls without a hold are refused before anything is sent.
func TestGuardedWriteRefusals(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	set := rdb.B().Set().Key("refused-data").Value("x").Build()
	l := c.Lock("refused")
	before := commandCalls(t, rdb)
	if _, err := l.GuardedWrite(ctx, set); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("GuardedWrite without a hold = %v; want ErrNotHeld", err)
	}
	if _, err := l.GuardedEval(ctx, "return 1", nil, nil); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("GuardedEval without a hold = %v; want ErrNotHeld", err)
	}
	if after := commandCalls(t, rdb); after["evalsha"]+after["eval"] != before["evalsha"]+before["eval"] {
		t.Fatal("a call without a hold ran a script")
	}
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.FencedWrite(ctx, "refused-fence", set); !errors.Is(err, relock.ErrNotFenced) {
		t.Fatalf("FencedWrite on an unfenced lock = %v; want ErrNotFenced", err)
	}
	fl := c.Lock("refused-fenced", relock.WithFencing())
	if err := fl.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := fl.FencedWrite(ctx, "", set); !errors.Is(err, relock.ErrInvalidName) {
		t.Fatalf("FencedWrite with an empty fence = %v; want ErrInvalidName", err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.GuardedWrite(ended, set); !errors.Is(err, context.Canceled) {
		t.Fatalf("GuardedWrite with an ended ctx = %v; want context.Canceled", err)
	}
	if n, _ := do(t, rdb, "EXISTS", "refused-data").AsInt64(); n != 0 {
		t.Fatal("a refused write landed")
	}
	// With no commands, GuardedWrite only checks the hold.
	if replies, err := l.GuardedWrite(ctx); err != nil || len(replies) != 0 {
		t.Fatalf("GuardedWrite() = %v, %v; want no replies, no error", replies, err)
	}
}

// A hold acquired without fencing has no token (0): FencedWrite through a fenced lock object of the same
// name refuses it with ErrNotFenced, running nothing, rather than write with a token that fences nothing.
func TestFencedWriteRefusesAnUnfencedHold(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	const fence, data = "{unfenced:1}:fence", "{unfenced:1}:data"
	if err := c.Lock("unfenced-hold").Lock(ctx); err != nil { // no fencing: token 0
		t.Fatal(err)
	}
	before := commandCalls(t, rdb)
	fl := c.Lock("unfenced-hold", relock.WithFencing())
	if _, err := fl.FencedWrite(ctx, fence, rdb.B().Set().Key(data).Value("x").Build()); !errors.Is(err, relock.ErrNotFenced) {
		t.Fatalf("FencedWrite of a hold acquired without fencing = %v; want ErrNotFenced", err)
	}
	if after := commandCalls(t, rdb); after["evalsha"]+after["eval"] != before["evalsha"]+before["eval"] {
		t.Fatal("the refused FencedWrite ran a script")
	}
	if n, _ := do(t, rdb, "EXISTS", data, fence).AsInt64(); n != 0 {
		t.Fatalf("the refused FencedWrite wrote %d keys", n)
	}
}
