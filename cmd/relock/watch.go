package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/relock-go/relock"
)

// watchEventJSON is one line of `watch --json` (newline-delimited JSON): the changes seen since the
// previous line, and the state after them. The first line has the event "initial".
type watchEventJSON struct {
	Time   time.Time `json:"time"`
	Events []string  `json:"events"`
	State  *lockJSON `json:"state,omitempty"`
	Error  string    `json:"error,omitempty"`
}

func runWatch(ctx context.Context, e env) error {
	var c common
	fs := newFlags("watch", "watch [flags] NAME", e)
	c.register(fs, 5*time.Second)
	interval := fs.Duration("interval", 100*time.Millisecond, "how often to read the lock's state; holds shorter than this may go unseen (the fencing token still counts them)")
	until := fs.Duration("for", 0, "stop after this `duration` (0: until interrupted)")
	name, err := parseName(fs, e.args)
	if err != nil {
		return err
	}
	if *interval <= 0 || *until < 0 {
		return fmt.Errorf("%w: --interval must be positive and --for not negative", errUsage)
	}
	if *until > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *until)
		defer cancel()
	}
	lc, _, closeAll, err := c.connect(ctx, nil)
	if err != nil {
		return err
	}
	defer closeAll()

	enc := json.NewEncoder(e.stdout)
	emit := func(events []string, st *relock.LockState, failure string) {
		now := time.Now()
		if c.json {
			ev := watchEventJSON{Time: now.UTC(), Events: events, Error: failure}
			if st != nil {
				j := toJSON(*st)
				ev.State = &j
			}
			_ = enc.Encode(ev)
			return
		}
		stamp := now.Format("15:04:05.000")
		if len(events) == 1 && events[0] == "initial" {
			fmt.Fprintf(e.stdout, "%s  watching lock %q every %s (Ctrl-C stops)\n", stamp, name, *interval)
			events = nil
		}
		if failure != "" {
			fmt.Fprintf(e.stdout, "%s  %s\n", stamp, failure)
			return
		}
		for _, ev := range events {
			fmt.Fprintf(e.stdout, "%s  %s\n", stamp, ev)
		}
		fmt.Fprintf(e.stdout, "%s  now: %s\n", stamp, summary(*st))
	}

	var prev *relock.LockState
	failing := ""
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for {
		pctx, cancel := c.withTimeout(ctx)
		st, err := lc.Inspect(pctx, name)
		cancel()
		switch {
		case ctxOver(ctx):
			return nil // interrupted, or --for ran out: a normal end
		case err != nil:
			// The first read must work (a wrong name or address is an error); later, Redis may come and go.
			if prev == nil {
				return lockError(&c, name, err)
			}
			if msg := lockError(&c, name, err).Error(); msg != failing {
				failing = msg
				emit(nil, nil, msg)
			}
		default:
			failing = ""
			if prev == nil {
				emit([]string{"initial"}, &st, "")
			} else if events := changes(*prev, st, *interval); len(events) > 0 {
				emit(events, &st, "")
			}
			prev = &st
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// changes describes what changed from a to b, ignoring the passing of time (TTLs going down, renewals).
// interval is how far apart the two readings are.
func changes(a, b relock.LockState, interval time.Duration) []string {
	var out []string
	after := map[string]bool{}
	for _, h := range b.Holders {
		after[h.Owner] = true
	}
	// Releases first, then what took their place.
	for _, h := range a.Holders {
		if after[h.Owner] {
			continue
		}
		ev := fmt.Sprintf("%s released by %s", holdWhat(h.Mode), ownerText(h.ClientID, h.Token))
		if h.TTL >= 0 && h.TTL <= 2*interval {
			ev = fmt.Sprintf("%s of %s ended: released, or expired (its TTL was %s)", holdWhat(h.Mode), ownerText(h.ClientID, h.Token), fmtTTL(h.TTL))
		}
		out = append(out, ev)
	}
	if a.Kind != b.Kind && b.Kind != relock.KindNone && a.Kind != relock.KindNone {
		out = append(out, fmt.Sprintf("kind: %s -> %s", kindTitle(a.Kind), kindTitle(b.Kind)))
	}
	if a.Mode != b.Mode && a.Mode != "" && b.Mode != "" {
		out = append(out, fmt.Sprintf("mode: %s -> %s", a.Mode, b.Mode))
	}
	before := map[string]relock.Holder{}
	for _, h := range a.Holders {
		before[h.Owner] = h
	}
	for _, h := range b.Holders {
		what := holdWhat(h.Mode)
		old, held := before[h.Owner]
		switch {
		case !held:
			out = append(out, fmt.Sprintf("%s acquired by %s (hold count %d, TTL %s)", what, ownerText(h.ClientID, h.Token), h.Count, fmtTTL(h.TTL)))
		case h.Count > old.Count:
			out = append(out, fmt.Sprintf("%s re-entered by %s (hold count %d -> %d)", what, ownerText(h.ClientID, h.Token), old.Count, h.Count))
		case h.Count < old.Count:
			out = append(out, fmt.Sprintf("%s partly released by %s (hold count %d -> %d)", what, ownerText(h.ClientID, h.Token), old.Count, h.Count))
		}
	}
	queued := func(s relock.LockState) []string {
		owners := make([]string, len(s.Queue))
		for i, w := range s.Queue {
			owners[i] = w.Owner
		}
		return owners
	}
	qa, qb := queued(a), queued(b)
	for _, w := range b.Queue {
		if !slices.Contains(qa, w.Owner) {
			out = append(out, fmt.Sprintf("%s joined the queue (position %d)", ownerText(w.ClientID, w.Token), slices.Index(qb, w.Owner)+1))
		}
	}
	for _, w := range a.Queue {
		if !slices.Contains(qb, w.Owner) {
			out = append(out, fmt.Sprintf("%s left the queue", ownerText(w.ClientID, w.Token)))
		}
	}
	if b.FencingToken != a.FencingToken {
		ev := fmt.Sprintf("fencing token %d -> %d", a.FencingToken, b.FencingToken)
		if n := b.FencingToken - a.FencingToken; b.FencingToken > a.FencingToken && n > 1 {
			ev += fmt.Sprintf(" (%d fenced acquisitions since the last reading)", n)
		}
		out = append(out, ev)
	}
	return out
}

func holdWhat(mode string) string {
	switch mode {
	case "read":
		return "read lock"
	case "write":
		return "write lock"
	}
	return "lock"
}
