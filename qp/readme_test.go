package qp_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestReadmeProgram: the program README.md shows under "In a program" is
// Example_write's body, without its Output comment, so the README cannot
// show code that does not compile or does not work.
func TestReadmeProgram(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	i := strings.Index(text, "\nIn a program")
	if i < 0 {
		t.Fatal(`README.md has no "In a program" section`)
	}
	text = text[i:]
	start := strings.Index(text, "```go\n")
	if start < 0 {
		t.Fatal(`no Go block after "In a program" in README.md`)
	}
	text = text[start+len("```go\n"):]
	end := strings.Index(text, "```")
	if end < 0 {
		t.Fatal("unterminated Go block in README.md")
	}
	got := text[:end]

	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "example_test.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var body *ast.BlockStmt
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "Example_write" {
			body = fn.Body
		}
	}
	if body == nil {
		t.Fatal("example_test.go has no Example_write")
	}
	inner := string(src[fset.Position(body.Lbrace).Offset+1 : fset.Position(body.Rbrace).Offset])
	inner = strings.TrimPrefix(inner, "\n")
	if k := strings.Index(inner, "\t// Output:"); k >= 0 {
		inner = inner[:k]
	}
	var want strings.Builder
	for _, line := range strings.SplitAfter(inner, "\n") {
		want.WriteString(strings.TrimPrefix(line, "\t"))
	}
	if got != want.String() {
		t.Errorf("README.md's program differs from Example_write's body (qp/example_test.go); make them equal.\nREADME:\n%s\nExample_write:\n%s", got, want.String())
	}
}
