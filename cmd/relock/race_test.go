//go:build race

package main

import "github.com/relock-go/relock/internal/testutil"

// Under the race detector, the tests run under the race detector, so the binary they run is built with it too.
// It would sleep a second before it exits, each run: RaceExitAtOnce.
func init() {
	buildFlags = append(buildFlags, "-race")
	testutil.RaceExitAtOnce()
}
