package relock_test

import (
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docs/guarantees.md lists every promise of the README and the guides with the tests that show it, in
// tables whose last column is "tests": `file_test.go`: `TestName`, `TestOther/sub`, ... A test named there
// must exist in the file named before it (a function of that name; each part of a subtest's name must
// appear in the file, or in the package it belongs to or the repository's packages it imports). A row
// with no test, or a test named without a file, is an error too: a promise listed must name its proof.
func TestGuaranteesNameExistingTests(t *testing.T) {
	t.Parallel()
	rows := guaranteeRows(t)
	if len(rows) < 50 {
		t.Fatalf("docs/guarantees.md: %d rows with tests; its tables were not found (the last column of a table of promises is \"tests\")", len(rows))
	}
	sources := map[string]string{} // file -> its text, and the text a subtest's name may be in
	for _, r := range rows {
		refs := testRefs(r.tests)
		if len(refs) == 0 {
			t.Errorf("docs/guarantees.md:%d: %q names no test: name its tests, or move it to \"Not yet shown\"", r.line, r.promise)
		}
		for _, ref := range refs {
			if ref.file == "" {
				t.Errorf("docs/guarantees.md:%d: %s is named without its file: write `file_test.go`: before it", r.line, ref.name)
				continue
			}
			if !strings.HasSuffix(ref.file, "_test.go") {
				t.Errorf("docs/guarantees.md:%d: %s: %s is not a test file", r.line, ref.name, ref.file)
				continue
			}
			b, err := os.ReadFile(filepath.FromSlash(ref.file))
			if err != nil {
				t.Errorf("docs/guarantees.md:%d: %s: %v", r.line, ref.name, err)
				continue
			}
			fn, sub, _ := strings.Cut(ref.name, "/")
			if !regexp.MustCompile(`(?m)^func ` + fn + `\(`).Match(b) {
				t.Errorf("docs/guarantees.md:%d: %s has no func %s: the test it names no longer exists", r.line, ref.file, fn)
				continue
			}
			if sub == "" {
				continue
			}
			text, ok := sources[ref.file]
			if !ok {
				text = string(b) + packageSources(t, ref.file)
				sources[ref.file] = text
			}
			for _, part := range strings.Split(sub, "/") {
				if !strings.Contains(text, part) && !strings.Contains(text, strings.ReplaceAll(part, "_", " ")) {
					t.Errorf("docs/guarantees.md:%d: %s: no subtest %q in %s or its packages", r.line, ref.name, part, ref.file)
				}
			}
		}
	}
}

// Every section of the README and the guides that makes promises (its text says "never", "always", "at
// once", "within", "at most", "at least", "no later", "exactly" or "guarantee") is cited by a row of
// docs/guarantees.md, or is one of those below, which promise nothing of relock's behaviour: a new
// section that promises must get its rows. (A new promise in a section already cited is the reviewer's
// to list: sentences are too many and move too often to be checked one by one.)
func TestGuaranteesCoverPromisingSections(t *testing.T) {
	t.Parallel()
	notPromises := map[string]string{
		"docs/locks.md#locks-and-ownership":                             "the guide's introduction",
		"docs/operations.md#running-relock-in-production":               "the guide's introduction",
		"README.md#install":                                             "the versions the suite runs on, and how to install",
		"README.md#tests":                                               "how to run the tests",
		"docs/command.md#install":                                       "how to install the command",
		"docs/development.md":                                           "the whole guide: what the suites check, for contributors",
		"docs/safety.md#how-the-histories-are-recorded-and-checked":     "how the scenarios record and check histories",
		"docs/safety.md#a-violating-history":                            "a history the scenarios drew",
		"docs/safety.md#a-schedule":                                     "what the explorer's schedules are made of",
		"docs/safety.md#running-it":                                     "how to run the explorer",
		"docs/safety.md#proof-that-it-finds-what-it-must":               "how well the explorer finds defects put back",
		"docs/safety.md#not-done":                                       "what was not done, and open findings",
		"docs/safety.md#running-the-scenarios":                          "how to run the scenarios",
		"docs/performance.md#compared-with-the-other-go-lock-libraries": "measurements against other libraries",
		"docs/performance.md#reproducing-the-figures":                   "how to reproduce the measurements",
		"docs/redisson.md#what-was-tested":                              "what the compatibility tests cover",
		"docs/operations.md#production-checklist":                       "a checklist linking the sections that promise",
	}
	cited := guaranteeCitations(t)
	files, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "README.md")
	promise := regexp.MustCompile(`(?i)\b(never|always|at once|within|at most|at least|no later|exactly|guarantee)`)
	for _, file := range files {
		file = filepath.ToSlash(file)
		if file == "docs/guarantees.md" || notPromises[file] != "" {
			continue
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sections(string(b)) {
			key := file + "#" + s.anchor
			if cited[key] || notPromises[key] != "" {
				continue
			}
			if m := promise.FindString(s.text); m != "" {
				line := s.line
				for i, l := range strings.Split(s.text, "\n") {
					if promise.MatchString(l) {
						line = s.line + i
						break
					}
				}
				t.Errorf("%s:%d: the section #%s promises (%q) but no row of docs/guarantees.md cites it", file, line, s.anchor, m)
			}
		}
	}
	for key := range notPromises {
		if cited[key] {
			t.Errorf("%s is cited by docs/guarantees.md and also listed as promising nothing", key)
		}
	}
}

// guaranteeRow is a row of a table of promises in docs/guarantees.md.
type guaranteeRow struct {
	line           int
	promise, tests string
	citations      []string
}

// guaranteeRows returns the rows of docs/guarantees.md's tables whose last column is "tests".
func guaranteeRows(t *testing.T) []guaranteeRow {
	t.Helper()
	b, err := os.ReadFile("docs/guarantees.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var rows []guaranteeRow
	for i := 0; i+1 < len(lines); i++ {
		header := cells(lines[i])
		if len(header) < 2 || !strings.HasPrefix(strings.TrimSpace(lines[i+1]), "| ---") {
			continue
		}
		checked := strings.TrimSpace(header[len(header)-1]) == "tests"
		i += 2
		for ; i < len(lines) && strings.HasPrefix(lines[i], "|"); i++ {
			if !checked {
				continue
			}
			c := cells(lines[i])
			if len(c) != len(header) {
				t.Errorf("docs/guarantees.md:%d: %d cells, the table has %d columns", i+1, len(c), len(header))
				continue
			}
			rows = append(rows, guaranteeRow{line: i + 1, promise: c[0], tests: c[len(c)-1], citations: c[1 : len(c)-1]})
		}
	}
	return rows
}

// cells splits a Markdown table line into its cells.
func cells(line string) []string {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "|") || !strings.HasSuffix(line, "|") {
		return nil
	}
	return strings.Split(line[1:len(line)-1], "|")
}

// testRef is a test a row names, and the file named before it in its cell ("" if none).
type testRef struct{ file, name string }

var (
	codeSpan = regexp.MustCompile("`([^`]+)`")
	testName = regexp.MustCompile(`^(Test|Example|Fuzz|Benchmark)[A-Za-z0-9_]*(/\S+)?$`)
)

// testRefs returns the tests a tests cell names: each code span that is a test's name, with the last code
// span before it that is a file's.
func testRefs(cell string) []testRef {
	var refs []testRef
	file := ""
	for _, m := range codeSpan.FindAllStringSubmatch(cell, -1) {
		switch s := m[1]; {
		case strings.HasSuffix(s, ".go"):
			file = s
		case testName.MatchString(s):
			refs = append(refs, testRef{file: file, name: s})
		}
	}
	return refs
}

// packageSources returns the other Go files of file's directory, and those of the repository's packages
// file imports (a subtest's name may be in a table there: internal/conformance's tests).
func packageSources(t *testing.T, file string) string {
	t.Helper()
	dirs := []string{path.Dir(file)}
	f, err := parser.ParseFile(token.NewFileSet(), filepath.FromSlash(file), nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range f.Imports {
		if dir, ok := strings.CutPrefix(strings.Trim(imp.Path.Value, `"`), "github.com/relock-go/relock/"); ok {
			dirs = append(dirs, dir)
		}
	}
	var b strings.Builder
	for _, dir := range dirs {
		matches, _ := filepath.Glob(filepath.Join(filepath.FromSlash(dir), "*.go"))
		for _, m := range matches {
			if text, err := os.ReadFile(m); err == nil {
				b.Write(text)
			}
		}
	}
	return b.String()
}

// guaranteeCitations returns the sections docs/guarantees.md's rows cite, as "path#anchor" from the
// repository's root.
func guaranteeCitations(t *testing.T) map[string]bool {
	t.Helper()
	link := regexp.MustCompile(`\]\(([^)\s#]*)#([^)\s]+)\)`)
	cited := map[string]bool{}
	for _, r := range guaranteeRows(t) {
		for _, c := range r.citations {
			for _, m := range link.FindAllStringSubmatch(c, -1) {
				cited[path.Clean(path.Join("docs", m[1]))+"#"+m[2]] = true
			}
		}
	}
	return cited
}

// section is a heading's section of a Markdown file: its anchor (as GitHub makes it), the line of the
// heading, and its text up to the next heading, without code blocks.
type section struct {
	anchor string
	line   int
	text   string
}

func sections(md string) []section {
	var out []section
	seen := map[string]int{}
	fenced := false
	for i, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if strings.HasPrefix(line, "#") {
			for a := range anchors(line) {
				n := seen[a]
				seen[a]++
				if n > 0 {
					a += "-" + string(rune('0'+n))
				}
				out = append(out, section{anchor: a, line: i + 1})
			}
			continue
		}
		if len(out) > 0 {
			out[len(out)-1].text += line + "\n"
		}
	}
	return out
}
