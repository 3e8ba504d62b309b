package relock

import (
	"context"
	"testing"
	"time"

	"github.com/relock-go/relock/internal/redistest"
)

// The same release request, sent twice (as after a lost reply), releases one level of a hold, not two.
func TestRepeatedReleaseRequestReleasesOnce(t *testing.T) {
	srv := redistest.Start(t)
	c, err := New([]string{srv.Addr()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := c.Lock("repeated")
	for range 2 {
		if err := l.Lock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	field, err := c.ownerField(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := l.releaseArgs(field)
	for i := range 2 {
		left, err := l.release(ctx, first)
		if err != nil || left != 1 {
			t.Fatalf("sending the request a %d. time: %d, %v; want 1 hold left", i+1, left, err)
		}
	}
	if n, err := l.HoldCount(ctx); n != 1 || err != nil {
		t.Fatalf("hold count = %d, %v; want 1", n, err)
	}
	// A new request releases the last hold; repeated, it finds nothing held and changes nothing.
	last := l.releaseArgs(field)
	if left, err := l.release(ctx, last); left != 0 || err != nil {
		t.Fatalf("last release = %d, %v; want 0", left, err)
	}
	if left, err := l.release(ctx, last); left != -1 || err != nil {
		t.Fatalf("repeated last release = %d, %v; want -1 (not held)", left, err)
	}
	// A new hold is not touched by a repeat of a request made for the previous one.
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if left, err := l.release(ctx, first); left != 1 || err != nil {
		t.Fatalf("an old request against a new hold = %d, %v", left, err)
	}
}
