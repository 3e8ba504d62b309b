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
// includes expanded, trimmed.
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
	return b.String(), nil
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
