// Package invariant switches on the assertions relock's lifecycles make after every transition (a hold, a
// settling, a gate waiter: see the library's holdstate.go, gatestate.go), and says what a violation does.
//
// They are off in production, where each costs one atomic load. Test binaries of this repository turn them
// on (Enable, from a TestMain or an init of a _test.go file), and so does any binary built with the tag
// relock_invariants (`go test -tags relock_invariants ./...` in a module that uses relock). A violation
// panics with its message, in the goroutine that made the illegal transition, unless a test installed a
// handler (SetHandler): a model test collects violations instead.
package invariant

import (
	"fmt"
	"sync/atomic"
)

var (
	on      atomic.Bool
	handler atomic.Pointer[func(msg string)]
)

// Enable turns the assertions on for the rest of the process.
func Enable() { on.Store(true) }

// On reports whether the assertions are on.
func On() bool { return on.Load() }

// SetHandler makes f, instead of a panic, receive every violation from now on, and returns the function
// that restores the previous handler. f must be safe to call from any goroutine.
func SetHandler(f func(msg string)) (restore func()) {
	prev := handler.Swap(&f)
	return func() { handler.Store(prev) }
}

// Failf reports a violation: the handler gets it, or the process panics.
func Failf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if f := handler.Load(); f != nil && *f != nil {
		(*f)(msg)
		return
	}
	panic("relock: invariant violated: " + msg)
}
