package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/relock-go/relock/internal/redistest"
)

// demoMsg is a line a worker process writes on its stdout.
type demoMsg struct {
	Type  string     `json:"type"` // "ready", "progress", "result", "event" or "error"
	N     int64      `json:"n,omitempty"`
	Stats *demoStats `json:"stats,omitempty"`
	Error string     `json:"error,omitempty"`
	// Event is what a candidate did (--election), in an "event" message.
	Event *demoElectionEvent `json:"event,omitempty"`
}

// demoPhaseReq is a line the demo writes to a worker process's stdin: run a phase.
type demoPhaseReq struct {
	Locked   bool          `json:"locked"`
	Duration time.Duration `json:"duration"`
}

// procRunner runs workers in worker processes: this executable, run as "relock demo --child", each with a
// block of the workers. Each reads its demoConfig, then one demoPhaseReq per phase, as JSON lines on
// stdin, and answers with demoMsg lines on stdout. (With --election, a worker process is one candidate: it
// reads demoElectionCmd lines, and sends its events in demoMsg lines; see procCandidates.) A worker process whose stdin closes (the demo ended, or
// died) stops and exits, so none outlives the demo.
type procRunner struct {
	children []*demoChild
}

// demoChild is one worker process.
type demoChild struct {
	idx    int
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	msgs   chan demoMsg  // every message but progress; closed at EOF
	quit   chan struct{} // closed by close: the reader stops delivering
	read   sync.WaitGroup
	stderr redistest.OutputBuffer
	done   atomic.Int64 // increments so far in the current phase
}

// startProcRunner starts processes worker processes for workers workers and waits until they are
// connected.
func startProcRunner(ctx context.Context, cfg *demoConfig, workers, processes int) (*procRunner, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("--processes: cannot find this program to run it again: %w", err)
	}
	r := &procRunner{}
	for p := range processes {
		c := *cfg
		c.IDs = nil
		for id := p * workers / processes; id < (p+1)*workers/processes; id++ {
			c.IDs = append(c.IDs, id)
		}
		child, err := startDemoChild(ctx, exe, p, &c)
		if err != nil {
			r.close()
			return nil, err
		}
		r.children = append(r.children, child)
	}
	timeout := time.NewTimer(demoReadyTimeout)
	defer timeout.Stop()
	for _, c := range r.children {
		select {
		case m, ok := <-c.msgs:
			if ok && m.Type == "ready" {
				continue
			}
			r.close()
			return nil, c.failed(m, ok)
		case <-ctx.Done():
			r.close()
			return nil, ctx.Err()
		case <-timeout.C:
			r.close()
			return nil, fmt.Errorf("worker process %d did not start within %v", c.idx, demoReadyTimeout)
		}
	}
	return r, nil
}

func startDemoChild(ctx context.Context, exe string, idx int, cfg *demoConfig) (*demoChild, error) {
	c := &demoChild{idx: idx, msgs: make(chan demoMsg, 16), quit: make(chan struct{})}
	c.cmd = exec.CommandContext(ctx, exe, "demo", "--child")
	c.cmd.Cancel = func() error { return c.cmd.Process.Signal(os.Interrupt) }
	c.cmd.WaitDelay = demoCleanupLimit
	c.cmd.Stderr = &c.stderr
	stdin, err := c.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	c.stdin = stdin
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting worker process %d: %w", idx, err)
	}
	c.read.Go(func() {
		defer close(c.msgs)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64*1024), 256<<20)
		for sc.Scan() {
			var m demoMsg
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				m = demoMsg{Type: "error", Error: "unreadable message: " + sc.Text()}
			}
			if m.Type == "progress" {
				c.done.Store(m.N)
				continue
			}
			select {
			case c.msgs <- m:
			case <-c.quit:
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	})
	if err := c.send(cfg); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// send writes v to the worker process as a JSON line.
func (c *demoChild) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := c.stdin.Write(append(b, '\n')); err != nil {
		return c.failed(demoMsg{}, false)
	}
	return nil
}

// failed describes a worker process that sent m (ok) or nothing more (!ok).
func (c *demoChild) failed(m demoMsg, ok bool) error {
	if ok && m.Type == "error" {
		return fmt.Errorf("worker process %d: %s", c.idx, m.Error)
	}
	if ok {
		return fmt.Errorf("worker process %d: unexpected %q message", c.idx, m.Type)
	}
	msg := strings.TrimSpace(c.stderr.String())
	if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
		msg = msg[i+1:]
	}
	if msg == "" {
		msg = "no message"
	}
	return fmt.Errorf("worker process %d ended: %s", c.idx, msg)
}

// stop closes the worker process's stdin, which makes it exit, and waits for it; one that does not exit
// within demoCleanupLimit is killed.
func (c *demoChild) stop() {
	_ = c.stdin.Close()
	close(c.quit)
	exited := make(chan struct{})
	go func() {
		c.read.Wait()
		close(exited)
	}()
	select {
	case <-exited:
	case <-time.After(demoCleanupLimit):
		_ = c.cmd.Process.Kill()
		<-exited
	}
	_ = c.cmd.Wait()
}

func (r *procRunner) run(ctx context.Context, locked bool, d time.Duration) (demoStats, error) {
	for _, c := range r.children {
		c.done.Store(0)
		if err := c.send(demoPhaseReq{Locked: locked, Duration: d}); err != nil {
			return demoStats{}, err
		}
	}
	var total demoStats
	limit := time.NewTimer(d + demoReadyTimeout)
	defer limit.Stop()
	var errs []error
	for _, c := range r.children {
		select {
		case m, ok := <-c.msgs:
			if ok && m.Type == "result" && m.Stats != nil {
				total.add(*m.Stats)
				continue
			}
			errs = append(errs, c.failed(m, ok))
		case <-ctx.Done():
			return total, ctx.Err()
		case <-limit.C:
			return total, fmt.Errorf("worker process %d did not finish the phase in time", c.idx)
		}
	}
	return total, demoFirst(errs)
}

// demoFirst returns the first error of errs that is not nil.
func demoFirst(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *procRunner) progress() int64 {
	var n int64
	for _, c := range r.children {
		n += c.done.Load()
	}
	return n
}

func (r *procRunner) close() {
	var wg sync.WaitGroup
	for _, c := range r.children {
		wg.Go(c.stop)
	}
	wg.Wait()
	r.children = nil
}

// runDemoChild is a worker process (relock demo --child): see procRunner.
func runDemoChild(ctx context.Context, e env) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	send := func(m demoMsg) error {
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		_, err = e.stdout.Write(append(b, '\n'))
		return err
	}
	sc := bufio.NewScanner(e.stdin)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	if !sc.Scan() {
		return fmt.Errorf("%w: --child is for worker processes: it reads its configuration on stdin", errUsage)
	}
	var cfg demoConfig
	if err := json.Unmarshal(sc.Bytes(), &cfg); err != nil || len(cfg.Nodes) == 0 || len(cfg.IDs) == 0 {
		return fmt.Errorf("%w: --child: bad configuration on stdin", errUsage)
	}
	if cfg.Election {
		return runElectionChild(ctx, &cfg, sc, send)
	}
	r, err := newLocalRunner(ctx, &cfg)
	if err != nil {
		_ = send(demoMsg{Type: "error", Error: err.Error()})
		return err
	}
	defer r.close()
	if err := send(demoMsg{Type: "ready"}); err != nil {
		return err
	}
	reqs := make(chan demoPhaseReq)
	go func() { // stdin's EOF means the demo is done, or gone: stop
		defer cancel()
		defer close(reqs)
		for sc.Scan() {
			var req demoPhaseReq
			if json.Unmarshal(sc.Bytes(), &req) != nil || req.Duration <= 0 {
				continue
			}
			select {
			case reqs <- req:
			case <-ctx.Done():
				return
			}
		}
	}()
	for req := range reqs {
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					_ = send(demoMsg{Type: "progress", N: r.progress()})
				}
			}
		})
		stats, err := r.run(ctx, req.Locked, req.Duration)
		close(done)
		wg.Wait()
		if err != nil {
			if ctx.Err() == nil {
				_ = send(demoMsg{Type: "error", Error: err.Error()})
			}
			return err
		}
		if err := send(demoMsg{Type: "result", Stats: &stats}); err != nil {
			return err
		}
	}
	return nil
}
