package goroce_test

import (
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/goroce/goroce"

// pkg is what `go list -deps -json` says about one package.
type pkg struct {
	ImportPath string
	Name       string
	Standard   bool
	Imports    []string
	Deps       []string
}

// TestLayering checks the package layering of docs/architecture.md against
// the build graph (non-test imports, transitively):
//
//	wire ← memreg, atomic ← transport ← qp ← cm ← rsock, nvmeof ← cmd, bench
//	nic/... beside them, knowing nothing of transport or qp
//
// and that no program links the testing package: neither the main packages
// nor any public library package a program may import (test harnesses,
// interop/ and packages named *test such as qp/netnstest, may).
func TestLayering(t *testing.T) {
	pkgs := listDeps(t)
	paths := slices.Sorted(maps.Keys(pkgs))
	own := func(path string) bool { return path == module || strings.HasPrefix(path, module+"/") }
	rel := func(path string) string { return strings.TrimPrefix(path, module+"/") }
	// under reports whether path is the module package dir or one below it.
	under := func(path string, dirs ...string) bool {
		for _, d := range dirs {
			if p := module + "/" + d; path == p || strings.HasPrefix(path, p+"/") {
				return true
			}
		}
		return false
	}

	// below is everything under the connection manager: the verbs API and
	// what it is built of.
	below := []string{"wire", "mad", "memreg", "atomic", "transport", "qp", "nic", "internal/pcapfile"}
	// allowed: each layer's packages may depend, outside the standard
	// library, only on the packages listed (and on their own subpackages).
	layers := []struct {
		layer   string
		allowed []string
	}{
		{"wire", nil},
		{"mad", nil},
		{"memreg", []string{"wire"}},
		{"atomic", []string{"wire"}},
		{"transport", []string{"wire", "memreg", "atomic"}},
	}
	checked := map[string]bool{}
	for _, l := range layers {
		for _, path := range paths {
			p := pkgs[path]
			if !under(path, l.layer) {
				continue
			}
			checked[l.layer] = true
			for _, d := range p.Deps {
				if dp := pkgs[d]; (dp != nil && dp.Standard) || under(d, l.layer) || under(d, l.allowed...) {
					continue
				}
				t.Errorf("%s depends on %s (allowed outside the standard library: %v): %s",
					rel(path), rel(d), l.allowed, chain(pkgs, path, d))
			}
		}
	}
	// The connection manager and the applications above it depend on no
	// package of this module above their layer (no cmd, bench, metrics,
	// interop, sim), and the two applications not on each other; modules
	// from outside come through qp's own imports.
	for _, l := range []struct {
		layer   string
		allowed []string
	}{
		{"cm", below},
		{"rsock", append([]string{"cm"}, below...)},
		{"nvmeof", append([]string{"cm"}, below...)},
	} {
		for _, path := range paths {
			if !under(path, l.layer) {
				continue
			}
			checked[l.layer] = true
			for _, d := range pkgs[path].Deps {
				if own(d) && !under(d, l.layer) && !under(d, l.allowed...) {
					t.Errorf("%s depends on %s (allowed in this module: %v): %s", rel(path), rel(d), l.allowed, chain(pkgs, path, d))
				}
			}
		}
	}
	for _, path := range paths {
		p := pkgs[path]
		if !under(path, "nic") {
			continue
		}
		checked["nic"] = true
		for _, d := range p.Deps {
			if under(d, "transport", "qp") {
				t.Errorf("%s depends on %s: nic knows nothing of transport or qp: %s", rel(path), rel(d), chain(pkgs, path, d))
			}
		}
	}

	// client_golang only for the programs that import metrics/: no library
	// package outside metrics depends on it (qp/qpexpvar publishes through
	// expvar).
	for _, path := range paths {
		p := pkgs[path]
		if !own(path) || under(path, "metrics", "cmd", "interop", "bench") {
			continue
		}
		if path == module+"/qp" {
			checked["qp without prometheus"] = true
		}
		for _, d := range p.Deps {
			if strings.HasPrefix(d, "github.com/prometheus/") {
				t.Errorf("%s depends on %s: only metrics/ (and programs) may: %s", rel(path), d, chain(pkgs, path, d))
				break
			}
		}
	}

	// qp links no HTTP stack: expvar, which serves /debug/vars through
	// net/http (and brings crypto/tls), is in qp/qpexpvar.
	if p := pkgs[module+"/qp"]; p != nil {
		checked["qp without net/http"] = true
		if slices.Contains(p.Deps, "net/http") {
			t.Errorf("qp depends on net/http: %s", chain(pkgs, module+"/qp", "net/http"))
		}
	}

	// Programs must not link the testing package.
	for _, path := range paths {
		p := pkgs[path]
		if !own(path) || under(path, "interop") || strings.HasSuffix(path, "test") {
			continue
		}
		internal := strings.Contains(path, "/internal/") || strings.HasSuffix(path, "/internal")
		if internal && p.Name != "main" {
			continue // reached by programs only through the packages checked here
		}
		if path == module+"/cmd/goroce" || path == module+"/qp" || path == module+"/sim" {
			checked[rel(path)] = true
		}
		if slices.Contains(p.Deps, "testing") {
			t.Errorf("%s links the testing package: %s", rel(path), chain(pkgs, path, "testing"))
		}
	}

	for _, c := range []string{"wire", "mad", "memreg", "atomic", "transport", "cm", "rsock", "nvmeof", "nic", "qp", "sim", "cmd/goroce", "qp without prometheus", "qp without net/http"} {
		if !checked[c] {
			t.Errorf("no package %s in the build graph: the layering rules name packages that no longer exist", c)
		}
	}
}

// listDeps returns every package of the module and all their dependencies,
// from one `go list -deps -json ./...`.
func listDeps(t *testing.T) map[string]*pkg {
	t.Helper()
	goCmd, err := exec.LookPath("go") // go test puts its own GOROOT/bin first in PATH
	if err != nil {
		t.Fatalf("go command: %v", err)
	}
	cmd := exec.Command(goCmd, "list", "-deps", "-json=ImportPath,Name,Standard,Imports,Deps", "./...")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs := map[string]*pkg{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs[p.ImportPath] = &p
	}
	if len(pkgs) == 0 {
		t.Fatal("go list listed no packages")
	}
	return pkgs
}

// chain returns one import path from package from to dependency to, for the
// error message: "a -> b -> to".
func chain(pkgs map[string]*pkg, from, to string) string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == to {
			var path []string
			for p := to; p != ""; p = prev[p] {
				path = append(path, strings.TrimPrefix(p, module+"/"))
			}
			slices.Reverse(path)
			return strings.Join(path, " -> ")
		}
		if p := pkgs[cur]; p != nil {
			for _, imp := range p.Imports {
				if _, seen := prev[imp]; !seen {
					prev[imp] = cur
					queue = append(queue, imp)
				}
			}
		}
	}
	return from + " -> ... -> " + to
}
