package redistest

import (
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

// A grandchild left running by a child that exited is adopted, found, named and killed; nothing is left
// once it has been reported. (Not parallel: every child of the test binary counts.)
func TestCheckProcessesFindsOrphans(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only Linux has child subreapers")
	}
	AdoptOrphans()
	if out, err := exec.Command("sh", "-c", "sleep 37 </dev/null >/dev/null 2>&1 &").CombinedOutput(); err != nil {
		t.Fatal(err, string(out))
	}
	left := processesLeft(300 * time.Millisecond)
	if len(left) != 1 || !strings.Contains(left[0], "sleep 37") {
		t.Fatalf("processes left: %q, want the orphaned sleep", left)
	}
	if left := processesLeft(0); len(left) != 0 {
		t.Fatalf("processes left after they were killed: %q", left)
	}
}
