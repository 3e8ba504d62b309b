package relock

import (
	"strings"
	"time"
)

// The hub's waiters, and how the messages of a channel wake them: a notification that one of them may
// acquire is never dropped on the way (see waiter).

// waiter is one goroutine waiting for a channel. wake holds at most one pending notification, so a
// release that arrives while the waiter is busy retrying is kept for its next wait.
//
// A notification is a promise that something may be free: it is kept until an attempt that Redis answers
// has looked (acquiring or not), and whatever ends the wait before that (its ctx, its wait, an attempt that
// failed) hands it on to another waiter (leave). A waiter whose attempt found too little free for it
// (weight > 1: a semaphore's permits) hands it on to the waiters that want less (answered).
type waiter struct {
	sub    *subscription
	weight int // what the waiter wants: a semaphore's permits, 1 for any other kind
	// owner is the waiting owner, for the kinds whose hold lets the owner's other acquisitions in ("" for
	// the others): see acquiredBy.
	owner string
	wake  chan struct{}
	// named is the Client's wake channel for the lock, on which a release may name owner (see
	// hub.join), or nil. hears says the waiter needs its channel (sub) subscribed in Redis: a named waiter
	// does not while its lock's holder wakes it by name (a relock Client's release names a waiter; a
	// Redisson client's publishes the unlock message alone).
	named *subscription
	hears bool
	// taken counts the notifications the waiting goroutine took from wake that no answered attempt has
	// looked at yet (see attempting, answered). Only the waiting goroutine uses it, leave included.
	taken int
}

// unlockMessage is what a release publishes (Redisson's LockPubSub.UNLOCK_MESSAGE): it wakes one local
// waiter. readUnlockMessage (READ_UNLOCK_MESSAGE) wakes every local waiter of the channel, as when a
// writer leaves and all readers may enter. namedMessage, relock's, comes before the unlock message of a
// release that woke a relock waiter by name (lua/lib/waiters.lua): that unlock message is for Redisson's
// waiters only. Redisson's clients ignore it (a number that is neither of theirs).
const (
	unlockMessage     = "0"
	readUnlockMessage = "1"
	namedMessage      = "-1"
)

// wakePolicy says how many of a Client's waiters on a channel a message wakes: n > 0 up to n, n < 0 all
// of them, 0 none.
type wakePolicy func(message string) int

// lockWakes is the locks' policy, Redisson's: a read-write lock's read unlock wakes every waiter, any
// other release one (a waiter that does not get the lock waits again).
func lockWakes(message string) int {
	if message == readUnlockMessage {
		return -1
	}
	return 1
}

// onMessage runs on rueidis's reader goroutine for every message on the subscription connection.
func (h *hub) onMessage(channel, message string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.subs[channel]
	switch {
	case s == nil:
	case s.handler != nil: // a listened channel (see listen)
		s.handler(message)
	case s.routes != "": // a wake channel: the message names the owner to wake
		if owner, later := strings.CutPrefix(message, "~"); later {
			// After Redisson's waiters' head start (see lib/waiters.lua, announce_release).
			routes := s.routes
			time.AfterFunc(yieldFor, func() {
				h.mu.Lock()
				defer h.mu.Unlock()
				if t := h.subs[routes]; t != nil {
					wakeOwnerLocked(t, owner)
				}
			})
		} else if t := h.subs[s.routes]; t != nil {
			wakeOwnerLocked(t, message)
		}
	case s.named && message == namedMessage:
		s.skip++
	case s.named && message == unlockMessage && s.skip > 0:
		s.skip-- // a relock release that named the waiter it woke
	default:
		if n := s.wakes(message); n < 0 {
			wakeAllLocked(s)
		} else {
			wakeLocked(s, n, 0)
		}
	}
}

// wakeOwnerLocked wakes the oldest waiter of owner, or, when it has none left (it gave up meanwhile, and
// its leave has not reached Redis yet), the oldest other waiter: a wake is never dropped while somebody
// waits. A waiter with a notification pending tries anyway.
func wakeOwnerLocked(s *subscription, owner string) {
	for _, w := range s.waiters {
		if w.owner == owner {
			select {
			case w.wake <- struct{}{}:
			default:
			}
			return
		}
	}
	wakeLocked(s, 1, 0)
}

// wakeLocked wakes the n oldest waiters that have no notification pending (and, if lighter > 0, want
// less than lighter), each at most once: a waiter blocked on its channel takes a notification at once,
// leaving room for another, so waking "one" n times could wake the same waiter n times.
func wakeLocked(s *subscription, n, lighter int) {
	for _, w := range s.waiters {
		if n <= 0 {
			return
		}
		if lighter > 0 && w.weight >= lighter {
			continue
		}
		select {
		case w.wake <- struct{}{}:
			n--
		default:
		}
	}
}

func wakeAllLocked(s *subscription) {
	for _, w := range s.waiters {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// attempting is called by w's goroutine before each attempt: a notification pending now is one the
// attempt looks at.
func (w *waiter) attempting() {
	select {
	case <-w.wake:
		w.taken++
	default:
	}
}

// took is called by w's goroutine when it took a notification from w.wake.
func (w *waiter) took() { w.taken++ }

// answered is called by w's goroutine when Redis answered an attempt: the notifications it looked at are
// used. An attempt that did not acquire shows only that less is free than w wants: when w wants more than
// one (permits), waiters that want less may still get in, and up to w.weight-1 of them are woken. Each
// such hand-on goes to lighter waiters only, so it ends; a waiter that wants one found nothing free.
func (h *hub) answered(w *waiter, acquired bool) {
	taken := w.taken
	w.taken = 0
	if taken == 0 || acquired || w.weight <= 1 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	wakeLocked(w.sub, w.weight-1, w.weight)
}

// acquiredBy is called when owner acquired what channel's waiters wait for. Its other waiters there (other
// goroutines of a WithOwner token) may enter now: a reentry, or a Campaign of the leader, which returns
// its term. No release will wake them, as their owner holds what they wait for, so they are woken here,
// each to try once. A wake they do not use is handed on when they leave, as any other (see waiter): at
// worst another waiter tries once for nothing. owner "" (a kind without reentry) does nothing.
func (h *hub) acquiredBy(channel, owner string) {
	if owner == "" || h.ownerWaiters.Load() == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.subs[channel]; s != nil {
		for _, w := range s.waiters {
			if w.owner == owner {
				select {
				case w.wake <- struct{}{}:
				default:
				}
			}
		}
	}
}
