package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/internal/redistest"
)

// prune deletes the stream of leaders of an election nobody leads or campaigns in, and nothing else: a led
// election keeps its stream, every election keeps its fencing counter, and the next leader of a pruned one
// gets a term above the old ones, is recorded afresh and is delivered to an observer that was watching.
func TestPruneIdleElections(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, prefix string }{{"single", "el:"}, {"cluster", "{el}:"}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var addrs []string
			if tc.name == "single" {
				addrs = []string{redistest.Start(t).Addr()}
			} else {
				addrs = redistest.StartCluster(t, 3, 0).Addrs()
			}
			addr := strings.Join(addrs, ",")
			c := newLockClient(t, addrs)
			ctx := testCtx(t)
			idle, led := c.Election(tc.prefix+"idle"), c.Election(tc.prefix+"led")
			one := relock.WithOwner(ctx, "one")
			term1, err := idle.Campaign(one, "10.0.0.1:80")
			if err != nil {
				t.Fatal(err)
			}
			if err := idle.Resign(one); err != nil {
				t.Fatal(err)
			}
			if _, err := led.Campaign(one, "10.0.0.2:80"); err != nil {
				t.Fatal(err)
			}
			observed, err := idle.Observe(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if l := <-observed; l.Term != term1 {
				t.Fatalf("observed %+v first, want the leader of term %d", l, term1)
			}
			time.Sleep(20 * time.Millisecond)

			// Recent elections are kept, and a dry run deletes nothing.
			out, _ := mustRun(t, 0, "", "prune", "--redis", addr)
			if !strings.Contains(out, "kept: last leader elected less than --idle ago") || !strings.Contains(out, "kept: it has a leader") || !strings.Contains(out, "pruned 0 of 2") {
				t.Fatalf("prune with the default --idle:\n%s", out)
			}
			out, _ = mustRun(t, 0, "", "prune", "--idle", "10ms", "--dry-run", "--redis", addr)
			if !strings.Contains(out, "would prune 1 of 2") {
				t.Fatalf("prune --dry-run:\n%s", out)
			}
			if _, err := idle.Leader(ctx); err == nil || !strings.Contains(out, tc.prefix+"idle") {
				t.Fatalf("Leader after a resign: %v; output:\n%s", err, out)
			}
			stream := func(e *relock.Election) string {
				if strings.Contains(e.Name(), "{") {
					return "relock_election:" + e.Name()
				}
				return "relock_election:{" + e.Name() + "}"
			}
			rdb := rawRedis(t, addrs)
			for _, e := range []*relock.Election{idle, led} {
				if n, _ := rdb.Do(ctx, rdb.B().Exists().Key(stream(e)).Build()).AsInt64(); n != 1 {
					t.Fatalf("%s's stream is gone after a dry run", e.Name())
				}
			}

			out, _ = mustRun(t, 0, "", "prune", "--idle", "10ms", "--json", "--redis", addr)
			var got []pruneJSON
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("prune --json: %v\n%s", err, out)
			}
			want := map[string]string{idle.Name(): "pruned", led.Name(): "led"}
			if len(got) != 2 || got[0].Outcome != want[got[0].Name] || got[1].Outcome != want[got[1].Name] || got[0].LastElectedAt == "" {
				t.Fatalf("prune --json: %+v, want %v", got, want)
			}
			if n, _ := rdb.Do(ctx, rdb.B().Exists().Key(stream(idle)).Build()).AsInt64(); n != 0 {
				t.Fatal("the idle election's stream is still there")
			}
			if n, _ := rdb.Do(ctx, rdb.B().Exists().Key(stream(led)).Build()).AsInt64(); n != 1 {
				t.Fatal("the led election's stream was deleted")
			}
			counter := "redisson_lock_token:{" + idle.Name() + "}"
			if strings.Contains(idle.Name(), "{") {
				counter = "redisson_lock_token:" + idle.Name()
			}
			if v, _ := rdb.Do(ctx, rdb.B().Get().Key(counter).Build()).AsUint64(); v != term1 {
				t.Fatalf("the fencing counter is %d after prune, want %d (kept)", v, term1)
			}

			// The election goes on: a new leader's term is above the old one's, Leader finds it, and the
			// observer that watched through the prune is given it.
			term2, err := idle.Campaign(relock.WithOwner(ctx, "two"), "10.0.0.3:80")
			if err != nil {
				t.Fatal(err)
			}
			if term2 <= term1 {
				t.Fatalf("term after prune %d, want above %d", term2, term1)
			}
			if l, err := idle.Leader(ctx); err != nil || l.Term != term2 || l.Value != "10.0.0.3:80" {
				t.Fatalf("Leader after prune: %+v, %v", l, err)
			}
			select {
			case l := <-observed:
				if l.Term != term2 || l.Restarted {
					t.Fatalf("observed %+v after prune, want term %d, not restarted", l, term2)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the observer was not given the leader elected after prune")
			}
		})
	}
}

// rawRedis is a plain rueidis client of addrs, closed with t.
func rawRedis(t *testing.T, addrs []string) rueidis.Client {
	t.Helper()
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rdb.Close)
	return rdb
}
