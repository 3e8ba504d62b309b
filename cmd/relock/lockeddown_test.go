package main

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/internal/testutil"
)

// runEnv runs the relock binary with extra environment variables, bounded like runBin.
func runEnv(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), binTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, relockBin, args...)
	cmd.Env = append(append(os.Environ(), "RELOCK_REDIS="), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("relock %s did not end within %v", strings.Join(args, " "), binTimeout)
	}
	if exit, ok := err.(*exec.ExitError); ok {
		return out.String(), errOut.String(), exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), 0
}

// The command reaches a TLS-only Redis through a rediss:// URL, verifying the server's certificate
// against the system roots (here SSL_CERT_FILE, the test's CA), and refuses one it cannot verify.
func TestRedissURL(t *testing.T) {
	t.Parallel()
	_, addr, cfg, caFile := testutil.StartTLS(t)
	c, err := relock.New([]string{addr}, &relock.Options{Redis: rueidis.ClientOption{TLSConfig: cfg}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := relock.WithOwner(testCtx(t), "tls-job")
	if err := c.Lock("tls:job").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Lock("tls:job").Unlock(ctx)

	trusted := []string{"SSL_CERT_FILE=" + caFile}
	out, errOut, code := runEnv(t, trusted, "inspect", "tls:job", "--redis", "rediss://"+addr)
	if code != 0 || !strings.Contains(out, "tls-job") {
		t.Fatalf("inspect over rediss://: exit %d\n%s\n%s", code, out, errOut)
	}
	out, errOut, code = runEnv(t, trusted, "list", "--redis", "rediss://"+addr)
	if code != 0 || !strings.Contains(out, "tls:job") {
		t.Fatalf("list over rediss://: exit %d\n%s\n%s", code, out, errOut)
	}
	_, errOut, code = runEnv(t, []string{"SSL_CERT_FILE=/dev/null"}, "inspect", "tls:job", "--redis", "rediss://"+addr)
	if code == 0 || !strings.Contains(errOut, "certificate") {
		t.Fatalf("inspect over rediss:// with an unknown CA: exit %d, stderr %q; want a failure that names the certificate", code, errOut)
	}
}

// aclBlock returns the rules of the ACL block after marker in docs/operations.md, where users copy them
// from.
func aclBlock(t *testing.T, marker string) []string {
	return testutil.ACLBlock(t, operationsDoc, marker)
}

// operationsDoc is the guide that gives the ACL blocks.
const operationsDoc = "../../docs/operations.md"

// As a Redis user holding the library's ACL and the command's additions from docs/operations.md, every
// operator command works; with the library's alone, inspect and watch say what they cannot see and list
// says that SCAN is forbidden.
func TestCommandACL(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx := testCtx(t)
	setUser := func(name string, rules ...[]string) string {
		args := []string{"ACL", "SETUSER", name}
		for _, r := range rules {
			args = append(args, r...)
		}
		if err := admin.Do(ctx, admin.B().Arbitrary(args[0]).Args(args[1:]...).Build()).Error(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if err := admin.Do(ctx, admin.B().Arbitrary("ACL", "SETUSER").Args(name, ">secret").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		return (&url.URL{Scheme: "redis", User: url.UserPassword(name, "secret"), Host: srv.Addr()}).String()
	}
	library := testutil.LibraryACL(t, operationsDoc) // 6.2's block on Redis 6.2, which refuses sharded pub/sub's commands
	full := setUser("ops", library, aclBlock(t, "<!-- acl-command -->"))
	narrow := setUser("app", library)

	c, err := relock.New([]string{srv.Addr()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	owner := relock.WithOwner(ctx, "acl-job")
	if err := c.Lock("app:held").Lock(owner); err != nil {
		t.Fatal(err)
	}
	defer c.Lock("app:held").Unlock(owner)

	out, errOut, code := runEnv(t, nil, "inspect", "app:held", "--redis", full)
	if code != 0 || !strings.Contains(out, "acl-job") || !strings.Contains(out, "connected from") {
		t.Fatalf("inspect with the command's ACL: exit %d\n%s\n%s", code, out, errOut)
	}
	out, errOut, code = runEnv(t, nil, "list", "--redis", full)
	if code != 0 || !strings.Contains(out, "app:held") {
		t.Fatalf("list with the command's ACL: exit %d\n%s\n%s", code, out, errOut)
	}
	out, errOut, code = runEnv(t, nil, "watch", "app:held", "--for", "300ms", "--redis", full)
	if code != 0 || !strings.Contains(out, "acl-job") {
		t.Fatalf("watch with the command's ACL: exit %d\n%s\n%s", code, out, errOut)
	}

	el := c.Election("app:el")
	if _, err := el.Campaign(owner, "v"); err != nil {
		t.Fatal(err)
	}
	if err := el.Resign(owner); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	out, errOut, code = runEnv(t, nil, "prune", "--idle", "1ms", "--redis", full)
	if code != 0 || !strings.Contains(out, "pruned 1 of 1") {
		t.Fatalf("prune with the command's ACL: exit %d\n%s\n%s", code, out, errOut)
	}

	out, errOut, code = runEnv(t, nil, "inspect", "app:held", "--redis", narrow)
	if code != 0 || !strings.Contains(out, "acl-job") || !strings.Contains(out, "CLIENT LIST failed") {
		t.Fatalf("inspect with the library's ACL only: exit %d\n%s\n%s", code, out, errOut)
	}
	_, errOut, code = runEnv(t, nil, "list", "--redis", narrow)
	if code == 0 || !strings.Contains(strings.ToLower(errOut), "scan") || strings.Contains(errOut, "secret") {
		t.Fatalf("list with the library's ACL only: exit %d, stderr %q; want a failure that names SCAN, without the password", code, errOut)
	}
	out, errOut, code = runEnv(t, nil, "watch", "app:held", "--for", "300ms", "--redis", narrow)
	if code != 0 || !strings.Contains(out, "acl-job") || !strings.Contains(out+errOut, "may not subscribe to the lock's keyspace channels") ||
		strings.Contains(out+errOut, "subscription lost") {
		t.Fatalf("watch with the library's ACL only: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, s := range []string{out, errOut} {
		if strings.Contains(s, "secret") {
			t.Fatalf("the command printed the URL's password: %s", s)
		}
	}
}
