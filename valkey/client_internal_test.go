package relockvalkey

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/valkey-io/valkey-go"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/internal/testutil"
)

// Replies reach relock as rueidis reads them from Redis: each of RESP's forms, nested, error replies
// (top-level and inside an array) and nil included.
func TestRepliesKeepTheirForm(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	vk, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer vk.Close()
	raw, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	a := &client{vk: vk}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, script := range testutil.ReplyScripts {
		got := a.Do(ctx, builder.Eval().Script(script).Numkeys(0).Build())
		want := raw.Do(ctx, raw.B().Eval().Script(script).Numkeys(0).Build())
		if (got.NonRedisError() == nil) != (want.NonRedisError() == nil) {
			t.Fatalf("%s: %v, want %v", script, got.NonRedisError(), want.NonRedisError())
		}
		gm, _ := got.ToMessage()
		wm, _ := want.ToMessage()
		if g, w := gm.CacheMarshal(nil), wm.CacheMarshal(nil); !bytes.Equal(g[7:], w[7:]) {
			t.Fatalf("%s: the reply through valkey-go is\n%q, rueidis reads\n%q", script, g[7:], w[7:])
		}
		if _, ok := rueidis.IsRedisErr(got.Error()); ok != (want.Error() != nil && !rueidis.IsRedisNil(want.Error())) {
			t.Fatalf("%s: error %v, want %v", script, got.Error(), want.Error())
		}
	}
}
