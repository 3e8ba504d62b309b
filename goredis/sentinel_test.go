package relockgoredis_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/internal/testutil"
)

// startSentinel starts a Redis Sentinel (redis-server --sentinel) that monitors master as "main", for t.
func startSentinel(t *testing.T, master *redistest.Server) string {
	t.Helper()
	bin, err := redistest.ServerPath()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	text := "port " + strconv.Itoa(port) + "\nbind 127.0.0.1\ndir " + dir + "\n" +
		"sentinel monitor main 127.0.0.1 " + strconv.Itoa(master.Port) + " 1\n" +
		"sentinel down-after-milliseconds main 1000\nsentinel failover-timeout main 5000\n"
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, conf, "--sentinel")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s := redis.NewSentinelClient(&redis.Options{Addr: addr})
	defer s.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		got, err := s.GetMasterAddrByName(ctx, "main").Result()
		cancel()
		if err == nil && len(got) == 2 && got[1] == strconv.Itoa(master.Port) {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sentinel on %s does not know the master: %v, %v", addr, got, err)
		}
	}
}

// relock runs on a go-redis failover client (Sentinel): locks, waits woken by a release, and, after the
// master fails and Sentinel promotes its replica, locks on the new master.
func TestOnAFailoverClient(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	sentinel := startSentinel(t, master)
	newFailover := func() *redis.Client {
		rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "main", SentinelAddrs: []string{sentinel},
			ContextTimeoutEnabled: true})
		t.Cleanup(func() { rdb.Close() })
		return rdb
	}
	a, b := newClient(t, newFailover(), nil), newClient(t, newFailover(), nil)
	ctx := testutil.Ctx(t, 60*time.Second)

	// The watch of holds connects through the failover client's dialer, to Sentinel's master: a hold
	// deleted there is seen lost at once.
	w := a.Lock("watched")
	if err := w.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	hctx, err := w.HoldContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if hctx.Err() != nil {
		t.Fatalf("the hold was taken as lost while it was held: %v", context.Cause(hctx))
	}
	testutil.Do(t, testutil.Raw(t, master.Addr()), "DEL", "watched")
	select {
	case <-hctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the loss was not seen within 5 s (the renewal comes at 10 s)")
	}
	if err := a.Lock("jobs").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		err := b.Lock("jobs").Lock(ctx)
		if err == nil {
			err = b.Lock("jobs").Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(200 * time.Millisecond)
	released := time.Now()
	if err := a.Lock("jobs").Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(released); took > 2*time.Second {
		t.Fatalf("the waiter got the lock %v after the release (the watchdog's TTL is 30 s)", took)
	}

	// The master goes; Sentinel promotes the replica, and go-redis follows it.
	raw := testutil.Raw(t, replica.Addr())
	for testutil.Do(t, raw, "INFO", "replication").Error() != nil {
		time.Sleep(10 * time.Millisecond)
	}
	if err := master.Kill(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		lctx, cancel := context.WithTimeout(ctx, time.Second)
		ok, err := a.Lock("after-failover").TryLock(lctx, 0, 0)
		cancel()
		if ok && err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no lock on the promoted replica 30 s after the master died: %v, %v", ok, err)
		}
	}
	// Sentinel disconnects the promoted replica's clients (CLIENT KILL TYPE normal): read again then.
	n, err := testutil.Do(t, raw, "EXISTS", "after-failover").AsInt64()
	for i := 0; err != nil && i < 50; i++ {
		time.Sleep(20 * time.Millisecond)
		n, err = testutil.Do(t, raw, "EXISTS", "after-failover").AsInt64()
	}
	if n != 1 {
		t.Fatalf("the lock taken after the failover is not on the promoted replica %s (%v)", replica.Addr(), err)
	}
	if err := a.Lock("after-failover").Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
