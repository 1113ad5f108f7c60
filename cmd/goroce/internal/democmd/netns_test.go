package democmd

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/internal/netns"
)

// TestNetns runs `goroce demo --link X --netns` for each backend (few
// messages) and checks that it succeeds and leaves no namespace behind.
func TestNetns(t *testing.T) {
	netns.RequireRoot(t)
	for _, link := range []string{"afxdp", "afpacket", "udp", "auto"} {
		t.Run(link, func(t *testing.T) {
			if rc := runDemoNetns(tool.DefaultEnv(), demoNetnsConfig{link: link, netns: true, count: 7, seed: 1, mtu: 1500}); rc != 0 {
				t.Fatalf("exit code %d", rc)
			}
		})
	}
	t.Run("loss", func(t *testing.T) {
		if rc := runDemoNetns(tool.DefaultEnv(), demoNetnsConfig{link: "afpacket", netns: true, count: 7, seed: 3, mtu: 1500, loss: 0.05}); rc != 0 {
			t.Fatalf("exit code %d", rc)
		}
	})
	left, _ := filepath.Glob(fmt.Sprintf("/var/run/netns/goroce-demo-%d-*", os.Getpid()))
	if len(left) != 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
}

func TestNetnsFlags(t *testing.T) {
	for _, c := range []demoNetnsConfig{
		{link: "afxdp"},                            // real link without --netns
		{link: "mem", netns: true},                 // --netns with the in-memory link
		{link: "dpdk", netns: true},                // unknown
		{link: "udp", netns: true, pcap: "x.pcap"}, // in-memory-only flag
		{link: "udp", netns: true, reorder: 0.1},   // in-memory-only fault
	} {
		if rc := runDemoNetns(tool.Env{Stdout: io.Discard, Stderr: io.Discard}, c); rc != 2 {
			t.Errorf("%+v: exit code %d, want 2", c, rc)
		}
	}
}
