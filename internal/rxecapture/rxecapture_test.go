package rxecapture

import (
	"path/filepath"
	"testing"
)

// rc_pingpong's exchange: the client's 52-byte record, the server's, and
// the client's 5-byte "done".
func TestPingpongExchange(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "rxe")
	msgs, err := TCPMessages(filepath.Join(dir, "rc_pingpong_small.pcap"), 18515)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 3 || !msgs[0].FromClient || msgs[1].FromClient || len(msgs[0].Payload) != 52 ||
		len(msgs[1].Payload) != 52 || string(msgs[2].Payload) != "done\x00" {
		t.Fatalf("messages %+v", msgs)
	}
	server, client, err := ToolLog(filepath.Join(dir, "rc_pingpong_small.log"))
	if err != nil || len(server) == 0 || len(client) == 0 {
		t.Fatalf("log: %d server lines, %d client lines, %v", len(server), len(client), err)
	}
	if _, err := TCPMessages(filepath.Join(dir, "missing.pcap"), 1); err == nil {
		t.Fatal("missing file accepted")
	}
}
