package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/rueidis"
	"github.com/relock-go/relock"
	"golang.org/x/sync/errgroup"
)

func runList(ctx context.Context, e env) error {
	var c common
	fs := newFlags("list", "list [flags] [PATTERN]", e)
	c.register(fs, 30*time.Second)
	limit := fs.Int("limit", 1000, "show at most this many locks (0: no limit)")
	count := fs.Int64("scan-count", 1000, "the COUNT hint of each SCAN call")
	args, err := parse(fs, e.args)
	if err != nil {
		return err
	}
	pattern := "*"
	switch len(args) {
	case 0:
	case 1:
		pattern = args[0]
	default:
		return fmt.Errorf("%w: want at most one pattern, got %d arguments", errUsage, len(args))
	}
	if *limit < 0 || *count <= 0 {
		return fmt.Errorf("%w: --limit must not be negative, --scan-count must be positive", errUsage)
	}
	ctx, lc, rdb, done, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer done()

	names, err := scanHashes(ctx, rdb, pattern, *count)
	if err != nil {
		return redisError(c.redis, err)
	}
	states := make([]*relock.LockState, len(names))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for i, name := range names {
		g.Go(func() error {
			st, err := lc.Inspect(gctx, name)
			switch {
			case errors.Is(err, relock.ErrNotALock) || errors.Is(err, relock.ErrInvalidName):
				return nil // a hash of the application's, not a lock
			case err != nil:
				return err
			case st.Locked:
				states[i] = &st
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return lockError(&c, "", err)
	}
	var found []relock.LockState
	for _, st := range states {
		if st != nil {
			found = append(found, *st)
		}
	}
	more := 0
	if *limit > 0 && len(found) > *limit {
		more, found = len(found)-*limit, found[:*limit]
	}
	if c.json {
		out := []lockJSON{}
		for _, st := range found {
			out = append(out, toJSON(st))
		}
		return printJSON(e.stdout, out)
	}
	printList(e.stdout, found)
	if more > 0 {
		fmt.Fprintf(e.stdout, "... and %d more (raise --limit, or narrow the pattern)\n", more)
	}
	return nil
}

// scanHashes returns the names of the hashes matching pattern, sorted, asking every node of a cluster
// (a key seen on a master and its replica is listed once). It uses SCAN with a TYPE filter, never KEYS.
func scanHashes(ctx context.Context, rdb rueidis.Client, pattern string, count int64) ([]string, error) {
	seen := map[string]bool{}
	for _, node := range rdb.Nodes() {
		var cursor uint64
		for {
			entry, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(pattern).Count(count).Type("hash").Build()).AsScanEntry()
			if err != nil {
				return nil, err
			}
			for _, k := range entry.Elements {
				seen[k] = true
			}
			if cursor = entry.Cursor; cursor == 0 {
				break
			}
		}
	}
	names := make([]string, 0, len(seen))
	for k := range seen {
		names = append(names, k)
	}
	slices.Sort(names)
	return names, nil
}

// printList prints one line per lock.
func printList(w io.Writer, states []relock.LockState) {
	if len(states) == 0 {
		fmt.Fprintln(w, "no locks held")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tMODE\tHOLDERS\tTTL\tWAITING\tTOKEN")
	for _, st := range states {
		mode := st.Mode
		if mode == "" {
			mode = "-"
		}
		token := "-"
		if st.FencingToken > 0 {
			token = fmt.Sprint(st.FencingToken)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", st.Name, kindTitle(st.Kind), mode, holdersText(st.Holders), fmtTTL(st.TTL), st.QueueLen, token)
	}
	tw.Flush()
}

// holdersText is a short description of the holders, for one table cell.
func holdersText(hs []relock.Holder) string {
	if len(hs) != 1 {
		return fmt.Sprintf("%d owners", len(hs))
	}
	h := hs[0]
	s := h.Token
	if h.GoroutineOwner() {
		s = "goroutine " + s
	}
	if h.ClientID != "" {
		s += " @" + strings.SplitN(h.ClientID, "-", 2)[0]
	}
	if h.Count > 1 {
		s += fmt.Sprintf(" ×%d", h.Count)
	}
	return s
}
