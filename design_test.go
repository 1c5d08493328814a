package mneme_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDesignNamesRealTests: every test that docs/design.md names as holding
// an invariant exists, so the table cannot drift from the code.
func TestDesignNamesRealTests(t *testing.T) {
	doc, err := os.ReadFile("docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`((?:Test|Fuzz)[A-Za-z0-9_]+)`").FindAllStringSubmatch(string(doc), -1) {
		named[m[1]] = false
	}
	if len(named) < 8 {
		t.Fatalf("docs/design.md names %d tests; the invariants table should name them", len(named))
	}
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)[A-Za-z0-9_]+)\(`)
	walk(t, func(path string, b []byte) {
		if strings.HasSuffix(path, "_test.go") {
			for _, m := range decl.FindAllSubmatch(b, -1) {
				if _, ok := named[string(m[1])]; ok {
					named[string(m[1])] = true
				}
			}
		}
	})
	for name, found := range named {
		if !found {
			t.Errorf("docs/design.md names %s, which no test file declares", name)
		}
	}
}

// TestDocsPointInsideTheRepository: no Go file or Markdown document points
// its reader to a file outside the repository (the design lives in
// docs/design.md). Tests may read the shared datasets (../shared/data).
func TestDocsPointInsideTheRepository(t *testing.T) {
	outside := regexp.MustCompile(`\.\./shared/|\bDESIGN\.md|\bSTYLE\.md`)
	walk(t, func(path string, b []byte) {
		for i, line := range strings.Split(string(b), "\n") {
			if loc := outside.FindStringIndex(line); loc != nil && !strings.HasPrefix(line[loc[0]:], "../shared/data") {
				t.Errorf("%s:%d points outside the repository: %s", path, i+1, strings.TrimSpace(line))
			}
		}
	})
}

// walk calls f with every Go and Markdown file of the module (not those
// of installed npm packages).
func walk(t *testing.T, f func(path string, b []byte)) {
	t.Helper()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && path != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".md") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			f(path, b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
