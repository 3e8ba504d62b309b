package relock

import (
	"strconv"
	"time"
)

// A hold's budget (WithMaxHold) on Redis's clock. The Client ends a hold at its budget on its own clock,
// counted from when the first acquisition was sent; Redis must drop it no later, even when the Client is
// cut off, whatever the delay of each command on its way. The first acquisition's time to live is the
// budget at most, counted from when it runs, the grant. Every later command that gives the hold a time to
// live (a reentry, a renewal, Extend, a takeover) would, with a time to live counted on the Client's clock
// from when it was sent, give it that command's delay more. So the grant's reply tells Redis's clock
// (lua/lib/hold.lua), and the later commands carry the budget's end on that clock (holdTTLArg), past which
// their script gives the hold no time to live (hold_ttl in lua/lib/clock.lua): Redis drops the hold the
// budget after it granted it, which is no earlier than the Client ends it.

// budgetEndLocked returns when a budget that ends at at on the Client's clock ends on Redis's, in
// milliseconds: as long after the first grant as at is after the first acquisition was sent (rounded
// down, so never later). It returns 0 when at is zero (no budget) or the grant's time is not known.
func (h *hold) budgetEndLocked(at time.Time) int64 {
	if at.IsZero() || h.granted <= 0 {
		return 0
	}
	return h.granted + at.Sub(h.firstSent).Milliseconds()
}

// holdTTLArg is the time to live ttl as an acquisition or renewal script reads it (hold_ttl in
// lua/lib/clock.lua): its milliseconds, then, for a hold with a budget (budgeted), an '@' and the budget's
// end on Redis's clock when it is known (end, ms; 0: not yet). The '@' makes a grant's reply tell Redis's
// clock, which only a hold with a budget needs (the first grant's is what end is counted from): the
// others' grants spare Redis a TIME.
func holdTTLArg(ttl time.Duration, end int64, budgeted bool) string {
	switch {
	case !budgeted:
		return fmtMillis(ttl)
	case end <= 0:
		return fmtMillis(ttl) + "@"
	}
	return fmtMillis(ttl) + "@" + strconv.FormatInt(end, 10)
}
