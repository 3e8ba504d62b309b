package relock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// A hold deleted or taken behind its holder's back ends its HoldContext within milliseconds, long before
// the watchdog's next check (the timeout here is 30 s: its first check would come after 10 s).
func TestLossSeenAtOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, other := newClient(t, srv, nil), newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 30*time.Second)
	cases := []struct {
		name, kind string
		lose       func(t *testing.T, name string)
	}{
		{"force unlock", "lock", func(t *testing.T, name string) {
			if ok, err := other.Lock(name).ForceUnlock(ctx); err != nil || !ok {
				t.Fatalf("ForceUnlock = %v, %v", ok, err)
			}
		}},
		{"DEL", "lock", func(t *testing.T, name string) { do(t, rdb, "DEL", name) }},
		{"taken over", "lock", func(t *testing.T, name string) {
			do(t, rdb, "DEL", name)
			if err := other.Lock(name).LockWithLease(ctx, time.Second); err != nil {
				t.Error(err)
			}
		}},
		{"FLUSHALL", "lock", func(t *testing.T, name string) { do(t, rdb, "FLUSHALL") }},
		{"fair DEL", "fair", func(t *testing.T, name string) { do(t, rdb, "DEL", name) }},
		{"write DEL", "write", func(t *testing.T, name string) { do(t, rdb, "DEL", name) }},
		{"read DEL", "read", func(t *testing.T, name string) { do(t, rdb, "DEL", name) }},
		{"lease hold DEL", "lease", func(t *testing.T, name string) { do(t, rdb, "DEL", name) }},
	}
	for _, tc := range cases {
		name := "seen-" + tc.kind + "-" + tc.name
		var l *relock.RLock
		switch tc.kind {
		case "fair":
			l = c.FairLock(name)
		case "write":
			l = c.ReadWriteLock(name).WriteLock()
		case "read":
			l = c.ReadWriteLock(name).ReadLock()
		default:
			l = c.Lock(name)
		}
		var err error
		if tc.kind == "lease" {
			err = l.LockWithLease(ctx, time.Minute)
		} else {
			err = l.Lock(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		hctx, err := l.HoldContext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // the watch reads a hold once it has lasted a few milliseconds
		start := time.Now()
		tc.lose(t, name)
		select {
		case <-hctx.Done():
			if !errors.Is(context.Cause(hctx), relock.ErrLockLost) {
				t.Fatalf("%s: cause = %v; want ErrLockLost", tc.name, context.Cause(hctx))
			}
			t.Logf("%s: the holder knew after %v", tc.name, time.Since(start))
		case <-time.After(2 * time.Second):
			t.Fatalf("%s: the hold context still runs 2 s after the hold was gone", tc.name)
		}
		if err := l.Unlock(ctx); !errors.Is(err, relock.ErrNotHeld) {
			t.Fatalf("%s: Unlock = %v; want ErrNotHeld", tc.name, err)
		}
	}
}

// What the Client itself does to its holds' keys is no loss: renewals, reentries, a partial unlock, a
// read lock's other owner leaving, a release (whose invalidation may arrive before its reply).
func TestOwnChangesAreNoLoss(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, &relock.Options{WatchdogTimeout: 300 * time.Millisecond})
	ctx := ctxTimeout(t, 30*time.Second)
	l := c.Lock("own-changes")
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	hctx, _ := l.HoldContext(ctx)
	for range 5 {
		if err := l.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // renewals every 100 ms
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := hctx.Err(); err != nil {
		t.Fatalf("the hold ended under its owner's own changes: %v", context.Cause(hctx))
	}

	rw := c.ReadWriteLock("own-readers")
	a, b := relock.WithOwner(ctx, "a"), relock.WithOwner(ctx, "b")
	for _, o := range []context.Context{a, b} {
		if err := rw.ReadLock().Lock(o); err != nil {
			t.Fatal(err)
		}
	}
	bctx, _ := rw.ReadLock().HoldContext(b)
	time.Sleep(50 * time.Millisecond)
	if err := rw.ReadLock().Unlock(a); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := bctx.Err(); err != nil {
		t.Fatalf("a reader's hold ended when another reader left: %v", context.Cause(bctx))
	}

	// Many quick holds and releases: none is reported lost.
	for range 200 {
		if err := l.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rw.ReadLock().Unlock(b); err != nil {
		t.Fatal(err)
	}
}

// With NoHoldWatch, only the watchdog tells a loss: a deleted hold's context still runs well before its
// next check.
func TestNoHoldWatch(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, &relock.Options{NoHoldWatch: true, WatchdogTimeout: 3 * time.Second})
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	l := c.Lock("no-watch")
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	hctx, _ := l.HoldContext(ctx)
	time.Sleep(50 * time.Millisecond)
	do(t, rdb, "DEL", "no-watch")
	time.Sleep(300 * time.Millisecond)
	if hctx.Err() != nil {
		t.Fatal("the loss was seen without the watch")
	}
	<-hctx.Done() // the watchdog's check, within timeout/3
	if !errors.Is(context.Cause(hctx), relock.ErrLockLost) {
		t.Fatalf("cause = %v", context.Cause(hctx))
	}
}

// A PermitSemaphore's permit taken away behind its holder's back (its sorted set deleted) ends the
// permit's context within milliseconds too.
func TestPermitLossSeenAtOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	s := c.PermitSemaphore("seen-permits")
	if _, err := s.TrySetPermits(ctx, 2); err != nil {
		t.Fatal(err)
	}
	p, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pctx, err := p.Context(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	do(t, rdb, "DEL", "{seen-permits}:timeout")
	select {
	case <-pctx.Done():
		if !errors.Is(context.Cause(pctx), relock.ErrLockLost) {
			t.Fatalf("cause = %v; want ErrLockLost", context.Cause(pctx))
		}
		t.Logf("the permit's holder knew after %v", time.Since(start))
	case <-time.After(2 * time.Second):
		t.Fatal("the permit's context still runs 2 s after its permit was taken away")
	}
}

// busyScript keeps the server busy for ARGV[1] milliseconds: past lua-time-limit (busy-reply-threshold),
// Redis answers every other command with BUSY.
const busyScript = `local t = redis.call('TIME')
local start = t[1] * 1000 + t[2] / 1000
repeat
  t = redis.call('TIME')
until t[1] * 1000 + t[2] / 1000 - start >= tonumber(ARGV[1])
return 1`

// trackingConn returns the id of a connection with CLIENT TRACKING on (flag t in CLIENT LIST), "" when
// there is none: a watch's, in a test whose server has one Client.
func trackingConn(t testing.TB, rdb rueidis.Client) string {
	t.Helper()
	list, err := do(t, rdb, "CLIENT", "LIST").ToString()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(list, "\n") {
		var id, flags string
		for f := range strings.FieldsSeq(line) {
			switch k, v, _ := strings.Cut(f, "="); k {
			case "id":
				id = v
			case "flags":
				flags = v
			}
		}
		if strings.Contains(flags, "t") {
			return id
		}
	}
	return ""
}

// commandStat returns the field of INFO commandstats's line for cmd (e.g. "client|tracking",
// "rejected_calls"), -1 when there is none.
func commandStat(t testing.TB, rdb rueidis.Client, cmd, field string) int64 {
	t.Helper()
	info, err := do(t, rdb, "INFO", "commandstats").ToString()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		stats, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":")
		if !ok {
			continue
		}
		for f := range strings.SplitSeq(stats, ",") {
			if k, v, _ := strings.Cut(f, "="); k == field {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
	}
	return -1
}

// The watch's connection lost while Redis runs a slow script, so that the watch reconnects while Redis
// answers BUSY (CLIENT TRACKING ON refused): the process goes on, the watch comes back once Redis answers
// again (a hold deleted then is seen within milliseconds), and the Client works.
func TestHoldWatchSurvivesBusyServer(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil) // the default watchdog timeout: a check every 10 s
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 30*time.Second)
	do(t, rdb, "CONFIG", "SET", "lua-time-limit", "100") // BUSY replies once a script has run 100 ms
	l := c.Lock("busy-watch")
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	hctx, err := l.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var id string
	eventually(t, 5*time.Second, "the watch's connection tracks", func() bool {
		id = trackingConn(t, rdb)
		return id != ""
	})
	time.Sleep(50 * time.Millisecond) // the hold is read
	// In one write: the watch's connection killed, then a script that keeps Redis busy for 1.5 s. The
	// watch reconnects at once, and its CLIENT TRACKING ON gets BUSY once the script has run 100 ms.
	replies := rdb.DoMulti(ctx, rdb.B().Arbitrary("CLIENT", "KILL", "ID", id).Build(),
		rdb.B().Eval().Script(busyScript).Numkeys(0).Arg("1500").Build())
	if n, err := replies[0].AsInt64(); err != nil || n != 1 {
		t.Fatalf("CLIENT KILL ID %s = %d, %v", id, n, err)
	}
	if err := replies[1].Error(); err != nil {
		t.Fatalf("the busy script: %v", err)
	}
	busyEnd := time.Now()
	if n := commandStat(t, rdb, "client|tracking", "rejected_calls"); n == 0 {
		t.Fatal("CLIENT TRACKING was not refused while Redis was busy: the test did not test what it says")
	} else {
		t.Logf("CLIENT TRACKING refused %d times while Redis was busy", n)
	}
	eventually(t, 5*time.Second, "the watch is back", func() bool { return trackingConn(t, rdb) != "" })
	t.Logf("the watch was back %v after Redis was no longer busy", time.Since(busyEnd))
	time.Sleep(50 * time.Millisecond) // the hold is read again
	start := time.Now()
	do(t, rdb, "DEL", "busy-watch")
	select {
	case <-hctx.Done():
		if !errors.Is(context.Cause(hctx), relock.ErrLockLost) {
			t.Fatalf("cause = %v; want ErrLockLost", context.Cause(hctx))
		}
		t.Logf("the holder knew after %v", time.Since(start))
	case <-time.After(2 * time.Second):
		t.Fatal("the hold context still runs 2 s after the hold was gone: the watch is off")
	}
	other := c.Lock("busy-watch-other")
	if err := other.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := other.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// Where the watch cannot work, it turns itself off for good (it does not try again), no connection tracks
// keys, and the watchdog tells a loss. On a connection that speaks RESP2 (New's option, or a client given
// to Wrap), Redis accepts CLIENT TRACKING ON but sends no invalidation; an ACL user without CLIENT
// TRACKING is refused it (NOPERM).
func TestHoldWatchOffForGood(t *testing.T) {
	t.Parallel()
	for _, tc := range []string{"RESP2 New", "RESP2 Wrap", "NOPERM"} {
		t.Run(tc, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			rdb := rawClient(t, srv)
			opts := &relock.Options{WatchdogTimeout: 600 * time.Millisecond}
			var c *relock.Client
			switch tc {
			case "RESP2 New":
				opts.Redis.AlwaysRESP2 = true
				c = newClient(t, srv, opts)
			case "RESP2 Wrap":
				resp2, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()},
					AlwaysRESP2: true, DisableCache: true, AlwaysPipelining: true, DisableRetry: true})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(resp2.Close)
				if c, err = relock.Wrap(resp2, opts); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
			case "NOPERM":
				deny := []string{"-client|tracking"}
				if !serverVersion(t).AtLeast(7, 0) { // 6.2 cannot deny a subcommand: deny CLIENT, allow back SETNAME
					deny = []string{"-client", "+client|setname", "+client|setinfo"}
				}
				if err := do(t, rdb, append([]string{"ACL", "SETUSER", "no-tracking", "on", ">secret", "~*", "&*", "+@all"},
					deny...)...).Error(); err != nil {
					t.Fatal(err)
				}
				opts.Redis = rueidis.ClientOption{Username: "no-tracking", Password: "secret"}
				c = newClient(t, srv, opts)
			}
			ctx := ctxTimeout(t, 20*time.Second)
			l := c.Lock("watch-off")
			if err := l.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			hctx, err := l.HoldContext(ctx)
			if err != nil {
				t.Fatal(err)
			}
			eventually(t, 2*time.Second, "the watch turns itself off", func() bool { return relock.HoldWatchOff(c) })
			if id := trackingConn(t, rdb); id != "" {
				t.Fatalf("connection %s tracks keys", id)
			}
			start := time.Now()
			do(t, rdb, "DEL", "watch-off")
			select {
			case <-hctx.Done():
				if !errors.Is(context.Cause(hctx), relock.ErrLockLost) {
					t.Fatalf("cause = %v; want ErrLockLost", context.Cause(hctx))
				}
				t.Logf("the watchdog told the loss after %v", time.Since(start))
			case <-time.After(2 * time.Second):
				t.Fatal("the hold context still runs 2 s after the hold was gone")
			}
		})
	}
}

// Redis sends no invalidation for SWAPDB (7.0 does not), so the watch does not see a hold's key swapped
// away to another database: the watchdog tells its loss, at its next renewal, within a third of the
// watchdog timeout.
func TestSwapDBLossToldByWatchdog(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const timeout = 900 * time.Millisecond
	c := newClient(t, srv, &relock.Options{WatchdogTimeout: timeout})
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	l := c.Lock("swapped")
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	hctx, err := l.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the watch tracks", func() bool { return trackingConn(t, rdb) != "" })
	time.Sleep(50 * time.Millisecond) // the hold is read
	start := time.Now()
	do(t, rdb, "SWAPDB", "0", "1")
	select {
	case <-hctx.Done():
		if !errors.Is(context.Cause(hctx), relock.ErrLockLost) {
			t.Fatalf("cause = %v; want ErrLockLost", context.Cause(hctx))
		}
		t.Logf("the holder knew after %v", time.Since(start))
	case <-time.After(timeout/3 + 300*time.Millisecond):
		t.Fatalf("the hold context still runs %v after SWAPDB took the hold away", timeout/3+300*time.Millisecond)
	}
}
