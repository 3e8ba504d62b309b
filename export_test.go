package relock

import "context"

// PubSubKnown tells a test what c knows of how releases are announced: "sharded", "plain", or "" while
// ShardedPubSubAuto has not found out yet.
func PubSubKnown(c *Client) string {
	switch c.pubsub.Load() {
	case pubSharded:
		return "sharded"
	case pubPlain:
		return "plain"
	}
	return ""
}

// ShardedPubSubFor is what c does when it needs to know how releases on channel are announced.
func ShardedPubSubFor(ctx context.Context, c *Client, channel string) (bool, error) {
	return c.shardedPubSub(ctx, channel)
}

// CallerToken returns the owner token of a call made with ctx on the calling goroutine: the WithOwner
// token, else the goroutine's ID.
func CallerToken(ctx context.Context) string {
	token, _ := ownerToken(ctx)
	return token
}
