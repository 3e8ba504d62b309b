package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The README's first command is what a newcomer runs in a fresh clone, with only Go installed: it must
// name a package of this repository (the module is not published, so a module@version query fails), and
// it must work verbatim from the repository's root.
func TestReadmeFirstCommandWorksInAClone(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the demo")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)```sh\n(.*?)\n```").FindSubmatch(readme)
	if block == nil {
		t.Fatal("README has no sh block")
	}
	cmdline := strings.TrimSpace(string(block[1]))
	if strings.Contains(cmdline, "@") || strings.Contains(cmdline, "\n") {
		t.Fatalf("README's first command %q needs a published module (or is not one command)", cmdline)
	}
	words := strings.Fields(cmdline)
	if len(words) < 3 || words[0] != "go" || words[1] != "run" || words[len(words)-1] != "demo" {
		t.Fatalf("README's first command %q is not `go run <package> demo`", cmdline)
	}
	// Verbatim, plus short phases so that the test stays quick (the flags do not change what is built).
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, words[0], append(words[1:], quick...)...)
	run.Dir = root
	run.Env = append(os.Environ(), "RELOCK_REDIS=")
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmdline, err, out)
	}
	if !strings.Contains(string(out), "OK: the lock lost no update.") {
		t.Fatalf("%s did not end with its verdict:\n%s", cmdline, out)
	}
}
