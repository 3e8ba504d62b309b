package relock_test

import (
	"crypto/tls"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/internal/testutil"
)

// startTLS starts a redis-server that also listens with TLS, on certificates made for the test, and
// returns it, its TLS address and a TLS configuration that trusts it.
func startTLS(t *testing.T) (*redistest.Server, string, *tls.Config) {
	t.Helper()
	pool, caFile, certFile, keyFile := testutil.TLSCerts(t, t.TempDir())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tlsPort := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	srv := redistest.Start(t, "--tls-port", strconv.Itoa(tlsPort), "--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", caFile, "--tls-auth-clients", "no")
	return srv, net.JoinHostPort("127.0.0.1", strconv.Itoa(tlsPort)), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// relock works over TLS (redis-server's --tls-port), given the rueidis TLS configuration through
// Options.Redis: locks, a waiter woken by pub/sub, renewals.
func TestTLS(t *testing.T) {
	t.Parallel()
	_, addr, cfg := startTLS(t)
	newTLSClient := func() *relock.Client {
		c, err := relock.New([]string{addr}, &relock.Options{WatchdogTimeout: 600 * time.Millisecond,
			Redis: rueidis.ClientOption{TLSConfig: cfg}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, b := newTLSClient(), newTLSClient()
	ctx := ctxTimeout(t, 20*time.Second)
	one, two := relock.WithOwner(ctx, "one"), relock.WithOwner(ctx, "two")
	if err := a.Lock("tls").Lock(one); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- b.Lock("tls").Lock(two) }()
	time.Sleep(700 * time.Millisecond) // past renewals, the waiter waiting
	if err := a.Lock("tls").Unlock(one); err != nil {
		t.Fatal(err)
	}
	receive(t, got, 5*time.Second, "the waiter was not woken over TLS")
	if err := b.Lock("tls").Unlock(two); err != nil {
		t.Fatal(err)
	}

	// Without the CA, the connection is refused: relock does not fall back to anything.
	if _, err := relock.New([]string{addr}, &relock.Options{Redis: rueidis.ClientOption{
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12}}}); err == nil {
		t.Fatal("New accepted a server certificate it cannot verify")
	}
}
