package relockgoredis

import (
	"context"
	"errors"
	"net"
	"strconv"
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
// not know that messages were missed meanwhile). Its life is a subPhase (see step).
type dedicated struct {
	a *client

	mu      sync.Mutex
	phase   subPhase
	hooks   rueidis.PubSubHooks
	gone    chan error // SetPubSubHooks's: at most one error, closed when the hooks are called no more
	ps      *redis.PubSub
	stop    context.CancelFunc         // ends the reader's context (reading only)
	waiting map[string][]chan struct{} // "<kind> <channel>" -> subscriptions waiting for the server's confirmation
	ended   chan struct{}              // closed on entering subEnded
	err     error                      // why it ended: nil when closed
	watch   *watchConn                 // the watch of holds' connection, opened at its HELLO (see watch.go)
}

// subPhase is where a dedicated connection is in its life:
//
//	event           idle           connecting          reading             ended
//	subscribe       connecting     (waits its turn)    reading             refused (ErrClosing or err)
//	subscribed      illegal        reading             illegal             ended: the PubSub is closed
//	lost(err)       illegal        ended(err)          ended(err)          ended (the first err stays)
//	close           ended          ended               ended               ended
//
// Entering ended closes the PubSub (if any), ends the reader, tells the hooks' channel the error (none
// when closed) and closes it, once. The subscriptions waiting for a confirmation return then.
type subPhase uint8

const (
	subIdle       subPhase = iota // no PubSub yet
	subConnecting                 // the first subscription is being sent; no reader yet
	subReading                    // the reader delivers messages and confirmations
	subEnded                      // lost or closed, for good
)

type subEvent uint8

const (
	evSubscribe  subEvent = iota // the first subscription is to be sent
	evSubscribed                 // the first subscription was sent: the reader starts
	evLost                       // the connection failed
	evClose                      // Close
)

// step applies ev to d (d.mu held) and returns what is to be done once d.mu is unlocked: the PubSub and
// the reader to end, and the hooks' channel to tell, when d ended now. It is the only code that changes
// d.phase; in test binaries the invariants are checked after it (see check).
func (d *dedicated) step(ev subEvent, err error) (end func()) {
	from := d.phase
	switch {
	case ev == evSubscribe && from == subIdle:
		d.phase = subConnecting
	case ev == evSubscribed && from == subConnecting:
		d.phase = subReading
	case ev == evSubscribed && from == subEnded: // closed while the first subscription was sent
		end = func() { _ = d.ps.Close() }
	case (ev == evLost || ev == evClose) && from != subEnded:
		if ev == evLost {
			d.err = err
		}
		d.phase = subEnded
		close(d.ended)
		ps, stop, gone, err := d.ps, d.stop, d.gone, d.err
		end = func() {
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
	case ev == evLost || ev == evClose: // ended already
	default:
		panic("relockgoredis: subscription event " + strconv.Itoa(int(ev)) + " in phase " + strconv.Itoa(int(from)))
	}
	d.check()
	return end
}

// check panics, in test binaries (see checkInvariants), when d's fields disagree with its phase.
func (d *dedicated) check() {
	if !checkInvariants {
		return
	}
	endedClosed := false
	select {
	case <-d.ended:
		endedClosed = true
	default:
	}
	ok := endedClosed == (d.phase == subEnded)
	switch d.phase {
	case subIdle:
		ok = ok && d.ps == nil && d.stop == nil
	case subConnecting:
		ok = ok && d.ps != nil && d.stop == nil
	case subReading:
		ok = ok && d.ps != nil && d.stop != nil
	}
	if !ok {
		panic("relockgoredis: a subscription connection's fields disagree with its phase " + strconv.Itoa(int(d.phase)))
	}
}

// checkInvariants turns check on; the package's tests set it.
var checkInvariants = false

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
	if d.phase == subEnded {
		err := d.err
		d.mu.Unlock()
		if err == nil {
			err = rueidis.ErrClosing
		}
		return err
	}
	confirmed := make([]chan struct{}, len(channels))
	for i, ch := range channels {
		confirmed[i] = make(chan struct{})
		d.waiting[kind+" "+ch] = append(d.waiting[kind+" "+ch], confirmed[i])
	}
	first := d.phase == subIdle
	if first {
		d.ps = d.a.rdb.Subscribe(ctx) // connects at the first subscription, to its channel's node
		d.step(evSubscribe, nil)
	}
	ps := d.ps
	d.mu.Unlock()
	var err error
	if kind == "ssubscribe" {
		err = ps.SSubscribe(ctx, channels...)
	} else {
		err = ps.Subscribe(ctx, channels...)
	}
	switch {
	case err != nil:
		d.event(evLost, err)
		return err
	case first:
		d.mu.Lock()
		var life context.Context
		if d.phase == subConnecting { // else closed while the subscription was sent
			life, d.stop = context.WithCancel(context.Background())
		}
		end := d.step(evSubscribed, nil)
		d.mu.Unlock()
		if end != nil {
			end()
		}
		if life != nil {
			go d.read(life, ps)
		}
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
			d.event(evLost, ctx.Err()) // the connection's state is not known: it is given up
			return ctx.Err()
		}
	}
	return nil
}

// event applies ev to d and does what it calls for.
func (d *dedicated) event(ev subEvent, err error) {
	d.mu.Lock()
	end := d.step(ev, err)
	d.mu.Unlock()
	if end != nil {
		end()
	}
}

// read delivers ps's messages until it is lost or Closed.
func (d *dedicated) read(life context.Context, ps *redis.PubSub) {
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(life, pingAfter)
		if life.Err() != nil {
			return // ended: Close, or a loss told already
		}
		if err != nil {
			var nerr net.Error
			if errors.As(err, &nerr) && nerr.Timeout() && !pinged {
				pinged = true
				if err := ps.Ping(life); err == nil {
					continue
				}
			}
			d.event(evLost, err)
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
	if d.watch == nil && len(words) > 0 && strings.EqualFold(words[0], "HELLO") && d.phase == subIdle {
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
	w := d.watch
	end := d.step(evClose, nil)
	d.mu.Unlock()
	if w != nil {
		w.Close()
	}
	if end != nil {
		end()
	}
}
