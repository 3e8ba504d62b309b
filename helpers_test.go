package relock_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/faultnet"
	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/internal/testutil"
)

// The helpers shared with the fault suite (internal/testutil), under the names these tests use.
var (
	do         = testutil.Do
	ctxTimeout = testutil.Ctx
	eventually = testutil.Eventually
	newClient  = func(t testing.TB, srv *redistest.Server, opts *relock.Options) *relock.Client {
		return testutil.Client(t, []string{srv.Addr()}, opts)
	}
	clientAt = func(t testing.TB, addr string, opts *relock.Options) *relock.Client {
		return testutil.Client(t, []string{addr}, opts)
	}
	rawClient  = func(t testing.TB, srv *redistest.Server) rueidis.Client { return testutil.Raw(t, srv.Addr()) }
	startProxy = func(t testing.TB, srv *redistest.Server) *faultnet.Proxy { return testutil.Proxy(t, srv.Addr()) }
)

// redisAddr is the server the Example functions use, started by TestMain.
var redisAddr string

func TestMain(m *testing.M) {
	if helper := os.Getenv(helperEnv); helper != "" { // a child process started by startHelper
		os.Exit(runHelper(helper))
	}
	redistest.AdoptOrphans()
	srv, err := redistest.StartServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	redisAddr = srv.Addr()
	testutil.RaceExitAtOnce() // the helper processes
	code := m.Run()
	_ = srv.Stop()
	testutil.StopSharedCluster()
	if code == 0 {
		// rueidis's cluster client closes the connections a topology refresh dropped 5 s later, in a
		// goroutine of its own that may outlive a closed client briefly; it is not relock's.
		// Likewise a cluster client that rueidis makes and drops while it finds out that a server is not a
		// cluster, or fails to connect, leaves a delayed topology refresh sleeping for about a second.
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
			goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1")); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(redistest.CheckProcesses(code, processGrace))
}

// processGrace is how long the processes the tests started may take to end after the last test.
const processGrace = 5 * time.Second

// numsub returns PUBSUB NUMSUB for channel.
func numsub(t testing.TB, rdb rueidis.Client, channel string) int64 {
	t.Helper()
	vals, err := do(t, rdb, "PUBSUB", "NUMSUB", channel).ToArray()
	if err != nil || len(vals) != 2 {
		t.Fatalf("PUBSUB NUMSUB: %v %v", vals, err)
	}
	n, _ := vals[1].AsInt64()
	return n
}

// listening reports whether a Client listens for the releases of the lock whose channel is channel
// (Redisson's, "redisson_lock__channel:<base>"): on it, or, for a Lock, on its wake channel for the lock,
// "relock_lock_wake:<base>:<clientUUID>" (a waiter of a Lock held by a relock Client listens there alone:
// see docs/redisson.md).
func listening(t testing.TB, rdb rueidis.Client, channel string) bool {
	t.Helper()
	if numsub(t, rdb, channel) > 0 {
		return true
	}
	base, ok := strings.CutPrefix(channel, "redisson_lock__channel:")
	if !ok {
		return false
	}
	wakes, err := do(t, rdb, "PUBSUB", "CHANNELS", "relock_lock_wake:"+base+":*").AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range wakes {
		if numsub(t, rdb, ch) > 0 {
			return true
		}
	}
	return false
}

// awaitWaitingOwners waits until n relock owners wait for the Lock name (a name without braces), as Redis
// knows them: each has made an attempt since it listens for the lock's releases, and sleeps, or is about
// to.
func awaitWaitingOwners(t testing.TB, rdb rueidis.Client, name string, n int64) {
	t.Helper()
	eventually(t, 5*time.Second, fmt.Sprintf("%d owners wait for %s", n, name), func() bool {
		got, _ := do(t, rdb, "ZCARD", "relock_lock_waiters:{"+name+"}").AsInt64()
		return got == n
	})
}

// waitBehind has holder take the Lock name (a name without braces) with ctx, then starts a Lock of waiting's
// with wctx on a new goroutine, and returns once Redis knows n waiting owners of the lock (the waiter and
// any a test put there). The Lock's result arrives on the returned channel.
func waitBehind(t testing.TB, rdb rueidis.Client, holder, waiting *relock.Client, name string, ctx, wctx context.Context, n int64) <-chan error {
	t.Helper()
	if err := holder.Lock(name).Lock(ctx); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- waiting.Lock(name).Lock(wctx) }()
	awaitWaitingOwners(t, rdb, name, n)
	return got
}

// serverVersion returns the version of the redis-server the tests start (RELOCK_REDIS_SERVER's, or the one
// on PATH), for a test whose commands, rules or replies differ between versions.
func serverVersion(t testing.TB) redistest.Version {
	t.Helper()
	v, err := redistest.ServerVersion()
	if err != nil {
		t.Fatalf("the version of redis-server: %v", err)
	}
	return v
}

// hasShardedPubSub reports whether the redis-server the tests start has sharded pub/sub (SSUBSCRIBE,
// SPUBLISH, PUBSUB SHARDNUMSUB): Redis 7.0 and later.
func hasShardedPubSub(t testing.TB) bool {
	t.Helper()
	return serverVersion(t).AtLeast(7, 0)
}

// slowLoading returns the arguments of a redis-server that loads its data slowly, 2 ms a key, and answers
// LOADING meanwhile, and the command that writes it the 1000 keys to load (about 2 s). From Redis 7.0,
// loading-process-events-interval-bytes makes it serve clients every KB it loads. Redis 6.2 has no such
// directive: it serves them every 2 MB, so there each key holds 64 KB, saved uncompressed (DEBUG
// POPULATE's padding would compress to nothing): it serves them every 32 keys, 64 ms.
func slowLoading(t testing.TB) (args, populate []string) {
	t.Helper()
	if serverVersion(t).AtLeast(7, 0) {
		return []string{"--key-load-delay", "2000", "--loading-process-events-interval-bytes", "1024"},
			[]string{"DEBUG", "POPULATE", "1000"}
	}
	return []string{"--key-load-delay", "2000", "--rdbcompression", "no"}, []string{"DEBUG", "POPULATE", "1000", "key", "65536"}
}

// commandCalls returns how many times each command ran since the last CONFIG RESETSTAT, from INFO
// commandstats ("evalsha" -> calls). Redis 7.0 and later count a subcommand under its own name
// ("config|resetstat"), 6.2 under its command's ("config").
func commandCalls(t testing.TB, rdb rueidis.Client) map[string]int {
	t.Helper()
	info, err := do(t, rdb, "INFO", "commandstats").ToString()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	calls := map[string]int{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		calls[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.Atoi(n)
	}
	return calls
}

// startWaiter starts l.Lock(ctx) on a new goroutine and returns once the waiter has subscribed to
// channel; its result arrives on the returned channel.
func startWaiter(t testing.TB, l *relock.RLock, ctx context.Context, rdb rueidis.Client, channel string) <-chan error {
	t.Helper()
	got := make(chan error, 1)
	go func() { got <- l.Lock(ctx) }()
	eventually(t, 5*time.Second, "the waiter subscribes to "+channel, func() bool { return listening(t, rdb, channel) })
	return got
}

// helperEnv names the helper a re-executed test binary runs instead of the tests (see startHelper).
const helperEnv = "RELOCK_TEST_HELPER"

// helpers are programs a test runs in a child process, to kill or stop it as a whole process. Each reads
// its parameters from the environment and reports on stdout.
var helpers = map[string]func() error{
	// fair-waiter queues for the fair lock LOCK_NAME on REDIS_ADDR as owner OWNER, with a 1 s watchdog
	// timeout, and waits until it is killed.
	"fair-waiter": func() error {
		c, err := relock.New([]string{os.Getenv("REDIS_ADDR")}, &relock.Options{WatchdogTimeout: time.Second})
		if err != nil {
			return err
		}
		ctx := relock.WithOwner(context.Background(), os.Getenv("OWNER"))
		if err := c.FairLock(os.Getenv("LOCK_NAME")).Lock(ctx); err != nil {
			return err
		}
		fmt.Println("acquired")
		select {}
	},
}

func runHelper(name string) int {
	fn := helpers[name]
	if fn == nil {
		fmt.Fprintln(os.Stderr, "no helper", name)
		return 2
	}
	if err := fn(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// startHelper runs helper in a child process (this test binary, re-executed) with env added to its
// environment, and kills it when t ends.
func startHelper(t testing.TB, helper string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), helperEnv+"="+helper), env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// deployment is where a test's locks live: one redis-server, or a Redis Cluster shared by the tests that
// run on it (their lock names then start with prefix, to keep out of each other's way).
type deployment struct {
	kind    string // "standalone" or "cluster"
	addrs   []string
	servers []*redistest.Server
	prefix  string
	// clientAddrs and clientRedis, when set, are what relock Clients connect with (a TLS port, an ACL
	// user); raw connections keep addrs and the default user.
	clientAddrs []string
	clientRedis *rueidis.ClientOption
}

// standalone returns a deployment on a new server for t.
func standalone(t testing.TB) *deployment {
	srv := redistest.Start(t)
	return &deployment{kind: "standalone", addrs: []string{srv.Addr()}, servers: []*redistest.Server{srv}}
}

// onCluster returns a deployment on the test binary's shared cluster (3 masters, 1 replica each), whose
// lock names start with prefix and a number of its own, so that a test run again (-count) starts afresh.
func onCluster(t testing.TB, prefix string) *deployment {
	cluster, n := testutil.SharedCluster(t)
	return &deployment{kind: "cluster", addrs: cluster.Addrs(), servers: cluster.Servers, prefix: prefix + n + ":"}
}

// name returns a lock or key name for this deployment.
func (d *deployment) name(base string) string { return d.prefix + base }

// client returns a relock Client on d, closed when t ends.
func (d *deployment) client(t testing.TB, opts *relock.Options) *relock.Client {
	t.Helper()
	addrs := d.addrs
	if d.clientAddrs != nil {
		addrs = d.clientAddrs
	}
	if d.clientRedis != nil {
		o := relock.Options{}
		if opts != nil {
			o = *opts
		}
		o.Redis = *d.clientRedis
		opts = &o
	}
	c, err := relock.New(addrs, opts)
	if err != nil {
		t.Fatalf("relock.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// raw returns a plain rueidis client on d (a cluster client on a cluster).
func (d *deployment) raw(t testing.TB) rueidis.Client {
	t.Helper()
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: d.addrs, DisableCache: true})
	if err != nil {
		t.Fatalf("rueidis.NewClient: %v", err)
	}
	t.Cleanup(rdb.Close)
	return rdb
}

// keys returns every key of d whose name contains d's prefix (on a cluster, asking each node).
func (d *deployment) keys(t testing.TB) []string {
	t.Helper()
	return d.keysContaining(t, d.prefix)
}

// keysContaining returns every key of d whose name contains substr (on a cluster, asking each node).
func (d *deployment) keysContaining(t testing.TB, substr string) []string {
	t.Helper()
	seen := map[string]bool{}
	var keys []string
	for _, node := range nodeClients(t, d) {
		found, err := node.Do(context.Background(), node.B().Keys().Pattern("*"+substr+"*").Build()).AsStrSlice()
		if err != nil {
			t.Fatalf("KEYS: %v", err)
		}
		for _, k := range found {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	return keys
}

// receive fails t with failure unless an error, nil, comes on ch within d; a non-nil error fails t too.
func receive(t testing.TB, ch <-chan error, d time.Duration, failure string) {
	t.Helper()
	select {
	case err := <-ch:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(d):
		t.Fatal(failure)
	}
}

// lockers returns a constructor, on c, for each lock kind named (RLock, FairLock, WriteLock).
func lockers(c *relock.Client, kinds ...string) map[string]func(name string) relock.Locker {
	all := map[string]func(name string) relock.Locker{
		"RLock":     func(name string) relock.Locker { return c.Lock(name) },
		"FairLock":  func(name string) relock.Locker { return c.FairLock(name) },
		"WriteLock": func(name string) relock.Locker { return c.ReadWriteLock(name).WriteLock() },
	}
	out := make(map[string]func(name string) relock.Locker, len(kinds))
	for _, k := range kinds {
		out[k] = all[k]
	}
	return out
}

// heldByOther makes the lock name with newLock and has the owner "other" hold it; it returns the lock,
// the other owner's context, and a context for the test (20 s).
func heldByOther(t *testing.T, newLock func(name string) relock.Locker, name string) (relock.Locker, context.Context, context.Context) {
	t.Helper()
	ctx := ctxTimeout(t, 20*time.Second)
	l := newLock(name)
	other := relock.WithOwner(ctx, "other")
	if err := l.Lock(other); err != nil {
		t.Fatal(err)
	}
	return l, other, ctx
}
