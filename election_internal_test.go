package relock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/relock-go/relock/internal/redistest"
)

// A leader whose renewals run in Redis but whose replies are lost (the connection breaks each time before
// they come back) is told it lost its leadership, though Redis still has it. The Client gives the
// leadership up in Redis (see holdTable.endGivingUpLocked), and a "campaign again on loss" loop that
// campaigns meanwhile waits for that: it gets a new term, and one Resign ends it. (Before, the Campaign
// re-entered the lock: hold count 2, and Resign left the owner leading, renewed for ever.) The renewals run
// on real Redis; a gate on the script runner loses their replies (gatedRunner.lose), which faultnet cannot
// do reliably: once a renewal's deadline passes, rueidis closes the connection, and the next ones wait for
// a handshake the stalled link never answers.
func TestElectionCampaignAfterLostRenewalRepliesIsOneHold(t *testing.T) {
	srv := redistest.Start(t)
	opts := &Options{WatchdogTimeout: 2 * time.Second}
	c, err := New([]string{srv.Addr()}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	other, err := New([]string{srv.Addr()}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	g := gateScripts(c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const name = "election-lost-replies"
	owner := WithOwner(ctx, "owner")
	term, err := c.Election(name).Campaign(owner, "owner")
	if err != nil {
		t.Fatal(err)
	}
	lead, err := c.Election(name).LeadershipContext(owner)
	if err != nil {
		t.Fatal(err)
	}
	g.lose.Store(true)
	select {
	case <-lead.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the leader was not told that its renewals got no answer")
	}
	if !errors.Is(context.Cause(lead), ErrLockLost) {
		t.Fatalf("the leadership's context: %v, want ErrLockLost", context.Cause(lead))
	}
	g.lose.Store(false)
	again, err := c.Election(name).Campaign(owner, "owner")
	if err != nil || again <= term {
		t.Fatalf("Campaign again = %d, %v; want a new term, above %d (the lost leadership was given up)", again, err, term)
	}
	if err := c.Election(name).Resign(owner); err != nil {
		t.Fatal(err)
	}
	if l, err := other.Election(name).Leader(ctx); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("after one Resign: Leader = %+v, %v; want ErrNoLeader", l, err)
	}
	won := make(chan error, 1)
	go func() {
		_, err := other.Election(name).Campaign(WithOwner(ctx, "next"), "next")
		won <- err
	}()
	within(t, won, "another candidate")
}

// A Campaign that Close interrupts after it won the lock, before it recorded the leader, fails with
// ErrClosed: Close gave the lock up, which is why the record found it gone (before: ErrLockLost, as if the
// leadership had been lost).
func TestElectionCampaignInterruptedByCloseIsClosed(t *testing.T) {
	srv := redistest.Start(t)
	c, err := New([]string{srv.Addr()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := gateScripts(c)
	recording, record := g.arm(scriptElectionRecord, false)
	defer record()
	campaigned := make(chan error, 1)
	go func() {
		_, err := c.Election("election-closed-mid-campaign").Campaign(context.Background(), "v")
		campaigned <- err
	}()
	select {
	case <-recording:
	case <-time.After(10 * time.Second):
		t.Fatal("Campaign did not come to record its leader")
	}
	// Close gives the lock up; its release is held once Redis answered it, so that the record runs on a
	// Client that is closing but still connected, and finds the lock gone.
	released, finish := g.arm(scriptFairRelease, true)
	defer finish()
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not give the lock up")
	}
	record()
	err = <-campaigned
	finish()
	if !errors.Is(err, ErrClosed) || errors.Is(err, ErrLockLost) {
		t.Fatalf("Campaign interrupted by Close: %v, want ErrClosed", err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// Two Campaigns of one owner: the first wins the lock, and its context ends while it records the leader,
// so it abandons the leadership. The second must not return a term that abandon then takes away: it
// either leads afterwards, its leadership alive, or fails. (Before the Campaigns of an owner took turns,
// the second found its owner leading, returned the term, and lost it to the first's abandon, its
// LeadershipContext ending as if it had resigned: safety/explore, seed 4456822844252728509.)
func TestElectionCampaignThatCannotRecordDoesNotEndItsOwnersOtherCampaign(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newTestClient(t, srv)
	g := gateScripts(c)
	ctx := WithOwner(context.Background(), "twice")
	e := c.Election("abandon-other")
	held, resume := g.arm(scriptElectionRecord, false)
	first, cancelFirst := context.WithCancel(ctx)
	firstDone := make(chan error, 1)
	go func() {
		_, err := e.Campaign(first, "first")
		firstDone <- err
	}()
	<-held // the first Campaign won the lock, and its record waits
	second := make(chan error, 1)
	var term uint64
	go func() {
		var err error
		term, err = e.Campaign(ctx, "second")
		second <- err
	}()
	time.Sleep(100 * time.Millisecond) // the second Campaign is under way
	cancelFirst()
	resume()
	if err := <-firstDone; err == nil {
		t.Fatal("the first Campaign led, though its context ended before its record")
	}
	wait, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	select {
	case err := <-second:
		if err != nil {
			t.Fatalf("the second Campaign: %v", err)
		}
	case <-wait.Done():
		t.Fatal("the second Campaign did not return")
	}
	lead, err := e.LeadershipContext(ctx)
	if err != nil {
		t.Fatalf("the second Campaign returned term %d, and then: LeadershipContext: %v", term, err)
	}
	time.Sleep(300 * time.Millisecond) // any abandon has run
	if lead.Err() != nil {
		t.Fatalf("the second Campaign's leadership ended: %v", context.Cause(lead))
	}
	if l, err := e.Leader(ctx); err != nil || l.Value != "second" || l.Term != term {
		t.Fatalf("Leader = %+v, %v; want the second Campaign's, term %d", l, err, term)
	}
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}
