//go:build linux

package interop

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
)

// ccRouterSetup turns VM 0 into a router between the two host namespaces
// (proxy ARP, so goroce resolves its peer on-link) whose eth1, towards
// 198.18.0.2, is a real marking bottleneck: tbf at rateMbit with a RED
// child that marks ECN-capable packets CE instead of dropping them.
func ccRouterSetup(rateMbit int) string {
	return fmt.Sprintf(`set -e
ip link set eth1 mtu 1500 up
ip addr add 198.18.0.12/32 dev eth1
ip route add 198.18.0.2/32 dev eth1
for i in all eth0 eth1; do
	echo 1 > /proc/sys/net/ipv4/conf/$i/proxy_arp
	echo 0 > /proc/sys/net/ipv4/conf/$i/rp_filter
	echo 0 > /proc/sys/net/ipv4/conf/$i/send_redirects
done
echo 1 > /proc/sys/net/ipv4/ip_forward
tc qdisc add dev eth1 root handle 1: tbf rate %[1]dmbit burst 16kb latency 200ms
tc qdisc add dev eth1 parent 1:1 handle 10: red limit 400000 min 15000 max 45000 avpkt 1100 burst 20 probability 0.5 bandwidth %[1]dmbit ecn
tc -s qdisc show dev eth1
`, rateMbit)
}

// TestCCRealRED sends RDMA WRITEs from a goroce device in one namespace to
// one in another through a Debian kernel routing them over a tbf+RED
// bottleneck with ECN: the kernel's RED marks goroce's ECT(0) packets CE,
// the receiving device answers with CNPs, the sender's DCQCN cuts its rate
// and paces, and every byte arrives. Then the same without congestion
// control: nothing is marked (Not-ECT), RED drops instead and the transport
// retransmits.
func TestCCRealRED(t *testing.T) {
	const rate = 20 // Mb/s
	h := New(t, Config{VMs: 1, NoRXE: true, Router: true})
	h.Run(0, ccRouterSetup(rate), 2*time.Minute).Check(t)
	for _, c := range []struct {
		name string
		cc   bool
		set  map[string]string
	}{
		{"dcqcn", true, nil},
		// The demo's profile (docs/congestion.md): the paper's α timer.
		{"dcqcn-alpha55", true, map[string]string{"rp_dce_tcp_rtt": "55", "rp_dce_tcp_g": "1020"}},
		{"none", false, nil},
	} {
		cc := c.cc
		t.Run(c.name, func(t *testing.T) {
			var p *qp.CCParams
			if cc {
				v := qp.DefaultCCParams()
				v.PortRate = 1_000_000_000
				for k, val := range c.set {
					if err := v.Set(k, val); err != nil {
						t.Fatal(err)
					}
				}
				p = &v
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			var a, b *qp.Device
			if err := h.HostDo(func() (err error) {
				a, _, err = qp.OpenInterface(ctx, h.HostIface(), qp.InterfaceOptions{Backend: qp.BackendAFPacket, CC: p, Logger: log})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			if err := h.Host2Do(func() (err error) {
				b, _, err = qp.OpenInterface(ctx, h.HostIface2(), qp.InterfaceOptions{Backend: qp.BackendAFPacket, CC: p, Logger: log})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			const msg, count = 64 << 10, 32
			o := sim.QPOptions{BufSize: count * msg, Caps: qp.Caps{MaxSendWR: count, MaxRecvWR: 1}}
			ea, eb, err := sim.ConnectQPs(ctx, a, b, o, o)
			if err != nil {
				t.Fatal(err)
			}
			for i := range ea.Buf {
				ea.Buf[i] = byte(i*31 + i>>16)
			}
			before := h.Run(0, "tc -s qdisc show dev eth1", time.Minute).Check(t).Stdout
			t0 := time.Now()
			for i := 0; i < count; i++ {
				if err := ea.QP.PostSend(&qp.SendWR{WRID: uint64(i), Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
					SGL: []qp.SGE{ea.SGE(i*msg, msg)}, RemoteAddr: eb.MR.IOVA() + uint64(i*msg), RKey: eb.MR.RKey()}); err != nil {
					t.Fatal(err)
				}
			}
			// The sender's rate, sampled every millisecond while it runs.
			var minRate, sumRate, samples int64 = 1 << 62, 0, 0
			stop := make(chan struct{})
			sampled := make(chan struct{})
			go func() {
				defer close(sampled)
				tk := time.NewTicker(time.Millisecond)
				defer tk.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tk.C:
					}
					if r := ea.QP.CongestionState().CurrentRate; cc {
						minRate, sumRate, samples = min(minRate, r), sumRate+r, samples+1
					}
				}
			}()
			var wcs [1]qp.WC
			for done := 0; done < count; {
				_, err := ea.SendCQ.Wait(ctx, wcs[:])
				wc := wcs[0]
				if err != nil {
					t.Fatalf("%d of %d WRITEs done: %v", done, count, err)
				}
				if wc.Status != qp.WCSuccess {
					t.Fatalf("WRITE %d: %v", wc.WRID, wc.Status)
				}
				done++
			}
			el := time.Since(t0)
			close(stop)
			<-sampled
			meanRate := int64(0)
			if samples > 0 {
				meanRate = sumRate / samples
			}
			if !bytes.Equal(ea.Buf, eb.Buf) {
				t.Fatal("the received bytes differ")
			}
			after := h.Run(0, "tc -s qdisc show dev eth1", time.Minute).Check(t).Stdout
			ca, cb := a.Counters(), b.Counters()
			t.Logf("%d × 64 KiB in %v (%.1f Mb/s through the %d Mb/s bottleneck)", count, el.Round(time.Millisecond),
				float64(count*msg*8)/el.Seconds()/1e6, rate)
			rates := ""
			if cc {
				rates = fmt.Sprintf("; DCQCN rate (1 ms samples) lowest %.1f Mb/s, mean %.1f Mb/s", float64(minRate)/1e6, float64(meanRate)/1e6)
			}
			t.Logf("receiver: np_ecn_marked_roce_packets %d np_cnp_sent %d; sender: rp_cnp_handled %d retransmitted_pkts %d%s",
				cb[qp.CntNPECNMarkedRoCEPackets], cb[qp.CntNPCNPSent], ca[qp.CntRPCNPHandled], ca[qp.CntRetransmittedPkts], rates)
			t.Logf("qdisc before:\n%s\nafter:\n%s", before, after)
			if cc {
				if cb[qp.CntNPECNMarkedRoCEPackets] == 0 || cb[qp.CntNPCNPSent] == 0 || ca[qp.CntRPCNPHandled] != cb[qp.CntNPCNPSent] || minRate >= 1_000_000_000 {
					t.Errorf("no congestion signal went round: marked %d, CNPs %d, handled %d, lowest rate %d",
						cb[qp.CntNPECNMarkedRoCEPackets], cb[qp.CntNPCNPSent], ca[qp.CntRPCNPHandled], minRate)
				}
			} else if cb[qp.CntNPECNMarkedRoCEPackets] != 0 || ca[qp.CntRPCNPHandled] != 0 {
				t.Errorf("CE marks or CNPs without congestion control")
			}
		})
	}
}
