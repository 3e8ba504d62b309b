package relock

import (
	"context"
)

// syncObject is what a Semaphore and a CountDownLatch share: a Client, a name whose key holds a counter
// (a string, in Redisson's layouts), and the channel where changes of the counter are announced.
type syncObject struct {
	c    *Client
	kind lockKind
	name string
	// keys are the keys of the scripts that change the counter and announce it: the counter, its channel
	// (and, for a latch, "{name}:timeout", which makes the name a PermitSemaphore's: lua/lib/kinds.lua).
	keys []string
	// counterKeys are the counter and "{name}:timeout": the keys of reading, or taking from, the counter.
	counterKeys []string
	channel     string
}

func newSyncObject(c *Client, kind lockKind, name, channel string) syncObject {
	permits := permitsKey(name)
	keys := []string{name, permits, name, channel, permits}
	o := syncObject{c: c, kind: kind, name: name, keys: keys[2:4:4], counterKeys: keys[0:2:2], channel: channel}
	if kind == kindLatch {
		o.keys = keys[2:5:5]
	}
	return o
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

// value returns the counter, 0 when its key does not exist, in one script run that refuses a key of
// another kind (lua/counter_read.lua): a latch refuses a PermitSemaphore with permits taken too.
func (o *syncObject) value(ctx context.Context) (int64, error) {
	refusePermits := ""
	if o.kind == kindLatch {
		refusePermits = "1"
	}
	return o.c.run(ctx, scriptCounterRead, o.counterKeys, []string{refusePermits}).AsInt64()
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
