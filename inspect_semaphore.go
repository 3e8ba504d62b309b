package relock

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// ErrNotASemaphore means a call of a Semaphore, PermitSemaphore or CountDownLatch, or InspectSemaphore,
// found, at the name it was given, keys that no Semaphore, CountDownLatch or PermitSemaphore (relock's or
// Redisson's) writes: a counter key that is not a string holding a 64-bit integer (a lock's hash, say), or
// a permits key ("{name}:timeout") that is not a sorted set. The operations return it as a *KindError,
// which matches ErrWrongKind too and says what the key is; nothing is changed in Redis.
var ErrNotASemaphore = errors.New("relock: key is not a semaphore or latch")

// SemaphoreState is a snapshot of a Semaphore, CountDownLatch or PermitSemaphore, read from Redis in one
// atomic step by Client.InspectSemaphore.
//
// Redis cannot tell these objects apart in every case: a Semaphore and a CountDownLatch are both an
// integer string at their name (and so is any counter of an application), and a PermitSemaphore with no
// permit taken has no permits key, so it looks like a Semaphore. Who took a PermitSemaphore's permits is
// not in Redis either: only the Client that took a permit knows its owner (see PermitSemaphore.Held).
type SemaphoreState struct {
	// Name is the object's name, its counter's key.
	Name string
	// Exists reports whether the counter key exists. A latch's key is deleted when it opens; a semaphore's
	// exists from its first TrySetPermits or AddPermits on.
	Exists bool
	// Value is the counter: a semaphore's available permits (which AddPermits may have made negative), or
	// a latch's count. 0 when the key does not exist. A PermitSemaphore's expired permits are not in it
	// yet: they are given back at its next acquisition.
	Value int64
	// Expirable reports whether the permits key of a PermitSemaphore ("{name}:timeout") exists, that is,
	// whether the name is a PermitSemaphore with permits taken (expired or not).
	Expirable bool
	// PermitsTaken is the number of permits taken: the size of the permits key, expired permits included.
	PermitsTaken int
	// PermitsExpired is how many of the permits taken have expired: their holders stopped renewing them
	// (or their lease ran out), and the next acquisition, relock's or Redisson's, gives them back.
	PermitsExpired int
	// Permits lists the permits taken, soonest to expire first (the expired ones first, those that never
	// expire last), at most the first 1000.
	Permits []PermitInfo
}

// PermitInfo is one permit taken from a PermitSemaphore.
type PermitInfo struct {
	// ID is the permit's id in hex, as Permit.ID returns it: the member of the permits key, in hex.
	ID string
	// Expires is how long the permit lives, by the Redis server's clock, unless its holder's watchdog
	// renews it (every watchdog timeout/3; a leased permit is never renewed). NoExpiry means it never
	// expires: Redisson took it without a lease, and only its release gives it back. Otherwise zero or
	// less means it has expired: it counts as taken until the next acquisition gives it back. A permit
	// further away than a Duration reaches shows the largest Duration.
	Expires time.Duration
}

var scriptInspectSemaphore = loadScript("inspect_semaphore")

// InspectSemaphore reads the state of the Semaphore, CountDownLatch or PermitSemaphore called name from
// Redis: its counter and, for a PermitSemaphore, the permits taken with their expiry, in one atomic script
// that changes nothing (expired permits are reported, not given back). A name with no key gives a
// SemaphoreState with Exists and Expirable false, not an error. Keys of another layout give an error
// matching ErrNotASemaphore; a name that Client.Lock would refuse, ErrInvalidName; a closed Client,
// ErrClosed.
func (c *Client) InspectSemaphore(ctx context.Context, name string) (SemaphoreState, error) {
	st := SemaphoreState{Name: name}
	switch {
	case c.check() != nil:
		return st, wrapErrCtx(ctx, "inspectsemaphore", name, c.check())
	case !validName(name):
		return st, wrapErrCtx(ctx, "inspectsemaphore", name, ErrInvalidName)
	case ctx.Err() != nil:
		return st, wrapErrCtx(ctx, "inspectsemaphore", name, ctx.Err())
	}
	reply, err := c.run(ctx, scriptInspectSemaphore, []string{name, permitsKey(name)}, []string{strconv.Itoa(inspectQueueLimit)}).ToArray()
	if err != nil {
		return st, wrapErrCtx(ctx, "inspectsemaphore", name, err)
	}
	if err := st.decode(reply); err != nil {
		return SemaphoreState{Name: name}, wrapErrCtx(ctx, "inspectsemaphore", name, err)
	}
	return st, nil
}

// decode fills st from inspect_semaphore.lua's reply.
func (st *SemaphoreState) decode(reply []rueidis.RedisMessage) error {
	if len(reply) != 7 {
		return errUnexpectedReply
	}
	kind, err1 := reply[0].ToString()
	value, err2 := reply[1].ToString()
	permitsKind, err3 := reply[2].ToString()
	now, err4 := reply[3].AsInt64()
	taken, err5 := reply[4].AsInt64()
	expired, err6 := reply[5].AsInt64()
	permits, err7 := reply[6].AsStrSlice()
	if errors.Join(err1, err2, err3, err4, err5, err6, err7) != nil || len(permits)%2 != 0 {
		return errUnexpectedReply
	}
	switch kind {
	case "none":
	case "string":
		n, ok := parseRedisInt(value)
		if !ok {
			return fmt.Errorf("%w: the key holds %q, not an integer", ErrNotASemaphore, value)
		}
		st.Exists, st.Value = true, n
	default:
		return fmt.Errorf("%w: the key is a %s", ErrNotASemaphore, kind)
	}
	switch permitsKind {
	case "none":
		return nil
	case "zset":
	default:
		return fmt.Errorf("%w: its permits key %q is a %s, not a sorted set", ErrNotASemaphore, permitsKey(st.Name), permitsKind)
	}
	st.Expirable, st.PermitsTaken, st.PermitsExpired = true, int(taken), int(expired)
	st.Permits = make([]PermitInfo, 0, len(permits)/2)
	for i := 0; i < len(permits); i += 2 {
		expiry, err := strconv.ParseFloat(permits[i+1], 64)
		if err != nil {
			return errUnexpectedReply
		}
		expires := NoExpiry
		if expiry < redissonNoExpiry {
			expires = millisUntil(expiry, now)
		}
		st.Permits = append(st.Permits, PermitInfo{ID: hex.EncodeToString([]byte(permits[i])), Expires: expires})
	}
	return nil
}

// parseRedisInt parses s as Redis parses an integer value (INCRBY's rule): an optional "-", then decimal
// digits without leading zeros ("0" alone), within 64 bits.
func parseRedisInt(s string) (int64, bool) {
	digits := s
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if digits == "" || digits[0] < '0' || digits[0] > '9' || digits[0] == '0' && len(s) > 1 {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}
