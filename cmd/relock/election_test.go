package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// inspect and list show an election as one: its leader's value and term, and its last leaders, in text
// and --json (an election's lock looked like a bare RLock held by "goroutine N" before).
func TestElectionInspectAndList(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	electionViews(t, []string{srv.Addr()}, "svc:")
}

func TestElectionInspectAndListOnCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	electionViews(t, cl.Addrs(), "{svc}:")
}

func electionViews(t *testing.T, addrs []string, prefix string) {
	addr := strings.Join(addrs, ",")
	c := newLockClient(t, addrs)
	ctx := testCtx(t)
	name := prefix + "scheduler"
	e := c.Election(name)
	first := relock.WithOwner(ctx, "first")
	term1, err := e.Campaign(first, "10.0.0.1:8080")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Resign(first); err != nil {
		t.Fatal(err)
	}
	// The leader now: a candidate whose owner is its goroutine (the default), and one candidate waiting.
	type won struct {
		term uint64
		err  error
	}
	leading, resign := make(chan won, 1), make(chan struct{})
	go func() {
		term, err := e.Campaign(ctx, "10.0.0.2:8080")
		leading <- won{term, err}
		<-resign
		leading <- won{0, e.Resign(ctx)}
	}()
	w := <-leading
	if w.err != nil {
		t.Fatal(w.err)
	}
	term2 := w.term
	waitCtx, stopWaiting := context.WithCancel(ctx)
	waiting := make(chan error, 1)
	go func() {
		_, err := e.Campaign(relock.WithOwner(waitCtx, "standby"), "10.0.0.3:8080")
		waiting <- err
	}()
	waitFor(t, func() bool { return inspectJSON(t, addr, name).QueueLen == 1 })

	j := inspectJSON(t, addr, name)
	if j.Kind != "election" || j.Election == nil || j.Election.Leader == nil || j.FencingToken != term2 {
		t.Fatalf("inspect --json: %+v (election %+v), want an election led in term %d", j, j.Election, term2)
	}
	if l := j.Election.Leader; l.Value != "10.0.0.2:8080" || l.Term != term2 || l.ClientID != c.ID() || l.Owner != j.Holders[0].Owner || l.ElectedAt == "" {
		t.Fatalf("leader %+v, want 10.0.0.2:8080 in term %d, holding the lock", l, term2)
	}
	if r := j.Election.Recent; len(r) != 2 || r[0].Term != term2 || r[1].Term != term1 || r[1].Value != "10.0.0.1:8080" || r[1].Token != "first" {
		t.Fatalf("recent leaders %+v, want the two leaders, newest first", r)
	}
	if len(j.Queue) != 1 || j.Queue[0].Token != "standby" {
		t.Fatalf("queue %+v, want the standby candidate", j.Queue)
	}
	out, _ := mustRun(t, 0, "", "inspect", name, "--redis", addr)
	for _, want := range []string{
		fmt.Sprintf("election %q: led by \"10.0.0.2:8080\" (term %d), TTL ", name, term2), ", 1 candidate waiting",
		"leader  goroutine ", "candidates waiting, in the order they lead next (1):", "1. owner standby of client " + c.ID(),
		"last leaders, newest first:", fmt.Sprintf("term %d: \"10.0.0.2:8080\", goroutine ", term2),
		fmt.Sprintf("term %d: \"10.0.0.1:8080\", owner first of client %s, elected ", term1, c.ID()),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "RLock") || strings.Contains(out, "FairLock") {
		t.Errorf("inspect shows the election as a lock:\n%s", out)
	}

	// list: the election's leader and term, and its last leader only.
	out, _ = mustRun(t, 0, "", "list", prefix+"*", "--redis", addr, "--json")
	var all []lockJSON
	if err := json.Unmarshal([]byte(out), &all); err != nil {
		t.Fatalf("list --json printed %q: %v", out, err)
	}
	if len(all) != 1 || all[0].Kind != "election" || all[0].Election == nil || all[0].Election.Leader == nil ||
		all[0].Election.Leader.Term != term2 || len(all[0].Election.Recent) != 1 {
		t.Fatalf("list --json: %s", out)
	}
	out, _ = mustRun(t, 0, "", "list", prefix+"*", "--redis", addr)
	line := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, name+" ") {
			line = l
		}
	}
	if f := strings.Fields(line); len(f) < 2 || f[1] != "Election" || !strings.Contains(line, `leader "10.0.0.2:8080" (goroutine `) ||
		f[len(f)-1] != fmt.Sprint(term2) {
		t.Fatalf("list's line for the election: %q, want its kind, leader and term\n%s", line, out)
	}

	// Nobody leads: inspect says who led last. A lock with no stream of leaders is no election.
	stopWaiting()
	<-waiting
	close(resign)
	if w := <-leading; w.err != nil {
		t.Fatal(w.err)
	}
	j = inspectJSON(t, addr, name)
	if j.Kind != "election" || j.Election == nil || j.Election.Leader != nil || len(j.Election.Recent) != 2 {
		t.Fatalf("inspect --json without a leader: %+v (election %+v)", j, j.Election)
	}
	out, _ = mustRun(t, 0, "", "inspect", name, "--redis", addr)
	if want := fmt.Sprintf("election %q: no leader (the last, \"10.0.0.2:8080\" in term %d, resigned or lost the leadership)", name, term2); !strings.Contains(out, want) {
		t.Errorf("inspect output lacks %q:\n%s", want, out)
	}
	plain := c.FairLock(prefix + "plain")
	if err := plain.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	defer plain.Unlock(ctx)
	if j := inspectJSON(t, addr, prefix+"plain"); j.Kind != "rlock" || j.Election != nil {
		t.Fatalf("a fair lock: %+v", j)
	}
}
