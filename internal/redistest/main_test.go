package redistest

import (
	"os"
	"testing"
	"time"
)

// The harness's own tests leave no server running either.
func TestMain(m *testing.M) {
	AdoptOrphans()
	os.Exit(CheckProcesses(m.Run(), 5*time.Second))
}
