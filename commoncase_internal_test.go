package relock

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/luasrc"
	"github.com/relock-go/relock/internal/redistest"
)

// generalOnly returns the script name with its common case turned off: the "if" after its "-- @common"
// line never holds, so that every run takes the general code below it.
func generalOnly(t *testing.T, name string) *script {
	t.Helper()
	lua, err := fs.Sub(luaFiles, "lua")
	if err != nil {
		t.Fatal(err)
	}
	files := fstest.MapFS{}
	err = fs.WalkDir(lua, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(lua, path)
		files[path] = &fstest.MapFile{Data: data}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(files[name+".lua"].Data), "\n")
	marks := 0
	for i, line := range lines {
		if strings.HasPrefix(line, "-- @common") {
			next, ok := strings.CutPrefix(lines[i+1], "if ")
			if !ok {
				t.Fatalf("%s.lua: the line after -- @common is no if: %q", name, lines[i+1])
			}
			lines[i+1] = "if false and " + next
			marks++
		}
	}
	if marks != 1 {
		t.Fatalf("%s.lua: %d -- @common lines, want 1", name, marks)
	}
	files[name+".lua"] = &fstest.MapFile{Data: []byte(strings.Join(lines, "\n"))}
	text, err := luasrc.Load(files, name)
	if err != nil {
		t.Fatal(err)
	}
	return newScript(name+" (general code only)", text)
}

// The common case that each acquisition and release script runs before it defines any function (see
// TestCommonCaseBeforeAnyFunction) does exactly what its general code does: the same sequences of
// acquisitions and releases, run on two names, one with the scripts as they are, the other with their
// common case turned off, get the same replies and leave the same keys, values and expiries behind them,
// step by step: free names, reentries, fencing, non-owners, void and repeated requests, undos, waiters,
// shared read holds, reads under the write lock.
func TestCommonCaseDoesWhatTheGeneralCodeDoes(t *testing.T) {
	srv := redistest.Start(t)
	c, err := New([]string{srv.Addr()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	general := map[*script]*script{}
	for _, s := range []*script{scriptAcquire, scriptRelease, scriptFairAcquire, scriptFairRelease,
		scriptRWWriteAcquire, scriptRWWriteRelease, scriptRWReadAcquire, scriptRWReadRelease} {
		general[s] = generalOnly(t, s.name)
	}
	owner1, owner2 := c.id+":1", c.id+":2"
	type op struct {
		name string
		run  func(l *RLock) scriptCall
	}
	acquire := func(owner, attempt string, join bool) op {
		return op{fmt.Sprintf("acquire %s %s join=%v", owner[len(c.id):], attempt, join), func(l *RLock) scriptCall {
			return l.spec.acquire(acquireCall{ttl: "30000", owner: owner, field: l.spec.field(owner), join: join,
				publish: "publish", attempt: attempt}, nil)
		}}
	}
	release := func(owner, request, expected string) op {
		return op{fmt.Sprintf("release %s %q expected %q", owner[len(c.id):], request, expected), func(l *RLock) scriptCall {
			return l.spec.release(releaseCall{field: l.spec.field(owner), expected: expected, request: request, publish: "publish"}, nil)
		}}
	}
	// Sequences every kind runs, each on names of its own.
	common := [][]op{
		{acquire(owner1, "a1", false), release(owner1, "!r1", "")},
		{acquire(owner1, "a1", true), acquire(owner1, "a2", false), release(owner1, "!r1", ""), release(owner1, "!r2", "")},
		{acquire(owner1, "a1", false), release(owner2, "!r1", ""), release(owner1, "", "2"), release(owner1, "", "1")},
		// A repeat applied, then its first sending arriving late (void), then a new hold released while
		// the void marks live.
		{acquire(owner1, "a1", false), release(owner1, "?r1", ""), release(owner1, "!r1", ""),
			acquire(owner1, "a2", false), release(owner1, "!r2", "")},
		// A waiter: the release that frees the lock has somebody to wake.
		{acquire(owner1, "a1", false), acquire(owner2, "a2", true), release(owner1, "!r1", ""),
			acquire(owner2, "a3", true), release(owner2, "!r2", "")},
		{release(owner1, "!r1", "")},
	}
	kinds := []struct {
		name  string
		lock  func(name string) *RLock
		extra [][]op
	}{
		{"rlock", func(n string) *RLock { return c.Lock(n) }, nil},
		{"fenced rlock", func(n string) *RLock { return c.Lock(n, WithFencing()) }, nil},
		{"fair", func(n string) *RLock { return c.FairLock(n) }, nil},
		{"fenced fair", func(n string) *RLock { return c.FairLock(n, WithFencing()) }, nil},
		{"write", func(n string) *RLock { return c.ReadWriteLock(n).WriteLock() }, [][]op{
			// The writer reads too (a downgrade at its write release).
			{acquire(owner1, "a1", false), {"read " + "a2", func(l *RLock) scriptCall {
				return c.ReadWriteLock(l.name).ReadLock().spec.acquire(acquireCall{ttl: "30000", owner: owner1,
					field: owner1, attempt: "a2"}, nil)
			}}, release(owner1, "!r1", "")},
		}},
		{"fenced write", func(n string) *RLock { return c.ReadWriteLock(n, WithFencing()).WriteLock() }, nil},
		// A waiting writer's claim is among the priority writers when it takes the free lock.
		{"priority write", func(n string) *RLock { return c.ReadWriteLock(n, WithWriterPriority()).WriteLock() }, nil},
		{"read", func(n string) *RLock { return c.ReadWriteLock(n).ReadLock() }, [][]op{
			// Two readers share the lock.
			{acquire(owner1, "a1", false), acquire(owner2, "a2", false), release(owner1, "!r1", ""), release(owner2, "!r2", "")},
		}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			for i, seq := range append(common, k.extra...) {
				slug := strings.ReplaceAll(k.name, " ", "-")
				names := [2]string{fmt.Sprintf("cc:%s:%d:as-is", slug, i), fmt.Sprintf("cc:%s:%d:general", slug, i)}
				locks := [2]*RLock{k.lock(names[0]), k.lock(names[1])}
				for j, o := range seq {
					var got [2]string
					for side, l := range locks {
						call := o.run(l)
						s := call.script
						if side == 1 {
							if s = general[call.script]; s == nil {
								t.Fatalf("no general form of %s", call.script.name)
							}
						}
						got[side] = replyText(c.run(ctx, s, call.keys, call.args), names[side]) + "\n" + keyspace(t, ctx, c.rdb, names[side])
					}
					if got[0] != got[1] {
						t.Fatalf("sequence %d, step %d (%s): the scripts as they are and their general code differ\nas they are:\n%s\ngeneral code:\n%s",
							i, j, o.name, got[0], got[1])
					}
				}
			}
		})
	}
}

// replyText is a script's reply, or its error, with name written N; numbers above 1000 (times to live,
// waits) are written as their sign, since the two runs are made a moment apart.
func replyText(r rueidis.RedisResult, name string) string {
	v, err := r.ToAny()
	if err != nil {
		return "error: " + strings.ReplaceAll(err.Error(), name, "N")
	}
	var text func(v any) string
	text = func(v any) string {
		switch v := v.(type) {
		case int64:
			if v > 1000 {
				return "+big"
			}
			return fmt.Sprint(v)
		case []any:
			parts := make([]string, len(v))
			for i, e := range v {
				parts[i] = text(e)
			}
			return "[" + strings.Join(parts, " ") + "]"
		}
		return strings.ReplaceAll(fmt.Sprint(v), name, "N")
	}
	return text(v)
}

// keyspace describes every key whose name holds name: its type, contents (a sorted set's members without
// their scores, which are times) and whether it expires, with name written N, sorted.
func keyspace(t *testing.T, ctx context.Context, rdb rueidis.Client, name string) string {
	t.Helper()
	keys, err := rdb.Do(ctx, rdb.B().Keys().Pattern("*"+name+"*").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, k := range keys {
		typ, err := rdb.Do(ctx, rdb.B().Type().Key(k).Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		var content []string
		switch typ {
		case "hash":
			m, _ := rdb.Do(ctx, rdb.B().Hgetall().Key(k).Build()).AsStrMap()
			for f, v := range m {
				content = append(content, f+"="+v)
			}
			slices.Sort(content)
		case "string":
			v, _ := rdb.Do(ctx, rdb.B().Get().Key(k).Build()).ToString()
			content = []string{v}
		case "zset":
			content, _ = rdb.Do(ctx, rdb.B().Zrange().Key(k).Min("0").Max("-1").Build()).AsStrSlice()
		case "list":
			content, _ = rdb.Do(ctx, rdb.B().Lrange().Key(k).Start(0).Stop(-1).Build()).AsStrSlice()
		case "set":
			content, _ = rdb.Do(ctx, rdb.B().Smembers().Key(k).Build()).AsStrSlice()
			slices.Sort(content)
		default:
			content = []string{"?"}
		}
		ttl, _ := rdb.Do(ctx, rdb.B().Pttl().Key(k).Build()).AsInt64()
		expires := "expires"
		if ttl < 0 {
			expires = fmt.Sprint(ttl)
		}
		out = append(out, fmt.Sprintf("%s %s %s %v", strings.ReplaceAll(k, name, "N"), typ, expires, content))
	}
	slices.Sort(out)
	return strings.ReplaceAll(strings.Join(out, "\n"), name, "N")
}
