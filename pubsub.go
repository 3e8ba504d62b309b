package relock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// hub carries every release notification a Client waits for. Each channel is subscribed once however many
// local goroutines wait on it, and unsubscribed when the last of them leaves. On a single server, every
// subscription is on one connection of the hub's own (a rueidis dedicated connection), and one goroutine,
// started at the first wait, owns it and sends every SUBSCRIBE and UNSUBSCRIBE, so they reach Redis in the
// order they were decided. On a cluster, each channel has a receiver of its own (loopCluster). How a
// channel's messages wake its waiters is in pubsub_waiters.go.
type hub struct {
	redis   subscriber      // Redis, as the hub sees it (pubsub_redis.go)
	id      string          // the Client's UUID, which names its wake channels (see waiter.named)
	life    context.Context // ends at Client.Close
	cluster bool            // Redis Cluster: one receiver per channel (loopCluster)
	// sharded reports whether releases on a cluster are announced with sharded pub/sub (Client.shardedPubSub).
	sharded func(ctx context.Context, channel string) (bool, error)

	// ownerWaiters counts the waiters with an owner (see waiter.owner), so that an acquisition looks for
	// its owner's other waiters only when there may be some.
	ownerWaiters atomic.Int64

	mu      sync.Mutex
	subs    map[string]*subscription // by channel
	dirty   map[string]*subscription // channels whose subscription may have to change
	started bool
	closed  bool
	kick    chan struct{} // wakes the loop when dirty got a subscription
	done    chan struct{} // closed by close: waiters return ErrClosed
	stopped chan struct{} // closed when the loop has ended
}

// subscription is one channel the hub's waiters wait on: its local waiters, oldest first, and the state
// of its subscription in Redis. A Client's wake channel for a lock (see waiter.named) has no waiters of
// its own: it routes each name it hears to the lock channel's waiters, and lives while any of them
// listens (listeners).
type subscription struct {
	channel string
	wakes   wakePolicy // how many waiters a message wakes (the first joiner's: one kind per channel)
	waiters []*waiter
	// named says the channel's waiters may be woken by name (a reentrant lock's): its releases may
	// publish namedMessage, after which the unlock message is not for relock's waiters (skip counts those
	// to ignore). See lua/lib/waiters.lua.
	named bool
	skip  int
	// hearers counts the waiters that need the channel subscribed in Redis: every waiter but a named one
	// whose lock's holder wakes it by name (see waiter.hears).
	hearers int
	// A wake channel's: the lock channel whose waiters it wakes, and how many of them listen. A listened
	// channel's (see listen): handler gets its messages, and listeners counts its listeners.
	routes    string
	listeners int
	handler   func(message string)

	subscribed bool        // confirmed by Redis on the current connection
	pending    *subAttempt // the subscription new waiters wait for; nil when subscribed
	resync     bool        // the connection was lost: wake every waiter once subscribed again
	// Single server only: since when s, subscribed, has been needed by nobody, and its wanted count then
	// (a join since counts the time afresh). See the loop's lingering. Zero while s is not subscribed.
	idleSince  time.Time
	idleWanted uint64

	// Cluster only: the current receiver's generation, its stop function (nil when no receiver is
	// wanted), and whether a receiver of that generation still runs.
	gen       int
	stop      context.CancelFunc
	receiving bool
	wanted    uint64 // counts the joins and listens that needed it (see both loops' lingering)
}

// subAttempt is one SUBSCRIBE that joiners wait for.
type subAttempt struct {
	done chan struct{}
	err  error
}

const (
	// subscribeTimeout bounds one SUBSCRIBE or UNSUBSCRIBE exchange on the subscription connection; a server
	// that does not answer in time is treated as a broken connection.
	subscribeTimeout = 5 * time.Second
)

func newHub(redis subscriber, id string, life context.Context, cluster bool, sharded func(context.Context, string) (bool, error)) *hub {
	return &hub{
		redis:   redis,
		id:      id,
		life:    life,
		cluster: cluster,
		sharded: sharded,
		subs:    make(map[string]*subscription),
		dirty:   make(map[string]*subscription),
		kick:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
}

// join registers the calling goroutine as a waiter on channel, whose messages wake waiters as wakes says
// (nil: lockWakes), and returns once Redis has confirmed the subscription, so a release published after
// join returns is never missed. weight is what the waiter wants (a semaphore's permits; 0 stands for 1);
// owner, if not "", the owner whose acquisitions let the waiter in too (see acquiredBy). named, if not "",
// is the prefix of the Client's wake channel for the lock, "<named>:<clientUUID>", on which a release may
// name owner (see lua/lib/waiters.lua): it is subscribed too, before join returns; and channel only if hears
// (see waiter.hears; a waiter with named "" always hears channel). The caller must leave.
func (h *hub) join(ctx context.Context, channel string, wakes wakePolicy, weight int, owner, named string, hears bool) (*waiter, error) {
	if wakes == nil {
		wakes = lockWakes
	}
	weight = max(weight, 1)
	h.mu.Lock()
	s := h.subscriptionLocked(channel, wakes)
	if s == nil {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	w := &waiter{sub: s, weight: weight, owner: owner, wake: make(chan struct{}, 1)}
	s.waiters = append(s.waiters, w)
	if owner != "" {
		h.ownerWaiters.Add(1)
	}
	var atts [2]*subAttempt
	if named == "" || hears {
		w.hears = true
		s.hearers++
		atts[0] = h.pendingLocked(s)
	}
	if named != "" {
		s.named = true
		ch := named + ":" + h.id
		ns := h.subs[ch]
		if ns == nil {
			ns = &subscription{channel: ch, wakes: lockWakes, routes: channel}
			h.subs[ch] = ns
		}
		ns.listeners++
		w.named = ns
		atts[1] = h.pendingLocked(ns)
	}
	h.mu.Unlock()
	for _, att := range atts {
		if err := h.await(ctx, att); err != nil {
			h.leave(w)
			return nil, err
		}
	}
	return w, nil
}

// subscriptionLocked returns channel's subscription, made (with wakes) if there is none, and starts the
// hub's loop at the first; nil once the hub is closed.
func (h *hub) subscriptionLocked(channel string, wakes wakePolicy) *subscription {
	if h.closed {
		return nil
	}
	if !h.started {
		h.started = true
		go h.loop()
	}
	s := h.subs[channel]
	if s == nil {
		s = &subscription{channel: channel, wakes: wakes}
		h.subs[channel] = s
	}
	return s
}

// listen subscribes the hub to channel for handler, which gets each of its messages on the connection's
// reader, under the hub's lock (it must not block nor call the hub), and returns once Redis confirmed the
// subscription, with the function that ends the listening. A channel has one handler: the last given.
func (h *hub) listen(ctx context.Context, channel string, handler func(message string)) (func(), error) {
	h.mu.Lock()
	s := h.subscriptionLocked(channel, lockWakes)
	if s == nil {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	s.listeners++
	s.handler = handler
	att := h.pendingLocked(s)
	h.mu.Unlock()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if s.listeners--; !s.needed() {
				h.markDirtyLocked(s)
			}
		})
	}
	if err := h.await(ctx, att); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// adopt makes w, a waiter another goroutine joined and left to the caller, the caller's: its owner is
// owner now (see gates.exit).
func (h *hub) adopt(w *waiter, owner string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case w.owner == "" && owner != "":
		h.ownerWaiters.Add(1)
	case w.owner != "" && owner == "":
		h.ownerWaiters.Add(-1)
	}
	w.owner = owner
}

// hear makes a named waiter hear its channel too (see waiter.hears), and returns once Redis has confirmed
// the subscription. On an error, w is still a waiter: the caller must leave.
func (h *hub) hear(ctx context.Context, w *waiter) error {
	h.mu.Lock()
	if w.hears {
		h.mu.Unlock()
		return nil
	}
	w.hears = true
	w.sub.hearers++
	att := h.pendingLocked(w.sub)
	h.mu.Unlock()
	return h.await(ctx, att)
}

// await waits for a subscription attempt (nil: none) to end, and returns its error, ctx's, or ErrClosed.
func (h *hub) await(ctx context.Context, att *subAttempt) error {
	if att == nil {
		return nil
	}
	select {
	case <-att.done:
		return att.err
	case <-ctx.Done():
		return ctx.Err()
	case <-h.done:
		return ErrClosed
	}
}

// pendingLocked returns the subscription attempt that a joiner of s must wait for, nil when s is
// subscribed. (An attempt may be pending with nobody needing it, its hearers gone: marking s dirty makes
// the loop send it now that somebody does.)
func (h *hub) pendingLocked(s *subscription) *subAttempt {
	s.wanted++
	if s.subscribed {
		return nil
	}
	if s.pending == nil {
		s.pending = &subAttempt{done: make(chan struct{})}
	}
	h.markDirtyLocked(s)
	return s.pending
}

// idle reports whether nobody waits on s: it may be forgotten once it is not subscribed.
func (s *subscription) idle() bool { return len(s.waiters) == 0 && s.listeners == 0 }

// needed reports whether s must be subscribed in Redis: some of its waiters hear it, or it is a wake
// channel with listeners.
func (s *subscription) needed() bool { return s.hearers > 0 || s.listeners > 0 }

// leave removes w. Every notification w got and did not use (see waiter) goes to another waiter, one
// each, whether or not w acquired: a notification still pending arrived after w's last attempt began, for
// a release that attempt may not have seen, and one taken but not looked at by an answered attempt (ctx
// ended, an attempt failed) was not used at all. Dropping either would leave a waiter asleep while what
// that release freed stays free. At worst the waiter woken tries once for nothing.
func (h *hub) leave(w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := w.sub
	for i, x := range s.waiters {
		if x == w {
			copy(s.waiters[i:], s.waiters[i+1:])
			s.waiters[len(s.waiters)-1] = nil
			s.waiters = s.waiters[:len(s.waiters)-1]
			if w.owner != "" {
				h.ownerWaiters.Add(-1)
			}
			if w.hears {
				s.hearers--
			}
			break
		}
	}
	if unused := w.taken + len(w.wake); unused > 0 {
		w.taken = 0
		wakeLocked(s, unused, 0)
	}
	if !s.needed() {
		h.markDirtyLocked(s)
	}
	if ns := w.named; ns != nil {
		w.named = nil
		if ns.listeners--; !ns.needed() {
			h.markDirtyLocked(ns)
		}
	}
}

func (h *hub) markDirtyLocked(s *subscription) {
	h.dirty[s.channel] = s
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// stop makes every waiter, and every later join, return ErrClosed. The loop goes on (waiters leave, and
// their subscriptions end) until the Client's lifetime is over.
func (h *hub) stop() {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		close(h.done)
	}
	h.mu.Unlock()
}

// close ends the hub; the Client's lifetime must already be over so that the loop stops.
func (h *hub) close() {
	h.stop()
	h.mu.Lock()
	started := h.started
	h.mu.Unlock()
	if started {
		<-h.stopped
	}
}
