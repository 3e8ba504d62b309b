package stepclock

import (
	"sync"
	"testing"
	"time"
)

// fake records what the Clock asks of the server.
type fake struct {
	sync.Mutex
	times []time.Time
	ttl   bool
}

func (f *fake) SetTime(t time.Time) {
	f.Lock()
	defer f.Unlock()
	f.times = append(f.times, t)
}

func (f *fake) ClockTTL(enabled bool) { f.ttl = enabled }

func TestClockMovesForwardOnlyAndNotUnderTheLock(t *testing.T) {
	f := &fake{}
	c := Start(f)
	if !f.ttl || len(f.times) != 1 {
		t.Fatalf("Start: ClockTTL %v, %d SetTime calls", f.ttl, len(f.times))
	}
	time.Sleep(time.Millisecond)
	c.Command()
	if len(f.times) != 2 || !f.times[1].After(f.times[0]) {
		t.Fatalf("Command did not move the clock forward: %v", f.times)
	}
	f.Lock() // a script is running: its calls must not move the clock (nor deadlock)
	time.Sleep(time.Millisecond)
	c.Command()
	n := len(f.times)
	f.Unlock()
	if n != 2 {
		t.Fatalf("Command moved the clock while the server's lock was held: %v", f.times)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(c.Command)
	}
	wg.Wait()
	for i := 1; i < len(f.times); i++ {
		if !f.times[i].After(f.times[i-1]) {
			t.Fatalf("the clock did not only move forward: %v", f.times)
		}
	}
}
