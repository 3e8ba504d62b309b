package testutil

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

	"github.com/relock-go/relock/internal/redistest"
)

// TLSCerts writes a CA and a server certificate for 127.0.0.1 it signed into dir (PEM), for
// redis-server's --tls-* options, and returns the CA's pool and the files' paths.
func TLSCerts(t testing.TB, dir string) (pool *x509.CertPool, caFile, certFile, keyFile string) {
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

// StartTLS starts a redis-server that also listens with TLS, on certificates TLSCerts makes, and returns
// it, its TLS address, a TLS configuration that trusts it, and the CA's file.
func StartTLS(t testing.TB) (srv *redistest.Server, addr string, cfg *tls.Config, caFile string) {
	t.Helper()
	pool, caFile, certFile, keyFile := TLSCerts(t, t.TempDir())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	srv = redistest.Start(t, "--tls-port", strconv.Itoa(port), "--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", caFile, "--tls-auth-clients", "no")
	return srv, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, caFile
}
