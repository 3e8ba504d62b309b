// Package testutil holds the helpers the library's tests and the fault suite (tests/) share: Clients and
// plain connections closed with the test, commands given as words, bounded contexts, polling, and fault
// proxies. It is imported by tests only, and turns on, for every test binary that imports it, the checks
// of relock's lifecycles' invariants (internal/invariant).
package testutil

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/faultnet"
	"github.com/relock-go/relock/internal/invariant"
	"github.com/relock-go/relock/internal/redistest"
)

func init() { invariant.Enable() }

// Client returns a relock Client on addrs, closed when t ends.
func Client(t testing.TB, addrs []string, opts *relock.Options) *relock.Client {
	t.Helper()
	c, err := relock.New(addrs, opts)
	if err != nil {
		t.Fatalf("relock.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Raw returns a plain rueidis client on addrs (a cluster client for a cluster's), for reading and writing
// keys behind relock's back, closed when t ends.
func Raw(t testing.TB, addrs ...string) rueidis.Client {
	t.Helper()
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatalf("rueidis.NewClient: %v", err)
	}
	t.Cleanup(rdb.Close)
	return rdb
}

// Do runs a command given as words and returns its reply.
func Do(t testing.TB, rdb rueidis.Client, words ...string) rueidis.RedisResult {
	t.Helper()
	return rdb.Do(context.Background(), rdb.B().Arbitrary(words...).Build())
}

// Ctx returns a context that ends after d, or when t ends.
func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Eventually polls cond until it holds, and fails t if d passes first. Extra funcs describe the state in
// the failure message.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool, state ...func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			for _, s := range state {
				what += "; " + s()
			}
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Proxy starts a fault proxy in front of addr, closed when t ends.
func Proxy(t testing.TB, addr string) *faultnet.Proxy {
	t.Helper()
	p, err := faultnet.Start(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// RaceExitAtOnce makes the processes this one starts (helper processes, built binaries), when they are
// built with the race detector, exit as soon as they are done: by default (GORACE's atexit_sleep_ms) they
// sleep a second first. A race is still reported, and still fails the process.
func RaceExitAtOnce() {
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
}

// ACLBlock returns the rules of the ACL SETUSER block that follows marker in the Markdown file at path (the code
// block after it), without "ACL SETUSER <user>", with line continuations and shell quotes removed.
func ACLBlock(t testing.TB, path, marker string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), marker)
	if !ok {
		t.Fatalf("%s has no %q block", path, marker)
	}
	_, block, _ := strings.Cut(after, "```sh\n")
	block, _, _ = strings.Cut(block, "```")
	words := strings.Fields(strings.ReplaceAll(block, "\\\n", " "))
	if len(words) < 4 || words[0] != "ACL" || words[1] != "SETUSER" {
		t.Fatalf("the %s block of %s does not start with ACL SETUSER <user>", marker, path)
	}
	for i, w := range words {
		words[i] = strings.Trim(w, "'")
	}
	return words[3:]
}

// LibraryACL returns the library's minimal ACL rules from the Markdown file at path for the redis-server the
// harness starts (redistest.ServerVersion): the block after "<!-- acl -->" for Redis 7.0 and later, the one
// after "<!-- acl-6.2 -->" for an older server, which refuses the first block's sharded pub/sub commands. A
// version that cannot be read is taken to be a current one.
func LibraryACL(t testing.TB, path string) []string {
	t.Helper()
	if v, err := redistest.ServerVersion(); err == nil && !v.AtLeast(7, 0) {
		return ACLBlock(t, path, "<!-- acl-6.2 -->")
	}
	return ACLBlock(t, path, "<!-- acl -->")
}

// KeysContaining returns the keys whose names contain substr on every server of addrs (each node of a
// cluster asked on its own), each once.
func KeysContaining(t testing.TB, addrs []string, substr string) []string {
	t.Helper()
	seen := map[string]bool{}
	var keys []string
	for _, addr := range addrs {
		node, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
		if err != nil {
			t.Fatalf("rueidis.NewClient(%s): %v", addr, err)
		}
		found, err := node.Do(context.Background(), node.B().Keys().Pattern("*"+substr+"*").Build()).AsStrSlice()
		node.Close()
		if err != nil {
			t.Fatalf("KEYS on %s: %v", addr, err)
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

// ReplyScripts are Lua scripts whose replies take each of RESP's forms, nested, error replies (top-level and
// inside an array), nil, RESP3's maps and doubles: a client adapter must give relock each as rueidis reads it.
var ReplyScripts = []string{
	"return 42",
	"return 'text'",
	"return false",
	"return {1, 'two', {3, false, 'four'}, redis.error_reply('ERR inner')}",
	"return redis.error_reply('RELOCK_WRONGKIND a test')",
	"return redis.status_reply('OK')",
	"redis.setresp(3); return {map={a=1}, double=3.5}",
	"redis.setresp(3); return redis.call('HELLO')",
}

// shared is the test binary's cluster, for the tests that share one (see SharedCluster).
var shared struct {
	once    sync.Once
	cluster *redistest.Cluster
	err     error
	runs    atomic.Int64
}

// SharedCluster returns the test binary's shared cluster (3 masters with a replica each), started at the
// first call, and a number no other call returns, to start a test's names with (a test run again, -count,
// starts afresh). TestMain stops it with StopSharedCluster.
func SharedCluster(t testing.TB) (*redistest.Cluster, string) {
	t.Helper()
	shared.once.Do(func() { shared.cluster, shared.err = redistest.StartClusterServers(3, 1) })
	if shared.err != nil {
		t.Fatalf("starting the shared cluster: %v", shared.err)
	}
	return shared.cluster, strconv.FormatInt(shared.runs.Add(1), 10)
}

// StopSharedCluster stops the shared cluster, if a test started it.
func StopSharedCluster() {
	if shared.cluster != nil {
		shared.cluster.Stop()
	}
}

// RunWithServer runs a test binary's tests (a TestMain's m) with a redis-server of its own started first,
// its address in *addr (for examples, which cannot start one), and stops it, and the shared cluster, after.
// When the tests passed, it fails the binary if goroutines are left (goleak), but for those of ignore. It
// returns the binary's exit code.
func RunWithServer(m *testing.M, addr *string, ignore ...goleak.Option) int {
	redistest.AdoptOrphans()
	srv, err := redistest.StartServer()
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return 1
	}
	*addr = srv.Addr()
	code := m.Run()
	if err := srv.Stop(); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		code = 1
	}
	StopSharedCluster()
	if code == 0 {
		if err := goleak.Find(ignore...); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	return redistest.CheckProcesses(code, 5*time.Second)
}
