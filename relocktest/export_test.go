package relocktest

// FailingLeft returns how many renewals s has left to fail (FailRenewals).
func FailingLeft(s *Server) int64 { return s.failing.Load() }
