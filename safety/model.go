// Package safety checks relock's locks the way a user's data sees them: clients take a lock, then read
// and write a register (or a counter) in a separate store, while faults hit the lock's servers and links.
// Each critical section is recorded as one operation with its invocation and completion times, and the
// history of a run is checked for linearizability with porcupine.
//
// The model is in this file and history.go; the fenced and plain stores in store.go; the scenarios, which
// need redis-server, are the package's tests.
package safety

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// Input is what a critical section sends: the fencing token (or term) of its hold, 0 when unfenced, and
// the value it writes.
type Input struct {
	Token uint64
	Write int64
}

// Output is what a critical section saw: the value it read, and what became of its write.
type Output struct {
	Read     int64
	Accepted bool // the store applied the write
	Unknown  bool // the write failed with an unknown outcome: it may or may not have been applied
	ReadOnly bool // the hold ended before the write, so none was sent: the section only read
}

// State is the register as the sequential specification sees it: its value and the highest token the
// store has seen.
type State struct {
	Value    int64
	MaxToken uint64
}

// Model returns the sequential specification of a critical section on the store: a read followed by a
// write, as one atomic operation.
//
// An accepted section must read the register's value, and (fenced) carry a token no lower than any the
// store has seen; it leaves the value it wrote and its token. A rejected write (fenced) leaves the value
// as it was and its read is unconstrained; its read still registered its token with the store (see
// store.go), so the highest token becomes at least its own. A section that only read must read the value,
// and registers its token likewise. A write whose outcome is unknown is either applied (if it could have
// been: as an accepted one) or not (as a read-only one, whose read is then unconstrained).
//
// Sections of a lock that excludes its holders never overlap, and the history is linearizable. Two that
// overlap read the same value and both write: no order explains that, unless the fenced store rejected
// one of the writes.
func Model(fenced bool) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{State{}} },
		Step: func(state, input, output any) []any {
			s, in, out := state.(State), input.(Input), output.(Output)
			raised := State{Value: s.Value, MaxToken: max(s.MaxToken, in.Token)}
			applies := out.Read == s.Value && (!fenced || in.Token >= s.MaxToken)
			applied := State{Value: in.Write, MaxToken: max(s.MaxToken, in.Token)}
			switch {
			case out.Unknown:
				if applies {
					return []any{applied, raised}
				}
				return []any{raised}
			case out.ReadOnly:
				if out.Read == s.Value {
					return []any{raised}
				}
				return nil
			case out.Accepted:
				if applies {
					return []any{applied}
				}
				return nil
			case fenced: // rejected
				return []any{raised}
			default: // a plain store never rejects
				return nil
			}
		},
		Equal: func(a, b any) bool { return a.(State) == b.(State) },
		DescribeOperation: func(input, output any) string {
			return Describe(input.(Input), output.(Output))
		},
		DescribeState: func(state any) string {
			s := state.(State)
			if s.MaxToken == 0 {
				return "value " + value(s.Value)
			}
			return fmt.Sprintf("value %s, highest token %d", value(s.Value), s.MaxToken)
		},
	}
	return nm.ToModel()
}

// RegisterValue is the value the seq-th write (from 1) of client writes to a register: unique, and readable
// in the visualization as c<client>#<seq> (seq below a million).
func RegisterValue(client int, seq int64) int64 { return int64(client+1)*registerBase + seq }

const registerBase = 1_000_000

// value renders a value: a register's as c<client>#<seq>, a counter's (or the initial 0) as it is.
func value(v int64) string {
	if v < registerBase {
		return fmt.Sprint(v)
	}
	return fmt.Sprintf("c%d#%d", v/registerBase-1, v%registerBase)
}

// Describe renders a section for porcupine's visualization.
func Describe(in Input, out Output) string {
	token := ""
	if in.Token != 0 {
		token = fmt.Sprintf(" [token %d]", in.Token)
	}
	read, write := value(out.Read), value(in.Write)
	switch {
	case out.ReadOnly:
		return fmt.Sprintf("read %s, hold ended: no write%s", read, token)
	case out.Unknown:
		return fmt.Sprintf("read %s, write %s: unknown%s", read, write, token)
	case out.Accepted:
		return fmt.Sprintf("read %s, write %s%s", read, write, token)
	}
	return fmt.Sprintf("read %s, write %s rejected%s", read, write, token)
}
