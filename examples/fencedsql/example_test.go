package fencedsql_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/relock-go/relock"
	"github.com/relock-go/relock/examples/fencedsql"
)

// The examples connect to redisAddr, a redis-server the tests start, and to postgresURL, the PostgreSQL
// the tests use ($RELOCK_TEST_POSTGRES); exampleTable is a table name of their own. In your code they are
// your Redis address, your database's URL and your table. Where Redis or PostgreSQL cannot be reached,
// the examples are left out of the run (see TestMain).

// A holder paused past its lease comes back after the next holder took stock: its read-modify-write,
// with its old token, is refused as a whole, and the next holder's write stands.
func ExampleTable_Update() {
	ctx := context.Background()
	db, err := pgx.Connect(ctx, postgresURL)
	if err != nil {
		panic(err)
	}
	defer db.Close(ctx)
	stock := fencedsql.NewTable(db, exampleTable)
	if err := stock.Create(ctx); err != nil {
		panic(err)
	}
	defer db.Exec(ctx, "DROP TABLE "+pgx.Identifier{exampleTable}.Sanitize()) // the example's own table
	_ = stock.Insert(ctx, "widgets", 10)

	// Two processes take widgets under one fenced lock.
	first, _ := relock.New([]string{redisAddr}, nil)
	defer first.Close()
	second, _ := relock.New([]string{redisAddr}, nil)
	defer second.Close()

	// The first holder's lease runs out while it is paused (a GC, a stalled VM).
	l1 := first.Lock("example:stock:widgets", relock.WithFencing())
	_ = l1.LockWithLease(ctx, 100*time.Millisecond)
	token1, _ := l1.FencingToken(ctx)

	// The second gets the lock once the lease has run out, and takes 3 widgets.
	l2 := second.Lock("example:stock:widgets", relock.WithFencing())
	_ = l2.Lock(ctx)
	token2, _ := l2.FencingToken(ctx)
	left, err := stock.Update(ctx, "widgets", token2, func(n int64) (int64, error) { return n - 3, nil })
	fmt.Println("second holder:", left, "left,", err)
	_ = l2.Unlock(ctx)

	// The first resumes, unaware, and takes 5 widgets with its old token.
	_, err = stock.Update(ctx, "widgets", token1, func(n int64) (int64, error) { return n - 5, nil })
	fmt.Println("first holder refused:", errors.Is(err, fencedsql.ErrStaleToken))
	// Output:
	// second holder: 7 left, <nil>
	// first holder refused: true
}
