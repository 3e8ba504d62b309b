package relock_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// testCerts writes a CA and a server certificate for 127.0.0.1 it signed into dir, and returns the CA's
// pool and the files' paths.
func testCerts(t *testing.T, dir string) (pool *x509.CertPool, caFile, certFile, keyFile string) {
	t.Helper()
	write := func(name, kind string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "relock test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	pool = x509.NewCertPool()
	pool.AddCert(caCert)
	return pool, write("ca.crt", "CERTIFICATE", caDER), write("server.crt", "CERTIFICATE", leafDER), write("server.key", "EC PRIVATE KEY", keyDER)
}

// relock works over TLS (redis-server's --tls-port), given the rueidis TLS configuration through
// Options.Redis: locks, a waiter woken by pub/sub, renewals.
func TestTLS(t *testing.T) {
	t.Parallel()
	pool, caFile, certFile, keyFile := testCerts(t, t.TempDir())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tlsPort := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	redistest.Start(t, "--tls-port", strconv.Itoa(tlsPort), "--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", caFile, "--tls-auth-clients", "no")
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(tlsPort))
	newTLSClient := func() *relock.Client {
		c, err := relock.New([]string{addr}, &relock.Options{WatchdogTimeout: 600 * time.Millisecond,
			Redis: rueidis.ClientOption{TLSConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}})
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
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not woken over TLS")
	}
	if err := b.Lock("tls").Unlock(two); err != nil {
		t.Fatal(err)
	}

	// Without the CA, the connection is refused: relock does not fall back to anything.
	if _, err := relock.New([]string{addr}, &relock.Options{Redis: rueidis.ClientOption{
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12}}}); err == nil {
		t.Fatal("New accepted a server certificate it cannot verify")
	}
}
