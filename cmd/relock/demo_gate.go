package main

import (
	"context"
	"sync"

	"github.com/redis/rueidis"
)

// demoGate is a rueidis.Client whose commands (Do and DoMulti) it can hold back, as a stalled network link
// would: while the gate is stalled a command waits; one whose context ends meanwhile returns the context's
// error at once, and is still sent when the stall ends, as a request already written to a socket would
// be. The Client's pub/sub connections are not held back. It stalls a candidate of this process: every
// renewal of its watchdog and every write of its leader waits.
type demoGate struct {
	rueidis.Client
	mu      sync.Mutex
	stalled chan struct{} // nil when not stalled; closed when the stall ends
	shut    bool          // no command is held back any more
	dead    bool          // every command fails (kill)
	late    sync.WaitGroup
}

// stall holds back every command from now on, until resume.
func (g *demoGate) stall() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stalled == nil {
		g.stalled = make(chan struct{})
	}
}

// resume sends the commands held back, and lets every command through again.
func (g *demoGate) resume() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stalled != nil {
		close(g.stalled)
		g.stalled = nil
	}
}

// kill makes every command fail from now on, as the connections of a process that died would: the
// candidate's Client then tells Redis nothing, not even at Close.
func (g *demoGate) kill() {
	g.mu.Lock()
	g.dead = true
	g.mu.Unlock()
}

// gone reports whether the gate was killed.
func (g *demoGate) gone() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.dead
}

// close ends the stall, if any, for good, and waits until the commands held back are sent.
func (g *demoGate) close() {
	g.mu.Lock()
	g.shut = true
	g.mu.Unlock()
	g.resume()
	g.late.Wait()
}

// hold waits while the gate is stalled; when ctx ends first, it sends the commands with send once the
// stall ends, and returns ctx's error.
func (g *demoGate) hold(ctx context.Context, send func(ctx context.Context)) error {
	g.mu.Lock()
	stalled := g.stalled
	g.mu.Unlock()
	if stalled == nil {
		return nil
	}
	select {
	case <-stalled:
		return nil
	case <-ctx.Done():
		g.mu.Lock()
		defer g.mu.Unlock()
		if !g.shut { // else close is waiting for g.late: the commands are sent at once, or not at all
			g.late.Go(func() {
				<-stalled
				lctx, cancel := context.WithTimeout(context.Background(), demoCleanupLimit)
				defer cancel()
				send(lctx)
			})
		}
		return ctx.Err()
	}
}

// Do sends cmd, after the stall if the gate is stalled.
func (g *demoGate) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if g.gone() {
		return rueidis.NewErrorResult(rueidis.ErrClosing)
	}
	if err := g.hold(ctx, func(lctx context.Context) { g.Client.Do(lctx, cmd) }); err != nil {
		return rueidis.NewErrorResult(err)
	}
	return g.Client.Do(ctx, cmd)
}

// DoMulti sends cmds, after the stall if the gate is stalled.
func (g *demoGate) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	err := g.hold(ctx, func(lctx context.Context) { g.Client.DoMulti(lctx, cmds...) })
	if err == nil && g.gone() {
		err = rueidis.ErrClosing
	}
	if err != nil {
		out := make([]rueidis.RedisResult, len(cmds))
		for i := range out {
			out[i] = rueidis.NewErrorResult(err)
		}
		return out
	}
	return g.Client.DoMulti(ctx, cmds...)
}
