// Package explore drives every relock kind through randomized schedules drawn from a seed, on real
// redis-server processes behind fault proxies, and checks the history of each schedule for safety (never
// more owners than the kind allows, hold counts exact), liveness (a waiter gets what is free within a bound,
// every call returns by its deadline, a Resign ends leadership, an observer sees every leader) and
// cleanliness (nothing of the actors left in Redis beyond what the kind documents).
//
// The package is its tests (explore_test.go and the files beside it); docs/safety.md, "Liveness", says what
// is checked, with which bounds, and how to run it:
//
//	go test -race ./safety/explore/                         # the CI budget: about a minute, fresh seeds
//	go test -race ./safety/explore/ -run 'TestExplore/Semaphore' -explore 30m
//	go test -race ./safety/explore/ -run 'TestExplore/RLock' -seed 1234 -v    # replay one schedule
package explore
