//go:build amd64 || arm64

package goid

import "unsafe"

// getg returns the address of the calling goroutine's runtime.g (goid_*.s).
func getg() unsafe.Pointer
