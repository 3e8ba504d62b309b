package relock

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// instrumentationName names relock's tracer and meter.
const instrumentationName = "github.com/relock-go/relock"

// Attributes of relock's spans and metrics. Metrics carry only the low-cardinality ones (kind, outcome):
// lock names are often unbounded ("order:<id>") and belong on spans.
//
// Spans: "relock.acquire" (the whole acquisition, waiting included), "relock.unlock",
// "relock.force_unlock", and "relock.hold", from a first acquisition to the release or loss, with an
// event "renewal failed" for each renewal that got no answer, "lock lost" when the hold is lost, and "max
// hold reached" when its budget (WithMaxHold) ends it.
// Metrics: relock.acquisitions and relock.wait.duration {kind, outcome}, relock.hold.duration {kind},
// relock.renewals {outcome}, relock.losses {kind}, relock.max_hold_reached {kind}, relock.held {kind}.
//
// Outcomes: acquired, timeout (the wait ran out), canceled (the context ended), error; released (the last
// hold), decremented (one of several), not_held; renewed, renew_failed (no answer), gone (Redis no longer
// has the hold).
const (
	AttrLockName = attribute.Key("relock.lock.name")     // the lock's name
	AttrLockKind = attribute.Key("relock.lock.kind")     // "rlock", "fair", "read", "write", "multi", "redlock"
	AttrOutcome  = attribute.Key("relock.outcome")       // how the operation ended (below)
	AttrAttempts = attribute.Key("relock.attempts")      // acquisition attempts (script runs) in one acquire
	AttrWaitMS   = attribute.Key("relock.wait_ms")       // time spent acquiring, in milliseconds
	AttrHoldMS   = attribute.Key("relock.hold_ms")       // time the hold lasted, in milliseconds
	AttrRenewals = attribute.Key("relock.renewals")      // successful renewals of a hold
	AttrCause    = attribute.Key("relock.loss.cause")    // why a hold was lost
	AttrFencing  = attribute.Key("relock.fencing_token") // the hold's fencing token
)

// lockKind is the kind of lock a span or metric is about.
type lockKind uint8

const (
	kindRLock lockKind = iota
	kindFair
	kindRead
	kindWrite
	kindMulti
	kindRedLock
	kindSemaphore
	kindLatch
	numKinds
)

func (k lockKind) String() string {
	switch k {
	case kindRLock:
		return "rlock"
	case kindFair:
		return "fair"
	case kindRead:
		return "read"
	case kindWrite:
		return "write"
	case kindMulti:
		return "multi"
	case kindRedLock:
		return "redlock"
	case kindSemaphore:
		return "semaphore"
	case kindLatch:
		return "latch"
	}
	return "unknown"
}

// outcome is how an operation ended: the value of AttrOutcome.
type outcome uint8

const (
	outcomeAcquired    outcome = iota // acquire: the owner holds the lock
	outcomeTimeout                    // acquire: the wait ran out
	outcomeCanceled                   // acquire: the context ended
	outcomeError                      // any: an error (Redis unreachable, bad input, closed Client)
	outcomeReleased                   // unlock: the last hold was released
	outcomeDecremented                // unlock: one of several holds was released
	outcomeNotHeld                    // unlock: the owner did not hold the lock
	outcomeRenewed                    // renewal: extended
	outcomeRenewFailed                // renewal: no answer from Redis; retried until the hold expires
	outcomeGone                       // renewal: Redis no longer has the hold
	numOutcomes
)

func (o outcome) String() string {
	return [...]string{"acquired", "timeout", "canceled", "error", "released", "decremented", "not_held",
		"renewed", "renew_failed", "gone"}[o]
}

// telemetry is a Client's tracer and instruments. Attribute sets are built once, so recording a
// measurement allocates nothing.
type telemetry struct {
	tracer trace.Tracer
	// global: tracer is the unset global provider's, which records nothing until an SDK is installed
	// (otel.SetTracerProvider); until then relock starts no spans, which would cost allocations for nothing.
	global bool

	acquisitions metric.Int64Counter     // relock.acquisitions {kind, outcome}
	waitTime     metric.Float64Histogram // relock.wait.duration {kind, outcome}
	holdTime     metric.Float64Histogram // relock.hold.duration {kind}
	renewals     metric.Int64Counter     // relock.renewals {outcome}
	losses       metric.Int64Counter     // relock.losses {kind}
	maxHold      metric.Int64Counter     // relock.max_hold_reached {kind}
	atRisk       metric.Int64Counter     // relock.at_risk {kind}
	held         metric.Registration     // relock.held {kind}, observed from the watchdog's table

	log *slog.Logger // Options.Logger: where renewal failures and losses are logged; nil: slog.Default()

	// The attribute sets of measurements, as the instruments' variadic options take them (a slice made at
	// each call would be allocated: the instruments are interfaces).
	byKindOutcome [numKinds][numOutcomes]attrs
	byKind        [numKinds]attrs
	byOutcome     [numOutcomes]attrs
}

// attrs is one attribute set as each kind of instrument takes it.
type attrs struct {
	add     []metric.AddOption
	record  []metric.RecordOption
	observe []metric.ObserveOption
}

// unsetGlobalTracerProvider is the global TracerProvider as the otel package has it before an SDK is
// installed, or nil if one was installed before this package was initialized. Its tracers' spans record
// nothing and only carry their parent's span context.
var unsetGlobalTracerProvider = func() trace.TracerProvider {
	tp := otel.GetTracerProvider()
	if t := reflect.TypeOf(tp); t.Kind() == reflect.Pointer && t.Elem().PkgPath() == "go.opentelemetry.io/otel/internal/global" {
		return tp
	}
	return nil
}()

func newTelemetry(tp trace.TracerProvider, mp metric.MeterProvider, observeHeld func() [numKinds]int64) (*telemetry, error) {
	// A comparison with the unset provider, a pointer, never panics; one with any provider could (a struct
	// value holding a slice is not comparable).
	t := &telemetry{tracer: tp.Tracer(instrumentationName), global: unsetGlobalTracerProvider != nil && tp == unsetGlobalTracerProvider}
	m := mp.Meter(instrumentationName)
	// Every instrument is made; what failed is returned, joined.
	var errs [8]error
	t.acquisitions, errs[0] = m.Int64Counter("relock.acquisitions",
		metric.WithDescription("Lock acquisitions (Lock, TryLock), by outcome."), metric.WithUnit("{acquisition}"))
	t.waitTime, errs[1] = m.Float64Histogram("relock.wait.duration",
		metric.WithDescription("Time from the start of an acquisition to its outcome."), metric.WithUnit("s"))
	t.holdTime, errs[2] = m.Float64Histogram("relock.hold.duration",
		metric.WithDescription("Time from a first acquisition to the final release or loss of the hold."), metric.WithUnit("s"))
	t.renewals, errs[3] = m.Int64Counter("relock.renewals",
		metric.WithDescription("Watchdog renewals of holds, by outcome."), metric.WithUnit("{renewal}"))
	t.losses, errs[4] = m.Int64Counter("relock.losses",
		metric.WithDescription("Holds lost before their owner released them."), metric.WithUnit("{loss}"))
	t.atRisk, errs[6] = m.Int64Counter("relock.at_risk",
		metric.WithDescription("Times a hold became at risk: the watchdog could not renew it, and had not since it last could."), metric.WithUnit("{hold}"))
	t.maxHold, errs[7] = m.Int64Counter("relock.max_hold_reached",
		metric.WithDescription("Holds ended by their budget (WithMaxHold)."), metric.WithUnit("{hold}"))
	heldGauge, err := m.Int64ObservableUpDownCounter("relock.held",
		metric.WithDescription("Locks held by this Client's owners."), metric.WithUnit("{lock}"))
	errs[5] = err
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	for k := lockKind(0); k < numKinds; k++ {
		kind := AttrLockKind.String(k.String())
		t.byKind[k] = attributeSet(kind)
		for o := outcome(0); o < numOutcomes; o++ {
			t.byKindOutcome[k][o] = attributeSet(kind, AttrOutcome.String(o.String()))
		}
	}
	for o := outcome(0); o < numOutcomes; o++ {
		t.byOutcome[o] = attributeSet(AttrOutcome.String(o.String()))
	}
	t.held, err = m.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		counts := observeHeld()
		for k, n := range counts {
			obs.ObserveInt64(heldGauge, n, t.byKind[k].observe...)
		}
		return nil
	}, heldGauge)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// attributeSet is the attribute set of kvs, as options of each kind of instrument.
func attributeSet(kvs ...attribute.KeyValue) attrs {
	o := metric.WithAttributeSet(attribute.NewSet(kvs...))
	return attrs{add: []metric.AddOption{o}, record: []metric.RecordOption{o}, observe: []metric.ObserveOption{o}}
}

func (t *telemetry) close() {
	_ = t.held.Unregister()
}

// startSpan starts one of relock's spans and, when it records, names the lock it is about.
func (t *telemetry) startSpan(ctx context.Context, name string, kind lockKind, lock string) (context.Context, trace.Span) {
	if t.silent() {
		return ctx, noSpan
	}
	ctx, span := t.tracer.Start(ctx, name)
	if span.IsRecording() {
		span.SetAttributes(AttrLockName.String(lock), AttrLockKind.String(kind.String()))
	}
	return ctx, span
}

// startHold starts the span of a hold, a child of the acquiring call's span.
func (t *telemetry) startHold(parent context.Context, kind lockKind, lock string) trace.Span {
	_, span := t.startSpan(parent, "relock.hold", kind, lock)
	return span
}

// silent reports whether the tracer is the global one with no SDK behind it.
func (t *telemetry) silent() bool {
	return t.global && otel.GetTracerProvider() == unsetGlobalTracerProvider
}

// endSpan records how the operation ended and ends the span.
func endSpan(span trace.Span, o outcome, err error, attrs ...attribute.KeyValue) {
	if span.IsRecording() {
		span.SetAttributes(AttrOutcome.String(o.String()))
		span.SetAttributes(attrs...)
		if err != nil && o == outcomeError {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// acquired records the end of an acquisition.
func (t *telemetry) acquired(ctx context.Context, kind lockKind, o outcome, wait time.Duration) {
	a := &t.byKindOutcome[kind][o]
	t.acquisitions.Add(ctx, 1, a.add...)
	t.waitTime.Record(ctx, wait.Seconds(), a.record...)
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
