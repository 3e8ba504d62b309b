package relock

import (
	"slices"
	"time"
)

// A hold group is the holds one owner has of one object that hands out many holds to an owner: the
// permits of a PermitSemaphore, each a hold of its own (renewed, lost and released on its own), grouped by
// {the semaphore's "{name}:timeout", owner}. Groups give PermitSemaphore.Release its owner rule: an owner
// releases permits it holds, the longest held first, and never more than it holds. A group lists the
// holds that have not ended and are not being released, oldest first; it is kept under holdTable.mu, so a
// hold leaves its group as it ends, whatever ends it. A hold past its known expiry stays in its group until
// the watchdog ends it, but does not count as held (hold.heldLocked): a renewal whose reply comes late
// may yet show that Redis kept it.

// groupLocked adds h, just acquired, to its group g.
func (w *holdTable) groupLocked(h *hold, g holdKey) {
	if w.groups == nil {
		w.groups = make(map[holdKey][]holdKey)
	}
	h.group = g
	w.groups[g] = append(w.groups[g], h.key)
}

// ungroupLocked removes h from its group, if it is in one.
func (w *holdTable) ungroupLocked(h *hold) {
	if h.group == (holdKey{}) {
		return
	}
	ks := w.groups[h.group]
	i := slices.Index(ks, h.key)
	if i < 0 {
		return
	}
	if ks = slices.Delete(ks, i, i+1); len(ks) == 0 {
		delete(w.groups, h.group)
	} else {
		w.groups[h.group] = ks
	}
}

// inGroupLocked reports whether h is in its group.
func (w *holdTable) inGroupLocked(h *hold) bool {
	return h.group != (holdKey{}) && slices.Contains(w.groups[h.group], h.key)
}

// regroupLocked puts h back in its group, in the order of acquisition, unless it is there.
func (w *holdTable) regroupLocked(h *hold) {
	if h.group == (holdKey{}) || w.inGroupLocked(h) {
		return
	}
	ks := w.groups[h.group]
	i, _ := slices.BinarySearchFunc(ks, h.acquiredAt, func(k holdKey, t time.Time) int {
		return w.holds[k].acquiredAt.Compare(t)
	})
	if w.groups == nil {
		w.groups = make(map[holdKey][]holdKey)
	}
	w.groups[h.group] = slices.Insert(ks, i, h.key)
}

// takeFromGroup takes the n oldest held holds of group g out of it, for their owner to release, and
// returns their keys; each counts as a release under way (see holdTable.releasing). When g has fewer than
// n held it takes none, and returns nil and how many it has.
func (w *holdTable) takeFromGroup(g holdKey, n int) ([]holdKey, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	var taken []holdKey
	for _, k := range w.groups[g] {
		if len(taken) == n {
			break
		}
		if w.holds[k].heldLocked(now) {
			taken = append(taken, k)
		}
	}
	if len(taken) < n {
		return nil, len(taken)
	}
	var out stepped // a release sent ends nothing
	for _, k := range taken {
		w.stepLocked(w.holds[k], &holdEvent{ev: evReleaseSent, now: now}, &out)
	}
	return taken, n
}

// takeOne takes the hold k out of its group, for release through its handle, as a release under way.
func (w *holdTable) takeOne(k holdKey) { w.releasing(k) }

// regroup records that the releases of ks, taken out of their group, did not run: each goes back, in its
// original order, unless it ended meanwhile or another release of it is still under way; and one that
// Redis said meanwhile was gone was lost.
func (w *holdTable) regroup(ks []holdKey) {
	var out stepped
	w.mu.Lock()
	for _, k := range ks {
		w.stepLocked(w.holds[k], &holdEvent{ev: evReleaseCancelled}, &out)
	}
	w.mu.Unlock()
	out.finish(w.c.tel)
}

// groupSize returns how many holds of group g are held (see hold.heldLocked).
func (w *holdTable) groupSize(g holdKey) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	n := 0
	for _, k := range w.groups[g] {
		if w.holds[k].heldLocked(now) {
			n++
		}
	}
	return n
}
