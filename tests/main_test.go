// Package tests holds relock's fault suite: scenarios that inject faults (paused and killed processes,
// stalled and partitioned networks, restarted and paused servers) while checkers watch the promises
// relock makes: mutual exclusion, fencing, loss notification, no leaks.
//
//	go test -race ./tests/                  # short mode, as CI runs it
//	go test -race ./tests/ -soak 10m -v     # longer runs of every scenario
//
// Each scenario prints one summary line: operations, faults injected, violations. Violations in the
// scenarios that must be safe fail the test. With RELOCK_CHAOS_SUMMARY set, the lines are also appended to
// that file (CI prints it).
package tests

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/relock-go/relock/internal/faultnet"
	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/internal/testutil"
)

var soak = flag.Duration("soak", 0, "run each scenario's workload this much longer than in short mode")

func TestMain(m *testing.M) {
	flag.Parse()
	if helper := os.Getenv(helperEnv); helper != "" {
		os.Exit(runHelper(helper))
	}
	testutil.RaceExitAtOnce() // the helper processes
	redistest.AdoptOrphans()
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2")); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(redistest.CheckProcesses(code, 5*time.Second))
}

// workload is how long a scenario's load runs: a few seconds in short mode, plus -soak.
func workload(short time.Duration) time.Duration { return short + *soak }

// summary records and prints a scenario's summary line.
type summary struct {
	scenario   string
	ops        int64
	faults     int64
	violations int64
	notes      []string
	mu         sync.Mutex
}

func (s *summary) note(format string, args ...any) {
	s.mu.Lock()
	s.notes = append(s.notes, fmt.Sprintf(format, args...))
	s.mu.Unlock()
}

// report prints the summary line, and fails t if the scenario must be safe and was not.
func (s *summary) report(t *testing.T, mustBeSafe bool) {
	t.Helper()
	line := fmt.Sprintf("chaos: scenario=%s ops=%d faults=%d violations=%d", s.scenario, s.ops, s.faults, s.violations)
	if len(s.notes) > 0 {
		line += " (" + strings.Join(s.notes, "; ") + ")"
	}
	t.Log(line)
	if path := os.Getenv("RELOCK_CHAOS_SUMMARY"); path != "" {
		if f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintln(f, line)
			f.Close()
		}
	}
	if mustBeSafe && s.violations > 0 {
		t.Errorf("%d violations in a scenario that must be safe", s.violations)
	}
}

// The helpers shared with the library's tests (internal/testutil), under the names these tests use.
var (
	newClient  = testutil.Client
	do         = testutil.Do
	ctxTimeout = testutil.Ctx
	rawClient  = func(t testing.TB, addr string) rueidis.Client { return testutil.Raw(t, addr) }
	startProxy = func(t testing.TB, srv *redistest.Server) *faultnet.Proxy { return testutil.Proxy(t, srv.Addr()) }
)

// helperEnv names the helper a re-executed test binary runs instead of the tests.
const helperEnv = "RELOCK_CHAOS_HELPER"

// startHelper runs helper in a child process (this test binary, re-executed) with env, and returns it and
// a channel of the lines it prints; the process is killed when t ends.
func startHelper(t testing.TB, helper string, env ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), helperEnv+"="+helper), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		buf := make([]byte, 0, 4096)
		chunk := make([]byte, 1024)
		for {
			n, err := out.Read(chunk)
			buf = append(buf, chunk[:n]...)
			for {
				i := strings.IndexByte(string(buf), '\n')
				if i < 0 {
					break
				}
				lines <- string(buf[:i])
				buf = buf[i+1:]
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, lines
}

// expectLine waits for the next line with prefix from a helper.
func expectLine(t testing.TB, lines <-chan string, prefix string, within time.Duration) string {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("the helper ended before printing %q", prefix)
			}
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-timeout:
			t.Fatalf("no %q from the helper within %v", prefix, within)
		}
	}
}

// server starts a redis-server for t.
func server(t testing.TB) *redistest.Server { return redistest.Start(t) }

// rawClientNoTest is rawClient for helper processes, which have no test.
func rawClientNoTest(addr string) rueidis.Client {
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		panic(err)
	}
	return rdb
}
