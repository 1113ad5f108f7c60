//go:build linux

package interop

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/internal/pcapfile"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/qp"
)

// TestCM checks goroce's connection manager (package cm) against the VM
// kernel's ib_cm/rdma_cm at the CM level, with a goroce device in the host
// namespace:
//
//   - goroce Dial to a port nobody listens on in the VM: the kernel's REJ
//     "invalid service ID" is cm.ErrConnRefused;
//   - the stock rping client against the goroce device with no listener:
//     goroce's REJ (reason 8 on the wire) makes rping report
//     RDMA_CM_EVENT_REJECTED, error 8, and exit non-zero;
//   - a goroce Listener accepting a stock `rping -c -C 1` connection:
//     REQ → REP → RTU complete, the QP reaches RTS, and rping's first SEND
//     (its 16-byte start-buffer message) arrives on the receive posted in
//     Prepare; goroce's Close then disconnects rping with DREQ → DREP;
//   - goroce Dial to a stock `rping -s -C 1 -v` server: the QP works with the
//     negotiated attributes both ways — the server RDMA READs the buffer our
//     first SEND advertises (it prints it: "server ping data: ...") and
//     SENDs its go-ahead back;
//   - SIDR both ways with udaddy: goroce DialUD resolves `udaddy -b` (its QPN
//     and RDMA_UDP_QKEY) and trades a datagram with it; a `udaddy -s` client
//     resolves a goroce ListenUD, sends to its QP and gets goroce's reply.
func TestCM(t *testing.T) {
	h := New(t, Config{VMs: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var dev *qp.Device
	if err := h.HostDo(func() (err error) {
		dev, _, err = qp.OpenInterface(ctx, h.HostIface(), qp.InterfaceOptions{
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	vm := h.VMIP(0)
	host := h.HostIP()

	t.Run("DialRefusedByKernel", func(t *testing.T) {
		pcap := filepath.Join(t.TempDir(), "dial_rej.pcap")
		c, err := h.Capture(pcap, "udp port 4791")
		if err != nil {
			t.Fatal(err)
		}
		dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
		_, err = cm.Dial(dctx, dev, fmt.Sprintf("%v:7999", vm), cm.Options{})
		dcancel()
		c.Stop()
		var re *cm.RejectError
		if !errors.Is(err, cm.ErrConnRefused) || !errors.As(err, &re) || re.Reason != mad.RejInvalidServiceID {
			t.Fatalf("Dial to %v:7999 (no listener): %v", vm, err)
		}
		t.Logf("Dial: %v; on the wire: %s", err, strings.Join(cmMessages(t, pcap), ", "))
	})

	t.Run("RpingRefusedByGoroce", func(t *testing.T) {
		unregister, err := cm.Register(dev)
		if err != nil {
			t.Fatal(err)
		}
		defer unregister()
		pcap := filepath.Join(t.TempDir(), "rping_rej.pcap")
		c, err := h.Capture(pcap, "udp port 4791")
		if err != nil {
			t.Fatal(err)
		}
		r := h.Run(0, fmt.Sprintf("rping -c -a %v -p 7998 -C 1 -v", host), 60*time.Second)
		c.Stop()
		msgs := cmMessages(t, pcap)
		t.Logf("rping: exit %d, %q; on the wire: %s", r.ExitCode, r.Output(), strings.Join(msgs, ", "))
		if r.Err != nil || r.ExitCode == 0 || !strings.Contains(r.Output(), "RDMA_CM_EVENT_REJECTED, error 8") {
			t.Fatalf("rping against a goroce device with no listener:\n%s", r)
		}
		if !contains(msgs, fmt.Sprintf("%v>%v REQ", vm, host)) || !contains(msgs, fmt.Sprintf("%v>%v REJ reason 8", host, vm)) {
			t.Fatalf("capture lacks the REQ and its REJ reason 8: %v", msgs)
		}
	})

	t.Run("RpingConnectsToGoroce", func(t *testing.T) {
		pd := dev.AllocPD()
		buf := make([]byte, 2*64)
		mr, err := pd.RegMR(buf, qp.LocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		l, err := cm.Listen(ctx, dev, fmt.Sprintf("%v:7174", host), cm.Options{PD: pd,
			Prepare: func(q *qp.QP) error {
				// rping posts its receive before rdma_accept/rdma_connect.
				for i := range 2 {
					err := q.PostRecv(&qp.RecvWR{WRID: uint64(i), SGL: []qp.SGE{{Addr: mr.IOVA() + uint64(64*i), Length: 64, LKey: mr.LKey()}}})
					if err != nil {
						return err
					}
				}
				return nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		pcap := filepath.Join(t.TempDir(), "rping_connect.pcap")
		c, err := h.Capture(pcap, "udp port 4791")
		if err != nil {
			t.Fatal(err)
		}
		job := h.Start(0, fmt.Sprintf("rping -c -a %v -p 7174 -C 1 -v", host))
		actx, acancel := context.WithTimeout(ctx, 60*time.Second)
		conn, err := l.Accept(actx)
		acancel()
		if err != nil {
			job.Kill()
			c.Stop()
			t.Fatalf("Accept: %v; rping: %s; on the wire: %v", err, job.Wait(5*time.Second), cmMessages(t, pcap))
		}
		if st := conn.QP().State(); st != qp.StateRTS {
			t.Errorf("accepted QP in %v", st)
		}
		wcs := make([]qp.WC, 1)
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		_, err = conn.RecvCQ().Wait(wctx, wcs)
		wcancel()
		if err != nil || wcs[0].Err() != nil || wcs[0].ByteLen != 16 {
			t.Errorf("rping's first SEND: %v %v, %d bytes", err, wcs[0].Err(), wcs[0].ByteLen)
		} else {
			// struct rping_rdma_info: be64 buf, be32 rkey, be32 size (64).
			t.Logf("rping's start buffer: addr %#x rkey %#x size %d", binary.BigEndian.Uint64(buf),
				binary.BigEndian.Uint32(buf[8:]), binary.BigEndian.Uint32(buf[12:]))
			if size := binary.BigEndian.Uint32(buf[12:]); size != 64 {
				t.Errorf("rping's start buffer size %d, want 64", size)
			}
		}
		if err := conn.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		r := job.Wait(30 * time.Second)
		c.Stop()
		msgs := cmMessages(t, pcap)
		t.Logf("rping after goroce's DREQ: exit %d, %q; on the wire: %s", r.ExitCode, r.Output(), strings.Join(msgs, ", "))
		if r.Err != nil {
			t.Errorf("rping did not end after the DREQ: %s", r)
		}
		for _, m := range []string{
			fmt.Sprintf("%v>%v REQ", vm, host), fmt.Sprintf("%v>%v REP", host, vm), fmt.Sprintf("%v>%v RTU", vm, host),
			fmt.Sprintf("%v>%v DREQ", host, vm), fmt.Sprintf("%v>%v DREP", vm, host),
		} {
			if !contains(msgs, m) {
				t.Errorf("capture lacks %q: %v", m, msgs)
			}
		}
	})

	t.Run("DialRpingServer", func(t *testing.T) { dialRpingServer(t, ctx, h, dev) })
	t.Run("DialUDToUdaddy", func(t *testing.T) { dialUdaddy(t, ctx, h, dev) })
	t.Run("UdaddyToListenUD", func(t *testing.T) { listenUdaddy(t, ctx, h, dev) })
}

// udMsg is the size of the receives for udaddy's datagrams (it sends 100
// bytes by default).
const udMsg = 1024

// udBuffers registers n receive buffers of GRH + udMsg bytes and a send
// buffer, and returns Prepare posting the receives.
func udBuffers(t *testing.T, pd *qp.PD, n int) (recv []byte, mr *qp.MR, prepare func(q *qp.QP) error) {
	recv = make([]byte, n*(qp.GRHLen+udMsg))
	mr, err := pd.RegMR(recv, qp.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	return recv, mr, func(q *qp.QP) error {
		for i := range n {
			if err := q.PostRecv(&qp.RecvWR{WRID: uint64(i), SGL: []qp.SGE{{
				Addr: mr.IOVA() + uint64(i*(qp.GRHLen+udMsg)), Length: qp.GRHLen + udMsg, LKey: mr.LKey()}}}); err != nil {
				return err
			}
		}
		return nil
	}
}

// udSend sends one n-byte datagram the way udaddy does: SEND_WITH_IMM
// carrying the sender's QPN, which udaddy's server answers
// (create_reply_ah: remote_qpn = the immediate).
func udSend(t *testing.T, ctx context.Context, q *qp.QP, cq *qp.CQ, pd *qp.PD, ah *qp.AH, qpn, qkey uint32, n int) {
	t.Helper()
	buf := make([]byte, n)
	copy(buf, "goroce datagram")
	mr, err := pd.RegMR(buf, qp.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.PostSend(&qp.SendWR{WRID: 100, Opcode: qp.WRSendWithImm, Imm: q.QPN(), Flags: qp.SendSignaled,
		SGL: []qp.SGE{{Addr: mr.IOVA(), Length: uint32(n), LKey: mr.LKey()}},
		AH:  ah, RemoteQPN: qpn, RemoteQKey: qkey}); err != nil {
		t.Fatal(err)
	}
	wcs := make([]qp.WC, 1)
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if _, err := cq.Wait(wctx, wcs); err != nil || wcs[0].Err() != nil {
		t.Fatalf("UD send: %v %v", err, wcs[0].Err())
	}
}

// dialUdaddy: goroce DialUD resolves a stock udaddy server through SIDR,
// sends it one datagram and receives its reply.
func dialUdaddy(t *testing.T, ctx context.Context, h *Harness, dev *qp.Device) {
	vm := h.VMIP(0)
	pcap := filepath.Join(t.TempDir(), "udaddy.pcap")
	c, err := h.Capture(pcap, "udp port 4791")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	job := h.Start(0, fmt.Sprintf("udaddy -b %v -C 1", vm))
	defer job.Kill()
	pd := dev.AllocPD()
	_, _, prepare := udBuffers(t, pd, 4)
	var e *cm.UDEndpoint
	for deadline := time.Now().Add(30 * time.Second); ; {
		dctx, dcancel := context.WithTimeout(ctx, 20*time.Second)
		e, err = cm.DialUD(dctx, dev, fmt.Sprintf("%v:7174", vm), cm.Options{PD: pd, Prepare: prepare})
		dcancel()
		if err == nil || !errors.Is(err, cm.ErrConnRefused) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("DialUD the udaddy server: %v; udaddy: %s", err, job.Wait(time.Second))
	}
	defer e.Close()
	t.Logf("SIDR: udaddy's QP %#x, Q_Key %#x", e.RemoteQPN(), e.RemoteQKey())
	if e.RemoteQKey() != 0x01234567 {
		t.Errorf("Q_Key %#x, want RDMA_UDP_QKEY", e.RemoteQKey())
	}
	udSend(t, ctx, e.QP(), e.SendCQ(), pd, e.AH(), e.RemoteQPN(), e.RemoteQKey(), 100)
	wcs := make([]qp.WC, 1)
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if _, err := e.RecvCQ().Wait(wctx, wcs); err != nil || wcs[0].Err() != nil {
		t.Fatalf("udaddy's reply: %v %v; udaddy: %s", err, wcs[0].Err(), job.Wait(time.Second))
	}
	if wcs[0].SrcQP != e.RemoteQPN() {
		t.Errorf("reply from QP %#x, resolved %#x", wcs[0].SrcQP, e.RemoteQPN())
	}
	r := job.Wait(30 * time.Second)
	c.Stop()
	t.Logf("udaddy -b: exit %d, %q; on the wire: %s", r.ExitCode, r.Output(), strings.Join(cmMessages(t, pcap), ", "))
	if !r.OK() || !strings.Contains(r.Output(), "test complete") {
		t.Errorf("udaddy server:\n%s", r)
	}
}

// listenUdaddy: a stock udaddy client resolves a goroce ListenUD through
// SIDR, sends its datagram to the listener's QP, and gets goroce's reply
// (addressed from the receive's GRH and source QP).
func listenUdaddy(t *testing.T, ctx context.Context, h *Harness, dev *qp.Device) {
	host := h.HostIP()
	pd := dev.AllocPD()
	recv, _, prepare := udBuffers(t, pd, 4)
	l, err := cm.ListenUD(ctx, dev, fmt.Sprintf("%v:7174", host), cm.Options{PD: pd, Prepare: prepare})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	job := h.Start(0, fmt.Sprintf("udaddy -s %v -C 1", host))
	defer job.Kill()
	wcs := make([]qp.WC, 1)
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if _, err := l.RecvCQ().Wait(wctx, wcs); err != nil || wcs[0].Err() != nil {
		t.Fatalf("udaddy's datagram: %v %v; udaddy: %s", err, wcs[0].Err(), job.Wait(time.Second))
	}
	wc := wcs[0]
	off := int(wc.WRID) * (qp.GRHLen + udMsg)
	attr, err := qp.AHAttrFromWC(&wc, recv[off:off+qp.GRHLen])
	if err != nil {
		t.Fatal(err)
	}
	ah, err := pd.CreateAH(ctx, attr)
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Destroy()
	t.Logf("udaddy's datagram: %d bytes from %v QP %#x", wc.ByteLen-qp.GRHLen, attr.GID, wc.SrcQP)
	udSend(t, ctx, l.QP(), l.SendCQ(), pd, ah, wc.SrcQP, 0x01234567, int(wc.ByteLen-qp.GRHLen))
	r := job.Wait(30 * time.Second)
	t.Logf("udaddy -s: exit %d, %q", r.ExitCode, r.Output())
	if !r.OK() || !strings.Contains(r.Output(), "test complete") {
		t.Errorf("udaddy client:\n%s", r)
	}
}

func dialRpingServer(t *testing.T, ctx context.Context, h *Harness, dev *qp.Device) {
	vm := h.VMIP(0)
	pcap := filepath.Join(t.TempDir(), "rping_server.pcap")
	c, err := h.Capture(pcap, "udp port 4791")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	job := h.Start(0, fmt.Sprintf("rping -s -a %v -p 7174 -C 1 -v", vm))
	defer job.Kill()
	pd := dev.AllocPD()
	const text = "goroce ping data"
	start := make([]byte, 64) // rping's start buffer: what the server READs
	copy(start, text)
	recv, info := make([]byte, 64), make([]byte, 16)
	startMR, err := pd.RegMR(start, qp.LocalWrite|qp.RemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	recvMR, err := pd.RegMR(recv, qp.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	infoMR, err := pd.RegMR(info, qp.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	o := cm.Options{PD: pd, Prepare: func(q *qp.QP) error {
		return q.PostRecv(&qp.RecvWR{WRID: 1, SGL: []qp.SGE{{Addr: recvMR.IOVA(), Length: 64, LKey: recvMR.LKey()}}})
	}}
	// rdma_cm has no TCP socket to wait for: retry while the server starts.
	var conn *cm.Conn
	for deadline := time.Now().Add(30 * time.Second); ; {
		dctx, dcancel := context.WithTimeout(ctx, 20*time.Second)
		conn, err = cm.Dial(dctx, dev, fmt.Sprintf("%v:7174", vm), o)
		dcancel()
		if err == nil || !errors.Is(err, cm.ErrConnRefused) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("Dial the rping server: %v; rping: %s", err, job.Wait(time.Second))
	}
	if st := conn.QP().State(); st != qp.StateRTS {
		t.Errorf("QP in %v", st)
	}
	// struct rping_rdma_info: be64 buf, be32 rkey, be32 size.
	binary.BigEndian.PutUint64(info, startMR.IOVA())
	binary.BigEndian.PutUint32(info[8:], startMR.RKey())
	binary.BigEndian.PutUint32(info[12:], 64)
	if err := conn.QP().PostSend(&qp.SendWR{WRID: 2, Opcode: qp.WRSend, Flags: qp.SendSignaled,
		SGL: []qp.SGE{{Addr: infoMR.IOVA(), Length: 16, LKey: infoMR.LKey()}}}); err != nil {
		t.Fatal(err)
	}
	wcs := make([]qp.WC, 1)
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	for _, cq := range []*qp.CQ{conn.SendCQ(), conn.RecvCQ()} {
		if _, err := cq.Wait(wctx, wcs); err != nil || wcs[0].Err() != nil {
			t.Fatalf("%v completion: %v %v", wcs[0].Opcode, err, wcs[0].Err())
		}
	}
	if wcs[0].ByteLen != 16 {
		t.Errorf("the server's go-ahead is %d bytes, want 16", wcs[0].ByteLen)
	}
	if err := conn.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	r := job.Wait(30 * time.Second)
	c.Stop()
	t.Logf("rping -s: exit %d, %q; on the wire: %s", r.ExitCode, r.Output(), strings.Join(cmMessages(t, pcap), ", "))
	if !strings.Contains(r.Output(), "server ping data: "+text) {
		t.Errorf("the rping server did not READ our buffer:\n%s", r)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// cmMessages lists the CM MADs of a capture as "src>dst NAME" ("REJ reason
// N" for a REJ): UD SEND_ONLY to QP1 on UDP 4791, the MAD after the
// 12-byte BTH and 8-byte DETH.
func cmMessages(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapfile.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		proto, l4 := l4Payload(rec.Data)
		if proto != 17 || len(l4) < 8+12+8+mad.MADLen || binary.BigEndian.Uint16(l4[2:]) != rocePort || l4[8] != 0x64 {
			continue
		}
		if qpn := binary.BigEndian.Uint32(l4[8+4:]) & 0xFFFFFF; qpn != 1 {
			continue
		}
		_, m, err := mad.Parse(l4[8+12+8:])
		if err != nil {
			continue
		}
		// The IPv4 source and destination sit 20 and 16 bytes before the
		// UDP header (the harness uses IPv4 only).
		ip := rec.Data[len(rec.Data)-len(l4)-20:]
		name := m.Name()
		if rej, ok := m.(*mad.REJ); ok {
			name = fmt.Sprintf("REJ reason %d", rej.Reason)
		}
		out = append(out, fmt.Sprintf("%d.%d.%d.%d>%d.%d.%d.%d %s", ip[12], ip[13], ip[14], ip[15], ip[16], ip[17], ip[18], ip[19], name))
	}
}
