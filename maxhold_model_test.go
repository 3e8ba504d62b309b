package relock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// Hold budgets against random schedules, on real Redis: a hold of a random kind with a random budget and
// watchdog timeout; once it is granted, its link to Redis gets a random latency, and the owner re-enters,
// extends, or only lets the watchdog renew it. Whatever commands follow the grant and however late they
// arrive, Redis drops the hold by its budget's end on Redis's clock (WithMaxHold: "Redis drops it d after
// it granted it"), which is no later than d after Lock returned.
func TestMaxHoldAgainstModel(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := rawClient(t, srv)
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 8))
	for round := range 8 {
		proxy := startProxy(t, srv)
		timeout := time.Duration(300+r.IntN(600)) * time.Millisecond
		c := clientAt(t, proxy.Addr, &relock.Options{WatchdogTimeout: timeout})
		ctx := relock.WithOwner(ctxTimeout(t, 20*time.Second), "owner")
		budget := time.Duration(300+r.IntN(300)) * time.Millisecond
		name := fmt.Sprint("budget-model-", round)
		kind, way := r.IntN(3), r.IntN(3) // kind: Lock, FairLock, WriteLock; way: watchdog, reentry, Extend
		var l *relock.RLock
		switch kind {
		case 0:
			l = c.Lock(name, relock.WithMaxHold(budget))
		case 1:
			l = c.FairLock(name, relock.WithMaxHold(budget))
		default:
			l = c.ReadWriteLock(name, relock.WithMaxHold(budget)).WriteLock()
		}
		lease := time.Duration(0)
		if way == 2 {
			lease = time.Duration(100+r.IntN(200)) * time.Millisecond
		}
		var err error
		if lease > 0 {
			err = l.LockWithLease(ctx, lease)
		} else {
			err = l.Lock(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		granted := time.Now() // Redis granted it before this
		latency := time.Duration(20+r.IntN(60)) * time.Millisecond
		proxy.SetLatency(latency)
		after := time.Duration(r.IntN(int(budget / 3)))
		go func() { // what follows the grant, late on its way
			time.Sleep(after)
			switch way {
			case 1:
				if l.Lock(ctx) == nil {
					_ = l.Unlock(ctx)
				}
			case 2:
				_ = l.Extend(ctx, budget)
			}
		}()
		// Poll until the key is gone; the last poll that saw it was sent no earlier than it existed.
		var lastSeen time.Time
		for end := granted.Add(budget + time.Second); time.Now().Before(end); {
			sent := time.Now()
			if n, _ := do(t, rdb, "EXISTS", name).AsInt64(); n == 0 {
				break
			}
			lastSeen = sent
			time.Sleep(500 * time.Microsecond)
		}
		if over := lastSeen.Sub(granted.Add(budget)); over > 3*time.Millisecond {
			t.Fatalf("round %d (kind %d, way %d, budget %v, timeout %v, latency %v): the hold was in Redis %v after its budget's end",
				round, kind, way, budget, timeout, latency, over)
		}
		proxy.SetLatency(0)
		_ = l.Unlock(context.WithoutCancel(ctx))
	}
}
