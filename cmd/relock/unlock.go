package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/relock-go/relock"
)

// unlockJSON is what `unlock --force --json` prints.
type unlockJSON struct {
	Name     string   `json:"name"`
	Released bool     `json:"released"` // false: there was nothing to release
	Before   lockJSON `json:"before"`
}

func runUnlock(ctx context.Context, e env) error {
	var c common
	fs := newFlags("unlock", "unlock --force [--yes] [flags] NAME", e)
	c.register(fs, 5*time.Second)
	force := fs.Bool("force", false, "release the lock whoever holds it (required: relock never unlocks on someone else's behalf by accident)")
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	name, err := parseName(fs, e.args)
	if err != nil {
		return err
	}
	if !*force {
		return fmt.Errorf("%w: unlock releases a lock held by someone else: say --force to mean it", errUsage)
	}
	o, err := c.openLock(ctx, name)
	if err != nil {
		return err
	}
	defer o.done()
	ctx, lc, st := o.ctx, o.lc, o.state
	if !st.Locked {
		if c.json {
			return printJSON(e.stdout, unlockJSON{Name: name, Before: withElection(toJSON(st), o.election)})
		}
		fmt.Fprintf(e.stdout, "lock %q is not held: nothing to release\n", name)
		return nil
	}
	if !*yes {
		if c.json {
			return fmt.Errorf("%w: --json needs --yes (there is nobody to answer the question)", errUsage)
		}
		conns, _ := clientConns(ctx, o.rdb)
		printState(e.stdout, st, o.election, conns)
		// A holder learns of it from its own Client, not from this release: from the watch of holds in
		// milliseconds, or else from its watchdog, which checks every hold each timeout/3 (renewals, and the
		// checks of holds with a lease). Redisson's watchdog only stops renewing.
		fmt.Fprintf(e.stdout, "Release %q now? Its holders are not told by the release: a relock holder finds out "+
			"in milliseconds where its Client watches its holds (the default), else at its watchdog's next check, "+
			"within a third of its watchdog timeout (10 s with the default 30 s), and works on as the holder until "+
			"then; its HoldContext ends then (ErrLockLost), and its Unlock fails (ErrNotHeld). A Redisson holder "+
			"finds out only when its unlock fails. [y/N] ", name)
		// The answer must come before --timeout runs out, like everything else.
		answer := make(chan string, 1)
		go func() {
			line, _ := bufio.NewReader(e.stdin).ReadString('\n')
			answer <- strings.ToLower(strings.TrimSpace(line))
		}()
		select {
		case a := <-answer:
			if a != "y" && a != "yes" {
				fmt.Fprintln(e.stdout)
				return errors.New("not released (answer y to release)")
			}
		case <-ctx.Done():
			fmt.Fprintln(e.stdout)
			return errors.New("not released: no answer (use --yes in scripts)")
		}
	}

	released, err := forceUnlock(ctx, lc, st)
	if err != nil {
		return lockError(&c, name, err)
	}
	if c.json {
		return printJSON(e.stdout, unlockJSON{Name: name, Released: released, Before: withElection(toJSON(st), o.election)})
	}
	if !released {
		fmt.Fprintf(e.stdout, "lock %q was released by its holder meanwhile: nothing to do\n", name)
		return nil
	}
	what := kindTitle(st.Kind)
	if o.election != nil {
		what = "Election"
	}
	fmt.Fprintf(e.stdout, "released %q (%s); its waiters were woken\n", name, what)
	return nil
}

// forceUnlock releases the lock st describes with the force release of its kind, which wakes its waiters
// the way that kind's waiters listen: all of them for an RLock or a ReadWriteLock, the head of the queue
// for a FairLock.
func forceUnlock(ctx context.Context, lc *relock.Client, st relock.LockState) (bool, error) {
	switch st.Kind {
	case relock.KindFairLock:
		return lc.FairLock(st.Name).ForceUnlock(ctx)
	case relock.KindReadWriteLock:
		return lc.ReadWriteLock(st.Name).WriteLock().ForceUnlock(ctx)
	default:
		return lc.Lock(st.Name).ForceUnlock(ctx)
	}
}
