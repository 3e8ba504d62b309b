package main

import (
	"context"
	"errors"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/relock-go/relock"
)

// locker is what the scenarios need of a lock library: a blocking acquisition (each library waits its own
// way) that returns the release.
type locker interface {
	name() string
	lock(ctx context.Context, key string) (unlock func() error, err error)
	close()
}

// relockLocker is relock's RLock, held by the calling goroutine.
type relockLocker struct {
	c *relock.Client
}

func newRelock(addr string, opts *relock.Options) (*relockLocker, error) {
	c, err := relock.New([]string{addr}, opts)
	return &relockLocker{c: c}, err
}

func (r *relockLocker) name() string { return "relock" }

func (r *relockLocker) lock(ctx context.Context, key string) (func() error, error) {
	l := r.c.Lock(key)
	if err := l.Lock(ctx); err != nil {
		return nil, err
	}
	return func() error { return l.Unlock(context.WithoutCancel(ctx)) }, nil
}

func (r *relockLocker) close() { r.c.Close() }

// rueidisLocker is rueidis's own lock (rueidislock), with its defaults: waiters are woken by client-side
// caching invalidations, and a lock is a majority of 3 keys.
type rueidisLocker struct {
	l rueidislock.Locker
}

func newRueidisLock(addr string) (*rueidisLocker, error) {
	l, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption: rueidis.ClientOption{InitAddress: []string{addr}},
	})
	return &rueidisLocker{l: l}, err
}

func (r *rueidisLocker) name() string { return "rueidislock" }

func (r *rueidisLocker) lock(ctx context.Context, key string) (func() error, error) {
	_, cancel, err := r.l.WithContext(ctx, key)
	if err != nil {
		return nil, err
	}
	return func() error { cancel(); return nil }, nil
}

func (r *rueidisLocker) close() { r.l.Close() }

// redsyncLocker is go-redsync with a go-redis v9 pool and its default retry policy (up to 32 tries, a
// random delay of 50–250 ms between them).
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
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return func() error { _, err := m.UnlockContext(context.WithoutCancel(ctx)); return err }, nil
}

func (r *redsyncLocker) close() {
	for _, c := range r.clients {
		c.Close()
	}
}

// redislockLocker is bsm/redislock on go-redis v9, retrying every 10 ms (its linear backoff) while waiting;
// it has no pub/sub wake-up.
type redislockLocker struct {
	rdb *goredislib.Client
	c   *redislock.Client
}

func newRedislock(addr string) *redislockLocker {
	rdb := goredislib.NewClient(&goredislib.Options{Addr: addr})
	return &redislockLocker{rdb: rdb, c: redislock.New(rdb)}
}

func (r *redislockLocker) name() string { return "bsm/redislock" }

func (r *redislockLocker) lock(ctx context.Context, key string) (func() error, error) {
	for {
		l, err := r.c.Obtain(ctx, key, 30*time.Second, &redislock.Options{RetryStrategy: redislock.LinearBackoff(10 * time.Millisecond)})
		if errors.Is(err, redislock.ErrNotObtained) && ctx.Err() == nil {
			continue // the retry strategy gave up (it retries until ctx ends): keep waiting
		}
		if err != nil {
			return nil, err
		}
		return func() error { return l.Release(context.WithoutCancel(ctx)) }, nil
	}
}

func (r *redislockLocker) close() { r.rdb.Close() }
