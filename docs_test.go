package relock_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The README is what a newcomer reads in ten minutes: short, with the ownership rule on its first
// screen. Everything else is in the guides under docs/, which it links.
func TestReadmeIsShort(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 250 {
		t.Errorf("README.md has %d lines; keep it to 250 and move the rest into a guide under docs/", len(lines))
	}
	firstScreen := strings.Join(lines[:min(len(lines), 60)], "\n")
	if !strings.Contains(firstScreen, "WithOwner") || !strings.Contains(firstScreen, "goroutine") {
		t.Error("README.md's first 60 lines do not state who owns a lock (the calling goroutine, or WithOwner's token)")
	}
}

// Every relative link of the README and the guides names a file of the repository, and every #anchor a
// heading of the file it points into (as GitHub makes anchors of headings).
func TestDocLinksResolve(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "README.md")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(withoutCode(string(b)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			resolved := file
			if path != "" {
				resolved = filepath.Join(filepath.Dir(file), path)
			}
			if _, err := os.Stat(resolved); err != nil {
				t.Errorf("%s: link %q: %v", file, target, err)
				continue
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(resolved, ".md") {
				t.Errorf("%s: link %q: an anchor into a file that is not Markdown", file, target)
				continue
			}
			text, err := os.ReadFile(resolved)
			if err != nil {
				t.Fatal(err)
			}
			if !anchors(string(text))[anchor] {
				t.Errorf("%s: link %q: %s has no heading whose anchor is #%s", file, target, resolved, anchor)
			}
		}
	}
}

// withoutCode returns md without its fenced code blocks, whose text is no link.
func withoutCode(md string) string {
	var out []string
	fenced := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// anchors returns the anchors GitHub gives md's headings: lower case, letters, digits, spaces, hyphens and
// underscores kept, spaces made hyphens, a repeated one suffixed with -1, -2, ...
func anchors(md string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, line := range strings.Split(withoutCode(md), "\n") {
		title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if !ok || !strings.HasPrefix(line, "#") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(title)) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}
