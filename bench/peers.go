package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/valkey-io/valkey-go"

	"github.com/relock-go/relock"
	relockgoredis "github.com/relock-go/relock/goredis"
	relockvalkey "github.com/relock-go/relock/valkey"
)

// locker is what the scenarios need of a lock library: a blocking acquisition (each library waits its own
// way) that returns the release.
type locker interface {
	name() string
	lock(ctx context.Context, key string) (unlock func() error, err error)
	close()
}

// relockLocker is relock's RLock, held by the calling goroutine: on rueidis (relock.New), or on another
// Redis client (label says which; done closes that client after relock's).
type relockLocker struct {
	c     *relock.Client
	label string
	done  func()
}

func newRelock(addr string, opts *relock.Options) (*relockLocker, error) {
	c, err := relock.New([]string{addr}, opts)
	return &relockLocker{c: c}, err
}

// goRedisName and valkeyName are relock on go-redis and on valkey-go.
const (
	goRedisName = "relock on go-redis"
	valkeyName  = "relock on valkey-go"
)

// newRelockOnGoRedis is relock on a go-redis client in the configuration relockgoredis recommends
// (ContextTimeoutEnabled: a call ends at its deadline without a goroutine of its own).
func newRelockOnGoRedis(addr string) *relockLocker {
	rdb := goredislib.NewClient(&goredislib.Options{Addr: addr, ContextTimeoutEnabled: true})
	c, err := relockgoredis.New(rdb, nil)
	if err != nil {
		log.Fatal(err)
	}
	return &relockLocker{c: c, label: goRedisName, done: func() { rdb.Close() }}
}

// newRelockOnValkey is relock on a valkey-go client configured as relock.New configures its rueidis one
// (AlwaysPipelining, DisableRetry; see relock.Wrap).
func newRelockOnValkey(addr string) *relockLocker {
	vk, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true, AlwaysPipelining: true, DisableRetry: true})
	if err != nil {
		log.Fatal(err)
	}
	c, err := relockvalkey.New(vk, nil)
	if err != nil {
		log.Fatal(err)
	}
	return &relockLocker{c: c, label: valkeyName, done: vk.Close}
}

// isRelock reports whether a contender is relock, on whichever client: not a peer.
func isRelock(name string) bool { return name == "relock" || name == goRedisName || name == valkeyName }

func (r *relockLocker) name() string {
	if r.label != "" {
		return r.label
	}
	return "relock"
}

// owners numbers the owner tokens relockLocker takes its locks with.
var owners atomic.Int64

func (r *relockLocker) lock(ctx context.Context, key string) (func() error, error) {
	// An owner token of its own per acquisition: bounded takes and releases the lock on goroutines of its
	// own, and by default relock's owner is the calling goroutine.
	ctx = relock.WithOwner(ctx, "bench-"+strconv.FormatInt(owners.Add(1), 10))
	l := r.c.Lock(key)
	if err := l.Lock(ctx); err != nil {
		return nil, err
	}
	return func() error { return l.Unlock(context.WithoutCancel(ctx)) }, nil
}

func (r *relockLocker) close() {
	r.c.Close()
	if r.done != nil {
		r.done()
	}
}

// rueidisLocker is rueidis's own lock (rueidislock): waiters are woken by client-side caching
// invalidations. With its defaults a lock is a majority of 3 keys (KeyMajority 2); its best documented
// configuration for one Redis is the one its README shows (rueidislock/README.md, and the benchmark there):
// KeyMajority 1 ("if you have only one Redis instance") and NoLoopTracking ("better performance if all your
// Redis are >= 7.0.5").
type rueidisLocker struct {
	l     rueidislock.Locker
	label string
}

func newRueidisLock(addr string, best bool) (*rueidisLocker, error) {
	opt := rueidislock.LockerOption{ClientOption: rueidis.ClientOption{InitAddress: []string{addr}}}
	label := "rueidislock"
	if best {
		opt.KeyMajority, opt.NoLoopTracking, label = 1, true, "rueidislock best"
	}
	l, err := rueidislock.NewLocker(opt)
	return &rueidisLocker{l: l, label: label}, err
}

func (r *rueidisLocker) name() string { return r.label }

func (r *rueidisLocker) lock(ctx context.Context, key string) (func() error, error) {
	_, cancel, err := r.l.WithContext(ctx, key)
	if err != nil {
		return nil, err
	}
	return func() error { cancel(); return nil }, nil
}

func (r *rueidisLocker) close() { r.l.Close() }

// redsyncLocker is go-redsync with a go-redis v9 pool and its default retry policy (up to 32 tries, a
// random delay of 50–250 ms between them): its README and reference document no other configuration for
// speed, so its defaults are its best documented one. LockContext says "you may retry to acquire the lock by
// calling this method again" when it fails: a waiter does so until its context ends.
type redsyncLocker struct {
	clients []*goredislib.Client
	rs      *redsync.Redsync
}

func newRedsync(addrs ...string) *redsyncLocker {
	r := &redsyncLocker{}
	var pools []redsyncredis.Pool
	for _, a := range addrs {
		c := goredislib.NewClient(&goredislib.Options{Addr: a})
		r.clients = append(r.clients, c)
		pools = append(pools, goredis.NewPool(c))
	}
	r.rs = redsync.New(pools...)
	return r
}

func (r *redsyncLocker) name() string { return "redsync" }

func (r *redsyncLocker) lock(ctx context.Context, key string) (func() error, error) {
	m := r.rs.NewMutex(key)
	for {
		err := m.LockContext(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil, err
		}
	}
	return func() error { _, err := m.UnlockContext(context.WithoutCancel(ctx)); return err }, nil
}

func (r *redsyncLocker) close() {
	for _, c := range r.clients {
		c.Close()
	}
}

// redislockLocker is bsm/redislock on go-redis v9; it has no pub/sub wake-up. With its defaults Obtain
// tries once (NoRetry) and a waiter calls it again at once, as the redislock side of rueidislock's README
// benchmark does. Its best documented configuration is the backoff its reference recommends:
// ExponentialBackoff, whose doc says "the recommended minimum value is not less than 16ms"; we take 16 ms
// and cap it at 64 ms (the docs give no maximum).
type redislockLocker struct {
	rdb   *goredislib.Client
	c     *redislock.Client
	best  bool
	label string
}

func newRedislock(addr string, best bool) *redislockLocker {
	rdb := goredislib.NewClient(&goredislib.Options{Addr: addr})
	label := "bsm/redislock"
	if best {
		label = "bsm/redislock best"
	}
	return &redislockLocker{rdb: rdb, c: redislock.New(rdb), best: best, label: label}
}

func (r *redislockLocker) name() string { return r.label }

func (r *redislockLocker) lock(ctx context.Context, key string) (func() error, error) {
	for {
		var opt *redislock.Options
		if r.best {
			opt = &redislock.Options{RetryStrategy: redislock.ExponentialBackoff(16*time.Millisecond, 64*time.Millisecond)}
		}
		l, err := r.c.Obtain(ctx, key, 30*time.Second, opt)
		if errors.Is(err, redislock.ErrNotObtained) && ctx.Err() == nil {
			continue // not obtained (defaults: one try; best: the retry strategy gave up): keep waiting
		}
		if err != nil {
			return nil, err
		}
		return func() error { return l.Release(context.WithoutCancel(ctx)) }, nil
	}
}

func (r *redislockLocker) close() { r.rdb.Close() }

// errHung is what a bounded call returns when the library's call did not complete within its bound.
var errHung = errors.New("did not return within its bound")

// bound is how long a lock or unlock call may take before it counts as hung, unless its context ends sooner;
// grace is how long a library gets, after its context is cancelled, to return before it is abandoned.
var bound, grace = 2 * time.Second, time.Second

// bounded wraps a library so that no call of it can block a run: each Lock runs in a goroutine, under a
// context with a timeout of bound (or, if the caller's context has a deadline, that deadline); a call not
// done by then is counted as hung and the caller gets errHung. A library that returns once its context has
// ended is waited on for grace; one that ignores its context is abandoned (still running: if it ever gets
// the lock it is released). Unlock calls run in a goroutine bounded alike. The context a lock was taken with
// lives until its Unlock (rueidislock releases a lock when that context ends; every hold here is far
// shorter than bound). Every library, relock too, and the floors run this way: the same goroutine hops, and
// the same context with a deadline, which rueidis-based code (relock, rueidislock, the floors) honours and
// go-redis-based code (redsync, bsm/redislock) ignores for its network I/O by default.
type bounded struct {
	locker
	hung      atomic.Int64 // calls that did not complete within their bound
	abandoned atomic.Int64 // of those, the ones that had still not returned grace after their context ended
}

type lockResult struct {
	unlock func() error
	err    error
}

func (b *bounded) lock(ctx context.Context, key string) (func() error, error) {
	lctx, cancel := context.WithTimeout(ctx, bound)
	if _, ok := ctx.Deadline(); ok {
		lctx, cancel = context.WithCancel(ctx) // the caller's deadline is the bound (handoff: the run's end + 1 s)
	}
	ch := make(chan lockResult, 1)
	go func() {
		u, err := b.locker.lock(lctx, key)
		ch <- lockResult{u, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			cancel()
			if errors.Is(lctx.Err(), context.DeadlineExceeded) {
				b.hung.Add(1) // the library returned at the deadline: it waited that long
				return nil, fmt.Errorf("%s: lock of %q: %w (%v)", b.name(), key, errHung, r.err)
			}
			return nil, r.err
		}
		return func() error {
			defer cancel()
			return b.call("unlock", r.unlock)
		}, nil
	case <-lctx.Done():
	}
	b.hung.Add(1)
	cancel()
	select {
	case r := <-ch:
		if r.err == nil {
			_ = b.call("unlock", r.unlock)
		}
	case <-time.After(grace):
		b.abandoned.Add(1)
		go func() {
			if r := <-ch; r.err == nil {
				_ = r.unlock()
			}
		}()
	}
	return nil, fmt.Errorf("%s: lock of %q: %w (%v)", b.name(), key, errHung, lctx.Err())
}

// call runs fn (an unlock) bounded by bound.
func (b *bounded) call(what string, fn func() error) error {
	ch := make(chan error, 1)
	go func() { ch <- fn() }()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case err := <-ch:
		return err
	case <-timer.C:
		b.hung.Add(1)
		b.abandoned.Add(1)
		return fmt.Errorf("%s: %s: %w (%v)", b.name(), what, errHung, bound)
	}
}

// hungCount is the hung calls of the bounded lockers in ls, as a table cell.
func hungCount(ls ...locker) string {
	var hung, abandoned int64
	for _, l := range ls {
		if b, ok := l.(*bounded); ok {
			hung += b.hung.Load()
			abandoned += b.abandoned.Load()
		}
	}
	if abandoned > 0 {
		return fmt.Sprintf("%d (%d ignored cancellation)", hung, abandoned)
	}
	return fmt.Sprint(hung)
}

var hungLogged atomic.Int64

// tolerate reports whether err is a hung call (counted where it happened, and logged here), which a run
// goes on from; any other error ends the run.
func tolerate(err error) bool {
	if errors.Is(err, errHung) {
		if hungLogged.Add(1) <= 20 {
			log.Printf("hung: %v", err)
		}
		return true
	}
	return false
}
