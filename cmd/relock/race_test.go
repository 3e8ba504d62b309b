//go:build race

package main

// Under the race detector, the tests run under the race detector, so the binary they run is built with it too.
func init() { buildFlags = append(buildFlags, "-race") }
