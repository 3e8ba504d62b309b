// Package luasrc assembles relock's Lua scripts from the files of lua/: Redis scripts cannot load one
// another, so a script's "-- @include lib/<file>.lua" lines are replaced by that file (functions several
// scripts share). The library, its benchmarks and the peer benchmarks all load scripts through Load, so
// that they run the same text.
package luasrc

import (
	"fmt"
	"io/fs"
	"strings"
	"sync"
)

// IncludePrefix starts a line that Load replaces with the file it names.
const IncludePrefix = "-- @include "

// Load returns the script name (lua/<name>.lua, read from fsys, which holds lua/'s files) with its
// includes expanded, trimmed, and made light for Redis to run (see slim): only the script's first line of
// comment is kept, and only the included functions it calls.
func Load(fsys fs.FS, name string) (string, error) {
	src, err := fs.ReadFile(fsys, name+".lua")
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for line := range strings.Lines(strings.TrimSpace(string(src))) {
		lib, ok := strings.CutPrefix(strings.TrimSpace(line), IncludePrefix)
		if !ok {
			b.WriteString(line)
			continue
		}
		inc, err := fs.ReadFile(fsys, lib)
		if err != nil {
			return "", fmt.Errorf("%s.lua: %w", name, err)
		}
		b.WriteString(strings.TrimSpace(string(inc)))
		b.WriteByte('\n')
	}
	return slim(b.String()), nil
}

// slim returns the script src without its comment lines (but the first, which tells a reader of MONITOR
// or SLOWLOG what the script is), its blank lines, and the top-level local functions (a line "local
// function <name>(" through the next line "end", as lua/lib's files write them) that nothing left calls.
// Redis runs a script's whole text each time it runs it: every function defined there is a closure made
// on every run, so an included file's functions that the script does not call would cost each run for
// nothing.
func slim(src string) string {
	// The text in order: lines outside the top-level functions (fn == nil), and the functions.
	type function struct {
		name, text string
		used       bool
	}
	type segment struct {
		line string
		fn   *function
	}
	var (
		segments []segment
		outside  strings.Builder // every line outside the top-level functions
		funcs    []*function
		cur      *function
	)
	for line := range strings.Lines(src) {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") && len(segments) > 0 {
			continue
		}
		if cur == nil {
			if rest, ok := strings.CutPrefix(line, "local function "); ok {
				if i := strings.IndexByte(rest, '('); i > 0 {
					cur = &function{name: rest[:i]}
					funcs = append(funcs, cur)
					segments = append(segments, segment{fn: cur})
				}
			}
		}
		if cur == nil {
			segments = append(segments, segment{line: line})
			outside.WriteString(line)
			continue
		}
		cur.text += line
		if strings.TrimRight(line, "\r\n") == "end" {
			cur = nil
		}
	}
	if cur != nil { // a function without its "end" line: leave the text whole
		return strings.TrimSpace(src)
	}
	// A function is used when the text outside the functions, or a used function, names it.
	frontier := []string{outside.String()}
	for len(frontier) > 0 {
		text := frontier[0]
		frontier = frontier[1:]
		for _, f := range funcs {
			if !f.used && names(text, f.name) {
				f.used = true
				frontier = append(frontier, strings.TrimPrefix(f.text, "local function "+f.name))
			}
		}
	}
	var b strings.Builder
	for _, sg := range segments {
		switch {
		case sg.fn == nil:
			b.WriteString(sg.line)
		case sg.fn.used:
			b.WriteString(sg.fn.text)
		}
	}
	return strings.TrimSpace(b.String())
}

// names reports whether text has the identifier name, whole.
func names(text, name string) bool {
	for i := 0; ; {
		j := strings.Index(text[i:], name)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(name)
		if (j == 0 || !identByte(text[j-1])) && (end == len(text) || !identByte(text[end])) {
			return true
		}
		i = end
	}
}

func identByte(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// The scripts the library loaded in this process, name -> SHA1 (hex) of the text it runs: relocktest
// recognises the watchdog's renewals by them (EVALSHA's first argument, or the SHA1 of EVAL's script).
var library sync.Map

// Record notes that the library runs the script name, whose text has the given SHA1 (hex).
func Record(name, sha1 string) { library.Store(name, sha1) }

// Recorded returns the SHA1 (hex) of the library's script name, if the library has loaded it.
func Recorded(name string) (string, bool) {
	v, ok := library.Load(name)
	if !ok {
		return "", false
	}
	return v.(string), true
}
