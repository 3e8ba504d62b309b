package relock

import (
	"context"
	"sync"
)

// holdKey names one owner's hold on one lock key.
type holdKey struct {
	key   string
	field string
}

// hold is what this Client knows of one of its owners' holds. count mirrors the hold count Redis returned
// in the last reply about it, so it is right as long as replies arrive.
type hold struct {
	count int64
	// settling is closed when an undo of an acquisition whose reply was lost has finished. Until then the
	// owner's next acquisition of the key waits, so that the undo compares counts nobody else is changing.
	settling chan struct{}
}

// holdRegistry is the Client's table of the holds its owners have.
type holdRegistry struct {
	mu sync.Mutex
	m  map[holdKey]*hold
}

func newHoldRegistry() *holdRegistry { return &holdRegistry{m: make(map[holdKey]*hold)} }

// prepare waits until no undo is running for k and returns the hold count known for it.
func (r *holdRegistry) prepare(ctx context.Context, k holdKey) (int64, error) {
	for {
		r.mu.Lock()
		h := r.m[k]
		if h == nil {
			r.mu.Unlock()
			return 0, nil
		}
		count, settling := h.count, h.settling
		r.mu.Unlock()
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

// set records the hold count Redis reported for k.
func (r *holdRegistry) set(k holdKey, count int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.m[k]
	switch {
	case h == nil && count > 0:
		r.m[k] = &hold{count: count}
	case h != nil && count <= 0 && h.settling == nil:
		delete(r.m, k)
	case h != nil:
		h.count = count
	}
}

// count returns the hold count known for k (0 when none).
func (r *holdRegistry) count(k holdKey) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h := r.m[k]; h != nil {
		return h.count
	}
	return 0
}

// settle marks k as being undone; the returned func ends that, recording the count the undo left.
func (r *holdRegistry) settle(k holdKey) (prior int64, done func(count int64)) {
	r.mu.Lock()
	h := r.m[k]
	if h == nil {
		h = &hold{}
		r.m[k] = h
	}
	prior = h.count
	ch := make(chan struct{})
	h.settling = ch
	r.mu.Unlock()
	return prior, func(count int64) {
		r.mu.Lock()
		if h.settling == ch {
			h.settling = nil
		}
		close(ch)
		r.mu.Unlock()
		r.set(k, count)
	}
}
