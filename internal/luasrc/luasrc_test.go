package luasrc

import (
	"testing"
	"testing/fstest"
)

// Load keeps the script's first comment line and the included functions it calls, directly or through
// another, in their order, and drops the rest: comments, blank lines, functions nothing calls.
func TestLoadKeepsOnlyWhatTheScriptCalls(t *testing.T) {
	fsys := fstest.MapFS{
		"s.lua": {Data: []byte(`-- The script.
-- KEYS[1]  a key
-- @include lib/a.lua

local x = outer(KEYS[1]) -- a trailing comment stays
return x
`)},
		"lib/a.lua": {Data: []byte(`-- A library.
local function inner(k)
  return redis.call('get', k)
end

-- unused names inner_x but is called by nobody
local function unused(k)
  return inner_x(k)
end

local function outer(k)
  -- calls inner
  return inner(k)
end
`)},
	}
	got, err := Load(fsys, "s")
	if err != nil {
		t.Fatal(err)
	}
	want := `-- The script.
local function inner(k)
  return redis.call('get', k)
end
local function outer(k)
  return inner(k)
end
local x = outer(KEYS[1]) -- a trailing comment stays
return x`
	if got != want {
		t.Fatalf("Load =\n%s\nwant\n%s", got, want)
	}
}
