package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/relock-go/relock"
)

// What watch reports: its events (the lines of --json), and the changes between two readings of a lock that
// they tell.

// watchEventJSON is one line of `watch --json` (newline-delimited JSON): one event, and the lock's state
// read after it. Field names are stable; docs/command.md documents them.
type watchEventJSON struct {
	Time    time.Time `json:"time"`              // when the event reached watch (UTC)
	Event   string    `json:"event"`             // what happened: see the watchEv constants
	Text    string    `json:"text"`              // the line watch prints without --json
	Source  string    `json:"source"`            // what told watch: see the src constants
	Trigger string    `json:"trigger,omitempty"` // the keyspace event ("hset", "del", ...) or "<channel> <message>"
	Owners  []string  `json:"owners,omitempty"`  // the owner fields the event is about, when known
	State   *lockJSON `json:"state,omitempty"`   // the state read after the event
	Error   string    `json:"error,omitempty"`   // for event "error": what failed
}

// The events of watch --json.
const (
	watchEvStart          = "watching"                // the first line: the state when watch started
	watchEvAcquired       = "acquired"                // an owner took the lock (or a read hold of a free read-write lock)
	watchEvReentered      = "reentered"               // a holder's hold count went up
	watchEvPartlyReleased = "partly_released"         // a holder's hold count went down, not to 0
	watchEvReleased       = "released"                // a holder let go of the lock (its last hold)
	watchEvExpired        = "expired"                 // the lock key expired: its holders' TTL ran out
	watchEvMode           = "mode_changed"            // a read-write lock went from read to write mode, or back
	watchEvQueueJoined    = "queue_joined"            // an owner joined the fair queue or the priority writers
	watchEvQueueLeft      = "queue_left"              // an owner left the queue (took the lock, gave up, dropped)
	watchEvFencing        = "fencing_token"           // without notifications: the token moved past unseen holds
	watchEvFencingBack    = "fencing_token_went_back" // an alarm: the fencing counter went down (Redis lost it)
	watchEvDisappeared    = "disappeared"             // a hold ended without a release watch saw (see changes)
	watchEvChanged        = "changed"                 // another change of the lock key (rename, persist...)
	watchEvError          = "error"                   // Redis failed; watch goes on and says when it is back
)

// The sources of watch --json events.
const (
	srcStart    = "start"           // the first reading
	srcKeyspace = "keyspace"        // a keyspace notification
	srcMessage  = "release_message" // a message on one of the lock's release channels
	srcPoll     = "poll"            // a periodic reading (no notifications, or while resubscribing)
	srcResync   = "resync"          // the reading after (re)subscribing: what changed meanwhile
)

// change is one line of watch's output.
type change struct {
	event, text string
	owners      []string
}

func acquiredChange(h relock.Holder) change {
	return change{watchEvAcquired, fmt.Sprintf("%s acquired by %s (hold count %d, TTL %s)", holdWhat(h.Mode), ownerText(h.ClientID, h.Token), h.Count, fmtTTL(h.TTL)), []string{h.Owner}}
}

// releasedBy is the release of holders (the lock's last hold of each), or, with none known, of an
// unknown holder (unseen says why).
func releasedBy(holders []relock.Holder, unseen string) []change {
	if len(holders) == 0 {
		return []change{{watchEvReleased, "lock released (" + unseen + ")", nil}}
	}
	var out []change
	for _, h := range holders {
		out = append(out, change{watchEvReleased, fmt.Sprintf("%s released by %s", holdWhat(h.Mode), ownerText(h.ClientID, h.Token)), []string{h.Owner}})
	}
	return out
}

func expiredChange(holders []relock.Holder) change {
	if len(holders) == 0 {
		return change{watchEvExpired, "lock expired: its TTL ran out (holder not seen)", nil}
	}
	var who, owners []string
	for _, h := range holders {
		who = append(who, ownerText(h.ClientID, h.Token))
		owners = append(owners, h.Owner)
	}
	return change{watchEvExpired, "lock expired: the hold of " + strings.Join(who, ", ") + " ran out of TTL", owners}
}

// vanished reports whether some of before is not in after.
func vanished(before, after []relock.Holder) bool {
	for _, h := range before {
		if !slices.ContainsFunc(after, func(a relock.Holder) bool { return a.Owner == h.Owner }) {
			return true
		}
	}
	return false
}

// holderChanges describes how the holders went from a to b: releases first, then acquisitions and
// hold counts moving.
func holderChanges(a, b []relock.Holder) []change {
	var out []change
	after := map[string]bool{}
	for _, h := range b {
		after[h.Owner] = true
	}
	for _, h := range a {
		if !after[h.Owner] {
			out = append(out, releasedBy([]relock.Holder{h}, "")...)
		}
	}
	before := map[string]relock.Holder{}
	for _, h := range a {
		before[h.Owner] = h
	}
	for _, h := range b {
		what := holdWhat(h.Mode)
		old, held := before[h.Owner]
		switch {
		case !held:
			out = append(out, acquiredChange(h))
		case h.Count > old.Count:
			out = append(out, change{watchEvReentered, fmt.Sprintf("%s re-entered by %s (hold count %d -> %d)", what, ownerText(h.ClientID, h.Token), old.Count, h.Count), []string{h.Owner}})
		case h.Count < old.Count:
			out = append(out, change{watchEvPartlyReleased, fmt.Sprintf("%s partly released by %s (hold count %d -> %d)", what, ownerText(h.ClientID, h.Token), old.Count, h.Count), []string{h.Owner}})
		}
	}
	return out
}

// queueChanges describes who joined and left the queue from a to b.
func queueChanges(a, b relock.LockState) []change {
	var out []change
	queued := func(s relock.LockState) []string {
		owners := make([]string, len(s.Queue))
		for i, w := range s.Queue {
			owners[i] = w.Owner
		}
		return owners
	}
	qa, qb := queued(a), queued(b)
	for _, w := range b.Queue {
		if !slices.Contains(qa, w.Owner) {
			out = append(out, change{watchEvQueueJoined, fmt.Sprintf("%s joined the queue (position %d)", ownerText(w.ClientID, w.Token), slices.Index(qb, w.Owner)+1), []string{w.Owner}})
		}
	}
	for _, w := range a.Queue {
		if !slices.Contains(qb, w.Owner) {
			out = append(out, change{watchEvQueueLeft, fmt.Sprintf("%s left the queue", ownerText(w.ClientID, w.Token)), []string{w.Owner}})
		}
	}
	return out
}

// changes describes what changed from reading a to reading b, ignoring the passing of time (TTLs going
// down, renewals). interval is how far apart the two readings may be. unseen says that watch could not
// have seen a release between them (its subscription was down): a holder gone since a is then not said
// to be released.
//
// A fencing counter lower in b than in a means that Redis lost the lock's keys (a restart without
// persistence, a failover to a replica that had not received them) or that someone deleted them: that is
// an alarm, and the holders gone with it disappeared without a release.
func changes(a, b relock.LockState, interval time.Duration, unseen bool) []change {
	var out []change
	after := map[string]bool{}
	for _, h := range b.Holders {
		after[h.Owner] = true
	}
	lost := b.FencingToken < a.FencingToken
	// Releases first, then what took their place.
	for _, h := range a.Holders {
		if after[h.Owner] {
			continue
		}
		ch := releasedBy([]relock.Holder{h}, "")[0]
		what := holdWhat(h.Mode) + " of " + ownerText(h.ClientID, h.Token)
		switch {
		case lost:
			ch.event = watchEvDisappeared
			ch.text = what + " disappeared without a release: Redis lost it (its fencing counter went back too)"
		case unseen:
			ch.event = watchEvDisappeared
			ch.text = what + " disappeared while watch was not subscribed, with no release seen: it was released or " +
				"expired meanwhile, or Redis lost it (a restart without persistence, a failover)"
		case h.TTL >= 0 && h.TTL <= 2*interval:
			ch.text = fmt.Sprintf("%s ended: released, or expired (its TTL was %s)", what, fmtTTL(h.TTL))
		}
		out = append(out, ch)
	}
	if a.Kind != b.Kind && b.Kind != relock.KindNone && a.Kind != relock.KindNone {
		out = append(out, change{watchEvChanged, fmt.Sprintf("kind: %s -> %s", kindTitle(a.Kind), kindTitle(b.Kind)), nil})
	}
	if a.Mode != b.Mode && a.Mode != "" && b.Mode != "" {
		out = append(out, change{watchEvMode, fmt.Sprintf("mode: %s -> %s", a.Mode, b.Mode), nil})
	}
	var kept []relock.Holder
	for _, h := range a.Holders {
		if after[h.Owner] {
			kept = append(kept, h)
		}
	}
	out = append(out, holderChanges(kept, b.Holders)...)
	out = append(out, queueChanges(a, b)...)
	switch {
	case lost:
		out = append(out, fencingBack(a.FencingToken, b.FencingToken))
	case b.FencingToken > a.FencingToken:
		text := fmt.Sprintf("fencing token %d -> %d", a.FencingToken, b.FencingToken)
		if n := b.FencingToken - a.FencingToken; n > 1 {
			text += fmt.Sprintf(" (%d fenced acquisitions since the last reading)", n)
		}
		out = append(out, change{watchEvFencing, text, nil})
	}
	return out
}

// fencingBack is the alarm for a fencing counter that went down, from a to b: relock and Redisson only
// ever increment it, so Redis lost it, or someone deleted it.
func fencingBack(a, b uint64) change {
	return change{watchEvFencingBack, fmt.Sprintf("ALARM: the fencing token went back from %d to %d: Redis lost the lock's "+
		"fencing counter (a restart without persistence, a failover to a replica that had not received it, or a "+
		"deletion). Tokens handed out from now on repeat ones already used: a store that checks them may refuse "+
		"the new holders' writes, or accept those of a holder that lost the lock", a, b), nil}
}

// nowText is the state after an event, naming the holders.
func nowText(st relock.LockState) string {
	if !st.Locked {
		s := "free"
		if st.QueueLen > 0 {
			s += fmt.Sprintf(", %d waiting", st.QueueLen)
		}
		if st.FencingToken > 0 {
			s += fmt.Sprintf(", fencing token %d", st.FencingToken)
		}
		return s
	}
	var who []string
	for _, h := range st.Holders {
		s := ownerText(h.ClientID, h.Token)
		if h.Mode != "" {
			s = h.Mode + ": " + s
		}
		who = append(who, fmt.Sprintf("%s ×%d", s, h.Count))
	}
	s := fmt.Sprintf("held by %s, TTL %s", strings.Join(who, "; "), fmtTTL(st.TTL))
	if st.QueueLen > 0 {
		s += fmt.Sprintf(", %d waiting", st.QueueLen)
	}
	if st.FencingToken > 0 {
		s += fmt.Sprintf(", fencing token %d", st.FencingToken)
	}
	return s
}

func holdWhat(mode string) string {
	switch mode {
	case "read":
		return "read lock"
	case "write":
		return "write lock"
	}
	return "lock"
}
