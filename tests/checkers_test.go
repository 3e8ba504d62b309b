package tests

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// fencedWrite is the storage side of fencing: it accepts a write only if its token is at least the highest
// token it has accepted (a holder writes many times with its own token), and counts what it accepts and
// rejects. It stands for any store that can compare a number before writing (a database row, an object
// store's conditional put).
const fencedWrite = `
local max = tonumber(redis.call('hget', KEYS[1], 'max') or 0)
local token = tonumber(ARGV[1])
if token < max then
  redis.call('hincrby', KEYS[1], 'rejected', 1)
  return 0
end
redis.call('hset', KEYS[1], 'max', token)
redis.call('hincrby', KEYS[1], 'accepted', 1)
return 1`

var fencedWriteScript = rueidis.NewLuaScript(fencedWrite)

// fencedStore is one fenced store in a Redis hash.
type fencedStore struct {
	rdb rueidis.Client
	key string
}

// write tries a write with token and reports whether the store accepted it.
func (s fencedStore) write(ctx context.Context, token uint64) (bool, error) {
	n, err := fencedWriteScript.Exec(ctx, s.rdb, []string{s.key}, []string{strconv.FormatUint(token, 10)}).AsInt64()
	return n == 1, err
}

// intervals checks that critical sections, timestamped on this process's monotonic clock, never overlap.
type intervals struct {
	mu    sync.Mutex
	spans [][2]time.Time
}

func (iv *intervals) add(start, end time.Time) {
	iv.mu.Lock()
	iv.spans = append(iv.spans, [2]time.Time{start, end})
	iv.mu.Unlock()
}

// overlaps counts sections that began before the previous one (in order of start) ended.
func (iv *intervals) overlaps() int64 {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	slices.SortFunc(iv.spans, func(a, b [2]time.Time) int { return a[0].Compare(b[0]) })
	var n int64
	var lastEnd time.Time
	for _, s := range iv.spans {
		if s[0].Before(lastEnd) {
			n++
		}
		if s[1].After(lastEnd) {
			lastEnd = s[1]
		}
	}
	return n
}

// counter is the lost-update checker: each critical section reads a number, sleeps, and writes it back
// plus one. Unless the lock excludes everyone else, updates are lost.
type counter struct {
	rdb rueidis.Client
	key string
}

func (c counter) increment(ctx context.Context, pause time.Duration) error {
	n, err := c.rdb.Do(ctx, c.rdb.B().Get().Key(c.key).Build()).AsInt64()
	if err != nil && !rueidis.IsRedisNil(err) {
		return err
	}
	time.Sleep(pause)
	return c.rdb.Do(ctx, c.rdb.B().Set().Key(c.key).Value(strconv.FormatInt(n+1, 10)).Build()).Error()
}

func (c counter) value(t testing.TB) int64 {
	n, err := c.rdb.Do(context.Background(), c.rdb.B().Get().Key(c.key).Build()).AsInt64()
	if err != nil && !rueidis.IsRedisNil(err) {
		t.Fatal(err)
	}
	return n
}

func TestCheckersCatchViolations(t *testing.T) {
	// The checkers must see what they are for: overlapping sections, a lower token after a higher one.
	var iv intervals
	now := time.Now()
	iv.add(now, now.Add(10*time.Millisecond))
	iv.add(now.Add(5*time.Millisecond), now.Add(20*time.Millisecond))
	iv.add(now.Add(30*time.Millisecond), now.Add(40*time.Millisecond))
	if n := iv.overlaps(); n != 1 {
		t.Fatalf("overlaps = %d, want 1", n)
	}
	// Of k permits: the third section open at once is one too many for 2, none for 3; touching ones do not
	// overlap.
	iv.add(now.Add(6*time.Millisecond), now.Add(8*time.Millisecond))
	iv.add(now.Add(40*time.Millisecond), now.Add(50*time.Millisecond))
	if n, most := iv.beyond(2); n != 1 || most != 3 {
		t.Fatalf("beyond(2) = %d, %d; want 1, 3", n, most)
	}
	if n, most := iv.beyond(3); n != 0 || most != 3 {
		t.Fatalf("beyond(3) = %d, %d; want 0, 3", n, most)
	}
	srv := server(t)
	store := fencedStore{rdb: rawClient(t, srv.Addr()), key: "store"}
	ctx := ctxTimeout(t, 5*time.Second)
	for _, c := range []struct {
		token uint64
		want  bool
	}{{1, true}, {1, true}, {3, true}, {2, false}, {3, true}} {
		if ok, err := store.write(ctx, c.token); ok != c.want || err != nil {
			t.Fatalf("write with token %d = %v, %v; want %v", c.token, ok, err, c.want)
		}
	}
}

// beyond counts the sections that began while k others were open (in order of start; a section that
// begins as another ends does not overlap it), and returns the most open at once: more than k holders of
// k permits.
func (iv *intervals) beyond(k int) (n int64, most int) {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	type event struct {
		at    time.Time
		delta int
	}
	events := make([]event, 0, 2*len(iv.spans))
	for _, s := range iv.spans {
		events = append(events, event{s[0], 1}, event{s[1], -1})
	}
	slices.SortFunc(events, func(a, b event) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // ends first
	})
	open := 0
	for _, e := range events {
		open += e.delta
		if e.delta > 0 && open > k {
			n++
		}
		most = max(most, open)
	}
	return n, most
}

// permitSample reads a semaphore's available permits and, for an expirable one, the permits taken, in one
// script run: no other script runs between the two reads (a pipeline of GET and ZCARD would let one in, and
// could show a permit moved between them as made up or lost). It returns {set, available, taken}, set being
// 0 when the counter is missing.
var permitSample = rueidis.NewLuaScript(`
local available = redis.call('get', KEYS[1])
local taken = 0
if KEYS[2] then
  taken = redis.call('zcard', KEYS[2])
end
if not available then
  return {0, 0, taken}
end
return {1, tonumber(available), taken}`)

// permitChecker samples a semaphore all along and counts the samples that break its invariant: for an
// expirable semaphore (a taken-permits key), available + taken == limit and 0 <= taken <= limit (no permit
// made up, none lost for good: an expired permit stays in the set until it is given back); for a plain one,
// 0 <= available <= limit.
type permitChecker struct {
	rdb   rueidis.Client
	keys  []string
	limit int64

	samples, bad, errs atomic.Int64
	mu                 sync.Mutex
	first              string // the first bad sample
	stop, done         chan struct{}
}

// checkPermits starts a checker of the semaphore name with limit permits; timeouts is its taken-permits key,
// "" for a plain semaphore. It samples every few milliseconds until finish.
func checkPermits(rdb rueidis.Client, name, timeouts string, limit int64) *permitChecker {
	c := &permitChecker{rdb: rdb, keys: []string{name}, limit: limit, stop: make(chan struct{}), done: make(chan struct{})}
	if timeouts != "" {
		c.keys = append(c.keys, timeouts)
	}
	go func() {
		defer close(c.done)
		for {
			select {
			case <-c.stop:
				return
			case <-time.After(3 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = c.sample(ctx)
			cancel()
		}
	}()
	return c
}

// sample takes one sample and checks it; it returns the read's error (the server restarting, say), which
// is not a violation.
func (c *permitChecker) sample(ctx context.Context) error {
	v, err := permitSample.Exec(ctx, c.rdb, c.keys, nil).AsIntSlice()
	if err == nil && len(v) != 3 {
		err = fmt.Errorf("sample: %v", v)
	}
	if err != nil {
		c.errs.Add(1)
		return err
	}
	c.samples.Add(1)
	set, available, taken := v[0] == 1, v[1], v[2]
	var wrong string
	switch {
	case !set:
		wrong = fmt.Sprintf("no counter (taken %d)", taken)
	case len(c.keys) == 1 && (available < 0 || available > c.limit):
		wrong = fmt.Sprintf("available %d of %d", available, c.limit)
	case len(c.keys) == 2 && (taken > c.limit || available+taken != c.limit):
		wrong = fmt.Sprintf("available %d + taken %d != %d", available, taken, c.limit)
	}
	if wrong != "" {
		if c.bad.Add(1) == 1 {
			c.mu.Lock()
			c.first = wrong
			c.mu.Unlock()
		}
	}
	return nil
}

// finish stops the checker and reports its samples, the bad ones, the first bad one, and failed reads.
func (c *permitChecker) finish() (samples, bad int64, first string, errs int64) {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.samples.Load(), c.bad.Load(), c.first, c.errs.Load()
}

// fencedLogWrite is the fenced store of the election scenario: like fencedWrite it accepts a write only if
// its term is at least the highest it has accepted, and it also appends every write it accepts, as
// "<term> <writer>", to a log (KEYS[2]), in the order it accepted them. The log is what the checker reads.
var fencedLogWrite = rueidis.NewLuaScript(`
local max = tonumber(redis.call('hget', KEYS[1], 'max') or 0)
local term = tonumber(ARGV[1])
if term < max then
  redis.call('hincrby', KEYS[1], 'rejected', 1)
  return 0
end
redis.call('hset', KEYS[1], 'max', ARGV[1])
redis.call('hincrby', KEYS[1], 'accepted', 1)
redis.call('rpush', KEYS[2], ARGV[1] .. ' ' .. ARGV[2])
return 1`)

// fencedLog is one fenced store with its log of accepted writes, in the hash key and the list key+":log".
type fencedLog struct {
	rdb rueidis.Client
	key string
}

// write tries a write by writer with term and reports whether the store accepted it.
func (s fencedLog) write(ctx context.Context, term uint64, writer string) (bool, error) {
	n, err := fencedLogWrite.Exec(ctx, s.rdb, []string{s.key, s.key + ":log"}, []string{strconv.FormatUint(term, 10), writer}).AsInt64()
	return n == 1, err
}

// max returns the highest term the store accepted (0: none yet).
func (s fencedLog) max(ctx context.Context) (uint64, error) {
	v, err := s.rdb.Do(ctx, s.rdb.B().Hget().Key(s.key).Field("max").Build()).AsUint64()
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	return v, err
}

// accepted returns the writes the store accepted, in the order it accepted them.
func (s fencedLog) accepted(ctx context.Context) ([]storeWrite, error) {
	entries, err := s.rdb.Do(ctx, s.rdb.B().Lrange().Key(s.key+":log").Start(0).Stop(-1).Build()).AsStrSlice()
	if err != nil {
		return nil, err
	}
	writes := make([]storeWrite, 0, len(entries))
	for _, e := range entries {
		var w storeWrite
		if _, err := fmt.Sscanf(e, "%d %s", &w.term, &w.writer); err != nil {
			return nil, fmt.Errorf("log entry %q: %w", e, err)
		}
		writes = append(writes, w)
	}
	return writes, nil
}

// storeWrite is a write a fenced store accepted: the writer's term, and the writer.
type storeWrite struct {
	term   uint64
	writer string
}

// leaderOf is a leader as an observer delivers it, and as the stream of leaders records it: its term and
// value (in the election scenario, the candidate's name).
type leaderOf struct {
	term  uint64
	value string
}

// checkFencedWrites checks a fenced store's accepted writes, in the order it accepted them, against the
// leaders the election recorded (nil: not checked). It returns what it finds wrong:
//   - a write accepted with a term below one accepted before it: the store took a write from a leader
//     after it took one from a later leader, so two leaders' terms were accepted "at once" (interleaved);
//   - one term accepted from two writers: two leaders held one term;
//   - a term accepted from a writer the election never recorded as that term's leader.
func checkFencedWrites(writes []storeWrite, leaders []leaderOf) []string {
	var wrong []string
	recorded := make(map[uint64]string, len(leaders))
	for _, l := range leaders {
		recorded[l.term] = l.value
	}
	writerOf := make(map[uint64]string)
	var highest storeWrite
	for i, w := range writes {
		if w.term < highest.term {
			wrong = append(wrong, fmt.Sprintf("write %d: term %d by %s accepted after term %d by %s", i, w.term, w.writer, highest.term, highest.writer))
		} else {
			highest = w
		}
		if prev, ok := writerOf[w.term]; !ok {
			writerOf[w.term] = w.writer
			if leaders != nil && recorded[w.term] != w.writer {
				wrong = append(wrong, fmt.Sprintf("write %d: term %d by %s, recorded as the leader of term %d: %q", i, w.term, w.writer, w.term, recorded[w.term]))
			}
		} else if prev != w.writer {
			wrong = append(wrong, fmt.Sprintf("write %d: term %d by %s, already written by %s", i, w.term, w.writer, prev))
		}
	}
	return wrong
}

// checkObserved checks observers' sequences of leaders against the sequence recorded (the stream of
// leaders, read when no candidate is left). The recorded terms must increase strictly. Every observer's
// sequence must be a run of consecutive recorded leaders (an observer starts with the last leader recorded
// when it starts, and may be stopped early); an observer in complete must have seen every leader up to the
// term through (0: to the end).
func checkObserved(recorded []leaderOf, seqs map[string][]leaderOf, complete map[string]uint64) []string {
	var wrong []string
	index := make(map[leaderOf]int, len(recorded))
	for i, l := range recorded {
		if i > 0 && l.term <= recorded[i-1].term {
			wrong = append(wrong, fmt.Sprintf("recorded leader %d: term %d after %d", i, l.term, recorded[i-1].term))
		}
		index[l] = i
	}
	names := slices.Sorted(maps.Keys(seqs))
	for _, name := range names {
		seq := seqs[name]
		if len(seq) == 0 {
			if _, ok := complete[name]; ok && len(recorded) > 0 {
				wrong = append(wrong, fmt.Sprintf("observer %s saw no leader", name))
			}
			continue
		}
		start, ok := index[seq[0]]
		if !ok {
			wrong = append(wrong, fmt.Sprintf("observer %s: first leader %+v was never recorded", name, seq[0]))
			continue
		}
		for i, l := range seq {
			if start+i >= len(recorded) || recorded[start+i] != l {
				var want any = "nothing more"
				if start+i < len(recorded) {
					want = recorded[start+i]
				}
				wrong = append(wrong, fmt.Sprintf("observer %s: leader %d is %+v, recorded %+v", name, i, l, want))
				break
			}
		}
		if through, ok := complete[name]; ok {
			if through == 0 && len(recorded) > 0 {
				through = recorded[len(recorded)-1].term
			}
			if last := seq[len(seq)-1]; last.term < through {
				wrong = append(wrong, fmt.Sprintf("observer %s: last leader %+v, want every one through term %d", name, last, through))
			}
		}
	}
	return wrong
}
