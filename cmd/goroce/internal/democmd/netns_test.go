package democmd

import (
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/internal/pcapfile"
	"github.com/goroce/goroce/wire"
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
	// --pcap on AF_XDP: the device's own capture holds both directions
	// (tcpdump on the veth sees none of it: XDP redirects the frames
	// before the packet taps), every frame a RoCEv2 packet with a good
	// ICRC.
	t.Run("afxdp-pcap", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "demo.pcap")
		if rc := runDemoNetns(tool.DefaultEnv(), demoNetnsConfig{link: "afxdp", netns: true, count: 7, seed: 1, mtu: 1500, pcap: path}); rc != 0 {
			t.Fatalf("exit code %d", rc)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		recs, err := pcapfile.ReadAll(f)
		if err != nil {
			t.Fatal(err)
		}
		var pkt wire.Packet
		from := map[netip.Addr]int{}
		for i, r := range recs {
			if err := wire.Parse(r.Data, &pkt); err != nil {
				t.Errorf("record %d: %v", i, err)
				continue
			}
			from[pkt.SrcIP()]++
		}
		if len(recs) < 20 || len(from) != 2 {
			t.Errorf("%d frames, by source %v", len(recs), from)
		}
		t.Logf("%d frames, by source %v", len(recs), from)
	})
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
		{link: "afxdp"},                          // real link without --netns
		{link: "mem", netns: true},               // --netns with the in-memory link
		{link: "dpdk", netns: true},              // unknown
		{link: "udp", netns: true, dup: 0.1},     // in-memory-only fault
		{link: "udp", netns: true, reorder: 0.1}, // in-memory-only fault
	} {
		if rc := runDemoNetns(tool.Env{Stdout: io.Discard, Stderr: io.Discard}, c); rc != 2 {
			t.Errorf("%+v: exit code %d, want 2", c, rc)
		}
	}
}
