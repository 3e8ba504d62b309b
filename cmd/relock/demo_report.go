package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// demoReport is what relock demo --json prints: one JSON object. Its field names are stable; durations are
// milliseconds (fractional).
//
//	lock           "rlock", "fair", "rw" or "redlock"
//	server         {"mode": "redis-server" | "inprocess" | "external", "addrs": [...], "version": "7.0.15"}
//	               (addrs: one per RedLock master; version: "" when the server does not say)
//	workers        how many workers raced (rw: the even-numbered ones write, the others read)
//	processes      how many OS processes ran them (0: goroutines of the demo's own process)
//	duration_ms    how long each of the two counter phases ran
//	pause_ms       each worker's pause between its GET and its SET of the counter
//	without_lock   the phase without a lock: see demoPhaseJSON
//	with_lock      the same work under the lock: see demoPhaseJSON
//	handoff        null, or how long the lock took to pass from one worker to another: from a worker's
//	               Unlock call to the next (different) worker's acquisition, in with_lock (rw: writers)
//	               {"count", "p50_ms", "p99_ms", "max_ms"}
//	fencing        null (RedLock has no fencing token), or the fencing tokens of with_lock's holds, in
//	               the order of the holds: {"holds", "first", "last", "increasing"}
//	watchdog       null (--watchdog 0), or the long-hold phase: see demoWatchdogJSON
//	ok             true when nothing went wrong under the lock: no lost update, no torn read, fencing
//	               tokens increasing, nobody else got in during the long hold
//	problems       what went wrong under the lock, [] when ok
type demoReport struct {
	Lock        string            `json:"lock"`
	Server      demoServerJSON    `json:"server"`
	Workers     int               `json:"workers"`
	Processes   int               `json:"processes"`
	DurationMS  float64           `json:"duration_ms"`
	PauseMS     float64           `json:"pause_ms"`
	WithoutLock demoPhaseJSON     `json:"without_lock"`
	WithLock    demoPhaseJSON     `json:"with_lock"`
	Handoff     *demoHandoffJSON  `json:"handoff"`
	Fencing     *demoFencingJSON  `json:"fencing"`
	Watchdog    *demoWatchdogJSON `json:"watchdog"`
	OK          bool              `json:"ok"`
	Problems    []string          `json:"problems"`
}

// demoServerJSON is the "server" of demoReport.
type demoServerJSON struct {
	Mode    string   `json:"mode"`
	Addrs   []string `json:"addrs"`
	Version string   `json:"version"`
}

// demoPhaseJSON is one counter phase of demoReport.
//
//	expected               increments the writers made (each read the counter and wrote it back plus one)
//	counted                the counter's value at the end
//	lost                   expected - counted: increments overwritten by a concurrent writer
//	reads, torn_reads      rw only: the readers' reads, and those that saw a half-done update (the counter
//	                       and its mirror key different)
//	elapsed_ms             how long the phase took
//	increments_per_second  expected / elapsed
type demoPhaseJSON struct {
	Expected  int64   `json:"expected"`
	Counted   int64   `json:"counted"`
	Lost      int64   `json:"lost"`
	Reads     int64   `json:"reads"`
	TornReads int64   `json:"torn_reads"`
	ElapsedMS float64 `json:"elapsed_ms"`
	PerSecond float64 `json:"increments_per_second"`
}

// demoHandoffJSON is the "handoff" of demoReport.
type demoHandoffJSON struct {
	Count int     `json:"count"`
	P50MS float64 `json:"p50_ms"`
	P99MS float64 `json:"p99_ms"`
	MaxMS float64 `json:"max_ms"`
}

// demoFencingJSON is the "fencing" of demoReport.
type demoFencingJSON struct {
	Holds      int    `json:"holds"`
	First      uint64 `json:"first"`
	Last       uint64 `json:"last"`
	Increasing bool   `json:"increasing"`
}

// demoWatchdogJSON is the long-hold phase: a holder keeps the lock, without a lease, for held_ms (2.5
// watchdog timeouts) while a contender on another Client waits for it; the lock's PTTL is sampled
// meanwhile (on the first master, for a RedLock; min_pttl_ms is over all of them).
//
//	timeout_ms                 the watchdog timeout (--watchdog)
//	held_ms                    how long the holder held the lock
//	samples                    PTTL samples taken while it was held
//	renewals                   how many times the PTTL went back up: the watchdog's renewals
//	min_pttl_ms                the lowest PTTL seen while held (-1: no sample; a key gone shows as -2)
//	lost                       the holder's HoldContext said the lock was lost
//	contender_acquired         the contender got the lock (after the holder's Unlock, or before: other_got_in)
//	other_got_in               the contender acquired the lock before the holder's Unlock
//	contender_waited_ms        from the contender's Lock call to its acquisition
//	contender_after_unlock_ms  from the holder's Unlock call to the contender's acquisition
//	token_holder, token_contender  their fencing tokens (0 without fencing)
type demoWatchdogJSON struct {
	TimeoutMS         float64 `json:"timeout_ms"`
	HeldMS            float64 `json:"held_ms"`
	Samples           int     `json:"samples"`
	Renewals          int     `json:"renewals"`
	MinPTTLMS         float64 `json:"min_pttl_ms"`
	Lost              bool    `json:"lost"`
	OtherGotIn        bool    `json:"other_got_in"`
	ContenderWaitedMS float64 `json:"contender_waited_ms"`
	ContenderAfterMS  float64 `json:"contender_after_unlock_ms"`
	TokenHolder       uint64  `json:"token_holder"`
	TokenContender    uint64  `json:"token_contender"`
	ContenderAcquired bool    `json:"contender_acquired"`
}

// judge decides whether the lock did its job, and why not.
func (d *demo) judge() {
	r := &d.report
	if r.WithLock.Lost != 0 {
		r.Problems = append(r.Problems, fmt.Sprintf("%d updates lost (%d increments, counter %d)",
			r.WithLock.Lost, r.WithLock.Expected, r.WithLock.Counted))
	}
	if r.WithLock.TornReads != 0 {
		r.Problems = append(r.Problems, fmt.Sprintf("%d reads saw a half-done update", r.WithLock.TornReads))
	}
	if r.Fencing != nil && !r.Fencing.Increasing {
		r.Problems = append(r.Problems, "fencing tokens did not increase from hold to hold")
	}
	if w := r.Watchdog; w != nil {
		switch {
		case w.OtherGotIn && w.Lost:
			r.Problems = append(r.Problems, "the long hold was lost (its process stalled past the watchdog timeout?) and another worker got in")
		case w.OtherGotIn:
			r.Problems = append(r.Problems, "another worker got in during the long hold")
		case w.Lost:
			r.Problems = append(r.Problems, "the long hold was lost (its process stalled past the watchdog timeout?)")
		}
	}
	r.OK = len(r.Problems) == 0
}

// demoHandoffs measures, over holds sorted in counter order, the time from a holder's Unlock call to the next
// holder's acquisition when the next holder is another worker.
func demoHandoffs(holds []demoHold) *demoHandoffJSON {
	var ds []float64
	for i := 1; i < len(holds); i++ {
		a, b := holds[i-1], holds[i]
		if b.Seq != a.Seq+1 || b.Worker == a.Worker {
			continue
		}
		ds = append(ds, demoMillis(time.Duration(max(b.Acquired-a.Released, 0))))
	}
	if len(ds) == 0 {
		return nil
	}
	slices.Sort(ds)
	rank := func(p float64) float64 { return ds[max(int(math.Ceil(p*float64(len(ds))))-1, 0)] }
	return &demoHandoffJSON{Count: len(ds), P50MS: rank(0.50), P99MS: rank(0.99), MaxMS: ds[len(ds)-1]}
}

// demoFencing checks the holds' fencing tokens increase in counter order. holds must be sorted.
func demoFencing(holds []demoHold) *demoFencingJSON {
	if len(holds) == 0 {
		return nil
	}
	f := &demoFencingJSON{Holds: len(holds), First: holds[0].Token, Last: holds[len(holds)-1].Token, Increasing: true}
	for i := 1; i < len(holds); i++ {
		if holds[i].Token <= holds[i-1].Token {
			f.Increasing = false
		}
	}
	return f
}

// lockTitle names the lock in sentences.
func (d *demo) lockTitle() string {
	switch d.cfg.Lock {
	case demoFair:
		return "a FairLock (fenced)"
	case demoRW:
		return "a ReadWriteLock (writers: its write lock, fenced, with writer priority; readers: its read lock)"
	case demoRedLock:
		return "a RedLock over 3 masters"
	}
	return "an RLock (fenced)"
}

// header prints what the demo is about to do.
func (d *demo) header(note string) {
	f := d.flags
	how := "goroutines of this process, each with its own Client"
	if f.processes > 0 {
		how = fmt.Sprintf("spread over %d worker processes", f.processes)
	}
	d.say("relock demo: %d workers (%s) race on one counter in Redis.\n", f.workers, how)
	if f.lock == demoRW {
		d.say("With --lock rw, workers 0, 2, 4... write (increment) and the others read.\n")
	}
	d.serverLine(note)
	d.say("Lock: %q. Ctrl-C stops the demo.\n", d.cfg.Name)
}

// serverLine prints which Redis the demo uses, and note when there is one.
func (d *demo) serverLine(note string) {
	where := strings.Join(d.cfg.Nodes, ", ")
	switch d.report.Server.Mode {
	case embedRedisServer:
		d.say("Redis: redis-server %s, started by the demo as a child process, at %s (--redis ADDR to use yours).\n", d.report.Server.Version, where)
	case embedInProcess:
		d.say("Redis: an in-process server (miniredis), no redis-server on PATH, at %s (--redis ADDR to use yours).\n", where)
	default:
		d.say("Redis: %s", where)
		if v := d.report.Server.Version; v != "" {
			d.say(" (Redis %s)", v)
		}
		d.say(".\n")
	}
	if note != "" {
		d.say("Note: %s.\n", note)
	}
}

// summary prints the results.
func (d *demo) summary() {
	r := &d.report
	w := d.e.stdout
	fmt.Fprintln(w, "\nResults")
	wo := r.WithoutLock
	fmt.Fprintf(w, "  without a lock:  %s increments, counter %s: %s updates lost (%s)\n",
		demoNum(wo.Expected), demoNum(wo.Counted), demoNum(wo.Lost), demoPercent(wo.Lost, wo.Expected))
	wl := r.WithLock
	verdict := "none lost"
	if wl.Lost != 0 {
		verdict = fmt.Sprintf("%s LOST", demoNum(wl.Lost))
	}
	fmt.Fprintf(w, "  with the lock:   %s increments, counter %s: %s (%s increments/s)\n",
		demoNum(wl.Expected), demoNum(wl.Counted), verdict, demoNum(int64(wl.PerSecond)))
	if d.cfg.Lock == demoRW {
		fmt.Fprintf(w, "  readers:         %s of %s reads saw a half-done update without the lock, %s of %s with it\n",
			demoNum(wo.TornReads), demoNum(wo.Reads), demoNum(wl.TornReads), demoNum(wl.Reads))
	}
	if h := r.Handoff; h != nil {
		fmt.Fprintf(w, "  handoff:         p50 %s, p99 %s, max %s from a worker's Unlock to the next worker's acquisition (%s handoffs)\n",
			demoMS(h.P50MS), demoMS(h.P99MS), demoMS(h.MaxMS), demoNum(int64(h.Count)))
	}
	switch fe := r.Fencing; {
	case fe != nil && fe.Increasing:
		fmt.Fprintf(w, "  fencing:         tokens %s to %s over %s holds, always increasing: a store that rejects old tokens stops a stale holder\n",
			demoNum(int64(fe.First)), demoNum(int64(fe.Last)), demoNum(int64(fe.Holds)))
	case fe != nil:
		fmt.Fprintf(w, "  fencing:         tokens %s to %s over %s holds, NOT always increasing\n",
			demoNum(int64(fe.First)), demoNum(int64(fe.Last)), demoNum(int64(fe.Holds)))
	case d.cfg.Lock == demoRedLock:
		fmt.Fprintln(w, "  fencing:         none: a RedLock has no fencing token (see relock.RedLock)")
	}
	if wd := r.Watchdog; wd != nil {
		fmt.Fprintf(w, "  watchdog:        held %s with a %s watchdog timeout and no lease: renewed %d times, PTTL never below %s\n",
			demoMS(wd.HeldMS), demoMS(wd.TimeoutMS), wd.Renewals, demoMS(wd.MinPTTLMS))
		switch {
		case wd.OtherGotIn:
			fmt.Fprintf(w, "                   the other worker got in %s BEFORE the Unlock\n", demoMS(-wd.ContenderAfterMS))
		case wd.ContenderAcquired:
			tokens := ""
			if wd.TokenContender > 0 {
				tokens = fmt.Sprintf(" (token %s after %s)", demoNum(int64(wd.TokenContender)), demoNum(int64(wd.TokenHolder)))
			}
			fmt.Fprintf(w, "                   the other worker waited %s and got in %s after the Unlock%s, never before\n",
				demoMS(wd.ContenderWaitedMS), demoMS(wd.ContenderAfterMS), tokens)
		}
	}
	if r.OK {
		fmt.Fprintln(w, "\nOK: the lock lost no update.")
	}
}

// live shows a phase's progress until the returned stop is called: on a terminal one line, rewritten in
// place every 100 ms; otherwise a line every second; with --json nothing.
func (d *demo) live(ctx context.Context, status func() string) (stop func()) {
	if d.flags.json {
		return func() {}
	}
	every := time.Second
	if d.tty {
		every = 100 * time.Millisecond
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				d.progressLine(status())
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// progressLine prints a progress line: in place on a terminal.
func (d *demo) progressLine(s string) {
	if !d.tty {
		fmt.Fprintf(d.e.stdout, "      %s\n", s)
		return
	}
	pad := max(d.line-len(s), 0)
	fmt.Fprintf(d.e.stdout, "\r      %s%s", s, strings.Repeat(" ", pad))
	d.line = len(s)
}

// final prints a phase's last line, in place of the live one on a terminal.
func (d *demo) final(s string) {
	if d.flags.json {
		return
	}
	d.progressLine(s)
	d.endLine()
}

// endLine ends the live line on a terminal.
func (d *demo) endLine() {
	if d.tty && d.line > 0 && !d.flags.json {
		fmt.Fprintln(d.e.stdout)
	}
	d.line = 0
}

// say prints text for people (not with --json).
func (d *demo) say(format string, args ...any) {
	if !d.flags.json {
		fmt.Fprintf(d.e.stdout, format, args...)
	}
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// demoMillis converts d to fractional milliseconds, to 3 decimals.
func demoMillis(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)) / 1000
}

// demoMS formats a number of milliseconds for people.
func demoMS(v float64) string {
	switch {
	case v >= 1000:
		return strconv.FormatFloat(v/1000, 'f', 2, 64) + "s"
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 0, 64) + "ms"
	}
	return strconv.FormatFloat(v, 'f', 2, 64) + "ms"
}

// demoNum formats n with thousands separators.
func demoNum(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// demoPercent formats part/whole as a percentage.
func demoPercent(part, whole int64) string {
	if whole == 0 {
		return "0%"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(part)/float64(whole))
}
