package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relock-go/relock/internal/redistest"
)

// relockBin is the relock binary TestMain builds once for the package's end-to-end tests.
var relockBin string

// buildFlags are the flags relockBin is built with (race_test.go adds -race when the tests have it).
var buildFlags []string

// binTimeout bounds one run of relockBin.
const binTimeout = 2 * time.Minute

// helperEnv names, in the environment of the test binary run again as a helper process, the helper it is
// (a key of helpers): it runs that instead of the tests.
const helperEnv = "RELOCK_TEST_HELPER"

// helpers are the helper processes the test binary can be run as (see helperCommand): each returns the
// helper's exit status.
var helpers = map[string]func(args []string) int{}

// helperCommand returns the command that runs the test binary as the helper name, with args.
func helperCommand(t *testing.T, name string, args ...string) []string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"env", helperEnv + "=" + name, exe}, args...)
}

func TestMain(m *testing.M) {
	if name := os.Getenv(helperEnv); name != "" {
		os.Exit(helpers[name](os.Args[1:]))
	}
	redistest.AdoptOrphans()
	os.Exit(redistest.CheckProcesses(testMain(m), 5*time.Second))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "relock-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	relockBin = filepath.Join(dir, "relock")
	build := exec.Command("go", append(append([]string{"build"}, buildFlags...), "-o", relockBin, ".")...)
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building relock: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// runBin runs relockBin with args and stdin, and returns its stdout, its stderr and its exit status. It
// fails t if the binary cannot be run or does not end within binTimeout. Call it from the test's goroutine;
// other goroutines use execBin.
func runBin(t testing.TB, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	stdout, stderr, code, err := execBin(stdin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return stdout, stderr, code
}

// execBin is runBin without a testing.TB: err says why the binary could not be run or did not end.
func execBin(stdin string, args ...string) (stdout, stderr string, code int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), binTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, relockBin, args...)
	cmd.Env = append(os.Environ(), "RELOCK_REDIS=")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return out.String(), errOut.String(), 0, fmt.Errorf("relock %s: did not end within %v\nstdout:\n%s\nstderr:\n%s",
			strings.Join(args, " "), binTimeout, &out, &errOut)
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		return out.String(), errOut.String(), 0, fmt.Errorf("relock %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), code, nil
}

// binResult is how one run of relockBin ended (see execBin).
type binResult struct {
	stdout, stderr string
	code           int
	err            error
}

// startBin runs relockBin with args, without stdin, in the background; its result arrives on the channel.
func startBin(args ...string) <-chan binResult {
	done := make(chan binResult, 1)
	go func() {
		var r binResult
		r.stdout, r.stderr, r.code, r.err = execBin("", args...)
		done <- r
	}()
	return done
}
