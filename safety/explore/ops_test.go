package explore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/relock-go/relock"
)

// The operations beyond acquiring and releasing: extending a lease, a hold's budget (WithMaxHold), writes
// guarded by a hold (GuardedWrite, GuardedEval, FencedWrite), requests to release and takeovers
// (RequestRelease, Revoke, TakeOver, RequestStepDown), goroutines that share an owner, and a Client closed
// midway. What each checks is said where it is recorded, and in check_ops_test.go.

// Which of the operations a kind's actors make (kind.ops).
const (
	opExtend   = 1 << iota // Extend a leased hold
	opMaxHold              // some actors' locks have a budget (WithMaxHold)
	opGuard                // guarded and fenced writes while holding
	opRevoke               // RequestRelease, Revoke, TakeOver; holders listen for requests (RLock)
	opStepDown             // RequestStepDown; leaders listen for requests (Election)
	opShared               // two actors of a Client share an owner
	opFenced               // the kind's exclusive holds may be fenced (FairLock, WriteLock)
	opCrowd                // a Client with many actors: its gate queues them and hands the lock over
)

// ops is what a plan's actors do besides acquiring and releasing. It is drawn from a stream of its own, so
// that the rest of a seed's plan is what it was before these operations were added.
type ops struct {
	shared   bool          // actors 2j and 2j+1 of each Client share an owner (a WithOwner token)
	crowd    int           // the first Client (every Client, in the Redisson kind) has this many actors, when above perClient
	fenced   bool          // FairLock and WriteLock holds are fenced (RLock's always are)
	maxHold  time.Duration // the budget of the locks of the actors with a budget (every third one)
	extendP  float64       // how likely a leased hold is extended, at a random point of its hold
	guardP   float64       // how likely a hold makes guarded writes
	listenP  float64       // how likely a hold listens for requests to release it
	revokers int           // actors that also request, revoke and take over (every other of their turns)
	redisson int           // Redisson-protocol actors (the Redisson kind)
}

func (o ops) String() string {
	return fmt.Sprintf(", ops: shared %v, crowd %d, fenced %v, max hold %v, extend %.1f, guard %.1f, listen %.1f, revokers %d, redisson %d",
		o.shared, o.crowd, o.fenced, o.maxHold, o.extendP, o.guardP, o.listenP, o.revokers, o.redisson)
}

// drawOps draws p.ops, and the faults of k.extra (up to two), from rng.
func drawOps(k *kind, p *plan, rng *rand.Rand) {
	o := &p.ops
	if k.ops&opShared != 0 {
		o.shared = rng.IntN(3) == 0
	}
	if k.ops&opCrowd != 0 && rng.IntN(2) == 0 {
		o.crowd = 4 + rng.IntN(3)
	}
	if k.ops&opFenced != 0 {
		o.fenced = rng.IntN(2) == 0
	}
	if k.ops&opMaxHold != 0 && rng.IntN(2) == 0 {
		o.maxHold = time.Duration(150+rng.IntN(650)) * time.Millisecond
	}
	if k.ops&opExtend != 0 {
		o.extendP = 0.5
	}
	if k.ops&opGuard != 0 {
		o.guardP = 0.5
	}
	if k.ops&(opRevoke|opStepDown) != 0 {
		o.listenP = 0.75
		o.revokers = rng.IntN(3)
	}
	if k.name == "Redisson" {
		o.redisson = 1 + rng.IntN(2)
		o.crowd = 3 + rng.IntN(3) // handoffs in a row are what a Redisson waiter must not starve behind
		// Busy plans of short holds: many in one Redisson wait, and Clients with waiters queued all along.
		p.tick, p.sparse = 0, false
		p.maxHold = time.Duration(1+rng.IntN(20)) * time.Millisecond
		p.maxThink = time.Duration(1+rng.IntN(5)) * time.Millisecond
		if rng.IntN(2) == 0 {
			// A hot lock, as TestRedissonWaiterGetsItsTurnBetweenBusyClients has it: holds of a
			// millisecond at most, taken again at once, so that every release finds waiters queued in
			// every Client and the handoffs run their full streaks.
			p.maxHold, p.maxThink = time.Millisecond, 0
		}
		p.maxWait = 3 * time.Second
		// Links without delays: a relock waiter named by another Client's release races Redisson's on
		// equal terms, so that a release that names one where it should let Redisson's go first is seen.
		for i := range p.latency {
			p.latency[i], p.jitter[i], p.replyLag[i] = 0, 0, 0
		}
	}
	for range rng.IntN(3) {
		if len(k.extra) == 0 {
			break
		}
		f := step{what: k.extra[rng.IntN(len(k.extra))], at: time.Duration(float64(p.length) * (0.05 + 0.7*rng.Float64())),
			dur: time.Duration(50+rng.IntN(450)) * time.Millisecond}
		switch f.what {
		case fClose: // the first Client half the time: with a crowd, it hands over as it closes
			f.target = rng.IntN(p.clients)
			if rng.IntN(2) == 0 {
				f.target = 0
			}
		case fBusy, fLoading:
			f.target = rng.IntN(k.servers)
			if rng.IntN(2) == 0 { // the watch's connection dropped as Redis stops answering: it reconnects into it
				f.what += "+" + fWatchKill
			}
		default:
			f.target = rng.IntN(k.servers)
		}
		p.faults = append(p.faults, f)
	}
}

// actorsOf is how many actors Client ci has.
func (p *plan) actorsOf(ci int) int {
	if (ci == 0 || p.ops.redisson > 0) && p.ops.crowd > p.perClient { // the Redisson kind's Clients all queue many
		return p.ops.crowd
	}
	return p.perClient
}

// role is what an actor does besides acquiring and releasing, decided by the plan.
type role struct {
	shared   bool          // its owner is shared with another actor of its Client
	revoker  bool          // it requests, revokes and takes over, in turns with acquiring
	maxHold  time.Duration // its locks' budget (WithMaxHold), 0: none
	redisson bool          // it speaks Redisson's protocol (a Redisson client's thread)
}

// ownerField is the hash field of owner token on Client c: "<clientID>:<token>".
func ownerField(c *relock.Client, token string) string { return c.ID() + ":" + token }

// listen makes x, a hold of a, listen for requests to release it (ReleaseRequests or StepDownRequests),
// recording each request it hears. It returns a channel that is closed at the first request, when the
// holder means to cooperate (and nil otherwise).
func (s *sched) listen(a *actor, x *hold, requests func(ctx context.Context) (<-chan relock.ReleaseRequest, error)) <-chan struct{} {
	if a.rng.Float64() >= s.p.ops.listenP {
		return nil
	}
	cooperate := a.rng.IntN(2) == 0
	ch, err := requests(a.base)
	if err != nil {
		return nil
	}
	s.h.update(func() { x.listened = s.h.now() })
	asked := make(chan struct{})
	go func() {
		first := true
		for r := range ch { // closed when the hold ends
			s.h.update(func() { x.heard = append(x.heard, heardRec{reason: r.Reason, at: s.h.now()}) })
			if first && cooperate {
				close(asked)
			}
			first = false
		}
		if first && cooperate {
			close(asked)
		}
	}()
	if !cooperate {
		return nil
	}
	return asked
}

// holdFor sleeps d, or less: until the schedule stops or asked is closed (a request the holder heeds).
func (s *sched) holdFor(d time.Duration, asked <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.stop:
	case <-asked:
	}
}

// During a hold: things to do at random points of it (guarded writes, an Extend), and the budget's end.
type holdStep struct {
	at time.Duration // from the grant
	do func()
}

// guardedEval is the user's script of GuardedEval: it records what the guard let through, with the lock's
// fencing counter and whether the owner's field is in the lock, as they are when it runs.
// KEYS: the log, the fencing counter, the lock; ARGV: the entry, the owner field.
const guardedEval = `local counter = redis.call('get', KEYS[2]) or '-'
redis.call('rpush', KEYS[1], ARGV[1] .. ' e ' .. counter .. ' ' .. redis.call('hexists', KEYS[3], ARGV[2]))
return 1`

// guardedWrite makes one write guarded by x (GuardedWrite, GuardedEval, or FencedWrite when fenced), while
// the hold's context lives and the Client gives the hold the token it began with. Each write appends to a
// log in Redis the token the hold began with (0 unfenced), its actor and hold, read once the schedule is
// over (checkGuardLogs).
func (s *sched) guardedWrite(a *actor, l lockHandle, x *hold, hctx context.Context) {
	if l.rl == nil || hctx == nil || hctx.Err() != nil {
		return
	}
	if l.fenced {
		if tok, err := l.rl.FencingToken(a.base); err != nil || tok != x.token {
			return
		}
	}
	c := s.e.clients[a.client][0]
	entry := fmt.Sprintf("%d %d %d", x.token, a.id, x.seq)
	q := &call{actor: a.id, client: a.client, owner: a.owner, quick: true}
	ctx, cancel := short(a)
	defer cancel()
	q.invoke = s.h.now()
	q.deadline = q.invoke + 2*time.Second
	var err error
	switch n := a.rng.IntN(3); {
	case n == 0:
		q.op = l.op + ".GuardedWrite"
		_, err = l.rl.GuardedWrite(ctx, c.B().Rpush().Key(s.name+":glog").Element(entry+" w").Build())
	case n == 1 || !l.fenced:
		q.op = l.op + ".GuardedEval"
		_, err = l.rl.GuardedEval(ctx, guardedEval, []string{s.name + ":glog", companion("redisson_lock_token", s.name), s.name},
			[]string{entry, ownerField(c, a.owner) + l.suffix})
	default:
		q.op = l.op + ".FencedWrite"
		_, err = l.rl.FencedWrite(ctx, s.name+":fence", c.B().Rpush().Key(s.name+":flog").Element(entry).Build())
	}
	q.ret, q.err = s.h.now(), err
	s.h.addCall(q)
}

// extend extends x, a leased hold, by a lease drawn from 20 to 900 ms: shorter than what is left of it as
// often as longer, which Extend must never shorten. x's earliest end moves to the Extend's invocation plus
// the lease, when it returns nil (up to the hold's budget); its latest end, to its return plus the lease,
// unless it surely changed nothing.
func (s *sched) extend(a *actor, l lockHandle, x *hold) {
	lease := time.Duration(20+a.rng.IntN(880)) * time.Millisecond
	if a.rng.IntN(2) == 0 { // shorter than the hold's lease: Extend must not shorten it
		lease = time.Duration(20+a.rng.Int64N(int64(x.lease/2/time.Millisecond)+1)) * time.Millisecond
	}
	var before time.Duration
	s.h.update(func() { before = x.leaseMin })
	q := &call{actor: a.id, client: a.client, owner: a.owner, quick: true, op: fmt.Sprintf("%s.Extend(%v)", l.op, lease)}
	ctx, cancel := short(a)
	defer cancel()
	q.invoke = s.h.now()
	q.deadline = q.invoke + 2*time.Second
	err := l.rl.Extend(ctx, lease)
	q.ret, q.err = s.h.now(), err
	s.h.addCall(q)
	s.h.update(func() {
		switch {
		case err == nil:
			end := q.invoke + lease
			if l.maxHold > 0 {
				end = min(end, x.invoke+l.maxHold)
			}
			x.leaseMin = max(x.leaseMin, end)
			x.leaseMax = max(x.leaseMax, q.ret+lease)
		case isErr(err, relock.ErrNotHeld, relock.ErrNoLease, relock.ErrMaxHoldReached, relock.ErrClosed, relock.ErrInvalidDuration):
		default:
			x.leaseMax = max(x.leaseMax, q.ret+lease)
		}
	})
	if err == nil && !a.role.shared {
		s.checkExtended(a, l, x, max(before, q.invoke+lease), q)
	}
}

// checkExtended checks, right after an Extend of x returned nil, that Redis keeps the hold at least until
// want (Extend: "it lives at least lease from now ... It never shortens the hold"): the time to live of
// the lock's hash, or of each of a reader's level keys, reaches want (up to the hold's budget), less 2 ms.
// A hold Redis no longer has is left to the other checkers (it may have been taken or deleted).
func (s *sched) checkExtended(a *actor, l lockHandle, x *hold, want time.Duration, q *call) {
	if l.maxHold > 0 {
		// The budget runs from the owner's first acquisition of the hold that x is a level of (a reentry's
		// budget is its first level's): the earliest of the owner's holds held without a break up to x.
		first := x.invoke
		s.h.update(func() {
			for changed := true; changed; {
				changed = false
				for _, y := range s.h.holds {
					if y.owner == x.owner && y.shared == x.shared && !y.phantom && y.invoke < first &&
						y.grant <= first && y.end > first && slices.Equal(y.res, x.res) {
						first, changed = y.invoke, true
					}
				}
			}
		})
		want = min(want, first+l.maxHold)
	}
	field := ownerField(s.e.clients[a.client][0], a.owner) + l.suffix
	at := s.h.now()
	ttl, err := s.e.do(0, "EVAL", `if ARGV[2] == '1' then
  local least = -2
  for _, k in ipairs(redis.call('keys', KEYS[2])) do
    local t = redis.call('pttl', k)
    if least == -2 or (t >= 0 and t < least) then least = t end
  end
  return least
end
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return -2 end
return redis.call('pttl', KEYS[1])`, "2", s.name, "{"+s.name+"}:"+field+":rwlock_timeout:*", field, map[bool]string{true: "1", false: "0"}[l.shared]).AsInt64()
	if err != nil || ttl < 0 {
		return
	}
	if left := want - s.h.now(); time.Duration(ttl)*time.Millisecond < left-2*time.Millisecond {
		s.h.fail("extend: actor %d's %s (%s..%s) returned nil, and at %s Redis keeps the hold %d ms more, not the %d ms to %s that the lease and the Extend promise (acquired %s with lease %v)",
			a.id, q.op, ms(q.invoke), ms(q.ret), ms(at), ttl, left.Milliseconds(), ms(want), ms(x.invoke), x.lease)
	}
}

// checkBudget is called when x's context ended with ErrMaxHoldReached: by x's budget's end, Redis must not
// have the hold any more. WithMaxHold: "Redis drops the hold d after it granted the first acquisition, on
// Redis's clock (to the millisecond), even if its Client is cut off: no later acquisition, renewal or
// Extend gives it a time to live past that point". The first acquisition was granted before it returned
// (x.grant; one machine, one clock), so Redis has nothing of the hold 2 ms after x.grant + d (the 2 ms are
// the millisecond and the clocks' reading), or after its Client ended it, whichever is later. A hold Redis
// still has is reported with its time to live.
func (s *sched) checkBudget(a *actor, l lockHandle, x *hold, at time.Duration) {
	var grant time.Duration
	s.h.update(func() { grant = x.grant })
	time.Sleep(max(at, grant+l.maxHold) + 2*time.Millisecond - s.h.now())
	field := ownerField(s.e.clients[a.client][0], a.owner) + l.suffix
	// One script run: whether Redis has the hold, and its time to live.
	r, err := s.e.do(0, "EVAL", `if ARGV[2] == '1' then
  local keys = redis.call('keys', KEYS[2])
  if #keys == 0 then return {0, -2} end
  return {1, redis.call('pttl', keys[1])}
end
return {redis.call('hexists', KEYS[1], ARGV[1]), redis.call('pttl', KEYS[1])}`, "2", s.name, "{"+s.name+"}:"+field+":rwlock_timeout:*", field, map[bool]string{true: "1", false: "0"}[l.shared]).AsIntSlice()
	if err != nil || len(r) != 2 || r[0] != 1 {
		return
	}
	s.h.fail("max hold: actor %d's %s hold (budget %v, acquired %s..%s) ended for its Client at %s (ErrMaxHoldReached), and Redis still has it at %s, for %d ms more",
		a.id, l.op, l.maxHold, ms(x.invoke), ms(grant), ms(at), ms(s.h.now()), r[1])
}

// reenter takes the lock again (the hold count must be 2), releases once (1 again), checking HoldCount
// while the hold is known to live, and, for a fenced lock, that the hold kept its fencing token: a
// reentrant acquisition keeps the owner's token (WithFencing), and a hold that Redis had lost, taken
// afresh, is a new hold whose old context must have ended (HoldContext: lost).
//
// It reports whether the levels it took are given back as far as the owner knows (its Unlock returned nil,
// or its Lock failed).
func (s *sched) reenter(a *actor, l lockHandle, x *hold, hctx context.Context) bool {
	ctx, cancel := short(a)
	defer cancel()
	countIs := func(want int, when string) {
		if hctx == nil || hctx.Err() != nil {
			return
		}
		n, err := l.holdCount(ctx)
		if err != nil || hctx.Err() != nil || n == want {
			return
		}
		// A hold taken over, force-unlocked or deleted meanwhile: its context ends within milliseconds
		// (victimBound).
		if !s.endsWithin(hctx, 500*time.Millisecond) {
			s.h.fail("actor %d: %s: HoldCount = %d, want %d, and its HoldContext still lives 500 ms later", a.id, when, n, want)
		}
	}
	// Not one attempt: were the hold lost meanwhile, the Lock would wait for the lock as any. What it adds
	// is not a hold of its own (a reentry is x's), but may be one (the hold was lost, and this is a new
	// one): a phantom, from its invocation until its Unlock is surely over.
	q := &call{actor: a.id, client: a.client, owner: a.owner, op: l.op + ".Lock (reentry)"}
	q.invoke = s.h.now()
	q.deadline = q.invoke + 2*time.Second
	err := l.lock(ctx)
	q.ret, q.err, q.granted = s.h.now(), err, err == nil
	s.h.addCall(q)
	extra := &hold{client: a.client, owner: a.owner, res: l.res, units: 1, shared: l.shared, phantom: true, grant: q.invoke, endRet: forever, end: forever, told: forever, keep: s.p.watchdog + time.Second}
	s.h.addHold(extra)
	released := false
	defer s.h.update(func() {
		extra.endRet, extra.end = s.h.now(), s.h.now()
		if released {
			extra.keep = 0
		}
	})
	if err != nil {
		return true
	}
	if l.fenced && x.token != 0 && hctx != nil {
		if tok, err := l.rl.FencingToken(a.base); err == nil && tok != x.token {
			if !s.endsWithin(hctx, 50*time.Millisecond) {
				s.h.fail("actor %d: %s: the hold's fencing token went from %d to %d at a reentry (%s..%s), and its HoldContext still lives 50 ms later",
					a.id, l.op, x.token, tok, ms(q.invoke), ms(q.ret))
			}
		}
	}
	countIs(2, "after reentry")
	if rc := s.release(a, l.op+".Unlock (of the reentry)", "", l.unlock); rc.err != nil {
		return false
	}
	released = true
	countIs(1, "after one of two Unlocks")
	return true
}

// revokeOp makes one request of a revoker (RLock): RequestRelease, Revoke or TakeOver, each with a
// reason of its own. A Revoke or TakeOver that returns nil leaves a holding, which the actor then holds and
// releases as any; one whose outcome is unknown may hold (a phantom). Both are recorded as forced events:
// the holds they end are victims (checkForced, checkRevoke). It reports false when the Client is closed.
func (s *sched) revokeOp(a *actor, l lockHandle) bool {
	reason := fmt.Sprintf("r%d.%d", a.id, a.rng.Uint32())
	c := &call{actor: a.id, client: a.client, owner: a.owner, units: 1}
	var err error
	var ok bool
	n := a.rng.IntN(3)
	if s.k.name == "Redisson" && n == 2 {
		// No TakeOver beside Redisson's waiters: it takes the lock whoever waits; a Revoke must leave a
		// Redisson holder's hold alone (ErrNotHeard).
		n = a.rng.IntN(2)
	}
	switch n {
	case 0:
		c.op, c.quick = "RLock.RequestRelease", true
		ctx, cancel := short(a)
		c.invoke = s.h.now()
		c.deadline = c.invoke + 2*time.Second
		_, err = l.rl.RequestRelease(ctx, reason)
		cancel()
		c.ret, c.err = s.h.now(), err
		s.h.addCall(c)
		return !errors.Is(err, relock.ErrClosed)
	case 1:
		grace := time.Duration(30+a.rng.IntN(370)) * time.Millisecond
		c.op, c.waitFor, c.revoke = fmt.Sprintf("RLock.Revoke(%s, grace %v)", reason, grace), l.res, reason
		ctx, cancel := s.callCtx(a, c, s.p.maxWait, 0)
		err = l.rl.Revoke(ctx, reason, grace)
		cancel()
		ok = err == nil
	default:
		c.op, c.quick = "RLock.TakeOver", true
		ctx, cancel := short(a)
		c.invoke = s.h.now()
		c.deadline = c.invoke + 2*time.Second
		err = l.rl.TakeOver(ctx)
		cancel()
		ok = err == nil
	}
	c.ret, c.err, c.granted = s.h.now(), err, ok
	s.h.addCall(c)
	if errors.Is(err, relock.ErrClosed) {
		return false
	}
	mayHave := ok || (err != nil && !isErr(err, relock.ErrNotHeard, relock.ErrNotHeld))
	if mayHave {
		s.h.update(func() {
			s.h.forced = append(s.h.forced, forcedRec{op: c.op, from: c.invoke, to: c.ret, owner: a.owner, res: l.res, revoke: c.revoke, sure: ok})
		})
	}
	if !ok {
		if mayHave {
			s.h.addHold(&hold{client: a.client, owner: a.owner, res: l.res, units: 1, phantom: true, grant: c.invoke, endRet: c.ret, end: c.ret, told: forever, keep: s.p.watchdog + time.Second})
		}
		return true
	}
	x := &hold{client: a.client, owner: a.owner, res: l.res, units: 1, invoke: c.invoke, grant: c.ret, end: forever, told: forever, taker: true}
	return s.holdOn(a, l, x)
}

// requestStepDown asks the election's leader to step down (Election kind's revokers).
func (s *sched) requestStepDown(a *actor, e *relock.Election) bool {
	c := &call{actor: a.id, client: a.client, owner: a.owner, quick: true, op: "RequestStepDown"}
	ctx, cancel := short(a)
	defer cancel()
	c.invoke = s.h.now()
	c.deadline = c.invoke + 2*time.Second
	n, err := e.RequestStepDown(ctx, fmt.Sprintf("r%d.%d", a.id, a.rng.Uint32()))
	c.ret, c.err = s.h.now(), err
	s.h.addCall(c)
	if err == nil && n > s.p.clients+s.p.observers {
		s.h.fail("actor %d: RequestStepDown reports %d Clients heard it, of %d", a.id, n, s.p.clients+s.p.observers)
	}
	return !errors.Is(err, relock.ErrClosed)
}

// heardRec is a request a hold heard: its reason, when.
type heardRec struct {
	reason string
	at     time.Duration
}

// forcedRec is an operation or a fault that may end holds other than by their owners' releases: a TakeOver,
// a Revoke (that took the lock, or may have), a ForceUnlock, a key deleted. from..to is its call or fault.
type forcedRec struct {
	op       string
	from, to time.Duration
	owner    string // who took the lock ("" for a fault)
	res      []int
	revoke   string // a Revoke's reason
	sure     bool   // it surely ran (the call returned nil, the fault was made)
}

// closeRec is a Client closed while the schedule ran.
type closeRec struct {
	client     int
	start, ret time.Duration
	err        error
}

// parseEntry reads a guarded log's entry: "<token> <actor> <hold> <w|e> [<counter> <held>]", or a fenced
// log's "<token> <actor> <hold>".
func parseEntry(e string) (token uint64, rest []string, err error) {
	f := strings.Fields(e)
	if len(f) < 3 {
		return 0, nil, fmt.Errorf("entry %q", e)
	}
	token, err = strconv.ParseUint(f[0], 10, 64)
	return token, f[1:], err
}
