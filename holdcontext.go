package relock

import (
	"context"
	"reflect"
	"time"
)

// holdContext returns a context derived from parent that is cancelled, before the call that ends the hold
// k returns, when the hold ends. It costs O(1): a parent that cannot end gets a light wrapper of the hold's
// own context, and a parent that can end gets the same derived context every time.
func (w *holdTable) holdContext(parent context.Context, k holdKey) (context.Context, error) {
	w.mu.Lock()
	h := w.holds[k]
	if !h.heldLocked(time.Now()) {
		w.mu.Unlock()
		return nil, ErrNotHeld
	}
	hc := h.doneLocked(w)
	if parent.Done() == nil {
		w.mu.Unlock()
		return withValuesOf(hc, parent), nil
	}
	if !comparableContext(parent) { // no memo: the context ends just after the hold, in another goroutine
		d, cancel := context.WithCancelCause(parent)
		w.mu.Unlock()
		stop := context.AfterFunc(hc, func() { cancel(context.Cause(hc)) })
		context.AfterFunc(d, func() { stop() })
		return context.WithValue(d, holdRefKey{}, holdRef{w, h}), nil
	}
	if d, ok := h.derived[parent]; ok {
		w.mu.Unlock()
		return d.ctx, nil
	}
	cctx, cancel := context.WithCancelCause(parent)
	ctx := context.WithValue(cctx, holdRefKey{}, holdRef{w, h}) // for HoldRisk
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
func (w *holdTable) holdDone(k holdKey) (context.Context, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := w.holds[k]
	if !h.heldLocked(time.Now()) {
		return nil, ErrNotHeld
	}
	return h.doneLocked(w), nil
}

// doneLocked returns the context that ends with h, h of w, making it at the first call. It carries its
// hold, for HoldRisk.
func (h *hold) doneLocked(w *holdTable) context.Context {
	if h.ctx == nil {
		ctx, cancel := context.WithCancelCause(context.Background())
		h.ctx, h.cancel = context.WithValue(ctx, holdRefKey{}, holdRef{w, h}), cancel
	}
	return h.ctx
}

// comparableContext reports whether ctx can safely be a map key: a pointer (every cancellable context of
// the standard library is one). A comparable struct type may still hold an uncomparable value in an
// interface field, which would make the map panic; such contexts go without the memo.
func comparableContext(ctx context.Context) bool {
	return reflect.TypeOf(ctx).Kind() == reflect.Pointer
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
