package explore

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
)

// Waiters that speak Redisson's protocol on a relock Lock, as a Redisson client's threads would: its
// RLock's acquire, renewal and release scripts, written here from their description in
// /work/shared/REDISSON.md, sections 1.2 to 1.4 (never copied from Redisson), and its way of waiting:
// subscribe to the lock's channel, try again on each unlock message or when the holder's time to live
// runs out, until the wait is over (tryLock). Each such actor is a Redisson client of its own (an owner
// "<uuid>:1"), on a connection straight to the server: a chance to take the lock (a release that lets the
// other Clients go first wakes it 5 ms before the releasing Client's own waiter tries) is one it can take.

// redissonAcquire: when the lock is free, or the owner holds it, count one more hold and set the lease;
// reply nil. Else reply the holder's time to live. KEYS[1] the lock; ARGV[1] the lease (ms), ARGV[2] the
// owner.
var redissonAcquire = rueidis.NewLuaScript(`if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])`)

// redissonRenew: when the owner holds the lock, set its lease again and reply 1, else 0. KEYS[1] the lock;
// ARGV[1] the lease (ms), ARGV[2] the owner.
var redissonRenew = rueidis.NewLuaScript(`if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('pexpire', KEYS[1], ARGV[1])
  return 1
end
return 0`)

// redissonRelease: a request already run (its latch is set) replies what it replied then; an owner that
// does not hold the lock gets nil; else one hold less: still held, the lease again and 0; released, the
// lock deleted, the unlock message published, and 1. The latch keeps the reply. KEYS[1] the lock, KEYS[2]
// its channel, KEYS[3] the request's latch; ARGV[1] the unlock message, ARGV[2] the lease (ms), ARGV[3] the
// owner, ARGV[4] 'publish', ARGV[5] the latch's time to live (ms).
var redissonRelease = rueidis.NewLuaScript(`local done = redis.call('get', KEYS[3])
if done then
  return tonumber(done)
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
  return nil
end
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('set', KEYS[3], 0, 'px', ARGV[5])
  return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[4], KEYS[2], ARGV[1])
redis.call('set', KEYS[3], 1, 'px', ARGV[5])
return 1`)

// redissonStays: what the Redisson kind may leave: a release's latch, which Redisson deletes after the
// release, or which expires.
func redissonStays(name, key string) bool {
	return strings.HasPrefix(key, "redisson_unlock_latch:{"+name+"}:")
}

// redissonKindActor: relock's actors on a plain Lock (no fencing, as a service sharing it with Redisson's
// would use it), revokers among them (requests and Revokes, no TakeOver); and the Redisson actors.
func redissonKindActor(s *sched, a *actor) {
	if a.role.redisson {
		redissonActor(s, a)
		return
	}
	lockActor(func(s *sched, a *actor) lockHandle {
		return fromRLock("RLock", s.e.clients[a.client][0].Lock(s.name), false, 0, false)
	})(s, a)
}

// uuid4 is a random version 4 UUID, as a Redisson client's ID.
func uuid4() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// redissonClient is one Redisson client with one thread.
type redissonClient struct {
	s       *sched
	rdb     rueidis.Client
	owner   string
	channel string
	lease   time.Duration
}

// redissonActor tries to take the lock (tryLock with a wait), holds it (renewing it every third of its
// lease, as Redisson's watchdog does), and releases it, until the schedule stops.
func redissonActor(s *sched, a *actor) {
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.e.servers[0].Addr()}, DisableCache: true, DisableRetry: true})
	if err != nil {
		s.h.fail("harness: a Redisson client: %v", err)
		return
	}
	defer rdb.Close()
	r := &redissonClient{s: s, rdb: rdb, owner: uuid4() + ":1", channel: companion("redisson_lock__channel", s.name), lease: s.p.watchdog}
	a.owner = r.owner
	for !s.stopped() {
		s.sleep(s.thinkTime(a))
		if s.stopped() {
			return
		}
		wait := time.Duration(20+a.rng.IntN(int(s.p.maxWait/time.Millisecond))) * time.Millisecond
		c := &call{actor: a.id, client: a.client, owner: r.owner, waitFor: []int{0}, units: 1, redisson: true,
			op: fmt.Sprintf("Redisson.tryLock(wait %v)", wait)}
		c.invoke = s.h.now()
		// Redisson's tryLock(wait) makes its last attempt before the wait runs out, and waits for that
		// command's reply up to its command timeout: it returns by then (relock's calls return by their
		// ctx's deadline; Redisson takes no ctx).
		c.deadline = c.invoke + wait + redissonCommandTimeout
		ok, err := r.tryLock(wait, c)
		c.ret, c.err, c.granted = s.h.now(), err, ok
		s.h.addCall(c)
		if !ok {
			if err != nil && mayHaveRun(err) {
				s.h.addHold(&hold{client: a.client, owner: r.owner, res: []int{0}, units: 1, phantom: true, redisson: true,
					grant: c.invoke, endRet: c.ret, end: c.ret, told: forever, keep: r.lease + time.Second})
			}
			continue
		}
		x := &hold{client: a.client, owner: r.owner, res: []int{0}, units: 1, redisson: true, invoke: c.invoke, grant: c.ret,
			lease: r.lease, leaseMin: c.invoke + r.lease, leaseMax: c.ret + r.lease, end: forever, told: forever}
		s.h.addHold(x)
		stop := make(chan struct{})
		renewed := make(chan struct{})
		go func() {
			defer close(renewed)
			r.renew(x, stop)
		}()
		s.sleep(s.holdTime(a))
		close(stop)
		<-renewed
		rc := s.release(a, "Redisson.unlock", r.owner, func(context.Context) error { return r.unlock() })
		s.h.update(func() { s.endedLocked(x, rc) })
	}
}

// redissonCommandTimeout is how long the Redisson client waits for a command's reply: Redisson's default
// (Config.timeout, 3000 ms).
const redissonCommandTimeout = 3 * time.Second

// mayHaveRun reports whether a command that failed with err may have run: Redis did not reply.
func mayHaveRun(err error) bool {
	_, isReply := rueidis.IsRedisErr(err)
	return !isReply
}

// attempt runs the acquire script once: whether the owner holds the lock, else the holder's time to live.
func (r *redissonClient) attempt() (bool, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), redissonCommandTimeout)
	defer cancel()
	res := redissonAcquire.Exec(ctx, r.rdb, []string{r.s.name}, []string{fmt.Sprint(r.lease.Milliseconds()), r.owner})
	if rueidis.IsRedisNil(res.Error()) {
		return true, 0, nil
	}
	ttl, err := res.AsInt64()
	return false, time.Duration(ttl) * time.Millisecond, err
}

// tryLock is Redisson's RLock.tryLock(wait): one attempt; then, subscribed to the lock's channel, an attempt
// on each unlock message ("0", or a read lock's "1") or when the holder's time to live has passed, until the
// wait is over.
//
// It records in c the stretches in which it was subscribed, and when it heard an unlock message: the
// releases it was told of (checkRedisson).
func (r *redissonClient) tryLock(wait time.Duration, c *call) (bool, error) {
	h := r.s.h
	deadline := time.Now().Add(wait)
	ok, ttl, err := r.attempt()
	if ok || err != nil {
		return ok, err
	}
	woken := make(chan struct{}, 1)
	var closeConn func()
	var lost <-chan struct{}
	unsubscribed := func() {
		h.update(func() {
			if n := len(c.subscribed); n > 0 && c.subscribed[n-1][1] == forever {
				c.subscribed[n-1][1] = h.now()
			}
		})
	}
	subscribe := func() {
		if closeConn != nil {
			unsubscribed()
			closeConn()
			closeConn = nil
		}
		var err error
		closeConn, lost, err = subscribeRaw(r.s.e.servers[0].Addr(), r.channel, deadline, func(msg string) {
			if msg == "0" || msg == "1" {
				h.update(func() { c.heard0 = append(c.heard0, h.now()) })
				select {
				case woken <- struct{}{}:
				default:
				}
			}
		})
		if err != nil {
			lost = nil // it waits for the time to live alone, until the next attempt subscribes again
			return
		}
		h.update(func() { c.subscribed = append(c.subscribed, [2]time.Duration{h.now(), forever}) })
	}
	subscribe()
	defer func() {
		unsubscribed()
		if closeConn != nil {
			closeConn()
		}
	}()
	for {
		ok, ttl, err = r.attempt()
		if ok || err != nil {
			return ok, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false, nil
		}
		sleep := left
		if ttl >= 0 {
			sleep = min(ttl, left)
		}
		t := time.NewTimer(sleep)
		select {
		case <-woken:
		case <-t.C:
		case <-lost: // the subscription's connection broke (Redisson subscribes again)
			unsubscribed()
			subscribe()
		}
		t.Stop()
		if closeConn == nil {
			subscribe()
		}
	}
}

// renew renews x every third of its lease until stop is closed, recording each renewal's reach; a renewal
// that finds the hold gone ends it (its owner is told nothing: Redisson's thread learns at its unlock).
func (r *redissonClient) renew(x *hold, stop <-chan struct{}) {
	h := r.s.h
	for {
		select {
		case <-stop:
			return
		case <-time.After(r.lease / 3):
		}
		at := h.now()
		ctx, cancel := context.WithTimeout(context.Background(), r.lease/3)
		n, err := redissonRenew.Exec(ctx, r.rdb, []string{r.s.name}, []string{fmt.Sprint(r.lease.Milliseconds()), r.owner}).AsInt64()
		cancel()
		ret := h.now()
		h.update(func() {
			switch {
			case err == nil && n == 1:
				x.leaseMin, x.leaseMax = max(x.leaseMin, at+r.lease), max(x.leaseMax, ret+r.lease)
			case err == nil:
				x.told = min(x.told, ret)
			case mayHaveRun(err):
				x.leaseMax = max(x.leaseMax, ret+r.lease)
			}
		})
		if err == nil && n == 0 {
			return
		}
	}
}

// unlock is Redisson's RLock.unlock: the release script, sent again while Redis does not answer (its latch
// makes a repeat reply as the first run did), for up to 2 s; then the latch is deleted. It returns
// ErrNotHeld when the owner did not hold the lock.
func (r *redissonClient) unlock() error {
	var b [16]byte
	_, _ = rand.Read(b[:])
	latch := "redisson_unlock_latch:{" + r.s.name + "}:" + hex.EncodeToString(b[:])
	deadline := time.Now().Add(2 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		res := redissonRelease.Exec(ctx, r.rdb, []string{r.s.name, r.channel, latch},
			[]string{"0", fmt.Sprint(r.lease.Milliseconds()), r.owner, "publish", "3000"})
		cancel()
		err := res.Error()
		if err == nil || rueidis.IsRedisNil(err) || !mayHaveRun(err) || time.Now().After(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			r.rdb.Do(ctx, r.rdb.B().Del().Key(latch).Build())
			cancel()
			if rueidis.IsRedisNil(err) {
				return relock.ErrNotHeld
			}
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// subscribeRaw subscribes to channel on a connection of its own to addr, calling on with each message's
// payload, until the returned close is called (which closes the connection: nothing is sent) or the
// connection breaks (lost is closed then). It reads RESP2 itself: rueidis's dedicated connections send
// UNSUBSCRIBE when given back, and a BUSY or LOADING reply to it ends the process (rueidis panics), which
// would be the harness's doing, not the library's.
func subscribeRaw(addr, channel string, deadline time.Time, on func(string)) (func(), <-chan struct{}, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Until(deadline))
	if err != nil {
		return nil, nil, err
	}
	_ = conn.SetDeadline(deadline)
	if _, err := fmt.Fprintf(conn, "*2\r\n$9\r\nSUBSCRIBE\r\n$%d\r\n%s\r\n", len(channel), channel); err != nil {
		conn.Close()
		return nil, nil, err
	}
	rd := bufio.NewReader(conn)
	if reply, err := readRESP(rd); err != nil || len(reply) != 3 || reply[0] != "subscribe" {
		conn.Close()
		return nil, nil, fmt.Errorf("SUBSCRIBE: %v %v", reply, err)
	}
	_ = conn.SetDeadline(time.Time{})
	lost := make(chan struct{})
	go func() {
		defer close(lost)
		for {
			m, err := readRESP(rd)
			if err != nil {
				return
			}
			if len(m) == 3 && m[0] == "message" {
				on(m[2])
			}
		}
	}()
	return func() { conn.Close() }, lost, nil
}

// readRESP reads one RESP2 reply: an array of bulk strings (or integers) as its elements, an error as an
// error, anything else as one element.
func readRESP(rd *bufio.Reader) ([]string, error) {
	line, err := rd.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return nil, errors.New("empty line")
	}
	switch line[0] {
	case '-':
		return nil, errors.New(line[1:])
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return nil, err
		}
		var out []string
		for range n {
			e, err := readRESP(rd)
			if err != nil {
				return nil, err
			}
			out = append(out, e...)
		}
		return out, nil
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return []string{""}, err
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(rd, b); err != nil {
			return nil, err
		}
		return []string{string(b[:n])}, nil
	default:
		return []string{line[1:]}, nil
	}
}
