package relock

import (
	"context"

	"github.com/redis/rueidis"
)

// ShardedPubSub says how releases are announced and heard on Redis Cluster, like Redisson's
// shardedSubscriptionMode, which it must match: set it to what the Java services that share the locks use.
// A node delivers SPUBLISH only to SSUBSCRIBE and PUBLISH only to SUBSCRIBE, so a waiter that listens the
// other way misses every release and waits until the holder's TTL runs out.
//
// With sharded pub/sub (Redis 7 and later), a release is published with SPUBLISH on the shard that owns the
// lock's slot, where waiters hold an SSUBSCRIBE. With plain pub/sub, a release is published with PUBLISH,
// which the cluster broadcasts to every node, and waiters hold a SUBSCRIBE on any node. Either way a
// subscription lost to a failover, a slot migration or a broken connection is made again, and its waiters
// retry. On a single server relock always uses PUBLISH and SUBSCRIBE, as Redisson does there.
type ShardedPubSub int

const (
	// ShardedPubSubAuto, the default (Redisson's AUTO), uses sharded pub/sub if the cluster supports it.
	// As Redisson does, relock asks with PUBSUB SHARDNUMSUB, once per Client: a reply means sharded, an
	// error reply (Redis 6 does not know the command; an ACL may deny it) means plain. It asks when it
	// first needs to know, at the Client's first wait or release, not in New or Wrap; after that, knowing
	// costs nothing. The operations that need to know at the same time share one question: one whose
	// context ends stops waiting, and the others still get the answer. A question that gets no reply (a
	// broken connection) settles nothing: the operations waiting for it fail as if their own command had
	// (a wait's subscription and an Unlock are retried as usual), and the next one asks again.
	ShardedPubSubAuto ShardedPubSub = iota
	// ShardedPubSubOn (Redisson's ON) always uses sharded pub/sub on a cluster. Without it (Redis 6),
	// every wait fails at once, and every Unlock returns an error (unknown command SPUBLISH) although the
	// release took effect in Redis: the script had deleted the lock before its SPUBLISH failed, and Redis
	// keeps a script's writes made before an error. Use it only on Redis 7 and later.
	ShardedPubSubOn
	// ShardedPubSubOff (Redisson's OFF) always uses plain pub/sub.
	ShardedPubSubOff
)

// What Client.pubsub holds.
const (
	pubUnknown int32 = iota
	pubPlain
	pubSharded
)

// shardedPubSub reports whether releases are announced with sharded pub/sub. Once that is known it costs an
// atomic load; until then (ShardedPubSubAuto) it asks the node of channel's slot. An error means no answer
// came: nothing is settled, and the next call asks again.
func (c *Client) shardedPubSub(ctx context.Context, channel string) (bool, error) {
	if s := c.pubsub.Load(); s != pubUnknown {
		return s == pubSharded, nil
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	// The callers that need the answer at once share one question, asked under the Client's lifetime, not
	// the first caller's ctx: a caller whose ctx ends stops waiting, and the others still get the answer.
	answer := c.probe.DoChan("", func() (any, error) { return c.probeShardedPubSub(channel) })
	select {
	case r := <-answer:
		if r.Err != nil {
			return false, r.Err
		}
		return r.Val.(bool), nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// probeShardedPubSub asks Redis whether releases are announced with sharded pub/sub, and records the answer.
func (c *Client) probeShardedPubSub(channel string) (bool, error) {
	if s := c.pubsub.Load(); s != pubUnknown { // answered by the question before this one
		return s == pubSharded, nil
	}
	// Redisson's probe (PubSubConnectionService.checkShardingSupport): PUBSUB SHARDNUMSUB. Given a channel,
	// rueidis sends it to that channel's node, where the command that needs the answer goes too. Its bounds
	// are those of a call without a deadline (see Client.exec), and Close's end.
	err := c.do(c.life, c.rdb.B().PubsubShardnumsub().Channel(channel).Build()).Error()
	if _, ok := rueidis.IsRedisErr(err); ok && !transient(err) {
		c.pubsub.Store(pubPlain) // unknown subcommand (Redis 6), or denied: Redisson then uses PUBLISH too
		return false, nil
	}
	if err != nil {
		if c.life.Err() != nil {
			return false, ErrClosed
		}
		return false, err
	}
	c.pubsub.Store(pubSharded)
	return true, nil
}

// publishCommand returns the command the scripts announce releases with: "spublish" or "publish". See
// shardedPubSub; channel is one in the slot of the lock that is released.
func (c *Client) publishCommand(ctx context.Context, channel string) (string, error) {
	sharded, err := c.shardedPubSub(ctx, channel)
	if err != nil {
		return "", err
	}
	return publishCommandOf(sharded), nil
}

// knownPublishCommand returns the command the scripts announce releases with, or "" while it is unknown.
func (c *Client) knownPublishCommand() string {
	switch c.pubsub.Load() {
	case pubPlain:
		return publishCommandOf(false)
	case pubSharded:
		return publishCommandOf(true)
	}
	return ""
}

func publishCommandOf(sharded bool) string {
	if sharded {
		return "spublish"
	}
	return "publish"
}
