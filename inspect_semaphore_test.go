package relock_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
)

func inspectSemaphore(t *testing.T, c *relock.Client, name string) relock.SemaphoreState {
	t.Helper()
	st, err := c.InspectSemaphore(ctxTimeout(t, 5*time.Second), name)
	if err != nil {
		t.Fatalf("InspectSemaphore(%q): %v", name, err)
	}
	return st
}

// A Semaphore and a CountDownLatch are counters: InspectSemaphore reads their value.
func TestInspectSemaphoreCounters(t *testing.T) {
	onEach(t, func(t *testing.T, d *deployment) {
		c := d.client(t, nil)
		ctx := ctxTimeout(t, 10*time.Second)

		name := d.name("inspect-sem")
		if st := inspectSemaphore(t, c, name); st.Exists || st.Expirable || st.Value != 0 || st.Name != name || st.Permits != nil {
			t.Fatalf("no semaphore: %+v", st)
		}
		sem := c.Semaphore(name)
		if _, err := sem.TrySetPermits(ctx, 5); err != nil {
			t.Fatal(err)
		}
		if err := sem.Acquire(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if st := inspectSemaphore(t, c, name); !st.Exists || st.Expirable || st.Value != 3 || st.PermitsTaken != 0 || len(st.Permits) != 0 {
			t.Fatalf("semaphore of 5 with 2 taken: %+v", st)
		}
		if err := sem.AddPermits(ctx, -4); err != nil {
			t.Fatal(err)
		}
		if st := inspectSemaphore(t, c, name); st.Value != -1 {
			t.Fatalf("semaphore below zero: %+v", st)
		}

		latchName := d.name("inspect-latch")
		latch := c.CountDownLatch(latchName)
		if _, err := latch.TrySetCount(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if err := latch.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
		if st := inspectSemaphore(t, c, latchName); !st.Exists || st.Expirable || st.Value != 1 {
			t.Fatalf("latch at 1: %+v", st)
		}
		if err := latch.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
		if st := inspectSemaphore(t, c, latchName); st.Exists || st.Value != 0 {
			t.Fatalf("open latch: %+v", st)
		}
	})
}

// A PermitSemaphore's permits: their ids and expiries, the expired ones first and counted, and nothing given
// back by the inspection. On a name with a hash tag too, whose permits key is name + ":timeout".
func TestInspectSemaphorePermits(t *testing.T) {
	onEach(t, func(t *testing.T, d *deployment) {
		c := d.client(t, &relock.Options{WatchdogTimeout: 3 * time.Second})
		rdb := d.raw(t)
		ctx := ctxTimeout(t, 20*time.Second)
		for _, tc := range []struct{ name, permitsKey string }{
			{d.name("inspect-permits"), "{" + d.name("inspect-permits") + "}:timeout"},
			{d.name("{inspect}permits"), d.name("{inspect}permits") + ":timeout"},
		} {
			s := c.PermitSemaphore(tc.name)
			if _, err := s.TrySetPermits(ctx, 4); err != nil {
				t.Fatal(err)
			}
			if st := inspectSemaphore(t, c, tc.name); !st.Exists || st.Expirable || st.Value != 4 {
				t.Fatalf("%s: no permit taken (a PermitSemaphore then looks like a Semaphore): %+v", tc.name, st)
			}
			watched, err := s.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			leased, ok, err := s.TryAcquire(ctx, 0, time.Minute)
			if err != nil || !ok {
				t.Fatalf("TryAcquire with a lease: %v, %v", leased, err)
			}
			// A Redisson client's permit whose lease ran out: it took one permit, and died.
			if err := rdb.Do(ctx, rdb.B().Decrby().Key(tc.name).Decrement(1).Build()).Error(); err != nil {
				t.Fatal(err)
			}
			dead := "dead-permit-id16"
			if err := rdb.Do(ctx, rdb.B().Zadd().Key(tc.permitsKey).ScoreMember().ScoreMember(1000, dead).Build()).Error(); err != nil {
				t.Fatal(err)
			}

			st := inspectSemaphore(t, c, tc.name)
			if !st.Exists || !st.Expirable || st.Value != 1 || st.PermitsTaken != 3 || st.PermitsExpired != 1 || len(st.Permits) != 3 {
				t.Fatalf("%s: 4 permits, 3 taken, 1 of them expired: %+v", tc.name, st)
			}
			if p := st.Permits[0]; p.ID != hex.EncodeToString([]byte(dead)) || p.Expires > -time.Hour {
				t.Fatalf("%s: the expired permit, first: %+v", tc.name, p)
			}
			// The watched permit lives for the watchdog timeout, the leased one for its minute: that order.
			if p := st.Permits[1]; p.ID != watched.ID() || p.Expires <= 0 || p.Expires > 3*time.Second {
				t.Fatalf("%s: the watched permit %s: %+v", tc.name, watched.ID(), p)
			}
			if p := st.Permits[2]; p.ID != leased.ID() || p.Expires <= 50*time.Second || p.Expires > time.Minute {
				t.Fatalf("%s: the leased permit %s: %+v", tc.name, leased.ID(), p)
			}
			// The expired permit is still there: the inspection gave nothing back.
			if n, err := rdb.Do(ctx, rdb.B().Zcard().Key(tc.permitsKey).Build()).AsInt64(); n != 3 || err != nil {
				t.Fatalf("%s: %d permits taken after the inspection (%v), want 3", tc.name, n, err)
			}

			for _, p := range []*relock.Permit{watched, leased} {
				if err := p.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if st := inspectSemaphore(t, c, tc.name); st.Value != 3 || st.PermitsTaken != 1 || st.PermitsExpired != 1 {
				t.Fatalf("%s: after the releases: %+v", tc.name, st)
			}
		}
	})
}

// Past the 1000 permits listed, PermitsTaken and PermitsExpired still count them all.
func TestInspectSemaphoreManyPermits(t *testing.T) {
	t.Parallel()
	d := standalone(t)
	c := d.client(t, nil)
	rdb := d.raw(t)
	ctx := ctxTimeout(t, 10*time.Second)
	now := time.Now().UnixMilli()
	for _, tc := range []struct{ expired, live int }{{1500, 300}, {400, 1100}, {1200, 0}} {
		name := "many-" + strconv.Itoa(tc.expired) + "-" + strconv.Itoa(tc.live)
		zadd := rdb.B().Zadd().Key("{" + name + "}:timeout").ScoreMember()
		for i := range tc.expired + tc.live {
			score := float64(now - 60_000 + int64(i))
			if i >= tc.expired {
				score = float64(now + 60_000 + int64(i))
			}
			zadd = zadd.ScoreMember(score, "permit-"+strconv.Itoa(i))
		}
		if err := rdb.Do(ctx, zadd.Build()).Error(); err != nil {
			t.Fatal(err)
		}
		st := inspectSemaphore(t, c, name)
		if st.Exists || !st.Expirable || st.PermitsTaken != tc.expired+tc.live || st.PermitsExpired != tc.expired || len(st.Permits) != 1000 {
			t.Fatalf("%s: taken %d, expired %d, listed %d", name, st.PermitsTaken, st.PermitsExpired, len(st.Permits))
		}
		if !slices.IsSortedFunc(st.Permits, func(a, b relock.PermitInfo) int { return int(a.Expires - b.Expires) }) {
			t.Fatalf("%s: permits not soonest to expire first", name)
		}
	}
}

// Keys of other layouts, bad names, closed clients and ended contexts fail with typed errors, and
// InspectSemaphore writes nothing, even where an acquisition would give permits back.
func TestInspectSemaphoreRejects(t *testing.T) {
	t.Parallel()
	d := standalone(t)
	c := d.client(t, nil)
	rdb := d.raw(t)
	ctx := ctxTimeout(t, 5*time.Second)
	do(t, rdb, "SET", "a-string", "x")
	do(t, rdb, "SET", "a-float", "1.5")
	do(t, rdb, "SET", "a-padded", "007")
	do(t, rdb, "SET", "a-huge", strings.Repeat("9", 1<<20))
	do(t, rdb, "HSET", "a-hash", "views", "10")
	do(t, rdb, "RPUSH", "a-list", "x")
	do(t, rdb, "SET", "bad-permits", "3")
	do(t, rdb, "SET", "{bad-permits}:timeout", "x")
	do(t, rdb, "SET", "expired", "0")
	do(t, rdb, "ZADD", "{expired}:timeout", "1000", "dead-permit-id16")
	closed := d.client(t, nil)
	closed.Close()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		c    *relock.Client
		want error
	}{
		{"a-string", ctx, c, relock.ErrNotASemaphore},
		{"a-float", ctx, c, relock.ErrNotASemaphore},
		{"a-padded", ctx, c, relock.ErrNotASemaphore},
		{"a-huge", ctx, c, relock.ErrNotASemaphore},
		{"a-hash", ctx, c, relock.ErrNotASemaphore},
		{"a-list", ctx, c, relock.ErrNotASemaphore},
		{"bad-permits", ctx, c, relock.ErrNotASemaphore},
		{"", ctx, c, relock.ErrInvalidName},
		{"a}b", ctx, c, relock.ErrInvalidName},
		{"a{", ctx, c, relock.ErrInvalidName},
		{"x", ctx, nil, relock.ErrNilClient},
		{"x", ctx, closed, relock.ErrClosed},
		{"x", canceled(ctx), c, context.Canceled},
	} {
		st, err := tc.c.InspectSemaphore(tc.ctx, tc.name)
		if !errors.Is(err, tc.want) {
			t.Errorf("InspectSemaphore(%q) = %v, want %v", tc.name, err, tc.want)
		}
		if st.Name != tc.name || st.Exists || st.Expirable || st.Permits != nil {
			t.Errorf("InspectSemaphore(%q) failed with a state: %+v", tc.name, st)
		}
		if len(err.Error()) > 200 {
			t.Errorf("InspectSemaphore(%q): an error of %d bytes", tc.name, len(err.Error()))
		}
	}

	before := snapshot(t, rdb)
	if st := inspectSemaphore(t, c, "expired"); st.Value != 0 || st.PermitsTaken != 1 || st.PermitsExpired != 1 {
		t.Fatalf("a semaphore whose only permit expired: %+v", st)
	}
	for _, name := range []string{"a-string", "a-hash", "bad-permits", "nothing-here"} {
		_, _ = c.InspectSemaphore(ctx, name)
	}
	if after := snapshot(t, rdb); !slices.Equal(before, after) {
		t.Fatalf("InspectSemaphore wrote to Redis:\nbefore %q\nafter  %q", before, after)
	}
}

// snapshot returns every key of a standalone server, with its type, value (DUMP) and expiry, and the number
// of writes since the server started (INFO's rdb_changes_since_last_save).
func snapshot(t *testing.T, rdb rueidis.Client) []string {
	t.Helper()
	keys, err := do(t, rdb, "KEYS", "*").AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		dump, _ := do(t, rdb, "DUMP", k).ToString()
		pttl, _ := do(t, rdb, "PTTL", k).AsInt64()
		sum := sha256.Sum256([]byte(dump))
		out = append(out, k+" "+hex.EncodeToString(sum[:])+" "+strconv.FormatInt(pttl, 10))
	}
	info, err := do(t, rdb, "INFO", "persistence").ToString()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if strings.HasPrefix(line, "rdb_changes_since_last_save:") {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}

// A permit Redisson took without a lease (scored 922337203685477, its mark for "no lease") never expires:
// InspectSemaphore says so (NoExpiry), rather than a Duration wrapped around to -498790h. A permit further
// away than a Duration reaches shows the largest Duration, not a wrapped one.
func TestInspectSemaphoreRedissonPermitWithoutLease(t *testing.T) {
	onEach(t, func(t *testing.T, d *deployment) {
		c := d.client(t, nil)
		rdb := d.raw(t)
		ctx := ctxTimeout(t, 10*time.Second)
		name := d.name("inspect-no-lease")
		timeouts := "{" + name + "}:timeout"
		if _, err := c.PermitSemaphore(name).TrySetPermits(ctx, 3); err != nil {
			t.Fatal(err)
		}
		// Three Redisson clients took a permit each, as its RPermitExpirableSemaphore writes them: one with a
		// lease of a minute, one of 600 years (past a Duration's 292), and one without a lease.
		now := time.Now().UnixMilli()
		do(t, rdb, "DECRBY", name, "3")
		do(t, rdb, "ZADD", timeouts, strconv.FormatInt(now+time.Minute.Milliseconds(), 10), "minute-lease-id1")
		do(t, rdb, "ZADD", timeouts, strconv.FormatInt(now+600*365*24*time.Hour.Milliseconds(), 10), "far-lease-id-16b")
		do(t, rdb, "ZADD", timeouts, "922337203685477", "no-lease-id-16by")

		st := inspectSemaphore(t, c, name)
		if st.PermitsTaken != 3 || st.PermitsExpired != 0 || len(st.Permits) != 3 {
			t.Fatalf("3 permits taken, none expired: %+v", st)
		}
		if p := st.Permits[0]; p.ID != hex.EncodeToString([]byte("minute-lease-id1")) || p.Expires <= 50*time.Second || p.Expires > time.Minute {
			t.Errorf("the permit leased for a minute: %+v", p)
		}
		if p := st.Permits[1]; p.ID != hex.EncodeToString([]byte("far-lease-id-16b")) || p.Expires != math.MaxInt64 {
			t.Errorf("the permit leased for 600 years: %+v (%v), want the largest Duration", p, p.Expires)
		}
		if p := st.Permits[2]; p.ID != hex.EncodeToString([]byte("no-lease-id-16by")) || p.Expires != relock.NoExpiry {
			t.Errorf("the permit taken without a lease: %+v (%v), want NoExpiry", p, p.Expires)
		}
	})
}
