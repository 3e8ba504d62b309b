package relock

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/redis/rueidis"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// renewBatchSize is how many holds one run of a renewal script extends. Bigger batches are split into
// several runs, all sent in one pipeline.
const renewBatchSize = 500

// ErrLockLost is the cause (context.Cause) of a hold's context when the hold ended without its owner
// releasing it: Redis no longer had it when the watchdog came to renew it (it expired during a pause,
// was deleted by ForceUnlock or by hand, or Redis restarted), the watchdog could not renew it before it
// expired, its lease ran out, or its Client was closed. Causes wrap it with the reason; test with
// errors.Is.
var ErrLockLost = errors.New("relock: lock lost")

// The causes of a loss. Each wraps ErrLockLost.
var (
	errHoldGone     = fmt.Errorf("%w: the hold is gone from Redis", ErrLockLost)
	errRenewTimeout = fmt.Errorf("%w: not renewed before it expired", ErrLockLost)
	errLeaseExpired = fmt.Errorf("%w: its lease ran out", ErrLockLost)
	errClientClosed = fmt.Errorf("%w: %w", ErrLockLost, ErrClosed)
)

// noSpan is the span of a hold that is not traced.
var noSpan = trace.SpanFromContext(context.Background())

// holdKey names one owner's hold on one lock.
type holdKey struct {
	key   string // the lock's key
	field string // the owner field
}

// renewal is how the watchdog extends a hold: a script that renews many holds of one kind in one run,
// given the Client's watchdog timeout (ms) in ARGV[1] and then, for each hold, its keys and args, of a
// number fixed by the script. It replies with one integer per hold: 1 renewed, 0 gone.
type renewal struct {
	script *script
	keys   []string
	args   []string
	// check asks the script to extend nothing and only say whether the hold is there (a lease hold, which
	// the watchdog watches for a loss without renewing it): the script is given 0 as the timeout.
	check bool
}

// acquisition is what a lock type reports to the watchdog when an acquisition succeeds.
type acquisition struct {
	kind   lockKind
	name   string
	count  int64           // the hold count Redis returned
	lease  time.Duration   // 0: the watchdog keeps the hold alive
	sentAt time.Time       // when the acquisition was sent: the hold's TTL runs from no earlier than this
	renew  renewal         // how to renew it (used when lease is 0)
	token  uint64          // fencing token, 0 if the lock is not fenced
	parent context.Context // the acquiring call's context: the hold span's parent
	traced bool            // the acquisition's span records: give the hold one too
	// keepAlive marks an entry that is not a hold but something a waiter keeps alive the same way (a fair
	// lock's queue entry): renewed like a hold, but without contexts, spans or metrics.
	keepAlive bool
}

// hold is what the Client knows of one owner's hold on one lock. Every field is guarded by watchdog.mu.
type hold struct {
	key        holdKey
	kind       lockKind
	name       string
	count      int64
	renew      renewal       // how to renew the hold, or, for a lease hold, check that it is still there
	renews     bool          // the watchdog extends the hold (an acquisition without a lease); else it only checks it
	expiresAt  time.Time     // Redis drops the hold at this time or later, unless it is renewed
	ttl        time.Duration // the longest lease (or watchdog timeout) its acquisitions asked for
	next       time.Time     // when the watchdog next acts: a renewal falls due, or the lease ends
	index      int           // position in the watchdog's queue; -1 when not queued
	inflight   bool          // a renewal of it is under way
	token      uint64
	acquiredAt time.Time // zero for a placeholder made by settle
	renewals   int
	ended      bool
	keepAlive  bool // see acquisition.keepAlive
	// settling is closed when the undo of an acquisition whose reply was lost, or the completion of an
	// unlock whose reply was lost, is over. Until then the owner's next operation on this hold waits, so
	// the undo or completion sees counts nobody else is changing.
	settling chan struct{}
	// ctx ends, with the hold's end as cause, when the hold ends; made by the first holdContext call.
	// derived memoizes, by parent, the contexts holdContext derived from it for a parent that can end, so
	// that calling holdContext again and again with one parent costs no memory.
	ctx     context.Context
	cancel  context.CancelCauseFunc
	derived map[context.Context]derived
	span    trace.Span // "relock.hold", from the first acquisition to the release or loss
}

// watchdog is the Client's table of its owners' holds and the one goroutine that keeps them alive.
// Holds without a lease are renewed every timeout/3, in batches, for as long as they are held. A hold
// that Redis no longer has, that could not be renewed before it expired, or whose lease ran out is lost:
// its context is cancelled with a cause wrapping ErrLockLost.
type watchdog struct {
	c       *Client
	timeout time.Duration

	mu      sync.Mutex
	holds   map[holdKey]*hold
	queue   holdQueue
	started bool
	closed  bool
	// sleepUntil is when the loop will next look at the queue unless woken: a hold whose next event is
	// later needs no wake-up, which keeps the loop asleep through most acquisitions.
	sleepUntil time.Time
	wake       chan struct{}
	stopped    chan struct{}
}

func newWatchdog(c *Client, timeout time.Duration) *watchdog {
	return &watchdog{
		c:       c,
		timeout: timeout,
		holds:   make(map[holdKey]*hold),
		wake:    make(chan struct{}, 1),
		stopped: make(chan struct{}),
	}
}

// prepare waits until nothing settles k, and returns the hold count known for it.
func (w *watchdog) prepare(ctx context.Context, k holdKey) (int64, error) {
	for {
		w.mu.Lock()
		h := w.holds[k]
		if h == nil {
			w.mu.Unlock()
			return 0, nil
		}
		count, settling := h.count, h.settling
		w.mu.Unlock()
		if settling == nil {
			return count, nil
		}
		select {
		case <-settling:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// acquired records a successful acquisition, first or reentrant, and schedules what the hold needs.
func (w *watchdog) acquired(k holdKey, a acquisition) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	h := w.holds[k]
	if h == nil {
		h = &hold{key: k, index: -1}
		w.holds[k] = h
	}
	if h.acquiredAt.IsZero() { // a first acquisition (or a placeholder being filled in)
		h.kind, h.name, h.acquiredAt, h.keepAlive = a.kind, a.name, time.Now(), a.keepAlive
		h.span = noSpan
		if a.traced && !a.keepAlive { // no hold span where the acquisition was not traced (no SDK, or not sampled)
			_, h.span = w.c.tel.tracer.Start(a.parent, "relock.hold")
			h.span.SetAttributes(AttrLockName.String(a.name), AttrLockKind.String(a.kind.String()))
		}
	}
	h.count = a.count
	if a.token != 0 {
		h.token = a.token
	}
	h.renew = a.renew
	ttl := a.lease
	if a.lease == 0 {
		h.renews = true
		ttl = w.timeout
	}
	h.ttl = max(h.ttl, ttl)
	expires := a.sentAt.Add(ttl)
	if expires.After(h.expiresAt) {
		h.expiresAt = expires
	}
	w.scheduleLocked(h, a.sentAt)
}

// scheduleLocked queues h for its next event, timeout/3 after base: a renewal, or, for a lease hold, a
// check that Redis still has it, unless its lease ends first.
func (w *watchdog) scheduleLocked(h *hold, base time.Time) {
	h.next = base.Add(w.timeout / 3)
	if !h.renews && h.expiresAt.Before(h.next) {
		h.next = h.expiresAt
	}
	if h.inflight {
		return // the renewal's outcome queues it
	}
	if h.index >= 0 {
		heap.Fix(&w.queue, h.index)
	} else {
		heap.Push(&w.queue, h)
	}
	if !w.started {
		w.started = true
		go w.loop()
	} else if h.next.Before(w.sleepUntil) {
		w.wakeLocked()
	}
}

// wakeLocked makes the loop look at the queue again before it next would.
func (w *watchdog) wakeLocked() {
	w.sleepUntil = time.Time{}
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// released records the hold count Redis returned for an unlock; at zero the hold ends.
func (w *watchdog) released(k holdKey, left int64) {
	w.mu.Lock()
	h := w.holds[k]
	if h == nil {
		w.mu.Unlock()
		return
	}
	h.count = left
	var e ending
	if left <= 0 && h.settling == nil {
		e = w.endLocked(h, context.Canceled)
	}
	w.mu.Unlock()
	e.report(w.c.tel)
}

// notHeld records that Redis says the owner does not hold the lock: a hold this Client believed in was
// lost without the watchdog noticing yet.
func (w *watchdog) notHeld(k holdKey) {
	w.mu.Lock()
	var e ending
	if h := w.holds[k]; h != nil && h.settling == nil {
		e = w.endLocked(h, errHoldGone)
	}
	w.mu.Unlock()
	e.report(w.c.tel)
}

// settle marks k as being settled; the returned func ends that, given the hold count then known
// (negative: unchanged).
func (w *watchdog) settle(k holdKey) (prior int64, done func(count int64)) {
	w.mu.Lock()
	h := w.holds[k]
	if h == nil {
		h = &hold{key: k, index: -1}
		w.holds[k] = h
	}
	prior = h.count
	ch := make(chan struct{})
	h.settling = ch
	w.mu.Unlock()
	return prior, w.settled(h, ch)
}

// unlocking marks the owner's hold k as being released in the background (an Unlock that could not learn
// the outcome of its release, or could not send it). If that release is the owner's last (the hold count
// known is 1 or less), the hold ends now for the Client: the watchdog stops renewing it and its contexts end
// with context.Canceled. Until done is called with the count Redis answered (negative: no answer), the
// owner's next operation on the lock waits. after is the settling the release must wait for first (an
// earlier operation of the owner whose outcome is being settled), or nil; deadline is when the hold would
// have expired, after which there is nothing left to release.
func (w *watchdog) unlocking(k holdKey) (after <-chan struct{}, deadline time.Time, done func(count int64)) {
	w.mu.Lock()
	now := time.Now()
	deadline = now.Add(w.timeout)
	h := w.holds[k]
	var e ending
	if h != nil {
		if h.settling != nil {
			after = h.settling
		}
		if !h.acquiredAt.IsZero() {
			deadline = h.expiresAt
			if h.count <= 1 {
				e = w.endLocked(h, context.Canceled)
				h = nil
			}
		}
	}
	if h == nil {
		h = &hold{key: k, index: -1}
		w.holds[k] = h
	}
	ch := make(chan struct{})
	h.settling = ch
	w.mu.Unlock()
	e.report(w.c.tel)
	return after, deadline, w.settled(h, ch)
}

// settled returns the function that ends the settling ch of h, given the hold count then known (negative:
// unchanged); a hold left with no count ends.
func (w *watchdog) settled(h *hold, ch chan struct{}) func(count int64) {
	return func(count int64) {
		w.mu.Lock()
		if count >= 0 {
			h.count = count
		}
		if h.settling == ch {
			h.settling = nil
		}
		close(ch)
		var e ending
		if h.count <= 0 && h.settling == nil {
			e = w.endLocked(h, context.Canceled)
		}
		w.mu.Unlock()
		e.report(w.c.tel)
	}
}

// holdContext returns a context derived from parent that is cancelled, before the call that ends the hold
// k returns, when the hold ends. It costs O(1): a parent that cannot end gets a light wrapper of the hold's
// own context, and a parent that can end gets the same derived context every time.
func (w *watchdog) holdContext(parent context.Context, k holdKey) (context.Context, error) {
	w.mu.Lock()
	h := w.holds[k]
	if h == nil || h.count <= 0 || h.ended || h.keepAlive {
		w.mu.Unlock()
		return nil, ErrNotHeld
	}
	hc := h.doneLocked()
	if parent.Done() == nil {
		w.mu.Unlock()
		return withValuesOf(hc, parent), nil
	}
	if !comparableContext(parent) { // no memo: the context ends just after the hold, in another goroutine
		d, cancel := context.WithCancelCause(parent)
		w.mu.Unlock()
		stop := context.AfterFunc(hc, func() { cancel(context.Cause(hc)) })
		context.AfterFunc(d, func() { stop() })
		return d, nil
	}
	if d, ok := h.derived[parent]; ok {
		w.mu.Unlock()
		return d.ctx, nil
	}
	ctx, cancel := context.WithCancelCause(parent)
	if h.derived == nil {
		h.derived = make(map[context.Context]derived)
	}
	h.derived[parent] = derived{ctx: ctx, cancel: cancel} // ended with the hold (endLocked)
	w.mu.Unlock()
	context.AfterFunc(ctx, func() { // parent ended: forget it
		w.mu.Lock()
		if h.derived[parent].ctx == ctx {
			delete(h.derived, parent)
		}
		w.mu.Unlock()
	})
	return ctx, nil
}

// derived is a context holdContext derived from a parent that can end, and its cancel function.
type derived struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// holdDone returns the context that ends, with the hold's end as cause, when the hold k ends.
func (w *watchdog) holdDone(k holdKey) (context.Context, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := w.holds[k]
	if h == nil || h.count <= 0 || h.ended || h.keepAlive {
		return nil, ErrNotHeld
	}
	return h.doneLocked(), nil
}

// doneLocked returns the context that ends with h, making it at the first call.
func (h *hold) doneLocked() context.Context {
	if h.ctx == nil {
		h.ctx, h.cancel = context.WithCancelCause(context.Background())
	}
	return h.ctx
}

// comparableContext reports whether ctx can be a map key (every context of the standard library can).
func comparableContext(ctx context.Context) bool {
	return reflect.TypeOf(ctx).Comparable()
}

// valuesCtx is a context that ends with done (a hold's context) and carries the values of values (the
// caller's context, which never ends). Lookups ask done first: it carries nothing but its own
// cancellation, so context.Cause finds the hold's cause, and every other key reaches the caller's values.
type valuesCtx struct {
	context.Context // done
	values          context.Context
}

func withValuesOf(done, values context.Context) context.Context {
	return valuesCtx{Context: done, values: values}
}

func (c valuesCtx) Value(key any) any {
	if v := c.Context.Value(key); v != nil {
		return v
	}
	return c.values.Value(key)
}

// token returns the fencing token of the hold k, if it is held and fenced.
func (w *watchdog) token(k holdKey) (uint64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if h := w.holds[k]; h != nil && h.count > 0 && !h.ended && !h.keepAlive {
		return h.token, true
	}
	return 0, false
}

// expiry returns when the hold k expires unless renewed, and its TTL, if it is held.
func (w *watchdog) expiry(k holdKey) (time.Time, time.Duration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if h := w.holds[k]; h != nil && h.count > 0 && !h.ended && !h.keepAlive {
		return h.expiresAt, h.ttl, true
	}
	return time.Time{}, 0, false
}

// count returns the hold count known for k.
func (w *watchdog) count(k holdKey) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if h := w.holds[k]; h != nil {
		return h.count
	}
	return 0
}

// heldByKind counts the holds by kind, for the relock.held metric.
func (w *watchdog) heldByKind() (n [numKinds]int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, h := range w.holds {
		if h.count > 0 && !h.ended && !h.keepAlive {
			n[h.kind]++
		}
	}
	return n
}

// ending is a hold that ended, to be reported once watchdog.mu is released: cancelling its context and
// ending its span call out of relock.
type ending struct {
	h       *hold
	cause   error
	held    time.Duration
	derived []context.CancelCauseFunc // the hold's derived contexts, to end with it
}

// endLocked removes h from the table and the queue.
func (w *watchdog) endLocked(h *hold, cause error) ending {
	if h.ended {
		return ending{}
	}
	h.ended = true
	if w.holds[h.key] == h {
		delete(w.holds, h.key)
	}
	if h.index >= 0 {
		heap.Remove(&w.queue, h.index)
	}
	if h.acquiredAt.IsZero() || h.keepAlive {
		return ending{} // a placeholder (nothing was ever held), or not a hold: nothing to report
	}
	e := ending{h: h, cause: cause, held: time.Since(h.acquiredAt)}
	for _, d := range h.derived {
		e.derived = append(e.derived, d.cancel)
	}
	return e
}

// report cancels the ended hold's context with its cause and records the end in its span and metrics.
func (e ending) report(t *telemetry) {
	h := e.h
	if h == nil {
		return
	}
	if h.cancel != nil {
		h.cancel(e.cause)
	}
	for _, cancel := range e.derived {
		cancel(e.cause)
	}
	ctx := context.Background()
	t.holdTime.Record(ctx, e.held.Seconds(), t.byKind[h.kind])
	o := outcomeReleased
	if errors.Is(e.cause, ErrLockLost) {
		o = outcomeGone
		if e.cause != errLeaseExpired {
			t.losses.Add(ctx, 1, t.byKind[h.kind])
		}
	}
	if h.span.IsRecording() {
		if o == outcomeGone {
			h.span.AddEvent("lock lost", trace.WithAttributes(AttrCause.String(e.cause.Error())))
		}
		attrs := []attribute.KeyValue{AttrHoldMS.Float64(millis(e.held)), AttrRenewals.Int(h.renewals)}
		if h.token != 0 {
			attrs = append(attrs, AttrFencing.Int64(int64(h.token)))
		}
		endSpan(h.span, o, nil, attrs...)
	} else {
		h.span.End()
	}
}

func reportAll(t *telemetry, es []ending) {
	for _, e := range es {
		e.report(t)
	}
}

// loop is the watchdog goroutine: it sleeps until the next event in the queue, handles what is due, and
// ends with the Client.
func (w *watchdog) loop() {
	defer close(w.stopped)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if wait := w.tick(time.Now()); wait >= 0 {
			timer.Reset(wait)
		} else {
			timer.Stop()
		}
		select {
		case <-timer.C:
		case <-w.wake:
		case <-w.c.life.Done():
			return
		}
	}
}

// tick ends the lease holds whose lease ran out, sends the renewals that are due, and returns how long
// until the next event (negative: none queued).
func (w *watchdog) tick(now time.Time) time.Duration {
	w.mu.Lock()
	// Renewals falling due within timeout/6 of one due now go with it, so holds acquired at nearby times
	// share a batch; no hold is renewed more than timeout/6 early.
	horizon := now.Add(w.timeout / 6)
	var due, later []*hold
	var ended []ending
	for len(w.queue) > 0 && !w.queue[0].next.After(horizon) {
		h := heap.Pop(&w.queue).(*hold)
		switch {
		case !h.expiresAt.After(now):
			// Past its expiry: its lease ran out, or it could not be renewed in time (this process was
			// stopped, or starved of CPU). Redis has dropped it, and the holder must hear so at once, not
			// after a round trip.
			cause := errRenewTimeout
			if !h.renews {
				cause = errLeaseExpired
			}
			ended = append(ended, w.endLocked(h, cause))
		case h.renew.script == nil || !h.renews && !h.next.Before(h.expiresAt):
			later = append(later, h) // a lease hold whose next event is the end of its lease
		default:
			due = append(due, h) // a renewal, or a lease hold's check
		}
	}
	if len(due) > 0 && due[0].next.After(now) { // nothing is due yet: wait for the first
		later = append(later, due...)
		due = nil
	}
	for _, h := range later {
		heap.Push(&w.queue, h)
	}
	// What the batch sends is copied now, under the lock: an owner's attempt may update its hold's renewal
	// (a waiting owner's queue entry) while the batch is out.
	jobs := make([]renewal, len(due))
	deadline := now.Add(w.timeout / 3)
	for i, h := range due {
		h.inflight = true
		jobs[i] = h.renew
		jobs[i].check = !h.renews
		if h.expiresAt.Before(deadline) {
			deadline = h.expiresAt
		}
	}
	wait := time.Duration(-1)
	w.sleepUntil = now.Add(100 * 365 * 24 * time.Hour)
	if len(w.queue) > 0 {
		wait = max(w.queue[0].next.Sub(now), 0)
		w.sleepUntil = now.Add(wait)
	}
	w.mu.Unlock()
	reportAll(w.c.tel, ended)
	if len(due) > 0 {
		w.renew(due, jobs, now, deadline)
	}
	return wait
}

// renew sends one batch of renewals (jobs[i] renews due[i]) in the background and applies their outcomes.
// The batch gives up at deadline: when the first of its holds expires, or after timeout/3. The holds it
// could not renew are tried again shortly, until each one's expiry.
func (w *watchdog) renew(due []*hold, jobs []renewal, sentAt, deadline time.Time) {
	ok := w.c.goBackground(func(life context.Context) {
		ctx, cancel := context.WithDeadline(life, deadline)
		results, err := w.runRenewals(ctx, jobs)
		cancel()
		w.applyRenewals(due, results, err, sentAt)
	})
	if !ok { // the Client is closing
		w.applyRenewals(due, make([]int64, len(due)), ErrClosed, sentAt)
	}
}

// runRenewals runs the renewals due: per script (and, on a cluster, per slot: one run never
// mixes slots), runs of up to renewBatchSize holds, all sent at once, so that rueidis pipelines them to
// each node in one write. results[i] is 1 (renewed), 0 (gone) or -1 (no answer) for due[i].
func (w *watchdog) runRenewals(ctx context.Context, due []renewal) ([]int64, error) {
	results := make([]int64, len(due))
	// A run renews (or checks) holds of one script, and on a cluster of one slot.
	type call struct {
		script *script
		check  bool
	}
	type group struct {
		call
		slot uint16
	}
	groups := make(map[group][]int)
	var order []call
	byCall := make(map[call][]group)
	for i, r := range due {
		results[i] = -1
		g := group{call: call{script: r.script, check: r.check}}
		if w.c.cluster {
			g.slot = slot(r.keys[0])
		}
		if _, ok := groups[g]; !ok {
			if len(byCall[g.call]) == 0 {
				order = append(order, g.call)
			}
			byCall[g.call] = append(byCall[g.call], g)
		}
		groups[g] = append(groups[g], i)
	}
	var firstErr error
	for _, cl := range order {
		s := cl.script
		ttl := fmtMillis(w.timeout)
		if cl.check {
			ttl = "0"
		}
		var execs []rueidis.LuaExec
		var parts [][]int // the positions in due of each exec's holds
		for _, g := range byCall[cl] {
			idx := groups[g]
			for b := 0; b < len(idx); b += renewBatchSize {
				part := idx[b:min(b+renewBatchSize, len(idx))]
				exec := rueidis.LuaExec{Args: []string{ttl}}
				for _, i := range part {
					exec.Keys = append(exec.Keys, due[i].keys...)
					exec.Args = append(exec.Args, due[i].args...)
				}
				execs, parts = append(execs, exec), append(parts, part)
			}
		}
		resps := withinDeadline(ctx, func() []rueidis.RedisResult { return w.c.runMany(ctx, s, execs) },
			func(err error) []rueidis.RedisResult { return fillErr(len(execs), err) })
		for b, resp := range resps {
			vals, err := resp.AsIntSlice()
			if err == nil && len(vals) != len(parts[b]) {
				err = errUnexpectedReply
			}
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			for j, i := range parts[b] {
				results[i] = vals[j]
			}
		}
	}
	return results, firstErr
}

func fillErr(n int, err error) []rueidis.RedisResult {
	r := make([]rueidis.RedisResult, n)
	for i := range r {
		r[i] = rueidis.NewErrorResult(err)
	}
	return r
}

// applyRenewals records the outcome of one batch of renewals.
func (w *watchdog) applyRenewals(due []*hold, results []int64, err error, sentAt time.Time) {
	t := w.c.tel
	w.mu.Lock()
	now := time.Now()
	var ended []ending
	var renewed, failed, gone int64
	for i, h := range due {
		h.inflight = false
		if h.ended {
			continue // released while the renewal was under way
		}
		switch {
		case results[i] == 1 && !h.renews: // a lease hold, still there
			w.scheduleLocked(h, sentAt)
		case results[i] == 1:
			renewed++
			h.renewals++
			if exp := sentAt.Add(w.timeout); exp.After(h.expiresAt) {
				h.expiresAt = exp
			}
			w.scheduleLocked(h, sentAt)
		case !h.renews && !now.Before(h.expiresAt):
			ended = append(ended, w.endLocked(h, errLeaseExpired))
		case results[i] == 0:
			gone++
			ended = append(ended, w.endLocked(h, errHoldGone))
		case w.closed || !now.Before(h.expiresAt):
			failed++
			ended = append(ended, w.endLocked(h, errRenewTimeout))
		default:
			// No answer: not a loss until the hold's expiry. Try again soon.
			if h.renews {
				failed++
			}
			if h.span.IsRecording() {
				h.span.AddEvent("renewal failed", trace.WithAttributes(attribute.String("error", fmt.Sprint(err))))
			}
			h.next = now.Add(min(w.retryDelay(), h.expiresAt.Sub(now)))
			heap.Push(&w.queue, h)
			if h.next.Before(w.sleepUntil) {
				w.wakeLocked()
			}
		}
	}
	w.mu.Unlock()
	ctx := context.Background()
	if renewed > 0 {
		t.renewals.Add(ctx, renewed, t.byOutcome[outcomeRenewed])
	}
	if failed > 0 {
		t.renewals.Add(ctx, failed, t.byOutcome[outcomeRenewFailed])
	}
	if gone > 0 {
		t.renewals.Add(ctx, gone, t.byOutcome[outcomeGone])
	}
	reportAll(t, ended)
}

// retryDelay is the pause before renewing again a hold whose renewal got no answer.
func (w *watchdog) retryDelay() time.Duration {
	return min(max(w.timeout/10, 10*time.Millisecond), time.Second)
}

// close ends the watchdog: the loop stops with the Client's lifetime, and every hold's context is
// cancelled with a cause wrapping both ErrLockLost and ErrClosed (renewals stop, so the holds will expire).
func (w *watchdog) close() {
	w.mu.Lock()
	w.closed = true
	started := w.started
	var ended []ending
	for _, h := range w.holds {
		ended = append(ended, w.endLocked(h, errClientClosed))
	}
	w.mu.Unlock()
	reportAll(w.c.tel, ended)
	if started {
		<-w.stopped
	}
}

// holdQueue is a min-heap of holds by next event.
type holdQueue []*hold

func (q holdQueue) Len() int           { return len(q) }
func (q holdQueue) Less(i, j int) bool { return q[i].next.Before(q[j].next) }
func (q holdQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *holdQueue) Push(x any) {
	h := x.(*hold)
	h.index = len(*q)
	*q = append(*q, h)
}
func (q *holdQueue) Pop() any {
	old := *q
	h := old[len(old)-1]
	old[len(old)-1] = nil
	h.index = -1
	*q = old[:len(old)-1]
	return h
}
