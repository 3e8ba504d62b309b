package relockvalkey_test

import (
	"context"
	"fmt"

	"github.com/valkey-io/valkey-go"

	relockvalkey "github.com/relock-go/relock/valkey"
)

// A service that has a valkey-go client takes a lock with it. The example connects to redisAddr, a
// redis-server the tests start; in your code, it is your client (Valkey or Redis).
func ExampleNew() {
	vk, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{redisAddr}})
	if err != nil {
		panic(err)
	}
	defer vk.Close()
	ctx := context.Background()

	c, err := relockvalkey.New(vk, nil)
	if err != nil {
		panic(err)
	}
	defer c.Close() // before vk's: relock gives up what it holds through it
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
