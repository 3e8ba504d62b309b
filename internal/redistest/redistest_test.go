package redistest

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPauseResumeKillRestart(t *testing.T) {
	s := Start(t)
	if err := ping(s.Addr(), time.Second); err != nil {
		t.Fatalf("fresh server: %v", err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := ping(s.Addr(), 200*time.Millisecond); err == nil {
		t.Fatal("a paused server answered PING")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := ping(s.Addr(), time.Second); err != nil {
		t.Fatalf("resumed server: %v", err)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if s.Running() {
		t.Fatal("Running after Kill")
	}
	if err := ping(s.Addr(), 200*time.Millisecond); err == nil {
		t.Fatal("a killed server answered PING")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := ping(s.Addr(), time.Second); err != nil {
		t.Fatalf("restarted server: %v", err)
	}
}

func TestStopWhilePaused(t *testing.T) {
	s, err := StartServer()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Stop() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Stop hangs on a paused server")
	}
}

func TestStartFailsClearlyWithoutRedis(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv(ServerEnv, "")
	_, err := StartServer()
	if err == nil || !strings.Contains(err.Error(), "apt-get install") {
		t.Fatalf("StartServer without redis-server = %v, want the install hint", err)
	}
}

func TestExtraArgsReachTheServer(t *testing.T) {
	s := Start(t, "--maxmemory", "10mb")
	conn, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("CONFIG GET maxmemory\r\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(buf[:n]), "10485760") {
		t.Fatalf("CONFIG GET maxmemory = %q, want 10485760", buf[:n])
	}
}

func TestClusterStartsAndFailsOver(t *testing.T) {
	c := StartCluster(t, 3, 1)
	m, err := c.MasterOf("some-key")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	m2, err := c.WaitMasterOf("some-key", 20*time.Second)
	if err != nil || m2 == m {
		t.Fatalf("no new master for the key: %v", err)
	}
	t.Logf("failover took %v", time.Since(start))
}

// A server whose port another process took before it could bind it does not pass for ready: the server
// that answers there is not the one started.
func TestStartRejectsAPortTakenMeanwhile(t *testing.T) {
	first := Start(t)
	s := &Server{Port: first.Port, dir: t.TempDir()}
	if err := s.start(); err == nil {
		_ = s.Stop()
		t.Fatal("start on a port another server holds reported ready")
	}
	if err := ping(first.Addr(), time.Second); err != nil {
		t.Fatalf("the first server: %v", err)
	}
}

// fakeRedis62 writes, in a new directory, a redis-server that stands in for Redis 6.2: it says it is
// 6.2.14, refuses 7.0's --enable-debug-command as 6.2 does (an unknown directive), and otherwise runs the
// real redis-server with its arguments (exec: the process the harness started is the server), noting them
// in the file "started" beside it. It returns the fake's path.
func fakeRedis62(t *testing.T) string {
	t.Helper()
	real, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip(InstallHint)
	}
	dir := t.TempDir()
	script := `#!/bin/sh
if [ "$1" = "--version" ]; then
  echo "Redis server v=6.2.14 sha=00000000:0 malloc=jemalloc-5.1.0 bits=64 build=6e8a3bd4b5ab0c7b"
  exit 0
fi
for a in "$@"; do
  if [ "$a" = "--enable-debug-command" ]; then
    echo "*** FATAL CONFIG FILE ERROR (Redis 6.2.14) ***" >&2
    echo "Bad directive or wrong number of arguments" >&2
    exit 1
  fi
done
echo "$@" >> "` + dir + `/started"
exec ` + real + ` "$@"
`
	path := filepath.Join(dir, "redis-server")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// checkStartedAs62 starts a server with the harness, and checks that it is the fake's, started without
// the flags 6.2 refuses, and that it restarts.
func checkStartedAs62(t *testing.T, fake string) {
	t.Helper()
	s, err := StartServer()
	if err != nil {
		t.Fatalf("StartServer with a Redis 6.2: %v", err)
	}
	defer s.Stop()
	if err := ping(s.Addr(), time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if err := ping(s.Addr(), time.Second); err != nil {
		t.Fatal(err)
	}
	started, err := os.ReadFile(filepath.Join(filepath.Dir(fake), "started"))
	if err != nil {
		t.Fatalf("the 6.2 server was not the one started: %v", err)
	}
	if lines := strings.Split(strings.TrimSpace(string(started)), "\n"); len(lines) != 2 {
		t.Fatalf("the 6.2 server started %d times, want 2 (start, restart):\n%s", len(lines), started)
	}
	t.Logf("started as: redis-server %s", strings.SplitN(string(started), "\n", 2)[0])
}

// The harness starts a Redis 6.2 found on PATH: it asks the server's version and leaves out the flags 6.2
// does not know (--enable-debug-command, 7.0's; DEBUG is allowed on 6.2 without it).
func TestStartsARedis62OnPath(t *testing.T) {
	fake := fakeRedis62(t)
	t.Setenv(ServerEnv, "")
	t.Setenv("PATH", filepath.Dir(fake)+string(os.PathListSeparator)+os.Getenv("PATH"))
	checkStartedAs62(t, fake)
	v, err := ServerVersion()
	if err != nil || v.String() != "6.2.14" || v.AtLeast(7, 0) {
		t.Fatalf("ServerVersion = %v, %v, want 6.2.14", v, err)
	}
}

// RELOCK_REDIS_SERVER points the harness at another redis-server than the one on PATH.
func TestStartsTheServerOfTheEnvironment(t *testing.T) {
	fake := fakeRedis62(t)
	t.Setenv(ServerEnv, fake)
	checkStartedAs62(t, fake)
	t.Setenv(ServerEnv, filepath.Join(t.TempDir(), "no-such-redis-server"))
	if _, err := StartServer(); err == nil || !strings.Contains(err.Error(), ServerEnv) {
		t.Fatalf("StartServer with %s naming nothing = %v, want an error naming %s", ServerEnv, err, ServerEnv)
	}
}

func TestVersionAndFlags(t *testing.T) {
	for _, tc := range []struct {
		line  string
		want  string
		debug bool
	}{
		{"Redis server v=6.2.14 sha=00000000:0 malloc=jemalloc-5.1.0 bits=64 build=6e8a3bd4b5ab0c7b", "6.2.14", false},
		{"Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=ae4d7c971a948f0", "7.0.15", true},
		{"Valkey server v=8.0.1 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=1b4d1f2a9f1c4a1e", "8.0.1", true},
		{"Redis server v=8.0-m01 sha=00000000:0", "8.0.0", true},
		{"redis-server, a build of my own", "", true}, // unreadable: taken for a current one
	} {
		v, err := parseVersion(tc.line)
		if tc.want == "" {
			if err == nil {
				t.Errorf("parseVersion(%q) = %v, want an error", tc.line, v)
			}
		} else if err != nil || v.String() != tc.want {
			t.Errorf("parseVersion(%q) = %v, %v, want %s", tc.line, v, err, tc.want)
		}
		flags := strings.Join(versionFlags(v, err), " ")
		if strings.Contains(flags, "--enable-debug-command") != tc.debug {
			t.Errorf("flags for %q: %q", tc.line, flags)
		}
	}
	if v, err := ServerVersion(); err != nil || v.Major == 0 {
		t.Errorf("ServerVersion of the redis-server here = %v, %v", v, err)
	} else {
		t.Logf("redis-server here: %v", v)
	}
}

func TestCliBesideTheServer(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"valkey-server", "valkey-cli", "redis-server"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if got := cliPath(filepath.Join(dir, "valkey-server")); got != filepath.Join(dir, "valkey-cli") {
		t.Errorf("cliPath(valkey-server) = %s", got)
	}
	if got := cliPath(filepath.Join(dir, "redis-server")); got != "redis-cli" { // no redis-cli beside it
		t.Errorf("cliPath(redis-server) = %s, want redis-cli from PATH", got)
	}
}
