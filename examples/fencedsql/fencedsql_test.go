package fencedsql_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/examples/fencedsql"
	"github.com/relock-go/relock/internal/redistest"
)

// postgresEnv names the PostgreSQL the tests use, as a URL or a keyword/value connection string; they
// create tables in it (fencedsql_test_<random>) and drop them. When it is set, or CI=true, a PostgreSQL
// that cannot be reached fails the tests instead of skipping them.
const postgresEnv = "RELOCK_TEST_POSTGRES"

const defaultPostgres = "postgres://postgres@127.0.0.1:5432/test"

var (
	postgresURL  string // the PostgreSQL the tests and examples use
	redisAddr    string // the redis-server TestMain started
	exampleTable string // a table name of the examples' own, unique to this run
	skipReason   string // why the tests skip, if they do
)

func TestMain(m *testing.M) {
	flag.Parse()
	redistest.AdoptOrphans()
	code := run(m)
	os.Exit(redistest.CheckProcesses(code, 5*time.Second))
}

func run(m *testing.M) int {
	postgresURL = os.Getenv(postgresEnv)
	required := postgresURL != ""
	if postgresURL == "" {
		postgresURL = defaultPostgres
	}
	ci := os.Getenv("CI") == "true"
	if err := pingPostgres(postgresURL); err != nil {
		msg := fmt.Sprintf("PostgreSQL at %s is not reachable (%v): set %s to the URL of one the tests may create tables in",
			redacted(postgresURL), err, postgresEnv)
		if required || ci {
			fmt.Fprintf(os.Stderr, "fencedsql: %s (failing, not skipping: %s is set or CI=true)\n", msg, postgresEnv)
			return 1
		}
		skipReason = msg
	}
	if skipReason == "" {
		srv, err := redistest.StartServer()
		if err != nil {
			if ci {
				fmt.Fprintf(os.Stderr, "fencedsql: %v\n", err)
				return 1
			}
			skipReason = err.Error()
		} else {
			defer srv.Stop()
			redisAddr = srv.Addr()
		}
	}
	if skipReason != "" {
		// Each test skips with this reason. An example cannot skip, and its output would not match: leave
		// the examples out of the run (every test skips, so no -skip of the caller's is lost).
		fmt.Fprintf(os.Stderr, "fencedsql: skipping the tests and examples: %s\n", skipReason)
		if err := flag.Set("test.skip", "^Example"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	exampleTable = uniqueName("fencedsql_example")
	return m.Run()
}

func pingPostgres(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

// redacted hides a URL's password; a keyword/value string is not shown at all.
func redacted(s string) string {
	if u, err := url.Parse(s); err == nil && u.Scheme != "" {
		return u.Redacted()
	}
	return "the one " + postgresEnv + " names"
}

func uniqueName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}

// fixture is a table of the test's own in the PostgreSQL, dropped when the test ends, and a pool its
// goroutines share.
type fixture struct {
	*fencedsql.Table
	pool *pgxpool.Pool
	name string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, postgresURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	f := &fixture{pool: pool, name: uniqueName("fencedsql_test")}
	f.Table = fencedsql.NewTable(pool, f.name)
	if err := f.Create(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgx.Identifier{f.name}.Sanitize()); err != nil {
			t.Errorf("dropping %s: %v", f.name, err)
		}
	})
	return f
}

// row reads a row as it is, without claiming it.
func (f *fixture) row(t *testing.T, id string) (value, fence int64) {
	t.Helper()
	err := f.pool.QueryRow(context.Background(),
		"SELECT value, fence FROM "+pgx.Identifier{f.name}.Sanitize()+" WHERE id = $1", id).Scan(&value, &fence)
	if err != nil {
		t.Fatal(err)
	}
	return value, fence
}

func newClient(t *testing.T) *relock.Client {
	t.Helper()
	c, err := relock.New([]string{redisAddr}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// lockName is a lock name of the test's own: the tests share one redis-server, and a fenced lock's
// counter outlives its holds.
func lockName(t *testing.T) string { return uniqueName("fencedsql:" + t.Name()) }

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Two Clients' goroutines add 1 to a counter under a fenced lock, each with its hold's token: no update
// is lost, none is refused, and the row's fence is the last holder's token.
func TestLockedIncrementsAreExact(t *testing.T) {
	tbl := newFixture(t)
	ctx := testContext(t)
	if err := tbl.Insert(ctx, "counter", 0); err != nil {
		t.Fatal(err)
	}
	name := lockName(t)
	const goroutines, increments = 4, 10
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		highest uint64
	)
	for _, c := range []*relock.Client{newClient(t), newClient(t)} {
		for range goroutines {
			wg.Go(func() {
				l := c.Lock(name, relock.WithFencing())
				for range increments {
					if err := l.Lock(ctx); err != nil {
						t.Error(err)
						return
					}
					token, err := l.FencingToken(ctx)
					if err == nil {
						_, err = tbl.Update(ctx, "counter", token, func(n int64) (int64, error) { return n + 1, nil })
					}
					if err != nil {
						t.Errorf("token %d: %v", token, err)
					}
					mu.Lock()
					highest = max(highest, token)
					mu.Unlock()
					if err := l.Unlock(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	value, fence := tbl.row(t, "counter")
	if want := int64(2 * goroutines * increments); value != want {
		t.Errorf("counter = %d after %d locked increments", value, want)
	}
	if fence != int64(highest) {
		t.Errorf("fence = %d, want the highest token, %d", fence, highest)
	}
}

// A holder paused past its hold (its lease ran out, or its lock was forced open) comes back after the
// next holder wrote: its read-modify-write with its old token is refused before its function runs, and
// the row keeps the next holder's value.
func TestStaleHolderIsRefused(t *testing.T) {
	for _, how := range []string{"lease ran out", "forced open"} {
		t.Run(how, func(t *testing.T) {
			tbl := newFixture(t)
			ctx := testContext(t)
			if err := tbl.Insert(ctx, "row", 10); err != nil {
				t.Fatal(err)
			}
			name := lockName(t)
			a := newClient(t).Lock(name, relock.WithFencing())
			b := newClient(t).Lock(name, relock.WithFencing())

			var err error
			if how == "lease ran out" {
				err = a.LockWithLease(ctx, 200*time.Millisecond)
			} else {
				err = a.Lock(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			tokenA, err := a.FencingToken(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// A is paused here. B gets the lock: once A's lease has run out, or at once when forced open.
			if how == "forced open" {
				if ok, err := b.ForceUnlock(ctx); !ok || err != nil {
					t.Fatalf("ForceUnlock = %v, %v", ok, err)
				}
			}
			if err := b.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			tokenB, err := b.FencingToken(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if tokenB <= tokenA {
				t.Fatalf("B's token %d is not greater than A's %d", tokenB, tokenA)
			}
			if v, err := tbl.Update(ctx, "row", tokenB, func(int64) (int64, error) { return 100, nil }); v != 100 || err != nil {
				t.Fatalf("B's update = %d, %v", v, err)
			}

			// A resumes, unaware, and does its read-modify-write with its old token.
			ran := false
			_, err = tbl.Update(ctx, "row", tokenA, func(n int64) (int64, error) { ran = true; return n + 1, nil })
			if !errors.Is(err, fencedsql.ErrStaleToken) {
				t.Fatalf("A's update with token %d after B's with %d: %v, want ErrStaleToken", tokenA, tokenB, err)
			}
			t.Logf("A's update: %v", err)
			if ran {
				t.Error("A's function ran: its read was not refused")
			}
			if value, fence := tbl.row(t, "row"); value != 100 || fence != int64(tokenB) {
				t.Errorf("row = %d (fence %d), want B's 100 (fence %d)", value, fence, tokenB)
			}
			if err := b.Unlock(ctx); err != nil {
				t.Error(err)
			}
		})
	}
}

// The read is fenced too. A reads, is paused past its lease, and B reads: with fenced reads, B's read
// claims the row, so A's write is refused (and A cannot even read for a write), where with fenced writes
// only A's write would be accepted and B's would overwrite it unseen: a lost update.
func TestFencedReadKeepsAnOldHolderOut(t *testing.T) {
	tbl := newFixture(t)
	ctx := testContext(t)
	for _, id := range []string{"fenced", "writes-only"} {
		if err := tbl.Insert(ctx, id, 10); err != nil {
			t.Fatal(err)
		}
	}
	name := lockName(t)
	a := newClient(t).Lock(name, relock.WithFencing())
	b := newClient(t).Lock(name, relock.WithFencing())
	if err := a.LockWithLease(ctx, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	tokenA, _ := a.FencingToken(ctx)
	readA, err := tbl.Read(ctx, "fenced", tokenA)
	if err != nil {
		t.Fatal(err)
	}
	plainA, _ := tbl.row(t, "writes-only") // a read that claims nothing

	// A is paused past its lease; B gets the lock and reads.
	if err := b.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	tokenB, _ := b.FencingToken(ctx)
	readB, err := tbl.Read(ctx, "fenced", tokenB)
	if err != nil {
		t.Fatal(err)
	}
	plainB, _ := tbl.row(t, "writes-only")

	// A resumes and writes its increment.
	if err := tbl.Write(ctx, "fenced", tokenA, readA+1); !errors.Is(err, fencedsql.ErrStaleToken) {
		t.Fatalf("A's write after B's fenced read: %v, want ErrStaleToken", err)
	}
	if _, err := tbl.Read(ctx, "fenced", tokenA); !errors.Is(err, fencedsql.ErrStaleToken) {
		t.Fatalf("A's read for a write after B's fenced read: %v, want ErrStaleToken", err)
	}
	if err := tbl.Write(ctx, "writes-only", tokenA, plainA+1); err != nil {
		t.Fatalf("A's write after B's unfenced read: %v (the unfenced row should accept it)", err)
	}

	// B writes its increment, twice with the same token: the holder's own claim lets it through.
	for i := range 2 {
		if err := tbl.Write(ctx, "fenced", tokenB, readB+1); err != nil {
			t.Fatalf("B's write %d: %v", i+1, err)
		}
	}
	if err := tbl.Write(ctx, "writes-only", tokenB, plainB+1); err != nil {
		t.Fatal(err)
	}
	if err := b.Unlock(ctx); err != nil {
		t.Error(err)
	}

	// Fenced: B's increment alone, A's refused and A told so. Writes only: two increments accepted, one kept.
	if v, fence := tbl.row(t, "fenced"); v != 11 || fence != int64(tokenB) {
		t.Errorf("fenced row = %d (fence %d), want 11 (fence %d)", v, fence, tokenB)
	}
	if v, _ := tbl.row(t, "writes-only"); v != 11 {
		t.Errorf("writes-only row = %d, want 11: A's accepted increment lost under B's", v)
	}
}

// Without any lock, holders with distinct tokens all at once: whatever the interleaving, the row counts
// exactly the read-modify-writes that were accepted (no lost update), a token once refused is refused for
// good, and the highest token is never refused. The store alone keeps the row right; the lock only makes
// refusals rare.
func TestNoLockNeededOnceTokensAreInPlay(t *testing.T) {
	for _, split := range []bool{false, true} {
		name := "Update"
		if split {
			name = "Read then Write"
		}
		t.Run(name, func(t *testing.T) {
			tbl := newFixture(t)
			ctx := testContext(t)
			if err := tbl.Insert(ctx, "counter", 0); err != nil {
				t.Fatal(err)
			}
			const holders, tries = 6, 15
			accepted := make([]int, holders)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for h := range holders {
				token := uint64(h + 1) // as a fenced lock hands them out; the store sees only numbers
				wg.Go(func() {
					<-start
					refused := false
					for range tries {
						var err error
						if split {
							var n int64
							if n, err = tbl.Read(ctx, "counter", token); err == nil {
								err = tbl.Write(ctx, "counter", token, n+1)
							}
						} else {
							_, err = tbl.Update(ctx, "counter", token, func(n int64) (int64, error) { return n + 1, nil })
						}
						switch {
						case err == nil && refused:
							t.Errorf("token %d accepted after it was refused", token)
						case err == nil:
							accepted[h]++
						case errors.Is(err, fencedsql.ErrStaleToken):
							refused = true
						default:
							t.Errorf("token %d: %v", token, err)
						}
					}
					if refused && token == holders {
						t.Errorf("the highest token, %d, was refused", token)
					}
				})
			}
			close(start)
			wg.Wait()
			total := 0
			for _, n := range accepted {
				total += n
			}
			value, fence := tbl.row(t, "counter")
			if value != int64(total) {
				t.Errorf("counter = %d, but %d read-modify-writes were accepted (per token: %v)", value, total, accepted)
			}
			if fence != holders {
				t.Errorf("fence = %d, want the highest token, %d", fence, holders)
			}
			t.Logf("accepted per token 1..%d: %v", holders, accepted)
		})
	}
}

// Tokens that no fenced lock gives, and rows that do not exist, are told apart from stale tokens.
func TestInvalidTokenAndMissingRow(t *testing.T) {
	tbl := newFixture(t)
	ctx := testContext(t)
	if err := tbl.Insert(ctx, "row", 1); err != nil {
		t.Fatal(err)
	}
	if err := tbl.Write(ctx, "row", 0, 2); !errors.Is(err, fencedsql.ErrInvalidToken) {
		t.Errorf("Write with token 0: %v, want ErrInvalidToken", err)
	}
	if _, err := tbl.Read(ctx, "row", 1<<63); !errors.Is(err, fencedsql.ErrInvalidToken) {
		t.Errorf("Read with token 2^63: %v, want ErrInvalidToken", err)
	}
	if _, err := tbl.Update(ctx, "missing", 1, func(n int64) (int64, error) { return n, nil }); !errors.Is(err, fencedsql.ErrNoRow) {
		t.Errorf("Update of a missing row: %v, want ErrNoRow", err)
	}
	if err := tbl.Write(ctx, "missing", 1, 2); !errors.Is(err, fencedsql.ErrNoRow) {
		t.Errorf("Write of a missing row: %v, want ErrNoRow", err)
	}
}
