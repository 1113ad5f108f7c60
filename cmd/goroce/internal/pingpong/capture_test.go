package pingpong

import (
	"path/filepath"
	"testing"

	"github.com/goroce/goroce/internal/rxecapture"
)

// rxeDir holds the real rxe captures (testdata/rxe/README.md at the module
// root): ibv_rc_pingpong from rdma-core 44 between two Debian VMs, the
// server at 198.18.0.11, the client at 198.18.0.12.
var rxeDir = filepath.Join("..", "..", "..", "..", "testdata", "rxe")

// tcpMsg is one TCP segment's payload on the tool's port, in capture order.
type tcpMsg = rxecapture.Msg

// tcpMessages is rxecapture.TCPMessages on a capture in rxeDir.
func tcpMessages(t *testing.T, name string, port uint16) []tcpMsg {
	t.Helper()
	msgs, err := rxecapture.TCPMessages(filepath.Join(rxeDir, name), port)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// toolLog splits NAME.log in rxeDir into the server's and the client's output.
func toolLog(t *testing.T, name string) (server, client []string) {
	t.Helper()
	server, client, err := rxecapture.ToolLog(filepath.Join(rxeDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return server, client
}
