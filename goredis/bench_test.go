package relockgoredis_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// BenchmarkLockUnlock is an uncontended Lock+Unlock on go-redis, serial and from 64 goroutines on names of
// their own (bench/ compares it with relock on rueidis and the peers, interleaved).
func BenchmarkLockUnlock(b *testing.B) {
	srv := redistest.Start(b)
	c := newClient(b, newGoRedis(b, srv.Addr(), true), nil)
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		l := c.Lock("bench")
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
	b.Run("parallel", func(b *testing.B) {
		var n atomic.Int64
		b.SetParallelism(32)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			id := strconv.FormatInt(n.Add(1), 10)
			own := relock.WithOwner(ctx, "bench-"+id)
			l := c.Lock("bench-" + id)
			for pb.Next() {
				if err := l.Lock(own); err != nil {
					b.Fatal(err)
				}
				if err := l.Unlock(own); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}
