package relock

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/relock-go/relock/internal/goid"
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
// A goroutine that returns holding a lock leaves it held: Go gives no signal of a goroutine's end, so the
// Client renews the hold until Close (or until the lease given to TryLock runs out), and no other
// goroutine can release it. Release on every path (defer, or Do), or use a token.
//
// token must be non-empty, must not consist only of decimal digits (those are goroutine IDs) and must not
// end in ":write" (that marks a ReadWriteLock's writer); otherwise lock operations made with ctx fail with
// ErrInvalidOwner. A random token
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
	token, ok, err := givenToken(ctx)
	if err != nil {
		return "", err
	}
	if ok {
		return c.id + ":" + token, nil
	}
	return c.owners.goroutine(c.id, goid.ID()), nil
}

// ownerFields remembers the owner fields of the goroutines that called last, so that a goroutine's calls
// do not build the same string each time. Goroutine IDs are never reused, so an entry is never wrong; a
// goroutine whose slot another took builds its field again.
type ownerFields struct {
	slots [256]atomic.Pointer[goroutineOwner]
}

type goroutineOwner struct {
	id    uint64
	field string
}

// goroutine returns the owner field of the goroutine with ID id on the Client with ID client.
func (f *ownerFields) goroutine(client string, id uint64) string {
	slot := &f.slots[id%uint64(len(f.slots))]
	if o := slot.Load(); o != nil && o.id == id {
		return o.field
	}
	o := &goroutineOwner{id: id, field: client + ":" + strconv.FormatUint(id, 10)}
	slot.Store(o)
	return o.field
}

// resolvedOwnerKey carries a token ownerToken already resolved, so that goroutines working for the
// caller (the parts of a MultiLock or RedLock) act as the caller's owner, even when that owner is the
// caller's goroutine.
type resolvedOwnerKey struct{}

// ownerToken is the one rule that decides the owner token of a call: the token the caller carries, else
// the calling goroutine's ID.
func ownerToken(ctx context.Context) (string, error) {
	if token, ok, err := givenToken(ctx); ok || err != nil {
		return token, err
	}
	return strconv.FormatUint(goid.ID(), 10), nil
}

// givenToken returns the owner token ctx carries, if it carries one.
func givenToken(ctx context.Context) (string, bool, error) {
	if token, ok := ctx.Value(resolvedOwnerKey{}).(string); ok {
		return token, true, nil
	}
	if token, ok := OwnerToken(ctx); ok {
		if !validToken(token) {
			return "", true, ErrInvalidOwner
		}
		return token, true, nil
	}
	return "", false, nil
}

// withResolvedOwner returns ctx carrying the owner token of the call that made it, for the goroutines
// that act for that call.
func withResolvedOwner(ctx context.Context) (context.Context, error) {
	token, err := ownerToken(ctx)
	if err != nil {
		return ctx, err
	}
	return context.WithValue(ctx, resolvedOwnerKey{}, token), nil
}

func validToken(token string) bool {
	if strings.HasSuffix(token, writerSuffix) { // would read as a ReadWriteLock's writer field
		return false
	}
	for i := 0; i < len(token); i++ {
		if token[i] < '0' || token[i] > '9' {
			return true
		}
	}
	return false // empty, or digits only
}
