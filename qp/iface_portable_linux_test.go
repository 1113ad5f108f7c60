//go:build linux

package qp_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/qp"
)

// lockedBuf is a log sink the device's goroutines may write to while the
// test reads it.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestOpenInterfaceOtherSystems runs OpenInterface with the backend choice
// of the systems without AF_XDP and AF_PACKET (darwin, windows, the BSDs)
// on a veth pair: auto opens the UDP backend, logs why and says it in
// Fallback; afxdp and afpacket fail with ErrNotSupported and leave nothing
// behind; a udp device on each end then carries a 64 KiB RDMA WRITE,
// connected without neighbour resolution on the wire.
func TestOpenInterfaceOtherSystems(t *testing.T) {
	qp.WithoutRawBackends(t)
	p := netns.NewPair(t, netns.Options{MTU: 1500, NoDAD: true})

	for _, backend := range []string{qp.BackendAFXDP, qp.BackendAFPacket} {
		err := p.Do(netns.A, func() error {
			dev, _, err := qp.OpenInterface(context.Background(), p.A.Ifname, qp.InterfaceOptions{Backend: backend, Logger: quiet})
			if dev != nil {
				dev.Close()
			}
			return err
		})
		if !errors.Is(err, qp.ErrNotSupported) || !strings.Contains(err.Error(), "Linux only") {
			t.Errorf("backend %s: err %v, want ErrNotSupported saying Linux only", backend, err)
		}
		if !portFree(t, p, netns.A, p.A.Addr) || xdpAttached(t, p, netns.A) {
			t.Errorf("backend %s: the failed open left the port held or an XDP program", backend)
		}
	}

	var log lockedBuf
	a, ainfo := open(t, p, netns.A, qp.InterfaceOptions{Logger: slog.New(slog.NewTextHandler(&log, nil)), Seed: 1})
	defer a.Close()
	if ainfo.Backend != qp.BackendUDP || ainfo.Mode != "socket" || ainfo.PortHeld {
		t.Errorf("auto: backend %s (%s), port held %v; want udp (socket), not held", ainfo.Backend, ainfo.Mode, ainfo.PortHeld)
	}
	if !strings.Contains(ainfo.Fallback, "Linux only") || !strings.Contains(ainfo.String(), "fallback:") {
		t.Errorf("auto: Fallback %q; info:\n%s", ainfo.Fallback, ainfo)
	}
	if s := log.String(); !strings.Contains(s, "auto uses the udp backend") {
		t.Errorf("auto: the log does not say why udp:\n%s", s)
	}
	b, binfo := open(t, p, netns.B, qp.InterfaceOptions{Backend: qp.BackendUDP, Seed: 2})
	defer b.Close()
	if binfo.Backend != qp.BackendUDP || binfo.Fallback != "" {
		t.Errorf("udp: backend %s, fallback %q", binfo.Backend, binfo.Fallback)
	}

	type end struct {
		cq  *qp.CQ
		q   *qp.QP
		buf []byte
		mr  *qp.MR
	}
	mk := func(dev *qp.Device) *end {
		e := &end{buf: make([]byte, 64<<10)}
		pd := dev.AllocPD()
		var err error
		if e.cq, err = dev.CreateCQ(16); err != nil {
			t.Fatal(err)
		}
		if e.q, err = pd.CreateQP(qp.InitAttr{SendCQ: e.cq, RecvCQ: e.cq,
			Cap: qp.Caps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			t.Fatal(err)
		}
		if e.mr, err = pd.RegMR(e.buf, qp.LocalWrite|qp.RemoteWrite); err != nil {
			t.Fatal(err)
		}
		return e
	}
	ea, eb := mk(a), mk(b)
	// Connect resolves the peer through the device's resolver: for udp
	// that is the synthetic MAC, nothing asked on the wire, so it works on
	// systems without a neighbour table API.
	if err := ea.q.Connect(context.Background(), qp.Remote{QPN: eb.q.QPN(), PSN: 1, GID: p.B.Addr}, qp.ConnectOptions{SQPSN: 2}); err != nil {
		t.Fatal(err)
	}
	if err := eb.q.Connect(context.Background(), qp.Remote{QPN: ea.q.QPN(), PSN: 2, GID: p.A.Addr}, qp.ConnectOptions{SQPSN: 1}); err != nil {
		t.Fatal(err)
	}
	for i := range ea.buf {
		ea.buf[i] = byte(i*7 + 1)
	}
	if err := ea.q.PostSend(&qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
		SGL:        []qp.SGE{{Addr: ea.mr.IOVA(), Length: uint32(len(ea.buf)), LKey: ea.mr.LKey()}},
		RemoteAddr: eb.mr.IOVA(), RKey: eb.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang guard only
	defer cancel()
	var wc [1]qp.WC
	if n, err := ea.cq.Wait(ctx, wc[:]); n != 1 || err != nil {
		t.Fatalf("wait for the WRITE: %d, %v", n, err)
	}
	if wc[0].WRID != 1 || wc[0].Status != qp.WCSuccess || wc[0].Opcode != qp.WCRDMAWrite {
		t.Fatalf("completion %v, want wr 1 RDMA_WRITE success", wc[0])
	}
	// B's receive goroutine wrote B's memory under B's device mutex; the
	// test learnt of it through the kernel (A's ACK), which the race
	// detector cannot see: fence through that mutex.
	b.Counters()
	if !bytes.Equal(eb.buf, ea.buf) {
		t.Fatal("WRITE: data differ")
	}
}
