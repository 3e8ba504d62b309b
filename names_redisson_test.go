package relock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/relock-go/relock"
)

// A Java service using Redisson and a Go service using relock on a hash-tagged name (orders{eu}) hear each
// other's releases and exclude each other, on a single server and on a cluster: the Java side is played
// with plain commands in Redisson's layout, whose companions for a name holding "{" are "prefix:" + name.
func TestHashTaggedNamesShareRedissonsKeys(t *testing.T) {
	for _, d := range []func(testing.TB) *deployment{standalone, func(t testing.TB) *deployment { return onCluster(t, "") }} {
		d := d(t)
		t.Run(d.kind, func(t *testing.T) {
			c := d.client(t, nil)
			rdb := d.raw(t)
			ctx := ctxTimeout(t, 30*time.Second)
			name := d.prefix + "orders{eu}"

			// Redisson holds the RLock for a minute; its release (DEL, then PUBLISH 0 on its channel) wakes
			// relock's waiter at once, not at the TTL.
			publish := "PUBLISH"
			if d.kind == "cluster" && hasShardedPubSub(t) { // Redisson's AUTO, as relock's: plain on 6.2
				publish = "SPUBLISH"
			}
			javaOwner := "7f000000-0000-0000-0000-00000000java:1"
			do(t, rdb, "HSET", name, javaOwner, "1")
			do(t, rdb, "PEXPIRE", name, "60000")
			waiter := c.Lock(name)
			got := make(chan error, 1)
			gctx := relock.WithOwner(ctx, "go-side")
			go func() { got <- waiter.Lock(gctx) }()
			time.Sleep(300 * time.Millisecond) // the waiter tries, subscribes and sleeps
			released := time.Now()
			do(t, rdb, "DEL", name)
			if err := do(t, rdb, publish, "redisson_lock__channel:"+name, "0").Error(); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
				if d := time.Since(released); d > 5*time.Second {
					t.Fatalf("woken %v after Redisson's release", d)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("relock's waiter missed Redisson's release on redisson_lock__channel:" + name)
			}
			if err := waiter.Unlock(gctx); err != nil {
				t.Fatal(err)
			}

			// A Redisson reader of the read-write lock: mode read, its field, and its read-hold key
			// name + ":" + owner + ":rwlock_timeout:1". relock's writer must wait for it.
			do(t, rdb, "HSET", name, "mode", "read", javaOwner, "1")
			do(t, rdb, "SET", name+":"+javaOwner+":rwlock_timeout:1", "1", "PX", "60000")
			do(t, rdb, "PEXPIRE", name, "60000")
			w := c.ReadWriteLock(name).WriteLock()
			if ok, err := w.TryLock(ctx, 0, 0); ok || err != nil {
				t.Fatalf("relock's writer got the lock a Redisson reader holds: %v, %v", ok, err)
			}
			if n, _ := do(t, rdb, "HGET", name, javaOwner).AsInt64(); n != 1 {
				t.Fatalf("the Redisson reader's hold changed: %d", n)
			}
			do(t, rdb, "DEL", name, name+":"+javaOwner+":rwlock_timeout:1")

			// relock's reader writes Redisson's read-hold key, which a Redisson writer's script reads.
			rctx := relock.WithOwner(ctx, "reader")
			r := c.ReadWriteLock(name).ReadLock()
			if err := r.Lock(rctx); err != nil {
				t.Fatal(err)
			}
			if n, _ := do(t, rdb, "EXISTS", name+":"+c.ID()+":reader:rwlock_timeout:1").AsInt64(); n != 1 {
				t.Fatalf("no read-hold key %q", name+":"+c.ID()+":reader:rwlock_timeout:1")
			}
			if err := r.Unlock(rctx); err != nil {
				t.Fatal(err)
			}
			if keys := d.keys(t); len(keys) != 0 {
				t.Fatalf("keys left: %v", keys)
			}
		})
	}
}

// Names whose companions Redisson's rule would put in another slot are refused on every deployment.
func TestNamesOutsideTheirSlotAreRefused(t *testing.T) {
	c := standalone(t).client(t, nil)
	ctx := ctxTimeout(t, 5*time.Second)
	for _, name := range []string{"{}a", "a{", "a{}", "a{b", "a}b", "}"} {
		if err := c.Lock(name).Lock(ctx); !errors.Is(err, relock.ErrInvalidName) {
			t.Errorf("Lock(%q) = %v, want ErrInvalidName", name, err)
		}
		if _, err := c.FairLock(name).TryLock(ctx, 0, 0); !errors.Is(err, relock.ErrInvalidName) {
			t.Errorf("FairLock(%q).TryLock = %v, want ErrInvalidName", name, err)
		}
		if err := c.ReadWriteLock(name).ReadLock().Lock(ctx); !errors.Is(err, relock.ErrInvalidName) {
			t.Errorf("ReadLock(%q) = %v, want ErrInvalidName", name, err)
		}
	}
}
