//go:build linux

package dumpcmd

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/wire"
)

// TestDumpLive runs `goroce dump -i VETH -c 3 -t 20s` inside a namespace
// while the other namespace sends RoCEv2 frames to it.
func TestLive(t *testing.T) {
	pair := netns.NewPair(t, netns.Options{NoDAD: true})
	var fd int
	if err := pair.Do(netns.A, func() (err error) {
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(uint16(unix.ETH_P_ALL)<<8|uint16(unix.ETH_P_ALL)>>8))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	f := wire.Frame{
		SrcIP: pair.A.Addr, DstIP: pair.B.Addr, SrcPort: 50001, HopLimit: 64,
		BTH:  wire.BTHFields{Opcode: wire.RCRDMAReadRequest, PKey: wire.DefaultPKey, DestQP: 0x42, AckReq: true},
		RETH: wire.RETHFields{VA: 0x1000, RKey: 0x99, DMALen: 64},
	}
	copy(f.SrcMAC[:], pair.A.MAC)
	copy(f.DstMAC[:], pair.B.MAC)
	to := &unix.SockaddrLinklayer{Ifindex: pair.A.Ifindex, Halen: 6}
	copy(to.Addr[:], pair.B.MAC)

	// Send until the dump is done (it opens its socket only once started):
	// at most 400 frames, 25 ms apart.
	done := make(chan struct{})
	sent := make(chan int, 1)
	go func() {
		n := 0
		defer func() { sent <- n }()
		buf := make([]byte, f.Len(0))
		for ; n < 400; n++ {
			select {
			case <-done:
				return
			case <-time.After(25 * time.Millisecond):
			}
			f.BTH.PSN = wire.PSN(n)
			if _, err := wire.Build(buf, &f, 0); err != nil {
				return
			}
			unix.Sendto(fd, buf, 0, to)
		}
	}()
	var code int
	var out, errOut string
	err := pair.Do(netns.B, func() error {
		code, out, errOut = runDumpCLI("-i", pair.B.Ifname, "-c", "3", "-t", "20s", "-utc")
		return nil
	})
	close(done)
	<-sent
	if err != nil || code != 0 {
		t.Fatalf("exit %d, %v, stderr %q", code, err, errOut)
	}
	if strings.Count(out, "RC_RDMA_READ_REQUEST       dqpn=0x42") != 3 || !strings.Contains(out, "dqpn=0x42") ||
		!strings.Contains(out, "va=0x1000 rkey=0x99 len=64 icrc=ok") || !strings.Contains(out, "3 packets: 3 RoCEv2 (0 ICRC failures") {
		t.Fatalf("output:\n%s", out)
	}
}
