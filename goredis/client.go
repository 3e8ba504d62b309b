package relockgoredis

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/mock"
)

// client is the rueidis.Client relock runs on: each command relock builds is sent through the go-redis
// client rdb, and each reply is made a rueidis reply (see reply.go). relock uses Do, DoMulti, B, Mode and
// Dedicate (for pub/sub, see pubsub.go); the rest answer errNotSupported.
type client struct {
	rdb     redis.UniversalClient
	cluster bool
	// ctxDeadline: rdb ends a call at its context's deadline (go-redis's ContextTimeoutEnabled). Without
	// it, a call runs on a goroutine of its own and is left to go-redis when its context ends.
	ctxDeadline bool
}

// errNotSupported answers the rueidis.Client methods that relock does not use over go-redis.
var errNotSupported = errors.New("relockgoredis: not supported over go-redis")

// builder is a rueidis command builder that computes no slot: go-redis routes the commands itself. rueidis
// makes its builders internally; its mock package (kept at rueidis's version) hands out the plain one.
var builder = mock.NewClient(nil).B()

func (a *client) B() rueidis.Builder { return builder }

func (a *client) Mode() rueidis.ClientMode {
	if a.cluster {
		return rueidis.ClientModeCluster
	}
	return rueidis.ClientModeStandalone
}

// noRetry is a go-redis command that go-redis never sends twice: a script run twice could take a lock
// or a permit twice (relock settles a call whose reply was lost itself).
type noRetry struct{ *redis.Cmd }

func (noRetry) NoRetry() bool { return true }

func newCmd(ctx context.Context, words []string) noRetry {
	args := make([]any, len(words))
	for i, w := range words {
		args[i] = w
	}
	return noRetry{redis.NewCmd(ctx, args...)}
}

func (a *client) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	words := cmd.Commands()
	if len(words) > 0 && strings.EqualFold(words[0], "XREAD") {
		return a.xread(ctx, words)
	}
	c := newCmd(ctx, words)
	if err := a.call(ctx, func(ctx context.Context) { _ = a.rdb.Process(ctx, c) }); err != nil {
		return rueidis.NewErrorResult(err)
	}
	return result(c.Cmd)
}

// DoMulti sends multi in one pipeline, on one connection of a single server (a command and the WAIT
// after it must share one), or one per node of a cluster.
func (a *client) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	cmds := make([]noRetry, len(multi))
	for i, m := range multi {
		cmds[i] = newCmd(ctx, m.Commands())
	}
	results := make([]rueidis.RedisResult, len(multi))
	err := a.call(ctx, func(ctx context.Context) {
		p := a.rdb.Pipeline()
		for _, c := range cmds {
			_ = p.Process(ctx, c)
		}
		_, _ = p.Exec(ctx)
	})
	for i, c := range cmds {
		if err != nil {
			results[i] = rueidis.NewErrorResult(err)
		} else {
			results[i] = result(c.Cmd)
		}
	}
	return results
}

// call runs send, and returns nil once it returned; or ctx's error, at once, when ctx ended first (rdb
// then does not end the call at the deadline: send goes on, its commands are not to be read).
func (a *client) call(ctx context.Context, send func(ctx context.Context)) error {
	if a.ctxDeadline || ctx.Done() == nil {
		send(ctx)
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		send(ctx)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// xreadBlock is the longest an XREAD blocks: go-redis does not end a read when its context is canceled
// (only at a deadline), so an observer's XREAD BLOCK 0 would outlive the observer; relock's observer
// reads again after a reply of no entries.
const xreadBlock = time.Second

// xread sends relock's XREAD BLOCK <ms> STREAMS <key> <id> (an Election's observer) through go-redis's
// XRead, which alone sets a blocking read's timeout, blocking xreadBlock at most; its reply is made RESP's
// (a map of one stream to its entries, each an id and its field-value pairs).
func (a *client) xread(ctx context.Context, words []string) rueidis.RedisResult {
	args := redis.XReadArgs{Block: -1, Count: 0}
	for i := 1; i < len(words); i++ {
		switch strings.ToUpper(words[i]) {
		case "BLOCK":
			if i+1 < len(words) {
				ms, err := time.ParseDuration(words[i+1] + "ms")
				if err != nil {
					return rueidis.NewErrorResult(err)
				}
				if ms == 0 || ms > xreadBlock {
					ms = xreadBlock
				}
				args.Block = ms
				i++
			}
		case "STREAMS":
			args.Streams = words[i+1:]
			i = len(words)
		}
	}
	var streams []redis.XStream
	var err error
	if cerr := a.call(ctx, func(ctx context.Context) { streams, err = a.rdb.XRead(ctx, &args).Result() }); cerr != nil {
		return rueidis.NewErrorResult(cerr)
	}
	if err != nil {
		return errorResult(err)
	}
	reply := make(map[any]any, len(streams))
	for _, s := range streams {
		entries := make([]any, len(s.Messages))
		for i, m := range s.Messages {
			fields := make([]any, 0, 2*len(m.Values))
			for k, v := range m.Values {
				fields = append(fields, k, v)
			}
			entries[i] = []any{m.ID, fields}
		}
		reply[s.Stream] = entries
	}
	return message(reply)
}

func (a *client) Dedicate() (rueidis.DedicatedClient, func()) {
	d := newDedicated(a)
	return d, d.Close
}

func (a *client) Dedicated(fn func(rueidis.DedicatedClient) error) error {
	d := newDedicated(a)
	defer d.Close()
	return fn(d)
}

func (a *client) Nodes() map[string]rueidis.Client { return map[string]rueidis.Client{"": a} }

// Close does nothing: rdb is the caller's, who closes it.
func (a *client) Close() {}

func (a *client) Receive(context.Context, rueidis.Completed, func(rueidis.PubSubMessage)) error {
	return errNotSupported
}

func (a *client) DoCache(context.Context, rueidis.Cacheable, time.Duration) rueidis.RedisResult {
	return rueidis.NewErrorResult(errNotSupported)
}

func (a *client) DoMultiCache(_ context.Context, multi ...rueidis.CacheableTTL) []rueidis.RedisResult {
	results := make([]rueidis.RedisResult, len(multi))
	for i := range results {
		results[i] = rueidis.NewErrorResult(errNotSupported)
	}
	return results
}

func (a *client) DoStream(context.Context, rueidis.Completed) rueidis.RedisResultStream {
	return mock.RedisResultStreamError(errNotSupported)
}

func (a *client) DoMultiStream(context.Context, ...rueidis.Completed) rueidis.MultiRedisResultStream {
	return mock.MultiRedisResultStreamError(errNotSupported)
}
