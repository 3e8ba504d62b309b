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
// leadership up in Redis (see holdTable.timedOutLocked), and a "campaign again on loss" loop that
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
