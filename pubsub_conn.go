package relock

import (
	"context"
	"time"
)

// The hub's subscription connection on a single server (see hub): one goroutine owns it, sends every
// SUBSCRIBE and UNSUBSCRIBE the channels need, in the order they were decided, and restores the
// subscriptions when the connection is lost.
//
// A channel nobody needs any more lingers, subscribed, for lingerFor/2 to lingerFor after its last waiter
// left: dropping channels costs a new connection (see rotatingConn), so drops are gathered, and a channel
// needed again meanwhile is subscribed already: a Client whose waits on a lock come one at a time (two
// Clients handing it back and forth) neither dials a connection nor waits for a SUBSCRIBE per wait. When
// the lingering channels go and no channel is needed, the connection goes with them: an idle Client keeps
// no subscription connection.

// lingerFor is how long, at most, a channel nobody needs stays subscribed.
const lingerFor = time.Second

// loop owns the subscription connection and brings the subscriptions in Redis in line with the waiters.
func (h *hub) loop() {
	defer close(h.stopped)
	if h.cluster {
		h.loopCluster()
		return
	}
	var (
		conn     subConn
		connErr  <-chan error
		retry    *time.Timer
		retryC   <-chan time.Time
		backoff  backoff // between attempts to restore the connection while waiters need it
		linger   = time.NewTimer(time.Hour)
		drop     bool      // the timer fired: the channels that lingered long enough go
		lingerAt time.Time // when the timer fires
	)
	linger.Stop()
	lingerC := (<-chan time.Time)(nil)
	defer func() {
		if conn != nil {
			conn.close()
		}
		if retry != nil {
			retry.Stop()
		}
		linger.Stop()
	}()
	for {
		select {
		case <-h.life.Done():
			return
		case <-h.kick:
		case <-retryC:
			retryC = nil
		case <-lingerC:
			lingerC, drop = nil, true
			h.markSubscribedDirty()
		case <-connErr: // closed, with at most one error: the connection is gone
			conn.close()
			conn, connErr = nil, nil
			h.connectionLost()
		}
		// While backing off after a failure, changes wait for the retry timer.
		if conn == nil && retryC == nil && h.needsConnection() {
			conn, connErr = h.redis.dedicate(h.onMessage)
		}
		if conn == nil {
			continue
		}
		next, err := h.reconcile(conn, time.Now(), drop)
		if err == nil {
			drop = false
			if !next.IsZero() && (lingerC == nil || next.Before(lingerAt)) {
				linger.Reset(time.Until(next))
				lingerC, lingerAt = linger.C, next
			}
		}
		if err != nil {
			conn.close()
			conn, connErr = nil, nil
			h.connectionLost()
			if retry == nil {
				retry = time.NewTimer(backoff.pause())
			} else {
				retry.Reset(backoff.pause())
			}
			retryC = retry.C
			continue
		}
		backoff.reset()
	}
}

func (h *hub) needsConnection() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.dirty) > 0
}

// connectionLost marks every subscription as gone. Waiters are woken to retry at once (a release may
// have been published while nobody listened), and again when their channel is subscribed anew.
func (h *hub) connectionLost() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.subs {
		if s.subscribed {
			s.subscribed, s.idleSince = false, time.Time{}
			s.resync = true
		}
		s.skip = 0
		wakeAllLocked(s)
		h.markDirtyLocked(s)
	}
}

// markSubscribedDirty marks every subscribed channel dirty, for reconcile to look at them again.
func (h *hub) markSubscribedDirty() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.subs {
		if s.subscribed {
			h.markDirtyLocked(s)
		}
	}
}

// reconcile sends the UNSUBSCRIBE and SUBSCRIBE commands the dirty channels need, in that order, and
// records their outcome. A channel nobody needs lingers, subscribed, until lingerFor after it was last
// needed; when due (the linger timer fired), those that have lingered at least lingerFor/2 go with the
// ones whose time is up. next is when the earliest of the dirty channels still lingering is due to go,
// zero if none is. A non-nil error means the connection is unusable.
func (h *hub) reconcile(conn subConn, now time.Time, due bool) (next time.Time, err error) {
	var subs, unsubs []string
	h.mu.Lock()
	for ch, s := range h.dirty {
		delete(h.dirty, ch)
		switch {
		case s.needed() && !s.subscribed:
			if s.pending == nil {
				s.pending = &subAttempt{done: make(chan struct{})}
			}
			subs = append(subs, ch)
		case !s.needed() && s.subscribed:
			if s.idleSince.IsZero() || s.idleWanted != s.wanted {
				s.idleSince, s.idleWanted = now, s.wanted
			}
			if idle := now.Sub(s.idleSince); idle < lingerFor && (!due || idle < lingerFor/2) {
				if end := s.idleSince.Add(lingerFor); next.IsZero() || end.Before(next) {
					next = end
				}
				continue
			}
			// From here on new waiters must wait for a fresh SUBSCRIBE, sent after this UNSUBSCRIBE.
			s.subscribed, s.idleSince = false, time.Time{}
			unsubs = append(unsubs, ch)
		case s.idle():
			h.dropLocked(s)
		}
	}
	h.mu.Unlock()
	if len(subs) == 0 && len(unsubs) == 0 {
		return next, nil
	}

	ctx, cancel := context.WithTimeout(h.life, subscribeTimeout)
	defer cancel()
	if len(unsubs) > 0 {
		err = conn.unsubscribe(ctx, unsubs)
	}
	if err == nil && len(subs) > 0 {
		// Redis runs SUBSCRIBE as one command: when its first confirmation arrives, every channel is subscribed.
		err = conn.subscribe(ctx, subs)
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ch := range unsubs {
		if s := h.subs[ch]; s != nil {
			h.markDirtyLocked(s) // deleted next round if still unused, or subscribed again
		}
	}
	if len(unsubs) > 0 && err == nil {
		// The channels kept moved to another connection (see rotatingConn): a named message counted on
		// the old one may have lost its unlock message with it. A count started over can only wake a
		// waiter for nothing, never leave one asleep.
		for _, s := range h.subs {
			s.skip = 0
		}
	}
	for _, ch := range subs {
		s := h.subs[ch]
		if s == nil {
			continue
		}
		if err != nil {
			h.failLocked(s, err)
			h.markDirtyLocked(s)
			continue
		}
		h.confirmLocked(s)
		if !s.needed() {
			h.markDirtyLocked(s)
		}
	}
	return next, err
}

// dropLocked forgets s, which has no waiter left and is not subscribed, and ends its pending subscription
// attempt, if any.
func (h *hub) dropLocked(s *subscription) {
	if s.pending != nil {
		close(s.pending.done)
		s.pending = nil
	}
	if h.subs[s.channel] == s {
		delete(h.subs, s.channel)
	}
}

// confirmLocked records that Redis confirmed the subscription s: its joiners go on, and, if it had been
// lost, every waiter retries (a release may have gone unheard meanwhile; and a wake channel's lock's
// waiters, since a release that found it unsubscribed dropped their owners from the waiting ones, see
// lua/lib/waiters.lua: their next attempts put them back).
func (h *hub) confirmLocked(s *subscription) {
	s.subscribed, s.idleSince = true, time.Time{}
	if s.pending != nil {
		close(s.pending.done)
		s.pending = nil
	}
	if s.resync {
		s.resync = false
		h.wakeAllRoutedLocked(s)
	}
}

// failLocked records that the subscription s failed: its joiners return err, its waiters retry.
func (h *hub) failLocked(s *subscription, err error) {
	if s.pending != nil {
		s.pending.err = err
		close(s.pending.done)
		s.pending = nil
	}
	h.wakeAllRoutedLocked(s)
}

// wakeAllRoutedLocked wakes every waiter of s, or, for a wake channel, of the lock channel it routes to.
func (h *hub) wakeAllRoutedLocked(s *subscription) {
	if s.routes != "" {
		if s = h.subs[s.routes]; s == nil {
			return
		}
	}
	wakeAllLocked(s)
}
