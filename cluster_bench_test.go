package relock_test

import (
	"context"
	"testing"
	"time"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// BenchmarkClusterReplicaAck interleaves, on a local cluster (3 masters, 1 replica each), a Lock+Unlock
// without and with WithReplicaAck(1, 1s), and reports both and their ratio: what waiting for a replica
// costs each acquisition.
func BenchmarkClusterReplicaAck(b *testing.B) {
	cl := redistest.StartCluster(b, 3, 1)
	c, err := relock.New(cl.Addrs(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	plain, acked := c.Lock("bench:plain"), c.Lock("bench:acked", relock.WithReplicaAck(1, time.Second))
	ctx := context.Background()
	var tPlain, tAcked time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := plain.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := plain.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := acked.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := acked.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		tPlain, tAcked = tPlain+t1.Sub(t0), tAcked+time.Since(t1)
	}
	n := float64(b.N)
	b.ReportMetric(float64(tPlain.Microseconds())/n, "plain-µs")
	b.ReportMetric(float64(tAcked.Microseconds())/n, "acked-µs")
	b.ReportMetric(float64(tAcked)/float64(tPlain), "acked/plain")
}
