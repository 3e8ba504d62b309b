package explore

import (
	"context"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
)

// The faults that came with the operations beyond acquiring and releasing (kind.extra).

// busyScript keeps Redis busy for ARGV[1] microseconds: past busy-reply-threshold, every other command is
// answered BUSY (a script that runs long: a user's, or a big Redisson batch).
const busyScript = `local t = redis.call('time')
local from = t[1] * 1000000 + t[2]
while true do
  local n = redis.call('time')
  if n[1] * 1000000 + n[2] - from >= tonumber(ARGV[1]) then break end
end
return 1`

// fillerPrefix names the keys a loading fault fills the dataset with, so that it loads slowly.
const fillerPrefix = "explore-filler"

// extraFault makes the fault f (one of kind.extra's), recording what it did in w; wait waits, or less when
// the schedule's faults are stopped.
func (s *sched) extraFault(f step, w *window, wait func(time.Duration)) {
	e, h := s.e, s.h
	what, withKill := f.what, false
	if base, ok := strings.CutSuffix(what, "+"+fWatchKill); ok {
		what, withKill = base, true
	}
	switch what {
	case fWatchKill:
		s.killWatches(f.target)
	case fBusy:
		// One connection of its own: the script holds it for the fault's length.
		rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{e.servers[f.target].Addr()}, DisableCache: true, DisableRetry: true})
		if err != nil {
			h.fail("harness: busy: %v", err)
			return
		}
		defer rdb.Close()
		e.do(f.target, "CONFIG", "SET", "lua-time-limit", "20") // busy-reply-threshold since 7.0
		if withKill {
			s.killWatches(f.target)
		}
		ctx, cancel := context.WithTimeout(context.Background(), f.dur+5*time.Second)
		defer cancel()
		err = rdb.Do(ctx, rdb.B().Eval().Script(busyScript).Numkeys(0).Arg(strconv.FormatInt(f.dur.Microseconds(), 10)).Build()).Error()
		if err != nil {
			h.note("busy: the script: %v", err)
		}
	case fLoading:
		// A dataset of 100 filler keys, each loaded f.dur/100 late, reloaded (DEBUG RELOAD saves it first:
		// nothing is lost): Redis answers LOADING for f.dur. Events are processed every KB of loading.
		n := 100
		e.do(f.target, "CONFIG", "SET", "loading-process-events-interval-bytes", "1024")
		e.do(f.target, "DEBUG", "POPULATE", strconv.Itoa(n), fillerPrefix, "1")
		e.do(f.target, "CONFIG", "SET", "key-load-delay", strconv.FormatInt(f.dur.Microseconds()/int64(n), 10))
		if withKill {
			s.killWatches(f.target)
		}
		if err := e.do(f.target, "DEBUG", "RELOAD").Error(); err != nil {
			h.note("loading: DEBUG RELOAD: %v", err)
		}
		e.do(f.target, "CONFIG", "SET", "key-load-delay", "0")
		// The reload saved an RDB, which a restart without persistence would load: the server would come
		// back with this moment's keys, not empty.
		dir, db := e.config(f.target, "dir"), e.config(f.target, "dbfilename")
		if dir == "" || db == "" {
			h.fail("harness: loading: the server's dir %q and dbfilename %q", dir, db)
		} else if err := os.Remove(filepath.Join(dir, db)); err != nil && !os.IsNotExist(err) && !s.p.aof {
			h.fail("harness: loading: removing the RDB the reload saved: %v", err)
		}
		if err := e.do(f.target, "EVAL", "for _, k in ipairs(redis.call('keys', ARGV[1] .. ':*')) do redis.call('del', k) end return 1",
			"0", fillerPrefix).Error(); err != nil {
			h.fail("harness: loading: deleting the filler: %v", err)
		}
	case fForce:
		c := e.forcers[f.target]
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ok, err := s.k.force(ctx, c, s.name)
		h.note("force-unlock: released %v, err %v", ok, err)
		h.update(func() {
			h.forced = append(h.forced, forcedRec{op: what, from: w.start, to: h.now(), res: allRes(s), sure: err == nil})
		})
	case fDelete:
		// Again and again for the fault's length, every 5 to 20 ms: a deletion that falls between a grant and
		// its owner's next call (a reentry) is what a Client must not take for its own hold. Nothing
		// announces it: waiters wake at the time to live they last saw (up to the watchdog timeout), which
		// the waiters' checker must not hold against them.
		// A DEL that Redis refused (BUSY, while a script of the busy fault runs) deleted nothing: only a
		// fault with a DEL that Redis ran surely ended the holds held all through it.
		until := time.Now().Add(f.dur)
		ran := 0
		for i := 0; i == 0 || time.Now().Before(until); i++ {
			if e.do(f.target, "DEL", s.name).Error() == nil {
				ran++
			}
			time.Sleep(time.Duration(5+rand.IntN(16)) * time.Millisecond)
		}
		h.note("deleted: %d DELs ran", ran)
		w.hush = s.p.watchdog
		h.update(func() {
			h.forced = append(h.forced, forcedRec{op: what, from: w.start, to: h.now(), res: allRes(s), sure: ran > 0})
		})
	case fClose:
		s.closeClient(f.target)
	default:
		h.fail("harness: unknown fault %q", f.what)
	}
}

// allRes is every resource of the schedule's kind.
func allRes(s *sched) []int {
	n := 1
	if s.k.res != nil {
		n = len(s.k.res(s.p).capacity)
	}
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	return r
}

// killWatches kills, on server i, the connections with tracking on (CLIENT LIST flag t): the watches of
// holds of every Client.
func (s *sched) killWatches(i int) {
	list, err := s.e.do(i, "CLIENT", "LIST").ToString()
	if err != nil {
		s.h.note("watch-kill: CLIENT LIST: %v", err)
		return
	}
	killed := 0
	for _, line := range strings.Split(list, "\n") {
		var id, flags string
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "id="); ok {
				id = v
			}
			if v, ok := strings.CutPrefix(f, "flags="); ok {
				flags = v
			}
		}
		if id != "" && strings.Contains(flags, "t") {
			if s.e.do(i, "CLIENT", "KILL", "ID", id).Error() == nil {
				killed++
			}
		}
	}
	s.h.note("watch-kill: %d connections with tracking on killed on server %d", killed, i)
}

// closeClient closes Client ci (each of its relock Clients) while its actors wait, hold and hand over, and
// records it. Close promises that "it returns nil when everything was given up in Redis": when it returned
// nil, and no fault was under way around it, nothing of the Client's owners may be left in Redis then:
// no hold (a hash field, a read lock's level key), no queue or waiters' entry, no permit.
func (s *sched) closeClient(ci int) {
	cs := s.e.clients[ci]
	start := s.h.now()
	var errs []error
	for _, c := range cs {
		ctx, cancel := context.WithTimeout(context.Background(), relock.DefaultCloseTimeout)
		errs = append(errs, c.CloseContext(ctx))
		cancel()
	}
	ret := s.h.now()
	var err error
	for _, e := range errs {
		if e != nil {
			err = e
		}
	}
	s.h.update(func() { s.h.closes = append(s.h.closes, closeRec{client: ci, start: start, ret: ret, err: err}) })
	if err != nil {
		s.h.note("close: Client %d: %v", ci, err)
		return
	}
	quiet := true
	s.h.update(func() {
		for _, f := range s.h.faults {
			if f.end >= start-time.Second && f.what != fClose {
				quiet = false
			}
		}
	})
	// A fault may still be under way (it is recorded once over): those of the plan that overlap.
	for _, f := range s.p.faults {
		if f.what != fClose && f.at <= ret && f.at+f.dur+time.Second >= start {
			quiet = false
		}
	}
	if !quiet {
		return
	}
	if left := s.leftOf(cs); len(left) > 0 {
		s.h.fail("close: Client %d's Close returned nil at %s (began %s), and Redis still has of its owners: %s",
			ci, ms(ret), ms(start), strings.Join(left, ", "))
	}
}

// leftOf lists what Redis has of the owners of the Clients cs: hash fields and sorted sets' members that
// name one of them, keys whose name does, and permits they took.
func (s *sched) leftOf(cs []*relock.Client) []string {
	var left []string
	for i, c := range cs {
		id := c.ID()
		keys, err := s.e.do(i, "KEYS", "*").AsStrSlice()
		if err != nil {
			return nil
		}
		for _, key := range keys {
			if strings.HasPrefix(key, "relock_undone:") { // marks of undone attempts, not holds: they live for the hold's TTL
				continue
			}
			if strings.HasPrefix(key, "relock_release_void:") { // a repeated release's void marks, not holds: they live 2 s (see clean)
				continue
			}
			if strings.Contains(key, id) {
				left = append(left, key)
				continue
			}
			typ, _ := s.e.do(i, "TYPE", key).ToString()
			var members []string
			switch typ {
			case "hash":
				members, _ = s.e.do(i, "HKEYS", key).AsStrSlice()
			case "zset":
				members, _ = s.e.do(i, "ZRANGE", key, "0", "-1").AsStrSlice()
			}
			for _, m := range members {
				if strings.Contains(m, id) {
					if mode, _ := s.e.do(i, "HGET", key, "mode").ToString(); mode == "read" && deadReader(keys, m) {
						continue
					}
					left = append(left, key+" "+m)
				}
			}
		}
	}
	// A PermitSemaphore's permits are named by their IDs, not their owners.
	var permits []string
	s.h.update(func() {
		for _, x := range s.h.holds {
			if !x.phantom && x.client >= 0 && s.e.clientsAt(x.client, cs) {
				if _, id, ok := strings.Cut(x.owner, "/"); ok {
					permits = append(permits, id)
				}
			}
		}
	})
	// A permit whose lease ran out is free, though its entry stays until the next acquisition or release
	// clears it (as Redisson's do): only those whose expiry is still ahead are left.
	var now float64
	if t, err := s.e.do(0, "TIME").AsStrSlice(); err == nil && len(t) == 2 {
		sec, _ := strconv.ParseFloat(t[0], 64)
		usec, _ := strconv.ParseFloat(t[1], 64)
		now = sec*1000 + usec/1000
	}
	for _, id := range permits {
		raw, err := hex.DecodeString(id)
		if err != nil {
			continue
		}
		if expiry, err := s.e.do(0, "ZSCORE", "{"+s.name+"}:timeout", string(raw)).AsFloat64(); err == nil && expiry > now {
			left = append(left, fmt.Sprintf("{%s}:timeout permit %s", s.name, id))
		}
	}
	slices.Sort(left)
	return left
}

// deadReader reports whether the hash field m is a read-write lock's reader whose every hold level
// expired (keys has none of its level keys): it holds nothing, and, as an expired permit's entry, its
// field stays until the lock's next writer, or its expiry, drops it (its own release, answered ErrNotHeld,
// changes nothing of the lock).
func deadReader(keys []string, m string) bool {
	if strings.HasSuffix(m, ":write") {
		return false
	}
	for _, k := range keys {
		if strings.Contains(k, ":"+m+":rwlock_timeout:") {
			return false
		}
	}
	return true
}

// clientsAt reports whether cs are the relock Clients of Client ci.
func (e *env) clientsAt(ci int, cs []*relock.Client) bool {
	return ci < len(e.clients) && len(cs) > 0 && len(e.clients[ci]) > 0 && e.clients[ci][0] == cs[0]
}

// readLogs reads, once the schedule is over, the guarded and fenced writes' logs, and deletes them with the
// fence (they are the harness's, not the kind's).
func (s *sched) readLogs() {
	glog, err1 := s.e.do(0, "LRANGE", s.name+":glog", "0", "-1").AsStrSlice()
	flog, err2 := s.e.do(0, "LRANGE", s.name+":flog", "0", "-1").AsStrSlice()
	if err1 != nil || err2 != nil {
		s.h.fail("harness: reading the logs: %v, %v", err1, err2)
	}
	s.e.do(0, "DEL", s.name+":glog", s.name+":flog", s.name+":fence")
	s.h.update(func() { s.h.glog, s.h.flog = glog, flog })
}

// config is the value of the configuration parameter param of server i ("" if it cannot be read).
func (e *env) config(i int, param string) string {
	r := e.do(i, "CONFIG", "GET", param)
	if m, err := r.AsStrMap(); err == nil {
		return m[param]
	}
	if l, err := r.AsStrSlice(); err == nil && len(l) == 2 {
		return l[1]
	}
	return ""
}
