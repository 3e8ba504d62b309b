package relock

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// ErrNoLeader is returned by Election.Leader when the election has no leader: nobody ever won it, or the
// last leader resigned or lost its leadership and no successor is recorded yet.
var ErrNoLeader = errors.New("relock: no leader")

// Election elects one leader among the candidates that campaign under its name, on any number of
// Clients and processes: etcd's concurrency.Election, or Curator's LeaderLatch, on Redis.
//
// A candidate's Campaign waits in a fair lock's queue (see FairLock) fenced with WithFencing: candidates
// lead in the order they began to campaign, a leader is kept by its Client's watchdog, and a leader whose
// process dies or stalls is replaced within about the watchdog timeout, while one that resigns hands over
// at once. A leader's term is the lock's fencing token: every new leader's is larger than every earlier
// leader's, so a store that rejects writes with a term below the highest it has seen never accepts a
// write from a leader that was replaced. Candidates are owners, by the locks' rule (WithOwner, else the
// calling goroutine).
//
// Each new leader is recorded, with its term and the value it campaigned with, in the stream
// "relock_election:{name}" (relock's own; the last 1000 leaders are kept), from which Leader reads the
// current leader and Observe delivers every change of leader, in order, to every observer alike. The
// election's lock is the fair lock called name, with its queue and fencing counter; all its keys share
// the name's cluster slot.
type Election struct {
	c    *Client
	name string
	lock *RLock
	keys []string // the lock, the stream of leaders
}

// Leader is a leader of an Election.
type Leader struct {
	// Value is what the leader campaigned with (an address, say).
	Value string
	// Term is the leader's fencing token: larger than every earlier leader's.
	Term uint64
	// Owner is the leader's owner, "<clientID>:<token>".
	Owner string
}

// Election returns the election called name. The name is its lock's Redis key; a name that
// ErrInvalidName describes makes every method return it.
func (c *Client) Election(name string) *Election {
	return &Election{c: c, name: name, lock: c.fairLock(name, lockOptions{fenced: true}, true), keys: []string{name, companion("relock_election", name)}}
}

// Name returns the election's name, its lock's key in Redis ("" for a nil *Election).
func (e *Election) Name() string {
	if e == nil {
		return ""
	}
	return e.name
}

func (e *Election) check(ctx context.Context) error {
	if e == nil || e.c == nil {
		return ErrNilClient
	}
	if err := e.c.check(); err != nil {
		return err
	}
	if !validName(e.name) {
		return ErrInvalidName
	}
	return ctx.Err()
}

// Campaign makes ctx's owner a candidate with value, and returns once it leads, with its term; or when ctx
// ends, with its error (the candidate leaves the queue then). An owner that leads already gets its term,
// after one script run that makes sure the term is recorded (and changes nothing if it is). Work done as
// the leader should run under LeadershipContext, and pass the term to the resources it writes (see
// WithFencing).
//
// Winning takes two script runs: the lock's acquisition, then the record of the new leader, which checks
// that the lock is still held. When the record cannot be written (the leadership was lost meanwhile, or
// Redis failed), Campaign resigns and returns the error: the candidate does not lead then, even if Redis
// could not be told yet (the release goes on in the background, and the lock expires if it never gets
// through).
func (e *Election) Campaign(ctx context.Context, value string) (uint64, error) {
	if err := e.check(ctx); err != nil {
		return 0, wrapErrCtx(ctx, "campaign", e.Name(), err)
	}
	ctx, err := withResolvedOwner(ctx)
	if err != nil {
		return 0, wrapErrCtx(ctx, "campaign", e.name, err)
	}
	if term, err := e.lock.FencingToken(ctx); err == nil {
		// Leading already: make sure the term is recorded (the record is idempotent).
		if err := e.record(ctx, term, value); err != nil {
			return 0, wrapErrCtx(ctx, "campaign", e.name, err)
		}
		return term, nil
	}
	if err := e.lock.Lock(ctx); err != nil {
		return 0, err
	}
	term, err := e.lock.FencingToken(ctx)
	if err == nil {
		err = e.record(ctx, term, value)
	}
	if err != nil {
		e.abandon(ctx)
		return 0, wrapErrCtx(ctx, "campaign", e.name, err)
	}
	return term, nil
}

// abandon gives up the lock Campaign won but could not record the leader of. It resigns in the background
// (as Unlock does with an ended context), which ends the hold for the Client at once whatever Redis
// answers: the watchdog stops renewing it, so the lock is free within the watchdog timeout at worst. An
// Unlock made here could fail with an error reply (LOADING, while Redis restarts) and leave the candidate
// holding the lock, renewed, unrecorded, while Campaign reports that it failed; its next Campaign would
// then return that term at once.
func (e *Election) abandon(ctx context.Context) {
	_ = e.lock.unlockInBackground(ctx) // ctx's owner was resolved by Campaign: this cannot fail
}

// record writes the new leader to the stream of leaders, if its owner still holds the lock.
func (e *Election) record(ctx context.Context, term uint64, value string) error {
	owner, err := e.c.ownerField(ctx)
	if err != nil {
		return err
	}
	ok, err := e.c.run(ctx, scriptElectionRecord, e.keys, []string{owner, strconv.FormatUint(term, 10), value}).AsInt64()
	if err == nil && ok == 0 {
		err = errHoldGone
	}
	return err
}

// Resign gives up the leadership of ctx's owner: the candidate that has waited longest leads next, at
// once. It returns ErrNotHeld when the owner does not lead. As with Unlock, a ctx that has ended still
// resigns, in the background.
func (e *Election) Resign(ctx context.Context) error {
	if e == nil || e.c == nil {
		return wrapErrCtx(ctx, "resign", "", ErrNilClient)
	}
	return e.lock.Unlock(ctx)
}

// LeadershipContext returns a context, derived from ctx, that ends when ctx's owner stops leading: with a
// cause matching ErrLockLost when the leadership is lost (the watchdog could not keep it: the process
// stalled, or Redis did not answer in time), with context.Canceled when the owner resigns. It returns
// ErrNotHeld when the owner does not lead.
func (e *Election) LeadershipContext(ctx context.Context) (context.Context, error) {
	if e == nil || e.c == nil {
		return nil, wrapErrCtx(ctx, "leadershipcontext", "", ErrNilClient)
	}
	return e.lock.HoldContext(ctx)
}

// Leader returns the current leader, read from Redis in one script run: the last leader recorded, if it
// still leads. It returns ErrNoLeader when there is none (see ErrNoLeader).
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	if err := e.check(ctx); err != nil {
		return Leader{}, wrapErrCtx(ctx, "leader", e.Name(), err)
	}
	reply, err := e.c.run(ctx, scriptElectionLeader, e.keys, nil).AsStrSlice()
	if err != nil {
		return Leader{}, wrapErrCtx(ctx, "leader", e.name, err)
	}
	if len(reply) == 0 {
		return Leader{}, wrapErrCtx(ctx, "leader", e.name, ErrNoLeader)
	}
	if len(reply) != 4 {
		return Leader{}, wrapErrCtx(ctx, "leader", e.name, errUnexpectedReply)
	}
	term, err := strconv.ParseUint(reply[1], 10, 64)
	if err != nil {
		return Leader{}, wrapErrCtx(ctx, "leader", e.name, errUnexpectedReply)
	}
	return Leader{Value: reply[2], Term: term, Owner: reply[3]}, nil
}

// Observe delivers the election's leaders on the channel it returns, in the order they were elected: first
// the last leader recorded when Observe was called (whether or not it still leads), then each new one as
// it is recorded. Every observer sees the same sequence; none is skipped while the observer keeps up with
// the last 1000. The channel is closed when ctx ends or the Client is closed; it is not buffered, so a
// slow reader only delays its own deliveries. Observe reads the last leader before it returns, and
// returns the error if it cannot.
//
// An observer waits with XREAD BLOCK on the stream of leaders: it does not poll, and holds one
// connection of the Client's pool while it waits. When Redis fails it tries again, backing off, and goes
// on from the last leader it delivered.
func (e *Election) Observe(ctx context.Context) (<-chan Leader, error) {
	if err := e.check(ctx); err != nil {
		return nil, wrapErrCtx(ctx, "observe", e.Name(), err)
	}
	stream := e.keys[1]
	first, err := e.c.do(ctx, e.c.rdb.B().Xrevrange().Key(stream).End("+").Start("-").Count(1).Build()).AsXRange()
	if err != nil {
		return nil, wrapErrCtx(ctx, "observe", e.name, err)
	}
	last := "0-0" // nothing recorded yet: wait for the first leader
	if len(first) > 0 {
		last = first[0].ID
	}
	ch := make(chan Leader)
	// The observer's context ends with ctx or the Client, and has no deadline: rueidis abandons a blocking
	// command at its context's deadline, but not when a context with a deadline is cancelled before it.
	octx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stopCtx := context.AfterFunc(ctx, cancel)
	stopLife := context.AfterFunc(e.c.life, cancel)
	end := func() {
		stopCtx()
		stopLife()
		cancel()
	}
	if !e.c.goBackground(func(context.Context) {
		defer close(ch)
		defer end()
		var lastTerm uint64
		if e.deliver(octx, ch, first, &lastTerm) {
			e.observe(octx, ch, last, &lastTerm)
		}
	}) {
		end()
		return nil, wrapErrCtx(ctx, "observe", e.name, ErrClosed)
	}
	return ch, nil
}

// observe reads the stream of leaders after the entry last, sending each leader with a term above
// *lastTerm, the last one sent, until ctx ends.
func (e *Election) observe(ctx context.Context, ch chan<- Leader, last string, lastTerm *uint64) {
	stream := e.keys[1]
	backoff := reconnectBackoffMin
	for ctx.Err() == nil {
		streams, err := e.c.rdb.Do(ctx, e.c.rdb.B().Xread().Block(0).Streams().Key(stream).Id(last).Build()).AsXRead()
		if err != nil && !rueidis.IsRedisNil(err) {
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, reconnectBackoffMax)
			continue
		}
		backoff = reconnectBackoffMin
		entries := streams[stream]
		if len(entries) > 0 {
			last = entries[len(entries)-1].ID
		}
		if !e.deliver(ctx, ch, entries, lastTerm) {
			return
		}
	}
}

// deliver sends the leaders of entries whose terms are above *lastTerm, in order, and reports whether ctx
// is still going.
func (e *Election) deliver(ctx context.Context, ch chan<- Leader, entries []rueidis.XRangeEntry, lastTerm *uint64) bool {
	for _, entry := range entries {
		term, err := strconv.ParseUint(entry.FieldValues["term"], 10, 64)
		if err != nil || term <= *lastTerm {
			continue // not a leader's entry, or one older than a leader delivered (the stream was rewritten)
		}
		select {
		case ch <- Leader{Value: entry.FieldValues["value"], Term: term, Owner: entry.FieldValues["owner"]}:
			*lastTerm = term
		case <-ctx.Done():
			return false
		}
	}
	return true
}
