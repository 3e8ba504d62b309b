package relock

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/relock-go/relock/internal/luasrc"
)

// Every lua/lib file is included somewhere; every script loads with its includes expanded, and defines
// every function of lua/lib that it names (luasrc drops the included functions a script does not call).
func TestScriptIncludes(t *testing.T) {
	libs, err := fs.Glob(luaFiles, "lua/lib/*.lua")
	if err != nil || len(libs) == 0 {
		t.Fatalf("lua/lib: %v %v", libs, err)
	}
	var funcs []string
	definition := regexp.MustCompile(`(?m)^local function (\w+)\(`)
	comment := regexp.MustCompile(`--.*`)
	for _, lib := range libs {
		src, _ := fs.ReadFile(luaFiles, lib)
		for _, m := range definition.FindAllStringSubmatch(string(src), -1) {
			funcs = append(funcs, m[1])
		}
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
			}
		}
		code := comment.ReplaceAllString(s.src, "")
		for _, f := range funcs {
			if regexp.MustCompile(`\b`+f+`\b`).MatchString(code) && !strings.Contains(code, "local function "+f+"(") {
				t.Errorf("%s: calls %s but does not define it", name, f)
			}
		}
	}
	for _, lib := range libs {
		if !used[lib] {
			t.Errorf("%s is included nowhere", lib)
		}
	}
}

// The uncontended Lock and Unlock define no function in Redis: the common case of the acquisition and of
// the release returns before the first function of its script, since Redis makes a closure of every
// function a script defines on every run (docs/performance.md, Scripts).
func TestCommonCaseBeforeAnyFunction(t *testing.T) {
	for _, s := range []*script{scriptAcquire, scriptRelease, scriptFairAcquire, scriptFairRelease, scriptRWWriteAcquire, scriptRWWriteRelease,
		scriptRWReadAcquire, scriptRWReadRelease} {
		fn := strings.Index(s.src, "\nlocal function ")
		ret := strings.Index(s.src, "\n  return ") // indented: inside the common case's block
		if r := strings.Index(s.src, "\n    return "); r >= 0 && (ret < 0 || r < ret) {
			ret = r
		}
		if fn < 0 || ret < 0 || ret > fn {
			t.Errorf("%s: its common case does not return before its first function (return at %d, function at %d)", s.name, ret, fn)
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
