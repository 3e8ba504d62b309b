package relock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/redistest"
)

// The gate's head, claimed by a release while it was between attempts and told "not handed", attempts
// at once, and no release may claim it while that attempt is under way: a handoff to it then would take
// its owner's turn, which its own attempt is about to wait for, and nobody would end it (the head's Lock
// never returned, Redis kept the lock for it until its TTL, and the owner's later calls hung on the turn).
// The sequence: the head sleeps; a release whose holder's hold had expired claims it and hands nothing;
// the head's attempting hears the outcome; a second local release then looks for a waiter to hand to.
func TestGateHeadToldNotHandedIsNotClaimedMidAttempt(t *testing.T) {
	c := &Client{}
	target := handoffTarget{owner: "W", field: "W"}
	e, _, err := c.gates.enter(context.Background(), "n", target, time.Time{}, nil)
	if err != nil || e == nil {
		t.Fatalf("enter = %v, %v", e, err)
	}
	c.gates.sleeping(e)
	claimed, yield := c.gates.claim("n", 0)
	if claimed != e || yield {
		t.Fatalf("claim = %v, %v; want the sleeping head", claimed, yield)
	}
	attempted := make(chan error, 1)
	go func() {
		_, err := c.gates.attempting(context.Background(), e, time.Time{}, nil)
		attempted <- err
	}()
	time.Sleep(10 * time.Millisecond) // the head waits for the handoff's outcome
	c.gates.deliver(e, handoff{}, false)
	if err := <-attempted; err != nil {
		t.Fatalf("attempting = %v", err)
	}
	// The head's attempt is under way now: no release may hand it the lock.
	if again, _ := c.gates.claim("n", 0); again != nil {
		t.Fatal("a second release claimed the head in the middle of its attempt")
	}
	c.gates.exit(e)
	if n := c.gates.count(); n != 0 {
		t.Fatalf("%d gates left after the head's exit", n)
	}
}

// Close during a handoff: the releasing Unlock's handoff is among the work Close waits for, so that a hold
// handed to a waiter that Close made give up is undone in Redis before Close returns (it was left there for
// the watchdog timeout, and Close returned nil).
func TestCloseDuringAHandoffLeavesNothing(t *testing.T) {
	srv := redistest.Start(t)
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	c, g, a, got := behindLocalHolder(t, srv, "closing", wctx)
	held, resume := g.arm(scriptHandoff, true)
	defer resume()
	unlocked := make(chan error, 1)
	go func() { unlocked <- c.Lock("closing").Unlock(a) }()
	<-held // the release ran in Redis and handed W the lock; its reply is on its way
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	if err := <-got; !errors.Is(err, ErrClosed) {
		t.Fatalf("W = %v, want ErrClosed", err)
	}
	time.Sleep(200 * time.Millisecond) // Close gives up A's hold (gone: it was handed over) and waits
	resume()
	<-unlocked
	if err := <-closed; err != nil {
		t.Fatalf("Close = %v", err)
	}
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	if n, _ := rdb.Do(context.Background(), rdb.B().Exists().Key("closing").Build()).AsInt64(); n != 0 {
		t.Fatal("the hold handed to W, which Close made give up, is still in Redis after Close returned")
	}
}
