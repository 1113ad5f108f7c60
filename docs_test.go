package goroce_test

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The Go blocks of the Markdown files (```go fences) must compile, so that
// the documentation cannot show code that rotted. TestDocsGo finds every
// one in the tracked *.md files and checks it in one of three ways, chosen
// by an HTML comment on the line right before the fence (invisible when
// the Markdown is rendered):
//
//   - <!-- go mirror PATH FUNC -->: the block is the code of function FUNC
//     in the Go file PATH (from the repository root), which the package's
//     own tests compile and, for an Example, run. A block that starts with
//     "func " is FUNC's whole declaration (without its doc comment);
//     otherwise it is FUNC's body, one tab of indentation removed, up to
//     an Example's "// Output:" comment.
//   - <!-- go fragment DECLS -->: the block is compiled inside a function
//     (or at package level, when it consists of declarations), with DECLS
//     (Go declarations, e.g. "var ctx context.Context; var pd *qp.PD")
//     at package level: the names the fragment takes from its
//     surroundings. Imports are added for the package names it uses.
//   - no comment: a block starting with "package" is compiled as it is;
//     any other as a fragment without declarations.
//
// The blocks are compiled by `go build` in a temporary module that
// requires this one through a replace directive (nothing is written into
// the checkout; the modules are this one's, from the module cache), with
// //line directives so that an error names the Markdown file and line.

// docBlock is one ```go block of a Markdown file.
type docBlock struct {
	file      string // path from the repository root
	line      int    // line of the first code line
	directive string // the HTML comment before the fence, without <!-- -->; "" if none
	code      string
}

// docBlocks returns the Go blocks of the tracked Markdown files.
func docBlocks(t *testing.T) []docBlock {
	t.Helper()
	out, err := exec.Command("git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md").Output()
	var files []string
	if err == nil {
		files = strings.Fields(string(out))
	} else { // not a git checkout (a module zip): the files that are there
		files, _ = filepath.Glob("*.md")
		more, _ := filepath.Glob("*/*.md")
		files = append(files, more...)
	}
	var blocks []docBlock
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(data), "\n")
		for i := 0; i < len(lines); i++ {
			if strings.TrimSpace(lines[i]) != "```go" {
				continue
			}
			b := docBlock{file: f, line: i + 2}
			if i > 0 && strings.HasSuffix(strings.TrimSpace(lines[i-1]), "-->") {
				j := i - 1
				for j > 0 && !strings.Contains(lines[j], "<!--") {
					j--
				}
				c := strings.Join(lines[j:i], "\n")
				c = c[strings.Index(c, "<!--")+4 : strings.LastIndex(c, "-->")]
				b.directive = strings.TrimSpace(c)
			}
			end := i + 1
			for end < len(lines) && strings.TrimSpace(lines[end]) != "```" {
				end++
			}
			if end == len(lines) {
				t.Errorf("%s:%d: unterminated ```go block", f, i+1)
				break
			}
			b.code = strings.Join(lines[i+1:end], "\n") + "\n"
			blocks = append(blocks, b)
			i = end
		}
	}
	return blocks
}

func TestDocsGo(t *testing.T) {
	blocks := docBlocks(t)
	if len(blocks) == 0 {
		t.Fatal("no ```go blocks found in the Markdown files")
	}
	var compile []docBlock
	for _, b := range blocks {
		f := strings.Fields(b.directive)
		switch {
		case len(f) > 0 && f[0] == "go" && len(f) > 1 && f[1] == "mirror":
			if len(f) != 4 {
				t.Errorf("%s:%d: want <!-- go mirror PATH FUNC -->, have <!-- %s -->", b.file, b.line, b.directive)
				continue
			}
			checkMirror(t, b, f[2], f[3])
		default:
			compile = append(compile, b)
		}
	}
	compileBlocks(t, compile)
}

// checkMirror checks that b's code is function fn's in file path.
func checkMirror(t *testing.T, b docBlock, path, fn string) {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("%s:%d: %v", b.file, b.line, err)
		return
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
	if err != nil {
		t.Errorf("%s:%d: %v", b.file, b.line, err)
		return
	}
	var decl *ast.FuncDecl
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == fn && fd.Recv == nil {
			decl = fd
		}
	}
	if decl == nil || decl.Body == nil {
		t.Errorf("%s:%d: %s has no function %s", b.file, b.line, path, fn)
		return
	}
	var want string
	if strings.HasPrefix(b.code, "func ") {
		want = string(src[fset.Position(decl.Pos()).Offset:fset.Position(decl.End()).Offset]) + "\n"
	} else {
		inner := string(src[fset.Position(decl.Body.Lbrace).Offset+1 : fset.Position(decl.Body.Rbrace).Offset])
		inner = strings.TrimPrefix(inner, "\n")
		if k := strings.Index(inner, "\t// Output:"); k >= 0 {
			inner = inner[:k]
		}
		if k := strings.Index(inner, "\t// Unordered output:"); k >= 0 {
			inner = inner[:k]
		}
		var sb strings.Builder
		for _, line := range strings.SplitAfter(inner, "\n") {
			sb.WriteString(strings.TrimPrefix(line, "\t"))
		}
		want = sb.String()
	}
	if b.code != want {
		t.Errorf("%s:%d: the block differs from %s in %s; make them equal.\nblock:\n%s\n%s:\n%s", b.file, b.line, fn, path, b.code, fn, want)
	}
}

// snippetImports are the packages a fragment may use by name without
// importing them.
var snippetImports = map[string]string{
	"bytes": "bytes", "context": "context", "errors": "errors", "fmt": "fmt", "io": "io", "log": "log",
	"net": "net", "netip": "net/netip", "os": "os", "slog": "log/slog", "strings": "strings", "sync": "sync",
	"testing": "testing", "time": "time", "binary": "encoding/binary", "http": "net/http",
	"qp": "github.com/goroce/goroce/qp", "cm": "github.com/goroce/goroce/cm", "sim": "github.com/goroce/goroce/sim",
	"simtest": "github.com/goroce/goroce/sim/simtest", "nic": "github.com/goroce/goroce/nic",
	"wire": "github.com/goroce/goroce/wire", "memreg": "github.com/goroce/goroce/memreg",
	"transport": "github.com/goroce/goroce/transport", "mad": "github.com/goroce/goroce/mad",
	"metrics": "github.com/goroce/goroce/metrics", "interop": "github.com/goroce/goroce/interop",
	"afxdp": "github.com/goroce/goroce/nic/afxdp", "afpacket": "github.com/goroce/goroce/nic/afpacket",
	"udp": "github.com/goroce/goroce/nic/udp", "nvmeof": "github.com/goroce/goroce/nvmeof",
}

var fragmentDirective = regexp.MustCompile(`(?s)^go fragment\b(.*)$`)

// snippetFile turns b into a Go source file for package name.
func snippetFile(b docBlock, name string) (string, error) {
	if b.directive != "" && !fragmentDirective.MatchString(b.directive) {
		return "", fmt.Errorf("unknown directive <!-- %s --> (want go mirror PATH FUNC or go fragment DECLS)", b.directive)
	}
	lineDir := func(line int) string { return fmt.Sprintf("//line %s:%d\n", b.file, line) }
	if strings.HasPrefix(b.code, "package ") {
		return lineDir(b.line) + b.code, nil
	}
	decls := ""
	if m := fragmentDirective.FindStringSubmatch(b.directive); m != nil {
		decls = strings.TrimSpace(m[1])
	}
	// Declarations at package level, statements in a function; the names
	// a function's top-level statements declare are used after them.
	var body string
	if f, err := parser.ParseFile(token.NewFileSet(), "", "package p\n"+b.code, parser.SkipObjectResolution); err == nil && len(f.Decls) > 0 {
		body = lineDir(b.line) + b.code
	} else {
		src := "package p\nfunc _() {\n" + b.code + "\n}\n"
		f, err := parser.ParseFile(token.NewFileSet(), "", src, 0)
		if err != nil {
			return "", fmt.Errorf("parsing as statements: %v", err)
		}
		var names []string
		fd := f.Decls[0].(*ast.FuncDecl)
		for _, s := range fd.Body.List {
			switch s := s.(type) {
			case *ast.AssignStmt:
				if s.Tok == token.DEFINE {
					for _, e := range s.Lhs {
						if id, ok := e.(*ast.Ident); ok && id.Name != "_" {
							names = append(names, id.Name)
						}
					}
				}
			case *ast.DeclStmt:
				if g, ok := s.Decl.(*ast.GenDecl); ok && g.Tok == token.VAR {
					for _, sp := range g.Specs {
						for _, id := range sp.(*ast.ValueSpec).Names {
							if id.Name != "_" {
								names = append(names, id.Name)
							}
						}
					}
				}
			}
		}
		slices.Sort(names)
		names = slices.Compact(names)
		var use strings.Builder
		for _, n := range names {
			fmt.Fprintf(&use, "\t_ = %s\n", n)
		}
		body = "func snippet() {\n" + lineDir(b.line) + b.code + "\n//line docs_test.go:1\n" + use.String() + "}\n"
	}
	// Imports: the known package names the code and its declarations
	// use without declaring.
	probe := "package p\n" + decls + "\n" + body
	f, err := parser.ParseFile(token.NewFileSet(), "", probe, 0)
	if err != nil {
		return "", fmt.Errorf("parsing: %v", err)
	}
	var imports []string
	for _, id := range f.Unresolved {
		if p, ok := snippetImports[id.Name]; ok && !slices.Contains(imports, strconv.Quote(p)) {
			imports = append(imports, strconv.Quote(p))
		}
	}
	slices.Sort(imports)
	var src strings.Builder
	fmt.Fprintf(&src, "package %s\n\n", name)
	for _, p := range imports {
		fmt.Fprintf(&src, "import %s\n", p)
	}
	if decls != "" {
		fmt.Fprintf(&src, "\n%s%s\n", lineDir(1), decls)
	}
	src.WriteString("\n" + body)
	return src.String(), nil
}

// compileBlocks builds every block, each as its own package, in a
// temporary module.
func compileBlocks(t *testing.T, blocks []docBlock) {
	t.Helper()
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	goCmd := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goCmd); err != nil {
		goCmd = "go"
	}
	dir := t.TempDir()
	gomod := "module goroce.test/docs\n\ngo 1.26.0\n\nrequire github.com/goroce/goroce v0.0.0-00010101000000-000000000000\n\n" +
		"replace github.com/goroce/goroce => " + strconv.Quote(root) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	where := map[string]docBlock{}
	for i, b := range blocks {
		name := fmt.Sprintf("s%03d", i)
		src, err := snippetFile(b, name)
		if err != nil {
			t.Errorf("%s:%d: %v", b.file, b.line, err)
			continue
		}
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "snippet.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		where[name] = b
	}
	cmd := exec.Command(goCmd, "build", "-o", os.DevNull, "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Errorf("the Go blocks of the Markdown files do not compile (%v):\n%s", err, out.String())
		return
	}
	t.Logf("%d Go blocks compiled", len(where))
}
