package relock

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/luasrc"
)

//go:embed lua/*.lua lua/lib/*.lua
var luaFiles embed.FS

// script is one lua/*.lua file, run with EVALSHA and, when the server does not know it (NOSCRIPT, for
// example after a restart or SCRIPT FLUSH), with EVAL.
type script struct {
	name string
	src  string
	sha1 string
	lua  *rueidis.Lua
}

func loadScript(name string) *script {
	lua, err := fs.Sub(luaFiles, "lua")
	if err == nil {
		var text string
		if text, err = luasrc.Load(lua, name); err == nil {
			s := newScript(name, text)
			luasrc.Record(name, s.sha1)
			return s
		}
	}
	panic("relock: embedded script " + name + ": " + err.Error())
}

// newScript returns the script of source text.
func newScript(name, text string) *script {
	sum := sha1.Sum([]byte(text))
	return &script{name: name, src: text, sha1: hex.EncodeToString(sum[:]), lua: rueidis.NewLuaScript(text)}
}

var (
	scriptAcquire      = loadScript("rlock_acquire")
	scriptRelease      = loadScript("rlock_release")
	scriptHandoff      = loadScript("rlock_handoff")
	scriptForceRelease = loadScript("rlock_force_release")
	scriptUndoAcquire  = loadScript("undo_acquire")
	scriptRenew        = loadScript("rlock_renew")
	scriptRLockLeave   = loadScript("rlock_leave")

	scriptFairAcquire      = loadScript("fair_acquire")
	scriptFairRelease      = loadScript("fair_release")
	scriptFairForceRelease = loadScript("fair_force_release")
	scriptFairLeave        = loadScript("fair_leave")
	scriptFairRefresh      = loadScript("fair_refresh")
	scriptQueueRefresh     = loadScript("queue_refresh")

	scriptRWReadAcquire  = loadScript("rw_read_acquire")
	scriptRWReadRelease  = loadScript("rw_read_release")
	scriptRWReadRenew    = loadScript("rw_read_renew")
	scriptRWWriteAcquire = loadScript("rw_write_acquire")
	scriptRWWriteRelease = loadScript("rw_write_release")
	scriptRWWriteLeave   = loadScript("rw_write_leave")
	scriptRWForceRelease = loadScript("rw_force_release")

	scriptSemaphoreAcquire = loadScript("semaphore_acquire")
	scriptSemaphoreRelease = loadScript("semaphore_release")
	scriptSemaphoreSet     = loadScript("semaphore_set")
	scriptSemaphoreDrain   = loadScript("semaphore_drain")
	scriptLatchSet         = loadScript("latch_set")
	scriptLatchCountDown   = loadScript("latch_count_down")
	scriptPermitAcquire    = loadScript("permit_acquire")
	scriptPermitRenew      = loadScript("permit_renew")
	scriptPermitRelease    = loadScript("permit_release")
	scriptElectionRecord   = loadScript("election_record")
	scriptElectionLeader   = loadScript("election_leader")
	scriptLockRead         = loadScript("lock_read")
	scriptCounterRead      = loadScript("counter_read")
	scriptGuardedWrite     = loadScript("guarded_write")
	scriptGuardedEval      = loadScript("guarded_eval") // an opening: the user's script follows it (see guardedScript)
	scriptFencedWrite      = loadScript("fenced_write")
	scriptReleaseRequest   = loadScript("release_request")
	scriptRequestHeard     = loadScript("release_request_heard")
	scriptTakeOver         = loadScript("rlock_takeover")
)

// run runs one script through the one path (see exec): a single round trip (EVALSHA; EVAL only after
// NOSCRIPT). Scripts are never retried on a network error, because none of them is idempotent. A
// script's refusal of a name in use by another kind comes back as a *KindError (kindReply).
func (c *Client) run(ctx context.Context, s *script, keys, args []string) rueidis.RedisResult {
	return kindReply(c.exec(ctx, command{script: s, keys: keys, args: args}))
}

// do runs one plain command (all of relock's are reads) through the one path (see exec).
func (c *Client) do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	return c.exec(ctx, command{cmd: cmd})
}

// command is one script run, or one plain command.
type command struct {
	script *script
	keys   []string
	args   []string
	cmd    rueidis.Completed
}

// exec is the one path every call to Redis takes, and what bounds it:
//
//   - ctx: a call returns when ctx ends (see callGuard for the waits rueidis does not bound by it).
//   - Redis unreachable: the call fails as soon as its connection cannot be made (refused, or the dial
//     timeout, Options.Redis.Dialer.Timeout, 5 s by default), and rueidis does not retry it: New sets
//     DisableRetry, and relock's scripts are never retried anyway. A rueidis client given to Wrap retries
//     read-only commands until their context ends, unless its DisableRetry is set: relock's reads on it
//     (IsLocked, RemainingTTL, HoldCount, AvailablePermits, Count, Observe...) give up after
//     wrappedReadBound when ctx allows longer.
//   - Redis not answering on an established connection: rueidis gives the connection up, failing the
//     calls on it, when its PING (sent every Dialer.KeepAlive, 1 s by default, while the connection is
//     quiet) gets no answer within ConnWriteTimeout (10 s by default): about 12 s by default.
//
// Its failures are classified here (see classify): a failure to reach Redis or to get its answer matches
// ErrUnavailable, and one caused by another call's context is told apart from the caller's own.
//
// The common case, a call the guard lets through, goes straight to send: exec, send and rueidis's own
// calls are all on the stack while the call waits, and a fresh goroutine's stack is copied to one twice
// its size each time a call goes deeper than it has room for.
func (c *Client) exec(ctx context.Context, k command) rueidis.RedisResult {
	if c.borrowed && k.script == nil {
		return c.execBoundedRead(ctx, k)
	}
	if c.guard.needed(ctx) {
		return c.execGuarded(ctx, k)
	}
	return c.send(ctx, k)
}

// execBoundedRead is exec of a plain command (a read) on a client given to Wrap: bounded by
// wrappedReadBound when ctx allows longer.
func (c *Client) execBoundedRead(ctx context.Context, k command) rueidis.RedisResult {
	bctx, stop, ok := boundRead(ctx)
	if !ok {
		return c.execGuarded(ctx, k)
	}
	defer stop()
	r := c.execGuarded(bctx, k)
	if ctx.Err() == nil && errors.Is(context.Cause(bctx), errReadBound) {
		return rueidis.NewErrorResult(unavailable(errReadBound))
	}
	return r
}

// execGuarded is exec of a call through the guard: it returns at ctx's end whatever rueidis does.
func (c *Client) execGuarded(ctx context.Context, k command) rueidis.RedisResult {
	if !c.guard.needed(ctx) {
		return c.send(ctx, k)
	}
	// The send may outlive this call (withinDeadline returns at ctx's end): it gets its own copy of the
	// args, which the caller may reuse once the call returns (argLists).
	k.args = slices.Clone(k.args)
	return withinDeadline(ctx, func() rueidis.RedisResult { return c.send(ctx, k) }, rueidis.NewErrorResult)
}

// send sends k, and sends it again, up to notConnectedTries times in all, while it failed only because
// the connection it waited for could not be made under another call's context (errNotConnected): it was
// never sent, and its own context allows more. One caller's context then costs the others nothing but the
// wait, also when many calls that end at once share the dials.
func (c *Client) send(ctx context.Context, k command) rueidis.RedisResult {
	for try := 1; ; try++ {
		var r rueidis.RedisResult
		if k.script != nil {
			r = k.script.lua.Exec(ctx, c.rdb, k.keys, k.args)
		} else {
			r = c.rdb.Do(ctx, k.cmd)
		}
		r = c.classify(ctx, r)
		if try == notConnectedTries || !errors.Is(r.NonRedisError(), errNotConnected) || ctx.Err() != nil {
			return r
		}
	}
}

// notConnectedTries is how many times a call is sent while the connection it waits for is dialled under
// other calls' contexts that end (see send).
const notConnectedTries = 3

// wrappedReadBound bounds a read on a rueidis client given to Wrap, which may retry it until its context
// ends while Redis is unreachable (see exec).
const wrappedReadBound = 10 * time.Second

// errReadBound is the failure of a read that got no answer within wrappedReadBound.
var errReadBound = fmt.Errorf("no answer within %v", wrappedReadBound)

// boundRead returns a context that ends with ctx, or with the cause errReadBound after wrappedReadBound,
// when ctx would allow longer, and the function that releases it. It has no deadline: rueidis makes a
// connection's deadline of a call's (see Client.exec), and a read's bound must not break a connection.
func boundRead(ctx context.Context) (context.Context, func(), bool) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= wrappedReadBound {
		return ctx, nil, false
	}
	bctx, cancel := context.WithCancelCause(ctx)
	t := time.AfterFunc(wrappedReadBound, func() { cancel(errReadBound) })
	return bctx, func() { t.Stop(); cancel(nil) }, true
}

// runner runs scripts whose replies are integers: the seam between rueidis and the state machines that
// run them (the engine's attempts, releases and undos, the watchdog's batches, the wait queues' leaves,
// a PermitSemaphore's releases).
// A Client's is rueidisRunner; their tests use a scripted fake. A runner uses a call's args only until it
// returns: the caller may then reuse the list (see argLists).
type runner interface {
	// runInt runs one script whose reply is an integer.
	runInt(ctx context.Context, call scriptCall) (int64, error)
	// runAcquire runs one acquisition script, whose reply is three integers, and a fourth for a grant (see
	// acquireReply).
	runAcquire(ctx context.Context, call scriptCall) ([4]int64, error)
	// runInts runs one script whose reply is a list of integers.
	runInts(ctx context.Context, call scriptCall) ([]int64, error)
	// runBatch runs many scripts at once, each replying a list of integers: one round trip per node.
	runBatch(ctx context.Context, calls []scriptCall) ([][]int64, []error)
}

// rueidisRunner runs scripts through the Client's rueidis client (see Client.run).
type rueidisRunner struct{ c *Client }

func (r rueidisRunner) runInt(ctx context.Context, call scriptCall) (int64, error) {
	return r.c.run(ctx, call.script, call.keys, call.args).AsInt64()
}

func (r rueidisRunner) runAcquire(ctx context.Context, call scriptCall) ([4]int64, error) {
	return acquireReply(r.c.run(ctx, call.script, call.keys, call.args))
}

func (r rueidisRunner) runInts(ctx context.Context, call scriptCall) ([]int64, error) {
	return r.c.run(ctx, call.script, call.keys, call.args).AsIntSlice()
}

// acquireReply reads an acquisition's reply, three integers, without allocating; a grant's has a fourth,
// Redis's clock in milliseconds when it ran (lua/lib/hold.lua), which is 0 when the reply has none.
func acquireReply(r rueidis.RedisResult) ([4]int64, error) {
	var reply [4]int64
	msg, err := r.ToMessage()
	if err != nil {
		return reply, err
	}
	vals, err := msg.ToArray()
	if err != nil {
		return reply, err
	}
	if len(vals) != len(reply) && len(vals) != len(reply)-1 {
		return reply, errUnexpectedReply
	}
	for i := range vals {
		if reply[i], err = vals[i].AsInt64(); err != nil {
			return reply, err
		}
	}
	return reply, nil
}

// runBatch sends every call at once: rueidis pipelines concurrent calls into one write per connection, so
// this costs one round trip per node. Each run is EVALSHA, falling back to EVAL on NOSCRIPT, like run.
// (rueidis's ExecMulti would first send SCRIPT LOAD to every node, a round trip more, and fail whole while
// any node of a cluster is down.) It returns by ctx's deadline, as run does.
func (r rueidisRunner) runBatch(ctx context.Context, calls []scriptCall) ([][]int64, []error) {
	type batch struct {
		replies [][]int64
		errs    []error
	}
	b := withinDeadline(ctx, func() batch {
		b := batch{make([][]int64, len(calls)), make([]error, len(calls))}
		var wg sync.WaitGroup
		for i, call := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b.replies[i], b.errs[i] = kindReply(r.c.send(ctx, command{script: call.script, keys: call.keys, args: call.args})).AsIntSlice()
			}()
		}
		wg.Wait()
		return b
	}, func(err error) batch {
		b := batch{make([][]int64, len(calls)), make([]error, len(calls))}
		for i := range b.errs {
			b.errs[i] = err
		}
		return b
	})
	return b.replies, b.errs
}

// runAcked runs s, then WAIT replicas timeout, in one write on one connection (WAIT counts the replicas
// that acknowledged that connection's writes), and returns the script's reply and the replicas that
// acknowledged it. It falls back to EVAL on NOSCRIPT, as run does; rueidis's Lua cannot be pipelined
// with another command, hence the EVALSHA built here. When the script ran but WAIT was refused (an error
// reply: a server that does not support it, an ACL that denies it), nothing was acknowledged: runAcked
// returns 0 replicas, and WAIT's error as refused.
func (c *Client) runAcked(ctx context.Context, s *script, keys, args []string, replicas int64, timeout time.Duration) (resp rueidis.RedisResult, acked int64, refused, err error) {
	send := func() []rueidis.RedisResult {
		var resps []rueidis.RedisResult
		for range notConnectedTries { // again after errNotConnected, as Client.send
			wait := c.rdb.B().Wait().Numreplicas(replicas).Timeout(max(timeout.Milliseconds(), 1)).Build()
			resps = c.rdb.DoMulti(ctx, c.rdb.B().Evalsha().Sha1(s.sha1).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(), wait)
			if err, ok := rueidis.IsRedisErr(resps[0].Error()); ok && err.IsNoScript() {
				wait = c.rdb.B().Wait().Numreplicas(replicas).Timeout(max(timeout.Milliseconds(), 1)).Build()
				resps = c.rdb.DoMulti(ctx, c.rdb.B().Eval().Script(s.src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(), wait)
			}
			for i := range resps {
				resps[i] = c.classify(ctx, resps[i])
			}
			if !errors.Is(resps[0].NonRedisError(), errNotConnected) || ctx.Err() != nil {
				break
			}
		}
		resps[0] = kindReply(resps[0])
		return resps
	}
	var resps []rueidis.RedisResult
	if !c.guard.needed(ctx) {
		resps = send()
	} else {
		args = slices.Clone(args) // the send may outlive this call: see execGuarded
		resps = withinDeadline(ctx, send, func(err error) []rueidis.RedisResult {
			return []rueidis.RedisResult{rueidis.NewErrorResult(err), rueidis.NewErrorResult(err)}
		})
	}
	if resps[0].Error() != nil {
		return resps[0], 0, nil, nil
	}
	acked, err = resps[1].AsInt64()
	if _, ok := rueidis.IsRedisErr(err); ok {
		return resps[0], 0, err, nil
	}
	return resps[0], acked, nil, err
}

// callGuard decides how a call whose context can end is made. rueidis honours a call's ctx while it
// waits for a reply: on a connection that pipelines (New makes its client always pipeline) a call whose
// ctx ends is abandoned and its reply discarded when it comes, the connection untouched. Two waits ignore
// ctx: a call that finds its connection being dialled again waits for that dial, which runs under the
// context of whichever call started it (rueidis bounds it by the dial timeout, for the connection and
// again for the handshake); and a call that finds a connection's ring of pending commands full waits for a
// free slot. Connections are dialled again only after one broke, which the call that met it reports as an
// error that is not Redis's; so after such an error, for long enough that every dial it may cause has
// ended (twice the dial timeout), calls are guarded by withinDeadline, and otherwise made on the caller's
// goroutine at no cost. A Client made by New also learns from its connections themselves when one breaks
// (see watchConns): rueidis reads a connection that pipelines all the time, and dials it again as soon as
// it breaks, before any call has seen an error. What this leaves unguarded: a connection first dialled
// lazily (rueidis spreads calls over several per server) just as the server stops answering; on a rueidis
// client given to Wrap, a connection that broke without a call of relock's seeing it (the application's
// own calls, rueidis's reader or PING); and the full ring, which takes more than a thousand calls in
// flight on one connection of a server that stopped answering.
//
// A Client made by New also guards calls while any of its connections is being dialled, until the
// connection's first read (the handshake's reply) ends: a dial made long after the last break (rueidis
// dials lazily, at the next call) would otherwise hold up, past their deadlines, the calls that come
// while it lasts.
type callGuard struct {
	window  time.Duration
	until   atomic.Int64 // UnixNano until which calls are guarded
	dialing atomic.Int64 // connections being dialled, up to their handshakes' replies (see watchConns)
}

// needed reports whether a call with ctx must be guarded.
func (g *callGuard) needed(ctx context.Context) bool {
	return ctx.Done() != nil && (g.dialing.Load() > 0 || time.Now().UnixNano() < g.until.Load())
}

// broke notes that a connection broke, or could not be made.
func (g *callGuard) broke() { g.until.Store(time.Now().Add(g.window).UnixNano()) }

// classify returns r, its failure turned into relock's (see errors.go), and notes a broken connection in
// the guard. A failure that is not Redis's reply nor the end of ctx is Redis unreachable or not answering:
// it matches ErrUnavailable. A context's error that ctx does not explain is another call's: it comes from
// a connection that another call was dialling, which its context cut short (errNotConnected: nothing was
// sent), or, on a client given to Wrap that does not always pipeline, from a connection that another
// call's deadline broke (errInterrupted: the outcome is unknown). It does not match a context's error:
// the caller's context has not ended.
func (c *Client) classify(ctx context.Context, r rueidis.RedisResult) rueidis.RedisResult {
	err := r.NonRedisError()
	if err == nil || errors.Is(err, rueidis.ErrClosing) {
		return r
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		if ownEnd(ctx, err) {
			return r
		}
		if c.borrowed && !unsent(err) {
			err = fmt.Errorf("%w (%v)", errInterrupted, err)
		} else {
			err = fmt.Errorf("%w (%v)", errNotConnected, err)
		}
	}
	c.guard.broke()
	return rueidis.NewErrorResult(unavailable(err))
}

// ownEnd reports whether err, a context's error, is ctx's own: ctx has ended, or err is a deadline's and
// ctx's has passed (rueidis gives a call alone on a connection the connection's deadline, which can fire
// a moment before the context's own timer).
func ownEnd(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && errors.Is(err, context.DeadlineExceeded) && !time.Now().Before(dl)
}

// withinDeadline returns call's result, or failed(ctx's error) as soon as ctx ends. The call goes on in
// its own goroutine until rueidis returns (at the latest when the dial it waits for ends); the caller does
// not wait for it.
func withinDeadline[T any](ctx context.Context, call func() T, failed func(error) T) T {
	done := make(chan T, 1)
	go func() { done <- call() }()
	select {
	case r := <-done:
		return r
	case <-ctx.Done():
		return failed(ctx.Err())
	}
}

// fmtMillis formats d, rounded up to whole milliseconds, as a script argument.
func fmtMillis(d time.Duration) string {
	return strconv.FormatInt(roundUpToMillis(d).Milliseconds(), 10)
}

// roundUpToMillis rounds d up to whole milliseconds, without overflowing near the largest Duration.
func roundUpToMillis(d time.Duration) time.Duration {
	if r := d % time.Millisecond; r != 0 {
		if d > math.MaxInt64-time.Millisecond {
			return d - r
		}
		return d - r + time.Millisecond
	}
	return d
}
