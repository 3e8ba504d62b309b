package safety

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/internal/testutil"
)

var (
	soak         = flag.Duration("soak", 0, "run each scenario's rounds for this long (0: the short version CI runs)")
	visualize    = flag.String("visualize", "", "write porcupine's visualization of the first violating history of each scenario into this directory")
	checkTimeout = flag.Duration("check-timeout", 30*time.Second, "how long porcupine may take to check one history")
)

// dataAddr is the address of the redis-server that holds every scenario's store: a separate server, which
// no fault touches.
var dataAddr string

// parallel is how many scenarios run at once unless -parallel is given: they sleep most of the time (a
// short run uses a fraction of a core), and the default, GOMAXPROCS, would make the module's run long.
const parallel = 4

func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", fmt.Sprint(parallel)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	redistest.AdoptOrphans()
	code := func() int {
		data, err := redistest.StartServer()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer data.Stop()
		dataAddr = data.Addr()
		return m.Run()
	}()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2")); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(redistest.CheckProcesses(code, 5*time.Second))
}

// dataClient returns a client of the data store, closed when t ends.
func dataClient(t testing.TB) rueidis.Client { return testutil.Raw(t, dataAddr) }

// summary is a scenario's summary line: what ran, the faults, and what the checker found.
type summary struct {
	scenario, kind, variant string
	rounds, violations      int
	unknown                 int // rounds porcupine could not decide in time
	ops, faults             int64
	readOnly, rejected      int64
	window                  time.Duration // the longest overlap window of a violating round
	mu                      sync.Mutex
	notes                   []string
}

func (s *summary) note(format string, args ...any) {
	s.mu.Lock()
	s.notes = append(s.notes, fmt.Sprintf(format, args...))
	s.mu.Unlock()
}

// line renders the summary.
func (s *summary) line() string {
	result := "linearizable"
	if s.violations > 0 {
		result = "violated"
	}
	line := fmt.Sprintf("safety: scenario=%s kind=%s variant=%s rounds=%d ops=%d faults=%d result=%s",
		s.scenario, s.kind, s.variant, s.rounds, s.ops, s.faults, result)
	if s.violations > 0 {
		line += fmt.Sprintf(" violations=%d/%d window=%v", s.violations, s.rounds, s.window.Round(time.Millisecond))
	}
	if s.unknown > 0 {
		line += fmt.Sprintf(" undecided=%d", s.unknown)
	}
	if strings.HasPrefix(s.variant, "fenced") {
		line += fmt.Sprintf(" rejected=%d", s.rejected)
	}
	if s.readOnly > 0 {
		line += fmt.Sprintf(" read-only=%d", s.readOnly)
	}
	if len(s.notes) > 0 {
		line += " (" + strings.Join(s.notes, "; ") + ")"
	}
	return line
}

// report prints the summary line (and appends it to $RELOCK_CHAOS_SUMMARY, which CI prints).
func (s *summary) report(t *testing.T) {
	t.Helper()
	line := s.line()
	t.Log(line)
	if path := os.Getenv("RELOCK_CHAOS_SUMMARY"); path != "" {
		if f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintln(f, line)
			f.Close()
		}
	}
}
