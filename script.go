package relock

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"io/fs"
	"math"
	"strconv"
	"sync"
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
			sum := sha1.Sum([]byte(text))
			return &script{name: name, src: text, sha1: hex.EncodeToString(sum[:]), lua: rueidis.NewLuaScript(text)}
		}
	}
	panic("relock: embedded script " + name + ": " + err.Error())
}

var (
	scriptAcquire      = loadScript("rlock_acquire")
	scriptRelease      = loadScript("rlock_release")
	scriptForceRelease = loadScript("rlock_force_release")
	scriptRenew        = loadScript("rlock_renew")

	scriptFairAcquire      = loadScript("fair_acquire")
	scriptFairRelease      = loadScript("fair_release")
	scriptFairForceRelease = loadScript("fair_force_release")
	scriptFairLeave        = loadScript("fair_leave")
	scriptFairRefresh      = loadScript("fair_refresh")
	scriptQueueRefresh     = loadScript("queue_refresh")

	scriptRWReadAcquire  = loadScript("rw_read_acquire")
	scriptRWReadRelease  = loadScript("rw_read_release")
	scriptRWReadRenew    = loadScript("rw_read_renew")
	scriptRWReadCount    = loadScript("rw_read_count")
	scriptRWWriteAcquire = loadScript("rw_write_acquire")
	scriptRWWriteRelease = loadScript("rw_write_release")
	scriptRWWriteLeave   = loadScript("rw_write_leave")
	scriptRWForceRelease = loadScript("rw_force_release")
)

// run is the one path every script takes to Redis: each call is a single round trip (EVALSHA; EVAL only
// after NOSCRIPT). Scripts are never retried on a network error, because none of them is idempotent.
func (c *Client) run(ctx context.Context, s *script, keys, args []string) rueidis.RedisResult {
	if ctx.Done() == nil {
		return s.lua.Exec(ctx, c.rdb, keys, args)
	}
	return withinDeadline(ctx, func() rueidis.RedisResult { return s.lua.Exec(ctx, c.rdb, keys, args) }, rueidis.NewErrorResult)
}

// runMany runs s once per exec, all at once: rueidis pipelines concurrent calls into one write per
// connection, so this costs one round trip per node. Each run is EVALSHA, falling back to EVAL on
// NOSCRIPT, like run. (rueidis's ExecMulti would first send SCRIPT LOAD to every node, a round trip more,
// and fail whole while any node of a cluster is down.)
func (c *Client) runMany(ctx context.Context, s *script, execs []rueidis.LuaExec) []rueidis.RedisResult {
	resps := make([]rueidis.RedisResult, len(execs))
	var wg sync.WaitGroup
	for i, e := range execs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resps[i] = s.lua.Exec(ctx, c.rdb, e.Keys, e.Args)
		}()
	}
	wg.Wait()
	return resps
}

// runAcked runs s, then WAIT replicas timeout, in one write on one connection (WAIT counts the replicas
// that acknowledged that connection's writes), and returns the script's reply and the replicas that
// acknowledged it. It falls back to EVAL on NOSCRIPT, as run does; rueidis's Lua cannot be pipelined
// with another command, hence the EVALSHA built here.
func (c *Client) runAcked(ctx context.Context, s *script, keys, args []string, replicas int64, timeout time.Duration) (rueidis.RedisResult, int64, error) {
	wait := c.rdb.B().Wait().Numreplicas(replicas).Timeout(max(timeout.Milliseconds(), 1)).Build()
	call := func() []rueidis.RedisResult {
		resps := c.rdb.DoMulti(ctx, c.rdb.B().Evalsha().Sha1(s.sha1).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(), wait)
		if err, ok := rueidis.IsRedisErr(resps[0].Error()); ok && err.IsNoScript() {
			wait = c.rdb.B().Wait().Numreplicas(replicas).Timeout(max(timeout.Milliseconds(), 1)).Build()
			resps = c.rdb.DoMulti(ctx, c.rdb.B().Eval().Script(s.src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(), wait)
		}
		return resps
	}
	var resps []rueidis.RedisResult
	if ctx.Done() == nil {
		resps = call()
	} else {
		resps = withinDeadline(ctx, call, func(err error) []rueidis.RedisResult { return fillErr(2, err) })
	}
	acked, err := resps[1].AsInt64()
	if resps[0].Error() != nil {
		return resps[0], 0, nil
	}
	return resps[0], acked, err
}

// do runs one plain command, under the same deadline guarantee as run.
func (c *Client) do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if ctx.Done() == nil {
		return c.rdb.Do(ctx, cmd)
	}
	return withinDeadline(ctx, func() rueidis.RedisResult { return c.rdb.Do(ctx, cmd) }, rueidis.NewErrorResult)
}

// withinDeadline returns call's result, or failed(ctx's error) as soon as ctx ends. rueidis honours ctx
// while a command waits for its reply, but a call that finds its connection being re-established waits
// for that dial, which runs under the context of whichever call started it: with a stalled or
// unreachable server, a call with a 100 ms deadline could wait seconds. The call goes on in its own
// goroutine until rueidis returns (at the latest when that dial ends); the caller does not wait for it.
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
