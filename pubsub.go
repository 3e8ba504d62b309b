package relock

import (
	"context"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// transientGrace is how long a waiter keeps trying through transient errors before it returns one.
const transientGrace = 10 * time.Second

const (
	// subscribeTimeout bounds one SUBSCRIBE or UNSUBSCRIBE exchange on the subscription connection; a server
	// that does not answer in time is treated as a broken connection.
	subscribeTimeout = 5 * time.Second
	// reconnectBackoffMin and reconnectBackoffMax bound the delay between attempts to restore the
	// subscription connection while waiters need it.
	reconnectBackoffMin = 50 * time.Millisecond
	reconnectBackoffMax = 2 * time.Second
)

// unlockMessage is what a release publishes (Redisson's LockPubSub.UNLOCK_MESSAGE): it wakes one local
// waiter. readUnlockMessage (READ_UNLOCK_MESSAGE) wakes every local waiter of the channel, as when a
// writer leaves and all readers may enter.
const (
	unlockMessage     = "0"
	readUnlockMessage = "1"
)

// hub carries every release notification a Client waits for. Each channel is subscribed once however many
// local goroutines wait on it, and unsubscribed when the last of them leaves. On a single server, every
// subscription is on one connection of the hub's own (a rueidis dedicated connection), and one goroutine,
// started at the first wait, owns it and sends every SUBSCRIBE and UNSUBSCRIBE, so they reach Redis in the
// order they were decided. On a cluster, each channel has a receiver of its own (loopCluster).
type hub struct {
	rdb     rueidis.Client
	life    context.Context // ends at Client.Close
	cluster bool            // Redis Cluster: one receiver per channel (loopCluster)
	// sharded reports whether releases on a cluster are announced with sharded pub/sub (Client.shardedPubSub).
	sharded func(ctx context.Context, channel string) (bool, error)

	mu      sync.Mutex
	entries map[string]*entry // by channel
	dirty   map[string]*entry // channels whose subscription may have to change
	started bool
	closed  bool
	kick    chan struct{} // wakes the loop when dirty got entries
	done    chan struct{} // closed by close: waiters return ErrClosed
	stopped chan struct{} // closed when the loop has ended
}

// entry is one channel: its local waiters, oldest first, and the state of its subscription.
type entry struct {
	channel    string
	waiters    []*waiter
	subscribed bool        // confirmed by Redis on the current connection
	pending    *subAttempt // the subscription new waiters wait for; nil when subscribed
	resync     bool        // the connection was lost: wake every waiter once subscribed again

	// Cluster only: the current receiver's generation, its stop function (nil when no receiver is
	// wanted), and whether a receiver of that generation still runs.
	gen       int
	stop      context.CancelFunc
	receiving bool
}

// subAttempt is one SUBSCRIBE that joiners wait for.
type subAttempt struct {
	done chan struct{}
	err  error
}

// waiter is one goroutine waiting for a channel. wake holds at most one pending notification, so a
// release that arrives while the waiter is busy retrying is kept for its next wait.
type waiter struct {
	e    *entry
	wake chan struct{}
}

func newHub(rdb rueidis.Client, life context.Context, cluster bool, sharded func(context.Context, string) (bool, error)) *hub {
	return &hub{
		rdb:     rdb,
		life:    life,
		cluster: cluster,
		sharded: sharded,
		entries: make(map[string]*entry),
		dirty:   make(map[string]*entry),
		kick:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
}

// join registers the calling goroutine as a waiter on channel and returns once Redis has confirmed the
// subscription, so a release published after join returns is never missed. The caller must leave.
func (h *hub) join(ctx context.Context, channel string) (*waiter, error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	if !h.started {
		h.started = true
		go h.loop()
	}
	e := h.entries[channel]
	if e == nil {
		e = &entry{channel: channel}
		h.entries[channel] = e
	}
	w := &waiter{e: e, wake: make(chan struct{}, 1)}
	e.waiters = append(e.waiters, w)
	var att *subAttempt
	if !e.subscribed {
		if e.pending == nil {
			e.pending = &subAttempt{done: make(chan struct{})}
			h.markDirtyLocked(e)
		}
		att = e.pending
	}
	h.mu.Unlock()
	if att == nil {
		return w, nil
	}
	select {
	case <-att.done:
		if att.err == nil {
			return w, nil
		}
		h.leave(w, false)
		return nil, att.err
	case <-ctx.Done():
		h.leave(w, false)
		return nil, ctx.Err()
	case <-h.done:
		h.leave(w, false)
		return nil, ErrClosed
	}
}

// leave removes w. A waiter that leaves without the lock hands a notification it did not use to the
// next waiter, so a release is never lost to a goroutine that gave up.
func (h *hub) leave(w *waiter, acquired bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := w.e
	for i, x := range e.waiters {
		if x == w {
			copy(e.waiters[i:], e.waiters[i+1:])
			e.waiters[len(e.waiters)-1] = nil
			e.waiters = e.waiters[:len(e.waiters)-1]
			break
		}
	}
	if !acquired && len(w.wake) > 0 {
		wakeOneLocked(e)
	}
	if len(e.waiters) == 0 {
		h.markDirtyLocked(e)
	}
}

func (h *hub) markDirtyLocked(e *entry) {
	h.dirty[e.channel] = e
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// wakeOneLocked wakes the oldest waiter that has no notification pending.
func wakeOneLocked(e *entry) {
	for _, w := range e.waiters {
		select {
		case w.wake <- struct{}{}:
			return
		default:
		}
	}
}

func wakeAllLocked(e *entry) {
	for _, w := range e.waiters {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// onMessage runs on rueidis's reader goroutine for every message on the subscription connection.
func (h *hub) onMessage(m rueidis.PubSubMessage) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := h.entries[m.Channel]; e != nil {
		if m.Message == readUnlockMessage {
			wakeAllLocked(e)
		} else {
			wakeOneLocked(e)
		}
	}
}

// close ends the hub; the Client's lifetime must already be over so that the loop stops.
func (h *hub) close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	close(h.done)
	started := h.started
	h.mu.Unlock()
	if started {
		<-h.stopped
	}
}

// loop owns the subscription connection and brings the subscriptions in Redis in line with the waiters.
func (h *hub) loop() {
	defer close(h.stopped)
	if h.cluster {
		h.loopCluster()
		return
	}
	var (
		conn    rueidis.DedicatedClient
		connErr <-chan error
		retry   *time.Timer
		retryC  <-chan time.Time
		backoff = reconnectBackoffMin
	)
	defer func() {
		if conn != nil {
			conn.Close()
		}
		if retry != nil {
			retry.Stop()
		}
	}()
	for {
		select {
		case <-h.life.Done():
			return
		case <-h.kick:
		case <-retryC:
			retryC = nil
		case <-connErr: // closed, with at most one error: the connection is gone
			conn.Close()
			conn, connErr = nil, nil
			h.connectionLost()
		}
		// While backing off after a failure, changes wait for the retry timer.
		if conn == nil && retryC == nil && h.needsConnection() {
			conn, connErr = h.connect()
		}
		if conn == nil {
			continue
		}
		if err := h.reconcile(conn); err != nil {
			conn.Close()
			conn, connErr = nil, nil
			h.connectionLost()
			if retry == nil {
				retry = time.NewTimer(backoff)
			} else {
				retry.Reset(backoff)
			}
			retryC = retry.C
			backoff = min(2*backoff, reconnectBackoffMax)
			continue
		}
		backoff = reconnectBackoffMin
	}
}

func (h *hub) needsConnection() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.dirty) > 0
}

func (h *hub) connect() (rueidis.DedicatedClient, <-chan error) {
	conn, _ := h.rdb.Dedicate() // conn.Close releases it
	return conn, conn.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: h.onMessage})
}

// connectionLost marks every subscription as gone. Waiters are woken to retry at once (a release may
// have been published while nobody listened), and again when their channel is subscribed anew.
func (h *hub) connectionLost() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.entries {
		if e.subscribed {
			e.subscribed = false
			e.resync = true
		}
		wakeAllLocked(e)
		h.markDirtyLocked(e)
	}
}

// reconcile sends the UNSUBSCRIBE and SUBSCRIBE commands the dirty channels need, in that order, and
// records their outcome. A non-nil error means the connection is unusable.
func (h *hub) reconcile(conn rueidis.DedicatedClient) error {
	var subs, unsubs []string
	h.mu.Lock()
	for ch, e := range h.dirty {
		delete(h.dirty, ch)
		switch {
		case len(e.waiters) > 0 && !e.subscribed:
			if e.pending == nil {
				e.pending = &subAttempt{done: make(chan struct{})}
			}
			subs = append(subs, ch)
		case len(e.waiters) == 0 && e.subscribed:
			// From here on new waiters must wait for a fresh SUBSCRIBE, sent after this UNSUBSCRIBE.
			e.subscribed = false
			unsubs = append(unsubs, ch)
		case len(e.waiters) == 0:
			if e.pending != nil {
				close(e.pending.done)
				e.pending = nil
			}
			if h.entries[ch] == e {
				delete(h.entries, ch)
			}
		}
	}
	h.mu.Unlock()
	if len(subs) == 0 && len(unsubs) == 0 {
		return nil
	}

	ctx, cancel := context.WithTimeout(h.life, subscribeTimeout)
	defer cancel()
	var err error
	if len(unsubs) > 0 {
		err = conn.Do(ctx, conn.B().Unsubscribe().Channel(unsubs...).Build()).Error()
	}
	if err == nil && len(subs) > 0 {
		// Redis runs SUBSCRIBE as one command: when its first confirmation arrives, every channel is subscribed.
		err = conn.Do(ctx, conn.B().Subscribe().Channel(subs...).Build()).Error()
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ch := range unsubs {
		if e := h.entries[ch]; e != nil {
			h.markDirtyLocked(e) // deleted next round if still unused, or subscribed again
		}
	}
	for _, ch := range subs {
		e := h.entries[ch]
		if e == nil {
			continue
		}
		if err != nil {
			h.failLocked(e, err)
			h.markDirtyLocked(e)
			continue
		}
		h.confirmLocked(e)
		if len(e.waiters) == 0 {
			h.markDirtyLocked(e)
		}
	}
	return err
}

// confirmLocked records that Redis confirmed e's subscription: its joiners go on, and, if it had been
// lost, every waiter retries (a release may have gone unheard meanwhile).
func (h *hub) confirmLocked(e *entry) {
	e.subscribed = true
	if e.pending != nil {
		close(e.pending.done)
		e.pending = nil
	}
	if e.resync {
		e.resync = false
		wakeAllLocked(e)
	}
}

// failLocked records that e's subscription failed: its joiners return err, its waiters retry.
func (h *hub) failLocked(e *entry, err error) {
	if e.pending != nil {
		e.pending.err = err
		close(e.pending.done)
		e.pending = nil
	}
	wakeAllLocked(e)
}

// loopCluster is the loop of a hub on Redis Cluster. Each channel has a receiver goroutine that holds its
// subscription on rueidis's connection to a node, and subscribes again when it is lost. With sharded
// pub/sub, releases are announced with SPUBLISH on the shard that owns the channel's slot: the receiver
// holds an SSUBSCRIBE there (rueidis routes it by slot) and subscribes again, wherever the slot now is,
// when the shard drops it (slot migration, failover, a broken connection). With plain pub/sub, PUBLISH is
// broadcast to every node: the receiver holds a SUBSCRIBE on any node, and subscribes again, on any node
// rueidis still knows, when that node fails or its connection breaks.
func (h *hub) loopCluster() {
	var receivers sync.WaitGroup
	defer receivers.Wait()
	for {
		select {
		case <-h.life.Done():
			return
		case <-h.kick:
		}
		h.mu.Lock()
		for ch, e := range h.dirty {
			delete(h.dirty, ch)
			switch {
			case len(e.waiters) > 0 && e.stop == nil:
				if !e.subscribed && e.pending == nil {
					e.pending = &subAttempt{done: make(chan struct{})}
				}
				ctx, stop := context.WithCancel(h.life)
				e.gen++
				e.stop, e.receiving = stop, true
				receivers.Add(1)
				go func(gen int) {
					defer receivers.Done()
					h.receive(ctx, e, gen)
				}(e.gen)
			case len(e.waiters) == 0 && e.stop != nil:
				e.stop() // the receiver unsubscribes, then removes the entry
				e.stop = nil
			case len(e.waiters) == 0 && !e.receiving:
				if e.pending != nil {
					close(e.pending.done)
					e.pending = nil
				}
				if h.entries[ch] == e {
					delete(h.entries, ch)
				}
			}
		}
		h.mu.Unlock()
	}
}

// receive holds e's subscription until ctx ends, subscribing again after each loss.
func (h *hub) receive(ctx context.Context, e *entry, gen int) {
	backoff := reconnectBackoffMin
	for {
		err := h.receiveOnce(ctx, e, gen, &backoff)
		h.mu.Lock()
		if e.gen == gen {
			if e.subscribed {
				e.subscribed, e.resync = false, true
			}
			if err != nil && ctx.Err() == nil {
				h.failLocked(e, err)
			} else {
				wakeAllLocked(e)
			}
		}
		h.mu.Unlock()
		if ctx.Err() == nil {
			timer := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				timer.Stop()
			case <-timer.C:
			}
			backoff = min(2*backoff, reconnectBackoffMax)
		}
		h.mu.Lock()
		if ctx.Err() != nil {
			if e.gen == gen {
				e.receiving = false
				h.markDirtyLocked(e) // removed if unused, or given a new receiver
			}
			h.mu.Unlock()
			return
		}
		if e.gen == gen && !e.subscribed && e.pending == nil {
			e.pending = &subAttempt{done: make(chan struct{})} // joiners wait for the next subscription
		}
		h.mu.Unlock()
	}
}

// receiveOnce subscribes to e's channel, with SSUBSCRIBE or SUBSCRIBE as releases are announced, and
// delivers its messages until the subscription is lost or ctx ends (then it unsubscribes). A successful
// subscription resets *backoff.
func (h *hub) receiveOnce(ctx context.Context, e *entry, gen int, backoff *time.Duration) error {
	pctx, cancel := context.WithTimeout(ctx, subscribeTimeout)
	sharded, err := h.sharded(pctx, e.channel)
	cancel()
	if err != nil {
		return err
	}
	sub, kind := h.rdb.B().Subscribe().Channel(e.channel).Build(), "subscribe"
	if sharded {
		sub, kind = h.rdb.B().Ssubscribe().Channel(e.channel).Build(), "ssubscribe"
	}
	sctx := rueidis.WithOnSubscriptionHook(ctx, func(s rueidis.PubSubSubscription) {
		if s.Kind == kind { // runs on rueidis's reader: no blocking here
			h.mu.Lock()
			if e.gen == gen {
				h.confirmLocked(e)
				*backoff = reconnectBackoffMin
			}
			h.mu.Unlock()
		}
	})
	sctx = rueidis.WithOnReceiveReturnHook(sctx, func(err error, c rueidis.CommandClient) error {
		if ctx.Err() != nil { // leaving: cancelling Receive does not unsubscribe by itself
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), subscribeTimeout)
			unsub := c.B().Unsubscribe().Channel(e.channel).Build()
			if sharded {
				unsub = c.B().Sunsubscribe().Channel(e.channel).Build()
			}
			_ = c.Do(uctx, unsub).Error()
			cancel()
		}
		return err
	})
	return h.rdb.Receive(sctx, sub, h.onMessage)
}

// attempt tries to acquire a lock once. When it does not get the lock, holderTTL is how long the current
// hold may still last (negative: no expiry known), so a waiter never sleeps past it.
type attempt func(ctx context.Context) (acquired bool, holderTTL time.Duration, err error)

// acquireOp is one acquisition by any lock type, for the shared wait loop.
type acquireOp struct {
	kind    lockKind
	name    string
	channel string        // where the lock's releases are announced
	wait    time.Duration // < 0: as long as ctx allows; 0: one attempt
	try     attempt
}

// acquire runs op in the shared wait loop, inside a "relock.acquire" span, and records its outcome.
func (c *Client) acquire(ctx context.Context, op acquireOp) (bool, error) {
	start := time.Now()
	ctx, span := c.tel.startSpan(ctx, "relock.acquire", op.kind, op.name)
	attempts := 0
	ok, err := c.acquireWaiting(ctx, op.channel, op.wait, func(ctx context.Context) (bool, time.Duration, error) {
		attempts++
		return op.try(ctx)
	})
	o := acquireOutcome(ok, err)
	wait := time.Since(start)
	c.tel.acquired(ctx, op.kind, o, wait)
	endSpan(span, o, err, AttrAttempts.Int(attempts), AttrWaitMS.Float64(millis(wait)))
	return ok, err
}

// acquireWaiting is the wait loop of every lock type: try; if the lock is taken, subscribe to its release
// channel, try again (a release between the first try and the subscription would otherwise be missed),
// then sleep until a release notification, the holder's TTL, the end of wait, or ctx, and try again.
// wait < 0 waits as long as ctx allows; wait == 0 makes one attempt.
func (c *Client) acquireWaiting(ctx context.Context, channel string, wait time.Duration, try attempt) (bool, error) {
	ok, _, err := try(ctx)
	if ok || err != nil || wait == 0 {
		return ok, err
	}
	var deadline time.Time
	if wait > 0 {
		deadline = time.Now().Add(wait)
	}
	w, err := c.hub.join(ctx, channel)
	if err != nil {
		return false, err
	}
	acquired := false
	defer func() { c.hub.leave(w, acquired) }()

	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	var troubleSince time.Time // when attempts began to fail with transient errors
	backoff := reconnectBackoffMin
	for {
		ok, ttl, err := try(ctx)
		if ok {
			acquired = true
			return true, nil
		}
		if err != nil {
			// A waiter rides out a short outage (a restart, a cluster failover) rather than give up its
			// wait: it tries again, backing off, for up to transientGrace. The first attempt, made before
			// waiting, reports errors at once.
			if !transient(err) || ctx.Err() != nil {
				return false, err
			}
			if troubleSince.IsZero() {
				troubleSince = time.Now()
			} else if time.Since(troubleSince) > transientGrace {
				return false, err
			}
			ttl, backoff = backoff, min(2*backoff, reconnectBackoffMax)
		} else {
			troubleSince, backoff = time.Time{}, reconnectBackoffMin
		}
		sleep := ttl
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return false, nil
			}
			if sleep < 0 || left < sleep {
				sleep = left
			}
		}
		var timeout <-chan time.Time
		if sleep >= 0 {
			if timer == nil {
				timer = time.NewTimer(sleep)
			} else {
				timer.Reset(sleep)
			}
			timeout = timer.C
		}
		select {
		case <-w.wake:
		case <-timeout:
		case <-ctx.Done():
			return false, ctx.Err()
		case <-c.hub.done:
			return false, ErrClosed
		}
	}
}
