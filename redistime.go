package relock

import (
	"math"
	"time"
)

// maxMillis is the most milliseconds a Duration holds (about 292 years).
const maxMillis = math.MaxInt64 / int64(time.Millisecond)

// durationMillis is the Duration of ms milliseconds, as Redis reports times (PTTL, a script's reply, the
// difference between a score and Redis's clock): saturated at the Duration's bounds instead of wrapping
// around. Every millisecond count read from Redis becomes a Duration through it.
func durationMillis(ms int64) time.Duration {
	switch {
	case ms > maxMillis:
		return math.MaxInt64
	case ms < -maxMillis:
		return math.MinInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// millisUntil is how long from now (Redis's clock, Unix ms) until at (a sorted set's score, Unix ms),
// saturated as durationMillis is. A score may be any float, infinities included.
func millisUntil(at float64, now int64) time.Duration {
	d := at - float64(now)
	switch {
	case d >= float64(maxMillis): // also +Inf; the comparison also keeps the conversion below in range
		return math.MaxInt64
	case d <= -float64(maxMillis):
		return math.MinInt64
	case math.IsNaN(d):
		return 0
	}
	return durationMillis(int64(d))
}

// redissonNoExpiry is the expiry, in Unix ms, that Redisson's RPermitExpirableSemaphore gives a permit
// taken without a lease (Long.MAX_VALUE / 10000, in the year 31197): such a permit never expires, and only
// its release gives it back. permit_acquire.lua knows it too.
const redissonNoExpiry = 922337203685477
