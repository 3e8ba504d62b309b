package relock_test

import (
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/internal/testutil"
)

// startTLS is testutil.StartTLS without the CA's file.
func startTLS(t *testing.T) (*redistest.Server, string, *tls.Config) {
	srv, addr, cfg, _ := testutil.StartTLS(t)
	return srv, addr, cfg
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
	_, err := relock.New([]string{addr}, &relock.Options{Redis: rueidis.ClientOption{
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12}}})
	if err == nil {
		t.Fatal("New accepted a server certificate it cannot verify")
	}
	if !strings.Contains(err.Error(), "certificate") || strings.Contains(err.Error(), "plain TCP") {
		t.Fatalf("New with a certificate it cannot verify: %v; want the certificate's error, without a hint about plain TCP", err)
	}
}

// TLS asked of a port that serves plain TCP (a rediss:// URL for Redis's ordinary port) fails at the dial
// timeout with an error that says the server gave no TLS answer and what to use instead, not only "context
// deadline exceeded".
func TestTLSOnAPlainPortSaysSo(t *testing.T) {
	t.Parallel()
	plain := redistest.Start(t)
	o := &relock.Options{}
	o.Redis.Dialer.Timeout = time.Second
	_, err := relock.New([]string{"rediss://" + plain.Addr()}, o)
	if !errors.Is(err, relock.ErrUnavailable) || !strings.Contains(err.Error(), "no TLS answer") || !strings.Contains(err.Error(), "use redis://") {
		t.Fatalf("New with rediss:// on a plain port: %v; want ErrUnavailable saying the server gave no TLS answer", err)
	}
	t.Log(err)
}
