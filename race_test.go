//go:build race

package relock_test

// raceEnabled reports whether the tests run with the race detector, under which sync.Pool drops items at
// random (rueidis pools its commands), so counts of allocations grow.
const raceEnabled = true
