package relock

import "github.com/relock-go/relock/internal/invariant"

// The hold machine's invariants (see holdstate.go), checked after every transition in test binaries.

// illegalLocked reports an event that cannot happen in h's phase.
func (w *holdTable) illegalLocked(h *hold, ev *holdEvent) {
	if invariant.On() {
		invariant.Failf("hold %q of %q: %s in phase %s", h.key.field, h.key.key, ev.ev, h.phase)
	}
}

// checkHoldLocked asserts h's invariants after ev moved it from phase before.
func (w *holdTable) checkHoldLocked(h *hold, before holdPhase, ev *holdEvent) {
	fail := func(what string) {
		invariant.Failf("hold %q of %q after %s (%s -> %s; renewal %s, releases %d, count %d): %s",
			h.key.field, h.key.key, ev.ev, before, h.phase, h.renewing, h.releases, h.count, what)
	}
	grouped := w.inGroupLocked(h)
	if h.phase == phaseEnded {
		switch {
		case w.holds[h.key] == h:
			fail("an ended hold is still its key's record")
		case h.index >= 0:
			fail("an ended hold is still queued")
		case grouped:
			fail("an ended hold is still in its group")
		}
		return
	}
	switch {
	case w.holds[h.key] != h:
		fail("a live hold is not its key's record")
	case h.count < 1:
		fail("a live hold has no count")
	case h.releases < 0:
		fail("fewer than no releases under way")
	case (h.phase == phaseHeld) != (h.releases == 0):
		fail("held, but releases are under way; or releasing, with none")
	case (h.renewing == renewQueued) != (h.index >= 0):
		fail("queued, but not in the watchdog's queue; or the other way round")
	case h.renewing == renewParked && h.phase != phaseDoubted:
		fail("parked, but not doubted")
	case grouped && h.phase != phaseHeld:
		fail("in its group while being released")
	case h.mode == entryMode && (h.ctx != nil || h.group != (holdKey{})):
		fail("a queue entry with a context or a group")
	case h.expiresAt.IsZero():
		fail("no expiry")
	case w.closed:
		fail("live in a closed table")
	}
}
