package relock_test

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// BenchmarkReadLockParallel32 is read Lock+Unlock by 32 goroutines sharing one read-write lock.
func BenchmarkReadLockParallel32(b *testing.B) {
	_, c := benchClient(b)
	ctx := context.Background()
	rw := c.ReadWriteLock("bench:rw-read")
	parallelDistinctKeys(b, 32, func(int) error {
		if err := rw.ReadLock().Lock(ctx); err != nil {
			return err
		}
		return rw.ReadLock().Unlock(ctx)
	})
}

// BenchmarkWriterWaitUnderReaderStream measures how long a writer waits for the write lock while 8
// readers on another Client keep taking the read lock in staggered 20 ms holds, with and without writer
// priority. A writer that waits 2 s gives up; "starved" counts those.
func BenchmarkWriterWaitUnderReaderStream(b *testing.B) {
	for _, priority := range []bool{false, true} {
		b.Run("priority="+strconv.FormatBool(priority), func(b *testing.B) {
			_, readers := benchClient(b)
			_, writer := benchClient(b)
			ctx := context.Background()
			var total, worst time.Duration
			starved := 0
			for i := 0; b.Loop(); i++ {
				wait := writerWaitUnderReaderStream(b, ctx, readers, writer, "bench:rw-stream:"+strconv.Itoa(i), priority, 2*time.Second)
				total += wait
				worst = max(worst, wait)
				if wait >= 2*time.Second {
					starved++
				}
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "wait-ms")
			b.ReportMetric(float64(worst.Milliseconds()), "worst-wait-ms")
			b.ReportMetric(float64(starved), "starved")
		})
	}
}
