package relockvalkey_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/relock-go/relock/internal/testutil"
)

// redisAddr is the address of a redis-server the tests start, for the examples.
var redisAddr string

// TestMain runs the tests with a redis-server for the examples, and checks that no goroutine is left but
// those of the cluster clients (valkey-go's, and rueidis's, which read the tests' keys behind relock's
// back): they close the connections a topology refresh dropped 5 s later, on a goroutine of their own.
func TestMain(m *testing.M) {
	os.Exit(testutil.RunWithServer(m, &redisAddr,
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
		goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*clusterClient)._refresh.func2")))
}
