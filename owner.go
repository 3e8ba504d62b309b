package relock

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"unsafe"
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
	token, err := ownerToken(ctx)
	if err != nil {
		return "", err
	}
	return c.id + ":" + token, nil
}

// resolvedOwnerKey carries a token ownerToken already resolved, so that goroutines working for the
// caller (the parts of a MultiLock or RedLock) act as the caller's owner, even when that owner is the
// caller's goroutine.
type resolvedOwnerKey struct{}

// ownerToken is the one rule that decides the owner token of a call: the token the caller carries, else
// the calling goroutine's ID.
func ownerToken(ctx context.Context) (string, error) {
	if token, ok := ctx.Value(resolvedOwnerKey{}).(string); ok {
		return token, nil
	}
	if token, ok := OwnerToken(ctx); ok {
		if !validToken(token) {
			return "", ErrInvalidOwner
		}
		return token, nil
	}
	var buf [20]byte
	return string(strconv.AppendUint(buf[:0], goroutineID(), 10)), nil
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

// goroutineID returns the calling goroutine's ID. Go has no API for it. The runtime keeps it in the
// goroutine's runtime.g; the offset of that field changes between Go releases, so goidOffset finds it at
// startup and checks it against the slow, documented source: the first line of the goroutine's own stack
// trace, "goroutine 123 [running]:". Where it cannot be found and checked, every call takes the slow path.
// IDs are never reused within a process.
func goroutineID() uint64 {
	if goidOffset != 0 {
		return *(*uint64)(unsafe.Add(getg(), goidOffset))
	}
	return stackGoroutineID()
}

// goidOffset is the offset of the goroutine ID in runtime.g, or 0 if unknown.
var goidOffset = findGoidOffset()

// findGoidOffset looks for the one 8-byte-aligned word, within the first 256 bytes of runtime.g, that holds
// the goroutine's ID in this goroutine and in several new ones, whose IDs all differ.
func findGoidOffset() uintptr {
	if getg() == nil {
		return 0
	}
	candidates := offsetsHolding(stackGoroutineID())
	for i := 0; i < 3 && len(candidates) > 0; i++ {
		found := make(chan []uintptr)
		go func() { found <- offsetsHolding(stackGoroutineID()) }()
		candidates = intersect(candidates, <-found)
	}
	if len(candidates) != 1 {
		return 0
	}
	return candidates[0]
}

// offsetsHolding returns the offsets in the calling goroutine's runtime.g whose word equals id.
func offsetsHolding(id uint64) []uintptr {
	var offs []uintptr
	g := getg()
	for off := uintptr(8); off < 256; off += 8 {
		if *(*uint64)(unsafe.Add(g, off)) == id {
			offs = append(offs, off)
		}
	}
	return offs
}

func intersect(a, b []uintptr) []uintptr {
	var out []uintptr
	for _, x := range a {
		for _, y := range b {
			if x == y {
				out = append(out, x)
			}
		}
	}
	return out
}

// stackGoroutineID parses the ID from the goroutine's stack trace header.
func stackGoroutineID() uint64 {
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
