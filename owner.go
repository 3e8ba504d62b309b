package relock

import (
	"context"
	"runtime"
	"strconv"
)

type ownerKey struct{}

// WithOwner returns a copy of ctx that names token as the owner of every lock operation made with it.
//
// Every hold in Redis belongs to an owner, written in the lock's hash as "<clientUUID>:<token>" (Redisson's
// "<clientUUID>:<threadId>"). Which token a call uses is decided by one rule, the same for every lock type:
//
//   - If ctx (or a parent of it) was made by WithOwner, the token is the one given here.
//   - Otherwise the token is the ID of the calling goroutine.
//
// So, by default, a lock behaves like Redisson's: it is reentrant on the goroutine that took it, and
// another goroutine cannot unlock it. To hand a held lock to other goroutines (an errgroup's workers, a
// callback, a cleanup goroutine), acquire and release it with contexts carrying the same token. The client
// UUID is part of the owner, so the same token on two Clients names two different owners.
//
// token must be non-empty and must not consist only of decimal digits (those are goroutine IDs);
// otherwise lock operations made with ctx fail with ErrInvalidOwner. A random token
// (uuid.NewString()) per logical owner is a good choice.
func WithOwner(ctx context.Context, token string) context.Context {
	return context.WithValue(ctx, ownerKey{}, token)
}

// OwnerToken returns the token WithOwner put in ctx, if any.
func OwnerToken(ctx context.Context) (token string, ok bool) {
	token, ok = ctx.Value(ownerKey{}).(string)
	return token, ok
}

// ownerField resolves the owner of a call as the hash field "<clientUUID>:<token>".
func (c *Client) ownerField(ctx context.Context) (string, error) {
	if token, ok := OwnerToken(ctx); ok {
		if !validToken(token) {
			return "", ErrInvalidOwner
		}
		return c.id + ":" + token, nil
	}
	var buf [20]byte
	return c.id + ":" + string(strconv.AppendUint(buf[:0], goroutineID(), 10)), nil
}

func validToken(token string) bool {
	for i := 0; i < len(token); i++ {
		if token[i] < '0' || token[i] > '9' {
			return true
		}
	}
	return false // empty, or digits only
}

// goroutineID returns the calling goroutine's ID. Go has no API for it; the first line of the goroutine's
// own stack trace, "goroutine 123 [running]:", carries it, and IDs are never reused within a process.
func goroutineID() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	const prefix = "goroutine "
	if len(b) <= len(prefix) {
		return 0
	}
	var id uint64
	for _, ch := range b[len(prefix):] {
		if ch < '0' || ch > '9' {
			break
		}
		id = id*10 + uint64(ch-'0')
	}
	return id
}
