package relock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// A hold deleted or taken behind its holder's back (ForceUnlock, an operator's DEL, a FLUSHALL, a key
// evicted) would be noticed at the watchdog's next renewal or check, up to a third of the watchdog timeout
// later: the window in which a holder keeps working on a lock another owner may have. A Client watches its
// holds' keys instead, with Redis's client-side tracking, on a link of its own (see watchLink: one
// connection on a single server, a caching rueidis client on a cluster):
//
//   - Once a hold has lasted watchDelay (a hold released sooner costs nothing), the watch reads it, HEXISTS
//     of its owner field (ZSCORE of a PermitSemaphore's permit), on that connection, which has CLIENT
//     TRACKING on: Redis then tells the connection the next time the key changes (an invalidation),
//     whatever changes it. Only a hold found there is tracked (see dedicatedLink.read): a key that no
//     longer exists is never left in Redis's tracking table.
//   - On an invalidation, it reads again the holds of the keys named (every hold, for a flush or a lost
//     connection): the watchdog renews or checks a hold whose field is gone at once (holdTable.checkNow),
//     and so ends it as lost as a renewal that finds it gone does (a release of it by its owner under way
//     decides). The read tracks the key again. The Client's own renewals, reentries and releases change
//     the key too: each costs one such read per hold.
//   - The watchdog's renewals and checks go on as before: they are the backstop when the connection is
//     lost (its holds are read again when it is back) or tracking is not available, and for SWAPDB, for
//     which Redis (7.0) sends no invalidation.
//
// Cost: one connection per Client; in Redis, one tracking entry per watched key while it is held; per
// hold, two HEXISTS (one untracked, one tracked) after watchDelay, and two after each change of its key (a
// renewal every timeout/3), all pipelined.
type holdWatch struct {
	c *Client

	mu sync.Mutex
	// holds are the watched holds, each with when it began to be watched, until it is first read (zero
	// once read); keys counts them by key. (Flat maps: watching a hold allocates nothing in a steady state.)
	holds   map[holdKey]watchEntry
	keys    map[string]int
	pending int                 // holds not read yet
	dirty   map[string]struct{} // keys to read again now
	all     bool                // read every watched hold again
	started bool
	off     bool // tracking refused by the server: the watchdog alone watches
	armed   bool // the loop's timer is set for the first hold not read yet: add need not wake the loop
	kick    chan struct{}
	stopped chan struct{} // closed when the loop has ended
}

// watchDelay is how long a hold lasts before the watch first reads it.
const watchDelay = 5 * time.Millisecond

func newHoldWatch(c *Client) *holdWatch {
	return &holdWatch{c: c, holds: make(map[holdKey]watchEntry), keys: make(map[string]int),
		dirty: make(map[string]struct{}), kick: make(chan struct{}, 1), stopped: make(chan struct{})}
}

// watchEntry is a watched hold: when it began to be watched, until it is first read (zero once read), and
// whether it is a member of a sorted set (a PermitSemaphore's permit) rather than a field of a hash.
type watchEntry struct {
	since time.Time
	zset  bool
}

// add watches the hold k from now on: a field of the hash k.key, or, when zset, a member of the sorted set
// k.key.
func (hw *holdWatch) add(k holdKey, zset bool) {
	if hw == nil {
		return
	}
	hw.mu.Lock()
	defer hw.mu.Unlock()
	if hw.off {
		return
	}
	if _, ok := hw.holds[k]; !ok {
		hw.keys[k.key]++
		hw.pending++
	}
	hw.holds[k] = watchEntry{since: time.Now(), zset: zset}
	if !hw.started {
		hw.started = true
		go hw.loop()
	}
	if !hw.armed { // else the loop's timer fires for an earlier hold, and sees this one then
		hw.kickLocked()
	}
}

// remove stops watching the hold k, which ended.
func (hw *holdWatch) remove(k holdKey) {
	if hw == nil {
		return
	}
	hw.mu.Lock()
	defer hw.mu.Unlock()
	e, ok := hw.holds[k]
	if !ok {
		return
	}
	delete(hw.holds, k)
	if !e.since.IsZero() {
		hw.pending--
	}
	if hw.keys[k.key]--; hw.keys[k.key] <= 0 {
		delete(hw.keys, k.key)
	}
}

// touch has the watch read the hold k again now, if it watches it.
func (hw *holdWatch) touch(k holdKey) {
	if hw == nil {
		return
	}
	hw.mu.Lock()
	defer hw.mu.Unlock()
	if _, ok := hw.holds[k]; ok {
		hw.dirty[k.key] = struct{}{}
		hw.kickLocked()
	}
}

// later has the watch read the hold k again after watchDelay, as a hold that has not been read yet, if it
// watches it.
func (hw *holdWatch) later(k holdKey) {
	hw.mu.Lock()
	defer hw.mu.Unlock()
	e, ok := hw.holds[k]
	if !ok {
		return
	}
	if e.since.IsZero() {
		hw.pending++
	}
	hw.holds[k] = watchEntry{since: time.Now(), zset: e.zset}
	hw.kickLocked()
}

func (hw *holdWatch) kickLocked() {
	select {
	case hw.kick <- struct{}{}:
	default:
	}
}

// invalidated runs on the connection's reader: the keys changed (nil: every key, or the connection is
// gone). It must not block.
func (hw *holdWatch) invalidated(msgs []rueidis.RedisMessage) {
	hw.mu.Lock()
	defer hw.mu.Unlock()
	if msgs == nil {
		hw.all = true
	}
	for _, m := range msgs {
		if key, err := m.ToString(); err == nil {
			if _, ok := hw.keys[key]; ok {
				hw.dirty[key] = struct{}{}
			}
		}
	}
	hw.kickLocked()
}

// loop owns the watch's link to Redis (see watchLink): it reads the holds that are due, and restores the
// link when it is lost, until the Client's lifetime ends. After a link that could not be made, or a read
// that got no answer, it waits a pause (see backoff), which a new hold does not cut short, and tries again;
// only a server that refuses the watch for good (see refusedForGood) turns it off.
func (hw *holdWatch) loop() {
	life := hw.c.life
	var (
		link    watchLink
		retry   backoff
		retryAt time.Time // the end of the pause after a failure: no link is made, nothing read before
		timer   = time.NewTimer(time.Hour)
	)
	timer.Stop()
	defer close(hw.stopped)
	defer func() {
		timer.Stop()
		if link != nil {
			link.close()
		}
	}()
	readAll := func() {
		hw.mu.Lock()
		hw.all = true
		hw.mu.Unlock()
	}
	failed := func() {
		pause := retry.pause()
		retryAt = time.Now().Add(pause)
		timer.Reset(pause)
	}
	for {
		var lost <-chan error
		if link != nil {
			lost = link.lost()
		}
		select {
		case <-life.Done():
			return
		case <-hw.kick:
		case <-timer.C:
		case <-lost:
			link.close()
			link = nil
			readAll()
		}
		if time.Now().Before(retryAt) {
			continue // the timer is set for retryAt
		}
		if link == nil {
			var err error
			if link, err = hw.connect(life); err != nil {
				link = nil
				if refusedForGood(err) {
					hw.turnOff()
					return
				}
				failed()
				continue
			}
			readAll()
		}
		holds, next := hw.due(time.Now())
		if next > 0 {
			timer.Reset(next)
		}
		if len(holds) == 0 {
			continue
		}
		if err := hw.read(life, link, holds); err != nil {
			if refusedForGood(err) { // HEXISTS or ZSCORE not allowed
				hw.turnOff()
				return
			}
			if link.broken(err) {
				link.close()
				link = nil
			}
			readAll()
			failed()
			continue
		}
		retry.reset()
	}
}

// turnOff ends the watch for the Client's lifetime: the watchdog alone watches.
func (hw *holdWatch) turnOff() {
	hw.mu.Lock()
	defer hw.mu.Unlock()
	hw.off = true
	clear(hw.holds)
	clear(hw.keys)
	hw.pending = 0
}

// due returns the holds to read now, with the hold the table has for each, and how long until the next
// pending hold is due (0: none).
func (hw *holdWatch) due(now time.Time) ([]watched, time.Duration) {
	hw.mu.Lock()
	var keys []holdKey
	next := time.Duration(0)
	if hw.pending > 0 || hw.all || len(hw.dirty) > 0 {
		for k, e := range hw.holds {
			if !e.since.IsZero() { // not read yet: its first read is due watchDelay after it began
				if wait := e.since.Add(watchDelay).Sub(now); wait > 0 {
					if next == 0 || wait < next {
						next = wait
					}
					continue
				}
				hw.holds[k] = watchEntry{zset: e.zset}
				hw.pending--
				keys = append(keys, k)
				continue
			}
			if _, d := hw.dirty[k.key]; hw.all || d {
				keys = append(keys, k)
			}
		}
	}
	hw.all = false
	clear(hw.dirty)
	hw.armed = next > 0
	hw.mu.Unlock()
	return hw.c.holds.watchedHolds(keys), next
}

// watched is a hold the watch reads: its key, and the hold the table had when the read was sent.
type watched struct {
	k holdKey
	h *hold
}

// close waits for the loop to end; the Client's lifetime must be over.
func (hw *holdWatch) close() {
	if hw == nil {
		return
	}
	hw.mu.Lock()
	started := hw.started
	hw.started = true // no loop starts from now on
	hw.off = true
	hw.mu.Unlock()
	if started {
		<-hw.stopped
	}
}

// read reads the holds, tracking their keys, and has the watchdog check at once those Redis no longer has.
// An error means some reads got no answer, or an error reply other than WRONGTYPE (BUSY, LOADING...):
// their holds are to be read again.
func (hw *holdWatch) read(life context.Context, link watchLink, holds []watched) error {
	reads := make([]watchRead, len(holds))
	for i, w := range holds {
		reads[i] = watchRead{key: w.k.key, field: w.k.field, zset: w.h.kind == kindSemaphore}
	}
	ctx, cancel := context.WithTimeout(life, subscribeTimeout)
	defer cancel()
	var failed error
	for i, r := range link.read(ctx, reads) {
		there, err := r.there(reads[i].zset)
		if errors.Is(err, errNotTracked) { // there, but not tracked: read again after watchDelay
			hw.later(holds[i].k)
			continue
		}
		if err != nil {
			// Not known whether it is there: it is read again (an error reply is no sign of a loss).
			failed = err
			continue
		}
		if !there { // gone, or its key is of another type now (WRONGTYPE)
			hw.c.holds.checkNow(holds[i].h)
		}
	}
	return failed
}
