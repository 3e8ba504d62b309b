package relockgoredis_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/internal/testutil"
)

// redisAddr is the address of a redis-server the tests start, for the examples.
var redisAddr string

func TestMain(m *testing.M) {
	srv, err := redistest.StartServer()
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	redisAddr = srv.Addr()
	code := m.Run()
	if err := srv.Stop(); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		code = 1
	}
	testutil.StopSharedCluster()
	if code == 0 {
		// The raw rueidis cluster clients (for reading behind relock's back) close the connections a
		// topology refresh dropped 5 s later, on a goroutine of their own.
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2")); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}
