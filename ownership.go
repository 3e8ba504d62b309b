package relock

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// notHeldHints bounds how many of this Client's other owners a not-held error names.
const notHeldHints = 3

// notHeldError is ErrNotHeld for a call whose owner field holds nothing on key (a hold of kind): it says
// who that owner is and, when other owners of this Client hold key, who they are, as the usual mistake is
// a call from another goroutine than the one that locked. It reads the hold table only: no round trip.
func (c *Client) notHeldError(kind lockKind, key, field string) error {
	return c.ownerError(ErrNotHeld, "", field, c.holds.otherOwners(kind, key, field))
}

// ownerError is err (ErrNotHeld) followed by detail (": ...", or ""), who the owner field is, and others,
// the owner fields of this Client that hold the object instead.
func (c *Client) ownerError(err error, detail, field string, others []string) error {
	var b strings.Builder
	b.WriteString(detail)
	b.WriteString(" (")
	b.WriteString(c.ownerName(field))
	b.WriteString(" of this Client")
	if len(others) == 0 {
		// Free, or another Client's: what a mix-up of this Client's owners would cause, it is not.
		b.WriteString("; no owner of this Client holds it")
	} else {
		b.WriteString("; held instead by ")
		for i, o := range others {
			if i > 0 {
				b.WriteString(", ")
			}
			if i == notHeldHints {
				b.WriteString("and others")
				break
			}
			b.WriteString(c.ownerName(o))
		}
	}
	b.WriteByte(')')
	switch {
	case len(others) == 0:
	case isGoroutineToken(c.token(field)):
		b.WriteString(": the default owner is the calling goroutine; use WithOwner to lock and unlock from different goroutines")
	default:
		b.WriteString(": lock and unlock with the same WithOwner token")
	}
	return fmt.Errorf("%w%s", err, b.String())
}

// token returns the owner token of one of this Client's owner fields (a writer's too).
func (c *Client) token(field string) string {
	token := strings.TrimSuffix(field, writerSuffix)
	if t, ok := strings.CutPrefix(token, c.id+":"); ok {
		return t
	}
	return token
}

// ownerName names one of this Client's owner fields: "goroutine 17", or "owner token "t"".
func (c *Client) ownerName(field string) string {
	token := c.token(field)
	if isGoroutineToken(token) {
		return "goroutine " + token
	}
	return "owner token " + strconv.Quote(token)
}

// otherOwners returns the owner fields, other than field, that hold key as a hold of kind, sorted, at most
// notHeldHints+1 of them.
func (w *holdTable) otherOwners(kind lockKind, key, field string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	var others []string
	for k, h := range w.holds {
		if k.key == key && k.field != field && h.kind == kind && h.heldLocked(now) {
			others = append(others, k.field)
			if len(others) > notHeldHints {
				break
			}
		}
	}
	slices.Sort(others)
	return others
}

// otherGroupOwners returns the owners, other than owner, that hold permits of the hold groups of key
// (see holdgroups.go), at most notHeldHints+1 of them.
func (w *holdTable) otherGroupOwners(key, owner string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var others []string
	for g, ks := range w.groups {
		if g.key == key && g.field != owner && len(ks) > 0 {
			others = append(others, g.field)
			if len(others) > notHeldHints {
				break
			}
		}
	}
	slices.Sort(others)
	return others
}
