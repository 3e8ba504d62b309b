// Package stepclock runs an in-process Redis's key expiry (miniredis's) on the wall clock, the way Redis
// does: keys age in real time, and time stands still while a script runs.
//
// miniredis ages keys only when told to. With ClockTTL, every command first ages every key by the time
// its clock moved since the previous command; but that clock alone would be the wall clock read at each
// of a script's calls too, so a key could expire between two calls of one script, which Redis never does
// (a script sees one instant). stepclock keeps miniredis's clock still (SetTime) and moves it to the wall
// clock's time as each command arrives from a connection (Command, from miniredis's pre-hook), never while
// a script runs. It does not import miniredis, so that the library's module does not require it: the
// relocktest package and the relock command's in-process server use it.
package stepclock

import (
	"sync"
	"time"
)

// Server is what stepclock needs of the server: *miniredis.Miniredis has these methods (TryLock and
// Unlock are its lock's, under which it runs every command, a script and its calls as one).
type Server interface {
	TryLock() bool
	Unlock()
	SetTime(time.Time)
	ClockTTL(enabled bool)
}

// Clock drives a Server's clock.
type Clock struct {
	s   Server
	mu  sync.Mutex // orders Advance's steps
	now time.Time  // the time the server is at
}

// Start sets s's clock to now, makes its TTLs follow that clock (ClockTTL), and returns the Clock that
// moves it. Call it before s serves commands.
func Start(s Server) *Clock {
	c := &Clock{s: s}
	c.Advance()
	s.ClockTTL(true)
	return c
}

// Command moves the clock to now before a command runs: call it first thing in the server's pre-hook,
// which runs for the commands of connections and for the calls of scripts alike. A script's calls come
// from the goroutine that holds the server's lock (miniredis runs a script under it), so the lock being
// taken means the clock stays: either a script is running, or another connection's command is, and that
// command moved the clock as it arrived. Advance waits for the lock, so it never moves during a script.
func (c *Clock) Command() {
	if c.s.TryLock() {
		c.s.Unlock()
		c.Advance()
	}
}

// Advance moves the clock to the wall clock's time, never back: commands arriving together may read the
// time in another order than they set it, and a step back would make the server age keys twice. Call it
// before reading the server's keys other than by a command. It waits for a running script to end.
func (c *Clock) Advance() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := time.Now(); now.After(c.now) {
		c.now = now
		c.s.SetTime(now)
	}
}
