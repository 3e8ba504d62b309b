package relocktest

import (
	"bytes"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A lock taken without WithOwner belongs to the goroutine that took it: no other goroutine can release
// it, and Go tells nobody when a goroutine ends, so a goroutine that returns holding a lock leaves it held,
// renewed by its Client's watchdog, until the Client closes. A Server from NewServer looks for such holds
// when its test ends.

// abandonedHold is a hold, on a lock's hash, of a goroutine that has ended.
type abandonedHold struct {
	key       string // the lock's hash
	goroutine uint64
	what      string // "a hold of", or "the write hold of" for a ReadWriteLock's writer
}

// goroutineField is a hold's field in a lock's hash when its owner is a goroutine: "<clientID>:<goroutine
// ID>", with ":write" for a ReadWriteLock's writer. (A WithOwner token cannot be only digits.)
var goroutineField = regexp.MustCompile(`^(.+):([0-9]+)(:write)?$`)

// abandonedHolds returns the holds in s of goroutines that have ended, taken through the Clients with the
// given IDs.
func (s *Server) abandonedHolds(clients []string) []abandonedHold {
	s.clock.Advance() // what has expired by now is removed
	live := liveGoroutines()
	var out []abandonedHold
	keys := s.m.Keys()
	slices.Sort(keys)
	for _, key := range keys {
		if s.m.Type(key) != "hash" {
			continue
		}
		fields, err := s.m.HKeys(key)
		if err != nil {
			continue
		}
		for _, f := range fields {
			m := goroutineField.FindStringSubmatch(f)
			if m == nil || !slices.Contains(clients, m[1]) {
				continue
			}
			id, err := strconv.ParseUint(m[2], 10, 64)
			if err != nil || live[id] {
				continue
			}
			what := "a hold of"
			if m[3] != "" {
				what = "the write hold of"
			}
			out = append(out, abandonedHold{key: key, goroutine: id, what: what})
		}
	}
	return out
}

// liveGoroutines returns the IDs of the process's goroutines.
func liveGoroutines() map[uint64]bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	live := map[uint64]bool{}
	for _, line := range bytes.Split(buf, []byte("\n")) {
		rest, ok := bytes.CutPrefix(line, []byte("goroutine "))
		if !ok {
			continue
		}
		id, _, _ := strings.Cut(string(rest), " ")
		if n, err := strconv.ParseUint(id, 10, 64); err == nil {
			live[n] = true
		}
	}
	return live
}

// settleTime is how long reportAbandoned lets releases still under way land (an Unlock whose context had
// ended returns at once and releases in the background) before it reports a hold.
const settleTime = 500 * time.Millisecond

// reportAbandoned fails s's test for each hold of a goroutine that ended without releasing it.
func (s *Server) reportAbandoned(clients []string) {
	holds := s.abandonedHolds(clients)
	for deadline := time.Now().Add(settleTime); len(holds) > 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		holds = s.abandonedHolds(clients)
	}
	for _, h := range holds {
		s.t.Errorf("relocktest: at the end of the test, goroutine %d, which has returned, still had %s %q: "+
			"a lock taken without relock.WithOwner belongs to the goroutine that took it, nothing else can "+
			"release it, and its Client renews it until Close. Unlock it before the goroutine returns "+
			"(defer l.Unlock(ctx)), or take and release it with relock.WithOwner and a token the releasing "+
			"goroutine has too", h.goroutine, h.what, h.key)
	}
}
