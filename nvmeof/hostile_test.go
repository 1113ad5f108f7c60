package nvmeof_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/nvmeof"
	"github.com/goroce/goroce/qp"
)

// raw is a hand-driven host queue: it sends any bytes as a capsule and
// returns the CQE, to feed the target what a correct host never sends.
type raw struct {
	t    *testing.T
	c    *cm.Conn
	mr   *qp.MR // [0,4096): send buffer; [4096, 4096+16*16): CQEs; then 64 KiB of data
	next uint64
}

const rawData = 4096 + 16*16

func dialRaw(t *testing.T, ctx context.Context, dev *qp.Device, qid uint16) *raw {
	t.Helper()
	pd := dev.AllocPD()
	mr, err := pd.RegMR(make([]byte, rawData+64<<10), qp.LocalWrite|qp.RemoteRead|qp.RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	r := &raw{t: t, mr: mr}
	c, err := cm.Dial(ctx, dev, taddr, cm.Options{PD: pd, ResponderResources: 16,
		PrivateData: nvmeof.CMRequest{QID: qid, HRQSize: 16, HSQSize: 15}.Encode(),
		Prepare: func(q *qp.QP) error {
			for i := range 16 {
				if err := q.PostRecv(&qp.RecvWR{WRID: uint64(i), SGL: []qp.SGE{{Addr: mr.IOVA() + 4096 + uint64(16*i), Length: 16, LKey: mr.LKey()}}}); err != nil {
					return err
				}
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	r.c = c
	t.Cleanup(func() { c.Close() })
	return r
}

// send sends b as a capsule and returns the completion (ok false: the
// connection ended instead).
func (r *raw) send(ctx context.Context, b []byte) (nvmeof.Completion, bool) {
	r.t.Helper()
	copy(r.mr.Bytes(), b)
	if err := r.c.QP().PostSend(&qp.SendWR{WRID: 1 << 40, Opcode: qp.WRSend, Flags: qp.SendSignaled,
		SGL: []qp.SGE{{Addr: r.mr.IOVA(), Length: uint32(len(b)), LKey: r.mr.LKey()}}}); err != nil {
		return nvmeof.Completion{}, false
	}
	wcs := make([]qp.WC, 4)
	for {
		ctx2, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := r.c.RecvCQ().Wait(ctx2, wcs)
		cancel()
		if err != nil {
			return nvmeof.Completion{}, false
		}
		for _, wc := range wcs[:n] {
			if wc.Status != qp.WCSuccess {
				return nvmeof.Completion{}, false
			}
			if wc.WRID < 16 {
				i := wc.WRID
				cqe, err := nvmeof.DecodeCompletion(bytes.Clone(r.mr.Bytes()[4096+16*i : 4096+16*i+16]))
				if err != nil {
					r.t.Fatal(err)
				}
				r.c.QP().PostRecv(&qp.RecvWR{WRID: i, SGL: []qp.SGE{{Addr: r.mr.IOVA() + 4096 + 16*i, Length: 16, LKey: r.mr.LKey()}}})
				return cqe, true
			}
		}
	}
}

func (r *raw) keyed(n int, key uint32) nvmeof.SGL {
	return nvmeof.SGL{Addr: r.mr.IOVA() + rawData, Length: uint32(n), Key: key, Type: nvmeof.SGLTypeKeyed}
}

// connect makes the raw queue an admin queue of a new controller and
// enables it; it returns the controller ID.
func (r *raw) connect(ctx context.Context, nqn string) (nvmeof.Completion, bool) {
	var c nvmeof.Command
	c[0], c[1], c[4] = nvmeof.OpFabrics, 0x40, nvmeof.FabricsConnect
	binary.LittleEndian.PutUint16(c[44:], 15)
	copy(r.mr.Bytes()[rawData:], nvmeof.ConnectData{CNTLID: 0xffff, SubNQN: nqn, HostNQN: "nqn.x:raw"}.Encode())
	c.SetSGL(r.keyed(1024, r.mr.RKey()))
	return r.send(ctx, c[:])
}

func TestHostileCapsules(t *testing.T) {
	e := setup(t, 1<<20, 512, nil)
	ctx := ctxT(t)
	// A well-behaved host whose data must survive everything below.
	good, err := nvmeof.Dial(ctx, e.a, taddr, subNQN, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	ns := good.Namespaces()[0]
	want := bytes.Repeat([]byte("goroce!!"), 512)
	if _, err := ns.WriteAt(want, 4096); err != nil {
		t.Fatal(err)
	}

	r := dialRaw(t, ctx, e.a, 0)
	// Before Connect: anything else is "invalid opcode".
	var c nvmeof.Command
	c.SetHeader(nvmeof.AdminIdentify, 1, 0)
	if cqe, ok := r.send(ctx, c[:]); !ok || cqe.Status != nvmeof.StatusInvalidOpcode|nvmeof.StatusDNR || cqe.CID != 1 {
		t.Fatalf("identify before connect: %+v %v", cqe, ok)
	}
	if cqe, ok := r.connect(ctx, subNQN); !ok || cqe.Status != 0 {
		t.Fatalf("connect: %+v %v", cqe, ok)
	}
	var p nvmeof.Command
	p[0], p[1], p[4] = nvmeof.OpFabrics, 0x40, nvmeof.FabricsPropertySet
	binary.LittleEndian.PutUint32(p[44:], nvmeof.RegCC)
	binary.LittleEndian.PutUint64(p[48:], 1|6<<16|4<<20)
	// No data: a null keyed descriptor, as the Linux host sends (a zeroed
	// data pointer, type 0x00, is "invalid SGL subtype" to nvmet too).
	p.SetSGL(nvmeof.SGL{Type: nvmeof.SGLTypeKeyed})
	if cqe, ok := r.send(ctx, p[:len(p):len(p)][:64]); !ok || cqe.Status != 0 {
		t.Fatalf("CC.EN: %+v", cqe)
	}
	for _, tc := range []struct {
		name string
		cmd  func(c *nvmeof.Command)
		want uint16
	}{
		{"PSDT PRP", func(c *nvmeof.Command) { c.SetHeader(nvmeof.AdminIdentify, 2, 0); c[1] = 0; c.SetCDW(10, 1) },
			nvmeof.StatusInvalidField | nvmeof.StatusDNR},
		{"unknown opcode", func(c *nvmeof.Command) { c.SetHeader(0x7e, 2, 0) }, nvmeof.StatusInvalidOpcode | nvmeof.StatusDNR},
		{"SGL type 0x2", func(c *nvmeof.Command) {
			c.SetHeader(nvmeof.AdminIdentify, 2, 0)
			c.SetCDW(10, 1)
			c.SetSGL(nvmeof.SGL{Type: 0x20, Length: 4096})
		}, nvmeof.StatusSGLInvalidType | nvmeof.StatusDNR},
		{"keyed subtype 0x5", func(c *nvmeof.Command) {
			c.SetHeader(nvmeof.AdminIdentify, 2, 0)
			c.SetCDW(10, 1)
			c.SetSGL(nvmeof.SGL{Type: 0x45, Length: 4096})
		}, nvmeof.StatusInvalidField | nvmeof.StatusDNR},
		{"identify of 100 bytes", func(c *nvmeof.Command) {
			c.SetHeader(nvmeof.AdminIdentify, 2, 0)
			c.SetCDW(10, 1)
			c.SetSGL(r.keyed(100, r.mr.RKey()))
		}, nvmeof.StatusSGLInvalidData | nvmeof.StatusDNR},
		{"in-capsule data for a read", func(c *nvmeof.Command) {
			c.SetHeader(nvmeof.AdminIdentify, 2, 0)
			c.SetCDW(10, 1)
			c.SetSGL(nvmeof.SGL{Type: nvmeof.SGLTypeInline, Length: 4096})
		}, nvmeof.StatusInvalidField | nvmeof.StatusDNR},
		{"unknown log page", func(c *nvmeof.Command) {
			c.SetHeader(nvmeof.AdminGetLogPage, 2, 0)
			c.SetCDW(10, 0x55|(1024/4-1)<<16)
			c.SetSGL(r.keyed(1024, r.mr.RKey()))
		}, nvmeof.StatusInvalidField | nvmeof.StatusDNR},
		{"unknown CNS", func(c *nvmeof.Command) {
			c.SetHeader(nvmeof.AdminIdentify, 2, 0)
			c.SetCDW(10, 0x99)
			c.SetSGL(r.keyed(4096, r.mr.RKey()))
		}, nvmeof.StatusInvalidField | nvmeof.StatusDNR},
	} {
		c = nvmeof.Command{}
		tc.cmd(&c)
		if cqe, ok := r.send(ctx, c[:]); !ok || cqe.Status != tc.want || cqe.CID != 2 {
			t.Errorf("%s: %+v (ok %v), want status %#x", tc.name, cqe, ok, tc.want)
		}
	}
	// A wrong key: the target's RDMA WRITE is NAKed and the target ends
	// the queue (nvmet_rdma_error_comp).
	c = nvmeof.Command{}
	c.SetHeader(nvmeof.AdminIdentify, 3, 0)
	c.SetCDW(10, 1)
	c.SetSGL(r.keyed(4096, r.mr.RKey()^0x5a00))
	if cqe, ok := r.send(ctx, c[:]); ok {
		t.Fatalf("identify with a wrong key completed: %+v", cqe)
	}
	select {
	case <-r.c.Done():
	case <-ctx.Done():
		t.Fatal("the queue with a wrong key was not disconnected")
	}

	// A capsule shorter than 64 bytes: fatal for that queue only.
	r2 := dialRaw(t, ctx, e.a, 0)
	if cqe, ok := r2.connect(ctx, subNQN); !ok || cqe.Status != 0 {
		t.Fatalf("connect: %+v", cqe)
	}
	if cqe, ok := r2.send(ctx, make([]byte, 20)); ok {
		t.Fatalf("a 20-byte capsule was answered: %+v", cqe)
	}
	// A length beyond the host's MR: the target's RDMA READ fails.
	r3 := dialRaw(t, ctx, e.a, 0)
	var cc nvmeof.Command
	cc[0], cc[1], cc[4] = nvmeof.OpFabrics, 0x40, nvmeof.FabricsConnect
	binary.LittleEndian.PutUint16(cc[44:], 15)
	s := r3.keyed(1024, r3.mr.RKey())
	s.Addr += 64<<10 - 512 // the last 512 bytes of the MR and beyond
	cc.SetSGL(s)
	if cqe, ok := r3.send(ctx, cc[:]); ok {
		t.Fatalf("connect with an SGL beyond the MR: %+v", cqe)
	}

	got := make([]byte, len(want))
	if _, err := ns.ReadAt(got, 4096); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the good host after the hostile ones: %v", err)
	}
	// The target counts a queue's error on its own goroutine, which may run
	// after the host saw the queue end: wait for the counts (bounded by ctx).
	for e.t.Stats().MalformedCapsules.Load() < 1 || e.t.Stats().QueueErrors.Load() < 2 {
		if ctx.Err() != nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if e.t.Stats().MalformedCapsules.Load() != 1 || e.t.Stats().QueueErrors.Load() < 2 {
		t.Fatalf("stats: malformed %d, queue errors %d", e.t.Stats().MalformedCapsules.Load(), e.t.Stats().QueueErrors.Load())
	}
}

func TestOutOfRangeAndBadNamespace(t *testing.T) {
	e := setup(t, 1<<20, 4096, nil)
	ctx := ctxT(t)
	c, err := nvmeof.Dial(ctx, e.a, taddr, subNQN, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var cmd nvmeof.Command
	cmd.SetHeader(nvmeof.IORead, 0, 7)
	cmd.SetRW(0, 1)
	if _, err := c.Submit(ctx, &cmd, make([]byte, 4096), true); !isStatus(err, nvmeof.StatusInvalidNS|nvmeof.StatusDNR) {
		t.Errorf("read of namespace 7: %v", err)
	}
	cmd = nvmeof.Command{}
	cmd.SetHeader(nvmeof.IOWrite, 0, 1)
	cmd.SetRW(255, 2) // the last block and one beyond
	if _, err := c.Submit(ctx, &cmd, make([]byte, 8192), false); !isStatus(err, nvmeof.StatusCapExceeded|nvmeof.StatusDNR) {
		t.Errorf("write across the end: %v", err)
	}
	cmd = nvmeof.Command{}
	cmd.SetHeader(nvmeof.IOWrite, 0, 1)
	cmd.SetRW(0, 2) // 2 blocks, 1 block of data
	if _, err := c.Submit(ctx, &cmd, make([]byte, 4096), false); !isStatus(err, nvmeof.StatusSGLInvalidData|nvmeof.StatusDNR) {
		t.Errorf("write with a short SGL: %v", err)
	}
}

func isStatus(err error, st uint16) bool {
	se, ok := err.(*nvmeof.StatusError)
	return ok && se.Status == st
}

func FuzzParseCapsule(f *testing.F) {
	var c nvmeof.Command
	c.SetHeader(nvmeof.IOWrite, 3, 1)
	c.SetSGL(nvmeof.SGL{Type: nvmeof.SGLTypeKeyedInval, Addr: 1 << 40, Length: 1<<24 - 1, Key: 0xdeadbeef})
	f.Add(c[:])
	f.Add(make([]byte, 10))
	f.Fuzz(func(t *testing.T, b []byte) {
		cmd, inline, err := nvmeof.ParseCapsule(b)
		if err != nil {
			if len(b) >= nvmeof.SQESize {
				t.Fatalf("capsule of %d bytes refused: %v", len(b), err)
			}
			return
		}
		if len(inline) != len(b)-nvmeof.SQESize {
			t.Fatal("inline length")
		}
		s := cmd.SGL()
		var enc [16]byte
		s.Encode(enc[:])
		if nvmeof.DecodeSGL(enc[:]) != s {
			t.Fatalf("SGL %+v does not round-trip", s)
		}
		if s.Keyed() && s.Length >= 1<<24 {
			t.Fatalf("keyed length %d beyond 24 bits", s.Length)
		}
		_, _ = nvmeof.DecodeConnectData(inline)
		_, _, _, _ = nvmeof.DecodeDiscoveryLog(inline)
		_, _ = nvmeof.DecodeCMRequest(b)
		_ = nvmeof.DecodeCMReply(b)
		if len(b) >= 16 {
			cqe, err := nvmeof.DecodeCompletion(b[:16])
			if err != nil {
				t.Fatal(err)
			}
			var out [16]byte
			cqe.Encode(out[:])
			if c2, _ := nvmeof.DecodeCompletion(out[:]); c2 != cqe {
				t.Fatal("CQE round trip")
			}
		}
	})
}
