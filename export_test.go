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

// Abandon closes c as its process dying would leave things: nothing is given up in Redis (holds, permits
// and queue entries expire by themselves), background work is cancelled, and hold contexts end with a
// cause matching ErrLockLost and ErrClosed. Tests of what happens when a holder dies use it; Close gives
// everything up.
func Abandon(c *Client) {
	c.once.Do(func() { _ = c.shutdown(context.Background(), true) })
}

// CallerToken returns the owner token of a call made with ctx on the calling goroutine: the WithOwner
// token, else the goroutine's ID.
func CallerToken(ctx context.Context) string {
	token, _ := ownerToken(ctx)
	return token
}

// GateWaiters tells a test how many acquisitions of the Lock name wait in c's gate (see gates): its head,
// if any, and those queued behind it.
func GateWaiters(c *Client, name string) int { return c.gates.waiters(name) }

// Gates tells a test how many gates c has (see gates): one per Lock name that has waiters in c, or a
// handoff on its way.
func Gates(c *Client) int { return c.gates.count() }

// HoldWatchOff tells a test whether c's watch of holds has turned itself off for good (or c has none).
func HoldWatchOff(c *Client) bool {
	if c.watch == nil {
		return true
	}
	c.watch.mu.Lock()
	defer c.watch.mu.Unlock()
	return c.watch.off
}
