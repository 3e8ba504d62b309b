package relock

import (
	"context"
	"sync"
	"time"
)

// loopCluster is the loop of a hub on Redis Cluster. Each channel has a receiver goroutine that holds its
// subscription on a connection of its own (see redisSubscriber.receive), and subscribes again when it is
// lost. With sharded pub/sub, releases are announced with SPUBLISH on the shard that owns the channel's
// slot: the receiver holds an SSUBSCRIBE there (rueidis routes it by slot) and subscribes again, wherever
// the slot now is, when the shard drops it (slot migration, failover, a broken connection). With plain
// pub/sub, PUBLISH is broadcast to every node: the receiver holds a SUBSCRIBE on any node, and subscribes
// again, on any node rueidis still knows, when that node fails or its connection breaks.
//
// A receiver leaves by closing its connection, so a channel nobody needs any more lingers, subscribed, for
// lingerFor: a hot lock's waiters come and go without a connection made for each.
func (h *hub) loopCluster() {
	var receivers sync.WaitGroup
	defer receivers.Wait()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	// The channels nobody needs, still received: since when, and their wanted count then (a join since
	// counts the time afresh).
	type linger struct {
		since  time.Time
		wanted uint64
	}
	lingering := make(map[*subscription]linger)
	for {
		select {
		case <-h.life.Done():
			return
		case <-h.kick:
		case <-timer.C:
		}
		now := time.Now()
		h.mu.Lock()
		for s, l := range lingering {
			if now.Sub(l.since) >= lingerFor {
				h.dirty[s.channel] = s
			}
		}
		for ch, s := range h.dirty {
			delete(h.dirty, ch)
			switch {
			case s.needed() && s.stop == nil:
				if !s.subscribed && s.pending == nil {
					s.pending = &subAttempt{done: make(chan struct{})}
				}
				ctx, stop := context.WithCancel(h.life)
				s.gen++
				s.stop, s.receiving = stop, true
				receivers.Add(1)
				go func(gen int) {
					defer receivers.Done()
					h.receive(ctx, s, gen)
				}(s.gen)
			case s.needed():
				delete(lingering, s) // needed again while it lingered
			case s.stop != nil:
				l, ok := lingering[s]
				if !ok || l.wanted != s.wanted {
					lingering[s] = linger{since: now, wanted: s.wanted}
				} else if now.Sub(l.since) >= lingerFor {
					delete(lingering, s)
					s.stop() // the receiver leaves the subscription, then removes it
					s.stop = nil
				}
			case s.idle() && !s.receiving:
				h.dropLocked(s)
			}
		}
		h.mu.Unlock()
		var next time.Time
		for _, l := range lingering {
			if next.IsZero() || l.since.Before(next) {
				next = l.since
			}
		}
		if !next.IsZero() {
			timer.Reset(max(time.Until(next.Add(lingerFor)), time.Millisecond))
		}
	}
}

// receive holds the subscription s until ctx ends, subscribing again after each loss.
func (h *hub) receive(ctx context.Context, s *subscription, gen int) {
	var retry backoff
	for {
		err := h.receiveOnce(ctx, s, gen, &retry)
		h.mu.Lock()
		if s.gen == gen {
			if s.subscribed {
				s.subscribed, s.resync = false, true
			}
			s.skip = 0
			if err != nil && ctx.Err() == nil {
				h.failLocked(s, err)
			} else {
				h.wakeAllRoutedLocked(s)
			}
		}
		h.mu.Unlock()
		if ctx.Err() == nil {
			sleepCtx(ctx, retry.pause())
		}
		h.mu.Lock()
		if ctx.Err() != nil {
			if s.gen == gen {
				s.receiving = false
				h.markDirtyLocked(s) // removed if unused, or given a new receiver
			}
			h.mu.Unlock()
			return
		}
		if s.gen == gen && !s.subscribed && s.pending == nil {
			s.pending = &subAttempt{done: make(chan struct{})} // joiners wait for the next subscription
		}
		h.mu.Unlock()
	}
}

// receiveOnce subscribes to the channel of s, with SSUBSCRIBE or SUBSCRIBE as releases are announced, and
// delivers its messages until the subscription is lost or ctx ends (then it leaves it). A successful
// subscription resets retry.
func (h *hub) receiveOnce(ctx context.Context, s *subscription, gen int, retry *backoff) error {
	pctx, cancel := context.WithTimeout(ctx, subscribeTimeout)
	sharded, err := h.sharded(pctx, s.channel)
	cancel()
	if err != nil {
		return err
	}
	return h.redis.receive(ctx, s.channel, sharded, func() {
		h.mu.Lock() // on rueidis's reader: no blocking here
		if s.gen == gen {
			h.confirmLocked(s)
			retry.reset()
		}
		h.mu.Unlock()
	}, h.onMessage)
}
