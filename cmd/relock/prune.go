package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/rueidis"
	"golang.org/x/sync/errgroup"
)

// An election's stream of leaders ("relock_election:{name}") costs Redis about 4.5 KB from its first leader
// on (Redis gives a stream's first node 4 KB at once), and nothing in the library removes it: an election
// per tenant or per shard, given up, keeps its stream for good. prune deletes the streams of elections that
// nobody leads or campaigns in, whose last leader was elected long enough ago. It keeps their fencing
// counters ("redisson_lock_token:{name}"): a new leader's term stays above every old one, so a store that
// checks terms never takes a new leader for a stale one.

// pruneElectionScript deletes an election's stream of leaders if the election is idle, in one step, so that
// a candidate that campaigns meanwhile finds either the stream or no trace of the election, which it writes
// anew.
//
// KEYS[1]  the stream, "relock_election:{name}"
// KEYS[2]  the election's lock, name (a fair lock's hash)
// KEYS[3]  the other name the stream may belong to: "{name}" when KEYS[2] is name, and the other way
//
//	round (both have the same stream and companions; the same key twice when there is no other)
//
// KEYS[4]  the fair lock's queue, "redisson_lock_queue:{name}"
// KEYS[5]  relock's liveness of the queued candidates, "relock_lock_alive:{name}"
// ARGV[1]  how long ago, at least, the last leader must have been elected, in milliseconds
// ARGV[2]  "1" to only say what would be done
//
// Returns {code, id of the last entry or ""}: code 1 when deleted (or, with ARGV[2], when it would be), 0
// when someone leads (the lock is held), 2 when candidates are queued, 3 when the last leader was elected
// less than ARGV[1] ago, 4 when the key is no stream (nothing is done).
var pruneElectionScript = rueidis.NewLuaScript(`
if redis.call('type', KEYS[1])['ok'] ~= 'stream' then
  return {4, ''}
end
local last = redis.call('xrevrange', KEYS[1], '+', '-', 'count', 1)
local id = ''
if #last > 0 then
  id = last[1][1]
end
if redis.call('exists', KEYS[2], KEYS[3]) > 0 then
  return {0, id}
end
if redis.call('exists', KEYS[4], KEYS[5]) > 0 then
  return {2, id}
end
if id ~= '' then
  local t = redis.call('time')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local elected = tonumber(string.match(id, '^(%d+)'))
  if now - elected < tonumber(ARGV[1]) then
    return {3, id}
  end
end
if ARGV[2] ~= '1' then
  redis.call('del', KEYS[1])
end
return {1, id}
`)

// pruneJSON is one election in what `prune --json` prints.
type pruneJSON struct {
	Name string `json:"name"`
	// Outcome is "pruned" (or, with --dry-run, "would prune"), "led", "candidates" or "recent".
	Outcome string `json:"outcome"`
	// LastElectedAt is when its last leader was elected (RFC 3339, Redis's clock), if any.
	LastElectedAt string `json:"last_elected_at,omitempty"`
}

// pruneOutcomes are the words for pruneElectionScript's codes.
var pruneOutcomes = map[int64]string{0: "led", 1: "pruned", 2: "candidates", 3: "recent"}

func runPrune(ctx context.Context, e env) error {
	var c common
	fs := newFlags("prune", "prune [flags] [PATTERN]", e)
	c.register(fs, 60*time.Second)
	idle := 24 * time.Hour
	fs.Var(positiveDuration{&idle}, "idle", "prune only elections whose last leader was elected at least this `duration` ago")
	dry := fs.Bool("dry-run", false, "say what would be pruned, and prune nothing")
	count := fs.Int64("scan-count", 1000, "the COUNT hint of each SCAN call")
	args, err := parse(fs, e.args)
	if err != nil {
		return err
	}
	match := "relock_election:*"
	switch len(args) {
	case 0:
	case 1:
		match = electionStream(args[0])
	default:
		return fmt.Errorf("%w: want at most one pattern, got %d arguments", errUsage, len(args))
	}
	if *count <= 0 {
		return fmt.Errorf("%w: --scan-count must be positive", errUsage)
	}
	ctx, _, rdb, done, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	streams, err := scanKeys(ctx, rdb, match, "stream", *count)
	if err != nil {
		return redisError(c.redis, err)
	}
	results := make([]pruneJSON, len(streams))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for i, stream := range streams {
		g.Go(func() error {
			r, err := pruneElection(gctx, rdb, stream, idle, *dry)
			results[i] = r
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return redisError(c.redis, err)
	}
	var shown []pruneJSON
	for _, r := range results {
		if r.Outcome != "" {
			shown = append(shown, r)
		}
	}
	if c.json {
		if shown == nil {
			shown = []pruneJSON{}
		}
		return printJSON(e.stdout, shown)
	}
	printPruned(e.stdout, shown, idle, *dry)
	return nil
}

// pruneElection runs pruneElectionScript for the election whose stream of leaders is stream. It returns an
// empty Outcome for a key that is no election's stream.
func pruneElection(ctx context.Context, rdb rueidis.Client, stream string, idle time.Duration, dry bool) (pruneJSON, error) {
	name := strings.TrimPrefix(stream, "relock_election:")
	other := name // the name whose stream this is too: "x" and "{x}" share "relock_election:{x}"
	if inner, ok := strings.CutPrefix(name, "{"); ok && strings.HasSuffix(inner, "}") && !strings.ContainsAny(inner[:len(inner)-1], "{}") {
		name = inner[:len(inner)-1]
	}
	queue, alive := "redisson_lock_queue:"+other, "relock_lock_alive:"+other
	if !strings.Contains(other, "{") {
		queue, alive = "redisson_lock_queue:{"+other+"}", "relock_lock_alive:{"+other+"}"
	}
	flag := "0"
	if dry {
		flag = "1"
	}
	reply, err := pruneElectionScript.Exec(ctx, rdb, []string{stream, name, other, queue, alive},
		[]string{strconv.FormatInt(idle.Milliseconds(), 10), flag}).ToArray()
	if err != nil {
		return pruneJSON{}, err
	}
	if len(reply) != 2 {
		return pruneJSON{}, fmt.Errorf("prune %s: unexpected reply", stream)
	}
	code, _ := reply[0].AsInt64()
	id, _ := reply[1].ToString()
	r := pruneJSON{Name: name, Outcome: pruneOutcomes[code]}
	if code == 1 && dry {
		r.Outcome = "would prune"
	}
	if t := entryTime(id); !t.IsZero() {
		r.LastElectedAt = t.Format(time.RFC3339)
	}
	return r, nil
}

// printPruned prints one line per election found, then what was pruned.
func printPruned(w io.Writer, results []pruneJSON, idle time.Duration, dry bool) {
	if len(results) == 0 {
		fmt.Fprintln(w, "no elections found")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ELECTION\tLAST ELECTED\tOUTCOME")
	pruned := 0
	for _, r := range results {
		at := r.LastElectedAt
		if at == "" {
			at = "-"
		}
		outcome := r.Outcome
		switch outcome {
		case "pruned", "would prune":
			pruned++
		case "led":
			outcome = "kept: it has a leader"
		case "candidates":
			outcome = "kept: candidates are queued"
		case "recent":
			outcome = "kept: last leader elected less than --idle ago"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Name, at, outcome)
	}
	tw.Flush()
	verb := "pruned"
	if dry {
		verb = "would prune"
	}
	fmt.Fprintf(w, "%s %d of %d elections (idle over %v); their fencing counters are kept\n", verb, pruned, len(results), idle)
}
