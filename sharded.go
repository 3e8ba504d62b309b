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
	// costs nothing. A question that gets no reply (a broken connection, an ended context) settles nothing:
	// the operation fails as if its own command had (a wait's subscription and an Unlock are retried as
	// usual), and the next one asks again.
	ShardedPubSubAuto ShardedPubSub = iota
	// ShardedPubSubOn (Redisson's ON) always uses sharded pub/sub on a cluster. Without it (Redis 6),
	// every release and every wait fails.
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
// atomic load; until then (ShardedPubSubAuto) it asks the node of channel's slot, one caller at a time. An
// error means no answer came: nothing is settled, and the next call asks again.
func (c *Client) shardedPubSub(ctx context.Context, channel string) (bool, error) {
	if s := c.pubsub.Load(); s != pubUnknown {
		return s == pubSharded, nil
	}
	select {
	case c.probing <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-c.probing }()
	if s := c.pubsub.Load(); s != pubUnknown { // answered while this call waited its turn
		return s == pubSharded, nil
	}
	// Redisson's probe (PubSubConnectionService.checkShardingSupport): PUBSUB SHARDNUMSUB. Given a channel,
	// rueidis sends it to that channel's node, where the command that needs the answer goes too.
	err := c.do(ctx, c.rdb.B().PubsubShardnumsub().Channel(channel).Build()).Error()
	if _, ok := rueidis.IsRedisErr(err); ok && !transient(err) {
		c.pubsub.Store(pubPlain) // unknown subcommand (Redis 6), or denied: Redisson then uses PUBLISH too
		return false, nil
	}
	if err != nil {
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
