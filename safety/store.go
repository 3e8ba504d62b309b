package safety

import (
	"context"
	"strconv"

	"github.com/redis/rueidis"
)

// The fenced store keeps the register in a hash: its value, the highest token it has seen, and counts of
// the writes it accepted and rejected. It stands for any store that can compare a number before it acts (a
// database row with a version column, an object store's conditional put).
//
// Its reads are fenced too: a read with a token registers it (the highest token becomes at least the
// read's). Fencing only the writes protects a register from a stale holder's write after a newer holder's
// write, but not a read-modify-write: a stale holder that reads, then writes after the newer holder read and
// before it wrote, has its write accepted, and the newer holder's write then overwrites it unseen (a lost
// update). With fenced reads, the stale holder's write is rejected once the newer holder has read.
var (
	fencedRead = rueidis.NewLuaScript(`
local max = tonumber(redis.call('hget', KEYS[1], 'max') or 0)
local token = tonumber(ARGV[1])
if token > max then
  redis.call('hset', KEYS[1], 'max', token)
end
return tonumber(redis.call('hget', KEYS[1], 'value') or 0)`)

	fencedWrite = rueidis.NewLuaScript(`
local max = tonumber(redis.call('hget', KEYS[1], 'max') or 0)
local token = tonumber(ARGV[1])
if token < max then
  redis.call('hincrby', KEYS[1], 'rejected', 1)
  return 0
end
redis.call('hset', KEYS[1], 'max', token, 'value', ARGV[2])
redis.call('hincrby', KEYS[1], 'accepted', 1)
return 1`)
)

// Fencing is what a store checks tokens on.
type Fencing int

const (
	Unfenced     Fencing = iota // a plain GET and SET of a string key
	FencedWrites                // writes only (the value is read with a plain HGET): a read-modify-write can lose an update
	Fenced                      // reads and writes (the scripts above)
)

// Store is the register a critical section reads and writes.
type Store struct {
	rdb     rueidis.Client
	key     string
	fencing Fencing
}

// NewStore returns the register key on rdb, with fencing.
func NewStore(rdb rueidis.Client, key string, fencing Fencing) *Store {
	return &Store{rdb: rdb, key: key, fencing: fencing}
}

// Read returns the register's value (0 when it was never written); a fenced read registers token.
func (s *Store) Read(ctx context.Context, token uint64) (int64, error) {
	var n int64
	var err error
	switch s.fencing {
	case Fenced:
		return fencedRead.Exec(ctx, s.rdb, []string{s.key}, []string{strconv.FormatUint(token, 10)}).AsInt64()
	case FencedWrites:
		n, err = s.rdb.Do(ctx, s.rdb.B().Hget().Key(s.key).Field("value").Build()).AsInt64()
	default:
		n, err = s.rdb.Do(ctx, s.rdb.B().Get().Key(s.key).Build()).AsInt64()
	}
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	return n, err
}

// Write writes v, and reports whether the store accepted it (a plain store always does).
func (s *Store) Write(ctx context.Context, token uint64, v int64) (bool, error) {
	if s.fencing != Unfenced {
		n, err := fencedWrite.Exec(ctx, s.rdb, []string{s.key}, []string{strconv.FormatUint(token, 10), strconv.FormatInt(v, 10)}).AsInt64()
		return n == 1, err
	}
	err := s.rdb.Do(ctx, s.rdb.B().Set().Key(s.key).Value(strconv.FormatInt(v, 10)).Build()).Error()
	return err == nil, err
}

// Counts returns the writes a fenced store accepted and rejected.
func (s *Store) Counts(ctx context.Context) (accepted, rejected int64, err error) {
	v, err := s.rdb.Do(ctx, s.rdb.B().Hmget().Key(s.key).Field("accepted", "rejected").Build()).ToArray()
	if err != nil {
		return 0, 0, err
	}
	accepted, _ = v[0].AsInt64()
	rejected, _ = v[1].AsInt64()
	return accepted, rejected, nil
}
