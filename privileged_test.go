package goroce_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPrivilegedTestsUseRequireRoot: a test outside package interop that
// needs root asks through netns.RequireRoot or netns.NewPair (nic/afxdp: its
// requireRoot), not by comparing os.Geteuid() with 0 itself. Those helpers
// skip with the reason when not root, fail under CI=true, and skip even as
// root with GOROCE_UNPRIVILEGED=1, which `make test` sets so that the
// README's test command creates no namespace and attaches no XDP program;
// a test with its own check would run there as root (CI runs make test as
// root, then make check with the privileged suites).
func TestPrivilegedTestsUseRequireRoot(t *testing.T) {
	rootCheck := regexp.MustCompile(`os\.Get(e)?uid\(\)\s*(!=|>)\s*0`)
	allowed := map[string]bool{
		"nic/afxdp/helpers_test.go": true, // requireRoot honours GOROCE_UNPRIVILEGED
	}
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch path {
			case "interop", "testdata", ".git":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") || allowed[filepath.ToSlash(path)] {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(src), "\n") {
			if rootCheck.MatchString(line) {
				t.Errorf("%s:%d: %s\n\tuse netns.RequireRoot(t) (internal/netns), which GOROCE_UNPRIVILEGED=1 (make test) turns into a skip", path, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
