// Package goid gives the ID of the calling goroutine, the default owner of a relock hold. Go has no API
// for it; the runtime keeps it in the goroutine's runtime.g, and prints it at the head of a stack trace.
package goid

import (
	"runtime"
	"unsafe"
)

// ID returns the calling goroutine's ID. The offset of the ID in runtime.g changes between Go releases,
// so it is found at startup (offset) and checked against the slow, documented source: the first line of
// the goroutine's own stack trace, "goroutine 123 [running]:". Where it cannot be found and checked, every
// call takes the slow path. IDs are never reused within a process.
func ID() uint64 {
	if offset != 0 {
		return *(*uint64)(unsafe.Add(getg(), offset))
	}
	return stackID()
}

// offset is the offset of the goroutine ID in runtime.g, or 0 if unknown.
var offset = findOffset()

// findOffset looks for the one 8-byte-aligned word, within the first 256 bytes of runtime.g, that holds
// the goroutine's ID in this goroutine and in several new ones, whose IDs all differ.
func findOffset() uintptr {
	if getg() == nil {
		return 0
	}
	candidates := offsetsHolding(stackID())
	for i := 0; i < 3 && len(candidates) > 0; i++ {
		found := make(chan []uintptr)
		go func() { found <- offsetsHolding(stackID()) }()
		candidates = intersect(candidates, <-found)
	}
	if len(candidates) != 1 {
		return 0
	}
	return candidates[0]
}

// offsetsHolding returns the offsets in the calling goroutine's runtime.g whose word equals id.
func offsetsHolding(id uint64) []uintptr {
	var offs []uintptr
	g := getg()
	for off := uintptr(8); off < 256; off += 8 {
		if *(*uint64)(unsafe.Add(g, off)) == id {
			offs = append(offs, off)
		}
	}
	return offs
}

func intersect(a, b []uintptr) []uintptr {
	var out []uintptr
	for _, x := range a {
		for _, y := range b {
			if x == y {
				out = append(out, x)
			}
		}
	}
	return out
}

// stackID parses the ID from the goroutine's stack trace header.
func stackID() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	const prefix = "goroutine "
	if len(b) <= len(prefix) {
		return 0
	}
	var id uint64
	for _, ch := range b[len(prefix):] {
		if ch < '0' || ch > '9' {
			break
		}
		id = id*10 + uint64(ch-'0')
	}
	return id
}
