package relockgoredis

// The test binary checks each subscription connection's invariants after every transition (see step).
func init() { checkInvariants = true }
