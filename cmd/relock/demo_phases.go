package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/relock-go/relock"
)

// counterPhase runs the workers for --duration, with or without the lock, showing progress.
func (d *demo) counterPhase(ctx context.Context, r demoRunner, locked bool) (demoPhaseJSON, demoStats, error) {
	if err := d.reset(ctx); err != nil {
		return demoPhaseJSON{}, demoStats{}, err
	}
	start := time.Now()
	stop := d.live(ctx, func() string {
		n, _ := d.counter(ctx)
		return fmt.Sprintf("%5.1fs  %s increments  counter %s", time.Since(start).Seconds(),
			demoNum(r.progress()), demoNum(n))
	})
	stats, err := r.run(ctx, locked, d.flags.duration)
	elapsed := time.Since(start)
	stop()
	if err != nil {
		return demoPhaseJSON{}, stats, err
	}
	counted, err := d.counter(ctx)
	if err != nil {
		return demoPhaseJSON{}, stats, err
	}
	p := demoPhaseJSON{Expected: stats.Increments, Counted: counted, Lost: stats.Increments - counted,
		Reads: stats.Reads, TornReads: stats.Torn, ElapsedMS: demoMillis(elapsed)}
	if elapsed > 0 {
		p.PerSecond = math.Round(float64(stats.Increments) / elapsed.Seconds())
	}
	line := fmt.Sprintf("%5.1fs  %s increments  counter %s  lost %s", elapsed.Seconds(), demoNum(p.Expected),
		demoNum(p.Counted), demoNum(p.Lost))
	if d.cfg.Lock == demoRW {
		line += fmt.Sprintf("  reads %s, %s saw a half-done update", demoNum(p.Reads), demoNum(p.TornReads))
	}
	d.final(line)
	return p, stats, nil
}

// counter reads the counter's value (0 when absent).
func (d *demo) counter(ctx context.Context) (int64, error) {
	rdb := d.monitor[0].rdb
	n, err := rdb.Do(ctx, rdb.B().Get().Key(d.cfg.Counter).Build()).AsInt64()
	if err != nil && !rueidis.IsRedisNil(err) {
		return 0, redisError(d.cfg.Nodes[0], err)
	}
	return n, nil
}

// pttl returns the lock key's PTTL on node i (-2: no key, -1: no expiry).
func (d *demo) pttl(ctx context.Context, i int) (int64, error) {
	rdb := d.monitor[i].rdb
	return rdb.Do(ctx, rdb.B().Pttl().Key(d.cfg.Name).Build()).AsInt64()
}

// watchdogPhase holds the lock, without a lease, for demoHoldFactor watchdog timeouts on one Client,
// while a contender on another Client waits for it, and samples the lock's PTTL meanwhile.
func (d *demo) watchdogPhase(ctx context.Context) (*demoWatchdogJSON, error) {
	holderNodes, closeH, err := d.cfg.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer closeH()
	contNodes, closeC, err := d.cfg.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer closeC()
	holder, contender := d.cfg.newLock(holderNodes, true), d.cfg.newLock(contNodes, true)
	hold := d.holdTime()
	wd := &demoWatchdogJSON{TimeoutMS: demoMillis(d.flags.watchdog), MinPTTLMS: -1}

	var (
		acquired     = make(chan struct{}) // the holder has the lock, or failed (holderErr)
		unlocking    = make(chan struct{}) // the holder is about to call Unlock (or failed)
		holderErr    error                 // written before acquired or unlocking is closed
		unlockErr    error                 // read after wg.Wait
		contenderErr error
		heldAt       time.Time
		unlockAt     time.Time
		contAt       time.Time
		contStart    time.Time
		wg           sync.WaitGroup
	)
	wg.Go(func() { // the holder: Lock, HoldContext and Unlock on one goroutine, its owner
		if err := demoAcquire(ctx, holder.l); err != nil {
			holderErr = err
			close(acquired)
			close(unlocking)
			return
		}
		heldAt = time.Now()
		if holder.fence != nil {
			wd.TokenHolder, _ = holder.fence(ctx)
		}
		held, err := holder.l.HoldContext(ctx)
		close(acquired)
		demoSleep(ctx, hold)
		if err != nil || errors.Is(context.Cause(held), relock.ErrLockLost) {
			wd.Lost = true
		}
		unlockAt = time.Now()
		wd.HeldMS = demoMillis(unlockAt.Sub(heldAt))
		close(unlocking)
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), demoCleanupLimit)
		defer cancel()
		if err := holder.l.Unlock(uctx); err != nil && !wd.Lost {
			unlockErr = fmt.Errorf("unlock: %w", err)
		}
	})
	<-acquired
	failed := holderErr != nil
	if !failed {
		wg.Go(func() { // the contender waits for the lock, on its own Client
			lctx, cancel := context.WithTimeout(ctx, hold+10*time.Second)
			defer cancel()
			contStart = time.Now()
			if err := demoAcquire(lctx, contender.l); err != nil {
				contenderErr = err
				return
			}
			contAt = time.Now()
			wd.ContenderAcquired = true
			if contender.fence != nil {
				wd.TokenContender, _ = contender.fence(ctx)
			}
			uctx, cancel2 := context.WithTimeout(context.WithoutCancel(ctx), demoCleanupLimit)
			defer cancel2()
			_ = contender.l.Unlock(uctx)
		})
	}

	// Sample the PTTL until the holder is about to unlock; a sample whose reply arrives after that is
	// dropped, since the key may be gone by then.
	var prev int64 = -1
	start := time.Now()
	var lastPTTL atomic.Int64
	var renewals atomic.Int64
	stop := d.live(ctx, func() string {
		return fmt.Sprintf("%5.1fs  PTTL %4dms  renewed %d times  the other worker waits",
			time.Since(start).Seconds(), lastPTTL.Load(), renewals.Load())
	})
	tick := time.NewTicker(10 * time.Millisecond)
sample:
	for !failed {
		select {
		case <-unlocking:
			break sample
		case <-tick.C:
		}
		var low int64 = math.MaxInt64
		var first int64
		for i := range d.monitor {
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			v, err := d.pttl(sctx, i)
			cancel()
			if err != nil {
				continue
			}
			if i == 0 {
				first = v
			}
			low = min(low, v)
		}
		select {
		case <-unlocking:
			break sample
		default:
		}
		if low == math.MaxInt64 {
			continue
		}
		wd.Samples++
		if prev >= 0 && first > prev+int64(d.flags.watchdog/time.Millisecond)/10 {
			renewals.Add(1)
		}
		prev = first
		lastPTTL.Store(first)
		if wd.MinPTTLMS < 0 || float64(low) < wd.MinPTTLMS {
			wd.MinPTTLMS = float64(low)
		}
	}
	tick.Stop()
	wg.Wait()
	stop()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err := errors.Join(holderErr, unlockErr); err != nil {
		return nil, fmt.Errorf("watchdog phase: the holder: %w", err)
	}
	if contenderErr != nil && !wd.Lost {
		return nil, fmt.Errorf("watchdog phase: the waiting worker: %w", contenderErr)
	}
	wd.Renewals = int(renewals.Load())
	if wd.ContenderAcquired {
		wd.ContenderWaitedMS = demoMillis(contAt.Sub(contStart))
		wd.ContenderAfterMS = demoMillis(contAt.Sub(unlockAt))
		wd.OtherGotIn = contAt.Before(unlockAt)
	}
	d.final(fmt.Sprintf("%5.1fs  held, renewed %d times, PTTL never below %s", wd.HeldMS/1000, wd.Renewals,
		demoMS(wd.MinPTTLMS)))
	return wd, nil
}
