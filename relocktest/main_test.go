package relocktest_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every Server and Client a test makes is closed with it: nothing may outlive the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
