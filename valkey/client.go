package relockvalkey

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/mock"
	"github.com/valkey-io/valkey-go"
)

// client is the rueidis.Client relock runs on: each command relock builds is rebuilt with vk's builder and
// sent through vk, and each reply converted (see message). relock uses Do, DoMulti, B, Mode and Dedicate;
// the rest answer errNotSupported.
type client struct{ vk valkey.Client }

// errNotSupported answers the rueidis.Client methods that relock does not use over valkey-go.
var errNotSupported = errors.New("relockvalkey: not supported over valkey-go")

// builder is a rueidis command builder that computes no slot (vk's builder computes it again). rueidis
// makes its builders internally; its mock package (kept at rueidis's version) hands out the plain one.
var builder = mock.NewClient(nil).B()

func (a *client) B() rueidis.Builder { return builder }

func (a *client) Mode() rueidis.ClientMode {
	switch a.vk.Mode() {
	case valkey.ClientModeCluster:
		return rueidis.ClientModeCluster
	case valkey.ClientModeSentinel:
		return rueidis.ClientModeSentinel
	}
	return rueidis.ClientModeStandalone
}

func (a *client) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	return result(a.vk.Do(ctx, convert(a.vk.B(), cmd)))
}

func (a *client) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	return doMulti(ctx, a.vk, multi)
}

func doMulti(ctx context.Context, vk valkey.CoreClient, multi []rueidis.Completed) []rueidis.RedisResult {
	cmds := make(valkey.Commands, len(multi))
	for i, m := range multi {
		cmds[i] = convert(vk.B(), m)
	}
	replies := vk.DoMulti(ctx, cmds...)
	results := make([]rueidis.RedisResult, len(replies))
	for i, r := range replies {
		results[i] = result(r)
	}
	return results
}

func (a *client) Dedicate() (rueidis.DedicatedClient, func()) {
	d, release := a.vk.Dedicate()
	return dedicated{d}, release
}

func (a *client) Dedicated(fn func(rueidis.DedicatedClient) error) error {
	return a.vk.Dedicated(func(d valkey.DedicatedClient) error { return fn(dedicated{d}) })
}

func (a *client) Nodes() map[string]rueidis.Client {
	nodes := make(map[string]rueidis.Client)
	for addr, n := range a.vk.Nodes() {
		nodes[addr] = &client{vk: n}
	}
	return nodes
}

// Close does nothing: vk is the caller's, who closes it.
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

// dedicated is a dedicated connection of vk: relock's subscriptions (its hub) and, on a single server, its
// watch of holds (CLIENT TRACKING's invalidations).
type dedicated struct{ d valkey.DedicatedClient }

func (d dedicated) B() rueidis.Builder { return builder }

func (d dedicated) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	return result(d.d.Do(ctx, convert(d.d.B(), cmd)))
}

func (d dedicated) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	return doMulti(ctx, d.d, multi)
}

func (d dedicated) Receive(context.Context, rueidis.Completed, func(rueidis.PubSubMessage)) error {
	return errNotSupported
}

func (d dedicated) Close() { d.d.Close() }

func (d dedicated) SetPubSubHooks(hooks rueidis.PubSubHooks) <-chan error {
	var h valkey.PubSubHooks
	if hooks.OnMessage != nil {
		h.OnMessage = func(m valkey.PubSubMessage) {
			hooks.OnMessage(rueidis.PubSubMessage{Pattern: m.Pattern, Channel: m.Channel, Message: m.Message})
		}
	}
	if hooks.OnSubscription != nil {
		h.OnSubscription = func(s valkey.PubSubSubscription) {
			hooks.OnSubscription(rueidis.PubSubSubscription{Kind: s.Kind, Channel: s.Channel, Count: s.Count})
		}
	}
	return d.d.SetPubSubHooks(h)
}

func (d dedicated) SetOnInvalidations(fn func([]rueidis.RedisMessage)) <-chan error {
	return d.d.SetOnInvalidations(func(keys []valkey.ValkeyMessage) {
		if keys == nil {
			fn(nil) // a flush: every key
			return
		}
		msgs := make([]rueidis.RedisMessage, len(keys))
		for i := range keys {
			msgs[i] = message(&keys[i])
		}
		fn(msgs)
	})
}

// convert rebuilds cmd with valkey-go's builder b: subscriptions with its own builders (valkey-go reads
// their replies as pushes only then), any other command as an arbitrary one, its keys marked so that a
// cluster client sends it to their slot's node.
func convert(b valkey.Builder, cmd rueidis.Completed) valkey.Completed {
	words := cmd.Commands()
	name := strings.ToUpper(words[0])
	switch name {
	case "SUBSCRIBE":
		return b.Subscribe().Channel(words[1:]...).Build()
	case "SSUBSCRIBE":
		return b.Ssubscribe().Channel(words[1:]...).Build()
	case "UNSUBSCRIBE":
		return b.Unsubscribe().Channel(words[1:]...).Build()
	case "SUNSUBSCRIBE":
		return b.Sunsubscribe().Channel(words[1:]...).Build()
	}
	from, to := keys(name, words)
	arb := b.Arbitrary(words[:from]...).Keys(words[from:to]...).Args(words[to:]...)
	if cmd.IsBlock() {
		return arb.Blocking()
	}
	return arb.Build()
}

// keys returns where the keys of the command words are, words[from:to]: the commands relock sends have
// theirs after the name (EVAL and EVALSHA after the script and the count, XREAD after STREAMS), or none.
func keys(name string, words []string) (from, to int) {
	switch name {
	case "EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO":
		if len(words) < 3 {
			return len(words), len(words)
		}
		n, err := strconv.Atoi(words[2])
		if err != nil || 3+n > len(words) {
			return len(words), len(words)
		}
		return 3, 3 + n
	case "XREAD":
		for i, w := range words {
			if strings.EqualFold(w, "STREAMS") {
				return i + 1, i + 1 + (len(words)-i-1)/2
			}
		}
		return len(words), len(words)
	case "PING", "WAIT", "HELLO", "CLIENT", "PUBSUB", "TIME", "INFO", "SCRIPT", "CLUSTER", "PUBLISH", "SPUBLISH":
		return len(words), len(words)
	}
	if len(words) < 2 {
		return len(words), len(words)
	}
	return 1, 2
}

// result converts a valkey-go reply: a reply, error replies and nil included, keeps its form; a failure
// without one (the connection, a closed client) is the call's error, rueidis's own for a closed client.
func result(r valkey.ValkeyResult) rueidis.RedisResult {
	if err := r.NonValkeyError(); err != nil {
		if errors.Is(err, valkey.ErrClosing) {
			err = rueidis.ErrClosing
		}
		return rueidis.NewErrorResult(err)
	}
	m, _ := r.ToMessage()
	return rueidis.NewResult(message(&m), nil)
}

// message converts a valkey-go message by the form both clients keep cached replies in (their
// CacheMarshal, which rueidis reads back with CacheUnmarshalView).
func message(m *valkey.ValkeyMessage) rueidis.RedisMessage {
	var out rueidis.RedisMessage
	if err := out.CacheUnmarshalView(m.CacheMarshal(nil)); err != nil {
		return errorMessage("ERR relockvalkey: a reply rueidis cannot read: " + err.Error())
	}
	return out
}

// errorMessage is an error reply with msg, built by the same form.
func errorMessage(msg string) rueidis.RedisMessage {
	buf := make([]byte, 7, 16+len(msg))
	buf = append(buf, '-')
	n := uint64(len(msg))
	buf = append(buf, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32), byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	buf = append(buf, msg...)
	var out rueidis.RedisMessage
	_ = out.CacheUnmarshalView(buf)
	return out
}
