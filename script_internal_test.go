package relock

import (
	"io/fs"
	"strings"
	"testing"
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
		raw := readLua(name + ".lua")
		s := loadScript(name)
		if strings.Contains(s.src, includePrefix) {
			t.Errorf("%s: an include was left unexpanded", name)
		}
		for _, lib := range libs {
			if strings.Contains(raw, includePrefix+strings.TrimPrefix(lib, "lua/")) {
				used[lib] = true
				if !strings.Contains(s.src, strings.TrimSpace(readLua(strings.TrimPrefix(lib, "lua/")))) {
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
