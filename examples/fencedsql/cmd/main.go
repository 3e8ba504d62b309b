// Command cmd shows fenced writes to PostgreSQL (package fencedsql) against a Redis server and a
// PostgreSQL database: two Clients' goroutines take turns on a fenced lock to add to a counter row, then a
// holder whose lease ran out while it was paused comes back after the next holder wrote, and its
// read-modify-write is refused. It creates the table relock_fencedsql_demo and drops it at the end.
//
//	REDIS_ADDR=127.0.0.1:6379 POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test go run ./examples/fencedsql/cmd
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/examples/fencedsql"
)

func main() {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	dbURL := os.Getenv("POSTGRES_URL")
	if dbURL == "" {
		dbURL = "postgres://postgres@127.0.0.1:5432/test"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	db, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	// A table left by an earlier run that stopped half-way goes first.
	if _, err := db.Exec(ctx, "DROP TABLE IF EXISTS relock_fencedsql_demo"); err != nil {
		log.Fatalf("connecting to %s: %v", dbURL, err)
	}
	table := fencedsql.NewTable(db, "relock_fencedsql_demo")
	if err := table.Create(ctx); err != nil {
		log.Fatalf("creating the table in %s: %v", dbURL, err)
	}
	defer db.Exec(context.Background(), "DROP TABLE relock_fencedsql_demo")

	// Two Clients stand for two processes.
	a, err := relock.New([]string{addr}, nil)
	if err != nil {
		log.Fatalf("connecting to %s: %v", addr, err)
	}
	defer a.Close()
	b, err := relock.New([]string{addr}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	// 1. Under the lock: 4 goroutines per Client each add 1 to the counter 25 times, each read-modify-write
	// fenced with its hold's token.
	_ = table.Insert(ctx, "counter", 0)
	var wg sync.WaitGroup
	for _, c := range []*relock.Client{a, b} {
		for range 4 {
			wg.Go(func() {
				l := c.Lock("relock:fencedsql:counter", relock.WithFencing())
				for range 25 {
					if err := l.Lock(ctx); err != nil {
						log.Fatal(err)
					}
					token, _ := l.FencingToken(ctx)
					if _, err := table.Update(ctx, "counter", token, func(n int64) (int64, error) { return n + 1, nil }); err != nil {
						log.Fatal(err)
					}
					if err := l.Unlock(ctx); err != nil {
						log.Fatal(err)
					}
				}
			})
		}
	}
	wg.Wait()
	var n int64 // a plain read: it claims nothing
	if err := db.QueryRow(ctx, "SELECT value FROM relock_fencedsql_demo WHERE id = 'counter'").Scan(&n); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("counter = %d after 200 fenced increments from 2 clients x 4 goroutines\n", n)

	// 2. A holder paused past its lease: its late read-modify-write is refused, the next holder's stands.
	_ = table.Insert(ctx, "stock", 10)
	first := a.Lock("relock:fencedsql:stock", relock.WithFencing())
	if err := first.LockWithLease(ctx, 300*time.Millisecond); err != nil {
		log.Fatal(err)
	}
	stale, _ := first.FencingToken(ctx)
	second := b.Lock("relock:fencedsql:stock", relock.WithFencing())
	if err := second.Lock(ctx); err != nil { // once the first holder's lease has run out
		log.Fatal(err)
	}
	token, _ := second.FencingToken(ctx)
	left, err := table.Update(ctx, "stock", token, func(n int64) (int64, error) { return n - 3, nil })
	fmt.Printf("second holder (token %d) takes 3: %d left, %v\n", token, left, err)
	_ = second.Unlock(ctx)
	_, err = table.Update(ctx, "stock", stale, func(n int64) (int64, error) { return n - 5, nil })
	fmt.Printf("first holder (token %d), resumed, takes 5: refused: %v\n  %v\n", stale, errors.Is(err, fencedsql.ErrStaleToken), err)
}
