// Package relockgoredis runs relock on a go-redis v9 client (github.com/redis/go-redis/v9) that a service
// already has: every lock and synchronizer, with the same Redis keys, channels and messages as relock on
// rueidis (and as Redisson), every script and command sent through the client's own pool, but for the watch
// of holds' one connection (see below).
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
//	c, err := relockgoredis.New(rdb, nil)
//	if err != nil { ... }
//	defer c.Close()
//	l := c.Lock("orders:42")
//
// # What differs from relock on rueidis
//
//   - The watch of holds (a hold lost in Redis seen within milliseconds) reads Redis on a connection with
//     CLIENT TRACKING, whose invalidations go-redis does not deliver. On a single server (a failover
//     client's master included) relock makes that one connection with rueidis, from rdb's own options:
//     its dialer (address, TLS, Sentinel's current master), user and password or credentials provider,
//     database and client name. On a cluster the watch is off, as for a rueidis cluster client given to
//     relock.Wrap: a hold lost in Redis is seen at its next renewal, within a third of the watchdog
//     timeout. Options.NoHoldWatch turns it off everywhere.
//   - Waits use pub/sub on connections of go-redis's PubSub, one per single server (a Client's waits share
//     it), one per channel on a cluster, as relock on rueidis does. Each is pinged after a second without
//     traffic, and one that does not answer within another second is taken as lost: relock subscribes
//     again and its waiters try at once.
//   - go-redis retries a command whose connection broke after it was written (Options.MaxRetries). relock
//     sends its scripts and its pipelines so that go-redis never retries them (go-redis's per-command
//     NoRetry, v9.20 on): a script run twice could take a lock or a permit twice. relock settles a call
//     whose reply was lost itself, as on rueidis.
//   - Deadlines: with Options.ContextTimeoutEnabled, go-redis ends a call at its context's deadline.
//     Without it, go-redis reads a reply until its ReadTimeout (3 s by default); relock then returns at
//     the caller's deadline all the same, and leaves the command to go-redis (its connection is given back
//     once the reply came, or dropped at ReadTimeout). ContextTimeoutEnabled is recommended: it spares a
//     goroutine per call.
//
// Supported clients: *redis.Client (a standalone server, or a Sentinel-managed one from
// redis.NewFailoverClient) and *redis.ClusterClient (redis.NewClusterClient, redis.NewFailoverClusterClient).
// A *redis.Ring is not: its shards are not a cluster's slots, and relock's keys of one lock must meet on
// one server. The Client does not close rdb: close it after the Client.
package relockgoredis

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/relock-go/relock"
)

// New returns a relock Client that sends its commands through rdb (the watch of holds' excepted, see the
// package documentation). opts are relock's options, as for relock.Wrap; their Redis field is not used.
//
// New fails with relock.ErrNilClient for a nil rdb, and with relock.ErrInvalidOptions for a client type it
// does not support (a *redis.Ring). It sends nothing to Redis.
func New(rdb redis.UniversalClient, opts *relock.Options) (*relock.Client, error) {
	a, err := adapt(rdb)
	if err != nil {
		return nil, err
	}
	if a == nil {
		return relock.Wrap(nil, opts) // relock's own ErrNilClient
	}
	return relock.Wrap(a, opts)
}

// adapt returns the rueidis.Client that relock uses over rdb (nil for a nil rdb).
func adapt(rdb redis.UniversalClient) (*client, error) {
	switch r := rdb.(type) {
	case nil:
		return nil, nil
	case *redis.Client:
		if r == nil {
			return nil, nil
		}
		return &client{rdb: r, ctxDeadline: r.Options().ContextTimeoutEnabled}, nil
	case *redis.ClusterClient:
		if r == nil {
			return nil, nil
		}
		return &client{rdb: r, cluster: true, ctxDeadline: r.Options().ContextTimeoutEnabled}, nil
	default:
		return nil, fmt.Errorf("relockgoredis: %w: a %T (relock runs on a *redis.Client, failover included, or a *redis.ClusterClient)",
			relock.ErrInvalidOptions, rdb)
	}
}
