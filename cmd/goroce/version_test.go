package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// TestWriteVersion: the module version, the VCS fields and the Go version
// of a build are printed, each on its line.
func TestWriteVersion(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/goroce/goroce", Version: "v0.3.0", Sum: "h1:abc="},
		Settings: []debug.BuildSetting{{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "arm64"}, {Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "ba96ad58da37b7267b2a3d1c8e6cd86c781fbe7d"}, {Key: "vcs.time", Value: "2026-12-01T21:37:19Z"},
			{Key: "vcs.modified", Value: "true"}}}
	var b bytes.Buffer
	writeVersion(&b, bi)
	want := `goroce v0.3.0
module       github.com/goroce/goroce v0.3.0
sum          h1:abc=
vcs          git
vcs.revision ba96ad58da37b7267b2a3d1c8e6cd86c781fbe7d
vcs.time     2026-12-01T21:37:19Z
vcs.modified true
go           go1.26.8 linux/arm64
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	writeVersion(&b, nil)
	if !strings.Contains(b.String(), runtime.Version()) {
		t.Errorf("without build information: %q", b.String())
	}
	code, out, _ := runMain(t, "version")
	if code != 0 || !strings.HasPrefix(out, "goroce ") || !strings.Contains(out, "\ngo           go1.") {
		t.Errorf("goroce version: exit %d, %q", code, out)
	}
	if code, _, errs := runMain(t, "version", "extra"); code != 2 || errs == "" {
		t.Errorf("goroce version extra: exit %d, %q", code, errs)
	}
}

// TestVersionBinary builds goroce and checks that `goroce version` says
// what `go version -m` reads from the same binary: the main module's
// version, every vcs.* setting the build recorded, and the Go version.
func TestVersionBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the goroce binary; not in -short")
	}
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		t.Skipf("no go command at %s: %v", gobin, err)
	}
	bin := filepath.Join(t.TempDir(), "goroce")
	if out, err := exec.Command(gobin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	got, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("goroce version: %v", err)
	}
	m, err := exec.Command(gobin, "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	t.Logf("goroce version:\n%s", got)
	var norm []string
	for _, l := range strings.Split(string(got), "\n") {
		norm = append(norm, strings.Join(strings.Fields(l), " "))
	}
	gotNorm := strings.Join(norm, "\n")
	var want []string
	for i, line := range strings.Split(string(m), "\n") {
		f := strings.Fields(line)
		switch {
		case i == 0 && len(f) == 2: // "/path/goroce: go1.26.8"
			want = append(want, "go "+f[1]+" ")
		case len(f) >= 3 && f[0] == "mod":
			want = append(want, "module "+f[1]+" "+f[2]+"\n", "goroce "+f[2]+"\n")
		case len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs"):
			k, v, _ := strings.Cut(f[1], "=")
			want = append(want, k+" ", " "+v+"\n")
		}
	}
	if len(want) < 3 {
		t.Fatalf("go version -m printed too little:\n%s", m)
	}
	for _, w := range want {
		if !strings.Contains(gotNorm, w) {
			t.Errorf("goroce version lacks %q (go version -m says it):\n%s\ngo version -m:\n%s", w, got, m)
		}
	}
}
