package relock

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// The watch of holds' link to Redis (see holdWatch): a connection with client-side tracking on a single
// server, a caching rueidis client on a cluster; and which refusals of Redis turn the watch off for good.

// refusedForGood reports whether err, the failure to make the watch's link or to read a hold on it, is one
// that trying again cannot mend: the server refuses the command (an ACL without it: NOPERM; a server
// without it: an unknown command), or the connection speaks RESP2, on which tracking sends no
// invalidations. Anything else (BUSY, LOADING, MASTERDOWN, TRYAGAIN, a connection lost or timed out...)
// may go away by itself: the link is made, or the hold read, again.
func refusedForGood(err error) bool {
	switch {
	case errors.Is(err, errNoRESP3) || errors.Is(err, ErrInvalidOptions) || permanent(err):
		return true
	case errors.Is(err, rueidis.ErrNoCache):
		// A cluster's caching client: its connection's handshake could not turn tracking on, for the
		// reason in the text (none when the connection speaks RESP2).
		return err == rueidis.ErrNoCache || refusalForGood(err.Error())
	}
	if rerr, ok := redisReply(err); ok {
		return refusalForGood(rerr.Error())
	}
	return false
}

// refusalForGood reports whether msg, an error reply of Redis, says that the command is not allowed or
// not known.
func refusalForGood(msg string) bool {
	msg = strings.ToLower(msg)
	return strings.Contains(msg, "noperm") || strings.Contains(msg, "unknown command") ||
		strings.Contains(msg, "unknown subcommand")
}

// errNoRESP3 is the watch's link refused because its connection speaks RESP2: Redis sends a RESP2
// connection with tracking on no invalidation (it would need REDIRECT to another, subscribed, connection).
var errNoRESP3 = errors.New("relock: the connection speaks RESP2: client-side tracking sends it no invalidations")

// watchLink is the watch's link to Redis: reads that have Redis track the keys they read, and the
// invalidations that follow, which go to holdWatch.invalidated.
type watchLink interface {
	// read sends cmds, one read of a hold each, and returns their replies.
	read(ctx context.Context, cmds []watchRead) []rueidis.RedisResult
	// lost is closed (or gets an error) when the link is gone; nil when the link restores itself.
	lost() <-chan error
	// broken reports whether a read's error means the link is unusable.
	broken(err error) bool
	close()
}

// watchRead is one read of a hold: HEXISTS of a lock's owner field, or ZSCORE of a permit.
type watchRead struct {
	key, field string
	zset       bool
}

// connect makes the watch's link: on a single server, a connection of its own (taken from the Client's
// rueidis client) with CLIENT TRACKING on; on a cluster, a rueidis client of its own with client-side
// caching on, which keeps tracking on each node's connection and follows the cluster's topology (a Client
// made by Wrap has none: its options are not known).
func (hw *holdWatch) connect(life context.Context) (watchLink, error) {
	if hw.c.cluster {
		if hw.c.watchOption == nil {
			return nil, errorf("%w: no options for a watch of a wrapped cluster client", ErrInvalidOptions)
		}
		opt := *hw.c.watchOption
		opt.DisableCache = false
		opt.OnInvalidations = hw.invalidated
		rdb, err := rueidis.NewClient(opt)
		if err != nil {
			return nil, err
		}
		return cachingLink{rdb}, nil
	}
	if o := hw.c.watchOption; o != nil && o.AlwaysRESP2 {
		return nil, errNoRESP3
	}
	// The connection is closed when it is done with, never given back to rueidis's pool (the release that
	// Dedicate returns): given back, a connection that had hooks is sent UNSUBSCRIBE, PING, PUNSUBSCRIBE,
	// PING, SUNSUBSCRIBE, PING, DISCARD, and rueidis (v1.0.79) takes a BUSY reply to an UNSUBSCRIBE (or
	// a LOADING one) for the reply to the PING after it, so that the replies left over find no command:
	// its reader panics ("protocol bug, message handled out of order"), ending the process. A server
	// running a slow script answers BUSY to all but a few commands. Closing sends only a PING, and the
	// connection goes.
	conn, _ := hw.c.rdb.Dedicate()
	ctx, cancel := context.WithTimeout(life, subscribeTimeout)
	defer cancel()
	// HELLO without a version (Redis 6.2 on) tells the connection's protocol: a rueidis client given to
	// Wrap may speak RESP2. Where the server refuses it (before 6.2), the connection is taken to speak
	// RESP3, as rueidis's do unless AlwaysRESP2, which New's options tell above.
	hello, err := conn.Do(ctx, conn.B().Hello().Build()).AsMap()
	if _, refused := redisReply(err); err != nil && !refused {
		conn.Close()
		return nil, err
	}
	if proto, ok := hello["proto"]; ok {
		if n, _ := proto.AsInt64(); n < 3 {
			conn.Close()
			return nil, errNoRESP3
		}
	}
	lost := conn.SetOnInvalidations(hw.invalidated)
	if err := conn.Do(ctx, conn.B().ClientTracking().On().Build()).Error(); err != nil {
		conn.Close()
		return nil, err
	}
	return dedicatedLink{conn: conn, gone: lost}, nil
}

// dedicatedLink is a single server's link: one dedicated connection with CLIENT TRACKING on.
type dedicatedLink struct {
	conn rueidis.DedicatedClient
	gone <-chan error
}

func (l dedicatedLink) read(ctx context.Context, reads []watchRead) []rueidis.RedisResult {
	cmds := make(rueidis.Commands, len(reads))
	for i, r := range reads {
		if r.zset {
			cmds[i] = l.conn.B().Zscore().Key(r.key).Member(r.field).Build()
		} else {
			cmds[i] = l.conn.B().Hexists().Key(r.key).Field(r.field).Build()
		}
	}
	return l.conn.DoMulti(ctx, cmds...)
}

func (l dedicatedLink) lost() <-chan error { return l.gone }

// broken: a read that got no reply means the connection is gone or stalled; one that got an error reply
// (BUSY...) is read again on the same connection.
func (l dedicatedLink) broken(err error) bool {
	_, replied := redisReply(err)
	return !replied
}

// close closes the connection (see connect: never given back to rueidis's pool).
func (l dedicatedLink) close() { l.conn.Close() }

// cachingLink is a cluster's link: a rueidis client with client-side caching, whose cached reads are
// tracked on the connection to the key's node. A read that is cached already costs no round trip; one
// whose key changed was dropped from the cache by its invalidation, and goes to Redis, tracked again.
type cachingLink struct{ rdb rueidis.Client }

// watchCacheTTL is how long a watched hold's read stays in the cache: the invalidation of its key drops
// it sooner, and a read after it ends goes to Redis, tracked again.
const watchCacheTTL = time.Hour

func (l cachingLink) read(ctx context.Context, reads []watchRead) []rueidis.RedisResult {
	cmds := make([]rueidis.CacheableTTL, len(reads))
	for i, r := range reads {
		if r.zset {
			cmds[i] = rueidis.CT(l.rdb.B().Zscore().Key(r.key).Member(r.field).Cache(), watchCacheTTL)
		} else {
			cmds[i] = rueidis.CT(l.rdb.B().Hexists().Key(r.key).Field(r.field).Cache(), watchCacheTTL)
		}
	}
	return l.rdb.DoMultiCache(ctx, cmds...)
}

// lost: nil, rueidis restores the connections (and tells their loss as a flush, OnInvalidations(nil)).
func (l cachingLink) lost() <-chan error { return nil }

// broken: never, the client reconnects by itself; the holds are read again.
func (l cachingLink) broken(error) bool { return false }

func (l cachingLink) close() { l.rdb.Close() }
