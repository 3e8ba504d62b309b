package relock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/redistest"
)

// The fuzz targets cover the inputs users control (lock names, owner tokens, durations) and what the
// scripts receive from them. Their corpora are in testdata/fuzz. Run one with, for example,
//
//	go test -run '^$' -fuzz FuzzNames -fuzztime 1m .

// FuzzNames: a valid name's companion keys share its slot, and two names never share companions.
func FuzzNames(f *testing.F) {
	for _, seed := range [][2]string{{"orders", "orders2"}, {"x", "{x}"}, {"a{x}", "{x}:a{x}"}, {"a{b", "a{b}"},
		{"{}", "a}b"}, {"{t}", "{t}:{t}"}, {"", "x"}, {"a{b}c{d}", "a{b}"}} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		for _, name := range []string{a, b} {
			if !validName(name) {
				if _, tagged := slotKey(name); name != "" && !strings.Contains(name, "}") && !strings.Contains(name, "{") || tagged {
					t.Fatalf("%q refused though its companions would share its slot", name)
				}
				continue
			}
			for _, prefix := range []string{"redisson_lock__channel", "redisson_lock_queue", "relock_release"} {
				if key := companion(prefix, name); slot(key) != slot(name) {
					t.Fatalf("companion %q of %q is in slot %d, the name in %d", key, name, slot(key), slot(name))
				}
			}
			if tag := nameBase(name); slot(tag+":owner:rwlock_timeout:1") != slot(name) {
				t.Fatalf("read-hold keys of %q leave its slot", name)
			}
		}
		// Redisson's rule gives "x" and "{x}" the same companions; no other two names share them.
		if a != b && validName(a) && validName(b) && companion("p", a) == companion("p", b) && a != "{"+b+"}" && b != "{"+a+"}" {
			t.Fatalf("%q and %q share the companion %q", a, b, companion("p", a))
		}
	})
}

// FuzzOwnerToken: a token is refused exactly when it is empty, all digits, or ends in ":write"; an accepted
// one is the owner field's suffix as given.
func FuzzOwnerToken(f *testing.F) {
	for _, seed := range []string{"job-1", "", "17", "0x1", "a:write", ":write", "w", "∂", "12a"} {
		f.Add(seed)
	}
	c := &Client{id: "00000000-0000-0000-0000-000000000000"}
	f.Fuzz(func(t *testing.T, token string) {
		field, err := c.ownerField(WithOwner(context.Background(), token))
		digits := token != "" && strings.Trim(token, "0123456789") == ""
		bad := token == "" || digits || strings.HasSuffix(token, writerSuffix)
		if bad != errors.Is(err, ErrInvalidOwner) {
			t.Fatalf("token %q: err %v", token, err)
		}
		if err == nil && field != c.id+":"+token {
			t.Fatalf("token %q gave the field %q", token, field)
		}
	})
}

var fuzzServer struct {
	once sync.Once
	srv  *redistest.Server
	c    *Client
	err  error
}

// fuzzClient is a Client on a server shared by the fuzz targets that need Redis; it lives as long as the
// test binary (a fuzz worker), like the server.
func fuzzClient(f *testing.F) *Client {
	fuzzServer.once.Do(func() {
		if fuzzServer.srv, fuzzServer.err = redistest.StartServer(); fuzzServer.err == nil {
			fuzzServer.c, fuzzServer.err = New([]string{fuzzServer.srv.Addr()}, &Options{WatchdogTimeout: time.Second})
		}
	})
	if fuzzServer.err != nil {
		f.Fatal(fuzzServer.err)
	}
	f.Cleanup(func() {
		fuzzServer.c.Close()
		fuzzServer.srv.Stop()
		fuzzServer.once = sync.Once{}
	})
	return fuzzServer.c
}

// FuzzDurations: any wait and lease either fails with ErrInvalidDuration, sending nothing, or works: the
// lock is acquired (it is free) with a time to live that matches the lease, and released.
func FuzzDurations(f *testing.F) {
	for _, seed := range [][2]int64{{0, 0}, {-1, 0}, {0, -1}, {1, 1}, {int64(time.Second), int64(time.Millisecond)},
		{0, 1<<63 - 1}, {1<<63 - 1, 0}, {0, int64(500 * time.Microsecond)}} {
		f.Add(seed[0], seed[1])
	}
	c := fuzzClient(f)
	f.Fuzz(func(t *testing.T, wait, lease int64) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l := c.Lock("fuzz:durations")
		ok, err := l.TryLock(ctx, time.Duration(wait), time.Duration(lease))
		if wait < 0 || lease < 0 {
			if !errors.Is(err, ErrInvalidDuration) {
				t.Fatalf("TryLock(%d, %d) = %v, %v; want ErrInvalidDuration", wait, lease, ok, err)
			}
			return
		}
		if !ok || err != nil {
			t.Fatalf("TryLock(%d, %d) on a free lock = %v, %v", wait, lease, ok, err)
		}
		ttl, err := l.RemainingTTL(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := time.Duration(lease)
		if lease == 0 {
			want = c.watchdogTimeout
		}
		if ttl > roundUpToMillis(want) || ttl <= 0 && want > 50*time.Millisecond {
			t.Fatalf("lease %v left a time to live of %v", time.Duration(lease), ttl)
		}
		if err := l.Unlock(ctx); err != nil && !(errors.Is(err, ErrNotHeld) && want <= 50*time.Millisecond) {
			t.Fatal(err) // a lease this short may have run out already
		}
	})
}

// FuzzScriptArgs: whatever the lock name and owner token, every lock type's scripts run without a Lua
// error, and the lock behaves (acquired when free, refused to another owner, released).
func FuzzScriptArgs(f *testing.F) {
	for _, seed := range [][2]string{{"orders", "job"}, {"a{b}c", "x:y"}, {"open{brace", "∂"}, {"{x}", " "},
		{"%s\x00", "a\nb"}, {"rw:write", "tok"}} {
		f.Add(seed[0], seed[1])
	}
	c := fuzzClient(f)
	f.Fuzz(func(t *testing.T, name, token string) {
		if !validName(name) || !validToken(token) || !utf8.ValidString(name+token) {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		owner, other := WithOwner(ctx, token), WithOwner(ctx, token+"-other")
		rw := c.ReadWriteLock(name+"/rw", WithWriterPriority(), WithFencing())
		for _, l := range []interface {
			TryLock(ctx context.Context, wait, lease time.Duration) (bool, error)
			Unlock(ctx context.Context) error
		}{c.Lock(name, WithFencing()), c.FairLock(name + "/fair"), rw.ReadLock(), rw.WriteLock()} {
			if ok, err := l.TryLock(owner, time.Millisecond, 0); !ok || err != nil {
				t.Fatalf("%q as %q: TryLock = %v, %v", name, token, ok, err)
			}
			if ok, err := l.TryLock(owner, 0, 0); !ok || err != nil { // reentry
				t.Fatalf("%q as %q: reentrant TryLock = %v, %v", name, token, ok, err)
			}
			if _, ok := l.(*ReadLock); !ok {
				if got, err := l.TryLock(other, 5*time.Millisecond, 0); got || isScriptError(err) {
					t.Fatalf("%q: another owner: %v, %v", name, got, err)
				}
			}
			for range 2 {
				if err := l.Unlock(owner); err != nil {
					t.Fatalf("%q as %q: Unlock = %v", name, token, err)
				}
			}
		}
	})
}

// isScriptError reports whether err is a Lua error raised inside a script.
func isScriptError(err error) bool {
	rerr, ok := rueidis.IsRedisErr(err)
	return ok && (strings.Contains(rerr.Error(), "script") || strings.Contains(rerr.Error(), "Lua"))
}
