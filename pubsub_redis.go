package relock

import (
	"context"

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
	// it unsubscribes and returns. confirmed runs on the reader, and must not block, when the node
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
	conn, _ := s.rdb.Dedicate() // conn.Close releases it
	lost := conn.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: func(m rueidis.PubSubMessage) { onMessage(m.Channel, m.Message) }})
	return dedicatedConn{conn}, lost
}

func (s redisSubscriber) receive(ctx context.Context, channel string, sharded bool, confirmed func(), onMessage func(channel, message string)) error {
	sub, kind := s.rdb.B().Subscribe().Channel(channel).Build(), "subscribe"
	if sharded {
		sub, kind = s.rdb.B().Ssubscribe().Channel(channel).Build(), "ssubscribe"
	}
	sctx := rueidis.WithOnSubscriptionHook(ctx, func(s rueidis.PubSubSubscription) {
		if s.Kind == kind {
			confirmed()
		}
	})
	sctx = rueidis.WithOnReceiveReturnHook(sctx, func(err error, c rueidis.CommandClient) error {
		if ctx.Err() != nil { // leaving: cancelling Receive does not unsubscribe by itself
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), subscribeTimeout)
			unsub := c.B().Unsubscribe().Channel(channel).Build()
			if sharded {
				unsub = c.B().Sunsubscribe().Channel(channel).Build()
			}
			_ = c.Do(uctx, unsub).Error()
			cancel()
		}
		return err
	})
	return s.rdb.Receive(sctx, sub, func(m rueidis.PubSubMessage) { onMessage(m.Channel, m.Message) })
}

// dedicatedConn is a rueidis dedicated connection carrying the hub's subscriptions.
type dedicatedConn struct{ conn rueidis.DedicatedClient }

func (c dedicatedConn) subscribe(ctx context.Context, channels []string) error {
	return c.conn.Do(ctx, c.conn.B().Subscribe().Channel(channels...).Build()).Error()
}

func (c dedicatedConn) unsubscribe(ctx context.Context, channels []string) error {
	return c.conn.Do(ctx, c.conn.B().Unsubscribe().Channel(channels...).Build()).Error()
}

func (c dedicatedConn) close() { c.conn.Close() }
