package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"github.com/relock-go/relock"
)

// An election (relock's Client.Election) is a fenced fair lock, whose holder is the leader and whose
// fencing token is the leader's term, with a companion stream, "relock_election:{name}", where each new
// leader is recorded with its term and the value it campaigned with. In Redis its lock looks like any
// other: the stream is what tells an election, and what says who its leader is.

// inspectLeaders and listLeaders are how many of an election's last leaders inspect and list show.
const (
	inspectLeaders = 5
	listLeaders    = 1
)

// electionState is what the stream of an election's leaders says, read just after its lock's state.
type electionState struct {
	// Leader is the current leader: the last one recorded, if it holds the lock (as Election.Leader
	// reads it); nil when nobody leads, or the holder's leadership is not recorded yet.
	Leader *leaderRecord
	// Recent are the last leaders recorded, newest first.
	Recent []leaderRecord
}

// leaderRecord is one leader recorded in an election's stream.
type leaderRecord struct {
	Value    string
	Term     uint64
	Owner    string // "<clientID>:<token>"
	ClientID string
	Token    string
	Elected  time.Time // by Redis's clock (the entry's id)
}

// electionStream returns the key of the stream of leaders of the election called name (Redisson's rule for
// companion keys, as relock.Client.Election builds it).
func electionStream(name string) string {
	if strings.Contains(name, "{") {
		return "relock_election:" + name
	}
	return "relock_election:{" + name + "}"
}

// readElection reads the last n leaders of the election called name, whose lock's state is st. It returns
// nil when name is no election: there is no stream of leaders at its name (or a key of another type).
func readElection(ctx context.Context, rdb rueidis.Client, st relock.LockState, n int64) (*electionState, error) {
	stream := electionStream(st.Name)
	entries, err := rdb.Do(ctx, rdb.B().Xrevrange().Key(stream).End("+").Start("-").Count(n).Build()).AsXRange()
	if err != nil {
		if rerr, ok := rueidis.IsRedisErr(err); ok && strings.HasPrefix(rerr.Error(), "WRONGTYPE") {
			return nil, nil // an application's key, not relock's stream
		}
		return nil, err
	}
	if len(entries) == 0 {
		return nil, nil
	}
	el := &electionState{}
	for i, x := range entries {
		term, err := strconv.ParseUint(x.FieldValues["term"], 10, 64)
		if err != nil {
			continue // not a leader's entry
		}
		l := leaderRecord{Value: x.FieldValues["value"], Term: term, Owner: x.FieldValues["owner"], Elected: entryTime(x.ID)}
		l.ClientID, l.Token, _ = strings.Cut(l.Owner, ":")
		el.Recent = append(el.Recent, l)
		if i == 0 && holds(st, l.Owner) {
			el.Leader = &l
		}
	}
	return el, nil
}

// holds reports whether owner holds the lock st describes.
func holds(st relock.LockState, owner string) bool {
	for _, h := range st.Holders {
		if h.Owner == owner {
			return true
		}
	}
	return false
}

// entryTime returns the time a stream entry's id says it was added: its milliseconds, by Redis's clock.
func entryTime(id string) time.Time {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(n).UTC()
}

// electionJSON is what --json says of an election, in its lock's object ("kind": "election").
type electionJSON struct {
	// Leader is the current leader, null when nobody leads (or the holder's leadership is not recorded
	// yet: Campaign records it just after it wins the lock).
	Leader *leaderJSON `json:"leader"`
	// Recent are the last leaders recorded, newest first: inspect's last 5, list's last one.
	Recent []leaderJSON `json:"recent"`
}

type leaderJSON struct {
	Value     string `json:"value"` // what the leader campaigned with
	Term      uint64 `json:"term"`  // its fencing token
	Owner     string `json:"owner"`
	ClientID  string `json:"client_id"`
	Token     string `json:"token"`
	ElectedAt string `json:"elected_at"` // RFC 3339, by Redis's clock
}

func toLeaderJSON(l leaderRecord) leaderJSON {
	return leaderJSON{Value: l.Value, Term: l.Term, Owner: l.Owner, ClientID: l.ClientID, Token: l.Token,
		ElectedAt: l.Elected.Format(time.RFC3339Nano)}
}

// withElection returns j, a lock's JSON, as an election's when el is not nil.
func withElection(j lockJSON, el *electionState) lockJSON {
	if el == nil {
		return j
	}
	j.Kind = string(relock.KindElection)
	ej := &electionJSON{Recent: []leaderJSON{}}
	for _, l := range el.Recent {
		ej.Recent = append(ej.Recent, toLeaderJSON(l))
	}
	if el.Leader != nil {
		lj := toLeaderJSON(*el.Leader)
		ej.Leader = &lj
	}
	j.Election = ej
	return j
}

// electionSummary is inspect's one line on what state the election is in.
func electionSummary(st relock.LockState, el *electionState) string {
	var b strings.Builder
	switch {
	case el.Leader != nil:
		fmt.Fprintf(&b, "led by %q (term %d), TTL %s", el.Leader.Value, el.Leader.Term, fmtTTL(st.TTL))
	case st.Locked:
		fmt.Fprintf(&b, "held, its leader not recorded (yet), TTL %s", fmtTTL(st.TTL))
	default:
		b.WriteString("no leader")
		if len(el.Recent) > 0 {
			last := el.Recent[0]
			fmt.Fprintf(&b, " (the last, %q in term %d, resigned or lost the leadership)", last.Value, last.Term)
		}
	}
	if st.QueueLen > 0 {
		fmt.Fprintf(&b, ", %d candidate%s waiting", st.QueueLen, plural(st.QueueLen))
	}
	return b.String()
}

// printLeaders prints an election's last leaders.
func printLeaders(w io.Writer, el *electionState) {
	fmt.Fprintln(w, "  last leaders, newest first:")
	for _, l := range el.Recent {
		fmt.Fprintf(w, "    term %d: %q, %s, elected %s\n", l.Term, l.Value, ownerText(l.ClientID, l.Token),
			l.Elected.Format("2006-01-02 15:04:05.000 MST"))
	}
}

// leaderText is list's cell for an election's holder.
func leaderText(st relock.LockState, el *electionState) string {
	if el.Leader == nil {
		return holdersText(st.Holders) + " (leader not recorded)"
	}
	return fmt.Sprintf("leader %q (%s)", el.Leader.Value, holdersText(st.Holders))
}
