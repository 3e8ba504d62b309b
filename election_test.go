package relock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/faultnet"
	"github.com/relock-go/relock/internal/redistest"
)

// nextLeader returns the next leader obs delivers, failing t after d.
func nextLeader(t *testing.T, obs <-chan relock.Leader, d time.Duration) relock.Leader {
	t.Helper()
	select {
	case l, ok := <-obs:
		if !ok {
			t.Fatal("Observe's channel was closed")
		}
		return l
	case <-time.After(d):
		t.Fatal("no leader delivered")
	}
	return relock.Leader{}
}

// Candidates lead one at a time, in the order they began to campaign, each with a larger term; a
// resignation hands over at once; Leader and every observer follow each change, in order.
func TestElection(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := newClient(t, srv, nil), newClient(t, srv, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	e := a.Election("leader")
	if _, err := e.Leader(ctx); !errors.Is(err, relock.ErrNoLeader) {
		t.Fatalf("Leader before any campaign = %v, want ErrNoLeader", err)
	}
	obs1, err := e.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	obs2, err := b.Election("leader").Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := relock.WithOwner(ctx, "first")
	term1, err := e.Campaign(first, "10.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if again, err := e.Campaign(first, "ignored"); again != term1 || err != nil {
		t.Fatalf("Campaign by the leader = %d, %v; want its term %d", again, err, term1)
	}
	lead, err := e.LeadershipContext(first)
	if err != nil {
		t.Fatal(err)
	}
	// Two more candidates, on the other Client, in order.
	type won struct {
		who  string
		term uint64
		err  error
	}
	wins := make(chan won, 2)
	campaign := func(who string) {
		term, err := b.Election("leader").Campaign(relock.WithOwner(ctx, who), "10.0.0."+who[1:])
		wins <- won{who, term, err}
	}
	go campaign("c2")
	time.Sleep(200 * time.Millisecond) // "2" queues before "3"
	go campaign("c3")
	time.Sleep(200 * time.Millisecond)
	if l, err := b.Election("leader").Leader(ctx); err != nil || l.Value != "10.0.0.1" || l.Term != term1 {
		t.Fatalf("Leader = %+v, %v; want the first candidate", l, err)
	}
	select {
	case w := <-wins:
		t.Fatalf("%+v (%v) won while the first candidate leads", w, w.err)
	default:
	}

	start := time.Now()
	if err := e.Resign(first); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(lead), context.Canceled) {
		t.Fatalf("the resigned leader's context: %v", context.Cause(lead))
	}
	w := <-wins
	t.Logf("hand-over after a resignation: %v", time.Since(start))
	if w.err != nil || w.who != "c2" || w.term <= term1 {
		t.Fatalf("after the resignation %+v won, want candidate 2 with a term above %d", w, term1)
	}
	if err := b.Election("leader").Resign(relock.WithOwner(ctx, "c2")); err != nil {
		t.Fatal(err)
	}
	w3 := <-wins
	if w3.err != nil || w3.who != "c3" || w3.term <= w.term {
		t.Fatalf("then %+v won, want candidate 3 with a term above %d", w3, w.term)
	}
	if err := e.Resign(first); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("Resign by a candidate that does not lead = %v, want ErrNotHeld", err)
	}

	want := []relock.Leader{{Value: "10.0.0.1", Term: term1}, {Value: "10.0.0.2", Term: w.term}, {Value: "10.0.0.3", Term: w3.term}}
	for i, obs := range []<-chan relock.Leader{obs1, obs2} {
		for _, wl := range want {
			if l := nextLeader(t, obs, 5*time.Second); l.Value != wl.Value || l.Term != wl.Term {
				t.Fatalf("observer %d: %+v, want %+v", i, l, wl)
			}
		}
	}
	// A late observer starts with the last leader.
	obs3, err := a.Election("leader").Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l := nextLeader(t, obs3, 5*time.Second); l.Term != w3.term {
		t.Fatalf("a late observer first saw %+v, want term %d", l, w3.term)
	}
	if err := b.Election("leader").Resign(relock.WithOwner(ctx, "c3")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Leader(ctx); !errors.Is(err, relock.ErrNoLeader) {
		t.Fatalf("Leader after every candidate resigned = %v, want ErrNoLeader", err)
	}
}

// A leader that stops renewing (its link stalls) loses its leadership, told by ErrLockLost, and the next
// candidate leads within about the watchdog timeout with a larger term; a dead leader's Client (closed) is
// replaced too.
func TestElectionLeaderLost(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := startProxy(t, srv)
	opts := &relock.Options{WatchdogTimeout: time.Second}
	stalled, next := clientAt(t, proxy.Addr, opts), newClient(t, srv, opts)
	ctx := ctxTimeout(t, 30*time.Second)
	obs, err := next.Election("lost").Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	term1, err := stalled.Election("lost").Campaign(ctx, "stalled")
	if err != nil {
		t.Fatal(err)
	}
	lead, _ := stalled.Election("lost").LeadershipContext(ctx)
	won := make(chan uint64, 1)
	go func() {
		term, err := next.Election("lost").Campaign(relock.WithOwner(ctx, "next"), "next")
		if err != nil {
			t.Error(err)
		}
		won <- term
	}()
	time.Sleep(100 * time.Millisecond)
	proxy.Stall(faultnet.Upstream, true)
	start := time.Now()
	var term2 uint64
	select {
	case term2 = <-won:
	case <-time.After(5 * time.Second):
		t.Fatal("the next candidate did not lead after the leader stalled")
	}
	t.Logf("hand-over after the leader stalled: %v (watchdog timeout 1s)", time.Since(start))
	select {
	case <-lead.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the stalled leader was not told")
	}
	proxy.Stall(faultnet.Upstream, false)
	if !errors.Is(context.Cause(lead), relock.ErrLockLost) {
		t.Fatalf("the stalled leader's context: %v, want ErrLockLost", context.Cause(lead))
	}
	if term2 <= term1 {
		t.Fatalf("term %d after %d", term2, term1)
	}
	for _, want := range []uint64{term1, term2} {
		if l := nextLeader(t, obs, 5*time.Second); l.Term != want {
			t.Fatalf("observed %+v, want term %d", l, want)
		}
	}

	// A dead leader (its Client stopped without resigning: Abandon) is replaced too.
	dead := newClient(t, srv, opts)
	if err := next.Election("lost").Resign(relock.WithOwner(ctx, "next")); err != nil {
		t.Fatal(err)
	}
	term3, err := dead.Election("lost").Campaign(ctx, "dead")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		term, err := next.Election("lost").Campaign(relock.WithOwner(ctx, "after-dead"), "after")
		if err != nil {
			t.Error(err)
		}
		won <- term
	}()
	time.Sleep(100 * time.Millisecond)
	relock.Abandon(dead)
	select {
	case term4 := <-won:
		if term4 <= term3 {
			t.Fatalf("term %d after %d", term4, term3)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the next candidate did not lead after the leader died")
	}
}

// Bad input gets typed errors and writes nothing; Observe's channel closes with its context and with the
// Client.
func TestElectionBadInput(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	var nilClient *relock.Client
	if _, err := nilClient.Election("x").Campaign(ctx, "v"); !errors.Is(err, relock.ErrNilClient) {
		t.Errorf("Campaign on a nil Client = %v", err)
	}
	if _, err := c.Election("").Campaign(ctx, "v"); !errors.Is(err, relock.ErrInvalidName) {
		t.Errorf("Campaign with an empty name = %v", err)
	}
	if _, err := c.Election("").Observe(ctx); !errors.Is(err, relock.ErrInvalidName) {
		t.Errorf("Observe with an empty name = %v", err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Election("x").Campaign(ended, "v"); !errors.Is(err, context.Canceled) {
		t.Errorf("Campaign with an ended context = %v", err)
	}
	if _, err := c.Election("x").Leader(ended); !errors.Is(err, context.Canceled) {
		t.Errorf("Leader with an ended context = %v", err)
	}
	if err := c.Election("x").Resign(ctx); !errors.Is(err, relock.ErrNotHeld) {
		t.Errorf("Resign without leading = %v", err)
	}
	if _, err := c.Election("x").LeadershipContext(ctx); !errors.Is(err, relock.ErrNotHeld) {
		t.Errorf("LeadershipContext without leading = %v", err)
	}
	if n, _ := do(t, rdb, "DBSIZE").AsInt64(); n != 0 {
		t.Fatalf("bad input wrote %d keys", n)
	}
	octx, ocancel := context.WithCancel(ctx)
	obs, err := c.Election("x").Observe(octx)
	if err != nil {
		t.Fatal(err)
	}
	ocancel()
	select {
	case _, ok := <-obs:
		if ok {
			t.Fatal("a leader delivered with nobody elected")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Observe's channel did not close with its context")
	}
	obs, err = c.Election("x").Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	select {
	case <-obs:
	case <-time.After(5 * time.Second):
		t.Fatal("Observe's channel did not close with the Client")
	}
	if _, err := c.Election("x").Observe(ctx); !errors.Is(err, relock.ErrClosed) {
		t.Errorf("Observe on a closed Client = %v", err)
	}
}

// On a cluster, the election's keys share one slot, and everything works as on one server.
func TestElectionOnCluster(t *testing.T) {
	t.Parallel()
	d := onCluster(t, "election:")
	a, b := d.client(t, nil), d.client(t, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	name := d.name("leader")
	obs, err := b.Election(name).Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	term1, err := a.Election(name).Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	won := make(chan uint64, 1)
	bctx := relock.WithOwner(ctx, "b")
	go func() {
		term, err := b.Election(name).Campaign(bctx, "b")
		if err != nil {
			t.Error(err)
		}
		won <- term
	}()
	time.Sleep(100 * time.Millisecond)
	if err := a.Election(name).Resign(ctx); err != nil {
		t.Fatal(err)
	}
	term2 := <-won
	if l, err := a.Election(name).Leader(ctx); err != nil || l.Value != "b" || l.Term != term2 || term2 <= term1 {
		t.Fatalf("Leader = %+v, %v; want b with term %d > %d", l, err, term2, term1)
	}
	for _, want := range []string{"a", "b"} {
		if l := nextLeader(t, obs, 5*time.Second); l.Value != want {
			t.Fatalf("observed %+v, want %s", l, want)
		}
	}
	if err := b.Election(name).Resign(bctx); err != nil {
		t.Fatal(err)
	}
}

// A candidate whose Campaign fails after it won the lock (its record could not be written) does not keep
// the lock, even when its resignation fails too with an error reply, as it does with LOADING while Redis
// restarts (the fault suite's election scenario saw it): Campaign returned the error while the candidate
// still held the lock, renewed by its watchdog, so nobody else could lead, and its next Campaign returned
// the unrecorded term at once. Here an ACL user without XADD, HINCRBY and DEL makes the record and the
// release (which decrements a level, or deletes the last) fail with an error reply, deterministically.
func TestElectionCampaignFailureGivesUpTheLock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := rawClient(t, srv)
	var rules []string
	for _, r := range documentedACL(t) {
		if r != "+xadd" && r != "+hincrby" && r != "+del" {
			rules = append(rules, r)
		}
	}
	if err := do(t, admin, append([]string{"ACL", "SETUSER", "crippled"}, rules...)...).Error(); err != nil {
		t.Fatal(err)
	}
	do(t, admin, "ACL", "SETUSER", "crippled", ">secret")
	opts := &relock.Options{WatchdogTimeout: time.Second}
	crippled, err := relock.New([]string{srv.Addr()}, &relock.Options{WatchdogTimeout: time.Second,
		Redis: rueidis.ClientOption{Username: "crippled", Password: "secret"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { crippled.Close() })
	other := newClient(t, srv, opts)
	ctx := ctxTimeout(t, 30*time.Second)
	const name = "app:failed-campaign"
	failed := relock.WithOwner(ctx, "failed")

	if term, err := crippled.Election(name).Campaign(failed, "failed"); err == nil {
		t.Fatalf("Campaign without XADD = %d, nil; want the record's error", term)
	}
	if _, err := crippled.Election(name).LeadershipContext(failed); !errors.Is(err, relock.ErrNotHeld) {
		t.Fatalf("LeadershipContext after the failed Campaign = %v, want ErrNotHeld", err)
	}
	if term, err := crippled.Election(name).Campaign(failed, "failed"); err == nil {
		t.Fatalf("Campaign again = %d, nil: a term nobody recorded (Leader: %v)", term, leaderOf(ctx, other, name))
	}
	won := make(chan error, 1)
	go func() {
		_, err := other.Election(name).Campaign(relock.WithOwner(ctx, "next"), "next")
		won <- err
	}()
	select {
	case err := <-won:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second): // the failed candidate's hold expires within the watchdog timeout
		t.Fatal("another candidate did not lead: the failed candidate keeps the lock")
	}
	if l, err := other.Election(name).Leader(ctx); err != nil || l.Value != "next" {
		t.Fatalf("Leader = %+v, %v; want next", l, err)
	}
}

// leaderOf describes the current leader of name, for a failure's message.
func leaderOf(ctx context.Context, c *relock.Client, name string) string {
	l, err := c.Election(name).Leader(ctx)
	return fmt.Sprintf("%+v %v", l, err)
}

// A Campaign by the leader records its term if the stream lost it (deleted by hand, say), once: Leader
// finds it again, and a further Campaign adds nothing.
func TestElectionCampaignWhileLeadingRecordsTheTerm(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := relock.WithOwner(ctxTimeout(t, 10*time.Second), "leader")
	e := c.Election("rerecord")
	term, err := e.Campaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	do(t, rdb, "DEL", "relock_election:{rerecord}")
	if _, err := e.Leader(ctx); !errors.Is(err, relock.ErrNoLeader) {
		t.Fatalf("Leader with the stream deleted = %v, want ErrNoLeader", err)
	}
	for range 2 {
		if again, err := e.Campaign(ctx, "v"); again != term || err != nil {
			t.Fatalf("Campaign by the leader = %d, %v; want %d", again, err, term)
		}
	}
	if l, err := e.Leader(ctx); err != nil || l.Term != term {
		t.Fatalf("Leader = %+v, %v; want term %d", l, err, term)
	}
	if n, _ := do(t, rdb, "XLEN", "relock_election:{rerecord}").AsInt64(); n != 1 {
		t.Fatalf("%d entries, want 1", n)
	}
}

// resignEnds checks that one Resign by owner ends its leadership in Redis: Leader says nobody leads, the
// election's lock is gone, and another candidate leads at once.
func resignEnds(t *testing.T, ctx context.Context, c, other *relock.Client, rdb rueidis.Client, name string, owner context.Context) {
	t.Helper()
	if err := c.Election(name).Resign(owner); err != nil {
		t.Fatalf("Resign = %v", err)
	}
	if l, err := other.Election(name).Leader(ctx); !errors.Is(err, relock.ErrNoLeader) {
		hold, _ := do(t, rdb, "HGETALL", name).AsStrMap()
		t.Fatalf("after one Resign: Leader = %+v, %v (the lock: %v); want ErrNoLeader", l, err, hold)
	}
	won := make(chan error, 1)
	go func() {
		_, err := other.Election(name).Campaign(relock.WithOwner(ctx, "next"), "next")
		won <- err
	}()
	receive(t, won, 5*time.Second, "another candidate does not lead after the leader resigned")
	if err := other.Election(name).Resign(relock.WithOwner(ctx, "next")); err != nil {
		t.Fatal(err)
	}
}

// Two Campaigns by one owner at once, both waiting behind another leader: they get one leadership, with
// one term, which one Resign ends. (They got a hold count of 2: one Resign returned nil while the owner
// kept leading, renewed for ever, and no other candidate could lead.)
func TestElectionConcurrentCampaignsByOneOwnerAreOneHold(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	opts := &relock.Options{WatchdogTimeout: 3 * time.Second}
	c, other := newClient(t, srv, opts), newClient(t, srv, opts)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 30*time.Second)
	const name = "election-twice"
	first := relock.WithOwner(ctx, "first")
	if _, err := other.Election(name).Campaign(first, "first"); err != nil {
		t.Fatal(err)
	}
	owner := relock.WithOwner(ctx, "owner")
	type won struct {
		term uint64
		err  error
	}
	wins := make(chan won, 2)
	for range 2 {
		go func() {
			term, err := c.Election(name).Campaign(owner, "owner")
			wins <- won{term, err}
		}()
	}
	eventually(t, 5*time.Second, "both Campaigns wait", func() bool { return numsub(t, rdb, "redisson_lock__channel:{"+name+"}:"+ownerField(t, c, owner)) == 1 })
	time.Sleep(100 * time.Millisecond) // both have made their attempts
	if err := other.Election(name).Resign(first); err != nil {
		t.Fatal(err)
	}
	w1, w2 := <-wins, <-wins
	if w1.err != nil || w2.err != nil || w1.term != w2.term {
		t.Fatalf("Campaigns = %+v, %+v; want one term", w1, w2)
	}
	resignEnds(t, ctx, c, other, rdb, name, owner)
}

// ownerField returns the field of ctx's owner on c, as the lock's hash and channels name it.
func ownerField(t *testing.T, c *relock.Client, ctx context.Context) string {
	t.Helper()
	tok, ok := relock.OwnerToken(ctx)
	if !ok {
		t.Fatal("no owner in ctx")
	}
	return c.ID() + ":" + tok
}

// campaignAfterRestart campaigns for owner on c until it leads, riding out the errors of the first calls
// after a restart (EOF on a connection the server closed), and returns its term. A Campaign that failed
// may have taken a term (it resigned), so the term is not always 1.
func campaignAfterRestart(t *testing.T, c *relock.Client, name string, owner context.Context, value string) uint64 {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		term, err := c.Election(name).Campaign(owner, value)
		if err == nil {
			return term
		}
		t.Logf("Campaign after the restart: %v", err)
		if time.Now().After(end) {
			t.Fatal("no Campaign succeeded within 10 s of the restart")
		}
	}
}

// After a restart without persistence the election's keys are gone and terms count from 1 again. Observe
// delivers every new leader all the same, the first one with Restarted set (its term is not above the
// last one delivered), as Leader reports them; terms that grow again are delivered as usual.
func TestElectionObserveAfterTermsRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, &relock.Options{WatchdogTimeout: 2 * time.Second})
	ctx := ctxTimeout(t, 60*time.Second)
	const name = "observe-restart"
	e := c.Election(name)
	obs, err := e.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	expect := func(want relock.Leader) {
		t.Helper()
		if l := nextLeader(t, obs, 10*time.Second); l.Value != want.Value || l.Term != want.Term || l.Restarted != want.Restarted {
			t.Fatalf("observed %+v, want %+v", l, want)
		}
	}
	const before = 5 // leaders before the restart, with terms 1 to 5
	for i := range before {
		who := fmt.Sprint("before-", i)
		owner := relock.WithOwner(ctx, who)
		term, err := e.Campaign(owner, who)
		if err != nil || term != uint64(i+1) {
			t.Fatalf("Campaign = %d, %v; want term %d", term, err, i+1)
		}
		expect(relock.Leader{Value: who, Term: term})
		if i < before-1 {
			if err := e.Resign(owner); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := srv.Restart(); err != nil { // the last leadership is lost with everything else
		t.Fatal(err)
	}
	first := relock.WithOwner(ctx, "first")
	term := campaignAfterRestart(t, c, name, first, "first")
	if term > 2 {
		t.Fatalf("first term after the restart = %d: the counter was not lost, or failed Campaigns took terms", term)
	}
	if l, err := e.Leader(ctx); err != nil || l.Value != "first" || l.Term != term {
		t.Fatalf("Leader = %+v, %v; want first, term %d", l, err, term)
	}
	expect(relock.Leader{Value: "first", Term: term, Restarted: true})
	if err := e.Resign(first); err != nil {
		t.Fatal(err)
	}
	// The next terms are not above the last one delivered before the restart either: the observer started
	// over at the first leader's, and each is above the one before it.
	for i := range 3 {
		who := fmt.Sprint("after-", i)
		owner := relock.WithOwner(ctx, who)
		next, err := e.Campaign(owner, who)
		if err != nil || next != term+1 {
			t.Fatalf("Campaign = %d, %v; want term %d", next, err, term+1)
		}
		term = next
		expect(relock.Leader{Value: who, Term: term})
		if err := e.Resign(owner); err != nil {
			t.Fatal(err)
		}
	}
}

// An observer follows the stream of leaders by entry id. Ids come from the server's clock: after a restart
// or a failover to a server whose clock is behind the one before, new entries can have ids below the last
// one the observer read. Here the last leader before the restart was recorded with an id far ahead (as a
// server with its clock ahead would); the leader after the restart must be delivered all the same.
func TestElectionObserveAfterStreamIDsWentBack(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 60*time.Second)
	const name = "observe-ids-back"
	e := c.Election(name)
	obs, err := e.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	do(t, rdb, "XADD", "relock_election:{"+name+"}", "99999999999999-0", "term", "7", "value", "ahead", "owner", "x:y")
	if l := nextLeader(t, obs, 10*time.Second); l.Value != "ahead" || l.Term != 7 {
		t.Fatalf("observed %+v, want the leader recorded by hand", l)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	term := campaignAfterRestart(t, c, name, relock.WithOwner(ctx, "after"), "after")
	if l := nextLeader(t, obs, 10*time.Second); l.Value != "after" || l.Term != term || !l.Restarted {
		t.Fatalf("observed %+v, want the leader after the restart, with Restarted", l)
	}
}

// After a failover to a replica that lagged, Redis has the first leaders of the stream (the same entries,
// ids and all) and a fencing counter as far as they went, not the last leaders. An observer that saw them
// all delivers the next leader (its term not above the last it delivered: Restarted), and none of the
// leaders it delivered before. The failover is played by a restart under a partition: the server comes
// back with what a replica that had the first 3 of 5 leaders would have, before the Client reaches it.
func TestElectionObserveAfterFailoverToLaggingReplica(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := startProxy(t, srv)
	c := clientAt(t, proxy.Addr, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 60*time.Second)
	const name, stream, counter = "observe-lagging", "relock_election:{observe-lagging}", "redisson_lock_token:{observe-lagging}"
	e := c.Election(name)
	obs, err := e.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		who := fmt.Sprint("before-", i)
		owner := relock.WithOwner(ctx, who)
		if _, err := e.Campaign(owner, who); err != nil {
			t.Fatal(err)
		}
		if l := nextLeader(t, obs, 10*time.Second); l.Value != who {
			t.Fatalf("observed %+v, want %s", l, who)
		}
		if err := e.Resign(owner); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := do(t, rdb, "XRANGE", stream, "-", "+").AsXRange()
	if err != nil || len(entries) != 5 {
		t.Fatalf("XRANGE = %v, %v", entries, err)
	}
	proxy.Partition(true)
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	for _, x := range entries[:3] {
		do(t, rdb, "XADD", stream, x.ID, "term", x.FieldValues["term"], "value", x.FieldValues["value"], "owner", x.FieldValues["owner"])
	}
	do(t, rdb, "SET", counter, "3")
	proxy.Partition(false)
	term := campaignAfterRestart(t, c, name, relock.WithOwner(ctx, "after"), "after")
	if l := nextLeader(t, obs, 10*time.Second); l.Value != "after" || l.Term != term || l.Restarted != (term <= 5) {
		t.Fatalf("observed %+v after the failover, want after, term %d, Restarted", l, term)
	}
}

// Two goroutines of one owner campaign at once; one's attempt is in flight when the other's context ends.
// The first wins, and must go on leading: the second's attempt, whose reply it did not wait for, must not
// be undone by releasing the leadership the first was just granted (an owner holds an election once, so
// its level cannot tell the two apart). Before, the undo released it: the leadership context ended as if
// resigned, and another candidate led at once (safety/explore found two leaders so).
func TestElectionCampaignsOfOneOwnerDoNotUndoEachOther(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := startProxy(t, srv)
	c := clientAt(t, proxy.Addr, nil)
	ctx := relock.WithOwner(ctxTimeout(t, 30*time.Second), "twice")
	e := c.Election("undo-other")
	if _, err := e.Leader(ctx); !errors.Is(err, relock.ErrNoLeader) { // connections made
		t.Fatalf("Leader: %v", err)
	}
	proxy.Stall(faultnet.Upstream, true) // what is sent now is held on its way
	won := make(chan error, 1)
	go func() {
		_, err := e.Campaign(ctx, "first")
		won <- err
	}()
	time.Sleep(100 * time.Millisecond)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	if _, err := e.Campaign(short, "second"); err == nil {
		t.Fatal("the second Campaign led while nothing could reach Redis")
	}
	cancel()
	time.Sleep(100 * time.Millisecond)
	proxy.Stall(faultnet.Upstream, false)
	if err := <-won; err != nil {
		t.Fatalf("the first Campaign: %v", err)
	}
	lead, err := e.LeadershipContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // time for any undo to run
	if lead.Err() != nil {
		t.Fatalf("the leadership ended: %v", context.Cause(lead))
	}
	if l, err := e.Leader(ctx); err != nil || l.Value != "first" {
		t.Fatalf("Leader = %+v, %v; want the first Campaign's", l, err)
	}
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestElectionCampaignOfAnOwnerThatWinsReturnsAtOnce: two Campaigns of one owner wait while another
// candidate leads. When it resigns, one of them wins; the other must return the same term at once, not
// sleep on until the next resignation or expiry (found by safety/explore).
func TestElectionCampaignOfAnOwnerThatWinsReturnsAtOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	e := c.Election("owner-campaigns")
	other := relock.WithOwner(ctx, "other")
	if _, err := e.Campaign(other, "other"); err != nil {
		t.Fatal(err)
	}
	mine := relock.WithOwner(ctx, "mine")
	terms := make(chan uint64, 2)
	errs := make(chan error, 2)
	for i := range 2 {
		go func() {
			term, err := e.Campaign(mine, fmt.Sprint("mine-", i))
			terms <- term
			errs <- err
		}()
		time.Sleep(150 * time.Millisecond)
	}
	time.Sleep(150 * time.Millisecond) // both wait
	if err := e.Resign(other); err != nil {
		t.Fatal(err)
	}
	receive(t, errs, 3*time.Second, "no Campaign won after the leader resigned")
	receive(t, errs, 3*time.Second, "a Campaign slept on while its owner led")
	if a, b := <-terms, <-terms; a != b {
		t.Fatalf("the Campaigns of one owner returned terms %d and %d", a, b)
	}
	if err := e.Resign(mine); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Leader(ctx); !errors.Is(err, relock.ErrNoLeader) {
		t.Fatalf("after one Resign: Leader: %v; want ErrNoLeader", err)
	}
}

// An observer whose Client could not reach Redis for a while sees the next leader soon after Redis answers
// again: the pauses between its tries are short (safety/explore found an observer blind for 2 s after an
// outage of 1.5 s, its pauses having doubled to 1.6 s while Redis refused its connections).
func TestElectionObserveResumesSoonAfterAnOutage(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := startProxy(t, srv)
	watcher := clientAt(t, proxy.Addr, nil)
	c := newClient(t, srv, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	const name = "observe-outage"
	obs, err := watcher.Election(name).Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e := c.Election(name)
	a := relock.WithOwner(ctx, "a")
	if _, err := e.Campaign(a, "a"); err != nil {
		t.Fatal(err)
	}
	nextLeader(t, obs, 5*time.Second)
	if err := proxy.Down(); err != nil { // the watcher's connections reset, its dials refused
		t.Fatal(err)
	}
	time.Sleep(1560 * time.Millisecond)
	if err := proxy.Up(); err != nil {
		t.Fatal(err)
	}
	if err := e.Resign(a); err != nil {
		t.Fatal(err)
	}
	b := relock.WithOwner(ctx, "b")
	if _, err := e.Campaign(b, "b"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if l := nextLeader(t, obs, 5*time.Second); l.Value != "b" {
		t.Fatalf("observed %+v after the outage, want b", l)
	}
	// The pause is at most retryPauseMax (0.5 s); the rest is slack for a loaded machine.
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the leader elected after the outage was observed %v later, want within 1 s", d)
	}
}

// A Campaign made while Redis refuses its Client's connections fails at once, with ErrUnavailable, even
// when another Campaign of its owner is under way, riding the outage out as a waiter does (it waited
// behind it before: safety/explore found a Campaign that took 950 ms so).
func TestElectionCampaignDuringAnOutageFailsAtOnceBesideAnother(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := startProxy(t, srv)
	leader, c := newClient(t, srv, nil), clientAt(t, proxy.Addr, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	if _, err := leader.Election("outage-campaign").Campaign(ctx, "leader"); err != nil {
		t.Fatal(err)
	}
	owner := relock.WithOwner(ctx, "shared")
	first := make(chan error, 1)
	go func() { _, err := c.Election("outage-campaign").Campaign(owner, "first"); first <- err }()
	rdb := rawClient(t, srv)
	eventually(t, 5*time.Second, "the first Campaign waits", func() bool {
		return listening(t, rdb, "redisson_lock__channel:{outage-campaign}:"+c.ID()+":shared")
	})
	if err := proxy.Down(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	_, err := c.Election("outage-campaign").Campaign(owner, "second")
	if took := time.Since(start); !errors.Is(err, relock.ErrUnavailable) || took > 500*time.Millisecond {
		t.Fatalf("a Campaign made while Redis refused connections = %v after %v; want ErrUnavailable at once", err, took)
	}
	if err := proxy.Up(); err != nil {
		t.Fatal(err)
	}
	if err := leader.Election("outage-campaign").Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatalf("the first Campaign, which rode the outage out: %v", err)
	}
	if err := c.Election("outage-campaign").Resign(owner); err != nil {
		t.Fatal(err)
	}
}

// The stream of an election nobody campaigns in any more may be deleted to give its memory back (see
// docs/operations.md, Key growth): Leader then reports no leader, and the next leader is recorded afresh,
// with a term above the old ones (the counter is kept), and delivered to an observer.
func TestElectionStreamDeletedWhenIdle(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, nil)
	rdb := rawClient(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	e := c.Election("idle")
	own := relock.WithOwner(ctx, "first")
	first, err := e.Campaign(own, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Resign(own); err != nil {
		t.Fatal(err)
	}
	do(t, rdb, "DEL", "relock_election:{idle}")
	if _, err := e.Leader(ctx); !errors.Is(err, relock.ErrNoLeader) {
		t.Fatalf("Leader of an election whose stream was deleted: %v, want ErrNoLeader", err)
	}
	leaders, err := c.Election("idle").Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := relock.WithOwner(ctx, "next")
	term, err := e.Campaign(next, "b")
	if err != nil {
		t.Fatal(err)
	}
	if term <= first {
		t.Fatalf("the next leader's term %d is not above the first's, %d", term, first)
	}
	if l, err := e.Leader(ctx); err != nil || l.Value != "b" || l.Term != term {
		t.Fatalf("Leader = %+v, %v; want b at term %d", l, err, term)
	}
	for {
		select {
		case l := <-leaders:
			if l.Value == "b" && l.Term == term {
				return
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the observer was not told of the next leader")
		}
	}
}
