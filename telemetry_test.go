package relock_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// observed is a Client wired to an in-memory span recorder and a manual metric reader.
type observed struct {
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	opts   *relock.Options
}

func newObserved(t *testing.T, watchdog time.Duration) *observed {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	return &observed{spans: spans, reader: reader,
		opts: &relock.Options{WatchdogTimeout: watchdog, TracerProvider: tp, MeterProvider: mp}}
}

// ended returns the ended spans called name.
func (o *observed) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range o.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attrOf(s sdktrace.ReadOnlySpan, key attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// sum returns the value of an int64 sum (or up-down counter) metric for the data point that has the given
// attributes, and the count of a histogram's data point.
func (o *observed) metric(t *testing.T, name string, attrs ...attribute.KeyValue) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := o.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	want := attribute.NewSet(attrs...)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range data.DataPoints {
					if dp.Attributes.Equals(&want) {
						return dp.Value
					}
				}
			case metricdata.Histogram[float64]:
				for _, dp := range data.DataPoints {
					if dp.Attributes.Equals(&want) {
						return int64(dp.Count)
					}
				}
			}
		}
	}
	return 0
}

func TestTracesAndMetrics(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	o := newObserved(t, time.Second)
	c := newClient(t, srv, o.opts)
	other := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	rlock := relock.AttrLockKind.String("rlock")

	// An uncontended Lock, held past two renewals, and its Unlock.
	l := c.Lock("traced")
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(800 * time.Millisecond)
	if n := o.metric(t, "relock.held", rlock); n != 1 {
		t.Errorf("relock.held = %d while holding one lock", n)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// A TryLock that times out against another Client's hold.
	if err := other.Lock("busy").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.Lock("busy").TryLock(ctx, 100*time.Millisecond, 0); ok || err != nil {
		t.Fatalf("TryLock = %v, %v", ok, err)
	}
	// A hold deleted behind the holder's back.
	if err := c.Lock("doomed").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	held, _ := c.Lock("doomed").HoldContext(ctx)
	do(t, rdb, "DEL", "doomed")
	<-held.Done()
	// An Unlock by a non-owner, and a ForceUnlock.
	_ = c.Lock("busy").Unlock(ctx)
	if _, err := c.Lock("busy").ForceUnlock(ctx); err != nil {
		t.Fatal(err)
	}

	acquires := o.ended("relock.acquire")
	if len(acquires) != 3 {
		t.Fatalf("%d relock.acquire spans, want 3", len(acquires))
	}
	first := acquires[0]
	if v := attrOf(first, relock.AttrLockName).AsString(); v != "traced" {
		t.Errorf("acquire span lock name = %q", v)
	}
	if v := attrOf(first, relock.AttrLockKind).AsString(); v != "rlock" {
		t.Errorf("acquire span lock kind = %q", v)
	}
	if v := attrOf(first, relock.AttrOutcome).AsString(); v != "acquired" {
		t.Errorf("acquire span outcome = %q", v)
	}
	if v := attrOf(first, relock.AttrAttempts).AsInt64(); v != 1 {
		t.Errorf("uncontended acquire made %d attempts", v)
	}
	timedOut := acquires[1]
	if v := attrOf(timedOut, relock.AttrOutcome).AsString(); v != "timeout" {
		t.Errorf("timed-out acquire outcome = %q", v)
	}
	if a, w := attrOf(timedOut, relock.AttrAttempts).AsInt64(), attrOf(timedOut, relock.AttrWaitMS).AsFloat64(); a < 2 || w < 100 {
		t.Errorf("timed-out acquire: %d attempts, waited %.1f ms; want >= 2 attempts and >= 100 ms", a, w)
	}

	unlocks := o.ended("relock.unlock")
	if len(unlocks) != 2 || attrOf(unlocks[0], relock.AttrOutcome).AsString() != "released" ||
		attrOf(unlocks[1], relock.AttrOutcome).AsString() != "not_held" {
		t.Errorf("unlock spans: %d, outcomes %v", len(unlocks), outcomes(unlocks))
	}
	if fu := o.ended("relock.force_unlock"); len(fu) != 1 || attrOf(fu[0], relock.AttrOutcome).AsString() != "released" {
		t.Errorf("force_unlock spans: %v", outcomes(fu))
	}

	holds := o.ended("relock.hold")
	if len(holds) != 2 {
		t.Fatalf("%d relock.hold spans ended, want 2", len(holds))
	}
	if v := attrOf(holds[0], relock.AttrRenewals).AsInt64(); v < 2 {
		t.Errorf("the hold kept 800 ms with a 1 s watchdog was renewed %d times", v)
	}
	if v := attrOf(holds[1], relock.AttrOutcome).AsString(); v != "gone" || !hasEvent(holds[1], "lock lost") {
		t.Errorf("lost hold span: outcome %q, events %v", v, holds[1].Events())
	}

	for _, m := range []struct {
		name  string
		attrs []attribute.KeyValue
		min   int64
		max   int64
	}{
		{"relock.acquisitions", []attribute.KeyValue{rlock, relock.AttrOutcome.String("acquired")}, 2, 2},
		{"relock.acquisitions", []attribute.KeyValue{rlock, relock.AttrOutcome.String("timeout")}, 1, 1},
		{"relock.wait.duration", []attribute.KeyValue{rlock, relock.AttrOutcome.String("timeout")}, 1, 1},
		{"relock.hold.duration", []attribute.KeyValue{rlock}, 2, 2},
		{"relock.renewals", []attribute.KeyValue{relock.AttrOutcome.String("renewed")}, 2, 100},
		{"relock.renewals", []attribute.KeyValue{relock.AttrOutcome.String("gone")}, 1, 1},
		{"relock.losses", []attribute.KeyValue{rlock}, 1, 1},
		{"relock.held", []attribute.KeyValue{rlock}, 0, 0},
	} {
		if n := o.metric(t, m.name, m.attrs...); n < m.min || n > m.max {
			t.Errorf("%s %v = %d, want [%d, %d]", m.name, m.attrs, n, m.min, m.max)
		}
	}
}

func TestFailedRenewalIsTraced(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	o := newObserved(t, 3*time.Second)
	c := newClient(t, srv, o.opts)
	ctx := ctxTimeout(t, 30*time.Second)
	l := c.Lock("stalled")
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	// The first renewal is due 1 s after the acquisition. Its batch gives up after 1 s (timeout/3), and
	// a retry follows 300 ms later (timeout/10), still within the pause; the next one succeeds, before the
	// hold's 3 s expiry.
	time.Sleep(800 * time.Millisecond)
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1700 * time.Millisecond)
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a renewal succeeds after the pause", func() bool {
		return o.metric(t, "relock.renewals", relock.AttrOutcome.String("renewed")) >= 1
	})
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := o.metric(t, "relock.renewals", relock.AttrOutcome.String("renew_failed")); n < 1 {
		t.Errorf("relock.renewals{renew_failed} = %d after a pause over a renewal", n)
	}
	holds := o.ended("relock.hold")
	if len(holds) != 1 || !hasEvent(holds[0], "renewal failed") || attrOf(holds[0], relock.AttrOutcome).AsString() != "released" {
		t.Fatalf("hold span: %d spans, events %v", len(holds), holds)
	}
}

func hasEvent(s sdktrace.ReadOnlySpan, name string) bool {
	for _, e := range s.Events() {
		if e.Name == name {
			return true
		}
	}
	return false
}

func outcomes(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, attrOf(s, relock.AttrOutcome).AsString())
	}
	return out
}
