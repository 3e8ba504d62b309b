package relockgoredis_test

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	relockgoredis "github.com/relock-go/relock/goredis"
)

// A service that has a go-redis client takes a lock with it: the commands go through its pool. The
// example connects to redisAddr, a redis-server the tests start; in your code, it is your client.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	ctx := context.Background()

	c, err := relockgoredis.New(rdb, nil)
	if err != nil {
		panic(err)
	}
	defer c.Close() // before rdb's: relock gives up what it holds through it
	l := c.Lock("orders:42")
	if err := l.Lock(ctx); err != nil {
		panic(err)
	}
	n, _ := l.HoldCount(ctx)
	fmt.Println("held:", n)
	if err := l.Unlock(ctx); err != nil {
		panic(err)
	}
	// Output: held: 1
}
