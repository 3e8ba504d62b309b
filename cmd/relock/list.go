package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/rueidis"
	"github.com/relock-go/relock"
	"golang.org/x/sync/errgroup"
)

// runList lists the held locks whose names match PATTERN (an election's with its leader and term), then the PermitSemaphores whose names match it
// and that have permits taken, and with --counters the integer strings matching it (see findSemaphores).
func runList(ctx context.Context, e env) error {
	var c common
	fs := newFlags("list", "list [flags] [PATTERN]", e)
	c.register(fs, 30*time.Second)
	limit := fs.Int("limit", 1000, "show at most this many locks, and this many semaphores (0: no limit)")
	count := fs.Int64("scan-count", 1000, "the COUNT hint of each SCAN call")
	counters := fs.Bool("counters", false, "also list the strings matching PATTERN that hold an integer, as semaphores or latches. "+
		"Off by default: a Semaphore, a CountDownLatch and an application's counter look the same in Redis, so this "+
		"lists every counter (permit semaphores with permits taken are listed without it)")
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

	names, err := scanKeys(ctx, rdb, pattern, "hash", *count)
	if err != nil {
		return redisError(c.redis, err)
	}
	states := make([]*relock.LockState, len(names))
	elections := make([]*electionState, len(names))
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
				if st.Kind == relock.KindRLock || st.Kind == relock.KindFairLock { // an election's lock is a fair lock
					elections[i], err = readElection(gctx, rdb, st, listLeaders)
				}
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return lockError(&c, "", err)
	}
	sems, err := findSemaphores(ctx, lc, rdb, pattern, *count, *counters)
	if err != nil {
		return lockError(&c, "", err)
	}
	var found []relock.LockState
	var foundElections []*electionState
	for i, st := range states {
		if st != nil {
			found = append(found, *st)
			foundElections = append(foundElections, elections[i])
		}
	}
	more, moreSems := 0, 0
	if *limit > 0 && len(found) > *limit {
		more, found, foundElections = len(found)-*limit, found[:*limit], foundElections[:*limit]
	}
	if *limit > 0 && len(sems) > *limit {
		moreSems, sems = len(sems)-*limit, sems[:*limit]
	}
	if c.json {
		out := []any{}
		for i, st := range found {
			out = append(out, withElection(toJSON(st), foundElections[i]))
		}
		for _, st := range sems {
			out = append(out, toSemaphoreJSON(st))
		}
		return printJSON(e.stdout, out)
	}
	if len(found) > 0 || len(sems) == 0 {
		printList(e.stdout, found, foundElections)
	}
	if more > 0 {
		fmt.Fprintf(e.stdout, "... and %d more (raise --limit, or narrow the pattern)\n", more)
	}
	if len(sems) > 0 {
		if len(found) > 0 {
			fmt.Fprintln(e.stdout)
		}
		printSemaphoreList(e.stdout, sems)
	}
	if moreSems > 0 {
		fmt.Fprintf(e.stdout, "... and %d more semaphores (raise --limit, or narrow the pattern)\n", moreSems)
	}
	return nil
}

// scanKeys returns the names of the keys of type typ matching pattern, sorted, asking every node of a
// cluster (a key seen on a master and its replica is listed once). It uses SCAN with a TYPE filter, never
// KEYS.
func scanKeys(ctx context.Context, rdb rueidis.Client, pattern, typ string, count int64) ([]string, error) {
	seen := map[string]bool{}
	for _, node := range rdb.Nodes() {
		var cursor uint64
		for {
			entry, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(pattern).Count(count).Type(typ).Build()).AsScanEntry()
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

// printList prints one line per lock; elections[i], when not nil, is the election states[i] is the lock of.
// An election's TOKEN is its leader's term.
func printList(w io.Writer, states []relock.LockState, elections []*electionState) {
	if len(states) == 0 {
		fmt.Fprintln(w, "no locks held")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tMODE\tHOLDERS\tTTL\tWAITING\tTOKEN")
	for i, st := range states {
		mode := st.Mode
		if mode == "" {
			mode = "-"
		}
		token := "-"
		if st.FencingToken > 0 {
			token = fmt.Sprint(st.FencingToken)
		}
		kind, holders := kindTitle(st.Kind), holdersText(st.Holders)
		if el := elections[i]; el != nil {
			kind, holders = "Election", leaderText(st, el)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", st.Name, kind, mode, holders, fmtTTL(st.TTL), waitingText(st), token)
	}
	tw.Flush()
}

// waitingText is the WAITING cell: the length of the queue the lock keeps in Redis (a FairLock's, an
// Election's, a ReadWriteLock's priority writers). An RLock's waiters, and a ReadWriteLock's without
// writer priority, wait in their own processes, in no queue Redis keeps: "-" says they are not counted,
// where 0 would say that nobody waits.
func waitingText(st relock.LockState) string {
	if st.QueueLen > 0 || st.Kind == relock.KindFairLock {
		return strconv.Itoa(st.QueueLen)
	}
	return "-"
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

// findSemaphores returns, sorted by name, the PermitSemaphores whose names match pattern and that have
// permits taken, and with counters, the other integer strings matching pattern (semaphores, latches, or
// an application's counters: they look the same).
//
// pattern applies to a semaphore's name, not to the key of its permits: those of a name without "{" are
// at "{name}:timeout", found with SCAN MATCH "{" + pattern + "}:timeout" (pattern then matches exactly
// the part between the braces, which is the name), and those of a name with "{" at name + ":timeout",
// found with SCAN MATCH pattern + ":timeout". "{x}:timeout" is both the permits key of "x" and of "{x}":
// the one whose count key exists is listed, "x" when both or neither do.
func findSemaphores(ctx context.Context, lc *relock.Client, rdb rueidis.Client, pattern string, count int64, counters bool) ([]relock.SemaphoreState, error) {
	var names []string
	keys, err := scanKeys(ctx, rdb, "{"+pattern+"}:timeout", "zset", count)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		name, ok := strings.CutPrefix(k, "{")
		if name, ok2 := strings.CutSuffix(name, "}:timeout"); ok && ok2 && !strings.ContainsAny(name, "{}") {
			names = append(names, name)
		}
	}
	if keys, err = scanKeys(ctx, rdb, pattern+":timeout", "zset", count); err != nil {
		return nil, err
	}
	for _, k := range keys {
		if name := strings.TrimSuffix(k, ":timeout"); strings.Contains(name, "{") {
			names = append(names, name)
		}
	}
	if counters {
		if keys, err = scanKeys(ctx, rdb, pattern, "string", count); err != nil {
			return nil, err
		}
		for _, k := range keys {
			if !strings.HasPrefix(k, "redisson_lock_token:") && !strings.Contains(k, ":rwlock_timeout:") {
				names = append(names, k) // not a lock's fencing counter nor a read-write lock's read hold
			}
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)

	states := make([]*relock.SemaphoreState, len(names))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for i, name := range names {
		g.Go(func() error {
			st, err := lc.InspectSemaphore(gctx, name)
			switch {
			case errors.Is(err, relock.ErrNotASemaphore) || errors.Is(err, relock.ErrInvalidName):
				return nil // a key of the application's
			case err != nil:
				return err
			case st.Expirable || st.Exists && counters:
				states[i] = &st
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	// One entry per permits key (see above).
	byKey := map[string]int{}
	var found []relock.SemaphoreState
	for _, st := range states {
		if st == nil {
			continue
		}
		if !st.Expirable {
			found = append(found, *st)
			continue
		}
		k := permitsKeyOf(st.Name)
		if i, seen := byKey[k]; seen {
			if other := found[i]; !other.Exists && st.Exists || other.Exists == st.Exists && !strings.Contains(st.Name, "{") {
				found[i] = *st
			}
			continue
		}
		byKey[k] = len(found)
		found = append(found, *st)
	}
	slices.SortFunc(found, func(a, b relock.SemaphoreState) int { return strings.Compare(a.Name, b.Name) })
	return found, nil
}

// permitsKeyOf returns the key of the permits taken from the PermitSemaphore called name (Redisson's
// suffixName, as relock.PermitSemaphore does).
func permitsKeyOf(name string) string {
	if strings.Contains(name, "{") {
		return name + ":timeout"
	}
	return "{" + name + "}:timeout"
}

// printSemaphoreList prints one line per semaphore or latch.
func printSemaphoreList(w io.Writer, states []relock.SemaphoreState) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tAVAILABLE\tTAKEN\tEXPIRED")
	counters := false
	for _, st := range states {
		taken, expired := "-", "-"
		if st.Expirable {
			taken, expired = fmt.Sprint(st.PermitsTaken), fmt.Sprint(st.PermitsExpired)
		} else {
			counters = true
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", st.Name, semaphoreTitle(st, false), st.Value, taken, expired)
	}
	tw.Flush()
	if counters {
		fmt.Fprintln(w, "(a latch's AVAILABLE is its count)")
	}
}
