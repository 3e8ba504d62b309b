// Package relockvalkey runs relock on a valkey-go client (github.com/valkey-io/valkey-go, rueidis's fork
// for Valkey) that a service already has: every lock and synchronizer, with the same keys, channels and
// messages as relock on rueidis (and as Redisson), every command sent through the client given.
//
//	vk, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{"localhost:6379"}})
//	if err != nil { ... }
//	c, err := relockvalkey.New(vk, nil)
//	if err != nil { ... }
//	defer c.Close()
//	l := c.Lock("orders:42")
//
// relock on valkey-go is relock.Wrap on a rueidis client, with what Wrap's documentation says of the
// client's options (valkey-go's are rueidis's: AlwaysPipelining, DisableRetry). What differs from relock
// on rueidis:
//
//   - On a cluster the watch of holds is off, as for a rueidis cluster client given to Wrap: relock would
//     need a client of its own with client-side caching, made from options it does not have. A hold lost
//     in Redis is seen at its next renewal (within a third of the watchdog timeout). On a single server
//     the watch runs on a dedicated connection of the client, as on rueidis.
//   - Commands go out as valkey-go's arbitrary commands (relock's subscriptions as its SUBSCRIBE and
//     SSUBSCRIBE, which valkey-go must know), and each reply is converted once, from the form valkey-go
//     and rueidis both keep cached replies in.
//
// Valkey 7.2 and 8 run relock's scripts and keys as Redis 7 does; relock uses nothing Valkey lacks.
// The Client does not close vk: close it after the Client.
package relockvalkey

import (
	"github.com/valkey-io/valkey-go"

	"github.com/relock-go/relock"
)

// New returns a relock Client that sends every command through vk. opts are relock's options, as for
// relock.Wrap (their Redis field is not used). New fails with relock.ErrNilClient for a nil vk, and sends
// nothing to Redis.
func New(vk valkey.Client, opts *relock.Options) (*relock.Client, error) {
	if vk == nil {
		return relock.Wrap(nil, opts)
	}
	return relock.Wrap(&client{vk: vk}, opts)
}
