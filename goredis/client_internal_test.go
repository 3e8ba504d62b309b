package relockgoredis

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/internal/testutil"
)

// Replies reach relock as rueidis reads them from Redis: integers, strings, nil, arrays and maps nested,
// error replies (top-level and inside an array). go-redis does not tell a status reply from a string, nor
// keeps a map's order: neither is a difference relock reads.
func TestRepliesKeepTheirMeaning(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	raw, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	a, _ := adapt(rdb)
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
		if g, w := meaning(&gm), meaning(&wm); !reflect.DeepEqual(g, w) {
			t.Fatalf("%s: the reply through go-redis means\n%#v, rueidis reads\n%#v", script, g, w)
		}
		_, gerr := rueidis.IsRedisErr(got.Error())
		_, werr := rueidis.IsRedisErr(want.Error())
		if gerr != werr || (gerr && got.Error().Error() != want.Error().Error()) {
			t.Fatalf("%s: error %v, want %v", script, got.Error(), want.Error())
		}
	}
}

// meaning is what relock may read of m: its value, by kind, maps by key.
func meaning(m *rueidis.RedisMessage) any {
	switch {
	case m.IsNil():
		return nil
	case m.IsInt64():
		n, _ := m.AsInt64()
		return n
	case m.IsBool():
		b, _ := m.AsBool()
		return b
	case m.IsMap():
		kv, _ := m.AsMap()
		out := map[string]any{}
		for k, v := range kv {
			out[k] = meaning(&v)
		}
		return out
	case m.IsArray():
		vs, _ := m.ToArray()
		out := make([]any, len(vs))
		for i := range vs {
			out[i] = meaning(&vs[i])
		}
		return out
	}
	if err := m.Error(); err != nil {
		return fmt.Sprintf("error %v", err)
	}
	s, _ := m.ToString()
	return s
}
