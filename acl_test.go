package relock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/internal/testutil"
)

// documentedACL returns the library's minimal ACL rules as docs/operations.md gives them, for names that
// start with "app:", for the redis-server the tests run on: the block after "<!-- acl -->" (Redis 7.0 and
// later), or the one after "<!-- acl-6.2 -->" on an older server, which refuses sharded pub/sub's commands.
func documentedACL(t *testing.T) []string { return testutil.LibraryACL(t, aclDoc) }

// aclDoc is the guide that gives the ACL blocks, for users to copy: the tests read them there.
const aclDoc = "docs/operations.md"

// The library works as a Redis user holding exactly the ACL docs/operations.md gives, for every lock type
// and its waits, and that ACL does confine it to its prefix. The block names sharded pub/sub's commands,
// which Redis 6.2 does not know: it is for Redis 7.0 and later.
func TestMinimalACL(t *testing.T) {
	t.Parallel()
	if v, err := redistest.ServerVersion(); err == nil && !v.AtLeast(7, 0) {
		t.Skipf("redis-server %v refuses the ACL for 7.0 and later (TestMinimalACLRedis62 runs its 6.2 form)", v)
	}
	testMinimalACL(t, testutil.ACLBlock(t, aclDoc, "<!-- acl -->"))
}

// The ACL for Redis 6.2 (the block after "<!-- acl-6.2 -->") is enough for a single server, which
// never uses sharded pub/sub: it runs here on whatever redis-server the harness starts (7.0 when
// RELOCK_REDIS_SERVER does not name a 6.2), and is accepted by 6.2.
func TestMinimalACLRedis62(t *testing.T) {
	t.Parallel()
	rules := testutil.ACLBlock(t, aclDoc, "<!-- acl-6.2 -->")
	for _, r := range rules {
		if r == "+ssubscribe" || r == "+sunsubscribe" || r == "+spublish" {
			t.Fatalf("the ACL for 6.2 holds %s, which 6.2 refuses", r)
		}
	}
	testMinimalACL(t, rules)
}

// testMinimalACL runs every lock type, its waits and renewals, as a user holding exactly rules.
func testMinimalACL(t *testing.T, rules []string) {
	srv := redistest.Start(t)
	admin := rawClient(t, srv)
	if err := do(t, admin, append([]string{"ACL", "SETUSER", "relock-app"}, rules...)...).Error(); err != nil {
		t.Fatalf("the documented ACL: %v", err)
	}
	do(t, admin, "ACL", "SETUSER", "relock-app", ">secret") // the documented rules carry a placeholder password
	ctx := ctxTimeout(t, 30*time.Second)
	newUserClient := func() *relock.Client {
		c, err := relock.New([]string{srv.Addr()}, &relock.Options{WatchdogTimeout: 900 * time.Millisecond,
			Redis: rueidis.ClientOption{Username: "relock-app", Password: "secret"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, b := newUserClient(), newUserClient()
	one, two, three := relock.WithOwner(ctx, "one"), relock.WithOwner(ctx, "two"), relock.WithOwner(ctx, "three")

	// Every lock type: a hold, reentry, a waiter on the other Client woken by the release, renewals.
	kinds := map[string]func(c *relock.Client, name string) relock.Lockable{
		"rlock": func(c *relock.Client, name string) relock.Lockable { return c.Lock(name, relock.WithFencing()) },
		"fair":  func(c *relock.Client, name string) relock.Lockable { return c.FairLock(name) },
		"write": func(c *relock.Client, name string) relock.Lockable { return c.ReadWriteLock(name).WriteLock() },
		"read":  func(c *relock.Client, name string) relock.Lockable { return c.ReadWriteLock(name).ReadLock() },
		"writep": func(c *relock.Client, name string) relock.Lockable {
			return c.ReadWriteLock(name, relock.WithWriterPriority()).WriteLock()
		},
	}
	for kind, newLock := range kinds {
		name := "app:acl:" + kind
		la, lb := newLock(a, name), newLock(b, name)
		for range 2 {
			if err := la.Lock(one); err != nil {
				t.Fatalf("%s: Lock as the ACL user: %v", kind, err)
			}
		}
		if _, err := la.FencingToken(one); err != nil && kind == "rlock" {
			t.Fatalf("%s: FencingToken: %v", kind, err)
		}
		if _, err := la.IsLocked(one); err != nil {
			t.Fatalf("%s: IsLocked: %v", kind, err)
		}
		var other relock.Lockable = lb
		if kind == "read" { // readers share: a writer waits instead
			other = b.ReadWriteLock(name).WriteLock()
		}
		// Two waiters on the other Client, the second queued behind the first: a fair handoff shortens the
		// wait of the one behind. Each gets the lock in turn (a write lock's waiting writers in any order).
		type turn struct {
			owner context.Context
			err   error
		}
		got := make(chan turn, 2)
		go func() { got <- turn{two, other.Lock(two)} }()
		time.Sleep(100 * time.Millisecond)
		go func() { got <- turn{three, other.Lock(three)} }()
		time.Sleep(1100 * time.Millisecond) // past a renewal, and the waiters are waiting
		for range 2 {
			if err := la.Unlock(one); err != nil {
				t.Fatalf("%s: Unlock: %v", kind, err)
			}
		}
		for range 2 {
			select {
			case w := <-got:
				if w.err != nil {
					t.Fatalf("%s: a waiter: %v", kind, w.err)
				}
				if err := other.Unlock(w.owner); err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: a waiter was not woken", kind)
			}
		}
		if err := la.LockWithLease(one, time.Second); err != nil {
			t.Fatalf("%s: LockWithLease: %v", kind, err)
		}
		if _, err := la.ForceUnlock(one); err != nil {
			t.Fatalf("%s: ForceUnlock: %v", kind, err)
		}
	}
	// The watch of holds (CLIENT TRACKING, HEXISTS) works for the ACL user: a deleted hold is seen at once,
	// not at the watchdog's first check 10 s later.
	watched, err := relock.New([]string{srv.Addr()}, &relock.Options{
		Redis: rueidis.ClientOption{Username: "relock-app", Password: "secret"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { watched.Close() })
	wl := watched.Lock("app:acl:watched")
	if err := wl.Lock(one); err != nil {
		t.Fatal(err)
	}
	held, err := wl.HoldContext(one)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	do(t, admin, "DEL", "app:acl:watched")
	select {
	case <-held.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("a deleted hold of the ACL user was not seen within 3 s: the watch does not work with the ACL")
	}

	multi := relock.NewMultiLock(a.Lock("app:acl:m1"), a.FairLock("app:acl:m2"))
	if err := multi.Lock(one); err != nil {
		t.Fatalf("MultiLock: %v", err)
	}
	if err := multi.Unlock(one); err != nil {
		t.Fatal(err)
	}
	// A semaphore and a latch, with a waiter each on the other Client.
	sem := a.Semaphore("app:acl:sem")
	if _, err := sem.TrySetPermits(ctx, 0); err != nil {
		t.Fatalf("Semaphore.TrySetPermits: %v", err)
	}
	latch := a.CountDownLatch("app:acl:latch")
	if _, err := latch.TrySetCount(ctx, 1); err != nil {
		t.Fatalf("CountDownLatch.TrySetCount: %v", err)
	}
	woken := make(chan error, 2)
	go func() { woken <- b.Semaphore("app:acl:sem").Acquire(ctx, 1) }()
	go func() { woken <- b.CountDownLatch("app:acl:latch").Await(ctx) }()
	time.Sleep(200 * time.Millisecond)
	if err := sem.Release(ctx, 1); err != nil {
		t.Fatalf("Semaphore.Release: %v", err)
	}
	if err := latch.CountDown(ctx); err != nil {
		t.Fatalf("CountDownLatch.CountDown: %v", err)
	}
	for range 2 {
		select {
		case err := <-woken:
			if err != nil {
				t.Fatalf("a semaphore or latch waiter: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a semaphore or latch waiter was not woken")
		}
	}
	if _, err := sem.DrainPermits(ctx); err != nil {
		t.Fatalf("Semaphore.DrainPermits: %v", err)
	}
	// An election: a leader, a candidate on the other Client, an observer.
	election := a.Election("app:acl:election")
	leaders, err := b.Election("app:acl:election").Observe(ctx)
	if err != nil {
		t.Fatalf("Election.Observe: %v", err)
	}
	if _, err := election.Campaign(one, "a"); err != nil {
		t.Fatalf("Election.Campaign: %v", err)
	}
	go func() { _, err := b.Election("app:acl:election").Campaign(two, "b"); woken <- err }()
	time.Sleep(200 * time.Millisecond)
	if _, err := election.Leader(ctx); err != nil {
		t.Fatalf("Election.Leader: %v", err)
	}
	if err := election.Resign(one); err != nil {
		t.Fatalf("Election.Resign: %v", err)
	}
	if err := <-woken; err != nil {
		t.Fatalf("the second candidate: %v", err)
	}
	for _, want := range []string{"a", "b"} {
		select {
		case l := <-leaders:
			if l.Value != want {
				t.Fatalf("observed %+v, want %s", l, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the observer saw no leader")
		}
	}
	if _, err := a.Inspect(ctx, "app:acl:rlock"); err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	permits := a.PermitSemaphore("app:acl:permits")
	if _, err := permits.TrySetPermits(ctx, 1); err != nil {
		t.Fatalf("PermitSemaphore.TrySetPermits: %v", err)
	}
	if p, ok, err := permits.TryAcquire(ctx, 0, time.Minute); err != nil || !ok {
		t.Fatalf("PermitSemaphore.TryAcquire: %v, %v", p, err)
	}
	if st, err := a.InspectSemaphore(ctx, "app:acl:permits"); err != nil || !st.Expirable || len(st.Permits) != 1 {
		t.Fatalf("InspectSemaphore: %+v, %v", st, err)
	}

	// Nothing of that was denied, not even a command a script sends with redis.pcall and recovers from
	// (the release's common case would then fall back to its slower general code): ACL LOG is empty.
	if denied, err := do(t, admin, "ACL", "LOG").ToAny(); err != nil || len(denied.([]any)) != 0 {
		t.Fatalf("ACL LOG after the workload: %v (%v), want no denial", denied, err)
	}

	// The ACL confines the user to its prefix: a lock outside it is refused, and nothing is written.
	err = a.Lock("other:acl").Lock(one)
	if err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("Lock outside the ACL's prefix = %v, want a NOPERM error", err)
	}
	if n, _ := do(t, admin, "EXISTS", "other:acl").AsInt64(); n != 0 {
		t.Fatal("the refused lock was written")
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("the refusal took the whole deadline")
	}
}

// A user holding the ACL block as docs/operations.md gave it before the watch of holds read with WATCH,
// MULTI, EXEC and CLIENT CACHING keeps the watch: a deleted hold is seen at once, and the deleted names
// leave no entry in Redis's tracking table (the watch reads each hold on the Client's own connection before
// the tracked read).
// An ACL without some of the commands the exact read needs (an earlier relock's documented block, or one
// that allows MULTI but not EXEC, which leaves the connection inside a transaction unless the watch ends
// it) keeps the watch: it checks on the Client's own connections instead.
func TestEarlierACLBlockKeepsTheWatch(t *testing.T) {
	t.Parallel()
	for _, missing := range [][]string{
		{"+client|caching", "+watch", "+unwatch", "+multi", "+exec"},
		{"+exec"},
	} {
		t.Run(strings.Join(missing, ""), func(t *testing.T) {
			t.Parallel()
			aclKeepsTheWatch(t, missing)
		})
	}
}

func aclKeepsTheWatch(t *testing.T, missing []string) {
	var rules []string
	for _, r := range documentedACL(t) {
		if !slices.Contains(missing, r) {
			rules = append(rules, r)
		}
	}
	if len(rules) != len(documentedACL(t))-len(missing) {
		t.Fatalf("the documented ACL does not hold all of %v", missing)
	}
	srv := redistest.Start(t)
	admin := rawClient(t, srv)
	if err := do(t, admin, append([]string{"ACL", "SETUSER", "relock-earlier"}, rules...)...).Error(); err != nil {
		t.Fatal(err)
	}
	do(t, admin, "ACL", "SETUSER", "relock-earlier", ">secret")
	c, err := relock.New([]string{srv.Addr()}, &relock.Options{
		Redis: rueidis.ClientOption{Username: "relock-earlier", Password: "secret"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := ctxTimeout(t, 30*time.Second)
	base := trackingKeys(t, admin)
	const names = 20
	holds := make([]context.Context, names)
	for i := range names {
		l := c.Lock(fmt.Sprint("app:earlier:", i))
		own := relock.WithOwner(ctx, "o")
		if err := l.Lock(own); err != nil {
			t.Fatal(err)
		}
		if holds[i], err = l.HoldContext(own); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // past the watch's first read
	if n := trackingKeys(t, admin) - base; n < names {
		t.Fatalf("%d of %d held names are tracked: the watch did not read them", n, names)
	}
	for i := range names {
		do(t, admin, "DEL", fmt.Sprint("app:earlier:", i))
	}
	for i, h := range holds {
		select {
		case <-h.Done():
		case <-time.After(3 * time.Second):
			t.Fatalf("hold %d: a deleted hold was not seen within 3 s (the watchdog's first check is 10 s later)", i)
		}
	}
	eventually(t, 3*time.Second, "the deleted names leave no tracking entry", func() bool {
		return trackingKeys(t, admin)-base <= 1
	})
	if relock.HoldWatchOff(c) {
		t.Fatal("the watch turned itself off")
	}
}
