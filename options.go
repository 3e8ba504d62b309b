package relock

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/rueidis"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// A Client's options: what they configure, their defaults, and how New and Wrap check them.

// DefaultWatchdogTimeout is the time to live of a hold acquired without a lease, when Options leaves
// WatchdogTimeout zero. It is Redisson's lockWatchdogTimeout default.
const DefaultWatchdogTimeout = 30 * time.Second

// MinWatchdogTimeout is the shortest WatchdogTimeout New and Wrap accept. The watchdog renews holds every
// WatchdogTimeout/3 and retries a failed renewal after WatchdogTimeout/10 (at least 10 ms): below this,
// holds would be lost to ordinary scheduling delays.
const MinWatchdogTimeout = 100 * time.Millisecond

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
	// ("lock", "kind"), the owner's field ("owner") and the error or cause ("error"). Nil means
	// slog.Default(), as it is when a record is written, so that an outage is never silent: a service
	// that configures slog (slog.SetDefault, before or after New) sees these records where it sees its
	// own, and one that does not sees them on stderr through the log package. To turn them off, give a
	// Logger that discards them: slog.New(slog.DiscardHandler). Nothing is logged, and nothing is spent,
	// while renewals succeed and no hold is lost.
	Logger *slog.Logger

	// ShardedPubSub chooses sharded (SPUBLISH, SSUBSCRIBE) or plain (PUBLISH, SUBSCRIBE) pub/sub for release
	// notifications on Redis Cluster. It must match the shardedSubscriptionMode of the Redisson clients that
	// share the locks. Zero means ShardedPubSubAuto, Redisson's default. A single server always uses plain
	// pub/sub.
	ShardedPubSub ShardedPubSub

	// NoHoldWatch turns off the watch of the Client's holds in Redis (see below), leaving the watchdog's
	// renewals and checks alone to tell a loss, up to WatchdogTimeout/3 after it. By default a Client
	// watches the keys of its holds (locks of every kind, and PermitSemaphore permits) with Redis's
	// client-side tracking, on one connection of its own (on a cluster, a rueidis client of its own with
	// client-side caching: one connection per node): a hold deleted or taken behind its holder's back
	// (ForceUnlock, TakeOver, a DEL, a flush) ends its HoldContext with ErrLockLost within milliseconds. It
	// costs, per hold that lasts over 5 ms, one HEXISTS, and one more after each change of its key (a
	// renewal every WatchdogTimeout/3), pipelined; and one tracking entry per key in Redis. Where Redis
	// refuses CLIENT TRACKING for good (an ACL without it, a server without it), or the connection speaks
	// RESP2 (ClientOption.AlwaysRESP2, or a client given to Wrap that speaks it), on which tracking sends
	// no invalidation, the watch turns itself off for the Client's lifetime; a refusal that may pass (BUSY
	// while a slow script runs, a lost connection) pauses it until Redis answers again. A cluster
	// client given to Wrap has none (its options cannot be copied). The watch does not see SWAPDB, for
	// which Redis sends no invalidation: the watchdog tells such a loss.
	NoHoldWatch bool
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
