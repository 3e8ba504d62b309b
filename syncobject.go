package relock

import (
	"context"

	"github.com/redis/rueidis"
)

// syncObject is what a Semaphore and a CountDownLatch share: a Client, a name whose key holds a counter
// (a string, in Redisson's layouts), and the channel where changes of the counter are announced.
type syncObject struct {
	c       *Client
	kind    lockKind
	name    string
	keys    []string // the counter, its channel
	channel string
}

func newSyncObject(c *Client, kind lockKind, name, channel string) syncObject {
	return syncObject{c: c, kind: kind, name: name, keys: []string{name, channel}, channel: channel}
}

// check validates the object (nameOK: its kind's rule for names) and ctx before a call.
func (o *syncObject) check(ctx context.Context, nameOK bool) error {
	if err := o.c.check(); err != nil {
		return err
	}
	if !nameOK {
		return ErrInvalidName
	}
	return ctx.Err()
}

// value returns the counter, 0 when its key does not exist.
func (o *syncObject) value(ctx context.Context) (int64, error) {
	n, err := o.c.do(ctx, o.c.rdb.B().Get().Key(o.name).Build()).AsInt64()
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	return n, err
}

// announce runs script, which changes the counter and announces it on the channel, in a span called
// spanName; args come first, then the publish command. It returns the script's reply.
func (o *syncObject) announce(ctx context.Context, spanName string, script *script, args ...string) (int64, error) {
	ctx, span := o.c.tel.startSpan(ctx, spanName, o.kind, o.name)
	publish, err := o.c.publishCommand(ctx, o.channel)
	var n int64
	if err == nil {
		n, err = o.c.scripts.runInt(ctx, scriptCall{script: script, keys: o.keys, args: append(args, publish)})
	}
	out := outcomeReleased
	if err != nil {
		out = outcomeError
	}
	endSpan(span, out, err)
	return n, err
}
