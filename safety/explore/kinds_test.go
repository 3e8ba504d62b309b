package explore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
)

// kind is how the harness drives one of relock's kinds: its servers and resources, what its actors do,
// which faults its promises allow, and what it may leave in Redis.
type kind struct {
	name      string
	servers   int
	observers int
	needsAOF  bool // the kind's promise needs Redis to keep its keys (a semaphore's count is the semaphore)
	faults    []string
	res       func(p *plan) resources
	setup     func(s *sched) error
	actor     func(s *sched, a *actor)
	// stays reports whether key may stay in Redis after the actors stopped and their Clients closed.
	stays    func(name, key string) bool
	spurious func(name string) [][2]string // channel and message of extra release announcements
	// ops are the operations beyond acquiring and releasing its actors make (ops_test.go), extra the
	// faults that came with them, and force how a ForceUnlock is made on the kind (nil: none).
	ops   int
	extra []string
	force func(ctx context.Context, c *relock.Client, name string) (bool, error)
}

var (
	netFaults   = []string{fLatency, fCut, fReplyLost, fDown, fPartition, fIsolated, fPubSubKill, fSpurious}
	redisFaults = []string{fRedisPause, fClientPause, fRestartAOF, fStarve}
	// Every kind gets every fault its promises allow; refusals, and restarts that lose everything, twice as
	// often: they are where waiters, undos and observers have most to get right.
	lockFaults = append(append(append([]string{}, netFaults...), redisFaults...), fDown, fRestartNone, fRestartNone)
	keepFaults = append(append(append([]string{}, netFaults...), redisFaults...), fDown)
	// The faults that came with the operations beyond acquiring and releasing, drawn apart (drawOps).
	lockExtra      = []string{fBusy, fLoading, fWatchKill, fForce, fDelete, fClose, fClose}
	compositeExtra = []string{fBusy, fLoading, fWatchKill, fClose}
	keepExtra      = []string{fBusy, fLoading}
	lockOps        = opExtend | opMaxHold | opGuard | opShared | opCrowd
)

// companion is relock's (Redisson's) companion key rule for a name without braces.
func companion(prefix, name string) string { return prefix + ":{" + name + "}" }

func lockChannel(name string) [][2]string {
	return [][2]string{{companion("redisson_lock__channel", name), "0"}}
}

func onlyFencing(name, key string) bool { return key == companion("redisson_lock_token", name) }

var kinds = []*kind{
	{name: "RLock", servers: 1, faults: lockFaults, res: oneLock, actor: lockActor(plainLock(false)), stays: onlyFencing, spurious: lockChannel,
		ops: lockOps | opRevoke, extra: lockExtra, force: func(ctx context.Context, c *relock.Client, name string) (bool, error) {
			return c.Lock(name).ForceUnlock(ctx)
		}},
	{name: "FairLock", servers: 1, faults: lockFaults, res: oneLock, actor: lockActor(plainLock(true)), stays: onlyFencing, spurious: lockChannel,
		ops: lockOps | opFenced, extra: lockExtra, force: func(ctx context.Context, c *relock.Client, name string) (bool, error) {
			return c.FairLock(name).ForceUnlock(ctx)
		}},
	{name: "ReadWriteLock", servers: 1, faults: lockFaults, res: oneLock, actor: lockActor(rwLock), stays: onlyFencing,
		spurious: func(name string) [][2]string {
			return [][2]string{{companion("redisson_rwlock", name), "0"}, {companion("redisson_rwlock", name), "1"}}
		},
		ops: lockOps | opFenced, extra: lockExtra, force: func(ctx context.Context, c *relock.Client, name string) (bool, error) {
			return c.ReadWriteLock(name).WriteLock().ForceUnlock(ctx)
		}},
	{name: "Redisson", servers: 1, faults: lockFaults, res: oneLock, actor: redissonKindActor, stays: redissonStays, spurious: lockChannel,
		ops: opRevoke, extra: []string{fBusy, fLoading, fWatchKill, fForce, fClose},
		force: func(ctx context.Context, c *relock.Client, name string) (bool, error) {
			return c.Lock(name).ForceUnlock(ctx)
		}},
	{name: "MultiLock", servers: 1, faults: lockFaults, actor: lockActor(multiLock), stays: onlyFencing, extra: compositeExtra,
		res: func(*plan) resources { return resources{capacity: []int{1, 1, 1}} },
		spurious: func(name string) [][2]string {
			var m [][2]string
			for i := range 3 {
				m = append(m, lockChannel(fmt.Sprintf("%s.%d", name, i))...)
			}
			return m
		}},
	{name: "RedLock", servers: 3, faults: lockFaults, res: oneLock, actor: lockActor(redLock), stays: onlyFencing, spurious: lockChannel, extra: compositeExtra},
	{name: "Semaphore", servers: 1, needsAOF: true, faults: keepFaults, actor: semaphoreActor, setup: setPermits, extra: keepExtra,
		res:      func(p *plan) resources { return resources{counting: true, capacity: []int{p.permits}} },
		stays:    func(name, key string) bool { return key == name },
		spurious: semChannel},
	{name: "PermitSemaphore", servers: 1, needsAOF: true, faults: keepFaults, actor: permitActor, setup: setPermits,
		extra:    []string{fBusy, fLoading, fWatchKill, fClose},
		res:      func(p *plan) resources { return resources{counting: true, capacity: []int{p.permits}} },
		stays:    func(name, key string) bool { return key == name },
		spurious: semChannel},
	{name: "CountDownLatch", servers: 1, needsAOF: true, faults: keepFaults, actor: latchActor, setup: setCount, extra: keepExtra,
		res:   func(*plan) resources { return resources{capacity: []int{1}} },
		stays: func(name, key string) bool { return key == name }, // still counting when the counters stopped early
		spurious: func(name string) [][2]string {
			return [][2]string{{"redisson_countdownlatch__channel__{" + name + "}", "0"}}
		}},
	{name: "Election", servers: 1, observers: 2, faults: lockFaults, res: oneLock, actor: electionActor,
		ops: opStepDown, extra: []string{fBusy, fLoading, fWatchKill, fDelete, fClose},
		stays: func(name, key string) bool {
			return key == companion("redisson_lock_token", name) || key == companion("relock_election", name)
		},
		spurious: lockChannel},
}

func oneLock(*plan) resources { return resources{capacity: []int{1}} }

func semChannel(name string) [][2]string {
	return [][2]string{{companion("redisson_sc", name), "1"}}
}

// sched is one schedule under way: its plan, servers, history, the object's name, and the signal to stop.
type sched struct {
	k    *kind
	p    *plan
	e    *env
	h    *history
	name string
	stop chan struct{}
}

// actor is one goroutine of the schedule, on its Client, with its own owner and random source.
type actor struct {
	id     int
	client int
	owner  string // the owner token (WithOwner), and the owner as the history names it
	rng    *rand.Rand
	base   context.Context // carries the owner
	role   role
	holds  int // holds so far
}

func (s *sched) stopped() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// sleep waits d, or less if the schedule stops.
func (s *sched) sleep(d time.Duration) {
	select {
	case <-time.After(d):
	case <-s.stop:
	}
}

// release makes a's release call op (fn, with a short ctx) on behalf of owner, and records it. A release
// that Redis answered with an error reply (BUSY, LOADING) did not run, and the hold is still held (renewed
// by its Client): the actor makes it again, every 50 ms, for up to 2 s, as a caller would.
func (s *sched) release(a *actor, op, owner string, fn func(context.Context) error) *call {
	for i := 0; ; i++ {
		ctx, cancel := short(a)
		rc := &call{actor: a.id, client: a.client, op: op, owner: owner, invoke: s.h.now()}
		rc.deadline = rc.invoke + 2*time.Second
		rc.err = fn(ctx)
		cancel()
		rc.ret = s.h.now()
		s.h.addCall(rc)
		if !redisReplied(rc.err) || i == 40 {
			return rc
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// redisReplied reports whether err is an error reply of Redis's (BUSY, LOADING, ...): what it answered did
// not run.
func redisReplied(err error) bool {
	var r *rueidis.RedisError
	return errors.As(err, &r) && !rueidis.IsRedisNil(r)
}

// endedLocked records that the release rc ended x (in s.h.update): a release that did not say the hold was
// gone, and failed, may have run or not, and the hold may live until its watchdog timeout.
func (s *sched) endedLocked(x *hold, rc *call) {
	x.end, x.endRet, x.endErr = rc.invoke, rc.ret, rc.err
	x.released = rc.err == nil
	x.notHeld = errors.Is(rc.err, relock.ErrNotHeld)
	if rc.err != nil && !x.notHeld {
		x.keep = s.p.watchdog + time.Second
	}
}

// burstHolder reports whether a is a holder of a burst plan, in which the schedule is cut into ticks: the
// first Client's actors (waiters) wait from late in a tick, get what the burst of releases at the tick
// frees, hold it until 0.7 of the tick and wait again from 0.95; the other Clients' actors (holders) take
// everything at 0.75 and release it together at the tick. What a burst frees is left to the first Client's
// waiters alone, for long enough to see one of them asleep while it is free.
func (s *sched) burstHolder(a *actor) bool { return s.p.tick > 0 && a.client != 0 }

// untilPhase is how long until the schedule next reaches phase (0 to 1) of a tick.
func (s *sched) untilPhase(phase float64) time.Duration {
	now := s.h.now()
	at := now/s.p.tick*s.p.tick + time.Duration(phase*float64(s.p.tick))
	if at <= now {
		at += s.p.tick
	}
	return at - now
}

// thinkTime is how long a waits before its next call.
func (s *sched) thinkTime(a *actor) time.Duration {
	switch {
	case s.burstHolder(a):
		return s.untilPhase(0.75)
	case s.p.tick > 0:
		return s.untilPhase(0.95)
	}
	return time.Duration(a.rng.Int64N(int64(s.p.maxThink) + 1))
}

// holdTime is how long a holds what it got.
func (s *sched) holdTime(a *actor) time.Duration {
	switch {
	case s.burstHolder(a): // apart: a waiter's attempt may come between two releases
		return s.untilPhase(0) + time.Duration(a.rng.Int64N(int64(s.p.spread)))
	case s.p.tick > 0:
		return s.untilPhase(0.7)
	case s.p.sparse && a.rng.IntN(10) < 3:
		return time.Duration(600+a.rng.IntN(600)) * time.Millisecond
	}
	return time.Duration(a.rng.Int64N(int64(s.p.maxHold) + 1))
}

// cancelP is how likely an actor cancels a wait midway: never in burst plans, whose waiters must wait.
func (s *sched) cancelP() float64 {
	if s.p.tick > 0 {
		return 0
	}
	return 0.1
}

// callCtx returns a ctx for one call: a random timeout up to max; with probability cancelP the actor
// cancels it mid-wait, which is recorded in c.
func (s *sched) callCtx(a *actor, c *call, maxWait time.Duration, cancelP float64) (context.Context, context.CancelFunc) {
	timeout := time.Duration(20+a.rng.IntN(int(maxWait/time.Millisecond))) * time.Millisecond
	switch {
	case s.burstHolder(a): // a holder that got nothing gives up before the burst: what it frees is the waiters'
		timeout = max(s.untilPhase(0.97), 10*time.Millisecond)
	case s.p.tick > 0 && a.rng.IntN(5) < 2: // a waiter whose patience runs out as the burst comes
		timeout = s.untilPhase(0) + time.Duration(a.rng.IntN(10000))*time.Microsecond
	}
	ctx, cancel := context.WithTimeout(a.base, timeout)
	c.invoke = s.h.now()
	c.deadline = c.invoke + timeout
	if a.rng.Float64() < cancelP {
		after := time.Duration(a.rng.Int64N(int64(timeout)))
		t := time.AfterFunc(after, func() {
			s.h.update(func() { c.cancelledAt = s.h.now() })
			cancel()
		})
		return ctx, func() { t.Stop(); cancel() }
	}
	return ctx, cancel
}

// short returns a ctx of the actor's owner for a release or a check: 2 s.
func short(a *actor) (context.Context, context.CancelFunc) {
	return context.WithTimeout(a.base, 2*time.Second)
}

// lockHandle is one way to hold a lock kind: what it holds (resources, shared) and its calls.
type lockHandle struct {
	op        string
	res       []int
	shared    bool
	lock      func(ctx context.Context) error
	tryLock   func(ctx context.Context, wait, lease time.Duration) (bool, error)
	lockLease func(ctx context.Context, lease time.Duration) error
	unlock    func(ctx context.Context) error
	holdCtx   func(ctx context.Context) (context.Context, error)
	holdCount func(ctx context.Context) (int, error) // nil: the kind has none (composites)
	rl        *relock.RLock                          // the lock, for the operations beyond these (nil: a composite)
	suffix    string                                 // of its owner's field in the lock's hash (a writer's ":write")
	fenced    bool
	maxHold   time.Duration
}

func fromLockable(op string, l relock.Lockable, res []int, shared bool) lockHandle {
	return lockHandle{op: op, res: res, shared: shared, lock: l.Lock, tryLock: l.TryLock, lockLease: l.LockWithLease,
		unlock: l.Unlock, holdCtx: l.HoldContext, holdCount: l.HoldCount}
}

// fromRLock is fromLockable for one of relock's locks, with what the operations beyond it need.
func fromRLock(op string, l *relock.RLock, fenced bool, maxHold time.Duration, shared bool) lockHandle {
	h := fromLockable(op, l, []int{0}, shared)
	h.rl, h.fenced, h.maxHold = l, fenced, maxHold
	return h
}

// lockOpts are the options of a's locks: fencing, and its budget.
func lockOpts(a *actor, fenced bool) []relock.LockOption {
	var o []relock.LockOption
	if fenced {
		o = append(o, relock.WithFencing())
	}
	if a.role.maxHold > 0 {
		o = append(o, relock.WithMaxHold(a.role.maxHold))
	}
	return o
}

func plainLock(fair bool) func(s *sched, a *actor) lockHandle {
	return func(s *sched, a *actor) lockHandle {
		c := s.e.clients[a.client][0]
		if fair {
			return fromRLock("FairLock", c.FairLock(s.name, lockOpts(a, s.p.ops.fenced)...), s.p.ops.fenced, a.role.maxHold, false)
		}
		return fromRLock("RLock", c.Lock(s.name, lockOpts(a, true)...), true, a.role.maxHold, false)
	}
}

func rwLock(s *sched, a *actor) lockHandle {
	rw := s.e.clients[a.client][0].ReadWriteLock(s.name, lockOpts(a, s.p.ops.fenced)...)
	if a.rng.IntN(3) == 0 {
		h := fromRLock("WriteLock", rw.WriteLock(), s.p.ops.fenced, a.role.maxHold, false)
		h.suffix = ":write"
		return h
	}
	return fromRLock("ReadLock", rw.ReadLock(), false, a.role.maxHold, true)
}

func multiLock(s *sched, a *actor) lockHandle {
	c := s.e.clients[a.client][0]
	res := a.rng.Perm(3)[:1+a.rng.IntN(3)]
	var parts []relock.Lockable
	for _, r := range res {
		parts = append(parts, c.Lock(fmt.Sprintf("%s.%d", s.name, r)))
	}
	if len(parts) == 1 {
		return fromLockable("RLock(part)", parts[0], res, false)
	}
	m := relock.NewMultiLock(parts...)
	return lockHandle{op: fmt.Sprintf("MultiLock%v", res), res: res, lock: m.Lock, tryLock: m.TryLock, lockLease: m.LockWithLease,
		unlock: m.Unlock, holdCtx: m.HoldContext}
}

func redLock(s *sched, a *actor) lockHandle {
	var parts []relock.Lockable
	for _, c := range s.e.clients[a.client] {
		parts = append(parts, c.Lock(s.name))
	}
	r := relock.NewRedLock(parts, nil)
	return lockHandle{op: "RedLock", res: []int{0}, lock: r.Lock, tryLock: r.TryLock, lockLease: r.LockWithLease,
		unlock: r.Unlock, holdCtx: r.HoldContext}
}

// noHoldContext records in x what err, the error of the call for x's context (HoldContext,
// LeadershipContext) made just after x was granted, tells: the hold is over already (ErrNotHeld: a lease
// or a budget that ended with its reply on the way, or a Close that gave it up), or its Client is closing
// (ErrClosed), which ends every hold's context: its holder knows it holds nothing from then on.
func (s *sched) noHoldContext(x *hold, err error) {
	s.h.update(func() {
		switch {
		case errors.Is(err, relock.ErrNotHeld):
			x.told = min(x.told, s.h.now())
		case errors.Is(err, relock.ErrClosed) && x.closed == 0:
			x.closed = s.h.now()
		}
	})
}

// watchLoss records in x when ctx, the hold's context, ends with a loss, or as its Client closes.
func (s *sched) watchLoss(x *hold, ctx context.Context) {
	go func() {
		<-ctx.Done() // a hold's context ends by the time its Client is closed, at the latest
		cause := context.Cause(ctx)
		s.h.update(func() {
			x.cause = cause
			if x.ctxEnded == 0 {
				x.ctxEnded = s.h.now()
			}
			switch {
			case errors.Is(cause, relock.ErrLockLost):
				x.told = min(x.told, s.h.now())
			case errors.Is(cause, relock.ErrClosed) && x.closed == 0:
				x.closed = s.h.now()
			}
		})
	}()
}

// lockActor drives a lock kind: acquisitions of every form (waiting, trying, leased), cancelled waits,
// reentry with hold counts checked, holds of random length, releases; and, as the kind and the plan allow,
// requests, revocations and takeovers (ops_test.go).
func lockActor(handle func(s *sched, a *actor) lockHandle) func(s *sched, a *actor) {
	return func(s *sched, a *actor) {
		for !s.stopped() {
			s.sleep(s.thinkTime(a))
			if s.stopped() {
				return
			}
			l := handle(s, a)
			if a.role.revoker && l.rl != nil && a.rng.IntN(2) == 0 {
				if !s.revokeOp(a, l) {
					return
				}
				continue
			}
			c := &call{actor: a.id, client: a.client, owner: a.owner, waitFor: l.res, units: 1, shared: l.shared}
			ctx, cancel := s.callCtx(a, c, s.p.maxWait, s.cancelP())
			var lease time.Duration
			var ok bool
			var err error
			op := a.rng.IntN(4)
			if s.p.tick > 0 {
				op = 0
			}
			switch op {
			case 0, 1:
				c.op = l.op + ".Lock"
				err = l.lock(ctx)
				ok = err == nil
			case 2:
				wait := time.Duration(a.rng.IntN(400)) * time.Millisecond
				if a.rng.IntN(2) == 0 {
					lease = time.Duration(200+a.rng.IntN(800)) * time.Millisecond
				}
				c.op = fmt.Sprintf("%s.TryLock(wait %v, lease %v)", l.op, wait, lease)
				if wait == 0 {
					c.waitFor, c.quick = nil, true
				}
				ok, err = l.tryLock(ctx, wait, lease)
			case 3:
				lease = time.Duration(200+a.rng.IntN(800)) * time.Millisecond
				c.op = fmt.Sprintf("%s.LockWithLease(%v)", l.op, lease)
				err = l.lockLease(ctx, lease)
				ok = err == nil
			}
			cancel()
			c.ret, c.err, c.granted = s.h.now(), err, ok
			s.h.addCall(c)
			if !ok {
				if err != nil {
					s.h.addHold(&hold{client: a.client, owner: a.owner, res: l.res, units: 1, shared: l.shared, phantom: true,
						grant: c.invoke, endRet: c.ret, end: c.ret, told: forever, keep: s.p.watchdog + time.Second})
				}
				if errors.Is(err, relock.ErrClosed) {
					return
				}
				if err != nil && l.holdCount != nil && a.rng.IntN(2) == 0 { // does it hold? one read, which waits for nothing
					q := &call{actor: a.id, client: a.client, op: l.op + ".HoldCount", quick: true}
					ctx, cancel := s.callCtx(a, q, s.p.maxWait, 0)
					_, q.err = l.holdCount(ctx)
					cancel()
					q.ret = s.h.now()
					s.h.addCall(q)
				}
				continue
			}
			x := &hold{client: a.client, owner: a.owner, res: l.res, units: 1, shared: l.shared, invoke: c.invoke, grant: c.ret, lease: lease, end: forever, told: forever}
			if !s.holdOn(a, l, x) {
				return
			}
		}
	}
}

// holdOn holds x, which a just got with l, for a random time, doing meanwhile what the plan says (reentry,
// guarded writes, an Extend, listening for requests, and heeding one), then releases it and checks the
// release. It reports false when the Client is closed.
func (s *sched) holdOn(a *actor, l lockHandle, x *hold) bool {
	a.holds++
	x.seq, x.sharedOwner, x.client, x.maxHold = a.holds, a.role.shared, a.client, l.maxHold
	if x.lease > 0 {
		x.leaseMin, x.leaseMax = x.invoke+x.lease, x.grant+x.lease
	}
	s.h.addHold(x)
	hctx, herr := l.holdCtx(a.base)
	if herr == nil {
		s.watchLoss(x, hctx)
	} else {
		hctx = nil
		s.noHoldContext(x, herr)
	}
	var budget chan struct{} // closed when the budget's check, if any, is over
	if l.maxHold > 0 && hctx != nil && !a.role.shared {
		budget = make(chan struct{})
		go func() {
			defer close(budget)
			<-hctx.Done()
			if errors.Is(context.Cause(hctx), relock.ErrMaxHoldReached) {
				s.checkBudget(a, l, x, s.h.now())
			}
		}()
	}
	if l.fenced && l.rl != nil {
		if tok, err := l.rl.FencingToken(a.base); err == nil {
			s.h.update(func() { x.token = tok })
		}
	}
	// A reentry at once: a loss between the grant and it (a key deleted) is one the watch of holds has not
	// seen yet, which the Client must not take for a reentry.
	balanced := true // the owner's levels are the hold's one (a reentry's Unlock did not fail)
	if x.lease == 0 && l.holdCount != nil && !a.role.shared && a.rng.IntN(4) == 0 {
		balanced = s.reenter(a, l, x, hctx)
	}
	var asked <-chan struct{}
	if l.rl != nil && s.k.ops&opRevoke != 0 {
		asked = s.listen(a, x, l.rl.ReleaseRequests)
	}
	hold := s.holdTime(a)
	if x.lease > 0 && a.rng.IntN(5) == 0 {
		hold = x.lease + 50*time.Millisecond // past the lease: the hold expires, the Unlock finds it gone
	}
	if l.maxHold > 0 && a.rng.IntN(3) == 0 {
		hold = l.maxHold + 100*time.Millisecond // past the budget: the Client ends the hold
	}
	if a.role.shared && a.rng.IntN(3) == 0 { // long enough that its co-owner's waiter, which may go on at once, is seen asleep
		hold = time.Duration(600+a.rng.IntN(600)) * time.Millisecond
	}
	var steps []holdStep
	if l.rl != nil && a.rng.Float64() < s.p.ops.guardP {
		for range 1 + a.rng.IntN(3) {
			steps = append(steps, holdStep{at: time.Duration(a.rng.Int64N(int64(hold) + 1)), do: func() { s.guardedWrite(a, l, x, hctx) }})
		}
	}
	if x.lease > 0 && l.rl != nil && a.rng.Float64() < s.p.ops.extendP {
		steps = append(steps, holdStep{at: time.Duration(a.rng.Int64N(int64(hold) + 1)), do: func() { s.extend(a, l, x) }})
	}
	slices.SortFunc(steps, func(p, q holdStep) int { return int(p.at - q.at) })
	began := time.Now()
	for _, st := range steps {
		s.holdFor(st.at-time.Since(began), asked)
		if s.stopped() || closedCh(asked) {
			break
		}
		st.do()
	}
	s.holdFor(hold-time.Since(began), asked)
	rc := s.release(a, l.op+".Unlock", "", l.unlock)
	err := rc.err
	s.h.update(func() { s.endedLocked(x, rc) })
	if budget != nil && hctx.Err() != nil {
		<-budget // its check is over before the owner acquires again
	}
	if err == nil && hctx != nil && !a.role.shared && balanced {
		if !s.endsWithin(hctx, 200*time.Millisecond) {
			s.h.fail("actor %d: %s returned nil, and its HoldContext still lives 200 ms later", a.id, rc.op)
		}
	}
	return !errors.Is(err, relock.ErrClosed)
}

// endsWithin reports whether ctx ends within d, not counting the stretches in which the test process did
// not run (history.monitorLag): the library cannot end a context while its process is starved.
func (s *sched) endsWithin(ctx context.Context, d time.Duration) bool {
	from := s.h.now()
	for wait := d; ; {
		select {
		case <-ctx.Done():
			return true
		case <-time.After(wait):
		}
		time.Sleep(2*lagPeriod + time.Millisecond) // the lag monitor records a stretch once it runs again
		var lag time.Duration
		s.h.update(func() { lag = s.h.lagIn(from, s.h.now()) })
		if left := from + d + lag - s.h.now(); left > 0 && lag < 10*time.Second {
			wait = left
			continue
		}
		if lag > 0 {
			s.h.update(func() { s.h.lagExcused++ })
		}
		return ctx.Err() != nil
	}
}

// closedCh reports whether ch is closed (a nil ch never is).
func closedCh(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func setPermits(s *sched) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var ok bool
	var err error
	if s.k.name == "PermitSemaphore" {
		ok, err = s.e.clients[0][0].PermitSemaphore(s.name).TrySetPermits(ctx, s.p.permits)
	} else {
		ok, err = s.e.clients[0][0].Semaphore(s.name).TrySetPermits(ctx, s.p.permits)
	}
	if err == nil && !ok {
		err = fmt.Errorf("TrySetPermits(%d) found permits set", s.p.permits)
	}
	return err
}

// semaphoreActor takes 1 or 2 permits (waiting, or trying), holds them, releases them.
func semaphoreActor(s *sched, a *actor) {
	sem := s.e.clients[a.client][0].Semaphore(s.name)
	for !s.stopped() {
		s.sleep(s.thinkTime(a))
		if s.stopped() {
			return
		}
		n := 1 + a.rng.IntN(min(2, s.p.permits))
		if s.p.tick > 0 {
			n = 1
		}
		c := &call{actor: a.id, client: a.client, owner: a.owner, waitFor: []int{0}, units: n}
		ctx, cancel := s.callCtx(a, c, s.p.maxWait, s.cancelP())
		var ok bool
		var err error
		if a.rng.IntN(2) == 0 || s.p.tick > 0 {
			c.op = fmt.Sprintf("Semaphore.Acquire(%d)", n)
			err = sem.Acquire(ctx, n)
			ok = err == nil
		} else {
			wait := time.Duration(a.rng.IntN(400)) * time.Millisecond
			c.op = fmt.Sprintf("Semaphore.TryAcquire(%d, wait %v)", n, wait)
			if wait == 0 {
				c.waitFor, c.quick = nil, true
			}
			ok, err = sem.TryAcquire(ctx, n, wait)
		}
		cancel()
		c.ret, c.err, c.granted = s.h.now(), err, ok
		s.h.addCall(c)
		if !ok {
			if err != nil && !errors.Is(err, relock.ErrClosed) {
				keep := forever // a lost reply strands the permits (documented)
				if isErr(err, context.Canceled, context.DeadlineExceeded) {
					keep = s.p.watchdog + time.Second // given back once its reply comes
				}
				s.h.addHold(&hold{client: a.client, owner: a.owner, res: []int{0}, units: n, phantom: true, grant: c.invoke, endRet: c.ret, end: c.ret, told: forever, keep: keep})
			}
			if errors.Is(err, relock.ErrClosed) {
				return
			}
			continue
		}
		x := &hold{client: a.client, owner: a.owner, res: []int{0}, units: n, invoke: c.invoke, grant: c.ret, end: forever, told: forever}
		s.h.addHold(x)
		s.sleep(s.holdTime(a))
		rc := s.release(a, fmt.Sprintf("Semaphore.Release(%d)", n), "", func(ctx context.Context) error { return sem.Release(ctx, n) })
		s.h.update(func() {
			x.end, x.endRet, x.endErr, x.released = rc.invoke, rc.ret, rc.err, rc.err == nil
			if rc.err != nil {
				x.keep = forever // a semaphore's permits are nobody's: a release that may not have run strands them
			}
		})
	}
}

// permitActor takes a permit (waiting, or trying, with or without a lease), holds it, gives it back.
func permitActor(s *sched, a *actor) {
	sem := s.e.clients[a.client][0].PermitSemaphore(s.name)
	for !s.stopped() {
		s.sleep(s.thinkTime(a))
		if s.stopped() {
			return
		}
		c := &call{actor: a.id, client: a.client, owner: a.owner, waitFor: []int{0}, units: 1}
		ctx, cancel := s.callCtx(a, c, s.p.maxWait, s.cancelP())
		var p *relock.Permit
		var ok bool
		var err error
		var lease time.Duration
		if a.rng.IntN(2) == 0 || s.p.tick > 0 {
			c.op = "PermitSemaphore.Acquire"
			p, err = sem.Acquire(ctx)
			ok = err == nil
		} else {
			wait := time.Duration(a.rng.IntN(400)) * time.Millisecond
			if a.rng.IntN(2) == 0 {
				lease = time.Duration(200+a.rng.IntN(800)) * time.Millisecond
			}
			c.op = fmt.Sprintf("PermitSemaphore.TryAcquire(wait %v, lease %v)", wait, lease)
			if wait == 0 {
				c.waitFor, c.quick = nil, true
			}
			p, ok, err = sem.TryAcquire(ctx, wait, lease)
		}
		cancel()
		c.ret, c.err, c.granted = s.h.now(), err, ok
		s.h.addCall(c)
		if !ok {
			if err != nil {
				s.h.addHold(&hold{client: a.client, owner: a.owner, res: []int{0}, units: 1, phantom: true, grant: c.invoke, endRet: c.ret, end: c.ret, told: forever, keep: s.p.watchdog + time.Second})
			}
			if errors.Is(err, relock.ErrClosed) {
				return
			}
			continue
		}
		x := &hold{client: a.client, owner: a.owner + "/" + p.ID(), res: []int{0}, units: 1, invoke: c.invoke, grant: c.ret, lease: lease, end: forever, told: forever}
		s.h.addHold(x)
		if pctx, err := p.Context(a.base); err == nil {
			s.watchLoss(x, pctx)
		}
		s.sleep(s.holdTime(a))
		rc := s.release(a, "Permit.Release", "", p.Release)
		s.h.update(func() { s.endedLocked(x, rc) })
		if errors.Is(rc.err, relock.ErrClosed) {
			return
		}
	}
}

func setCount(s *sched) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n := s.p.permits + 1
	ok, err := s.e.clients[0][0].CountDownLatch(s.name).TrySetCount(ctx, int64(n))
	if err == nil && !ok {
		err = errors.New("TrySetCount found a count set")
	}
	s.h.addCall(&call{actor: -1, op: "TrySetCount", units: n, err: err})
	return err
}

// latchActor counts down (the first actor of each Client) or awaits (the others), until stopped.
func latchActor(s *sched, a *actor) {
	l := s.e.clients[a.client][0].CountDownLatch(s.name)
	counter := a.id%s.p.perClient == 0
	for !s.stopped() {
		s.sleep(time.Duration(a.rng.Int64N(int64(s.p.maxThink)*4 + 1)))
		if s.stopped() {
			return
		}
		if counter {
			c := &call{actor: a.id, client: a.client, op: "CountDown"}
			ctx, cancel := s.callCtx(a, c, time.Second, 0)
			err := l.CountDown(ctx)
			cancel()
			c.ret, c.err = s.h.now(), err
			s.h.addCall(c)
			s.h.update(func() { s.h.countDown = append(s.h.countDown, c) })
			continue
		}
		c := &call{actor: a.id, client: a.client, latchAwait: true}
		ctx, cancel := s.callCtx(a, c, s.p.maxWait, 0.1)
		var ok bool
		var err error
		if a.rng.IntN(2) == 0 {
			c.op = "Await"
			err = l.Await(ctx)
			ok = err == nil
		} else {
			wait := time.Duration(a.rng.IntN(600)) * time.Millisecond
			c.op = fmt.Sprintf("TryAwait(%v)", wait)
			ok, err = l.TryAwait(ctx, wait)
			if err == nil && !ok && c.invoke+wait < c.deadline {
				c.deadline = c.invoke + wait // it waited as long as it was told: not a wait to check further
			}
		}
		cancel()
		c.ret, c.err, c.granted = s.h.now(), err, ok
		s.h.addCall(c)
		if errors.Is(err, relock.ErrClosed) {
			return
		}
	}
}

// electionActor campaigns (sometimes twice at once: two actors of a Client share an owner), leads for a
// while, checks that its term stays while it leads, and resigns; a Resign must end the leadership.
func electionActor(s *sched, a *actor) {
	e := s.e.clients[a.client][0].Election(s.name)
	for !s.stopped() {
		s.sleep(s.thinkTime(a))
		if s.stopped() {
			return
		}
		if a.role.revoker && a.rng.IntN(2) == 0 {
			if !s.requestStepDown(a, e) {
				return
			}
			continue
		}
		c := &call{actor: a.id, client: a.client, owner: a.owner, waitFor: []int{0}, units: 1, op: "Campaign"}
		ctx, cancel := s.callCtx(a, c, s.p.maxWait, 0.1)
		term, err := e.Campaign(ctx, a.owner)
		cancel()
		c.ret, c.err, c.granted = s.h.now(), err, err == nil
		s.h.addCall(c)
		if err != nil {
			s.h.addHold(&hold{client: a.client, owner: a.owner, res: []int{0}, units: 1, phantom: true, grant: c.invoke, endRet: c.ret, end: c.ret, told: forever, keep: s.p.watchdog + time.Second})
			if errors.Is(err, relock.ErrClosed) {
				return
			}
			continue
		}
		var x *hold
		s.h.update(func() {
			s.h.leaders = append(s.h.leaders, leaderRec{owner: a.owner, term: term, at: c.ret})
			// A Resign by the owner's other actor while this Campaign ran may have ended the leadership it
			// returns: it may or may not lead now (a phantom), until it resigns or campaigns again.
			for _, r := range s.h.calls {
				if r.op == "Resign" && r.owner == a.owner && r.ret >= c.invoke {
					x = &hold{client: a.client, owner: a.owner, res: []int{0}, units: 1, phantom: true, grant: c.invoke, endRet: c.ret, end: c.ret, told: forever, keep: forever}
					s.h.holds = append(s.h.holds, x)
					return
				}
			}
			for _, y := range s.h.holds {
				if y.owner == a.owner && !y.phantom && y.end == forever && y.told == forever {
					x = y
				}
			}
			if x == nil {
				x = &hold{client: a.client, owner: a.owner, res: []int{0}, units: 1, invoke: c.invoke, grant: c.ret, end: forever, told: forever}
				s.h.holds = append(s.h.holds, x)
			}
		})
		lctx, lerr := e.LeadershipContext(a.base)
		if lerr == nil {
			s.watchLoss(x, lctx)
		} else {
			s.noHoldContext(x, lerr)
		}
		asked := s.listen(a, x, e.StepDownRequests) // a request to step down, which it may heed
		s.holdFor(s.holdTime(a), asked)
		if a.rng.IntN(3) == 0 && !closedCh(asked) { // resign later, or leave it to the other actor of the owner
			continue
		}
		rc := s.release(a, "Resign", a.owner, e.Resign)
		err = rc.err
		s.h.update(func() { // the owner's leadership ends, whichever of its actors won it
			for _, y := range s.h.holds {
				switch {
				case y.owner != a.owner:
				case y.phantom && y.keep == forever:
					y.keep = rc.ret - y.endRet
				case !y.phantom && y.end == forever && y.told == forever:
					s.endedLocked(y, rc)
				}
			}
		})
		if err == nil && lerr == nil {
			if !s.endsWithin(lctx, 200*time.Millisecond) {
				s.h.fail("actor %d (%s): Resign returned nil, and the leadership of term %d still lives 200 ms later", a.id, a.owner, term)
			}
		}
		if errors.Is(err, relock.ErrClosed) {
			return
		}
	}
}

// observe runs an observer on Client i until the schedule stops, recording what it delivers.
func (s *sched) observe(i int) {
	e := s.e.clients[i][0].Election(s.name)
	o := &observerRec{start: s.h.now(), end: forever}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.stop
		cancel()
	}()
	var ch <-chan relock.Leader
	for {
		var err error
		if ch, err = e.Observe(ctx); err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.h.update(func() {
		o.start = s.h.now()
		s.h.observers = append(s.h.observers, o)
	})
	for l := range ch {
		d := delivery{owner: ownerToken(l.Owner), term: l.Term, at: s.h.now(), restarted: l.Restarted}
		s.h.update(func() { o.got = append(o.got, d) })
	}
	s.h.update(func() { o.end = s.h.now() })
}

// ownerToken is the token part of an owner ("<clientID>:<token>").
func ownerToken(owner string) string {
	if i := strings.Index(owner, ":"); i >= 0 {
		return owner[i+1:]
	}
	return owner
}
