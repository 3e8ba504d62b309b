package relock

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/relock-go/relock/internal/luasrc"
)

// Every lua/lib file is included somewhere, and every script loads with its includes expanded.
func TestScriptIncludes(t *testing.T) {
	libs, err := fs.Glob(luaFiles, "lua/lib/*.lua")
	if err != nil || len(libs) == 0 {
		t.Fatalf("lua/lib: %v %v", libs, err)
	}
	used := map[string]bool{}
	scripts, _ := fs.Glob(luaFiles, "lua/*.lua")
	for _, path := range scripts {
		name := strings.TrimSuffix(strings.TrimPrefix(path, "lua/"), ".lua")
		raw, _ := fs.ReadFile(luaFiles, path)
		s := loadScript(name)
		if strings.Contains(s.src, luasrc.IncludePrefix) {
			t.Errorf("%s: an include was left unexpanded", name)
		}
		for _, lib := range libs {
			if strings.Contains(string(raw), luasrc.IncludePrefix+strings.TrimPrefix(lib, "lua/")) {
				used[lib] = true
				libSrc, _ := fs.ReadFile(luaFiles, lib)
				if !strings.Contains(s.src, strings.TrimSpace(string(libSrc))) {
					t.Errorf("%s: %s not expanded into it", name, lib)
				}
			}
		}
	}
	for _, lib := range libs {
		if !used[lib] {
			t.Errorf("%s is included nowhere", lib)
		}
	}
}

// lateContext is a context whose deadline has passed but whose timer has not fired yet, as on a loaded
// machine: Err is still nil.
type lateContext struct{ context.Context }

func (lateContext) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// An error of a call that returns past its context's deadline matches context.DeadlineExceeded, even
// before the context's timer fires (CI saw EOF from such a call).
func TestWrapErrCtxPastDeadline(t *testing.T) {
	err := wrapErrCtx(lateContext{context.Background()}, "holdcount", "x", io.EOF)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, io.EOF) {
		t.Fatalf("wrapErrCtx past the deadline = %v, want DeadlineExceeded and EOF", err)
	}
	if err := wrapErrCtx(context.Background(), "holdcount", "x", io.EOF); errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wrapErrCtx without a deadline = %v", err)
	}
}
