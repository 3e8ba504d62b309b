package safety

import (
	"slices"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// History records critical sections as porcupine operations, timed on this process's monotonic clock.
// Its methods are safe for concurrent use.
type History struct {
	base  time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
	notes []porcupine.Annotation
}

// NewHistory starts an empty history; times are counted from now.
func NewHistory() *History { return &History{base: time.Now()} }

// Now is the time to record as a section's Call or Return.
func (h *History) Now() int64 { return int64(time.Since(h.base)) }

// Add records one section of client, from call to ret.
func (h *History) Add(client int, call, ret int64, in Input, out Output) {
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Call: call, Return: ret, Input: in, Output: out})
	h.mu.Unlock()
}

// Annotate records a fault (or any event) from start to end, for the visualization.
func (h *History) Annotate(tag string, start, end int64, description string) {
	h.mu.Lock()
	h.notes = append(h.notes, porcupine.Annotation{Tag: tag, Start: start, End: end, Description: description})
	h.mu.Unlock()
}

// Annotations returns a copy of the annotations recorded so far.
func (h *History) Annotations() []porcupine.Annotation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.notes)
}

// Ops returns a copy of the sections recorded so far.
func (h *History) Ops() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ops)
}

// Overlaps measures how sections that wrote (their write accepted, or of unknown outcome) overlapped
// sections of other clients that also wrote: how many such pairs there are, and the longest window, the
// time from the start of the first other client's section under way during one section to the end of the
// last (within that section). Under mutual exclusion both are zero; a fenced store makes overlaps harmless,
// not absent.
func Overlaps(ops []porcupine.Operation) (pairs int, window time.Duration) {
	var writes []porcupine.Operation
	for _, op := range ops {
		if out := op.Output.(Output); out.Accepted || out.Unknown {
			writes = append(writes, op)
		}
	}
	for i, a := range writes {
		from, to := int64(-1), int64(-1)
		for j, b := range writes {
			if a.ClientId == b.ClientId || b.Call > a.Return || b.Return < a.Call {
				continue
			}
			if j > i {
				pairs++
			}
			start, end := max(a.Call, b.Call), min(a.Return, b.Return)
			if from < 0 || start < from {
				from = start
			}
			to = max(to, end)
		}
		if from >= 0 {
			window = max(window, time.Duration(to-from))
		}
	}
	return pairs, window
}

// Check checks ops against the model (fenced or not) within timeout. The result is porcupine.Unknown when
// the check timed out.
func Check(fenced bool, ops []porcupine.Operation, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	return porcupine.CheckOperationsVerbose(Model(fenced), ops, timeout)
}
