// Package relock provides Redisson-style distributed locks and synchronizers on Redis for Go: reentrant,
// fair and read-write locks, semaphores, latches and leader election, with blocking waits woken by pub/sub
// (never polling), a watchdog that keeps holds alive and tells their holder when one is lost, fencing
// tokens, and Redisson's key layout, so that Go services and Java services using Redisson exclude each
// other on the same names.
//
// A Client owns a Redis connection (or borrows a rueidis.Client), a UUID that is part of every owner it
// writes, and the background machinery its locks share. Lock objects are cheap values made from a Client
// and a name:
//
//	c, err := relock.New([]string{"127.0.0.1:6379"}, nil) // or a redis:// URL; relock.Wrap(rueidisClient, nil)
//	if err != nil {
//		return err
//	}
//	defer c.Close() // gives up whatever the Client still holds
//
//	l := c.Lock("orders:42")
//	if err := l.Lock(ctx); err != nil { // waits as long as ctx allows
//		return err
//	}
//	defer l.Unlock(ctx) // releases even when ctx has ended by then
//
// Who owns a hold is decided by one rule for every lock, permit and leadership: the calling goroutine, by
// default, so that a lock is reentrant on the goroutine that took it and another goroutine cannot unlock
// it (ErrNotHeld); or the owner token the context carries (WithOwner), to share a hold between goroutines
// or hand it over to another. See WithOwner.
//
// # Arguments
//
// Every call takes its context first, then what it works with (how many permits, a count, a value), then
// its durations, in the order they are spent: first the wait (how long to wait for the lock, permits or
// latch; 0 makes a single attempt), then the lease (how long the hold lives once taken; 0 lets the
// watchdog keep it alive). So TryLock(ctx, wait, lease), Semaphore.TryAcquire(ctx, permits, wait),
// PermitSemaphore.TryAcquire(ctx, wait, lease), CountDownLatch.TryAwait(ctx, wait) and
// LockWithLease(ctx, lease). Every Try method reports whether it got what it tried for as a bool, just
// before its error: false, with a nil error, when the wait ran out.
//
// # One name, one kind
//
// A name is one object's: a lock, a read-write lock, a semaphore, a latch or an election. Every method
// of these objects that finds its name in use by another kind fails with a *KindError (ErrWrongKind;
// ErrNotALock when a lock's method finds no lock, ErrNotASemaphore when a counter's finds no counter) and
// changes nothing. Redis tells some kinds apart only by their companion keys, and some not at all (see
// ErrWrongKind).
//
// # Which lock do I need?
//
//   - One owner at a time, reentrant, Redisson's RLock: [Client.Lock] (examples: the package's,
//     RLock.Lock's "reentrant", RLock.TryLock's).
//   - One owner at a time, in the order they came: [Client.FairLock] (Client.FairLock's example).
//   - Many readers or one writer: [Client.ReadWriteLock] (Client.ReadWriteLock's example).
//   - Several locks held as one, all or none, on any Clients: [NewMultiLock] (NewMultiLock's example).
//   - A majority of independent Redis masters, the Redlock algorithm: [NewRedLock] (NewRedLock's example).
//   - Storage that must reject a stale holder's writes: any lock [WithFencing] (WithFencing's example).
//   - Work that must stop when the lock is lost: [Do], or [RLock.HoldContext] and [HoldRisk] (their
//     examples).
//   - At most n holders at once, Redisson's RSemaphore: [Client.Semaphore] (Client.Semaphore's example).
//   - At most n holders at once, whose permits come back when a holder dies, each owned and watched like
//     a lock: [Client.PermitSemaphore] (Client.PermitSemaphore's example).
//   - Wait until n things have happened, Redisson's RCountDownLatch: [Client.CountDownLatch]
//     (Client.CountDownLatch's example).
//   - One leader among candidates, with a term that fences a replaced leader: [Client.Election]
//     (Election's example); Election.Run runs a leader-only job, campaigning again after a loss.
//   - Tests of code that uses relock, without a Redis server: the relocktest module
//     (github.com/relock-go/relock/relocktest).
//
// The repository's README and its guides (docs/) cover the same ground for a first read, and running
// relock in production (docs/operations.md).
package relock

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"
	"go.opentelemetry.io/otel"
	"golang.org/x/sync/singleflight"
)

// Client is the entry point of relock: it makes lock objects and owns everything with a lifetime that
// they share. A Client is safe for concurrent use; make one per process (per Redis deployment) and Close
// it when done.
type Client struct {
	rdb      rueidis.Client
	borrowed bool
	id       string

	watchdogTimeout    time.Duration
	watchdogTimeoutArg string // watchdogTimeout in milliseconds, as scripts take it
	fairLockWaitArg    string // Options.FairLockWaitTimeout in milliseconds, as scripts take it
	cluster            bool   // rdb is a cluster client
	// pubsub is how releases are announced (see ShardedPubSub): pubPlain or pubSharded once known, and
	// pubUnknown until ShardedPubSubAuto's probe is answered. Scripts publish with the matching command, and
	// the hub subscribes to match. probe coalesces the probes of concurrent callers.
	pubsub atomic.Int32
	probe  singleflight.Group

	holds   *holdTable
	scripts runner    // runs the scripts of locks, renewals and queues (rueidisRunner)
	guard   callGuard // how calls whose context can end are made (see callGuard)
	owners  ownerFields
	workers *workers // run the parts of composite locks (see composite.fanOut)
	// attempts numbers acquisition attempts: an attempt's id (acquireCall.attempt) is its number, in base
	// 36; with the owner's field, which holds the Client's ID, it names the attempt uniquely.
	attempts atomic.Uint64
	hub      *hub
	gates    gates      // the Client's waiters of each Lock, queued locally (see gates)
	watch    *holdWatch // the watch of its holds' keys (see holdWatch); nil when off
	// watchOption is New's rueidis options, for the watch's own client on a cluster (see holdWatch.connect);
	// nil for a Client made by Wrap.
	watchOption *rueidis.ClientOption
	guarded     guardedScripts   // GuardedEval's scripts
	requests    requestListeners // its holders that listen for release requests (see ReleaseRequests)
	tel         *telemetry

	// Close's phases (see shutdown). closing ends as Close begins: calls fail with ErrClosed from then on,
	// waiters return, and what would wait on for the Client (observers, late queue leaves) stops. life ends
	// when Close is done: background work (undos, releases, give-backs, renewals) runs under it. Close waits
	// for the acquisitions under way (ops) and the background work (bg) before it ends life.
	closing    context.Context
	beginClose context.CancelFunc
	life       context.Context
	end        context.CancelFunc
	closed     atomic.Bool
	// stoppedShort is set when Close gave up waiting for the work under way (its ctx ended first) or the
	// Client was abandoned (a test's dead process): only then may work that must be done in Redis (an
	// undo, a release) be dropped. In test binaries, work dropped otherwise fails (see mustRun).
	stoppedShort atomic.Bool
	once         sync.Once
	bgMu         sync.Mutex // orders the workers' wg.Add against Close
	ops, bg      tasks
}

// ClientNamePrefix starts the connection name (CLIENT SETNAME) that New gives its connections unless
// Options.Redis.ClientName sets one: "relock-<Client.ID()>". In CLIENT LIST it tells which process, at
// which address, holds the locks whose owners start with that ID (the relock command's inspect shows it).
const ClientNamePrefix = "relock-"

// New returns a Client with its own rueidis client connected to addrs (host:port of a Redis server; the
// seed nodes of a cluster), named ClientNamePrefix + its ID. Close closes that connection. It is
// NewContext with context.Background(): it connects before it returns, and so waits, when Redis is down or
// does not answer, for up to the dial timeout (Options.Redis.Dialer.Timeout; rueidis's default is 5 s).
func New(addrs []string, opts *Options) (*Client, error) {
	return NewContext(context.Background(), addrs, opts)
}

// NewContext is New bounded by ctx: it connects to Redis before it returns (rueidis dials eagerly, and on a
// cluster reads its topology), for no longer than ctx allows nor the dial timeout. When no connection could
// be made it returns an error matching ErrUnavailable, with the cause (and ctx.Err(), when ctx ended first).
// ctx bounds only the connection made here: the Client is not tied to it afterwards.
//
// Each of addrs is a host:port, or addrs is one redis:// or rediss:// URL (as rueidis.ParseURL reads it:
// user, password, database, TLS, dial timeout), which takes precedence over what Options.Redis says of the
// same things (a TLSConfig in Options.Redis is kept). An address that is neither, or no address at all,
// gives an error matching ErrInvalidOptions that says what is wrong; so does a server that refuses the
// Client for want of a password (NOAUTH) or for a wrong one (WRONGPASS), wrapping Redis's reply. A TLS
// handshake that gets no TLS answer (rediss:// for a plain-TCP port) fails, matching ErrUnavailable, with
// an error that says so.
//
// New's rueidis client always pipelines (ClientOption.AlwaysPipelining), so that one call's context never
// breaks a connection other calls share, and does not retry reads (DisableRetry), so that a read fails as
// soon as Redis cannot be reached, as every other call does. Both are set whatever Options.Redis says.
func NewContext(ctx context.Context, addrs []string, opts *Options) (*Client, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	ro, err := redisOption(addrs, o.Redis)
	if err != nil {
		return nil, &opError{op: "new", err: err}
	}
	ro.DisableCache = true
	ro.AlwaysPipelining = true
	ro.DisableRetry = true
	if _, err := o.validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, &opError{op: "new", err: errorf("%w: %w", ErrUnavailable, err)}
	}
	id := newClientID()
	if ro.ClientName == "" {
		ro.ClientName = ClientNamePrefix + id
	}
	var guard atomic.Pointer[callGuard] // the Client's, once made
	ro.DialCtxFn = watchConns(ro, &guard)
	rdb, err := connect(ctx, ro)
	if err != nil {
		return nil, &opError{op: "new", err: err}
	}
	c, err := newClient(rdb, false, id, o)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	guard.Store(&c.guard)
	c.watchOption = &ro
	return c, nil
}

// Wrap returns a Client that uses rdb, a rueidis client the caller already has. Close stops what relock
// started (its goroutines and its subscription connection) and leaves rdb open.
//
// Two of rdb's options matter while Redis is down or stalled; New sets both (see NewContext), Wrap cannot:
//
//   - AlwaysPipelining: without it, rueidis runs a call that is alone on its connection under a connection
//     deadline set from the call's context, whose expiry closes the connection and fails every other call
//     on it, relock's or the application's. relock reports such a failure as an outage whose outcome is
//     unknown (ErrUnavailable), and undoes or completes what it may have done, but the caller sees it.
//   - DisableRetry: without it, rueidis retries a read-only command until its context ends while Redis is
//     unreachable. relock's reads (IsLocked, RemainingTTL, HoldCount, AvailablePermits, Count...) made on
//     rdb then give up after 10 s when their context allows longer, with an error matching ErrUnavailable,
//     where New's fail at once.
func Wrap(rdb rueidis.Client, opts *Options) (*Client, error) {
	if rdb == nil {
		return nil, &opError{op: "wrap", err: ErrNilClient}
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	return newClient(rdb, true, newClientID(), o)
}

// newClientID returns a new Client's ID: a random UUID whose version is 8 (RFC 9562's custom version)
// where Redisson's and earlier relock versions' are random version 4 UUIDs. A waiter tells by it that a
// lock's holder is a relock Client whose release wakes a waiter by name (see lua/lib/waiters.lua).
func newClientID() string {
	u := uuid.New()
	u[6] = u[6]&0x0f | 0x80
	return u.String()
}

func newClient(rdb rueidis.Client, borrowed bool, id string, o Options) (*Client, error) {
	o, err := o.validate()
	if err != nil {
		return nil, err
	}
	tp, mp := o.TracerProvider, o.MeterProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	life, end := context.WithCancel(context.Background())
	closing, beginClose := context.WithCancel(life)
	c := &Client{
		rdb:                rdb,
		borrowed:           borrowed,
		id:                 id,
		watchdogTimeout:    o.WatchdogTimeout,
		watchdogTimeoutArg: fmtMillis(o.WatchdogTimeout),
		fairLockWaitArg:    fmtMillis(o.FairLockWaitTimeout),
		closing:            closing,
		beginClose:         beginClose,
		life:               life,
		end:                end,
	}
	c.cluster = rdb.Mode() == rueidis.ClientModeCluster
	switch {
	case !c.cluster, o.ShardedPubSub == ShardedPubSubOff:
		c.pubsub.Store(pubPlain)
	case o.ShardedPubSub == ShardedPubSubOn:
		c.pubsub.Store(pubSharded)
	}
	c.scripts = rueidisRunner{c}
	dial := o.Redis.Dialer.Timeout // what New dials with; a client given to Wrap, presumably the same
	if dial <= 0 {
		dial = rueidis.DefaultDialTimeout
	}
	c.guard.window = 2 * dial // the connection, then the handshake
	c.workers = newWorkers(c)
	c.holds = newHoldTable(c, o.WatchdogTimeout)
	if c.tel, err = newTelemetry(tp, mp, c.holds.heldByKind); err != nil {
		end()
		return nil, &opError{op: "new", err: err}
	}
	c.tel.log = o.Logger
	c.hub = newHub(redisSubscriber{rdb}, c.id, life, c.cluster, c.shardedPubSub)
	c.gates.hub = c.hub
	if !o.NoHoldWatch && (!c.cluster || !borrowed) { // a wrapped cluster client: no options to make the watch's
		c.watch = newHoldWatch(c)
	}
	return c, nil
}

// attemptID returns a new acquisition attempt id.
func (c *Client) attemptID() string {
	return strconv.FormatUint(c.attempts.Add(1), 36)
}

// ID returns the Client's UUID, the first part of every owner field it writes: a random UUID of version 8
// (Redisson's are of version 4).
func (c *Client) ID() string {
	if c == nil {
		return ""
	}
	return c.id
}

// check reports whether operations may run on c.
func (c *Client) check() error {
	if c == nil {
		return ErrNilClient
	}
	if c.closed.Load() {
		return ErrClosed
	}
	return nil
}
