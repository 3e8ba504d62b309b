package goid

import (
	"runtime"
	"sync"
	"testing"
)

// The fast goroutine ID must be the one the runtime prints, on every goroutine; and on amd64 and arm64,
// where getg is implemented, the fast path must be the one in use.
func TestGoroutineIDMatchesStackTrace(t *testing.T) {
	switch {
	case offset == 0 && (runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64"):
		t.Errorf("no runtime.g offset found on %s: ID falls back to runtime.Stack", runtime.GOARCH)
	case offset == 0:
		t.Logf("no runtime.g offset on %s: ID uses runtime.Stack", runtime.GOARCH)
	}
	var wg sync.WaitGroup
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got, want := ID(), stackID(); got != want || want == 0 {
				t.Errorf("ID() = %d, stack trace says %d", got, want)
			}
		}()
	}
	wg.Wait()
}

func BenchmarkGoroutineID(b *testing.B) {
	for b.Loop() {
		ID()
	}
}

func BenchmarkStackGoroutineID(b *testing.B) {
	for b.Loop() {
		stackID()
	}
}
