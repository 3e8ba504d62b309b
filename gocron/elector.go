package relockgocron

import (
	"context"
	"fmt"
	"sync"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"

	"github.com/relock-go/relock"
)

// Elector is a gocron.Elector that campaigns in a relock Election: IsLeader returns nil on the one
// replica that leads it. It is safe for concurrent use.
type Elector struct {
	stop context.CancelFunc
	done chan struct{}

	mu      sync.Mutex
	leading context.Context // the leadership's context while this replica leads; nil otherwise
	err     error           // why campaigning ended, once it has
}

var _ gocron.Elector = (*Elector)(nil)

// NewElector starts campaigning in the Election name on c, with value as what Election.Leader and
// Observe report of this replica (its host name, say), until Close. A nil c gets an error matching
// relock.ErrNilClient. Campaigning goes on through outages (relock's Election.Run); it ends when c is
// closed, or with an error that campaigning again would meet again (a name that is another kind's, an
// ACL that refuses relock's scripts), which IsLeader then returns.
func NewElector(c *relock.Client, name, value string) (*Elector, error) {
	if c == nil {
		return nil, fmt.Errorf("relockgocron: %w", relock.ErrNilClient)
	}
	ctx, stop := context.WithCancel(relock.WithOwner(context.Background(), uuid.NewString()))
	e := &Elector{stop: stop, done: make(chan struct{})}
	election := c.Election(name)
	go func() {
		defer close(e.done)
		err := election.Run(ctx, value, func(leading context.Context, _ uint64) error {
			e.mu.Lock()
			e.leading = leading
			e.mu.Unlock()
			<-leading.Done() // the leadership ended: lost (Run campaigns again), or Close
			e.mu.Lock()
			e.leading = nil
			e.mu.Unlock()
			return nil
		})
		if ctx.Err() == nil {
			e.mu.Lock()
			e.err = err
			e.mu.Unlock()
		}
	}()
	return e, nil
}

// IsLeader returns nil when this replica leads, as its Client knows; otherwise an error matching
// ErrNotLeader, or, once campaigning ended (see NewElector), the error that ended it (one matching
// relock.ErrClosed when the Client was closed).
func (e *Elector) IsLeader(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.leading != nil && e.leading.Err() == nil:
		return nil
	case e.err != nil:
		return fmt.Errorf("relockgocron: campaigning ended: %w", e.err)
	}
	return ErrNotLeader
}

// Close stops campaigning and resigns the leadership, if this replica leads (the next candidate leads
// at once). It returns once the campaign has ended, or ctx's error when ctx ends first.
func (e *Elector) Close(ctx context.Context) error {
	e.stop()
	select {
	case <-e.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
