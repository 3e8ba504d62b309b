// Package redistest starts real redis-server processes on free loopback ports for tests, benchmarks and
// demos, and lets a test pause, resume, kill and restart them to inject faults.
//
// Nothing here mocks Redis: every Server is a child redis-server process with persistence off
// (--save "" --appendonly no) and DEBUG enabled for local connections (Redis 7+ needs
// --enable-debug-command for that; older servers allow DEBUG by default and refuse the flag). Start
// registers a cleanup that stops the process when the test ends; StartServer leaves that to the caller
// (Stop).
//
// The redis-server started is the one on PATH, or the one $RELOCK_REDIS_SERVER names (ServerEnv), so that
// the suites can run against another version: the harness asks it its version once (redis-server
// --version) and passes only the flags that version knows.
package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// TB is what the harness needs of a test: *testing.T, *testing.B and *testing.F have it. The package does
// not import testing, so that a command (relock demo) can start servers without linking the test framework.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(f func())
}

// InstallHint is part of the error returned when redis-server is not on PATH.
const InstallHint = "redis-server not found on PATH: install Redis 7 (Debian/Ubuntu: apt-get install -y redis-server; " +
	"macOS: brew install redis), put redis-server on PATH, or set " + ServerEnv + " to its path"

// ServerEnv is the environment variable that names the redis-server binary the harness starts (a path, or
// a name looked up on PATH) instead of redis-server on PATH: RELOCK_REDIS_SERVER=/opt/redis-6.2/redis-server.
// Clusters are created with the redis-cli beside it (valkey-cli beside valkey-server), or else redis-cli on
// PATH.
const ServerEnv = "RELOCK_REDIS_SERVER"

// ServerPath returns the redis-server binary the harness starts: $RELOCK_REDIS_SERVER when set, else
// redis-server on PATH (an error with InstallHint when there is none).
func ServerPath() (string, error) {
	if name := os.Getenv(ServerEnv); name != "" {
		path, err := exec.LookPath(name)
		if err != nil {
			return "", fmt.Errorf("%s=%s: %w", ServerEnv, name, err)
		}
		return path, nil
	}
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return "", errors.New(InstallHint)
	}
	return path, nil
}

// Version is a redis-server's version, as its --version prints it (Valkey's too).
type Version struct {
	Major, Minor, Patch int
	Text                string // the whole line --version printed
}

// AtLeast reports whether v is major.minor or later.
func (v Version) AtLeast(major, minor int) bool {
	return v.Major > major || v.Major == major && v.Minor >= minor
}

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// parseVersion reads the version out of redis-server --version's line: "Redis server v=7.0.15 sha=...",
// "Valkey server v=8.0.1 sha=...".
func parseVersion(line string) (Version, error) {
	v := Version{Text: strings.TrimSpace(line)}
	for _, f := range strings.Fields(line) {
		num, ok := strings.CutPrefix(f, "v=")
		if !ok {
			continue
		}
		// Each part's leading digits: "8.0-m01" (a milestone) is 8.0.0.
		var n [3]int
		for i, part := range strings.SplitN(num, ".", 3) {
			digits := len(part) - len(strings.TrimLeft(part, "0123456789"))
			if digits == 0 && i == 0 {
				return v, fmt.Errorf("no version in %q", v.Text)
			}
			n[i], _ = strconv.Atoi(part[:digits])
			if digits < len(part) {
				break
			}
		}
		v.Major, v.Minor, v.Patch = n[0], n[1], n[2]
		return v, nil
	}
	return v, fmt.Errorf("no version in %q", v.Text)
}

// versions caches each binary's version (path -> versionResult): it is asked once per process.
var versions sync.Map

type versionResult struct {
	v   Version
	err error
}

// versionOf returns the version of the redis-server binary at path.
func versionOf(path string) (Version, error) {
	if r, ok := versions.Load(path); ok {
		return r.(versionResult).v, r.(versionResult).err
	}
	var r versionResult
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		r.err = fmt.Errorf("%s --version: %w", path, err)
	} else {
		r.v, r.err = parseVersion(string(out))
	}
	versions.Store(path, r)
	return r.v, r.err
}

// ServerVersion returns the version of the redis-server the harness starts (see ServerPath), for a test
// that needs a feature of a given version (sharded pub/sub, Redis 7.0) to skip on an older one.
func ServerVersion() (Version, error) {
	path, err := ServerPath()
	if err != nil {
		return Version{}, err
	}
	return versionOf(path)
}

// versionFlags are the flags every Server gets that not every version knows: DEBUG for local connections
// (needed from 7.0 on, refused as an unknown directive before). A version that cannot be read is taken
// to be a current one.
func versionFlags(v Version, err error) []string {
	if err == nil && !v.AtLeast(7, 0) {
		return nil
	}
	return []string{"--enable-debug-command", "local"}
}

// readyTimeout bounds how long a server may take to answer PING after it was started.
const readyTimeout = 10 * time.Second

// Server is one redis-server child process listening on 127.0.0.1:Port.
// Its methods are safe for concurrent use.
type Server struct {
	// Port is the TCP port on 127.0.0.1; it stays the same across Restart.
	Port int

	bin  string // the redis-server binary
	args []string
	dir  string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been reaped
	log    *OutputBuffer
	paused bool
}

// Addr returns "127.0.0.1:<port>".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// Start starts a redis-server for tb and stops it when tb ends. Extra args are appended to the command line
// (for example "--maxmemory", "10mb"). It fails tb with InstallHint when redis-server is not installed.
func Start(tb TB, args ...string) *Server {
	tb.Helper()
	s, err := StartServer(args...)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Stop(); err != nil {
			tb.Logf("redistest: stopping %s: %v", s.Addr(), err)
		}
	})
	return s
}

// StartN starts n independent servers for tb (for example the masters of a RedLock).
func StartN(tb TB, n int, args ...string) []*Server {
	tb.Helper()
	servers := make([]*Server, n)
	for i := range servers {
		servers[i] = Start(tb, args...)
	}
	return servers
}

// StartServer starts a redis-server on a free loopback port and waits until it answers PING.
// The caller must call Stop.
func StartServer(args ...string) (*Server, error) {
	bin, err := ServerPath()
	if err != nil {
		return nil, err
	}
	args = append(versionFlags(versionOf(bin)), args...)
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	// A port found free can be taken by another process before redis-server binds it: try a few.
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s := &Server{Port: port, bin: bin, args: args, dir: dir}
		if lastErr = s.start(); lastErr == nil {
			return s, nil
		}
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start launches the process and waits for PING. s.mu must not be held.
func (s *Server) start() error {
	argv := []string{
		"--port", strconv.Itoa(s.Port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--daemonize", "no",
		"--loglevel", "warning",
	}
	argv = append(argv, s.args...)
	bin := s.bin
	if bin == "" {
		bin = "redis-server"
	}
	cmd := exec.Command(bin, argv...)
	log := &OutputBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	// Own process group: a signal to the test's group (Ctrl-C) must not race our own cleanup. A
	// parent-death signal (Linux): the server dies with the process that started it, however that dies
	// (a test binary killed at its -timeout, a relock demo killed with SIGKILL), instead of running on,
	// orphaned. The kernel sends it when the thread that started the server exits, not the process, and
	// Go ends a thread when a goroutine locked to it returns: the server is started, and waited for, by a
	// goroutine locked to its thread, which so runs nothing else (waiting, it would hold a thread anyway).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setParentDeath(cmd.SysProcAttr)
	exited := make(chan struct{})
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(exited)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("starting redis-server: %w", err)
	}
	s.mu.Lock()
	s.cmd, s.exited, s.log, s.paused = cmd, exited, log, false
	s.mu.Unlock()

	deadline := time.Now().Add(readyTimeout)
	for {
		// The server that answers must be this process: until it has bound the port, another test
		// binary's server may have taken the port meanwhile (then this one exits, and the caller tries
		// another port).
		if pid, err := serverPID(s.Addr(), 200*time.Millisecond); err == nil && pid == cmd.Process.Pid {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server on port %d exited at start: %s", s.Port, strings.TrimSpace(log.String()))
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("redis-server on port %d did not answer PING within %v: %s",
				s.Port, readyTimeout, strings.TrimSpace(log.String()))
		}
	}
}

// serverPID asks the server at addr for its process ID (INFO server).
func serverPID(addr string, timeout time.Duration) (int, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte("INFO server\r\n")); err != nil {
		return 0, err
	}
	r := bufio.NewReader(conn)
	head, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "$")))
	if !strings.HasPrefix(head, "$") || err != nil {
		return 0, fmt.Errorf("unexpected INFO reply %q", head)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("INFO server has no process_id")
}

// Pause stops the process with SIGSTOP: connections stay open but nothing is answered, as with a server
// stuck in a long fork or a stalled VM.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP, true) }

// Resume continues a paused process with SIGCONT.
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT, false) }

func (s *Server) signal(sig syscall.Signal, paused bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return errors.New("redistest: server is not running")
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		return err
	}
	s.paused = paused
	return nil
}

// Kill ends the process with SIGKILL and waits for it to exit. With persistence off, every key is lost.
func (s *Server) Kill() error {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Kill()
	<-exited
	return nil
}

// Restart kills the process (if it runs) and starts a new, empty one on the same port.
func (s *Server) Restart() error {
	if err := s.Kill(); err != nil {
		return err
	}
	return s.start()
}

// Stop ends the server (resuming it first if paused) and removes its directory.
func (s *Server) Stop() error {
	s.mu.Lock()
	cmd, exited, paused := s.cmd, s.exited, s.paused
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil {
		if paused {
			_ = cmd.Process.Signal(syscall.SIGCONT)
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	return os.RemoveAll(s.dir)
}

// Running reports whether the process has been started and not killed or stopped.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Log returns what the current process wrote to stdout and stderr.
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log == nil {
		return ""
	}
	return s.log.String()
}

// OutputBuffer collects a child process's output: exec copies into it on a goroutine of its own while
// others read it, so it is a bytes.Buffer safe for concurrent use.
type OutputBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *OutputBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *OutputBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Cluster is a local Redis Cluster: masters with replicas, each a Server on its own loopback port.
type Cluster struct {
	// Servers are every node, masters and replicas; which is which changes on failover.
	Servers []*Server
}

// StartCluster starts a cluster of masters masters with replicas replicas each, for tb, and stops it when
// tb ends. Nodes use a 1 s cluster-node-timeout, so a killed master's replica takes over in a few seconds.
// It waits until every node reports cluster_state:ok and every replica is in sync.
func StartCluster(tb TB, masters, replicas int) *Cluster {
	tb.Helper()
	c, err := StartClusterServers(masters, replicas)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(func() { c.Stop() })
	return c
}

// StartClusterServers is StartCluster without a test: the caller must call Stop.
func StartClusterServers(masters, replicas int) (*Cluster, error) {
	c := &Cluster{}
	for i := 0; i < masters*(1+replicas); i++ {
		s, err := StartServer("--cluster-enabled", "yes", "--cluster-node-timeout", "1000",
			"--cluster-config-file", "nodes-"+strconv.Itoa(i)+".conf", "--cluster-require-full-coverage", "no",
			// Replicas sync at once, and may take over however old their data: tests kill masters early.
			"--repl-diskless-sync-delay", "0", "--cluster-replica-validity-factor", "0")
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Servers = append(c.Servers, s)
	}
	args := []string{"--cluster", "create"}
	for _, s := range c.Servers {
		args = append(args, s.Addr())
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command(cliPath(c.Servers[0].bin), args...).CombinedOutput(); err != nil {
		c.Stop()
		return nil, fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := c.WaitOK(30 * time.Second); err != nil {
		c.Stop()
		return nil, err
	}
	if err := c.waitReplicasSynced(30 * time.Second); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// cliPath returns the redis-cli to use with the redis-server at server: the one beside it (valkey-cli
// beside valkey-server), else redis-cli on PATH.
func cliPath(server string) string {
	dir, base := filepath.Split(server)
	if name := strings.Replace(base, "server", "cli", 1); name != base && dir != "" {
		if info, err := os.Stat(filepath.Join(dir, name)); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
			return filepath.Join(dir, name)
		}
	}
	return "redis-cli"
}

// Stop stops every node.
func (c *Cluster) Stop() {
	for _, s := range c.Servers {
		_ = s.Stop()
	}
}

// waitReplicasSynced waits until every replica's link to its master is up.
func (c *Cluster) waitReplicasSynced(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, s := range c.Servers {
		for {
			info, err := command(s.Addr(), "INFO", "replication")
			if err == nil && (strings.Contains(info, "role:master") || strings.Contains(info, "master_link_status:up")) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("replica %s not in sync within %v", s.Addr(), timeout)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// Addrs returns the address of every node: a cluster client can start from any of them.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, 0, len(c.Servers))
	for _, s := range c.Servers {
		if s.Running() {
			addrs = append(addrs, s.Addr())
		}
	}
	return addrs
}

// WaitOK waits until every running node reports cluster_state:ok and agrees on the slots' owners.
func (c *Cluster) WaitOK(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ok := true
		for _, s := range c.Servers {
			if !s.Running() {
				continue
			}
			info, err := command(s.Addr(), "CLUSTER", "INFO")
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				ok = false
				break
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not ok within %v", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitMasterOf waits until a running master serves key (after a failover: until a replica took over).
func (c *Cluster) WaitMasterOf(key string, timeout time.Duration) (*Server, error) {
	deadline := time.Now().Add(timeout)
	for {
		m, err := c.MasterOf(key)
		if err == nil {
			return m, nil
		}
		if time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// MasterOf returns the running master that serves key, by asking a node (CLUSTER KEYSLOT, CLUSTER NODES).
func (c *Cluster) MasterOf(key string) (*Server, error) {
	for _, s := range c.Servers {
		if !s.Running() {
			continue
		}
		slotText, err := command(s.Addr(), "CLUSTER", "KEYSLOT", key)
		if err != nil {
			continue
		}
		slot, _ := strconv.Atoi(strings.TrimSpace(slotText))
		nodes, err := command(s.Addr(), "CLUSTER", "NODES")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(nodes, "\n") {
			f := strings.Fields(line)
			if len(f) < 9 || !strings.Contains(f[2], "master") || strings.Contains(f[2], "fail") {
				continue
			}
			for _, r := range f[8:] {
				lo, hi, found := strings.Cut(r, "-")
				if !found {
					hi = lo
				}
				l, _ := strconv.Atoi(lo)
				h, _ := strconv.Atoi(hi)
				if slot >= l && slot <= h {
					addr, _, _ := strings.Cut(f[1], "@")
					for _, m := range c.Servers {
						if m.Addr() == addr && m.Running() {
							return m, nil
						}
					}
				}
			}
		}
	}
	return nil, errors.New("redistest: no master found for " + key)
}

// ReplicaOf returns a running replica of master.
func (c *Cluster) ReplicaOf(master *Server) (*Server, error) {
	id, err := command(master.Addr(), "CLUSTER", "MYID")
	if err != nil {
		return nil, err
	}
	for _, s := range c.Servers {
		if s == master || !s.Running() {
			continue
		}
		info, err := command(s.Addr(), "INFO", "replication")
		if err != nil || !strings.Contains(info, "master_port:"+strconv.Itoa(master.Port)) {
			continue
		}
		if nodes, err := command(s.Addr(), "CLUSTER", "NODES"); err == nil && strings.Contains(nodes, "slave "+id) {
			return s, nil
		}
	}
	return nil, errors.New("redistest: no replica of " + master.Addr())
}

// command sends one command in RESP and returns its reply as text (bulk and simple strings, integers;
// arrays are not needed here).
func command(addr string, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	switch {
	case strings.HasPrefix(line, "$"):
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case strings.HasPrefix(line, "-"):
		return "", errors.New(line[1:])
	}
	return strings.TrimLeft(line, "+:"), nil
}

// ping sends an inline PING and expects +PONG (the tests use it).
func ping(addr string, timeout time.Duration) error {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("unexpected PING reply %q", line)
	}
	return nil
}
