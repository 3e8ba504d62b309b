package relock

import (
	"context"
	"slices"
	"time"
)

// waitQueue is a set of waiting owners kept alive by the watchdog while they wait: a FairLock's queue,
// a write lock's waiting writers. The kind's acquire script adds and removes entries (an attempt that may
// join says so); a leave script removes an owner's entries, at once, when it gives up.
type waitQueue struct {
	c         *Client
	entries   string   // the sorted set of the owners' alive times: the watchdog's table names entries after it
	leave     *script  // removes an owner's entries: ARGV = [owner field, message, publish command, leaveArgs...]
	leaveKeys []string // the leave script's keys
	leaveArgs []string // the leave script's arguments after its first three
	message   string   // what the leave script publishes to whoever it wakes
	// publishes says the acquire and refresh scripts take the publish command (they may wake a waiter), as
	// found out by Client.publishCommand.
	publishes bool
	// refresh keeps waiting owners alive: a renewal whose args follow each owner's field (see renewal).
	refresh renewal
	// maxSleep, if positive, is the longest a queued owner sleeps between attempts, however long the
	// acquire script says it may: its entry may vanish unseen (see FairLock), and an attempt puts it back.
	maxSleep time.Duration
	// lazy says an owner joins at its second attempt, the first one made while waiting: its first attempt,
	// which usually acquires, leaves the queue alone (an RLock's waiting owners; a FairLock's waiter joins
	// its queue at its first attempt, to keep its place).
	lazy bool
	// freeWakes says its waiters are only ever woken by a release that frees the lock (a FairLock's):
	// one read of the lock replaces a waiter's attempt as it begins to listen (see acquireOp.taken).
	freeWakes bool
	// wakes, if not "", is the prefix of the channels on which a release wakes a waiting owner by name:
	// each Client waiting listens on "<wakes>:<clientUUID>" (see lua/lib/waiters.lua).
	wakes string
	// outlives says an entry stays in Redis past its alive time, in keys without a time to live (a
	// FairLock's queue and Redisson scores, shared with Redisson's clients, which wait behind it until its
	// score passes): giving it up is worth trying past that time too, for a watchdog timeout at least,
	// also once the Client counts it expired (its process was starved past that time before Close).
	outlives bool
}

// entryKey names the owner's entry in the watchdog's table.
func (q *waitQueue) entryKey(k holdKey) holdKey { return holdKey{key: q.entries, field: k.field} }

// prepare waits until no earlier removal of the owner's entry is under way.
func (q *waitQueue) prepare(ctx context.Context, k holdKey) error {
	_, err := q.c.holds.prepare(ctx, q.entryKey(k))
	return err
}

// waiting is told of each attempt that may have left the owner queued: the watchdog keeps the entry alive.
func (q *waitQueue) waiting(k holdKey, kind lockKind, sentAt time.Time) {
	q.c.holds.acquired(q.entryKey(k), &acquisition{
		kind: kind, count: 1, sentAt: sentAt, keepAlive: true, giver: q,
		renew: renewal{script: q.refresh.script, keys: q.refresh.keys, field: k.field, args: q.refreshArgs()},
	})
}

// refreshArgs are the refresh script's args that follow an owner's field: the refresh's args, and the
// publish command (known by now: the owner's attempt found it out) if the script takes it.
func (q *waitQueue) refreshArgs() []string {
	args := slices.Clone(q.refresh.args)
	if q.publishes {
		args = append(args, q.c.knownPublishCommand())
	}
	return args
}

// leaveOnce removes the owner's entry from the queue: one script run.
func (q *waitQueue) leaveOnce(ctx context.Context, k holdKey) (int64, error) {
	pub, err := q.c.publishCommand(ctx, q.entries) // the queue is in the lock's slot
	if err != nil {
		return 0, err
	}
	return q.c.scripts.runInt(ctx, scriptCall{script: q.leave, keys: q.leaveKeys,
		args: append([]string{k.field, q.message, pub}, q.leaveArgs...)})
}

// lateLeaves are the delays after which an owner that gave up leaves the queue again, when one of its
// attempts to join may still run after the first leave (its reply was lost: the request may be queued
// behind a slow connection, or on a server that was paused). An entry added later than that lives until
// nobody refreshes it for a watchdog timeout, like a dead process's.
var lateLeaves = []time.Duration{time.Second, 5 * time.Second}

// queuedOwner is an owner's entry in a wait queue, as its Client's acquisitions share it: how many wait
// in it, and whether an attempt of one that gave up may still add it (lateJoin, see done).
type queuedOwner struct {
	waiting  int
	lateJoin bool
}

// joined is told of an acquisition that may join the queue, before its first attempt: it must call done.
// The goroutines of one owner (a WithOwner token shared by several) have one entry in the queue, so the
// owner leaves it only when the last of them stops waiting: a leave for the first that gives up would
// take the others out of the queue, unseen, and a release would then wake nobody.
func (q *waitQueue) joined(k holdKey) {
	w := q.c.holds
	ek := q.entryKey(k)
	w.mu.Lock()
	defer w.mu.Unlock()
	o := w.queued[ek]
	if o == nil {
		o = &queuedOwner{}
		w.queued[ek] = o
	}
	o.waiting++
}

// left records that an acquisition of the owner stopped waiting, and reports whether it was the last
// one, and whether an attempt of any of them may still join the queue late.
func (q *waitQueue) left(ek holdKey, lateJoin bool) (last, late bool) {
	w := q.c.holds
	w.mu.Lock()
	defer w.mu.Unlock()
	o := w.queued[ek]
	if o == nil { // not joined: alone
		return true, lateJoin
	}
	o.waiting--
	o.lateJoin = o.lateJoin || lateJoin
	if o.waiting > 0 {
		return false, o.lateJoin
	}
	delete(w.queued, ek)
	return true, o.lateJoin
}

// done ends a waiting acquisition (see joined): the watchdog forgets the entry, and an owner that gave up
// leaves at once (in the background, since its context may be over; its next attempt waits for that),
// unless another acquisition of the owner still waits in the entry. lateJoin says an attempt to join had
// an unknown outcome: the owner then leaves again later (lateLeaves).
func (q *waitQueue) done(k holdKey, acquired, lateJoin bool) {
	ek := q.entryKey(k)
	last, lateJoin := q.left(ek, lateJoin)
	if acquired { // the acquire script removed the entry; the owner's other waiters reenter
		q.c.holds.entryLeft(ek)
		return
	}
	if !last { // the owner's other waiters keep the entry alive, and the last one leaves
		return
	}
	_, settling := q.c.holds.settle(ek)
	leave := func(life context.Context, first bool) {
		_, _ = q.c.retry(life, time.Now().Add(q.c.watchdogTimeout), true, func(ctx context.Context) (int64, error) {
			n, err := q.leaveOnce(ctx, ek)
			if first {
				settling.failing(err) // the owner's next attempt need not wait for a Redis that is gone
			}
			return n, err
		})
	}
	ran := q.c.goBackground(func(life context.Context) {
		leave(life, true)
		settling.done(0)
		if !lateJoin {
			return
		}
		for _, d := range lateLeaves { // the owner's next attempts do not wait for these
			select {
			case <-q.c.closing.Done(): // the Client is closing: leave once more now, not later
				leave(life, false)
				return
			case <-time.After(d):
			}
			if q.c.holds.count(ek) > 0 {
				return // the owner waits again: its entry is its new one, not the late one
			}
			leave(life, false)
		}
	})
	if !ran {
		settling.done(0)
	}
}

// giveUp takes the owner of the entry k (see entryKey) out of the queue, waking whoever that lets in, until
// Redis answers, life ends or deadline passes (for a queue whose entries outlive it, a watchdog timeout
// from now if that is later: bounded, so that a Close whose ctx never ends still returns while Redis does
// not answer): when it gives up waiting, and for Close (see giver). Leaving is safe to repeat.
func (q *waitQueue) giveUp(life context.Context, k holdKey, deadline time.Time) error {
	if least := time.Now().Add(q.c.watchdogTimeout); q.outlives && !deadline.IsZero() && deadline.Before(least) {
		deadline = least
	}
	_, err := q.c.retry(life, deadline, true, func(ctx context.Context) (int64, error) { return q.leaveOnce(ctx, k) })
	return err
}
