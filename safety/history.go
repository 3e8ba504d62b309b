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
	base time.Time
	mu   sync.Mutex
	ops  []porcupine.Operation
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

// Ops returns a copy of the sections recorded so far.
func (h *History) Ops() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ops)
}

// Overlaps measures the sections that wrote (their write accepted, or of unknown outcome) while a section of
// another client that also wrote was under way: how many such pairs, and the longest time two of them
// overlapped. Under mutual exclusion both are zero; a fenced store makes overlaps harmless, not absent.
func Overlaps(ops []porcupine.Operation) (pairs int, longest time.Duration) {
	var writes []porcupine.Operation
	for _, op := range ops {
		if out := op.Output.(Output); out.Accepted || out.Unknown {
			writes = append(writes, op)
		}
	}
	slices.SortFunc(writes, func(a, b porcupine.Operation) int { return int(a.Call - b.Call) })
	for i, a := range writes {
		for _, b := range writes[i+1:] {
			if b.Call > a.Return {
				break
			}
			if a.ClientId == b.ClientId {
				continue
			}
			pairs++
			longest = max(longest, time.Duration(min(a.Return, b.Return)-b.Call))
		}
	}
	return pairs, longest
}

// Check checks ops against the model (fenced or not) within timeout. The result is porcupine.Unknown when
// the check timed out.
func Check(fenced bool, ops []porcupine.Operation, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	return porcupine.CheckOperationsVerbose(Model(fenced), ops, timeout)
}
