package relock

import (
	"context"
	"errors"
	"sync"

	"github.com/redis/rueidis"
)

// subscriber is what the hub needs of Redis: redisSubscriber on a real deployment, a scripted fake in the
// hub's tests.
type subscriber interface {
	// dedicate opens a connection of the hub's own, for a single server's subscriptions. onMessage runs on
	// the connection's reader for every message, and must not block. lost gets at most one error and is
	// closed when the connection is gone.
	dedicate(onMessage func(channel, message string)) (conn subConn, lost <-chan error)

	// receive holds a subscription to channel on a cluster node, SSUBSCRIBE on the shard of its slot when
	// sharded, else SUBSCRIBE, and delivers its messages until the subscription is lost or ctx ends; then
	// it leaves the subscription and returns (nil once ctx ended). confirmed runs on the reader, and must not block, when the node
	// confirms the subscription.
	receive(ctx context.Context, channel string, sharded bool, confirmed func(), onMessage func(channel, message string)) error
}

// subConn is the hub's dedicated connection. An error from subscribe or unsubscribe means the connection
// is unusable.
type subConn interface {
	subscribe(ctx context.Context, channels []string) error
	unsubscribe(ctx context.Context, channels []string) error
	close()
}

// redisSubscriber is the subscriber of a Client: its rueidis client.
type redisSubscriber struct{ rdb rueidis.Client }

func (s redisSubscriber) dedicate(onMessage func(channel, message string)) (subConn, <-chan error) {
	c := &rotatingConn{rdb: s.rdb, onMessage: onMessage, channels: make(map[string]bool), lost: make(chan error, 1)}
	return c, c.lost
}

// receive holds the subscription on a dedicated connection of its own, on the node of the channel's slot
// when sharded (else on any node: a cluster delivers every PUBLISH to every node's subscribers), and closes
// the connection to leave: never UNSUBSCRIBE, for the reason rotatingConn gives.
func (s redisSubscriber) receive(ctx context.Context, channel string, sharded bool, confirmed func(), onMessage func(channel, message string)) error {
	conn, _ := s.rdb.Dedicate() // conn.Close releases it
	defer conn.Close()
	sub, kind := conn.B().Subscribe().Channel(channel).Build(), "subscribe"
	if sharded {
		sub, kind = conn.B().Ssubscribe().Channel(channel).Build(), "ssubscribe"
	}
	dropped := make(chan struct{}) // the node ended the subscription (a sharded one, when its slot moves)
	var once sync.Once
	gone := conn.SetPubSubHooks(rueidis.PubSubHooks{
		OnMessage: func(m rueidis.PubSubMessage) { onMessage(m.Channel, m.Message) },
		OnSubscription: func(sub rueidis.PubSubSubscription) {
			switch sub.Kind {
			case kind:
				confirmed()
			case "unsubscribe", "sunsubscribe":
				once.Do(func() { close(dropped) })
			}
		},
	})
	if err := conn.Do(ctx, sub).Error(); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	select {
	case err := <-gone:
		if err == nil {
			err = errSubscriptionLost
		}
		return err
	case <-dropped:
		return errSubscriptionLost
	case <-ctx.Done():
		return nil
	}
}

// errSubscriptionLost is receive's error when its connection went, or its node ended the subscription: the
// hub subscribes again (a transient failure, see transient).
var errSubscriptionLost = errors.New("relock: subscription lost")

// rotatingConn carries the hub's subscriptions on a rueidis dedicated connection, and never sends
// UNSUBSCRIBE: to drop channels it subscribes the others on a new connection, then closes the old one (and
// to drop them all, it closes it). rueidis (v1.0.79) writes a PING after every UNSUBSCRIBE, and takes a
// BUSY or LOADING reply to the UNSUBSCRIBE for the PING's: the PING's own reply then finds no command, and
// rueidis's reader panics ("protocol bug, message handled out of order"), ending the process. A server
// running a slow script answers BUSY to UNSUBSCRIBE; SUBSCRIBE's refusal, and a connection's Close (one
// PING, and the connection goes), are safe. Messages may come twice while both connections are subscribed
// (a waiter woken for nothing tries once more); none is missed.
type rotatingConn struct {
	rdb       rueidis.Client
	onMessage func(channel, message string)
	mu        sync.Mutex
	cur       *underlyingConn // nil while subscribed to nothing
	closed    bool
	channels  map[string]bool // subscribed on cur; only the hub's loop changes it
	lost      chan error      // the hub's: gets at most one error, and is closed, when cur is lost
}

// underlyingConn is one connection of a rotatingConn, and the channel closed when it is gone.
type underlyingConn struct {
	conn rueidis.DedicatedClient
	gone <-chan error
}

// open makes a new connection; watch reports its loss while it is the current one.
func (c *rotatingConn) open() *underlyingConn {
	conn, _ := c.rdb.Dedicate() // conn.Close releases it
	u := &underlyingConn{conn: conn}
	u.gone = conn.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: func(m rueidis.PubSubMessage) { c.onMessage(m.Channel, m.Message) }})
	go c.watch(u)
	return u
}

func (c *rotatingConn) watch(u *underlyingConn) {
	err := <-u.gone
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur != u || c.closed {
		return // rotated away, or closed on purpose
	}
	c.cur = nil
	if err != nil {
		c.lost <- err
	}
	close(c.lost)
}

func (c *rotatingConn) current() *underlyingConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil && !c.closed {
		c.cur = c.open()
	}
	return c.cur
}

func (c *rotatingConn) subscribe(ctx context.Context, channels []string) error {
	u := c.current()
	if u == nil {
		return ErrClosed
	}
	if err := u.conn.Do(ctx, u.conn.B().Subscribe().Channel(channels...).Build()).Error(); err != nil {
		return err
	}
	for _, ch := range channels {
		c.channels[ch] = true
	}
	return nil
}

// unsubscribe drops channels: the others move to a new connection, and the old one is closed once they
// are subscribed there; it returns once the old connection's reader is over, so that no message of it
// comes later. With none left, the connection is closed.
func (c *rotatingConn) unsubscribe(ctx context.Context, channels []string) error {
	for _, ch := range channels {
		delete(c.channels, ch)
	}
	keep := make([]string, 0, len(c.channels))
	for ch := range c.channels {
		keep = append(keep, ch)
	}
	var next *underlyingConn
	if len(keep) > 0 {
		next = c.open()
		if err := next.conn.Do(ctx, next.conn.B().Subscribe().Channel(keep...).Build()).Error(); err != nil {
			next.conn.Close()
			return err
		}
	}
	c.mu.Lock()
	old := c.cur
	c.cur = next
	c.mu.Unlock()
	if old != nil {
		old.conn.Close()
		select {
		case <-old.gone:
		case <-ctx.Done():
		}
	}
	return nil
}

func (c *rotatingConn) close() {
	c.mu.Lock()
	c.closed = true
	u := c.cur
	c.cur = nil
	c.mu.Unlock()
	if u != nil {
		u.conn.Close()
	}
}
