package safety

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// op is a hand-made section: client, [call, ret], token, value written, value read, and the write's fate.
func op(client int, call, ret int64, token uint64, write, read int64, fate string) porcupine.Operation {
	out := Output{Read: read}
	switch fate {
	case "accepted":
		out.Accepted = true
	case "rejected":
	case "unknown":
		out.Unknown = true
	case "read-only":
		out.ReadOnly = true
	default:
		panic(fate)
	}
	return porcupine.Operation{ClientId: client, Call: call, Return: ret, Input: Input{Token: token, Write: write}, Output: out}
}

func TestModel(t *testing.T) {
	type history = []porcupine.Operation
	for _, c := range []struct {
		name   string
		fenced bool
		ops    history
		want   porcupine.CheckResult
	}{
		{"sequential register", false, history{
			op(0, 0, 1, 0, 11, 0, "accepted"), op(1, 2, 3, 0, 12, 11, "accepted"), op(0, 4, 5, 0, 13, 12, "accepted"),
		}, porcupine.Ok},
		{"sequential counter", false, history{
			op(0, 0, 1, 0, 1, 0, "accepted"), op(1, 2, 3, 0, 2, 1, "accepted"), op(2, 4, 5, 0, 3, 2, "accepted"),
		}, porcupine.Ok},
		{"sequential fenced, a holder writing twice with its token", true, history{
			op(0, 0, 1, 1, 11, 0, "accepted"), op(0, 2, 3, 1, 12, 11, "accepted"), op(1, 4, 5, 2, 13, 12, "accepted"),
		}, porcupine.Ok},
		{"a read that misses the last write", false, history{
			op(0, 0, 1, 0, 11, 0, "accepted"), op(1, 2, 3, 0, 12, 0, "accepted"),
		}, porcupine.Illegal},
		{"overlapping unfenced sections", false, history{
			op(0, 0, 10, 0, 11, 0, "accepted"), op(1, 2, 8, 0, 12, 0, "accepted"), op(2, 12, 13, 0, 13, 11, "accepted"),
		}, porcupine.Illegal},
		{"overlapping counter increments: a lost update", false, history{
			op(0, 0, 10, 0, 1, 0, "accepted"), op(1, 2, 8, 0, 1, 0, "accepted"), op(2, 12, 13, 0, 2, 1, "accepted"),
		}, porcupine.Illegal},
		{"overlapping fenced sections, the stale write rejected", true, history{
			op(0, 0, 10, 1, 11, 0, "rejected"), op(1, 2, 8, 2, 12, 0, "accepted"), op(2, 12, 13, 3, 13, 12, "accepted"),
		}, porcupine.Ok},
		{"overlapping fenced sections, a broken store accepting the stale write", true, history{
			op(0, 0, 10, 1, 11, 0, "accepted"), op(1, 2, 8, 2, 12, 0, "accepted"), op(2, 12, 13, 3, 13, 11, "accepted"),
		}, porcupine.Illegal},
		{"a lower token accepted after a higher one, without overlap", true, history{
			op(1, 0, 1, 2, 12, 0, "accepted"), op(0, 2, 3, 1, 11, 12, "accepted"),
		}, porcupine.Illegal},
		{"the same without fencing is fine", false, history{
			op(1, 0, 1, 2, 12, 0, "accepted"), op(0, 2, 3, 1, 11, 12, "accepted"),
		}, porcupine.Ok},
		{"write-only fencing's lost update: the stale write lands between the new holder's read and write", true, history{
			op(0, 0, 10, 1, 11, 0, "accepted"), op(1, 2, 12, 2, 12, 0, "accepted"), op(2, 14, 15, 3, 13, 12, "accepted"),
		}, porcupine.Illegal},
		{"rejections caused by the read of a later section", true, history{
			// With fenced reads, token 2's read rejects token 1's write, and token 3's read token 2's; the
			// store's highest token comes from reads, not from an accepted write.
			op(0, 0, 10, 1, 11, 0, "rejected"), op(1, 1, 20, 2, 12, 0, "rejected"), op(2, 15, 30, 3, 13, 0, "accepted"),
		}, porcupine.Ok},
		{"a holder that saw its hold end and did not write", false, history{
			op(0, 0, 10, 0, 0, 0, "read-only"), op(1, 2, 8, 0, 12, 0, "accepted"), op(2, 12, 13, 0, 13, 12, "accepted"),
		}, porcupine.Ok},
		{"a read-only section that read a value never written", false, history{
			op(0, 0, 1, 0, 11, 0, "accepted"), op(1, 2, 3, 0, 0, 7, "read-only"),
		}, porcupine.Illegal},
		{"a write of unknown outcome that was applied", false, history{
			op(0, 0, 1, 0, 11, 0, "unknown"), op(1, 2, 3, 0, 12, 11, "accepted"),
		}, porcupine.Ok},
		{"a write of unknown outcome that was not", false, history{
			op(0, 0, 1, 0, 11, 0, "unknown"), op(1, 2, 3, 0, 12, 0, "accepted"),
		}, porcupine.Ok},
		{"a write of unknown outcome does not explain any value", false, history{
			op(0, 0, 1, 0, 11, 0, "unknown"), op(1, 2, 3, 0, 12, 7, "accepted"),
		}, porcupine.Illegal},
		{"a plain store never rejects", false, history{
			op(0, 0, 1, 0, 11, 0, "rejected"),
		}, porcupine.Illegal},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, _ := Check(c.fenced, c.ops, 5*time.Second)
			if got != c.want {
				t.Errorf("got %s, want %s", got, c.want)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	for _, c := range []struct {
		in   Input
		out  Output
		want string
	}{
		{Input{Write: RegisterValue(0, 1)}, Output{Accepted: true}, "read 0, write c0#1"},
		{Input{Token: 7, Write: RegisterValue(2, 3)}, Output{Read: RegisterValue(1, 12)}, "read c1#12, write c2#3 rejected [token 7]"},
		{Input{Write: 5}, Output{Read: 4, Unknown: true}, "read 4, write 5: unknown"},
		{Input{Token: 2}, Output{Read: 4, ReadOnly: true}, "read 4, hold ended: no write [token 2]"},
	} {
		if got := Describe(c.in, c.out); got != c.want {
			t.Errorf("Describe(%+v, %+v) = %q, want %q", c.in, c.out, got, c.want)
		}
	}
}

func TestOverlaps(t *testing.T) {
	ms := int64(time.Millisecond)
	ops := []porcupine.Operation{
		op(0, 0, 10*ms, 0, 1, 0, "accepted"),
		op(1, 4*ms, 30*ms, 0, 2, 0, "accepted"), // overlaps the first for 6 ms
		op(2, 5*ms, 6*ms, 0, 0, 0, "read-only"), // wrote nothing
		op(0, 20*ms, 25*ms, 0, 3, 1, "unknown"), // overlaps the second for 5 ms
		op(2, 40*ms, 50*ms, 0, 4, 3, "accepted"),
	}
	// The second section was overlapped from 4 ms (the first) to 25 ms (the third).
	if pairs, window := Overlaps(ops); pairs != 2 || window != 21*time.Millisecond {
		t.Fatalf("Overlaps = %d, %v; want 2, 21ms", pairs, window)
	}
	if pairs, window := Overlaps(ops[4:]); pairs != 0 || window != 0 {
		t.Fatalf("Overlaps of one section = %d, %v", pairs, window)
	}
}
