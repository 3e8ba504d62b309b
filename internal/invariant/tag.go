//go:build relock_invariants

package invariant

func init() { Enable() }
