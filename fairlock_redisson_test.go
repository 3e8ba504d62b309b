package relock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/luasrc"
	"github.com/relock-go/relock/internal/redistest"
)

// The tests' stand-in for a Java service using Redisson's RedissonFairLock on the lock "fair": Go and the
// Lua of testdata/redisson, written from the protocol's description (not from Redisson's source). Like a
// Java client, it takes "now" from its own clock, scores waiters with its thread wait time
// (Config.fairLockWaitTimeout), and waits for its own channel or the time its acquire script returns.
type redissonFair struct {
	rdb   rueidis.Client
	id    string // the Java client's id, the first part of its owners
	wait  time.Duration
	lease time.Duration // every hold's lease: holds in these tests are short, and nothing renews them
}

var (
	redissonAcquire       = redissonScript("fair_acquire")
	redissonUnlock        = redissonScript("fair_unlock")
	redissonAcquireFailed = redissonScript("fair_acquire_failed")
)

// mixedFairLock starts a server with a relock Client (opts) and a Redisson fair-lock client (wait) on it,
// and a run of parties on the lock, for up to 30 s.
func mixedFairLock(t *testing.T, opts *relock.Options, wait time.Duration) (rueidis.Client, *relock.Client, *redissonFair, *fairRun) {
	srv := redistest.Start(t)
	rdb := rawClient(t, srv)
	return rdb, newClient(t, srv, opts), newRedissonFair(rdb, wait), newFairRun(t, rdb, 30*time.Second)
}

// redissonSource returns testdata/redisson/<name>.lua, with its includes (testdata/redisson/lib).
func redissonSource(name string) string {
	src, err := luasrc.Load(os.DirFS(filepath.Join("testdata", "redisson")), name)
	if err != nil {
		panic(err)
	}
	return src
}

// redissonScript is the script testdata/redisson/<name>.lua.
func redissonScript(name string) *rueidis.Lua { return rueidis.NewLuaScript(redissonSource(name)) }

const (
	fairLockKey   = "fair"
	fairAlive     = "relock_lock_alive:{fair}"
	fairChannel   = "redisson_lock__channel:{fair}"
	redissonWait  = 5 * time.Minute // Redisson's default fairLockWaitTimeout
	redissonLease = 30 * time.Second
)

func newRedissonFair(rdb rueidis.Client, wait time.Duration) *redissonFair {
	return &redissonFair{rdb: rdb, id: uuid.NewString(), wait: wait, lease: redissonLease}
}

func millisArg(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

func nowArg() string { return strconv.FormatInt(time.Now().UnixMilli(), 10) }

func (j *redissonFair) owner(thread string) string { return j.id + ":" + thread }

// attempt runs the acquire script once: it reports whether owner holds the lock, and otherwise how long
// it may sleep (negative: until woken).
func (j *redissonFair) attempt(ctx context.Context, owner string) (bool, time.Duration, error) {
	res := redissonAcquire.Exec(ctx, j.rdb, []string{fairLockKey, fairQueue, fairDeadlines},
		[]string{millisArg(j.lease), owner, millisArg(j.wait), nowArg()})
	if rueidis.IsRedisNil(res.Error()) {
		return true, 0, nil
	}
	ttl, err := res.AsInt64()
	return false, time.Duration(ttl) * time.Millisecond, err
}

// lock is RLock.lock() of a Java thread: try; subscribe to the thread's own channel; then try again,
// sleeping between attempts until the channel wakes it or the time the last attempt returned passes.
// When ctx ends, the thread gives up (acquireFailed) and returns ctx's error.
func (j *redissonFair) lock(ctx context.Context, thread string) error {
	owner := j.owner(thread)
	if ok, _, err := j.attempt(ctx, owner); ok || err != nil {
		return err
	}
	conn, _ := j.rdb.Dedicate()
	defer conn.Close()
	woken := make(chan struct{}, 1)
	conn.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: func(rueidis.PubSubMessage) {
		select {
		case woken <- struct{}{}:
		default:
		}
	}})
	if err := conn.Do(ctx, conn.B().Subscribe().Channel(fairChannel+":"+owner).Build()).Error(); err != nil {
		return err
	}
	for {
		ok, ttl, err := j.attempt(ctx, owner)
		if ok || err != nil {
			return err
		}
		var timeout <-chan time.Time
		if ttl >= 0 {
			timeout = time.After(ttl)
		}
		select {
		case <-woken:
		case <-timeout:
		case <-ctx.Done():
			failed := redissonAcquireFailed.Exec(context.Background(), j.rdb, []string{fairQueue, fairDeadlines},
				[]string{owner, millisArg(j.wait)})
			if err := failed.Error(); err != nil && !rueidis.IsRedisNil(err) {
				return err
			}
			return ctx.Err()
		}
	}
}

// unlock releases one hold of thread's, waking the head of the queue at the last one.
func (j *redissonFair) unlock(ctx context.Context, thread string) error {
	res := redissonUnlock.Exec(ctx, j.rdb, []string{fairLockKey, fairQueue, fairDeadlines, fairChannel},
		[]string{millisArg(j.lease), j.owner(thread), nowArg()})
	if rueidis.IsRedisNil(res.Error()) {
		return fmt.Errorf("%s does not hold the lock", thread)
	}
	return res.Error()
}

// fairParty is one owner of the lock "fair": a relock owner (R) or a Java thread (J).
type fairParty interface {
	lock(ctx context.Context) error
	unlock(ctx context.Context) error
	owner() string
}

type relockParty struct {
	c     *relock.Client
	token string
}

func (p relockParty) lock(ctx context.Context) error {
	return p.c.FairLock(fairLockKey).Lock(relock.WithOwner(ctx, p.token))
}

func (p relockParty) unlock(ctx context.Context) error {
	return p.c.FairLock(fairLockKey).Unlock(relock.WithOwner(ctx, p.token))
}

func (p relockParty) owner() string { return p.c.ID() + ":" + p.token }

type javaParty struct {
	j      *redissonFair
	thread string
}

func (p javaParty) lock(ctx context.Context) error   { return p.j.lock(ctx, p.thread) }
func (p javaParty) unlock(ctx context.Context) error { return p.j.unlock(ctx, p.thread) }
func (p javaParty) owner() string                    { return p.j.owner(p.thread) }

// fairRun runs parties' lock-increment-unlock loops on their own goroutines and records the owners in
// the order they got the lock. The increment of the counter key is a read, a pause and a write: two
// owners inside at once would lose one.
type fairRun struct {
	t      *testing.T
	rdb    rueidis.Client
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	order  []string
	at     []time.Time
}

func newFairRun(t *testing.T, rdb rueidis.Client, timeout time.Duration) *fairRun {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return &fairRun{t: t, rdb: rdb, ctx: ctx, cancel: cancel}
}

// start runs rounds acquisitions of p, each holding the lock for hold.
func (r *fairRun) start(p fairParty, rounds int, hold time.Duration) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for range rounds {
			if err := p.lock(r.ctx); err != nil {
				r.t.Errorf("%s: %v", p.owner(), err)
				return
			}
			r.mu.Lock()
			r.order, r.at = append(r.order, p.owner()), append(r.at, time.Now())
			r.mu.Unlock()
			n, _ := r.rdb.Do(r.ctx, r.rdb.B().Get().Key("counter").Build()).AsInt64()
			time.Sleep(hold)
			if err := r.rdb.Do(r.ctx, r.rdb.B().Set().Key("counter").Value(strconv.FormatInt(n+1, 10)).Build()).Error(); err != nil {
				r.t.Error(err)
			}
			if err := p.unlock(context.WithoutCancel(r.ctx)); err != nil {
				r.t.Errorf("%s: %v", p.owner(), err)
				return
			}
		}
	}()
}

// wait waits for every loop, for up to d; past that it ends them and fails the test.
func (r *fairRun) wait(d time.Duration) {
	r.t.Helper()
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
		r.t.Errorf("not every owner got the lock within %v: queue %v, got it: %v", d, queue(r.t, r.rdb), r.acquired())
		r.cancel()
		<-done
		r.t.FailNow()
	}
}

func (r *fairRun) acquired() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.order)
}

func (r *fairRun) counter() int64 {
	n, _ := do(r.t, r.rdb, "GET", "counter").AsInt64()
	return n
}

func owners(ps []fairParty) []string {
	var o []string
	for _, p := range ps {
		o = append(o, p.owner())
	}
	return o
}

// Go and Java waiters on one fair lock get it in the order they queued, whichever side holds it and
// however they alternate, with Redisson's default wait time and with another configured on both sides;
// then all of them contend in loops, and every one of them gets its turns.
func TestFairLockSharedWithRedissonKeepsOneOrder(t *testing.T) {
	t.Parallel()
	for _, wait := range []time.Duration{0, 2 * time.Second} {
		for i, order := range []string{"RRJJ", "JRJR", "RJRJ", "JJRR"} {
			name := order + "/default-wait"
			if wait > 0 {
				name = order + "/wait-" + wait.String()
			}
			t.Run(name, func(t *testing.T) {
				srv := redistest.Start(t)
				rdb := rawClient(t, srv)
				opts := &relock.Options{FairLockWaitTimeout: wait}
				if wait > 0 { // and a watchdog timeout shorter than the wait: one wait is more than a waiter's life
					opts.WatchdogTimeout = time.Second
				}
				clients := []*relock.Client{newClient(t, srv, opts), newClient(t, srv, opts)}
				javaWait := wait
				if javaWait == 0 {
					javaWait = redissonWait
				}
				java := newRedissonFair(rdb, javaWait)
				party := func(side byte, token string, n int) fairParty {
					if side == 'R' {
						return relockParty{clients[n%2], token}
					}
					return javaParty{java, token}
				}
				holder := party("JR"[i%2], "holder", 0)
				run := newFairRun(t, rdb, time.Minute)
				if err := holder.lock(run.ctx); err != nil {
					t.Fatal(err)
				}
				var waiters []fairParty
				for k := range len(order) {
					w := party(order[k], "w"+strconv.Itoa(k), k)
					waiters = append(waiters, w)
					run.start(w, 1, time.Millisecond)
					waitQueueLen(t, rdb, k+1)
				}
				if err := holder.unlock(run.ctx); err != nil {
					t.Fatal(err)
				}
				run.wait(20 * time.Second)
				if got, want := run.acquired(), owners(waiters); !slices.Equal(got, want) {
					t.Fatalf("acquisition order %v, want the queue's %v", got, want)
				}
				if n := run.counter(); n != int64(len(order)) {
					t.Fatalf("counter = %d after %d increments under the lock", n, len(order))
				}

				const rounds = 5
				for _, w := range waiters {
					run.start(w, rounds, time.Millisecond)
				}
				run.wait(30 * time.Second)
				if n, want := run.counter(), int64(len(order)*(1+rounds)); n != want {
					t.Fatalf("counter = %d after %d increments under the lock", n, want)
				}
				if keys, _ := do(t, rdb, "KEYS", "*").AsStrSlice(); !slices.Equal(keys, []string{"counter"}) {
					t.Fatalf("keys left when everyone is done: %v", keys)
				}
			})
		}
	}
}

// zscore returns owner's score in the sorted set key, and whether it has one.
func zscore(t testing.TB, rdb rueidis.Client, key, owner string) (float64, bool) {
	t.Helper()
	s, err := do(t, rdb, "ZSCORE", key, owner).AsFloat64()
	if rueidis.IsRedisNil(err) {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return s, true
}

// A relock waiter that a Redisson client drops from the head of the queue, or that is removed by hand,
// notices within one refresh period (watchdog timeout/3): it goes back to the head, and takes the lock if
// it is free.
func TestFairLockWaiterDroppedFromQueueComesBack(t *testing.T) {
	t.Parallel()
	const refreshPeriod = time.Second / 3 // fastWatchdog's

	t.Run("by-redisson", func(t *testing.T) {
		srv := redistest.Start(t)
		rdb := rawClient(t, srv)
		c := newClient(t, srv, fastWatchdog)
		java := newRedissonFair(rdb, redissonWait)
		ctx := ctxTimeout(t, 30*time.Second)
		if err := java.lock(ctx, "holder"); err != nil {
			t.Fatal(err)
		}
		waiter := relockParty{c, "waiter"}
		got := make(chan time.Time, 1)
		go func() {
			if err := waiter.lock(ctx); err != nil {
				t.Error(err)
				return
			}
			got <- time.Now()
			_ = waiter.unlock(ctx)
		}()
		waitQueueLen(t, rdb, 1)
		time.Sleep(100 * time.Millisecond)
		// The waiter's score has run out (as Java acquisitions would have it, each subtracting the wait
		// time) when the holder unlocks: Redisson's unlock drops it from the head, and wakes nobody.
		now := time.Now().UnixMilli()
		err := rdb.Dedicated(func(c rueidis.DedicatedClient) error {
			resps := c.DoMulti(ctx, c.B().Multi().Build(),
				c.B().Zadd().Key(fairDeadlines).ScoreMember().ScoreMember(float64(now-1), waiter.owner()).Build(),
				c.B().Evalsha().Sha1(redissonUnlockSHA(t, rdb)).Numkeys(4).Key(fairLockKey, fairQueue, fairDeadlines, fairChannel).
					Arg(millisArg(redissonLease), java.owner("holder"), strconv.FormatInt(now, 10)).Build(),
				c.B().Exec().Build())
			return resps[3].Error()
		})
		unlocked := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		if q := queue(t, rdb); len(q) != 0 {
			t.Fatalf("Redisson's unlock did not drop the waiter: queue %v", q)
		}
		select {
		case at := <-got:
			if d := at.Sub(unlocked); d > refreshPeriod+300*time.Millisecond {
				t.Fatalf("the dropped waiter took the free lock %v after it was dropped; one refresh period is %v", d, refreshPeriod)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("the dropped waiter never took the free lock: queue %v", queue(t, rdb))
		}
	})

	t.Run("by-hand", func(t *testing.T) {
		rdb, c, java, run := mixedFairLock(t, fastWatchdog, redissonWait)
		holder := relockParty{c, "holder"}
		if err := holder.lock(run.ctx); err != nil {
			t.Fatal(err)
		}
		waiter := relockParty{c, "waiter"}
		run.start(waiter, 1, 0)
		waitQueueLen(t, rdb, 1)

		// Its score is deleted: Redisson's scripts would fail on it. It has one again within a period.
		do(t, rdb, "ZREM", fairDeadlines, waiter.owner())
		eventually(t, refreshPeriod+300*time.Millisecond, "the waiter has a score again", func() bool {
			_, ok := zscore(t, rdb, fairDeadlines, waiter.owner())
			return ok && slices.Equal(queue(t, rdb), []string{waiter.owner()})
		}, func() string { return fmt.Sprint(queue(t, rdb)) })

		// A Java thread queues behind it; then the waiter's entries are deleted, and it comes back ahead.
		java1 := javaParty{java, "java"}
		run.start(java1, 1, 0)
		waitQueueLen(t, rdb, 2)
		if err := rdb.Dedicated(func(c rueidis.DedicatedClient) error {
			resps := c.DoMulti(run.ctx, c.B().Multi().Build(),
				c.B().Lrem().Key(fairQueue).Count(0).Element(waiter.owner()).Build(),
				c.B().Zrem().Key(fairDeadlines).Member(waiter.owner()).Build(),
				c.B().Exec().Build())
			return resps[3].Error()
		}); err != nil {
			t.Fatal(err)
		}
		eventually(t, refreshPeriod+300*time.Millisecond, "the waiter is back at the head", func() bool {
			_, ok := zscore(t, rdb, fairDeadlines, waiter.owner())
			return ok && slices.Equal(queue(t, rdb), []string{waiter.owner(), java1.owner()})
		}, func() string { return fmt.Sprint(queue(t, rdb)) })

		if err := holder.unlock(run.ctx); err != nil {
			t.Fatal(err)
		}
		run.wait(10 * time.Second)
		if got, want := run.acquired(), []string{waiter.owner(), java1.owner()}; !slices.Equal(got, want) {
			t.Fatalf("acquisition order %v, want %v", got, want)
		}
	})
}

// redissonUnlockSHA loads the Redisson unlock script into rdb's server and returns its SHA1.
func redissonUnlockSHA(t testing.TB, rdb rueidis.Client) string {
	t.Helper()
	sha, err := do(t, rdb, "SCRIPT", "LOAD", redissonSource("fair_unlock")).ToString()
	if err != nil {
		t.Fatal(err)
	}
	return sha
}

// watchQueued polls, until the returned stop is called, whether p is queued or holds the lock; stop
// reports whether p was ever seen doing neither before run recorded its acquisition.
func watchQueued(t *testing.T, rdb rueidis.Client, run *fairRun, p fairParty) (stop func() bool) {
	done, missing := make(chan struct{}), make(chan bool, 1)
	go func() {
		gone := false
		for {
			select {
			case <-done:
				missing <- gone
				return
			case <-time.After(2 * time.Millisecond):
			}
			var resps []rueidis.RedisResult
			_ = rdb.Dedicated(func(c rueidis.DedicatedClient) error {
				resps = c.DoMulti(context.Background(), c.B().Multi().Build(),
					c.B().Lpos().Key(fairQueue).Element(p.owner()).Build(),
					c.B().Hexists().Key(fairLockKey).Field(p.owner()).Build(),
					c.B().Exec().Build())
				return nil
			})
			both, err := resps[3].ToArray()
			if err != nil || len(both) != 2 {
				continue
			}
			_, notQueued := both[0].AsInt64()
			held, _ := both[1].AsInt64()
			if rueidis.IsRedisNil(notQueued) && held == 0 && !slices.Contains(run.acquired(), p.owner()) {
				gone = true
			}
		}
	}()
	return func() bool {
		close(done)
		return <-missing
	}
}

// A relock waiter is not dropped for waiting longer than a short Redisson wait time (300 ms, 1 s watchdog
// timeout): not when the Java waiters ahead of it take the lock one after another, each acquisition
// subtracting the wait time from its score, and not while it waits at the head, a Java thread behind it
// trying again and again. It keeps its place.
func TestFairLockLongWaitingWaiterKeepsItsPlace(t *testing.T) {
	t.Parallel()
	const wait = 300 * time.Millisecond
	opts := &relock.Options{WatchdogTimeout: time.Second, FairLockWaitTimeout: wait}

	t.Run("behind-java-waiters", func(t *testing.T) {
		rdb, c, java, run := mixedFairLock(t, opts, wait)
		holder := javaParty{java, "holder"}
		if err := holder.lock(run.ctx); err != nil {
			t.Fatal(err)
		}
		var waiters []fairParty
		for i, side := range "JJJJRJ" {
			var w fairParty = javaParty{java, "w" + strconv.Itoa(i)}
			if side == 'R' {
				w = relockParty{c, "w" + strconv.Itoa(i)}
			}
			waiters = append(waiters, w)
			run.start(w, 1, 0)
			waitQueueLen(t, rdb, i+1)
		}
		stop := watchQueued(t, rdb, run, waiters[4])
		time.Sleep(2 * time.Second) // the relock waiter waits past the wait time, and its watchdog timeout
		if q := queue(t, rdb); !slices.Equal(q, owners(waiters)) {
			t.Fatalf("queue after a long wait = %v, want %v", q, owners(waiters))
		}
		if err := holder.unlock(run.ctx); err != nil {
			t.Fatal(err)
		}
		run.wait(10 * time.Second)
		if stop() {
			t.Fatal("the relock waiter was dropped from the queue for a while")
		}
		if got, want := run.acquired(), owners(waiters); !slices.Equal(got, want) {
			t.Fatalf("acquisition order %v, want the queue's %v", got, want)
		}
	})

	t.Run("at-the-head", func(t *testing.T) {
		rdb, c, java, run := mixedFairLock(t, opts, wait)
		holder := relockParty{c, "holder"} // its key lives 1 s: the Java thread tries again every second
		if err := holder.lock(run.ctx); err != nil {
			t.Fatal(err)
		}
		waiter, java1 := relockParty{c, "waiter"}, javaParty{java, "java"}
		run.start(waiter, 1, 0)
		waitQueueLen(t, rdb, 1)
		run.start(java1, 1, 0)
		waitQueueLen(t, rdb, 2)
		stop := watchQueued(t, rdb, run, waiter)
		time.Sleep(3 * time.Second)
		if q := queue(t, rdb); len(q) == 0 || q[0] != waiter.owner() {
			t.Fatalf("queue after a long wait = %v, want %s at the head", q, waiter.owner())
		}
		if err := holder.unlock(run.ctx); err != nil {
			t.Fatal(err)
		}
		run.wait(10 * time.Second)
		if stop() {
			t.Fatal("the relock waiter was dropped from the head of the queue for a while")
		}
		if got := run.acquired(); len(got) != 2 || got[0] != waiter.owner() {
			t.Fatalf("acquisition order %v, want %s first", got, waiter.owner())
		}
	})
}

// A dead relock waiter at the head of the queue (its process killed, or its Client stopped without leaving:
// Abandon; its entries stay) is dropped within about its watchdog timeout (1 s) by the live relock waiter behind it, although
// Redisson's clients would keep it for the wait time; then the lock goes to the Java threads behind it,
// and the relock waiter behind them keeps its place as their acquisitions shorten its score.
func TestFairLockDeadWaiterHoldsUpRedissonWaitersBriefly(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"killed", "abandoned"} {
		t.Run(how, func(t *testing.T) {
			srv := redistest.Start(t)
			rdb := rawClient(t, srv)
			c := newClient(t, srv, fastWatchdog)
			java := newRedissonFair(rdb, redissonWait)
			run := newFairRun(t, rdb, 30*time.Second)
			holder := relockParty{c, "holder"}
			if err := holder.lock(run.ctx); err != nil {
				t.Fatal(err)
			}
			var die func()
			if how == "killed" {
				helper := startHelper(t, "fair-waiter", "REDIS_ADDR="+srv.Addr(), "LOCK_NAME="+fairLockKey, "OWNER=doomed")
				die = func() {
					if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
						t.Fatal(err)
					}
				}
			} else {
				doomed, err := relock.New([]string{srv.Addr()}, fastWatchdog)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { doomed.Close() })
				ended := make(chan error, 1)
				go func() { ended <- doomed.FairLock(fairLockKey).Lock(relock.WithOwner(run.ctx, "doomed")) }()
				die = func() {
					relock.Abandon(doomed) // it dies: its entry stays until its alive time ends
					if err := <-ended; !errors.Is(err, relock.ErrClosed) {
						t.Fatalf("a waiter of an abandoned Client: %v", err)
					}
				}
			}
			waitQueueLen(t, rdb, 1)
			doomed := queue(t, rdb)[0]
			behind := []fairParty{javaParty{java, "java1"}, javaParty{java, "java2"}, javaParty{java, "java3"},
				relockParty{c, "waiter"}}
			for i, w := range behind {
				run.start(w, 1, 0)
				waitQueueLen(t, rdb, i+2)
			}
			die()
			// Its alive time ends at most 1 s after it died; the live relock waiter's next attempt, within a
			// third of a second, drops it.
			eventually(t, time.Second+time.Second/3+300*time.Millisecond, "the dead waiter is dropped", func() bool {
				return !slices.Contains(queue(t, rdb), doomed)
			}, func() string { return fmt.Sprint(queue(t, rdb)) })
			unlocked := time.Now()
			if err := holder.unlock(run.ctx); err != nil {
				t.Fatal(err)
			}
			run.wait(10 * time.Second)
			if got, want := run.acquired(), owners(behind); !slices.Equal(got, want) {
				t.Fatalf("acquisition order %v, want %v", got, want)
			}
			if d := run.at[len(behind)-1].Sub(unlocked); d > 500*time.Millisecond {
				t.Fatalf("the queue drained %v after the unlock", d)
			}
			if keys, _ := do(t, rdb, "KEYS", "*").AsStrSlice(); !slices.Equal(keys, []string{"counter"}) {
				t.Fatalf("keys left when everyone is done: %v", keys)
			}
		})
	}
}

// heldParty is an owner that holds the lock, once it has it, until released.
type heldParty struct {
	acquired chan struct{}
	release  chan struct{}
	done     chan error // the lock's error, or the unlock's
}

func startHolding(ctx context.Context, p fairParty) *heldParty {
	h := &heldParty{acquired: make(chan struct{}), release: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		if err := p.lock(ctx); err != nil {
			h.done <- err
			return
		}
		close(h.acquired)
		<-h.release
		h.done <- p.unlock(context.WithoutCancel(ctx))
	}()
	return h
}

func (h *heldParty) waitAcquired(t testing.TB, who string) {
	t.Helper()
	select {
	case <-h.acquired:
	case err := <-h.done:
		t.Fatalf("%s: %v", who, err)
	case <-time.After(5 * time.Second):
		t.Fatalf("%s did not get the lock", who)
	}
}

// The Redisson scores of relock's waiters are Redisson's, to the millisecond: a relock waiter joins with
// the last waiter's score plus the wait time, a relock acquisition subtracts the wait time from every
// remaining score, and a relock waiter that gives up subtracts it from the scores behind it only.
func TestFairLockScoresFollowRedissonArithmetic(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := rawClient(t, srv)
	// With a 1 s watchdog timeout, the score relock would raise its waiters to (alive time + the wait time
	// for each place up to theirs) stays below what the Java holder's 30 s lease gives them.
	c := newClient(t, srv, fastWatchdog)
	java := newRedissonFair(rdb, redissonWait)
	wait := redissonWait.Milliseconds()
	ctx := ctxTimeout(t, 30*time.Second)
	score := func(p fairParty) int64 {
		t.Helper()
		s, ok := zscore(t, rdb, fairDeadlines, p.owner())
		if !ok {
			t.Fatalf("%s has no score: queue %v", p.owner(), queue(t, rdb))
		}
		return int64(s)
	}
	if err := java.lock(ctx, "holder"); err != nil {
		t.Fatal(err)
	}
	j1, r1, j2, r2, j3 := javaParty{java, "j1"}, relockParty{c, "r1"}, javaParty{java, "j2"}, relockParty{c, "r2"}, javaParty{java, "j3"}
	leaveCtx, leave := context.WithCancel(ctx)
	var held []*heldParty
	for i, p := range []fairParty{j1, r1, j2, r2, j3} {
		pctx := ctx
		if p == r2 {
			pctx = leaveCtx
		}
		held = append(held, startHolding(pctx, p))
		waitQueueLen(t, rdb, i+1)
	}
	time.Sleep(100 * time.Millisecond) // the relock waiters have tried again, and been refreshed
	if s1, s2 := score(r1), score(j1)+wait; s1 != s2 {
		t.Fatalf("r1 joined behind j1 with score %d, want j1's + the wait time = %d", s1, s2)
	}
	if s1, s2 := score(r2), score(j2)+wait; s1 != s2 {
		t.Fatalf("r2 joined behind j2 with score %d, want j2's + the wait time = %d", s1, s2)
	}

	if err := java.unlock(ctx, "holder"); err != nil {
		t.Fatal(err)
	}
	held[0].waitAcquired(t, "j1")
	before := map[fairParty]int64{j2: score(j2), r2: score(r2), j3: score(j3)}
	close(held[0].release)
	held[1].waitAcquired(t, "r1") // a relock acquisition
	for p, s := range before {
		if got := score(p); got != s-wait {
			t.Fatalf("after r1 took the lock, %s's score is %d, want %d - the wait time = %d", p.owner(), got, s, s-wait)
		}
	}

	before = map[fairParty]int64{j2: score(j2), j3: score(j3)}
	leave() // r2 gives up
	if err := <-held[3].done; !errors.Is(err, context.Canceled) {
		t.Fatalf("r2 = %v", err)
	}
	eventually(t, 5*time.Second, "r2 leaves the queue", func() bool {
		return slices.Equal(queue(t, rdb), []string{j2.owner(), j3.owner()})
	}, func() string { return fmt.Sprint(queue(t, rdb)) })
	if got := score(j2); got != before[j2] {
		t.Fatalf("j2, ahead of r2, has score %d after r2 left, want %d unchanged", got, before[j2])
	}
	if got := score(j3); got != before[j3]-wait {
		t.Fatalf("j3, behind r2, has score %d after r2 left, want %d - the wait time = %d", got, before[j3], before[j3]-wait)
	}

	close(held[1].release)
	held[2].waitAcquired(t, "j2")
	close(held[2].release)
	held[4].waitAcquired(t, "j3")
	close(held[4].release)
	for _, h := range []*heldParty{held[1], held[2], held[4]} {
		if err := <-h.done; err != nil {
			t.Fatal(err)
		}
	}
}

// A waiter that gives up shortens the waits of the owners behind it that have a score, and only theirs: a
// queued owner without one (a stray entry pushed by hand) does not get one. The scratch set the queue's
// scripts shift the scores with never outlives their run.
func TestFairLockLeaveShiftsOnlyScoredWaiters(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := rawClient(t, srv)
	c := newClient(t, srv, fastWatchdog)
	java := newRedissonFair(rdb, redissonWait)
	ctx := ctxTimeout(t, 30*time.Second)
	if err := java.lock(ctx, "holder"); err != nil {
		t.Fatal(err)
	}
	r1, j1 := relockParty{c, "r1"}, javaParty{java, "j1"}
	leaveCtx, leave := context.WithCancel(ctx)
	h1 := startHolding(leaveCtx, r1)
	waitQueueLen(t, rdb, 1)
	h2 := startHolding(ctx, j1)
	waitQueueLen(t, rdb, 2)
	const stray = "stray:1"
	do(t, rdb, "RPUSH", fairQueue, stray)
	before, _ := zscore(t, rdb, fairDeadlines, j1.owner())

	leave()
	if err := <-h1.done; !errors.Is(err, context.Canceled) {
		t.Fatalf("r1 = %v", err)
	}
	eventually(t, 5*time.Second, "r1 leaves the queue", func() bool {
		return slices.Equal(queue(t, rdb), []string{j1.owner(), stray})
	}, func() string { return fmt.Sprint(queue(t, rdb)) })
	if got, _ := zscore(t, rdb, fairDeadlines, j1.owner()); got != before-float64(redissonWait.Milliseconds()) {
		t.Fatalf("j1's score after r1 left = %v, want %v - the wait time", got, before)
	}
	if s, ok := zscore(t, rdb, fairDeadlines, stray); ok {
		t.Fatalf("the stray entry got a score, %v", s)
	}
	if n, _ := do(t, rdb, "EXISTS", "relock_lock_shift:{fair}").AsInt64(); n != 0 {
		t.Fatal("the scratch set outlived the script")
	}

	do(t, rdb, "LREM", fairQueue, "0", stray)
	if err := java.unlock(ctx, "holder"); err != nil {
		t.Fatal(err)
	}
	h2.waitAcquired(t, "j1")
	close(h2.release)
	if err := <-h2.done; err != nil {
		t.Fatal(err)
	}
}
