package relock

import (
	"context"
	"errors"
	"strconv"

	"github.com/redis/rueidis"
)

// ErrNoLeader is returned by Election.Leader when the election has no leader: nobody ever won it, or the
// last leader resigned or lost its leadership and no successor is recorded yet.
var ErrNoLeader = errors.New("relock: no leader")

// Election elects one leader among the candidates that campaign under its name, on any number of
// Clients and processes: etcd's concurrency.Election, or Curator's LeaderLatch, on Redis. For a job that
// must run on one instance at a time, Run is the whole loop: it campaigns, runs the job while leading,
// campaigns again after a loss, and resigns when the job returns or its context ends.
//
// A candidate's Campaign waits in a fair lock's queue (see FairLock) fenced with WithFencing: candidates
// lead in the order they began to campaign, a leader is kept by its Client's watchdog, and a leader whose
// process dies or stalls is replaced within about the watchdog timeout, while one that resigns hands over
// at once. A leader's term is the lock's fencing token: every new leader's is larger than every earlier
// leader's, so a store that rejects writes with a term below the highest it has seen never accepts a
// write from a leader that was replaced. That holds while Redis keeps the election's keys: when it loses
// them (a restart without persistence, a failover to a replica that lagged), terms count again from where
// Redis is, and Observe says so (Leader.Restarted). Candidates are owners, by the locks' rule (WithOwner,
// else the calling goroutine).
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
	// Restarted, set by Observe only, says that terms started again: this leader's term is not above the
	// last one the observer delivered. Redis lost the election's keys (a restart without persistence, a
	// failover to a replica that lagged) and counts terms from 1, or from where the replica was, again. A
	// store that rejects writes whose term is below the highest it has accepted would reject this leader's:
	// it must start over from this term (the old leaders' writes it might then accept were made before the
	// keys were lost).
	Restarted bool
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
// after one script run that makes sure the term is recorded (and changes nothing if it is). Leadership is
// one hold: however many Campaigns its owner made at once, one Resign ends it. (After the Client reported
// the leadership lost, a Campaign first waits until the Client gave up what Redis may still have of it,
// and then leads with a new term.)
// Work done as the leader should run under LeadershipContext, and pass the term to the resources it
// writes (see WithFencing); Run does all of it for a leader-only job.
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
	// The Campaigns of one owner take turns on this Client. An election holds one level per owner, so a
	// Campaign that won the lock but could not record the leader would otherwise abandon the leadership
	// another Campaign of its owner had just returned (safety/explore found it). In turn, the next one
	// finds its owner leading, or waits for the abandon to be settled (see releaseInBackground).
	field, err := e.c.ownerField(ctx)
	if err != nil {
		return 0, wrapErrCtx(ctx, "campaign", e.name, err)
	}
	turn := holdKey{key: e.name, field: campaignTurn + field}
	if !e.c.holds.tryBeginTurn(turn) {
		// Another Campaign of the owner is under way, maybe riding out an outage as a waiter does. A
		// Campaign made while Redis does not answer fails at once, as any call does: it asks Redis once
		// before it waits its turn.
		if err := e.c.do(ctx, e.c.rdb.B().Ping().Build()).Error(); err != nil && transient(err) {
			return 0, wrapErrCtx(ctx, "campaign", e.name, unavailable(err))
		}
		if err := e.c.holds.beginAttempt(ctx, turn); err != nil {
			return 0, wrapErrCtx(ctx, "campaign", e.name, err)
		}
	}
	defer e.c.holds.endAttempt(turn)
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
		if cerr := e.c.check(); cerr != nil {
			err = cerr // Close gave the lock up before the leader was recorded: that is why
		}
		return 0, wrapErrCtx(ctx, "campaign", e.name, err)
	}
	return term, nil
}

// campaignTurn starts the field of the key of the turns an owner's Campaigns take (see Campaign). An
// owner's field starts with its Client's UUID, so no attempt on a lock has such a key: the turns wait for
// Campaigns only. The key never reaches Redis.
const campaignTurn = "\x00campaign:"

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
	ok, err := e.c.scripts.runInt(ctx, scriptCall{script: scriptElectionRecord, keys: e.keys, args: []string{owner, strconv.FormatUint(term, 10), value}})
	if err == nil && ok == 0 {
		err = errHoldGone
	}
	return err
}

// Resign gives up the leadership of ctx's owner, whatever Campaigns it made: the candidate that has waited
// longest leads next, at once. It returns ErrNotHeld when the owner does not lead. As with Unlock, a ctx that has ended still
// resigns, in the background.
func (e *Election) Resign(ctx context.Context) error {
	if e == nil || e.c == nil {
		return wrapErrCtx(ctx, "resign", "", ErrNilClient)
	}
	return e.lock.Unlock(ctx)
}

// LeadershipContext returns a context, derived from ctx, that ends when ctx's owner stops leading: with a
// cause matching ErrLockLost when the leadership is lost (the watchdog could not keep it: the process
// stalled, or Redis did not answer in time), with context.Canceled when the owner resigns, and with a cause
// matching both ErrClosed and context.Canceled when the Client is closed (Close resigns). It returns
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
// the last 1000. When terms start again (Redis lost the election's keys), the leaders are delivered all
// the same, the first with Restarted set. The channel is closed when ctx ends or the Client is closed; it
// is not buffered, so a slow reader only delays its own deliveries. Observe reads the last leader before
// it returns, and returns the error if it cannot.
//
// An observer waits with XREAD BLOCK on the stream of leaders: it does not poll, and holds one
// connection of the Client's pool while it waits. When Redis fails it tries again, backing off, and goes
// on after the last entry it read that Redis still has: a server that lost the stream (or a replica that
// has only its first entries) gives it the leaders recorded since, not again those it delivered.
func (e *Election) Observe(ctx context.Context) (<-chan Leader, error) {
	if err := e.check(ctx); err != nil {
		return nil, wrapErrCtx(ctx, "observe", e.Name(), err)
	}
	stream := e.keys[1]
	first, err := e.c.do(ctx, e.c.rdb.B().Xrevrange().Key(stream).End("+").Start("-").Count(1).Build()).AsXRange()
	if err != nil {
		return nil, wrapErrCtx(ctx, "observe", e.name, err)
	}
	ch := make(chan Leader)
	// The observer's context ends with ctx or the Client, and has no deadline: rueidis abandons a blocking
	// command at its context's deadline, but not when a context with a deadline is cancelled before it.
	octx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stopCtx := context.AfterFunc(ctx, cancel)
	stopLife := context.AfterFunc(e.c.closing, cancel)
	end := func() {
		stopCtx()
		stopLife()
		cancel()
	}
	if !e.c.goBackground(func(context.Context) {
		defer close(ch)
		defer end()
		o := &observer{e: e, ch: ch, read: make(map[string]bool)}
		if o.deliver(octx, first) {
			o.observe(octx)
		}
	}) {
		end()
		return nil, wrapErrCtx(ctx, "observe", e.name, ErrClosed)
	}
	return ch, nil
}

// streamKept is about how many entries the stream of leaders keeps (election_record.lua trims it).
const streamKept = 1000

// observer is one Observe's reader of the stream of leaders.
type observer struct {
	e  *Election
	ch chan<- Leader
	// order and read are the ids of the last entries read (as many as the stream keeps), oldest first:
	// the last one is where reading goes on, and after Redis lost the stream they tell which of the
	// entries it has now were read already (see rewound).
	order []string
	read  map[string]bool
	// the last leader delivered, if any
	delivered bool
	term      uint64
	owner     string
}

// last returns the id of the last entry read, or "0-0".
func (o *observer) last() string {
	if len(o.order) == 0 {
		return "0-0"
	}
	return o.order[len(o.order)-1]
}

// observe reads the stream of leaders after the last entry read, delivering its leaders, until ctx ends.
// After a failure (the connection broke: Redis may have restarted) it first finds where to go on from
// (see rewound).
func (o *observer) observe(ctx context.Context) {
	stream, rdb := o.e.keys[1], o.e.c.rdb
	var retry backoff
	failed := false
	for ctx.Err() == nil {
		var streams map[string][]rueidis.XRangeEntry
		var err error
		from := o.last()
		if failed {
			from, err = o.rewound(ctx)
		}
		if err == nil {
			// Not XREAD's builder: rueidis sends a read-only command again, on a new connection, when its
			// connection breaks, and the observer would never hear that Redis went away (and may have come
			// back without the stream it read).
			cmd := rdb.B().Arbitrary("XREAD").Args("BLOCK", "0", "STREAMS").Keys(stream).Args(from).Blocking()
			streams, err = rdb.Do(ctx, cmd).AsXRead()
		}
		if err != nil && !rueidis.IsRedisNil(err) {
			failed = true
			sleepCtx(ctx, retry.pause())
			continue
		}
		failed = false
		retry.reset()
		if !o.deliver(ctx, streams[stream]) {
			return
		}
	}
}

// rewound returns the id after which the stream of leaders has only entries the observer has not read:
// the last entry read, while the stream has it. A stream without it was trimmed past it (what is left is
// newer), or lost and written anew: by a server that restarted without persistence (every entry is new,
// its ids from a clock that may be behind the one before), or by a replica that lagged (it has the first
// entries read, ids and all, and new ones after them). It goes on after the newest entry read that the
// stream still has, or from its start.
func (o *observer) rewound(ctx context.Context) (string, error) {
	last := o.last()
	if last == "0-0" {
		return last, nil
	}
	rdb, stream := o.e.c.rdb, o.e.keys[1]
	tail, err := rdb.Do(ctx, rdb.B().Xrevrange().Key(stream).End(last).Start("-").Count(1).Build()).AsXRange()
	if err != nil || len(tail) > 0 && tail[0].ID == last {
		return last, err
	}
	older, err := rdb.Do(ctx, rdb.B().Xrevrange().Key(stream).End(last).Start("-").Count(streamKept).Build()).AsXRange()
	if err != nil {
		return last, err
	}
	for _, x := range older {
		if o.read[x.ID] {
			return x.ID, nil
		}
	}
	return "0-0", nil
}

// deliver records entries as read and sends their leaders, in order; it reports whether ctx is still
// going. A leader whose term is not above the last one delivered is one after terms started again
// (Restarted), unless it is that same leader, recorded again (its record was lost and written anew while
// it led).
func (o *observer) deliver(ctx context.Context, entries []rueidis.XRangeEntry) bool {
	for _, entry := range entries {
		if len(o.order) == streamKept {
			delete(o.read, o.order[0])
			o.order = o.order[1:]
		}
		o.order = append(o.order, entry.ID)
		o.read[entry.ID] = true
		term, err := strconv.ParseUint(entry.FieldValues["term"], 10, 64)
		if err != nil {
			continue // not a leader's entry
		}
		l := Leader{Value: entry.FieldValues["value"], Term: term, Owner: entry.FieldValues["owner"]}
		if o.delivered && term == o.term && l.Owner == o.owner {
			continue
		}
		l.Restarted = o.delivered && term <= o.term
		select {
		case o.ch <- l:
			o.delivered, o.term, o.owner = true, term, l.Owner
		case <-ctx.Done():
			return false
		}
	}
	return true
}
