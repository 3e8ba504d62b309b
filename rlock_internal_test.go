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
	for _, r := range []*RLock{c.Lock("repeated"), c.FairLock("repeated-fair")} {
		t.Run(r.kind.String(), func(t *testing.T) {
			lock := func() {
				t.Helper()
				if _, err := r.tryLock(ctx, "lock", -1, 0); err != nil {
					t.Fatal(err)
				}
			}
			lock()
			lock()
			field, err := c.ownerField(ctx)
			if err != nil {
				t.Fatal(err)
			}
			first := newRelease(field)
			for i := range 3 {
				left, err := r.release(ctx, first)
				if err != nil || left != 1 {
					t.Fatalf("sending the request a %d. time: %d, %v; want 1 hold left", i+1, left, err)
				}
				first = repeating(first) // what Unlock does once a reply is lost
			}
			if n, err := r.holdCount(ctx, "holdcount"); n != 1 || err != nil {
				t.Fatalf("hold count = %d, %v; want 1", n, err)
			}
			// A new request releases the last hold; repeated, it finds nothing held and changes nothing.
			last := newRelease(field)
			if left, err := r.release(ctx, last); left != 0 || err != nil {
				t.Fatalf("last release = %d, %v; want 0", left, err)
			}
			last = repeating(last)
			if left, err := r.release(ctx, last); left != -1 || err != nil {
				t.Fatalf("repeated last release = %d, %v; want -1 (not held)", left, err)
			}
		})
	}
}
