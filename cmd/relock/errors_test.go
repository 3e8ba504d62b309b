package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/redis/rueidis"
	"github.com/relock-go/relock/internal/redistest"
)

// With --json, every command's error is one line of JSON on stderr, {"error", "kind", "command"}, and
// nothing on stdout; the exit status is as without --json. -h still prints the usage.
func TestJSONErrors(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	addr := srv.Addr()
	rdb, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	if err := rdb.Do(testCtx(t), rdb.B().Set().Key("a-string").Value("x").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args    []string
		code    int
		kind    string
		command string
		want    string
	}{
		{[]string{"inspect", "--json", "--redis", addr}, 2, "usage", "inspect", "want one lock name"},
		{[]string{"inspect", "x", "--bogus", "--json"}, 2, "usage", "inspect", "flag provided but not defined: -bogus"},
		{[]string{"list", "a", "b", "--json", "--redis", addr}, 2, "usage", "list", "at most one pattern"},
		{[]string{"watch", "x", "--interval", "0s", "--json", "--redis", addr}, 2, "usage", "watch", "--interval"},
		{[]string{"unlock", "x", "--json", "--redis", addr}, 2, "usage", "unlock", "--force"},
		{[]string{"demo", "--lock", "nope", "--json"}, 2, "usage", "demo", "--lock"},
		{[]string{"run", "--json", "--redis", addr, "x"}, 2, "usage", "run", "want NAME -- CMD"},
		{[]string{"frobnicate", "--json"}, 2, "usage", "", `unknown command "frobnicate"`},
		{[]string{"inspect", "x", "--json", "--redis", "127.0.0.1:1"}, 1, "unavailable", "inspect", "cannot connect to Redis at 127.0.0.1:1"},
		{[]string{"list", "--json", "--redis", "127.0.0.1:1"}, 1, "unavailable", "list", "cannot connect"},
		{[]string{"watch", "x", "--json", "--redis", "127.0.0.1:1"}, 1, "unavailable", "watch", "cannot connect"},
		{[]string{"unlock", "--force", "--yes", "x", "--json", "--redis", "127.0.0.1:1"}, 1, "unavailable", "unlock", "cannot connect"},
		{[]string{"demo", "--json", "--redis", "127.0.0.1:1"}, 1, "unavailable", "demo", "cannot connect"},
		{[]string{"run", "--json", "--redis", "127.0.0.1:1", "x", "--", "true"}, 1, "unavailable", "run", "cannot connect"},
		{[]string{"inspect", "a-string", "--json", "--redis", addr}, 1, "wrong_kind", "inspect", `"a-string" is not a lock`},
		{[]string{"unlock", "--force", "--yes", "a-string", "--json=true", "--redis", addr}, 1, "wrong_kind", "unlock", "is not a lock"},
		{[]string{"run", "--json", "--redis", addr, "a-string", "--", "true"}, 1, "wrong_kind", "run", `"a-string" is not a lock`},
	} {
		out, errOut := mustRun(t, tc.code, "", tc.args...)
		cmd := strings.Join(tc.args, " ")
		if out != "" {
			t.Errorf("relock %s: stdout %q, want nothing", cmd, out)
		}
		var j errorJSON
		if err := json.Unmarshal([]byte(errOut), &j); err != nil || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
			t.Errorf("relock %s: stderr %q, want one line of JSON (%v)", cmd, errOut, err)
			continue
		}
		if j.Kind != tc.kind || j.Command != tc.command || !strings.Contains(j.Error, tc.want) {
			t.Errorf("relock %s: %+v, want kind %q, command %q, an error saying %q", cmd, j, tc.kind, tc.command, tc.want)
		}
	}
	// Without --json (or with --json=false), errors are text, as before.
	for _, args := range [][]string{{"inspect", "--redis", addr}, {"inspect", "--json=false", "--redis", addr}} {
		_, errOut := mustRun(t, 2, "", args...)
		if !strings.HasPrefix(errOut, "relock inspect: usage: want one lock name") || !strings.Contains(errOut, "Run 'relock inspect -h' for usage.") {
			t.Errorf("relock %s: stderr %q, want text", strings.Join(args, " "), errOut)
		}
	}
	_, errOut := mustRun(t, 0, "", "inspect", "-h", "--json")
	if !strings.HasPrefix(errOut, "Usage: relock inspect") {
		t.Errorf("inspect -h --json: stderr %q, want the usage", errOut)
	}
}

// --timeout must be above zero, for every command: 0 and negative durations are usage errors (they meant
// "no bound" before, which no command should have: a Redis that does not answer would hold it for ever).
func TestTimeoutMustBePositive(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, cmd := range [][]string{{"inspect", "x"}, {"list"}, {"watch", "x", "--for", "1s"}, {"unlock", "--force", "--yes", "x"}, {"demo"}} {
		for _, d := range []string{"0", "0s", "-1s"} {
			args := append(append([]string{}, cmd...), "--timeout", d, "--redis", srv.Addr())
			_, errOut := mustRun(t, 2, "", args...)
			if !strings.Contains(errOut, `invalid value "`+d+`" for flag -timeout: must be above zero`) {
				t.Errorf("relock %s: stderr %q, want the reason", strings.Join(args, " "), errOut)
			}
		}
	}
	mustRun(t, 0, "", "inspect", "x", "--timeout", "2s", "--redis", srv.Addr())
}
