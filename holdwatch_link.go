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

// watchLink is the watch's link to Redis: reads that have Redis track the keys of the holds they find, and
// the invalidations that follow, which go to holdWatch.invalidated.
type watchLink interface {
	// read reads the holds, one reply each, and has Redis track the keys of those it finds (and only
	// those: see dedicatedLink.read).
	read(ctx context.Context, reads []watchRead) []watchReply
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

// command returns the read's command.
func (r watchRead) command(b rueidis.Builder) rueidis.Completed {
	if r.zset {
		return b.Zscore().Key(r.key).Member(r.field).Build()
	}
	return b.Hexists().Key(r.key).Field(r.field).Build()
}

// watchReply is a read's reply: its error is the call's, an error reply or, for ZSCORE, rueidis.Nil.
type watchReply struct {
	msg rueidis.RedisMessage
	err error
}

func replyOf(r rueidis.RedisResult) watchReply {
	m, err := r.ToMessage()
	return watchReply{m, err}
}

// there tells what the reply says of the hold: there (true), gone or its key of another type now
// (WRONGTYPE) (false), or not known (an error: no reply, or an error reply such as BUSY or LOADING).
func (r watchReply) there(zset bool) (bool, error) {
	err := r.err
	if zset { // ZSCORE: nil when the member is gone
		if rueidis.IsRedisNil(err) {
			return false, nil
		}
	} else if err == nil {
		var n int64
		n, err = r.msg.AsInt64()
		if err == nil {
			return n == 1, nil
		}
	}
	if err == nil {
		return true, nil
	}
	if rerr, replied := redisReply(err); replied && strings.HasPrefix(rerr.Error(), "WRONGTYPE") {
		return false, nil
	}
	return false, err
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
	if err := conn.Do(ctx, conn.B().ClientTracking().On().Optin().Build()).Error(); err != nil {
		conn.Close()
		return nil, err
	}
	return &singleLink{dedicatedLink: dedicatedLink{conn: conn, gone: lost}, rdb: hw.c.rdb}, nil
}

// singleLink is a single server's link: a dedicatedLink read as an exactLink, or, where the user may not
// send what an exactLink reads with (the ACL block that docs/operations.md gave before them did not allow
// them), as a checkedLink. Which one is found at its first read (a Client whose holds never last
// watchDelay sends nothing but the connection's set-up): see read.
type singleLink struct {
	dedicatedLink
	rdb rueidis.Client
	how linkMode
}

// linkMode is how a singleLink reads: not known yet, exactly, or checked first on the Client's own
// connections.
type linkMode int

const (
	modeUnknown linkMode = iota
	modeExact
	modeChecked
)

func (l *singleLink) read(ctx context.Context, reads []watchRead) []watchReply {
	if l.how == modeUnknown {
		if err := l.findMode(ctx); err != nil {
			replies := make([]watchReply, len(reads))
			for i := range replies {
				replies[i] = watchReply{err: err}
			}
			return replies
		}
	}
	if l.how == modeChecked {
		return checkedLink{dedicatedLink: l.dedicatedLink, rdb: l.rdb}.read(ctx, reads)
	}
	return exactLink{l.dedicatedLink}.read(ctx, reads)
}

// findMode tries what an exactLink reads with; refused for good, it turns the connection's tracking to
// plain ON (every read tracked) for a checkedLink.
func (l *singleLink) findMode(ctx context.Context) error {
	b := l.conn.B()
	res := l.conn.DoMulti(ctx, b.Unwatch().Build(), b.ClientCaching().Yes().Build(), b.Multi().Build(), b.Exec().Build())
	for i, r := range res {
		err := r.Error()
		if err == nil {
			continue
		}
		if !refusedForGood(err) {
			return err
		}
		if i == 3 && res[2].Error() == nil {
			// MULTI began a transaction that EXEC could not end. Redis 7 discards it with the refusal
			// (EXECABORT); an earlier server may not, and this DISCARD then ends it (else: an error, ignored).
			l.conn.Do(ctx, b.Discard().Build())
		}
		if err := l.conn.Do(ctx, b.ClientTracking().Off().Build()).Error(); err != nil {
			return err
		}
		if err := l.conn.Do(ctx, b.ClientTracking().On().Build()).Error(); err != nil {
			return err
		}
		l.how = modeChecked
		return nil
	}
	l.how = modeExact
	return nil
}

// dedicatedLink is a single server's link: one dedicated connection with CLIENT TRACKING on, read as an
// exactLink or a checkedLink.
type dedicatedLink struct {
	conn rueidis.DedicatedClient
	gone <-chan error
}

// exactLink is a dedicatedLink on which the user may send WATCH, MULTI, EXEC and CLIENT CACHING: its
// tracking is OPTIN, and it tracks only keys that exist (see read).
type exactLink struct{ dedicatedLink }

// read reads the holds in two round trips, so that Redis tracks only keys that exist (the connection's
// tracking is OPTIN: a read is tracked only in a MULTI that CLIENT CACHING YES precedes). A tracked read
// of a key that does not exist would leave an entry in Redis's tracking table that nothing removes but a
// later write of that name: a hold lost by a DEL behind its holder's back, or released while its read was
// on its way, would leave one. So the first round WATCHes the keys and reads them untracked; the second
// reads, tracked, in a transaction, those found there, and Redis runs it only if none of the keys changed
// since. When one did (EXEC aborted: nothing was tracked), the holds are read again in two halves, and so
// on down to one hold, whose key changed in the instant between its two reads: its reply says so
// (errNotTracked), and the watch reads it again a moment later.
func (l exactLink) read(ctx context.Context, reads []watchRead) []watchReply {
	replies := make([]watchReply, len(reads))
	l.readPart(ctx, reads, replies)
	return replies
}

// readPart reads reads into replies (see read), halving on an aborted transaction.
func (l exactLink) readPart(ctx context.Context, reads []watchRead, replies []watchReply) {
	found, aborted := l.readOnce(ctx, reads, replies)
	if !aborted {
		return
	}
	if len(reads) == 1 {
		replies[0] = watchReply{err: errNotTracked}
		return
	}
	if len(found) < len(reads) { // only those found there can be tracked
		sub := make([]watchRead, len(found))
		subReplies := make([]watchReply, len(found))
		for j, i := range found {
			sub[j] = reads[i]
		}
		l.readPart(ctx, sub, subReplies)
		for j, i := range found {
			replies[i] = subReplies[j]
		}
		return
	}
	half := len(reads) / 2
	l.readPart(ctx, reads[:half], replies[:half])
	l.readPart(ctx, reads[half:], replies[half:])
}

// readOnce runs read's two rounds once. It returns the indexes of the holds the first round found, and
// whether the transaction was aborted: then their replies are not set.
func (l exactLink) readOnce(ctx context.Context, reads []watchRead, replies []watchReply) (found []int, aborted bool) {
	b := l.conn.B()
	keys := make([]string, len(reads))
	for i, r := range reads {
		keys[i] = r.key
	}
	first := make(rueidis.Commands, 0, len(reads)+2)
	first = append(first, b.Unwatch().Build(), b.Watch().Key(keys...).Build())
	for _, r := range reads {
		first = append(first, r.command(b))
	}
	res := l.conn.DoMulti(ctx, first...)
	for i := range reads {
		replies[i] = replyOf(res[2+i])
		for _, setup := range res[:2] { // UNWATCH, WATCH: nothing is known without them
			if err := setup.Error(); err != nil {
				replies[i].err = err
			}
		}
		if there, err := replies[i].there(reads[i].zset); there && err == nil {
			found = append(found, i)
		}
	}
	if len(found) == 0 {
		return nil, false
	}
	second := make(rueidis.Commands, 0, len(found)+3)
	second = append(second, b.ClientCaching().Yes().Build(), b.Multi().Build())
	for _, i := range found {
		second = append(second, reads[i].command(b))
	}
	second = append(second, b.Exec().Build())
	res = l.conn.DoMulti(ctx, second...)
	exec := res[len(res)-1]
	if err := exec.Error(); rueidis.IsRedisNil(err) {
		return found, true // a key changed between the rounds: nothing was tracked
	} else if err != nil {
		for _, i := range found {
			replies[i] = watchReply{err: err} // not known whether it is tracked: read again
		}
		return found, false
	}
	tracked, _ := exec.ToArray()
	for j, i := range found {
		if j < len(tracked) {
			replies[i] = watchReply{tracked[j], tracked[j].Error()}
		} else {
			replies[i] = watchReply{err: errUnexpectedReply}
		}
	}
	return found, false
}

// errNotTracked is a read's reply when the hold was there but its key changed as it was read, so that
// Redis does not track it: the watch reads it again a moment later.
var errNotTracked = errors.New("relock: the hold's key changed as it was read: not tracked")

// checkedLink is a dedicatedLink on which the user may not send what an exactLink reads with: every read
// on it is tracked, so it sends only those that the same read, sent first on the Client's own connections
// (untracked), found there. A key deleted between the two reads is left tracked.
type checkedLink struct {
	dedicatedLink
	rdb rueidis.Client
}

func (l checkedLink) read(ctx context.Context, reads []watchRead) []watchReply {
	return readFound(ctx, l.rdb, reads, func(found []watchRead) []rueidis.RedisResult {
		cmds := make(rueidis.Commands, len(found))
		for i, r := range found {
			cmds[i] = r.command(l.conn.B())
		}
		return l.conn.DoMulti(ctx, cmds...)
	})
}

// readFound reads the holds untracked on rdb, then, with track, those found there.
func readFound(ctx context.Context, rdb rueidis.Client, reads []watchRead, track func([]watchRead) []rueidis.RedisResult) []watchReply {
	first := make(rueidis.Commands, len(reads))
	for i, r := range reads {
		first[i] = r.command(rdb.B())
	}
	replies := make([]watchReply, len(reads))
	var found []watchRead
	var at []int
	for i, r := range rdb.DoMulti(ctx, first...) {
		replies[i] = replyOf(r)
		if there, err := replies[i].there(reads[i].zset); there && err == nil {
			found = append(found, reads[i])
			at = append(at, i)
		}
	}
	if len(found) == 0 {
		return replies
	}
	for j, r := range track(found) {
		replies[at[j]] = replyOf(r)
	}
	return replies
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

// read reads the holds untracked (the caching client's tracking is OPTIN), then, cached, those found there:
// Redis tracks only keys that exist, but for one that is deleted between the two reads.
func (l cachingLink) read(ctx context.Context, reads []watchRead) []watchReply {
	return readFound(ctx, l.rdb, reads, func(found []watchRead) []rueidis.RedisResult {
		cmds := make([]rueidis.CacheableTTL, len(found))
		for i, r := range found {
			if r.zset {
				cmds[i] = rueidis.CT(l.rdb.B().Zscore().Key(r.key).Member(r.field).Cache(), watchCacheTTL)
			} else {
				cmds[i] = rueidis.CT(l.rdb.B().Hexists().Key(r.key).Field(r.field).Cache(), watchCacheTTL)
			}
		}
		return l.rdb.DoMultiCache(ctx, cmds...)
	})
}

// lost: nil, rueidis restores the connections (and tells their loss as a flush, OnInvalidations(nil)).
func (l cachingLink) lost() <-chan error { return nil }

// broken: never, the client reconnects by itself; the holds are read again.
func (l cachingLink) broken(error) bool { return false }

func (l cachingLink) close() { l.rdb.Close() }
