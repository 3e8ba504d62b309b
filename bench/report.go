package main

import (
	"context"
	"errors"
	"fmt"
	"html"
	"log"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/relock-go/relock/internal/luasrc"
)

// report collects the sections and writes them as Markdown, with an SVG chart of scenarios 1 and 2.
type report struct {
	started  time.Time
	header   []string
	sections []section
	chart1   []bar // mean µs per Lock+Unlock
	chart2   []bar // pairs per second, 64 goroutines
	// curves of the contention scenario, against the number of Clients: Redis CPU per acquisition (ms),
	// and script runs per acquisition, one line per lock kind
	cpuCurves, runCurves []curve
}

// curve is one line of a chart against the number of Clients.
type curve struct {
	label  string
	points [][2]float64 // (Clients, value)
}

type section struct {
	title, note string
	head        []string
	rows        [][]string
	verdicts    []string
}

type bar struct {
	label string
	value float64
}

func (r *report) add(s section) {
	r.sections = append(r.sections, s)
	fmt.Println("done:", s.title)
}

// verdict states a target as met or missed, plainly.
func verdict(met bool, format string, args ...any) string {
	mark := "**met**"
	if !met {
		mark = "**missed**"
	}
	return mark + ": " + fmt.Sprintf(format, args...)
}

func (r *report) machine() {
	host, _ := os.Hostname()
	cpu := "unknown"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if name, ok := strings.CutPrefix(line, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
				break
			}
		}
	}
	mode := "full"
	switch {
	case *smoke:
		mode = "smoke (-smoke): every scenario run for 1/40 of its duration, the figures meaningless"
	case *quick:
		mode = "quick (-quick)"
	}
	r.header = []string{
		"Date: " + r.started.UTC().Format("2006-01-02 15:04 MST"),
		fmt.Sprintf("Machine: %s, %d CPUs (%s), %s/%s, %s", host, runtime.NumCPU(), cpu, runtime.GOOS, runtime.GOARCH, runtime.Version()),
		"Redis: " + redisVersion() + ", started on loopback by the benchmark, persistence off",
		"Command: `cd bench && go run . " + strings.Join(os.Args[1:], " ") + "` (mode: " + mode + ")",
		"Peers, each in its defaults and in its best documented configuration (\"best\"): rueidislock (rueidis " + moduleVersion("github.com/redis/rueidis") +
			"; defaults: KeyMajority 2, tracking without NOLOOP; best: KeyMajority 1 and NoLoopTracking, as its README recommends for one Redis ≥ 7.0.5), " +
			"go-redsync " + moduleVersion("github.com/go-redsync/redsync/v4") + " (go-redis v9 pool; defaults, 32 tries 50–250 ms apart, retried while waiting: its docs recommend no other configuration), " +
			"bsm/redislock " + moduleVersion("github.com/bsm/redislock") + " (go-redis v9; defaults: NoRetry, Obtain called again at once while waiting; best: ExponentialBackoff(16 ms, 64 ms), the 16 ms minimum its doc recommends, the 64 ms cap ours)",
		"Bounds: every lock and unlock call, relock's, the peers' and the floors' alike, runs in a goroutine under a context with a timeout of " + bound.String() + " (in the handoff, the run's end + 1 s); a call not done by then counts as hung and the run goes on, and one still running " + grace.String() + " after its context ended is abandoned (\"ignored cancellation\"). rueidis-based code (relock, rueidislock, the floors) honours that context; go-redis-based code (redsync, bsm/redislock) ignores it for its network I/O by default",
	}
}

func (r *report) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("# relock benchmarks\n\n")
	for _, h := range r.header {
		b.WriteString("- " + h + "\n")
	}
	b.WriteString("\nEvery figure compares measurements of one run: absolute times on a shared machine are noisy, ratios less so. " +
		"All libraries talk to the same redis-server(s), on the same machine as the benchmark.\n\n")
	b.WriteString("![Lock+Unlock latency and throughput](benchmarks.svg)\n\n")
	for _, s := range r.sections {
		b.WriteString("## " + s.title + "\n\n")
		if s.note != "" {
			b.WriteString(s.note + "\n\n")
		}
		b.WriteString("| " + strings.Join(s.head, " | ") + " |\n|")
		for range s.head {
			b.WriteString(" --- |")
		}
		b.WriteString("\n")
		for _, row := range s.rows {
			b.WriteString("| " + strings.Join(row, " | ") + " |\n")
		}
		b.WriteString("\n")
		for _, v := range s.verdicts {
			b.WriteString("- " + v + "\n")
		}
		if len(s.verdicts) > 0 {
			b.WriteString("\n")
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "benchmarks.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	if len(r.cpuCurves) > 0 {
		svg := lineCharts([]lineChart{
			{"Contention: Redis CPU per acquisition (ms) against the number of Clients (4 waiters each)", r.cpuCurves},
			{"Contention: script runs per acquisition against the number of Clients", r.runCurves},
		})
		if err := os.WriteFile(filepath.Join(dir, "contention.svg"), []byte(svg), 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "benchmarks.svg"), []byte(r.svg()), 0o644)
}

// lineChart is one chart of curves against the number of Clients.
type lineChart struct {
	title  string
	curves []curve
}

// lineCharts draws each chart as lines over a logarithmic axis of Clients, stacked.
func lineCharts(charts []lineChart) string {
	const width, plotH, left, right, top = 760, 220, 70, 150, 40
	colors := []string{"#2b7bb9", "#d9822b", "#5b9e4d", "#9b59b6", "#c0392b", "#7f8c8d"}
	var b strings.Builder
	height := len(charts) * (plotH + top + 50)
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	y0 := 0
	for _, ch := range charts {
		minX, maxX, maxY := math.Inf(1), 0.0, 0.0
		for _, c := range ch.curves {
			for _, p := range c.points {
				minX, maxX, maxY = min(minX, p[0]), max(maxX, p[0]), max(maxY, p[1])
			}
		}
		if maxY <= 0 || maxX <= minX {
			continue
		}
		maxY *= 1.1
		px := func(x float64) float64 {
			return left + (math.Log2(x)-math.Log2(minX))/(math.Log2(maxX)-math.Log2(minX))*(width-left-right)
		}
		py := func(v float64) float64 { return float64(y0+top+plotH) - v/maxY*plotH }
		fmt.Fprintf(&b, `<text x="10" y="%d" font-weight="bold">%s</text>`+"\n", y0+24, html.EscapeString(ch.title))
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`+"\n", left, y0+top+plotH, width-right, y0+top+plotH)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`+"\n", left, y0+top, left, y0+top+plotH)
		for i := 0; i <= 4; i++ { // the value axis
			v := maxY * float64(i) / 4
			fmt.Fprintf(&b, `<text x="%d" y="%.0f" text-anchor="end" fill="#666">%s</text>`+"\n", left-6, py(v)+4, strconv.FormatFloat(v, 'g', 3, 64))
		}
		for _, p := range ch.curves[0].points { // the Clients axis
			fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle" fill="#666">%s</text>`+"\n", px(p[0]), y0+top+plotH+16, strconv.FormatFloat(p[0], 'f', 0, 64))
		}
		var labels []float64 // the label heights used, so that two lines ending close apart stay readable
		for i, c := range ch.curves {
			color := colors[i%len(colors)]
			var pts []string
			for _, p := range c.points {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(p[0]), py(p[1])))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.Join(pts, " "))
			if n := len(c.points); n > 0 {
				last := c.points[n-1]
				ly := py(last[1]) + 4
				for slices.ContainsFunc(labels, func(u float64) bool { return math.Abs(u-ly) < 14 }) {
					ly += 14
				}
				labels = append(labels, ly)
				fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="%s">%s</text>`+"\n", px(last[0])+8, ly, color, html.EscapeString(c.label))
			}
		}
		y0 += plotH + top + 50
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// svg draws two horizontal bar charts: mean Lock+Unlock latency, and pairs per second at 64 goroutines.
func (r *report) svg() string {
	const width, rowH, labelW, barW = 760, 26, 150, 480
	var b strings.Builder
	height := 40 + (len(r.chart1)+len(r.chart2))*rowH + 90
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="13">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	y := 24
	chart := func(title, unit string, bars []bar, lowerIsBetter bool) {
		fmt.Fprintf(&b, `<text x="10" y="%d" font-weight="bold">%s</text>`+"\n", y, html.EscapeString(title))
		y += 12
		maxV := 0.0
		for _, x := range bars {
			maxV = max(maxV, x.value)
		}
		for _, x := range bars {
			w := int(x.value / maxV * barW)
			color := "#9aa5b1"
			if x.label == "relock" {
				color = "#2b7bb9"
			} else if strings.Contains(x.label, "PING") || strings.Contains(x.label, "raw") {
				color = "#c9ced4"
			}
			fmt.Fprintf(&b, `<text x="10" y="%d">%s</text>`, y+17, html.EscapeString(x.label))
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`, labelW, y+4, max(w, 1), rowH-8, color)
			fmt.Fprintf(&b, `<text x="%d" y="%d">%s %s</text>`+"\n", labelW+max(w, 1)+6, y+17, strconv.FormatFloat(x.value, 'f', 0, 64), unit)
			y += rowH
		}
		hint := "higher is better"
		if lowerIsBetter {
			hint = "lower is better"
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#666" font-size="11">%s</text>`+"\n", labelW, y+12, hint)
		y += 36
	}
	chart("Uncontended Lock+Unlock, mean", "µs", r.chart1, true)
	chart("64 goroutines on 64 keys, Lock+Unlock pairs per second", "/s", r.chart2, false)
	b.WriteString("</svg>\n")
	return b.String()
}

// moduleVersion reads a dependency's version from go.mod.
func moduleVersion(path string) string {
	b, err := os.ReadFile("go.mod")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == path {
			return f[1]
		}
	}
	return "?"
}

// rawScripts runs relock's own acquire and release scripts (read from ../lua) straight through rueidis,
// with the keys and arguments relock passes: the floor any library using them pays.
type rawScripts struct {
	rdb              rueidis.Client
	acquire, release *rueidis.Lua
}

func newRawScripts(rdb rueidis.Client) *rawScripts {
	load := func(name string) *rueidis.Lua {
		src, err := luasrc.Load(os.DirFS(filepath.Join("..", "lua")), name)
		if err != nil {
			log.Fatalf("reading relock's scripts (run from bench/): %v", err)
		}
		return rueidis.NewLuaScript(src)
	}
	return &rawScripts{rdb: rdb, acquire: load("rlock_acquire"), release: load("rlock_release")}
}

const rawField = "00000000-0000-0000-0000-000000000000:1"

func (r *rawScripts) acquire1(ctx context.Context, key string) error {
	// The lock, its undone attempts (none here), and the companions of other kinds it reads.
	keys := []string{key, "relock_undone:{" + key + "}", "redisson_lock_queue:{" + key + "}",
		"relock_rwlock_writers:{" + key + "}", "relock_election:{" + key + "}", "relock_lock_waiters:{" + key + "}"}
	got, err := r.acquire.Exec(ctx, r.rdb, keys, []string{"30000", rawField, "a1", "0", "30000"}).AsIntSlice()
	if err != nil {
		return err
	}
	if len(got) != 4 || got[0] != 1 { // a grant: {1, count, token, Redis's clock}
		return fmt.Errorf("raw acquire replied %v", got)
	}
	return nil
}

func (r *rawScripts) release1(ctx context.Context, key string) error {
	keys := []string{key, "redisson_lock__channel:{" + key + "}", "relock_release:{" + key + "}", "relock_undone:{" + key + "}",
		"relock_lock_waiters:{" + key + "}", "relock_lock_wake:{" + key + "}", "relock_release_void:{" + key + "}"}
	return r.release.Exec(ctx, r.rdb, keys, []string{rawField, "0", "", "!r1", "publish", "-1", "2000"}).Error()
}

// rawLocker runs the raw scripts as a locker, so that the floors are measured the way the libraries are
// (bounded: each call in a goroutine under a context with a timeout).
type rawLocker struct{ r *rawScripts }

func (l rawLocker) name() string { return "raw scripts" }
func (l rawLocker) lock(ctx context.Context, key string) (func() error, error) {
	if err := l.r.acquire1(ctx, key); err != nil {
		return nil, err
	}
	return func() error { return l.r.release1(context.WithoutCancel(ctx), key) }, nil
}
func (l rawLocker) close() {}

// rawFanout runs the raw scripts on every node at once, each on its own goroutine (lock, then unlock):
// the floor of a RedLock's Lock+Unlock through rueidis.
type rawFanout []*rawScripts

func (f rawFanout) name() string { return "raw scripts on every node" }
func (f rawFanout) lock(ctx context.Context, key string) (func() error, error) {
	if err := f.each(func(r *rawScripts) error { return r.acquire1(ctx, key) }); err != nil {
		return nil, err
	}
	return func() error {
		return f.each(func(r *rawScripts) error { return r.release1(context.WithoutCancel(ctx), key) })
	}, nil
}
func (f rawFanout) each(fn func(r *rawScripts) error) error {
	errs := make([]error, len(f))
	var wg sync.WaitGroup
	for i, r := range f {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(r)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
func (f rawFanout) close() {}

// pingLocker is the two-PINGs floor as a locker: one PING for the lock, one for the unlock.
type pingLocker struct{ rdb rueidis.Client }

func (l pingLocker) name() string { return "two PINGs" }
func (l pingLocker) lock(ctx context.Context, _ string) (func() error, error) {
	if err := l.rdb.Do(ctx, l.rdb.B().Ping().Build()).Error(); err != nil {
		return nil, err
	}
	return func() error { return l.rdb.Do(context.WithoutCancel(ctx), l.rdb.B().Ping().Build()).Error() }, nil
}
func (l pingLocker) close() {}

// minimalScripts is the least a reentrant lock on a Redis hash must run (../testdata/minimal), through
// rueidis: the acquisition takes the lock when it is free or the owner's (HINCRBY, PEXPIRE) and otherwise
// answers the holder's PTTL; the release decrements the owner's count and, at zero, deletes the lock and
// publishes the unlock message. relock's scripts do more (fencing, other kinds' names, undone attempts, named waiters,
// idempotent releases): this floor tells what that costs.
type minimalScripts struct {
	rdb              rueidis.Client
	acquire, release *rueidis.Lua
}

func newMinimalScripts(rdb rueidis.Client) *minimalScripts {
	load := func(name string) *rueidis.Lua {
		src, err := os.ReadFile(filepath.Join("..", "testdata", "minimal", name+".lua"))
		if err != nil {
			log.Fatalf("reading the minimal pair (run from bench/): %v", err)
		}
		return rueidis.NewLuaScript(string(src))
	}
	return &minimalScripts{rdb: rdb, acquire: load("acquire"), release: load("release")}
}

// minimalLocker runs the minimal pair as a locker, bounded like the libraries.
type minimalLocker struct{ m *minimalScripts }

const minimalName = "minimal pair"

func (l minimalLocker) name() string { return minimalName }
func (l minimalLocker) lock(ctx context.Context, key string) (func() error, error) {
	r := l.m.acquire.Exec(ctx, l.m.rdb, []string{key}, []string{"30000", rawField})
	if err := r.Error(); !rueidis.IsRedisNil(err) {
		if err == nil {
			err = fmt.Errorf("minimal acquire: %q is held", key)
		}
		return nil, err
	}
	return func() error {
		n, err := l.m.release.Exec(context.WithoutCancel(ctx), l.m.rdb, []string{key, "redisson_lock__channel:{" + key + "}"},
			[]string{rawField, "0", "30000"}).AsInt64()
		if err == nil && n != 1 {
			err = fmt.Errorf("minimal release replied %d", n)
		}
		return err
	}, nil
}
func (l minimalLocker) close() {}

// pipedMinimal is the minimal pair on a rueidis client that always pipelines, as relock.New's does.
type pipedMinimal struct{ minimalLocker }

const pipedMinimalName = "minimal pair, always pipelining"

func (pipedMinimal) name() string { return pipedMinimalName }

// waitingMinimal is the handoff floor: the minimal pair, and a wait for the release's unlock message on a
// subscription its handle holds for good (made before the first attempt on a key, on a connection of its
// own), or for the holder's TTL, whichever comes first. Each call is a new owner. It is the least a
// lock that waits without polling does between one owner's release and the next one's acquisition.
type waitingMinimal struct {
	m      *minimalScripts
	id     string
	owners atomic.Int64
	mu     sync.Mutex
	conn   rueidis.DedicatedClient
	heard  map[string]chan struct{} // per channel subscribed: signalled on each message
}

const waitingMinimalName = "minimal pair + pub/sub"

func newWaitingMinimal(addr, id string) *waitingMinimal {
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		log.Fatal(err)
	}
	l := &waitingMinimal{m: newMinimalScripts(rdb), id: id, heard: map[string]chan struct{}{}}
	l.conn, _ = rdb.Dedicate()
	l.conn.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: func(m rueidis.PubSubMessage) {
		l.mu.Lock()
		ch := l.heard[m.Channel]
		l.mu.Unlock()
		select {
		case ch <- struct{}{}:
		default:
		}
	}})
	return l
}

func (l *waitingMinimal) name() string { return waitingMinimalName }

func (l *waitingMinimal) lock(ctx context.Context, key string) (func() error, error) {
	channel := "redisson_lock__channel:{" + key + "}"
	l.mu.Lock()
	heard, ok := l.heard[channel]
	if !ok {
		heard = make(chan struct{}, 1)
		l.heard[channel] = heard
	}
	l.mu.Unlock()
	if !ok {
		if err := l.conn.Do(ctx, l.conn.B().Subscribe().Channel(channel).Build()).Error(); err != nil {
			return nil, err
		}
	}
	owner := fmt.Sprintf("%s:%d", l.id, l.owners.Add(1))
	for {
		r := l.m.acquire.Exec(ctx, l.m.rdb, []string{key}, []string{"30000", owner})
		ttl, err := r.AsInt64()
		if rueidis.IsRedisNil(err) {
			break
		}
		if err != nil {
			return nil, err
		}
		t := time.NewTimer(time.Duration(max(ttl, 1)) * time.Millisecond)
		select {
		case <-heard:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
		t.Stop()
	}
	return func() error {
		n, err := l.m.release.Exec(context.WithoutCancel(ctx), l.m.rdb, []string{key, channel}, []string{owner, "0", "30000"}).AsInt64()
		if err == nil && n != 1 {
			err = fmt.Errorf("minimal release replied %d", n)
		}
		return err
	}, nil
}

func (l *waitingMinimal) close() {
	l.conn.Close()
	l.m.rdb.Close()
}
