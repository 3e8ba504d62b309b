package relock

import (
	"slices"
	"time"
)

// A hold group is the holds one owner has of one object that hands out many holds to an owner: the
// permits of a PermitSemaphore, each a hold of its own (renewed, lost and released on its own), grouped by
// {the semaphore's "{name}:timeout", owner}. Groups give PermitSemaphore.Release its owner rule: an owner
// releases permits it holds, the longest held first, and never more than it holds. A group lists the
// holds that are held and not being released, oldest first; it is kept under holdTable.mu, so a hold
// leaves its group as it ends, whatever ends it.

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

// takeFromGroup takes the n oldest holds of group g out of it, for their owner to release, and returns
// their keys. When g has fewer than n it takes none, and returns nil and how many it has.
func (w *holdTable) takeFromGroup(g holdKey, n int) ([]holdKey, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pruneGroupLocked(g)
	ks := w.groups[g]
	if len(ks) < n {
		return nil, len(ks)
	}
	taken := slices.Clone(ks[:n])
	if len(ks) == n {
		delete(w.groups, g)
	} else {
		w.groups[g] = slices.Delete(ks, 0, n)
	}
	return taken, n
}

// takeOne takes the hold k out of its group, for release through its handle.
func (w *holdTable) takeOne(k holdKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if h := w.holds[k]; h != nil {
		w.ungroupLocked(h)
	}
}

// regroup puts holds taken out of their group back, in their original order, when their release did not
// run; those that ended meanwhile stay out.
func (w *holdTable) regroup(ks []holdKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range ks {
		h := w.holds[k]
		if h == nil || h.ended || h.group == (holdKey{}) || slices.Contains(w.groups[h.group], k) {
			continue
		}
		ks := w.groups[h.group]
		i, _ := slices.BinarySearchFunc(ks, h.acquiredAt, func(k holdKey, t time.Time) int {
			return w.holds[k].acquiredAt.Compare(t)
		})
		w.groups[h.group] = slices.Insert(ks, i, k)
	}
}

// groupSize returns how many holds group g has.
func (w *holdTable) groupSize(g holdKey) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pruneGroupLocked(g)
	return len(w.groups[g])
}

// pruneGroupLocked drops the holds of g that are past their expiry although the watchdog, running late,
// has not ended them yet (see hold.heldLocked).
func (w *holdTable) pruneGroupLocked(g holdKey) {
	now := time.Now()
	ks := slices.DeleteFunc(w.groups[g], func(k holdKey) bool { return !w.holds[k].heldLocked(now) })
	if len(ks) == 0 {
		delete(w.groups, g)
	} else {
		w.groups[g] = ks
	}
}
