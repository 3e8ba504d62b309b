package relock

import (
	"sync"
	"time"
)

// workers runs functions for a Client on goroutines it keeps between calls. A composite lock's fan-out
// makes one lock call per part at once; on fresh goroutines each call would grow a new stack to the depth
// of a lock call (through rueidis to the socket), and on a RedLock of 5 parts that stack growth was a
// fifth of the CPU time of Lock+Unlock. An idle worker waits workerIdle for its next function, then ends;
// idle workers end when the Client closes, and busy ones once their function returns.
type workers struct {
	c     *Client
	tasks chan func() // unbuffered: a send succeeds only when an idle worker is there to take it
	wg    sync.WaitGroup
}

// workerIdle is how long a worker waits for its next function before it ends.
const workerIdle = 10 * time.Second

func newWorkers(c *Client) *workers { return &workers{c: c, tasks: make(chan func())} }

// run runs fn on an idle worker, or on a new one. It returns false, without running fn, once the Client
// is closing.
func (w *workers) run(fn func()) bool {
	select {
	case w.tasks <- fn:
		return true
	default:
	}
	c := w.c
	c.bgMu.Lock() // orders wg.Add against Close, as for c.bg
	defer c.bgMu.Unlock()
	if c.closed.Load() {
		return false
	}
	w.wg.Add(1)
	go w.work(fn)
	return true
}

func (w *workers) work(fn func()) {
	defer w.wg.Done()
	fn()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		select {
		case fn := <-w.tasks:
			fn()
			idle.Reset(workerIdle)
		case <-idle.C:
			return
		case <-w.c.life.Done():
			return
		}
	}
}

// close waits, at most d, for the workers to end: they end when the Client's life does, a busy one once
// its function returns (Close calls this after closing its rueidis client, which ends any call in flight).
func (w *workers) close(d time.Duration) { waitAtMost(&w.wg, d) }
