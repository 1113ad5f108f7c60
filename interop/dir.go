package interop

// Dir is in an untagged file because stringer's dir_string.go carries no
// build constraint: the pair compiles on every system.

// Dir is the direction of a matrix cell.
type Dir int

//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=Dir -linecomment

const (
	// GoroceClient: goroce's tool connects to rxe's tool (server in VM 0).
	GoroceClient Dir = iota // goroce→rxe
	// RXEClient: rxe's tool in VM 0 connects to goroce's tool.
	RXEClient // rxe→goroce
)
