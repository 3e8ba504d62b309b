package safety

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/relock-go/relock"
)

// lockKind names the lock a scenario's clients take.
type lockKind string

const (
	kindRLock     lockKind = "rlock"
	kindFairLock  lockKind = "fairlock"
	kindWriteLock lockKind = "writelock"
	kindPermit    lockKind = "permit"   // a PermitSemaphore with one permit: no fencing token
	kindElection  lockKind = "election" // the leader's writes; its term is the token
	kindRedLock   lockKind = "redlock"  // no fencing token
)

// fenceable reports whether the kind gives a token to fence writes with.
func (k lockKind) fenceable() bool { return k != kindPermit && k != kindRedLock }

// hold is one acquisition: its token (0 unfenced), a context that ends when the hold does, and how to give
// it back.
type hold struct {
	token   uint64
	ctx     context.Context
	release func(context.Context) error
	// guard writes v to key with the hold's GuardedWrite, and reports whether it landed (the exclusive
	// locks' holds only).
	guard func(ctx context.Context, key string, v int64) (bool, error)
}

// locker takes the lock for the calling goroutine (its owner).
type locker func(ctx context.Context) (*hold, error)

// newLocker returns how a worker takes the lock name of kind k on its Clients: one, or one per node of a
// RedLock. With ack, an exclusive lock's acquisitions wait for a replica's acknowledgement (WithReplicaAck).
func newLocker(k lockKind, fenced, ack bool, clients []*relock.Client, name string) locker {
	var opts []relock.LockOption
	if fenced {
		opts = append(opts, relock.WithFencing())
	}
	if ack {
		opts = append(opts, relock.WithReplicaAck(1, time.Second))
	}
	exclusive := func(l *relock.RLock) locker {
		return func(ctx context.Context) (*hold, error) {
			if err := l.Lock(ctx); err != nil {
				return nil, err
			}
			h := &hold{release: l.Unlock, guard: func(ctx context.Context, key string, v int64) (bool, error) {
				_, err := l.GuardedWrite(ctx, clients[0].B().Set().Key(key).Value(strconv.FormatInt(v, 10)).Build())
				if errors.Is(err, relock.ErrNotHeld) {
					return false, nil
				}
				return err == nil, err
			}}
			var err error
			if h.ctx, err = l.HoldContext(context.Background()); err == nil && fenced {
				h.token, err = l.FencingToken(ctx)
			}
			if err != nil {
				_ = l.Unlock(context.WithoutCancel(ctx))
				return nil, err
			}
			return h, nil
		}
	}
	switch k {
	case kindRLock:
		return exclusive(clients[0].Lock(name, opts...))
	case kindFairLock:
		return exclusive(clients[0].FairLock(name, opts...))
	case kindWriteLock:
		return exclusive(clients[0].ReadWriteLock(name, opts...).WriteLock())
	case kindPermit:
		s := clients[0].PermitSemaphore(name)
		return func(ctx context.Context) (*hold, error) {
			p, err := s.Acquire(ctx)
			if err != nil {
				return nil, err
			}
			pctx, err := p.Context(context.Background())
			if err != nil {
				_ = p.Release(context.WithoutCancel(ctx))
				return nil, err
			}
			return &hold{ctx: pctx, release: p.Release}, nil
		}
	case kindElection:
		e := clients[0].Election(name)
		return func(ctx context.Context) (*hold, error) {
			term, err := e.Campaign(ctx, "candidate")
			if err != nil {
				return nil, err
			}
			lctx, err := e.LeadershipContext(context.Background())
			if err != nil {
				_ = e.Resign(context.WithoutCancel(ctx))
				return nil, err
			}
			h := &hold{ctx: lctx, release: e.Resign}
			if fenced {
				h.token = term
			}
			return h, nil
		}
	case kindRedLock:
		parts := make([]relock.Lockable, len(clients))
		for i, c := range clients {
			parts[i] = c.Lock(name)
		}
		rl := relock.NewRedLock(parts, nil)
		return func(ctx context.Context) (*hold, error) {
			if err := rl.Lock(ctx); err != nil {
				return nil, err
			}
			hctx, err := rl.HoldContext(context.Background())
			if err != nil {
				_ = rl.Unlock(context.WithoutCancel(ctx))
				return nil, err
			}
			return &hold{ctx: hctx, release: rl.Unlock}, nil
		}
	}
	panic("unknown lock kind " + string(k))
}

// setUp prepares the lock name of kind k before the workers start: a PermitSemaphore gets its one permit.
func setUp(ctx context.Context, k lockKind, c *relock.Client, name string) error {
	if k != kindPermit {
		return nil
	}
	ok, err := c.PermitSemaphore(name).TrySetPermits(ctx, 1)
	if err == nil && !ok {
		err = errors.New("the permit semaphore " + name + " was set already")
	}
	return err
}

// releaseTimeout bounds giving a hold back after a section.
const releaseTimeout = 5 * time.Second
