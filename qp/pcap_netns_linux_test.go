package qp_test

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/internal/pcapfile"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
	"github.com/goroce/goroce/wire"
)

// TestPcapAFXDP: what docs/debugging.md says about captures. Between two
// AF_XDP devices in namespaces, tcpdump on side A's interface sees none of
// the RoCEv2 frames (XDP hands them to the socket before the packet taps,
// and the socket transmits past them), while A's own capture
// (InterfaceOptions.Pcap) has every one, both directions, each a RoCEv2
// packet with a good ICRC.
func TestPcapAFXDP(t *testing.T) {
	p := netns.NewPair(t, netns.Options{})
	tcpdump, err := exec.LookPath("tcpdump")
	if err != nil {
		skipOrFail(t, "needs tcpdump")
	}
	dir := t.TempDir()
	dumped := filepath.Join(dir, "tcpdump.pcap")
	// -U and --immediate-mode: each packet is handed over and written at
	// once (no ring block timeout); the filter is the RoCEv2 port.
	cmd := exec.Command("ip", "netns", "exec", p.A.NS, tcpdump, "-n", "-U", "--immediate-mode", "-i", p.A.Ifname, "-w", dumped, "udp", "port", "4791")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cmd.Process.Signal(syscall.SIGINT)
			cmd.Wait()
		}
	}
	defer stop()
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		var lines []string
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if strings.Contains(sc.Text(), "listening on") {
				listening <- sc.Text()
			}
		}
		listening <- strings.Join(lines, "\n")
	}()
	select {
	case l := <-listening:
		if !strings.Contains(l, "listening on") {
			t.Fatalf("tcpdump: %s", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tcpdump did not start listening")
	}

	f, err := os.Create(filepath.Join(dir, "own.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pw, err := qp.NewPcapWriter(f)
	if err != nil {
		t.Fatal(err)
	}
	devA, infoA := open(t, p, netns.A, qp.InterfaceOptions{Backend: qp.BackendAFXDP, Pcap: pw})
	devB, _ := open(t, p, netns.B, qp.InterfaceOptions{Backend: qp.BackendAFXDP})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ea, eb, err := sim.ConnectQPs(ctx, devA, devB, sim.QPOptions{}, sim.QPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		err := ea.QP.PostSend(&qp.SendWR{WRID: uint64(i), Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
			SGL: []qp.SGE{ea.SGE(0, 3000)}, RemoteAddr: eb.MR.IOVA(), RKey: eb.MR.RKey()})
		if err != nil {
			t.Fatal(err)
		}
		wc := make([]qp.WC, 1)
		if _, err := ea.SendCQ.Wait(ctx, wc); err != nil || wc[0].Err() != nil {
			t.Fatalf("WRITE %d: %v %v", i, err, wc[0].Err())
		}
	}
	devA.Close()
	devB.Close()
	if err := pw.Close(); err != nil {
		t.Fatal(err)
	}
	// The control: one datagram to port 4791 through the kernel's stack,
	// which tcpdump does see.
	err = p.Do(netns.A, func() error {
		c, err := net.Dial("udp4", net.JoinHostPort(p.B.Addr.String(), "4791"))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("control"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	stop()
	t.Logf("tcpdump: %s", <-listening)

	recs, err := pcapfile.ReadFile(filepath.Join(dir, "own.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	var pkt wire.Packet
	from := map[string]int{}
	for i, r := range recs {
		if err := wire.Parse(r.Data, &pkt); err != nil {
			t.Errorf("own capture, record %d: %v", i, err)
			continue
		}
		from[pkt.SrcIP().String()]++
	}
	if from[p.A.Addr.String()] < 15 || from[p.B.Addr.String()] < 5 {
		t.Errorf("A's own capture (%s, %s): %d frames, by source %v", infoA.Backend, infoA.Mode, len(recs), from)
	}
	td, err := os.ReadFile(dumped)
	if err != nil {
		t.Fatal(err)
	}
	seen, err := pcapfile.ReadAll(bytes.NewReader(td))
	if err != nil {
		t.Fatalf("tcpdump's file: %v", err)
	}
	if len(seen) != 1 || !bytes.HasSuffix(seen[0].Data, []byte("control")) {
		t.Errorf("tcpdump on %s saw %d frames on port 4791; want only the kernel's control datagram, none of the AF_XDP device's (%s mode) %d", p.A.Ifname, len(seen), infoA.Mode, len(recs))
	}
	t.Logf("AF_XDP (%s): A's own capture %d frames, by source %v; tcpdump on the interface: %d (the control datagram)", infoA.Mode, len(recs), from, len(seen))
}
