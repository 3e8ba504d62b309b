package relocktest_test

import (
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/relock-go/relock/internal/redistest"
)

// Every Server and Client a test makes is closed with it: nothing may outlive the tests.
// Nor may a process: the tests start none, and CheckProcesses makes sure.
func TestMain(m *testing.M) {
	redistest.AdoptOrphans()
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) { os.Exit(redistest.CheckProcesses(code, 5*time.Second)) }))
}
