//go:build linux

package interop

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/pcapfile"
	"github.com/goroce/goroce/wire"
)

// mckeyWire summarises a capture of an mckey run: the RoCEv2 datagrams to
// the group (with what IBTA and rxe put in them) and the IGMP messages
// from each address.
type mckeyWire struct {
	datagrams int
	bad       []string
	igmpFrom  map[netip.Addr]int
}

func readMckeyWire(t *testing.T, path string, group netip.Addr) mckeyWire {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	frames, err := pcapfile.ReadAll(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	w := mckeyWire{igmpFrom: map[netip.Addr]int{}}
	var p wire.Packet
	for _, f := range frames {
		d := f.Data
		if len(d) >= 34 && d[12] == 0x08 && d[13] == 0x00 && d[23] == 2 { // IPv4, protocol IGMP
			w.igmpFrom[netip.AddrFrom4([4]byte(d[26:30]))]++
			continue
		}
		if wire.Parse(d, &p) != nil || p.DstIP() != group {
			continue
		}
		w.datagrams++
		dst := p.Eth.Dst()
		g := group.As4()
		want := [6]byte{0x01, 0x00, 0x5e, g[1] & 0x7f, g[2], g[3]}
		if dst != want || p.BTH.DestQP() != 0xFFFFFF || p.DETH.QKey() != 0x01234567 || p.Opcode() != wire.UDSendOnlyWithImmediate {
			w.bad = append(w.bad, fmt.Sprintf("MAC % x QPN %#x Q_Key %#x opcode %v", dst, p.BTH.DestQP(), p.DETH.QKey(), p.Opcode()))
		}
	}
	return w
}

// TestMckey: goroce mckey against the stock mckey on rxe, both roles: the
// receiver joins 239.1.2.x (goroce: its QP attached, IGMP through
// IP_ADD_MEMBERSHIP; rxe: rdma_cm's cma_igmp_send and ibv_attach_mcast)
// and gets every datagram the sender sends to the group: UD SEND with
// immediate to QPN 0xFFFFFF, Q_Key 0x01234567, destination MAC
// 01:00:5e:01:02:x. Both tools print mckey's lines and exit 0.
func TestMckey(t *testing.T) {
	RequireRoot(t)
	bin := buildGoroce(t)
	h := New(t, Config{VMs: 1})
	const count, size = 20, 512
	hostIP := h.HostIP()

	t.Run("goroce-receiver", func(t *testing.T) {
		group := netip.MustParseAddr("239.1.2.3")
		pcap := filepath.Join(t.TempDir(), "mckey.pcap")
		c, err := h.Capture(pcap, "udp port 4791 or igmp")
		if err != nil {
			t.Fatal(err)
		}
		recv, err := h.HostStart(bin, "mckey", "--dev", h.HostIface(), "--timeout", "60", "--pause", "0",
			"-m", group.String(), "-C", fmt.Sprint(count), "-S", fmt.Sprint(size), "-b", hostIP.String())
		if err != nil {
			t.Fatal(err)
		}
		defer recv.Kill()
		for deadline := time.Now().Add(30 * time.Second); !strings.Contains(recv.Output(), "receiving data transfers"); {
			if time.Now().After(deadline) {
				t.Fatalf("goroce mckey never joined:\n%s", recv.Output())
			}
			time.Sleep(50 * time.Millisecond)
		}
		// -b: the VM has no route for 224.0.0.0/4 (no default route); bound
		// to its address, rdma_resolve_addr's route lookup has an output
		// interface and takes the group as on link.
		s := h.Run(0, fmt.Sprintf("mckey -m %v -b %v -s -C %d -S %d", group, h.VMIP(0), count, size), 60*time.Second)
		r := recv.Wait(30 * time.Second)
		c.Stop()
		t.Logf("stock sender: exit %d in %.1fs\n%s", s.ExitCode, s.Elapsed.Seconds(), s.Output())
		t.Logf("goroce receiver: exit %d\n%s%s", r.ExitCode, r.Stdout, r.Stderr)
		if !s.OK() || !strings.Contains(s.Stdout, "data transfers complete") {
			t.Fatalf("stock mckey -s failed")
		}
		if !r.OK() || !strings.Contains(r.Stdout, "mckey: joined dgid: ::ffff:239.1.2.3 mlid 0x0 sl 0\nreceiving data transfers\ndata transfers complete\n") {
			t.Fatalf("goroce mckey receiver failed")
		}
		w := readMckeyWire(t, pcap, group)
		t.Logf("on the wire: %d datagrams to %v, IGMP from %v", w.datagrams, group, w.igmpFrom)
		if w.datagrams != count || len(w.bad) > 0 || w.igmpFrom[hostIP] == 0 {
			t.Errorf("wire: %d datagrams (want %d), wrong ones %v, IGMP from goroce's %v: %d", w.datagrams, count, w.bad, hostIP, w.igmpFrom[hostIP])
		}
	})

	t.Run("goroce-sender", func(t *testing.T) {
		group := netip.MustParseAddr("239.1.2.4")
		pcap := filepath.Join(t.TempDir(), "mckey.pcap")
		c, err := h.Capture(pcap, "udp port 4791 or igmp")
		if err != nil {
			t.Fatal(err)
		}
		job := h.Start(0, fmt.Sprintf("mckey -m %v -b %v -C %d -S %d", group, h.VMIP(0), count, size))
		defer job.Kill()
		// The stock receiver's stdout is a file, which C buffers until it
		// exits: its join shows in the kernel's group list instead
		// (cma_iboe_join_multicast's cma_igmp_send, right before the join
		// event after which it attaches its QP). goroce's sender then
		// waits a second more (--pause) before it sends.
		for deadline := time.Now().Add(30 * time.Second); ; {
			if r := h.Run(0, "ip maddr show dev eth0", 10*time.Second); strings.Contains(r.Stdout, group.String()) {
				break
			}
			if time.Now().After(deadline) || !job.Running() {
				t.Fatalf("stock mckey never joined:\n%s", job.Wait(time.Second))
			}
			time.Sleep(100 * time.Millisecond)
		}
		out, err := h.HostStart(bin, "mckey", "--dev", h.HostIface(), "--timeout", "60", "--pause", "1s", "-s",
			"-m", group.String(), "-b", hostIP.String(), "-C", fmt.Sprint(count), "-S", fmt.Sprint(size))
		if err != nil {
			t.Fatal(err)
		}
		s := out.Wait(30 * time.Second)
		r := job.Wait(30 * time.Second)
		c.Stop()
		t.Logf("goroce sender: exit %d\n%s%s", s.ExitCode, s.Stdout, s.Stderr)
		t.Logf("stock receiver: exit %d in %.1fs\n%s", r.ExitCode, r.Elapsed.Seconds(), r.Output())
		if !s.OK() || !strings.Contains(s.Stdout, "initiating data transfers\ndata transfers complete\n") {
			t.Fatalf("goroce mckey -s failed")
		}
		if !r.OK() || !strings.Contains(r.Stdout, "data transfers complete") {
			t.Fatalf("stock mckey receiver failed")
		}
		w := readMckeyWire(t, pcap, group)
		t.Logf("on the wire: %d datagrams to %v, IGMP from %v", w.datagrams, group, w.igmpFrom)
		if w.datagrams != count || len(w.bad) > 0 || w.igmpFrom[h.VMIP(0)] == 0 {
			t.Errorf("wire: %d datagrams (want %d), wrong ones %v, IGMP from rxe's %v: %d", w.datagrams, count, w.bad, h.VMIP(0), w.igmpFrom[h.VMIP(0)])
		}
	})
}
