package relock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/internal/testutil"
)

// A Redis over its maxmemory with noeviction refuses writes (OOM). An Unlock it refuses still releases, as
// every Unlock does: the hold ends for the Client at once (the watchdog stops renewing it, so it expires
// within the watchdog timeout at the latest), the release is tried again until the hold would have expired,
// and it lands as soon as memory is freed. Before, the hold stayed, renewed for ever, for an owner that had
// released it.
func TestUnlockRefusedForMemoryStillReleases(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory-policy", "noeviction")
	c, err := relock.New([]string{srv.Addr()}, &relock.Options{WatchdogTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := c.Lock("oom-unlock")
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Lock(ctx); err != nil { // reentrant: the first Unlock decrements (HINCRBY, refused over maxmemory)
		t.Fatal(err)
	}
	held, err := l.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Redis's memory limit drops below what it uses: it refuses writes (OOM) from now on.
	raw := testutil.Raw(t, srv.Addr())
	if err := raw.Do(ctx, raw.B().ConfigSet().ParameterValue().ParameterValue("maxmemory", "1").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		err := l.Unlock(ctx)
		t.Logf("Unlock %d over maxmemory: %v", i+1, err)
		if err != nil && !errors.Is(err, relock.ErrUnavailable) {
			t.Errorf("Unlock %d refused for memory: %v, want nil or ErrUnavailable", i+1, err)
		}
	}
	select {
	case <-held.Done():
	case <-time.After(time.Second):
		t.Fatal("the hold did not end for its owner at its Unlock")
	}
	if errors.Is(context.Cause(held), relock.ErrLockLost) {
		t.Errorf("the hold's context: %v, want a release, not a loss", context.Cause(held))
	}
	// Memory is freed: the release lands, and the lock is free well before a watchdog timeout.
	if err := raw.Do(ctx, raw.B().ConfigSet().ParameterValue().ParameterValue("maxmemory", "0").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := raw.Do(ctx, raw.B().Exists().Key("oom-unlock").Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lock is still held 5 s after its owner's Unlock")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A final release only deletes, and so runs on a server over its maxmemory (with noeviction), for every
// kind of lock: the lock is free at once, not once memory is freed. (A server refuses a script whose first
// write may use memory; decrementing the last level before deleting it was such a write.)
func TestFinalUnlockOverMaxmemoryReleasesAtOnce(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory-policy", "noeviction")
	c := newClient(t, srv, nil)
	raw := testutil.Raw(t, srv.Addr())
	ctx := ctxTimeout(t, 30*time.Second)
	rw := c.ReadWriteLock("oom-rw")
	locks := []struct {
		name, key string
		l         relock.Locker
	}{
		{"RLock", "oom-final", c.Lock("oom-final")},
		{"FairLock", "oom-fair", c.FairLock("oom-fair")},
		{"WriteLock", "oom-rw", rw.WriteLock()},
	}
	for _, k := range locks {
		if err := k.l.Lock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	read := c.ReadWriteLock("oom-read").ReadLock()
	if err := read.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	do(t, raw, "CONFIG", "SET", "maxmemory", "1")
	t.Cleanup(func() { do(t, raw, "CONFIG", "SET", "maxmemory", "0") })
	for _, k := range locks {
		if err := k.l.Unlock(ctx); err != nil {
			t.Errorf("%s: the final Unlock over maxmemory: %v; want it released at once", k.name, err)
		}
		if n, _ := do(t, raw, "EXISTS", k.key).AsInt64(); n != 0 {
			t.Errorf("%s: the lock is still in Redis after its final Unlock over maxmemory", k.name)
		}
	}
	if err := read.Unlock(ctx); err != nil {
		t.Errorf("ReadLock: the final Unlock over maxmemory: %v; want it released at once", err)
	}
	if n, _ := do(t, raw, "EXISTS", "oom-read").AsInt64(); n != 0 {
		t.Errorf("ReadLock: the lock is still in Redis after its final Unlock over maxmemory")
	}
}
