package relock

import (
	"sync"
	"testing"
)

// The fast goroutine ID must be the one the runtime prints, on every goroutine.
func TestGoroutineIDMatchesStackTrace(t *testing.T) {
	if goidOffset == 0 {
		t.Logf("no runtime.g offset found on this platform: goroutineID uses runtime.Stack")
	}
	var wg sync.WaitGroup
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got, want := goroutineID(), stackGoroutineID(); got != want || want == 0 {
				t.Errorf("goroutineID() = %d, stack trace says %d", got, want)
			}
		}()
	}
	wg.Wait()
}

func BenchmarkGoroutineID(b *testing.B) {
	for b.Loop() {
		goroutineID()
	}
}

func BenchmarkStackGoroutineID(b *testing.B) {
	for b.Loop() {
		stackGoroutineID()
	}
}
