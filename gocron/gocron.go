// Package relockgocron runs go-co-op/gocron v2 jobs once across replicas, with relock: a Locker that
// takes a lock per run of a job, and an Elector that lets only the leader of a relock Election run jobs.
//
// # Locker: once per tick
//
// gocron asks its Locker for a lock named after the job before each run, skips the run when it gets an
// error, and calls Unlock when the run ends. Replicas whose clocks tick at the same moments all ask; the
// first one to reach Redis runs the job, and the others skip it.
//
// A lock released when the run ends is not enough: a run that takes 10 ms ends before a replica whose
// clock or scheduler is 50 ms late asks, and that replica finds the lock free and runs the same tick
// again. So a Locker keeps each lock at least MinHold after it was taken (ShedLock's lock-at-least-for):
// a replica whose tick comes within MinHold of the first one's finds it held. Choose MinHold longer than
// the replicas' ticks can be apart, and shorter than the job's interval less that, so that the lock is
// free again at the next tick: half the interval suits most jobs.
//
// While a run lasts, its lock is kept alive by relock's watchdog, however long the run takes: a run that
// outlasts its interval is not started again, on any replica, until it ended (the ticks meanwhile are
// skipped). When the replica running it dies, the lock expires within the Client's watchdog timeout
// (relock.Options.WatchdogTimeout, 30 s by default), and the first tick after that runs on another
// replica. The same holds for a lock kept for MinHold by a replica that dies meanwhile.
//
// # Elector: one replica runs the jobs
//
// An Elector campaigns in a relock Election until it is closed; IsLeader reports whether this replica
// leads, as its Client knows (the watchdog keeps the leadership, and the Client reports it lost as soon as
// it could not). When the leader dies, another replica leads within the watchdog timeout. gocron asks
// IsLeader before each run, and does not stop a run when the leadership ends during it: a run that must
// not overlap the next leader's should also take a Locker's lock.
package relockgocron

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"

	"github.com/relock-go/relock"
)

// ErrLocked is returned by Locker.Lock when the job's lock is held: another replica runs this tick or
// ran it less than MinHold ago, or a run of the job still goes on. gocron then skips the run.
var ErrLocked = errors.New("relockgocron: the job's lock is held")

// ErrNotLeader is returned by Elector.IsLeader when this replica does not lead.
var ErrNotLeader = errors.New("relockgocron: not the leader")

// LockerOptions configures a Locker. The zero value is usable: lock names "gocron:<job name>", locks
// released when their runs end.
type LockerOptions struct {
	// Prefix is put before the job's name to make the lock's name; "gocron:" when empty. Replicas must
	// agree on it, and their jobs on their names (gocron.WithName; without it gocron names a job after
	// its function).
	Prefix string
	// MinHold is how long at least a lock is kept after it was taken, however soon the run ended (see
	// the package documentation). Zero releases the lock when the run ends. It must not be negative.
	MinHold time.Duration
}

// Locker is a gocron.Locker that takes relock locks on a Client. It is safe for concurrent use.
type Locker struct {
	c    *relock.Client
	opts LockerOptions

	mu   sync.Mutex
	kept map[*jobLock]*time.Timer // locks kept until their MinHold ends
}

var _ gocron.Locker = (*Locker)(nil)

// NewLocker returns a Locker that takes its locks on c. A nil c gets an error matching
// relock.ErrNilClient, a negative MinHold one matching relock.ErrInvalidDuration.
func NewLocker(c *relock.Client, opts *LockerOptions) (*Locker, error) {
	if c == nil {
		return nil, fmt.Errorf("relockgocron: %w", relock.ErrNilClient)
	}
	var o LockerOptions
	if opts != nil {
		o = *opts
	}
	if o.MinHold < 0 {
		return nil, fmt.Errorf("relockgocron: MinHold %v: %w", o.MinHold, relock.ErrInvalidDuration)
	}
	if o.Prefix == "" {
		o.Prefix = "gocron:"
	}
	return &Locker{c: c, opts: o, kept: make(map[*jobLock]*time.Timer)}, nil
}

// Lock takes the lock of the job named key, without waiting. It returns an error matching ErrLocked when
// the lock is held, and relock's error when it could not be taken (one matching relock.ErrUnavailable
// when Redis cannot be reached, relock.ErrClosed once the Client is closed, a *relock.KindError when the
// name is another kind's); gocron skips the run on any error. Each call is an owner of its own
// (relock.WithOwner), so that two runs of one job on one replica exclude each other as runs on two
// replicas do.
func (l *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	lock := l.c.Lock(l.opts.Prefix + key)
	owner := uuid.NewString()
	ok, err := lock.TryLock(relock.WithOwner(ctx, owner), 0, 0)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrLocked, lock.Name())
	}
	return &jobLock{l: l, lock: lock, owner: owner, at: time.Now()}, nil
}

// Release gives up at once the locks kept for their MinHold, and returns the first error met. A replica
// that stops may call it (before closing its Client, which gives them up too): another replica's tick
// that comes after it may then run a tick this one ran.
func (l *Locker) Release(ctx context.Context) error {
	l.mu.Lock()
	var due []*jobLock
	for j, t := range l.kept {
		if t.Stop() {
			due = append(due, j)
		}
		delete(l.kept, j)
	}
	l.mu.Unlock()
	var errs []error
	for _, j := range due {
		errs = append(errs, j.release(ctx))
	}
	return errors.Join(errs...)
}

// jobLock is one run's lock.
type jobLock struct {
	l     *Locker
	lock  *relock.RLock
	owner string
	at    time.Time // when it was taken
}

// Unlock ends the run's hold of the lock: at once when it was taken MinHold ago or earlier, and otherwise
// when MinHold has passed since, in the background (Unlock then returns nil at once). An error is
// relock's Unlock's: the lock may have been lost meanwhile (relock.ErrNotHeld), or Redis could not be
// reached (the lock then expires within the watchdog timeout).
func (j *jobLock) Unlock(ctx context.Context) error {
	left := j.l.opts.MinHold - time.Since(j.at)
	if left <= 0 {
		return j.release(ctx)
	}
	j.l.mu.Lock()
	defer j.l.mu.Unlock()
	j.l.kept[j] = time.AfterFunc(left, func() {
		j.l.mu.Lock()
		_, ok := j.l.kept[j]
		delete(j.l.kept, j)
		j.l.mu.Unlock()
		if ok {
			ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
			defer cancel()
			_ = j.release(ctx) // a lock not released expires within the watchdog timeout
		}
	})
	return nil
}

// releaseTimeout bounds a release made when a lock's MinHold ends.
const releaseTimeout = 10 * time.Second

func (j *jobLock) release(ctx context.Context) error {
	return j.lock.Unlock(relock.WithOwner(ctx, j.owner))
}
