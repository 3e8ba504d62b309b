package tests

import (
	"context"
	"slices"
	"strconv"
	"sync"
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
