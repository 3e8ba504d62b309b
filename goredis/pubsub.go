package relockgoredis

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// pingAfter is how long a subscription connection may be silent before it is pinged, and how long the
// ping may go unanswered before the connection is taken as lost.
const pingAfter = time.Second

// dedicated is the rueidis.DedicatedClient relock takes for its subscriptions (Dedicate): SetPubSubHooks,
// then SUBSCRIBE or SSUBSCRIBE through Do, then Close. It holds a go-redis PubSub, made at the first
// subscription (on a cluster, go-redis connects it to the node of the first channel's slot), and reads
// it on a goroutine of its own, which delivers the messages to the hooks. A connection go-redis reports
// broken, or that does not answer a ping, is lost: the channel SetPubSubHooks returned gets its error
// and is closed, and the PubSub is closed (go-redis would subscribe again by itself, and relock would
// not know that messages were missed meanwhile).
type dedicated struct {
	a *client

	mu      sync.Mutex
	hooks   rueidis.PubSubHooks
	gone    chan error // SetPubSubHooks's: at most one error, closed when the hooks are called no more
	ps      *redis.PubSub
	waiting map[string][]chan struct{} // "<kind> <channel>" -> subscriptions waiting for the server's confirmation
	ended   chan struct{}              // closed when the reader is over (or, without one, at Close)
	err     error                      // why the reader is over, when it is lost
	closed  bool
	stop    context.CancelFunc
	watch   *watchConn // the watch of holds' connection, opened at its HELLO (see watch.go)
}

func newDedicated(a *client) *dedicated {
	return &dedicated{a: a, waiting: make(map[string][]chan struct{}), ended: make(chan struct{})}
}

func (d *dedicated) B() rueidis.Builder { return builder }

func (d *dedicated) SetPubSubHooks(hooks rueidis.PubSubHooks) <-chan error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if hooks.OnMessage == nil && hooks.OnSubscription == nil {
		return nil
	}
	d.hooks = hooks
	d.gone = make(chan error, 1)
	return d.gone
}

func (d *dedicated) SetOnInvalidations(fn func([]rueidis.RedisMessage)) <-chan error {
	d.mu.Lock()
	w := d.watch
	d.mu.Unlock()
	if w != nil {
		return w.SetOnInvalidations(fn)
	}
	gone := make(chan error, 1)
	gone <- errNotSupported
	close(gone)
	return gone
}

// Do subscribes for SUBSCRIBE and SSUBSCRIBE, returning once the server confirmed every channel (relock
// then knows that a message published after is delivered). HELLO, the watch of holds' first command,
// opens the watch's connection (see watch.go), which then takes every command. Other commands go through
// the client's pool.
func (d *dedicated) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	words := cmd.Commands()
	if w := d.watchFor(words); w != nil {
		return w.Do(ctx, cmd)
	}
	if len(words) < 2 {
		return d.a.Do(ctx, cmd)
	}
	kind := strings.ToLower(words[0])
	if kind != "subscribe" && kind != "ssubscribe" {
		return d.a.Do(ctx, cmd)
	}
	if err := d.subscribe(ctx, kind, words[1:]); err != nil {
		return rueidis.NewErrorResult(err)
	}
	return message("OK")
}

func (d *dedicated) subscribe(ctx context.Context, kind string, channels []string) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return rueidis.ErrClosing
	}
	confirmed := make([]chan struct{}, len(channels))
	for i, ch := range channels {
		confirmed[i] = make(chan struct{})
		d.waiting[kind+" "+ch] = append(d.waiting[kind+" "+ch], confirmed[i])
	}
	first := d.ps == nil
	if first {
		d.ps = d.a.rdb.Subscribe(ctx) // connects at the first subscription, to its channel's node
	}
	ps := d.ps
	d.mu.Unlock()
	var err error
	if kind == "ssubscribe" {
		err = ps.SSubscribe(ctx, channels...)
	} else {
		err = ps.Subscribe(ctx, channels...)
	}
	if first {
		if err != nil {
			d.end(err)
			return err
		}
		life, stop := context.WithCancel(context.Background())
		d.mu.Lock()
		d.stop = stop
		d.mu.Unlock()
		go d.read(life, ps)
	} else if err != nil {
		d.lose(err)
		return err
	}
	for _, c := range confirmed {
		select {
		case <-c:
		case <-d.ended:
			d.mu.Lock()
			err := d.err
			d.mu.Unlock()
			if err == nil {
				err = rueidis.ErrClosing
			}
			return err
		case <-ctx.Done():
			d.lose(ctx.Err()) // the connection's state is not known: it is given up
			return ctx.Err()
		}
	}
	return nil
}

// read delivers ps's messages until it is lost or Closed.
func (d *dedicated) read(life context.Context, ps *redis.PubSub) {
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(life, pingAfter)
		if life.Err() != nil {
			d.end(nil)
			return
		}
		if err != nil {
			var nerr net.Error
			if errors.As(err, &nerr) && nerr.Timeout() && !pinged {
				pinged = true
				if err := ps.Ping(life); err == nil {
					continue
				}
			}
			d.end(err)
			return
		}
		pinged = false
		d.mu.Lock()
		hooks := d.hooks
		d.mu.Unlock()
		switch m := msg.(type) {
		case *redis.Message:
			if hooks.OnMessage != nil {
				hooks.OnMessage(rueidis.PubSubMessage{Channel: m.Channel, Message: m.Payload})
			}
		case *redis.Subscription:
			d.mu.Lock()
			key := m.Kind + " " + m.Channel
			if w := d.waiting[key]; len(w) > 0 {
				close(w[0])
				if d.waiting[key] = w[1:]; len(d.waiting[key]) == 0 {
					delete(d.waiting, key)
				}
			}
			d.mu.Unlock()
			if hooks.OnSubscription != nil {
				hooks.OnSubscription(rueidis.PubSubSubscription{Kind: m.Kind, Channel: m.Channel, Count: int64(m.Count)})
			}
		}
	}
}

// lose gives the connection up after a failure outside the reader: the reader ends with err.
func (d *dedicated) lose(err error) {
	d.mu.Lock()
	if d.err == nil {
		d.err = err
	}
	ps := d.ps
	d.mu.Unlock()
	if ps != nil {
		_ = ps.Close() // the reader's receive fails, and it ends
	}
}

// end is the reader's end (or, without a reader, the connection's): err is why, nil when Closed.
func (d *dedicated) end(err error) {
	d.mu.Lock()
	if d.err != nil && !d.closed {
		err = d.err
	}
	if d.closed {
		err = nil
	}
	d.err = err
	select {
	case <-d.ended:
		d.mu.Unlock()
		return
	default:
	}
	close(d.ended)
	gone, ps, stop := d.gone, d.ps, d.stop
	d.mu.Unlock()
	if stop != nil {
		stop()
	}
	if ps != nil {
		_ = ps.Close()
	}
	if gone != nil {
		if err != nil {
			gone <- err
		}
		close(gone)
	}
}

func (d *dedicated) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	if w := d.watchFor(nil); w != nil {
		return w.DoMulti(ctx, multi...)
	}
	return d.a.DoMulti(ctx, multi...)
}

// watchFor returns the watch's connection, opening it for a HELLO (words); nil when this is no watch's.
// A connection that cannot be opened leaves none: the HELLO then fails, and relock tries again later.
func (d *dedicated) watchFor(words []string) *watchConn {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.watch == nil && len(words) > 0 && strings.EqualFold(words[0], "HELLO") && !d.closed && d.ps == nil {
		if w, err := openWatch(d.a.rdb); err == nil {
			d.watch = w
		} else {
			d.watch = &watchConn{DedicatedClient: failed{err}}
		}
	}
	return d.watch
}

func (d *dedicated) Receive(context.Context, rueidis.Completed, func(rueidis.PubSubMessage)) error {
	return errNotSupported
}

// Close closes the connection: its hooks are called no more once the channel SetPubSubHooks returned is
// closed.
func (d *dedicated) Close() {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.closed = true
	started := d.stop != nil
	ps, stop, w := d.ps, d.stop, d.watch
	d.mu.Unlock()
	if w != nil {
		w.Close()
	}
	if !started {
		d.end(nil)
		return
	}
	stop()
	if ps != nil {
		_ = ps.Close()
	}
}
