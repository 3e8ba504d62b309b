// Package relocktest runs relock on an in-process Redis, so that code using relock can be tested without
// a Redis server: every lock kind works on it (RLock, FairLock, ReadWriteLock, MultiLock, RedLock over
// several Servers, fencing, HoldContext), and so do the semaphores, latches and elections; keys expire in
// real time, and hooks make the situations such code must handle happen on demand, for every kind: a hold
// lost (Expire: a lock's, a permit's, a leadership), renewals failing (FailRenewals), Redis out of reach
// (Down, Up). Inspect and InspectSemaphore read an object's state.
//
//	func TestJob(t *testing.T) {
//		c, srv := relocktest.NewClient(t, nil)
//		// ... run the code under test with c; then, while it holds "job:42":
//		srv.Expire("job:42") // deleted now; its HoldContext ends with relock.ErrLockLost at the next renewal
//	}
//
// The server is miniredis (github.com/alicebob/miniredis), in the test's process, on a loopback port,
// with its TTLs running on the wall clock: every command first ages every key by the time elapsed since
// the previous one (miniredis's ClockTTL, with its clock set to the wall clock's as each command arrives),
// and expired keys are removed then. As on Redis, time stands still during a script. Clients reach it through a
// loopback proxy that Down and Up cut and restore. Clients made here default to a 1 s watchdog timeout
// (DefaultWatchdogTimeout) instead of relock's 30 s: the watchdog renews, and so finds a loss, every
// timeout/3.
//
// # What relocktest does not do
//
// miniredis is not Redis. relock's own conformance suite (reentrancy, owner-only unlock, lease expiry,
// mutual exclusion, fencing and loss, for every exclusive kind) runs against relocktest as it runs against
// redis-server, so what relock does on a single Redis server behaves the same here. What needs more than
// one plain server does not:
//
//   - No Redis Cluster: a Server is a single node, and its Clients are single-node clients
//     (rueidis ForceSingleClient: miniredis answers CLUSTER SLOTS, and rueidis would otherwise take it for
//     a cluster). Sharded pub/sub (Options.ShardedPubSub) is never used; slots, MOVED and failover cannot
//     be tested. A client of your own connected to Addr must set ForceSingleClient too.
//   - No replicas: WAIT is refused with an error reply, so an acquisition WithReplicaAck fails with an
//     error matching relock.ErrReplicaAck that says "WAIT is not supported by relocktest" (the hold is
//     rolled back), instead of pretending replicas acknowledged it.
//   - No CLIENT PAUSE, no DEBUG (SLEEP, SET-ACTIVE-EXPIRE), no keyspace notifications, no persistence or
//     restart, no eviction: use Down and Up for an unreachable server, Expire for a lost hold.
//   - Expiry is lazy: an expired key is removed when the next command arrives, not by a background cycle.
//     relock does not depend on the difference (its waiters retry when the holder's TTL runs out).
//   - Timing is the test process's: the server competes with the code under test for CPU, so latencies
//     and throughput say nothing about production.
//   - Scripts run in miniredis's Lua (gopher-lua), not Redis's; relock's scripts are tested on both.
package relocktest

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/faultnet"
	"github.com/relock-go/relock/internal/luasrc"
	"github.com/relock-go/relock/internal/stepclock"
)

// DefaultWatchdogTimeout is the watchdog timeout of the Clients a Server makes when their Options leave it
// zero: the watchdog renews holds every timeout/3, so a hold that Expire ended is found lost within about a
// third of a second, and a failed renewal is retried every timeout/10.
const DefaultWatchdogTimeout = time.Second

// The error replies of the hooks and of what relocktest does not support.
const (
	errRenewal = "ERR relocktest: renewal failed on purpose (Server.FailRenewals)"
	errWait    = "ERR relocktest: WAIT is not supported by relocktest (miniredis has no replicas): WithReplicaAck cannot be tested here"
)

// renewalScripts are the library's scripts with which its watchdog renews holds (and checks leased ones):
// locks' and an Election's (rlock_renew), read holds' (rw_read_renew) and permits' (permit_renew).
// FailRenewals fails their runs.
var renewalScripts = []string{"rlock_renew", "rw_read_renew", "permit_renew"}

// Server is an in-process Redis for relock's Clients, with hooks. Its methods are safe for concurrent
// use, but those that take a testing.TB (through NewServer) must be called from the test's goroutine when
// they fail it.
type Server struct {
	t     testing.TB // nil for a Server from Start
	m     *miniredis.Miniredis
	proxy *faultnet.Proxy

	renewals map[string]bool // SHA1s of the renewal scripts
	failing  atomic.Int64    // renewals left to fail

	clock *stepclock.Clock // keeps miniredis's TTLs on the wall clock

	mu      sync.Mutex
	clients []*relock.Client // closed by Close
	admin   *relock.Client   // Inspect's, connected around the proxy
	closed  bool
}

// Start starts a Server. Close stops it. In tests, NewServer does both.
func Start() (*Server, error) {
	s := &Server{m: miniredis.NewMiniRedis(), renewals: map[string]bool{}}
	for _, name := range renewalScripts {
		if sha, ok := luasrc.Recorded(name); ok {
			s.renewals[sha] = true
		}
	}
	if len(s.renewals) != len(renewalScripts) {
		return nil, fmt.Errorf("relocktest: relock's renewal scripts %v are not all known", renewalScripts)
	}
	s.clock = stepclock.Start(s.m) // keys age on the wall clock, and not during a script
	if err := s.m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("relocktest: starting miniredis: %w", err)
	}
	s.m.Server().SetPreHook(s.hook)
	p, err := faultnet.Start(s.m.Addr())
	if err != nil {
		s.m.Close()
		return nil, fmt.Errorf("relocktest: starting the proxy: %w", err)
	}
	s.proxy = p
	return s, nil
}

// NewServer starts a Server for t and stops it, with every Client it made, when t ends. It fails t if the
// Server cannot start.
func NewServer(t testing.TB) *Server {
	t.Helper()
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	s.t = t
	t.Cleanup(s.Close)
	return s
}

// NewClient starts a Server for t and returns a Client on it, with the Server for its hooks; both end
// when t does. It is NewServer(t).Client(opts).
func NewClient(t testing.TB, opts *relock.Options) (*relock.Client, *Server) {
	t.Helper()
	s := NewServer(t)
	return s.Client(opts), s
}

// Client returns a new relock Client on s (relock.New through s's proxy), closed when s is. opts are
// used as given, except that opts.Redis is pointed at s as a single node, and a zero WatchdogTimeout
// is DefaultWatchdogTimeout. When the Client cannot be made (invalid options, s is Down or closed),
// Client fails the test of a Server from NewServer, and panics for one from Start.
func (s *Server) Client(opts *relock.Options) *relock.Client {
	if s.t != nil {
		s.t.Helper()
	}
	var o relock.Options
	if opts != nil {
		o = *opts
	}
	if o.WatchdogTimeout == 0 {
		o.WatchdogTimeout = DefaultWatchdogTimeout
	}
	o.Redis.InitAddress = []string{s.proxy.Addr}
	o.Redis.ForceSingleClient = true
	c, err := s.track(relock.New(nil, &o))
	if err != nil {
		s.fail("relocktest: Client: %v", err)
	}
	return c
}

// track records c, to be closed by Close.
func (s *Server) track(c *relock.Client, err error) (*relock.Client, error) {
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return nil, fmt.Errorf("%w: the server is closed", relock.ErrClosed)
	}
	s.clients = append(s.clients, c)
	return c, nil
}

// fail fails s's test, or panics.
func (s *Server) fail(format string, args ...any) {
	if s.t != nil {
		s.t.Helper()
		s.t.Fatalf(format, args...)
	}
	panic(fmt.Sprintf(format, args...))
}

// Addr returns the address Clients connect to (through the proxy that Down and Up control), for a client
// of your own: with rueidis, set ForceSingleClient (see the package doc).
func (s *Server) Addr() string { return s.proxy.Addr }

// Close closes the Clients s made, then stops s. It is idempotent. A Server that is Down is brought Up
// first, so that its Clients give up their holds at once rather than waiting out their Close's bound.
//
// For a Server from NewServer, Close (which runs when the test ends) fails the test for each lock still
// held by a goroutine that has returned: a lock taken without relock.WithOwner belongs to the goroutine
// that took it, and nothing but its Client's Close could end such a hold (see relock.WithOwner). Holds of
// goroutines still running (the test's own, when it ends holding a lock) and of WithOwner tokens are
// Close's to give up, as they are in a service.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	clients := s.clients
	if s.admin != nil {
		clients = append(clients, s.admin)
	}
	s.mu.Unlock()
	// The Clients give up what they hold now, rather than waiting Close's bound (relock.DefaultCloseTimeout)
	// for a server that is Down.
	s.proxy.Partition(false)
	if s.t != nil {
		ids := make([]string, len(s.clients))
		for i, c := range s.clients {
			ids[i] = c.ID()
		}
		s.reportAbandoned(ids)
	}
	for i := len(clients) - 1; i >= 0; i-- {
		clients[i].Close()
	}
	_ = s.proxy.Close()
	s.m.Close()
}

// Down makes s unreachable until Up: every connection to it is cut, and new ones are closed as soon as
// they are accepted. The server itself keeps running, and its keys keep expiring: holds of every kind
// (locks, permits, leaderships) that cannot be renewed while it is down are lost once their TTL runs out
// (relock.ErrLockLost, "not renewed before it expired"), and their holders learn it then, from their own
// Client, without Redis. Calls made meanwhile, of every kind (a Semaphore's and a CountDownLatch's too),
// fail at once with the connection's error (EOF), as against a Redis that drops connections, rather than
// hanging until their deadline as behind a silent partition; a RedLock counts such a node as failed.
// Semaphores and latches keep their state: their counters do not expire.
func (s *Server) Down() { s.proxy.Partition(true) }

// Up makes s reachable again after Down. Clients reconnect on their next command, and their
// subscriptions come back on their own. A connection a Client began to dial while s was down may still
// fail once Up has returned, so the first call after Up can return that transient error; a blocking
// wait already under way rides it out, and a call made again reconnects.
func (s *Server) Up() { s.proxy.Partition(false) }

// Expire ends now every hold of the object called name, whatever its kind, and reports whether anything
// was held:
//
//   - a lock (RLock, FairLock, ReadWriteLock's read and write holds) and an Election's leadership (its lock
//     is a FairLock called name): the lock's key is deleted, with a ReadWriteLock's read holds, and what
//     an expiry leaves stays (a FairLock's queue and an Election's candidates, the fencing counter, the
//     record of past leaders). Nothing is published, as with a real expiry: waiters retry when the
//     holder's TTL they last saw runs out (at most the watchdog timeout, or the holder's lease), or at the
//     next release;
//   - a PermitSemaphore: every permit taken is marked expired (its expiry set to now), as a real expiry
//     leaves it: the available permits do not count it until the next acquisition (relock's or a
//     Redisson client's) gives it back, and Client.InspectSemaphore reports it in PermitsExpired until
//     then. Waiters try again at the first permit's expiry they last saw, or at the next release;
//   - a Semaphore or a CountDownLatch: nothing of theirs expires in Redis (a Semaphore's permits have no
//     owner and no expiry), so Expire leaves them as they are, and reports false.
//
// Each holder finds its hold gone at its watchdog's next renewal (or, for a hold with a lease, at its next
// check), within its Client's watchdog timeout/3: its HoldContext (Permit.Context,
// Election.LeadershipContext) ends then with a cause matching relock.ErrLockLost, and its Unlock (Release,
// Resign) returns relock.ErrNotHeld.
//
// Expire is an instant delete, not a TTL running out: on Redis, a hold expires because its holder stopped
// renewing it (it stalled, or lost Redis), whereas the holder here goes on working, unaware, until its
// next renewal, while another owner can take the lock at once. Both then act as holders for up to the
// watchdog timeout/3. That is the situation fencing is for: a test should assert that the second holder
// gets a larger fencing token (a larger term, for an Election) and that the first one's writes carrying
// the old token are refused, or that the first one stops when its hold context ends; not that the two
// never overlap.
func (s *Server) Expire(name string) bool {
	base := "{" + name + "}" // Redisson's rule, as relock's names: the name itself when it holds a "{"
	if strings.Contains(name, "{") {
		base = name
	}
	s.clock.Advance() // what has expired by now is removed
	removed := false
	if s.m.Type(name) == "hash" { // a lock; a semaphore's or a latch's counter is a string
		removed = s.m.Del(name)
	}
	for _, key := range s.m.Keys() {
		if strings.HasPrefix(key, base+":") && strings.Contains(key, ":rwlock_timeout:") {
			removed = s.m.Del(key) || removed
		}
	}
	return s.expirePermits(base+":timeout") || removed
}

// expirePermits marks every permit taken in the PermitSemaphore permits key as expired, as the watchdog's
// renewals and the acquisitions see it (Redis's clock, which is s's clock), and reports whether one was
// taken and not expired yet.
func (s *Server) expirePermits(key string) bool {
	if s.m.Type(key) != "zset" {
		return false
	}
	taken, err := s.m.SortedSet(key)
	if err != nil {
		return false
	}
	// A permit whose expiry is not after the time a script reads (TIME) has expired. The clock was moved to
	// the wall clock's time just before (Advance), and never goes back: every script from now on reads a
	// time after this one.
	expired := float64(time.Now().UnixMilli() - 1)
	held := false
	for id, expiry := range taken {
		if expiry > expired {
			held = true
			_, _ = s.m.ZAdd(key, expired, id)
		}
	}
	return held
}

// FailRenewals makes the next n runs of the watchdog's renewal scripts fail with an error reply, on every
// Client of s (n <= 0 stops failing them). The renewals are those of every kind that has holds: locks
// (RLock, FairLock, ReadWriteLock's read and write holds), a PermitSemaphore's permits and an Election's
// leadership (its FairLock). One run renews a batch of holds (those of one kind, due at about the same
// time), and also serves a hold with a lease's check. A renewal that fails is not a loss: the watchdog
// retries it every watchdog timeout/10 until the hold would expire, so a few failures are ridden out
// (renewals resume, HoldContext does not end), and more than fit before the hold's TTL runs out lose it
// (HoldContext, Permit.Context or Election.LeadershipContext ends with a cause matching
// relock.ErrLockLost, "not renewed before it expired").
//
// A Semaphore and a CountDownLatch have nothing renewed: FailRenewals changes nothing for them. Nor does
// it fail the watchdog's keep-alives of waiters queued in a FairLock (or an Election) or for a
// ReadWriteLock's write lock: only holds' renewals.
func (s *Server) FailRenewals(n int) { s.failing.Store(int64(max(n, 0))) }

// Inspect returns the state of the lock called name: its kind, holders (owner, hold count, TTL), queue and
// fencing token (relock.Client.Inspect, read directly from the server, even while it is Down). It fails the
// test of a Server from NewServer on error (a key that is not a lock), and panics for one from Start.
func (s *Server) Inspect(name string) relock.LockState {
	if s.t != nil {
		s.t.Helper()
	}
	admin, err := s.adminClient()
	if err != nil {
		s.fail("relocktest: Inspect: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := admin.Inspect(ctx, name)
	if err != nil {
		s.fail("relocktest: Inspect %q: %v", name, err)
	}
	return st
}

// InspectSemaphore returns the state of the Semaphore, CountDownLatch or PermitSemaphore called name: its
// counter, and a PermitSemaphore's permits taken with their expiries (relock.Client.InspectSemaphore, read
// directly from the server, even while it is Down). It fails the test of a Server from NewServer on error
// (keys that are not a semaphore's), and panics for one from Start.
func (s *Server) InspectSemaphore(name string) relock.SemaphoreState {
	if s.t != nil {
		s.t.Helper()
	}
	admin, err := s.adminClient()
	if err != nil {
		s.fail("relocktest: InspectSemaphore: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := admin.InspectSemaphore(ctx, name)
	if err != nil {
		s.fail("relocktest: InspectSemaphore %q: %v", name, err)
	}
	return st
}

// adminClient returns the Client Inspect and InspectSemaphore use, connected to miniredis directly (not through the proxy).
func (s *Server) adminClient() (*relock.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, relock.ErrClosed
	}
	if s.admin == nil {
		o := relock.Options{WatchdogTimeout: DefaultWatchdogTimeout}
		o.Redis.ForceSingleClient = true
		c, err := relock.New([]string{s.m.Addr()}, &o)
		if err != nil {
			return nil, err
		}
		s.admin = c
	}
	return s.admin, nil
}

// hook runs before every command miniredis serves (those scripts call too). It moves the clock, fails
// renewals while FailRenewals asks for it, and refuses what relocktest does not support. Beyond the
// clock's, it must not call miniredis's own methods: miniredis may hold its lock.
func (s *Server) hook(p *server.Peer, cmd string, args ...string) bool {
	s.clock.Command()
	switch cmd {
	case "WAIT":
		p.WriteError(errWait)
		return true
	case "EVALSHA", "EVAL":
		if len(args) == 0 || s.failing.Load() <= 0 {
			return false
		}
		sha := strings.ToLower(args[0])
		if cmd == "EVAL" {
			sum := sha1.Sum([]byte(args[0]))
			sha = hex.EncodeToString(sum[:])
		}
		if !s.renewals[sha] {
			return false
		}
		for n := s.failing.Load(); n > 0; n = s.failing.Load() {
			if s.failing.CompareAndSwap(n, n-1) {
				p.WriteError(errRenewal)
				return true
			}
		}
	}
	return false
}
