package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"github.com/relock-go/relock"
)

// lockJSON is a lock's state as --json prints it. Durations are milliseconds; ttl_ms is -1 for a key
// without expiry. The field names are stable: scripts may rely on them.
type lockJSON struct {
	Name         string       `json:"name"`
	Kind         string       `json:"kind"` // "rlock", "fairlock", "rwlock", "election", or "none" when free
	Locked       bool         `json:"locked"`
	Mode         string       `json:"mode,omitempty"` // "read" or "write" for a held rwlock
	TTLMillis    int64        `json:"ttl_ms"`
	Holders      []holderJSON `json:"holders"`
	Queue        []waiterJSON `json:"queue"`
	QueueLen     int          `json:"queue_len"`
	FencingToken uint64       `json:"fencing_token"`
	// Election is an election's leader and last leaders (kind "election"), absent for another lock.
	Election *electionJSON `json:"election,omitempty"`
}

type holderJSON struct {
	Owner     string `json:"owner"`
	ClientID  string `json:"client_id"`
	Token     string `json:"token"`
	Goroutine bool   `json:"goroutine"`
	Count     int    `json:"count"`
	Mode      string `json:"mode,omitempty"`
	TTLMillis int64  `json:"ttl_ms"`
	// Connections are the addresses of the holder's Client's connections (inspect only; absent when
	// CLIENT LIST could not be read, [] when none is named after the Client).
	Connections *[]string `json:"connections,omitempty"`
}

type waiterJSON struct {
	Position      int    `json:"position"`
	Owner         string `json:"owner"`
	ClientID      string `json:"client_id"`
	Token         string `json:"token"`
	ExpiresMillis int64  `json:"expires_ms"`
}

func millis(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return d.Milliseconds()
}

func toJSON(st relock.LockState) lockJSON {
	j := lockJSON{Name: st.Name, Kind: kindName(st.Kind), Locked: st.Locked, Mode: st.Mode, TTLMillis: millis(st.TTL),
		QueueLen: st.QueueLen, FencingToken: st.FencingToken, Holders: []holderJSON{}, Queue: []waiterJSON{}}
	for _, h := range st.Holders {
		j.Holders = append(j.Holders, holderJSON{Owner: h.Owner, ClientID: h.ClientID, Token: h.Token,
			Goroutine: h.GoroutineOwner(), Count: h.Count, Mode: h.Mode, TTLMillis: millis(h.TTL)})
	}
	for i, w := range st.Queue {
		j.Queue = append(j.Queue, waiterJSON{Position: i + 1, Owner: w.Owner, ClientID: w.ClientID, Token: w.Token,
			ExpiresMillis: w.Expires.Milliseconds()})
	}
	return j
}

func kindName(k relock.LockKind) string {
	if k == relock.KindNone {
		return "none"
	}
	return string(k)
}

// kindTitle is a lock kind as people read it.
func kindTitle(k relock.LockKind) string {
	switch k {
	case relock.KindRLock:
		return "RLock"
	case relock.KindFairLock:
		return "FairLock"
	case relock.KindReadWriteLock:
		return "ReadWriteLock"
	}
	return "free"
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// fmtTTL prints a remaining time to live.
func fmtTTL(d time.Duration) string {
	switch {
	case d < 0:
		return "no expiry"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(100 * time.Millisecond).String()
	}
}

// ownerText describes an owner: its token (goroutine or WithOwner), then its Client.
func ownerText(clientID, token string) string {
	var who string
	if isDigits(token) {
		who = "goroutine " + token
	} else {
		who = "owner " + token
	}
	if clientID != "" {
		who += " of client " + clientID
	}
	return who
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// summary is one line saying what state the lock is in.
func summary(st relock.LockState) string {
	var b strings.Builder
	switch {
	case st.Kind == relock.KindNone:
		b.WriteString("free (no key in Redis)")
	case !st.Locked:
		fmt.Fprintf(&b, "%s, free", kindTitle(st.Kind))
	case st.Mode == "read":
		fmt.Fprintf(&b, "%s, held for reading by %d owner%s, TTL %s", kindTitle(st.Kind), len(st.Holders), plural(len(st.Holders)), fmtTTL(st.TTL))
	case st.Mode == "write":
		fmt.Fprintf(&b, "%s, held for writing, TTL %s", kindTitle(st.Kind), fmtTTL(st.TTL))
	default:
		fmt.Fprintf(&b, "%s, held, TTL %s", kindTitle(st.Kind), fmtTTL(st.TTL))
	}
	if st.QueueLen > 0 {
		fmt.Fprintf(&b, ", %d waiting", st.QueueLen)
	}
	return b.String()
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// printState prints st for people; el, when not nil, is the election st is the lock of. conns, when not
// nil, are the connections of relock Clients by ID (clientConns).
func printState(w io.Writer, st relock.LockState, el *electionState, conns map[string][]string) {
	if el != nil {
		fmt.Fprintf(w, "election %q: %s\n", st.Name, electionSummary(st, el))
	} else {
		fmt.Fprintf(w, "lock %q: %s\n", st.Name, summary(st))
	}
	for _, h := range st.Holders {
		role := "holder"
		switch {
		case h.Mode != "":
			role = map[string]string{"read": "reader", "write": "writer"}[h.Mode]
		case el != nil && el.Leader != nil && el.Leader.Owner == h.Owner:
			role = "leader"
		}
		fmt.Fprintf(w, "  %-7s %s, hold count %d", role, ownerText(h.ClientID, h.Token), h.Count)
		if h.Mode == "read" {
			fmt.Fprintf(w, ", TTL %s", fmtTTL(h.TTL))
		}
		fmt.Fprintln(w)
		if conns == nil && h.ClientID != "" {
			fmt.Fprintln(w, "          its connections are not shown: CLIENT LIST failed (a Redis ACL may forbid it: see the ACL for the relock command in docs/operations.md)")
		}
		if conns != nil && h.ClientID != "" {
			if addrs := conns[h.ClientID]; len(addrs) > 0 {
				fmt.Fprintf(w, "          its client is connected from %s (%d connection%s)\n", strings.Join(hosts(addrs), ", "), len(addrs), plural(len(addrs)))
			} else {
				fmt.Fprintf(w, "          no connection is named %s%s: its process is gone (the hold ends with its TTL), or its Client was made with Wrap\n", relock.ClientNamePrefix, h.ClientID)
			}
		}
	}
	if st.QueueLen > 0 {
		what := "queue"
		switch {
		case st.Kind == relock.KindReadWriteLock:
			what = "writers waiting with priority"
		case el != nil:
			what = "candidates waiting, in the order they lead next"
		}
		fmt.Fprintf(w, "  %s (%d):\n", what, st.QueueLen)
		for i, q := range st.Queue {
			alive := fmt.Sprintf("entry expires in %s unless refreshed", fmtTTL(q.Expires))
			if q.Expires <= 0 {
				alive = "entry expired: its client stopped refreshing it (dropped when it reaches the head)"
			}
			fmt.Fprintf(w, "    %d. %s, %s\n", i+1, ownerText(q.ClientID, q.Token), alive)
		}
		if st.QueueLen > len(st.Queue) {
			fmt.Fprintf(w, "    ... and %d more\n", st.QueueLen-len(st.Queue))
		}
	}
	if st.FencingToken > 0 {
		what := "fencing token"
		if el != nil {
			what = "last term (fencing token)"
		}
		fmt.Fprintf(w, "  %s: %d (the last one issued)\n", what, st.FencingToken)
	}
	if el != nil {
		printLeaders(w, el)
	}
	if st.Locked && st.TTL < 0 {
		fmt.Fprintln(w, "  warning: the lock key has no expiry (relock never writes one so): only its holder's Unlock or unlock --force frees it")
	}
}

// lockError turns an error of Inspect into what an operator should read.
func lockError(c *common, name string, err error) error {
	switch {
	case errors.Is(err, relock.ErrNotALock):
		detail := err.Error()
		if i := strings.Index(detail, notALock); i >= 0 {
			detail = strings.TrimPrefix(detail[i+len(notALock):], ": ")
		}
		return withKind(errKindWrongKind, fmt.Errorf("%q is not a lock: %s", name, detail))
	case errors.Is(err, relock.ErrInvalidName):
		return fmt.Errorf("%w: %q is not a valid lock name (empty, or a \"}\" outside a {hash tag})", errUsage, name)
	case errors.Is(err, context.Canceled):
		return withKind(errKindInterrupted, errors.New("interrupted"))
	}
	return redisError(c.redis, err)
}

// openedLock is a connection (see open) and the state of the lock a command is about, read once connected.
type openedLock struct {
	ctx      context.Context // bounded by --timeout
	lc       *relock.Client
	rdb      rueidis.Client
	state    relock.LockState
	election *electionState // when the lock is an election's
	done     func()         // cancels ctx and closes the connection
}

// openLock connects (see open) and reads the state of lock name, and of its election if it is one's;
// errors are lockError's. The caller must call done.
func (c *common) openLock(ctx context.Context, name string) (*openedLock, error) {
	ctx, lc, rdb, done, err := c.open(ctx)
	if err != nil {
		return nil, err
	}
	st, err := lc.Inspect(ctx, name)
	var el *electionState
	if err == nil {
		el, err = readElection(ctx, rdb, st, inspectLeaders)
	}
	if err != nil {
		done()
		return nil, lockError(c, name, err)
	}
	return &openedLock{ctx: ctx, lc: lc, rdb: rdb, state: st, election: el, done: done}, nil
}

// notALock is relock.ErrNotALock's text, after which its errors say why.
var notALock = strings.TrimPrefix(relock.ErrNotALock.Error(), "relock: ")

func runInspect(ctx context.Context, e env) error {
	var c common
	fs := newFlags("inspect", "inspect [flags] NAME", e)
	c.register(fs, 5*time.Second)
	name, err := parseName(fs, e.args)
	if err != nil {
		return err
	}
	ctx, lc, rdb, done, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	st, lockErr := lc.Inspect(ctx, name)
	if sem, ok, err := inspectSemaphore(ctx, &c, lc, name, st, lockErr); err != nil {
		return err
	} else if ok {
		if c.json {
			return printJSON(e.stdout, toSemaphoreJSON(sem))
		}
		printSemaphore(e.stdout, sem)
		return nil
	}
	el, err := readElection(ctx, rdb, st, inspectLeaders)
	if err != nil {
		return lockError(&c, name, err)
	}
	var conns map[string][]string
	if len(st.Holders) > 0 {
		conns, _ = clientConns(ctx, rdb)
	}
	if c.json {
		j := withElection(toJSON(st), el)
		for i, h := range st.Holders {
			if conns != nil && h.ClientID != "" {
				addrs := append([]string{}, conns[h.ClientID]...)
				j.Holders[i].Connections = &addrs
			}
		}
		return printJSON(e.stdout, j)
	}
	printState(e.stdout, st, el, conns)
	return nil
}
