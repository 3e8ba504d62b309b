package relock

import (
	"context"
	"embed"
	"strings"

	"github.com/redis/rueidis"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// script is one lua/*.lua file, run with EVALSHA and, when the server does not know it (NOSCRIPT, for
// example after a restart or SCRIPT FLUSH), with EVAL.
type script struct {
	name string
	lua  *rueidis.Lua
}

func loadScript(name string) *script {
	src, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic("relock: missing embedded script " + name + ": " + err.Error())
	}
	return &script{name: name, lua: rueidis.NewLuaScript(strings.TrimSpace(string(src)))}
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
	scriptQueueRefresh     = loadScript("queue_refresh")

	scriptRWReadAcquire  = loadScript("rw_read_acquire")
	scriptRWReadRelease  = loadScript("rw_read_release")
	scriptRWReadRenew    = loadScript("rw_read_renew")
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
