package relock

import (
	"context"
	"testing"
	"time"
)

// BenchmarkClientOverheadLockUnlock is an uncontended Lock+Unlock whose scripts a fake runner answers at
// once: what the Client itself costs per pair (CPU and allocations), without Redis or the network, the
// part of BenchmarkRatios's lock/raw that relock can remove.
func BenchmarkClientOverheadLockUnlock(b *testing.B) {
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"goroutine", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }},
		{"owner", func() (context.Context, context.CancelFunc) { return WithOwner(context.Background(), "o"), func() {} }},
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Hour)
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			f := &fakeRunner{batch: allRenewed,
				acquire: func(scriptCall) ([4]int64, error) { return [4]int64{1, 1, 0}, nil },
				int:     func(scriptCall) (int64, error) { return 0, nil }}
			c := newFakeClient(b, f, 30*time.Second)
			defer closeFake(c)
			l := c.Lock("overhead")
			ctx, cancel := tc.ctx()
			defer cancel()
			b.ReportAllocs()
			for b.Loop() {
				if err := l.Lock(ctx); err != nil {
					b.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
