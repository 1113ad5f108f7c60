package nvmecmd_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/pcapfile"
	"github.com/goroce/goroce/wire"
)

// TestPcap: --pcap on nvmet and nvme records each device's frames, both
// directions, every one a RoCEv2 packet with a good ICRC.
func TestPcap(t *testing.T) {
	dir := t.TempDir()
	tp, hp := filepath.Join(dir, "target.pcap"), filepath.Join(dir, "host.pcap")
	_, _, out, errs, code := pair(t,
		[]string{"-d", "b", "-a", "198.18.0.2", "--nqn", nqn, "--ram", "1M", "--pcap", tp},
		[]string{"discover", "-d", "a", "-a", "198.18.0.2", "--pcap", hp})
	if code != 0 || !strings.Contains(out, "subnqn:  "+nqn+"\n") {
		t.Fatalf("discover: exit %d: %s %s", code, out, errs)
	}
	for _, p := range []string{tp, hp} {
		recs, err := pcapfile.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var pkt wire.Packet
		from := map[string]int{}
		for i, r := range recs {
			if err := wire.Parse(r.Data, &pkt); err != nil {
				t.Errorf("%s record %d: %v", filepath.Base(p), i, err)
				continue
			}
			from[pkt.SrcIP().String()]++
		}
		if from["198.18.0.1"] == 0 || from["198.18.0.2"] == 0 {
			t.Errorf("%s: %d frames, by source %v", filepath.Base(p), len(recs), from)
		}
		t.Logf("%s: %d frames, by source %v", filepath.Base(p), len(recs), from)
	}
}
