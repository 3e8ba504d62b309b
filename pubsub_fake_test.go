package relock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeRedis is a scripted Redis behind the subscriber interface, for the hub's and the wait loop's tests
// in a synctest bubble. It records every command the hub sends, with the bubble time it was sent; answers
// each at once (or holds it until the test answers, or fails it as the test says); counts the
// subscriptions it holds per channel, as PUBSUB NUMSUB would; and delivers what the test publishes.
type fakeRedis struct {
	start   time.Time
	sharded bool // on a cluster: whether releases are announced with sharded pub/sub

	mu        sync.Mutex
	log       []string        // "dial", "subscribe a b", "unsubscribe a", "ssubscribe a", "sunsubscribe a"
	at        []time.Duration // when each command of log was sent, since start
	failures  []error         // what the next commands fail with, in order
	holding   bool            // commands wait for answer (or their ctx)
	held      []chan struct{}
	conn      *fakeConn
	open      int            // dedicated connections not yet closed
	subs      map[string]int // subscriptions held per channel
	receivers map[*fakeReceiver]bool
}

func newFakeRedis() *fakeRedis {
	return &fakeRedis{start: time.Now(), subs: make(map[string]int), receivers: make(map[*fakeReceiver]bool)}
}

// testHub starts a hub on a fake Redis, in the calling bubble. stop ends it as Client.Close does; it also
// runs when the test ends, and then checks that no connection or receiver is left.
func testHub(t *testing.T, cluster, sharded bool) (h *hub, r *fakeRedis, stop func()) {
	r = newFakeRedis()
	r.sharded = sharded
	life, end := context.WithCancel(context.Background())
	h = newHub(r, "hub", life, cluster, func(context.Context, string) (bool, error) { return r.sharded, nil })
	stop = func() {
		end()
		h.close()
	}
	t.Cleanup(func() {
		stop()
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.open != 0 || len(r.receivers) != 0 {
			t.Errorf("after close: %d dedicated connections and %d receivers left", r.open, len(r.receivers))
		}
	})
	return h, r, stop
}

// maxCommands bounds what one test may send: a hub that keeps sending (a reconcile loop that never
// settles) fails at once, rather than spinning where synctest.Wait cannot see it blocked.
const maxCommands = 1000

func (r *fakeRedis) recordLocked(cmd string) {
	r.log = append(r.log, cmd)
	r.at = append(r.at, time.Since(r.start))
}

// commands returns the commands sent so far.
func (r *fakeRedis) commands() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.log)
}

// count returns how many commands named one of channels with the verb cmd ("subscribe", "unsubscribe", ...).
func (r *fakeRedis) count(cmd, channel string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.log {
		f := strings.Fields(c)
		if f[0] == cmd && slices.Contains(f[1:], channel) {
			n++
		}
	}
	return n
}

// times returns when each command equal to cmd was sent, since the fake started.
func (r *fakeRedis) times(cmd string) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ts []time.Duration
	for i, c := range r.log {
		if c == cmd {
			ts = append(ts, r.at[i])
		}
	}
	return ts
}

// openConns returns how many dedicated connections are open.
func (r *fakeRedis) openConns() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.open
}

// subscribed returns how many subscriptions Redis holds for channel.
func (r *fakeRedis) subscribed(channel string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.subs[channel]
}

// fail makes the next len(errs) commands fail with errs, in order.
func (r *fakeRedis) fail(errs ...error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, errs...)
}

// hold makes commands wait, from now on, until answer or release.
func (r *fakeRedis) hold() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holding = true
}

// answer lets the oldest held command go on; it reports false when none is held.
func (r *fakeRedis) answer() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.held) == 0 {
		return false
	}
	close(r.held[0])
	r.held = r.held[1:]
	return true
}

// release answers every held command, and stops holding.
func (r *fakeRedis) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holding = false
	for _, c := range r.held {
		close(c)
	}
	r.held = nil
}

// send records cmd and returns, once it may go on, the error it was scripted to fail with.
func (r *fakeRedis) send(ctx context.Context, cmd string) error {
	r.mu.Lock()
	r.recordLocked(cmd)
	if len(r.log) > maxCommands {
		last := r.log[len(r.log)-4:]
		r.mu.Unlock()
		panic(fmt.Sprintf("fake Redis: over %d commands, the hub does not settle: ... %q", maxCommands, last))
	}
	var err error
	if len(r.failures) > 0 {
		err, r.failures = r.failures[0], r.failures[1:]
	}
	var answered chan struct{}
	if r.holding {
		answered = make(chan struct{})
		r.held = append(r.held, answered)
	}
	r.mu.Unlock()
	if answered != nil {
		select {
		case <-answered:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}

// publish delivers message to the subscribers of channel, like PUBLISH, and returns how many there were.
func (r *fakeRedis) publish(channel, message string) int {
	var deliver []func(channel, message string)
	r.mu.Lock()
	if c := r.conn; c != nil && c.channels[channel] {
		deliver = append(deliver, c.onMessage)
	}
	for rc := range r.receivers {
		if rc.channel == channel {
			deliver = append(deliver, rc.onMessage)
		}
	}
	r.mu.Unlock()
	for _, fn := range deliver {
		fn(channel, message)
	}
	return len(deliver)
}

var errConnReset = errors.New("fake: connection reset")

// drop breaks the dedicated connection, as a server restart would: its subscriptions are gone and the
// hub hears of it through the connection's lost channel.
func (r *fakeRedis) drop() {
	r.mu.Lock()
	c := r.conn
	if c != nil {
		c.forgetLocked()
		r.conn = nil
	}
	r.mu.Unlock()
	if c != nil {
		c.lost <- errConnReset
		close(c.lost)
	}
}

// dropReceivers ends the cluster subscriptions of channel, as a failover or a slot migration would.
func (r *fakeRedis) dropReceivers(channel string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for rc := range r.receivers {
		if rc.channel == channel {
			select {
			case rc.lost <- errConnReset:
			default:
			}
		}
	}
}

func (r *fakeRedis) dedicate(onMessage func(channel, message string)) (subConn, <-chan error) {
	c := &fakeConn{r: r, onMessage: onMessage, lost: make(chan error, 1), channels: make(map[string]bool)}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recordLocked("dial")
	r.conn = c
	r.open++
	return c, c.lost
}

// fakeConn is the hub's dedicated connection to a fakeRedis.
type fakeConn struct {
	r         *fakeRedis
	onMessage func(channel, message string)
	lost      chan error
	channels  map[string]bool // subscribed on this connection
	closed    bool
}

func (c *fakeConn) subscribe(ctx context.Context, channels []string) error {
	return c.do(ctx, "subscribe", channels)
}

func (c *fakeConn) unsubscribe(ctx context.Context, channels []string) error {
	return c.do(ctx, "unsubscribe", channels)
}

func (c *fakeConn) do(ctx context.Context, verb string, channels []string) error {
	if err := c.r.send(ctx, verb+" "+strings.Join(slices.Sorted(slices.Values(channels)), " ")); err != nil {
		return err
	}
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	if c.r.conn != c {
		return errConnReset
	}
	for _, ch := range channels {
		switch {
		case verb == "subscribe" && !c.channels[ch]:
			c.channels[ch] = true
			c.r.subs[ch]++
		case verb == "unsubscribe" && c.channels[ch]:
			delete(c.channels, ch)
			c.r.subs[ch]--
		}
	}
	return nil
}

func (c *fakeConn) close() {
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	c.r.open--
	c.forgetLocked()
	if c.r.conn == c {
		c.r.conn = nil
	}
}

// forgetLocked drops the connection's subscriptions, as Redis does when a connection ends.
func (c *fakeConn) forgetLocked() {
	for ch := range c.channels {
		c.r.subs[ch]--
	}
	clear(c.channels)
}

// fakeReceiver is one running receive on a fake cluster.
type fakeReceiver struct {
	channel   string
	onMessage func(channel, message string)
	lost      chan error
}

func (r *fakeRedis) receive(ctx context.Context, channel string, sharded bool, confirmed func(), onMessage func(channel, message string)) error {
	verb, unverb := "subscribe", "unsubscribe"
	if sharded {
		verb, unverb = "ssubscribe", "sunsubscribe"
	}
	if err := r.send(ctx, verb+" "+channel); err != nil {
		return err
	}
	rc := &fakeReceiver{channel: channel, onMessage: onMessage, lost: make(chan error, 1)}
	r.mu.Lock()
	r.receivers[rc] = true
	r.subs[channel]++
	r.mu.Unlock()
	confirmed()
	var err error
	select {
	case <-ctx.Done():
		err = ctx.Err()
		r.mu.Lock()
		r.recordLocked(unverb + " " + channel)
		r.mu.Unlock()
	case err = <-rc.lost:
	}
	r.mu.Lock()
	delete(r.receivers, rc)
	r.subs[channel]--
	r.mu.Unlock()
	return err
}

// joined is what a join returned.
type joined struct {
	w   *waiter
	err error
}

// joinAsync joins channel in a goroutine of its own.
func joinAsync(ctx context.Context, h *hub, channel string) <-chan joined {
	res := make(chan joined, 1)
	go func() {
		w, err := h.join(ctx, channel, nil, 1, "", "", true)
		res <- joined{w, err}
	}()
	return res
}

func mustJoin(t *testing.T, h *hub, channel string) *waiter {
	t.Helper()
	w, err := h.join(context.Background(), channel, nil, 1, "", "", true)
	if err != nil {
		t.Fatalf("join %q: %v", channel, err)
	}
	return w
}

// pending reports whether w has a notification it has not used yet.
func pending(w *waiter) bool { return len(w.wake) > 0 }

// woken takes w's pending notification, if any, and reports whether there was one.
func woken(w *waiter) bool {
	select {
	case <-w.wake:
		return true
	default:
		return false
	}
}

// channels returns the channels the hub keeps a subscription for.
func (h *hub) channels() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Sorted(maps.Keys(h.subs))
}
