package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/rueidis"
	"github.com/relock-go/relock"
)

// demoElectionEvent is what a candidate tells the demo: as a value in this process, or as a JSON line
// (demoMsg.Event) from a worker process. Times are Unix nanoseconds, comparable between the processes of
// one host.
type demoElectionEvent struct {
	ID   int    `json:"id"`
	Type string `json:"type"` // see the constants below
	At   int64  `json:"at"`
	Term uint64 `json:"term,omitempty"`
	// wrote: whether the store accepted the write, and the store's term when the write arrived (the
	// highest term it had accepted).
	Accepted  bool   `json:"accepted,omitempty"`
	StoreTerm uint64 `json:"store_term,omitempty"`
	// lost: the cause of the end of the leadership, and whether it is ErrLockLost; error: the error.
	Cause    string `json:"cause,omitempty"`
	LockLost bool   `json:"lock_lost,omitempty"`
}

// The types of demoElectionEvent.
const (
	evWon      = "won"      // Campaign returned: the candidate leads, with Term
	evWrote    = "wrote"    // the leader wrote to the store with Term
	evResigned = "resigned" // the leader was told to resign: At is when it called Resign
	evLost     = "lost"     // the leader found its LeadershipContext ended (Cause)
	evError    = "error"    // the candidate failed (Cause); it stops
)

// The commands the demo gives a candidate.
const (
	cmdCampaign = "campaign"
	cmdResign   = "resign"
)

// demoCandidateValue is the value candidate id campaigns with, and its name in the demo's output.
func demoCandidateValue(id int) string { return "candidate-" + strconv.Itoa(id) }

// demoStoreScript is the demo's fenced store: a hash holding the term and value of the last write it
// accepted. A write whose term is below that term comes from a leader that has been replaced: it is
// rejected. Every write is logged, accepted or not, in a list of "accepted|rejected term store_term value"
// (store_term: the store's term before the write).
var demoStoreScript = rueidis.NewLuaScript(`
local top = tonumber(redis.call('hget', KEYS[1], 'term') or '0')
local term = tonumber(ARGV[1])
if term < top then
  redis.call('rpush', KEYS[2], 'rejected ' .. ARGV[1] .. ' ' .. top .. ' ' .. ARGV[2])
  return {0, top}
end
redis.call('hset', KEYS[1], 'term', ARGV[1], 'value', ARGV[2])
redis.call('rpush', KEYS[2], 'accepted ' .. ARGV[1] .. ' ' .. top .. ' ' .. ARGV[2])
return {1, top}
`)

// storeWrite writes to the fenced store as the leader value with term, and returns whether the store
// accepted it, and the store's term when the write arrived.
func (cfg *demoConfig) storeWrite(ctx context.Context, rdb rueidis.Client, term uint64, value string) (bool, uint64, error) {
	reply, err := demoStoreScript.Exec(ctx, rdb, []string{cfg.Store, cfg.StoreLog},
		[]string{strconv.FormatUint(term, 10), value}).AsIntSlice()
	if err != nil {
		return false, 0, redisError(cfg.Nodes[0], err)
	}
	if len(reply) != 2 {
		return false, 0, fmt.Errorf("the store's script answered %v", reply)
	}
	return reply[0] == 1, uint64(reply[1]), nil
}

// demoCandidate runs candidate id on lc and rdb, once told to campaign: it campaigns, and while it leads
// it works, writing its term to the fenced store every cfg.Tick; told to resign, it resigns and campaigns
// again, and when its LeadershipContext ends it campaigns again too. A unit of work is: check the
// leadership, work for a tick, write the result. So a leader that stalls in the middle of a unit writes
// with its old term when it resumes, before it looks at its leadership again: the store has to reject
// that write. The candidate ends with ctx, resigning if it leads; it reports what it does with emit.
func demoCandidate(ctx context.Context, cfg *demoConfig, id int, lc *relock.Client, rdb rueidis.Client,
	cmds <-chan string, emit func(demoElectionEvent)) error {
	value := demoCandidateValue(id)
	owner := relock.WithOwner(ctx, value)
	e := lc.Election(cfg.Name)
	event := func(typ string, term uint64) demoElectionEvent {
		return demoElectionEvent{ID: id, Type: typ, At: time.Now().UnixNano(), Term: term}
	}
	resign := func() error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(owner), demoCleanupLimit)
		defer cancel()
		return e.Resign(rctx)
	}
	tick := time.NewTimer(time.Hour)
	defer tick.Stop()
	for {
		term, err := e.Campaign(owner, value)
		if err != nil {
			if ctxOver(ctx) {
				return nil
			}
			return fmt.Errorf("%s: campaign: %w", value, err)
		}
		emit(event(evWon, term))
		lead, err := e.LeadershipContext(owner)
		if err != nil {
			ev := event(evLost, term)
			ev.Cause = err.Error()
			emit(ev)
			continue
		}
		lost := func() {
			ev := event(evLost, term)
			cause := context.Cause(lead)
			ev.Cause, ev.LockLost = cause.Error(), errors.Is(cause, relock.ErrLockLost)
			emit(ev)
		}
	work:
		for {
			if ctx.Err() != nil {
				_ = resign()
				return nil
			}
			if lead.Err() != nil {
				lost()
				break
			}
			tick.Reset(cfg.Tick)
			select {
			case <-ctx.Done():
				_ = resign()
				return nil
			case cmd := <-cmds:
				if cmd != cmdResign {
					continue
				}
				emit(event(evResigned, term))
				if err := resign(); err != nil && !errors.Is(err, relock.ErrNotHeld) {
					return fmt.Errorf("%s: resign: %w", value, err)
				}
				break work
			case <-tick.C:
			}
			ok, top, err := cfg.storeWrite(ctx, rdb, term, value)
			if err != nil {
				if ctxOver(ctx) {
					_ = resign()
					return nil
				}
				return fmt.Errorf("%s: writing to the store: %w", value, err)
			}
			ev := event(evWrote, term)
			ev.Accepted, ev.StoreTerm = ok, top
			emit(ev)
		}
	}
}

// demoCandidates are the candidates of one election, as the demo drives them.
type demoCandidates interface {
	// campaign makes candidate i campaign.
	campaign(i int) error
	// resign tells candidate i, which leads, to resign.
	resign(i int) error
	// die ends candidate i without a resignation: its Client is cut off from Redis and closed, or its
	// process killed.
	die(i int) error
	// stall stops candidate i's link with Redis (this process), or the process (SIGSTOP); resume undoes it.
	stall(i int) error
	resume(i int) error
	// stop ends every candidate still running, the leader last: it resigns. The candidates' events from
	// then on are dropped.
	stop(leader int)
}

// localCandidates are candidates run by goroutines of this process, each with its own Client.
type localCandidates struct {
	cands []*localCandidate
	wg    sync.WaitGroup
}

// localCandidate is one candidate of localCandidates.
type localCandidate struct {
	gate   *demoGate
	close  func() // closes its Client
	cmds   chan string
	cancel context.CancelFunc
	done   chan struct{}
	quiet  atomic.Bool // dead or stopped: its events are dropped
	closed sync.Once
}

// startLocalCandidates connects n candidates, which wait to be told to campaign; they send their events
// on events until quit is closed.
func startLocalCandidates(ctx context.Context, cfg *demoConfig, n int, events chan<- demoElectionEvent, quit <-chan struct{}) (*localCandidates, error) {
	r := &localCandidates{}
	for id := range n {
		gate := &demoGate{}
		nodes, closeFn, err := cfg.dialWith(ctx, func(rdb rueidis.Client) rueidis.Client {
			gate.Client = rdb
			return gate
		})
		if err != nil {
			r.stop(-1)
			return nil, err
		}
		cctx, cancel := context.WithCancel(ctx)
		c := &localCandidate{gate: gate, cmds: make(chan string, 1), cancel: cancel, done: make(chan struct{}),
			close: func() {
				gate.close()
				closeFn()
			}}
		r.cands = append(r.cands, c)
		emit := func(ev demoElectionEvent) {
			if c.quiet.Load() {
				return
			}
			select {
			case events <- ev:
			case <-quit:
			}
		}
		r.wg.Go(func() {
			defer close(c.done)
			select {
			case <-cctx.Done():
				return
			case cmd := <-c.cmds:
				if cmd != cmdCampaign {
					return
				}
			}
			if err := demoCandidate(cctx, cfg, id, nodes[0].lc, nodes[0].rdb, c.cmds, emit); err != nil {
				emit(demoElectionEvent{ID: id, Type: evError, At: time.Now().UnixNano(), Cause: err.Error()})
			}
		})
	}
	return r, nil
}

func (r *localCandidates) campaign(i int) error {
	r.cands[i].cmds <- cmdCampaign
	return nil
}

func (r *localCandidates) resign(i int) error {
	select {
	case r.cands[i].cmds <- cmdResign:
		return nil
	case <-r.cands[i].done:
		return fmt.Errorf("%s has stopped", demoCandidateValue(i))
	}
}

func (r *localCandidates) die(i int) error {
	c := r.cands[i]
	c.quiet.Store(true)
	c.gate.kill()        // its Client can tell Redis nothing any more: Close would resign
	c.closed.Do(c.close) // no Resign: the Client is gone, and its hold expires in Redis
	c.cancel()
	return nil
}

func (r *localCandidates) stall(i int) error {
	r.cands[i].gate.stall()
	return nil
}

func (r *localCandidates) resume(i int) error {
	r.cands[i].gate.resume()
	return nil
}

func (r *localCandidates) stop(leader int) {
	end := func(c *localCandidate) {
		c.quiet.Store(true)
		c.gate.resume()
		c.cancel()
		<-c.done
		c.closed.Do(c.close)
	}
	// Those who wait leave the queue first, so that the leader's resignation hands over to nobody.
	for i, c := range r.cands {
		if i != leader {
			end(c)
		}
	}
	if leader >= 0 && leader < len(r.cands) {
		end(r.cands[leader])
	}
	r.wg.Wait()
}

// procCandidates are candidates run by worker processes, one each.
type procCandidates struct {
	children []*demoChild
	killed   []atomic.Bool
	stopped  []atomic.Bool // SIGSTOP sent, no SIGCONT yet
	fwd      sync.WaitGroup
}

// startProcCandidates starts n worker processes, one candidate each, waits until they are connected, and
// forwards their events to events until quit is closed.
func startProcCandidates(ctx context.Context, cfg *demoConfig, n int, events chan<- demoElectionEvent, quit <-chan struct{}) (*procCandidates, error) {
	pr, err := startProcRunner(ctx, cfg, n, n)
	if err != nil {
		return nil, err
	}
	r := &procCandidates{children: pr.children, killed: make([]atomic.Bool, n), stopped: make([]atomic.Bool, n)}
	for i, c := range r.children {
		r.fwd.Go(func() {
			send := func(ev demoElectionEvent) bool {
				select {
				case events <- ev:
					return true
				case <-quit:
					return false
				}
			}
			for m := range c.msgs {
				var ev demoElectionEvent
				switch {
				case m.Type == "event" && m.Event != nil:
					ev = *m.Event
				case m.Type == "error":
					ev = demoElectionEvent{ID: i, Type: evError, At: time.Now().UnixNano(), Cause: m.Error}
				default:
					continue
				}
				if !send(ev) {
					return
				}
			}
			if !r.killed[i].Load() {
				send(demoElectionEvent{ID: i, Type: evError, At: time.Now().UnixNano(), Cause: c.failed(demoMsg{}, false).Error()})
			}
		})
	}
	return r, nil
}

func (r *procCandidates) campaign(i int) error {
	return r.children[i].send(demoElectionCmd{Op: cmdCampaign})
}

func (r *procCandidates) resign(i int) error {
	return r.children[i].send(demoElectionCmd{Op: cmdResign})
}

func (r *procCandidates) die(i int) error {
	r.killed[i].Store(true)
	return r.children[i].cmd.Process.Kill() // SIGKILL: no Resign, no goodbye
}

func (r *procCandidates) stall(i int) error {
	r.stopped[i].Store(true)
	return r.children[i].cmd.Process.Signal(syscall.SIGSTOP)
}

func (r *procCandidates) resume(i int) error {
	if !r.stopped[i].Swap(false) {
		return nil
	}
	return r.children[i].cmd.Process.Signal(syscall.SIGCONT)
}

func (r *procCandidates) stop(leader int) {
	end := func(i int) {
		r.killed[i].Store(true) // it is told to end: its exit is no error
		_ = r.resume(i)
		r.children[i].stop()
	}
	var wg sync.WaitGroup
	for i := range r.children {
		if i != leader {
			wg.Go(func() { end(i) })
		}
	}
	wg.Wait()
	if leader >= 0 && leader < len(r.children) {
		end(leader)
	}
	r.fwd.Wait()
}

// demoElectionCmd is a line the demo writes to a candidate's worker process: campaign, or resign.
type demoElectionCmd struct {
	Op string `json:"op"`
}

// runElectionChild is a worker process of relock demo --election: one candidate (cfg.IDs[0]), which
// reads demoElectionCmd lines on sc and writes its events with send. It ends, resigning if it leads, when
// its stdin closes.
func runElectionChild(ctx context.Context, cfg *demoConfig, sc *bufio.Scanner, send func(demoMsg) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nodes, closeFn, err := cfg.dial(ctx)
	if err != nil {
		_ = send(demoMsg{Type: "error", Error: err.Error()})
		return err
	}
	defer closeFn()
	if err := send(demoMsg{Type: "ready"}); err != nil {
		return err
	}
	cmds := make(chan string)
	go func() { // stdin's EOF means the demo is done, or gone: stop
		defer cancel()
		for sc.Scan() {
			var c demoElectionCmd
			if json.Unmarshal(sc.Bytes(), &c) != nil {
				continue
			}
			select {
			case cmds <- c.Op:
			case <-ctx.Done():
				return
			}
		}
	}()
	select {
	case <-ctx.Done():
		return nil
	case op := <-cmds:
		if op != cmdCampaign {
			return fmt.Errorf("%w: --child: %q before campaign", errUsage, op)
		}
	}
	id := cfg.IDs[0]
	err = demoCandidate(ctx, cfg, id, nodes[0].lc, nodes[0].rdb, cmds, func(ev demoElectionEvent) {
		_ = send(demoMsg{Type: "event", Event: &ev})
	})
	if err != nil {
		_ = send(demoMsg{Type: "error", Error: err.Error()})
	}
	return err
}
