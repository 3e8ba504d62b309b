// Package relock provides Redisson-style distributed locks on Redis for Go: reentrant locks with
// blocking waits woken by pub/sub (never polling), leases, and Redisson's key layout, so that Go services
// and Java services using Redisson exclude each other on the same lock names.
//
// A Client owns a Redis connection (or borrows a rueidis.Client), a UUID that is part of every owner it
// writes, and the background machinery its locks share. Lock objects are cheap values made from a Client
// and a name:
//
//	c, err := relock.New([]string{"127.0.0.1:6379"}, nil)
//	...
//	defer c.Close()
//
//	l := c.Lock("orders:42")
//	if err := l.Lock(ctx); err != nil {
//		return err
//	}
//	defer l.Unlock(ctx) // releases even if ctx has ended by then
//
// Who owns a hold is decided by one rule for every lock type: the owner token carried by the context
// (WithOwner), or else the calling goroutine. See WithOwner.
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
//     (Election's example).
package relock

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/singleflight"

	"github.com/relock-go/relock/internal/redisaddr"
)

// DefaultWatchdogTimeout is the time to live of a hold acquired without a lease, when Options leaves
// WatchdogTimeout zero. It is Redisson's lockWatchdogTimeout default.
const DefaultWatchdogTimeout = 30 * time.Second

// MinWatchdogTimeout is the shortest WatchdogTimeout New and Wrap accept. The watchdog renews holds every
// WatchdogTimeout/3 and retries a failed renewal after WatchdogTimeout/10 (at least 10 ms): below this,
// holds would be lost to ordinary scheduling delays.
const MinWatchdogTimeout = 100 * time.Millisecond

// retryAttemptTimeout bounds one attempt of a background retry (retryUnknown), and retryBackoff is the
// pause between attempts.
const (
	retryAttemptTimeout = time.Second
	retryBackoff        = 50 * time.Millisecond
)

// Options configures a Client. The zero value, and a nil *Options, are valid and give the defaults.
type Options struct {
	// WatchdogTimeout is how long a hold acquired without a lease lives in Redis between renewals: the
	// watchdog renews such holds every WatchdogTimeout/3 while they are held, so a holder that dies or is
	// cut off loses the lock within WatchdogTimeout. Zero means DefaultWatchdogTimeout; it is rounded up to
	// whole milliseconds. A negative one, or one below MinWatchdogTimeout, makes New and Wrap fail with an
	// error matching ErrInvalidOptions and ErrInvalidDuration.
	WatchdogTimeout time.Duration

	// FairLockWaitTimeout mirrors Redisson's Config.fairLockWaitTimeout (the "thread wait time" of its fair
	// locks), and must equal it in every Redisson client that shares fair locks with this Client: FairLock
	// keeps Redisson's scores for its waiters, whose arithmetic takes it (see FairLock). Zero means
	// Redisson's default, 5 minutes; it is rounded up to whole milliseconds and must not be negative.
	FairLockWaitTimeout time.Duration

	// Redis is the configuration New starts from when it builds its rueidis client (authentication, TLS,
	// timeouts, ...). New sets InitAddress (and what a URL says) from its addrs argument when that is not
	// empty, disables client-side caching, which relock does not use, and retries (DisableRetry), makes
	// the client always pipeline (AlwaysPipelining; see NewContext), and sets ClientName when it is empty
	// (see ClientNamePrefix). Wrap ignores it.
	//
	// Its timeouts bound the calls made without a deadline while Redis is unreachable: a call fails as
	// soon as its connection is refused, or after Dialer.Timeout (5 s by default) when the dial gets no
	// answer; on a connection whose server stops answering, after about ConnWriteTimeout plus twice
	// Dialer.KeepAlive (12 s by default), when rueidis gives the connection up.
	Redis rueidis.ClientOption

	// TracerProvider gives the tracer of relock's spans. Nil means the global one (otel.GetTracerProvider),
	// which records nothing until an SDK is installed (otel.SetTracerProvider, before or after New): until
	// then relock starts no spans, which would cost allocations and record nothing.
	TracerProvider trace.TracerProvider

	// MeterProvider gives the meter of relock's metrics. Nil means the global one (otel.GetMeterProvider).
	MeterProvider metric.MeterProvider

	// Logger, when set, gets a Warn record each time the watchdog could not renew a hold (the hold is at
	// risk: see HoldRisk) and an Error record when a hold is lost, each with the lock's name and kind
	// ("lock", "kind"), the owner's field ("owner") and the error or cause ("error"). Nil means no logging,
	// at no cost on any path.
	Logger *slog.Logger

	// ShardedPubSub chooses sharded (SPUBLISH, SSUBSCRIBE) or plain (PUBLISH, SUBSCRIBE) pub/sub for release
	// notifications on Redis Cluster. It must match the shardedSubscriptionMode of the Redisson clients that
	// share the locks. Zero means ShardedPubSubAuto, Redisson's default. A single server always uses plain
	// pub/sub.
	ShardedPubSub ShardedPubSub
}

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
	tel      *telemetry

	// Close's phases (see shutdown). closing ends as Close begins: calls fail with ErrClosed from then on,
	// waiters return, and what would wait on for the Client (observers, late queue leaves) stops. life ends
	// when Close is done: background work (undos, releases, give-backs, renewals) runs under it. Close waits
	// for the acquisitions under way (ops) and the background work (bg) before it ends life.
	closing    context.Context
	beginClose context.CancelFunc
	life       context.Context
	end        context.CancelFunc
	closed     atomic.Bool
	once       sync.Once
	bgMu       sync.Mutex // orders the workers' wg.Add against Close
	ops, bg    tasks
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
// gives an error matching ErrInvalidOptions that says what is wrong.
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
	id := uuid.NewString()
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
	return c, nil
}

// watchConns returns ro's dial function, whose connections tell the Client's guard (once there is a
// Client) when they break: the calls that then find the connection being dialled again wait for the dial
// whatever their context (see callGuard). rueidis reads a connection that pipelines all the time, and so
// sees it break, and dials it again, before any call does. (A connection that is not a *net.TCPConn or a
// *tls.Conn is one rueidis cannot turn Nagle's algorithm on for: with DisableTCPNoDelay, connections are
// left unwatched.)
func watchConns(ro rueidis.ClientOption, guard *atomic.Pointer[callGuard]) func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) {
	dialCtx, dialFn := ro.DialCtxFn, ro.DialFn
	dial := func(ctx context.Context, dst string, dialer *net.Dialer, cfg *tls.Config) (net.Conn, error) {
		switch { // rueidis's own choice, when no DialCtxFn takes its place
		case dialCtx != nil:
			return dialCtx(ctx, dst, dialer, cfg)
		case dialFn != nil:
			return dialFn(dst, dialer, cfg)
		case cfg != nil:
			return (&tls.Dialer{NetDialer: dialer, Config: cfg}).DialContext(ctx, "tcp", dst)
		}
		return dialer.DialContext(ctx, "tcp", dst)
	}
	if ro.DisableTCPNoDelay {
		return dial
	}
	return func(ctx context.Context, dst string, dialer *net.Dialer, cfg *tls.Config) (net.Conn, error) {
		conn, err := dial(ctx, dst, dialer, cfg)
		if err != nil {
			return nil, err
		}
		return watchedConn{Conn: conn, guard: guard}, nil
	}
}

// watchedConn is a connection of New's rueidis client: a read that fails (the connection broke, or is
// being closed) tells the Client's guard.
type watchedConn struct {
	net.Conn
	guard *atomic.Pointer[callGuard]
}

func (c watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		if g := c.guard.Load(); g != nil {
			g.broke()
		}
	}
	return n, err
}

// redisOption returns the rueidis configuration New makes from addrs (see NewContext) and base, what
// Options.Redis says.
func redisOption(addrs []string, base rueidis.ClientOption) (rueidis.ClientOption, error) {
	if len(addrs) == 0 {
		addrs = base.InitAddress
		if len(addrs) == 0 {
			return base, errorf("%w: no Redis address: addrs and Options.Redis.InitAddress are both empty", ErrInvalidOptions)
		}
	}
	parsed, err := redisaddr.Parse(addrs)
	if err != nil {
		return base, errorf("%w: %v", ErrInvalidOptions, err)
	}
	ro := base
	ro.InitAddress = parsed.InitAddress
	if !strings.Contains(addrs[0], "://") {
		return ro, nil
	}
	// What the URL says of the connection.
	if parsed.Username != "" || parsed.Password != "" {
		ro.Username, ro.Password = parsed.Username, parsed.Password
	}
	if parsed.SelectDB != 0 {
		ro.SelectDB = parsed.SelectDB
	}
	if parsed.TLSConfig != nil && ro.TLSConfig == nil {
		ro.TLSConfig = parsed.TLSConfig
	}
	if parsed.Dialer.Timeout != 0 {
		ro.Dialer.Timeout = parsed.Dialer.Timeout
	}
	if parsed.ConnWriteTimeout != 0 {
		ro.ConnWriteTimeout = parsed.ConnWriteTimeout
	}
	if parsed.DialCtxFn != nil { // unix://
		ro.DialCtxFn = parsed.DialCtxFn
	}
	if parsed.ClientName != "" {
		ro.ClientName = parsed.ClientName
	}
	if parsed.Sentinel.MasterSet != "" {
		ro.Sentinel.MasterSet = parsed.Sentinel.MasterSet
	}
	ro.AlwaysRESP2 = ro.AlwaysRESP2 || parsed.AlwaysRESP2
	return ro, nil
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
	return newClient(rdb, true, uuid.NewString(), o)
}

// connect makes the rueidis client of ro, within ctx: the dial timeout is cut to ctx's deadline, and a ctx
// that ends first abandons the attempt (the client it may still make is closed).
func connect(ctx context.Context, ro rueidis.ClientOption) (rueidis.Client, error) {
	if ro.Dialer.Timeout <= 0 {
		ro.Dialer.Timeout = rueidis.DefaultDialTimeout
	}
	if dl, ok := ctx.Deadline(); ok {
		ro.Dialer.Timeout = max(min(ro.Dialer.Timeout, time.Until(dl)), time.Millisecond)
	}
	type made struct {
		rdb rueidis.Client
		err error
	}
	done := make(chan made, 1)
	go func() {
		rdb, err := rueidis.NewClient(ro)
		done <- made{rdb, err}
	}()
	select {
	case m := <-done:
		if m.err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return nil, errorf("%w: %w (%w)", ErrUnavailable, cerr, m.err)
			}
			return nil, connectError(m.err)
		}
		return m.rdb, nil
	case <-ctx.Done():
		go func() { // the attempt ends within the dial timeout; close what it makes
			if m := <-done; m.rdb != nil {
				m.rdb.Close()
			}
		}()
		return nil, errorf("%w: %w", ErrUnavailable, ctx.Err())
	}
}

func (o Options) validate() (Options, error) {
	switch {
	case o.WatchdogTimeout < 0:
		return o, &opError{op: "new", err: fmt.Errorf("%w: %w: negative watchdog timeout", ErrInvalidOptions, ErrInvalidDuration)}
	case o.ShardedPubSub < ShardedPubSubAuto || o.ShardedPubSub > ShardedPubSubOff:
		return o, &opError{op: "new", err: fmt.Errorf("%w: unknown ShardedPubSub %d", ErrInvalidOptions, o.ShardedPubSub)}
	case o.WatchdogTimeout == 0:
		o.WatchdogTimeout = DefaultWatchdogTimeout
	case o.WatchdogTimeout < MinWatchdogTimeout:
		return o, &opError{op: "new", err: fmt.Errorf("%w: %w: watchdog timeout %v is below the minimum, %v",
			ErrInvalidOptions, ErrInvalidDuration, o.WatchdogTimeout, MinWatchdogTimeout)}
	}
	o.WatchdogTimeout = roundUpToMillis(o.WatchdogTimeout)
	switch {
	case o.FairLockWaitTimeout < 0:
		return o, &opError{op: "new", err: errorf("%w: %w: negative fair lock wait timeout", ErrInvalidOptions, ErrInvalidDuration)}
	case o.FairLockWaitTimeout == 0:
		o.FairLockWaitTimeout = defaultFairLockWaitTimeout
	}
	return o, nil
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
	c.hub = newHub(redisSubscriber{rdb}, life, c.cluster, c.shardedPubSub)
	return c, nil
}

// attemptID returns a new acquisition attempt id.
func (c *Client) attemptID() string {
	return strconv.FormatUint(c.attempts.Add(1), 36)
}

// ID returns the Client's UUID, the first part of every owner field it writes.
func (c *Client) ID() string {
	if c == nil {
		return ""
	}
	return c.id
}

// DefaultCloseTimeout bounds Close: how long it waits for Redis to confirm that the Client's holds are
// given up before it closes the Client anyway (see CloseContext).
const DefaultCloseTimeout = 5 * time.Second

// Close is CloseContext bounded by DefaultCloseTimeout: it gives up everything the Client holds, waits up
// to DefaultCloseTimeout for Redis to confirm it, then closes the Client. When the bound passed first, its
// error matches context.DeadlineExceeded.
func (c *Client) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultCloseTimeout)
	defer cancel()
	return c.CloseContext(ctx)
}

// CloseContext gives up everything the Client holds, as etcd's Session.Close does, and closes the Client:
//
//   - Calls made from then on, and calls that wait (Lock, Acquire, Campaign, ...), return ErrClosed. An
//     acquisition that was under way and succeeds meanwhile is given up too, and returns ErrClosed.
//   - Every hold of every owner (locks of every kind, composite locks' parts on this Client, leased holds,
//     permits, leadership) ends for the Client at once: renewal stops, and its contexts (HoldContext,
//     Permit.Context, LeadershipContext) end before anything is sent, with a cause matching ErrClosed and
//     context.Canceled, not ErrLockLost: the Client gives the hold up as an owner's Unlock would.
//   - Then every hold is released in Redis (all its reentrant levels), every permit given back and every
//     leadership resigned, and every waiter leaves the queue it was in (a FairLock's, a priority writers'),
//     one script run each (a reentrant hold: one per level), all at once; each release is announced as its
//     owner's Unlock would announce it, so the next waiter, on any Client (relock's or Redisson's), gets
//     the lock at once.
//   - Work the Client left to the background finishes too: releases of Unlocks whose ctx had ended, undos
//     of acquisitions whose reply was lost, give-backs of permits taken by abandoned acquisitions.
//
// It waits for Redis to confirm all of it for as long as ctx allows; a release met by a server that is
// loading its data, or unreachable, is tried again until then, or until its hold would have expired. Then
// the Client closes: its subscription connection and goroutines end and, when New built the rueidis client,
// that client is closed. It returns nil when everything was given up in Redis; an error matching ctx.Err()
// when ctx ended first; or an error saying how many holds Redis did not release. What Redis was not told of
// ends by itself, at the end of its lease or watchdog timeout, as a dead process's holds would. With a ctx
// that never ends, CloseContext waits as long as Redis takes to answer the calls under way.
//
// Close and CloseContext are idempotent: every call after the first returns nil at once, and a call made
// while the first is under way waits for it.
func (c *Client) CloseContext(ctx context.Context) error {
	if c == nil {
		return ErrNilClient
	}
	var err error
	c.once.Do(func() { err = c.shutdown(ctx, false) })
	return err
}

// shutdown is Close. With abandon, it gives nothing up and waits for nothing: the Client stops as a process
// that dies would (a test's dead holder), and its holds' contexts end with errClientClosed.
func (c *Client) shutdown(ctx context.Context, abandon bool) error {
	// Calls are refused, and waits end, from now on.
	c.bgMu.Lock()
	c.closed.Store(true)
	c.bgMu.Unlock()
	c.ops.close()
	if abandon {
		c.bg.close()
		c.end()
	}
	c.beginClose()
	c.hub.stop()
	// Every hold ends for the Client, and is given up in the background, all at once: rueidis pipelines the
	// releases. Acquisitions under way are waited for below; one that succeeds is given up as it lands
	// (holdTable.acquired).
	var failed atomic.Int64
	var lastErr atomic.Pointer[error]
	gives := c.holds.shut(abandon)
	for _, g := range gives {
		c.goBackground(func(life context.Context) {
			if err := g.run(life); err != nil {
				lastErr.Store(&err)
				failed.Add(1)
			}
		})
	}
	var err error
	if !abandon {
		// Acquisitions under way first: what they leave to the background is background work.
		if err = c.ops.wait(ctx); err == nil {
			err = c.bg.wait(ctx)
		}
	}
	// The end: background work still under way is cancelled (an attempt alone on its connection goes on
	// until its own deadline, at most retryAttemptTimeout: rueidis ignores an earlier cancellation there).
	// Acquisitions still under way (Redis does not answer them) end when the rueidis client is closed.
	c.bg.close()
	c.end()
	c.holds.close()
	c.tel.close()
	// What is left may wait on Redis: the hub's loop for a connection being dialled, rueidis's Close for
	// silent connections (a second each). It finishes in the background once ctx has ended.
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		c.hub.close()
		_ = c.bg.wait(context.Background())
		if !c.borrowed {
			c.rdb.Close()
		}
		c.workers.close(retryAttemptTimeout)
	}()
	select {
	case <-finished:
	case <-ctx.Done():
	}
	switch {
	case abandon:
		return nil
	case err != nil:
		return &opError{op: "close", err: fmt.Errorf("%w: what was not given up in time expires by itself", err)}
	case failed.Load() > 0:
		return &opError{op: "close", err: fmt.Errorf("%d of %d holds not released (they expire by themselves): %w",
			failed.Load(), len(gives), *lastErr.Load())}
	}
	return nil
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

// tasks counts work that Close waits for, and refuses more once closed.
type tasks struct {
	mu     sync.Mutex
	n      int
	closed bool
	idle   chan struct{} // made by wait, closed when n drops to 0
}

// enter counts one more task, unless tasks is closed.
func (t *tasks) enter() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.n++
	return true
}

// leave counts a task out.
func (t *tasks) leave() {
	t.mu.Lock()
	if t.n--; t.n == 0 && t.idle != nil {
		close(t.idle)
		t.idle = nil
	}
	t.mu.Unlock()
}

// close refuses every task from now on.
func (t *tasks) close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
}

// wait waits until no task is under way, or ctx ends (its error).
func (t *tasks) wait(ctx context.Context) error {
	for {
		t.mu.Lock()
		if t.n == 0 {
			t.mu.Unlock()
			return nil
		}
		if t.idle == nil {
			t.idle = make(chan struct{})
		}
		idle := t.idle
		t.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// begin counts an operation in, for Close to wait for: an acquisition, whose outcome may leave a hold to
// give up. It reports false, counting nothing, once Close has begun.
func (c *Client) begin() bool { return c.ops.enter() }

// finish counts out an operation that begin counted in.
func (c *Client) finish() { c.ops.leave() }

// waitAtMost waits for wg, for up to d.
func waitAtMost(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	}
}

// goBackground runs fn under the Client's lifetime; Close waits for it, up to its bound, then ends that
// lifetime. It reports false, without running fn, once Close has ended the Client's lifetime.
func (c *Client) goBackground(fn func(ctx context.Context)) bool {
	if !c.bg.enter() {
		return false
	}
	go func() {
		defer c.bg.leave()
		fn(c.life)
	}()
	return true
}

// retryUnknown runs call until Redis answers it (see retry; call must be safe to repeat: an attempt whose
// outcome is unknown may have run), the deadline passes or life ends, and returns the last reply, or -1
// when none came.
func (c *Client) retryUnknown(life context.Context, deadline time.Time, call func(ctx context.Context) (int64, error)) int64 {
	n, err := c.retry(life, deadline, true, call)
	if err != nil {
		return -1
	}
	return n
}

// retry runs call until Redis answers it, the deadline passes or life ends, and returns the last reply and
// error. An attempt is made again after an error that shows it did not run (a connection that could not be
// made; a server loading its data after a restart, or a cluster failing over, answers LOADING, TRYAGAIN,
// CLUSTERDOWN or MASTERDOWN without running it) and, when repeatable, after one whose outcome is unknown:
// call must then be safe to repeat, for such an attempt may have run. Each attempt gets at most
// retryAttemptTimeout, a deadline that also bounds the re-dial it may start (rueidis dials under the
// context of the call that found the connection broken, and makes other calls wait for that dial).
func (c *Client) retry(life context.Context, deadline time.Time, repeatable bool, call func(ctx context.Context) (int64, error)) (int64, error) {
	for {
		attemptDeadline := time.Now().Add(retryAttemptTimeout)
		if deadline.Before(attemptDeadline) {
			attemptDeadline = deadline
		}
		ctx, cancel := context.WithDeadline(life, attemptDeadline)
		n, err := call(ctx)
		cancel()
		if err == nil {
			return n, nil
		}
		again := didNotRun(err) || repeatable && (outcomeUnknown(err) || transient(err))
		if !again || time.Now().After(deadline) {
			return -1, err
		}
		select {
		case <-life.Done():
			return -1, err
		case <-time.After(retryBackoff):
		}
	}
}
