package redistest

import (
	"net"
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
