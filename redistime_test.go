package relock

import (
	"math"
	"testing"
	"time"
)

// Millisecond counts from Redis saturate at a Duration's bounds instead of wrapping around.
func TestDurationMillisSaturates(t *testing.T) {
	for _, tc := range []struct {
		ms   int64
		want time.Duration
	}{
		{0, 0}, {-1, -time.Millisecond}, {1500, 1500 * time.Millisecond},
		{maxMillis, time.Duration(maxMillis) * time.Millisecond}, {maxMillis + 1, math.MaxInt64},
		{922337203685477 - 1_700_000_000_000, math.MaxInt64}, {math.MaxInt64, math.MaxInt64},
		{-maxMillis - 1, math.MinInt64}, {math.MinInt64, math.MinInt64},
	} {
		if got := durationMillis(tc.ms); got != tc.want {
			t.Errorf("durationMillis(%d) = %v, want %v", tc.ms, got, tc.want)
		}
	}
	const now = 1_700_000_000_000
	for _, tc := range []struct {
		at   float64
		want time.Duration
	}{
		{now + 2500, 2500 * time.Millisecond}, {now - 2500, -2500 * time.Millisecond}, {1000, -(now - 1000) * time.Millisecond},
		{redissonNoExpiry, math.MaxInt64}, {1e300, math.MaxInt64}, {math.Inf(1), math.MaxInt64},
		{-1e300, math.MinInt64}, {math.Inf(-1), math.MinInt64},
	} {
		if got := millisUntil(tc.at, now); got != tc.want {
			t.Errorf("millisUntil(%v, now) = %v, want %v", tc.at, got, tc.want)
		}
	}
}
