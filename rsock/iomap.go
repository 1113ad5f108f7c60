package rsock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/goroce/goroce/qp"
)

// ErrNoIOMap is returned by IOMap when the peer offered no free iomap entry,
// and by IOWrite when no entry of the peer covers the offset.
var ErrNoIOMap = errors.New("rsock: no iomap entry")

type iomapMR struct {
	mr     *qp.MR
	offset uint64
}

// IOMapping is a buffer mapped for the peer's IOWrite (riomap).
type IOMapping struct {
	c     *Conn
	index int
	mr    *qp.MR
}

// IOMap registers buf for the peer to write with IOWrite at offsets
// [offset, offset+len(buf)) and tells the peer (riomap with PROT_WRITE,
// which rsocket sends with the next write; IOMap sends it now). The peer must
// have offered iomap entries (its Options.IOMapSize, rsocket's
// RDMA_IOMAPSIZE).
func (c *Conn) IOMap(buf []byte, offset int64) (*IOMapping, error) {
	c.wlock.Lock()
	defer c.wlock.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	idx := -1
	for i, m := range c.iomaps {
		if m == nil {
			idx = i
			break
		}
	}
	if idx < 0 {
		return nil, c.opErr("iomap", ErrNoIOMap)
	}
	mr, err := c.e.pd.RegMR(buf, qp.LocalWrite|qp.RemoteWrite)
	if err != nil {
		return nil, c.opErr("iomap", err)
	}
	c.iomaps[idx] = &iomapMR{mr: mr, offset: uint64(offset)}
	for c.state&stWritable == 0 || !c.canSend() {
		if c.state&stWritable == 0 {
			return nil, c.errLocked("iomap")
		}
		if err := c.wait("iomap", waitWrite, c.wdl.wait()); err != nil {
			return nil, err
		}
	}
	// rs_send_iomaps / rs_write_iomap: the entry in the peer's byte order,
	// through the send ring.
	var b [iomapLen]byte
	c.peerOrder.PutUint64(b[:], uint64(offset))
	sge{addr: mr.IOVA(), key: mr.RKey(), length: uint32(len(buf))}.put(b[8:], c.peerOrder)
	head := c.sbufHead
	first := min(iomapLen, c.e.sbufSize-head)
	copy(c.e.sbuf[head:], b[:first])
	copy(c.e.sbuf, b[first:])
	m := msg(opIOMap, uint32(idx))
	c.post(m, head, first, iomapLen, c.remoteIOMap.addr+uint64(idx)*iomapLen, c.remoteIOMap.key, true)
	c.sseqNo++
	if err := c.q.PostSend(&c.wr); err != nil {
		c.fail(fmt.Errorf("rsock: post iomap: %w", err))
		return nil, c.opErr("iomap", err)
	}
	return &IOMapping{c: c, index: idx, mr: mr}, nil
}

// Writes counts the peer's WRITEs into the mapping so far.
func (m *IOMapping) Writes() uint64 { return m.mr.Writes() }

// WaitWrite waits until more than after WRITEs landed in the mapping and
// returns their count; their data is then visible in the buffer.
func (m *IOMapping) WaitWrite(ctx context.Context, after uint64) (uint64, error) {
	return m.mr.WaitWrite(ctx, after)
}

// Unmap deregisters the mapping (riounmap); its entry may be mapped again.
func (m *IOMapping) Unmap() error {
	c := m.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.iomaps[m.index] == nil || c.iomaps[m.index].mr != m.mr {
		return errors.New("rsock: mapping already unmapped")
	}
	c.iomaps[m.index] = nil
	return m.mr.Deregister()
}

// post fills c.wr for xfer bytes at head of the send ring (first of them
// before its end) and accounts for them (c.mu held).
func (c *Conn) post(m uint32, head, first, xfer int, raddr uint64, rkey uint32, imm bool) {
	c.sqeAvail--
	c.sbufAvail -= xfer
	c.sgl[0] = qp.SGE{Addr: c.e.smr.IOVA() + uint64(head), Length: uint32(first), LKey: c.e.smr.LKey()}
	nsge := 1
	if xfer > first {
		c.sgl[1] = qp.SGE{Addr: c.e.smr.IOVA(), Length: uint32(xfer - first), LKey: c.e.smr.LKey()}
		nsge = 2
	}
	op := qp.WRRDMAWrite
	if imm {
		op = qp.WRRDMAWriteWithImm
	}
	c.wr = qp.SendWR{WRID: uint64(m), Opcode: op, Flags: qp.SendSignaled, Imm: m,
		SGL: c.sgl[:nsge], RemoteAddr: raddr, RKey: rkey}
	c.sbufHead = (head + xfer) % c.e.sbufSize
}

// IOWrite writes p into the peer's mapping at offset with plain RDMA WRITEs
// (riowrite): the peer is not told; it sees the bytes in its memory. It
// writes until p ends or the peer's mappings do not cover the offset
// (then ErrNoIOMap).
func (c *Conn) IOWrite(p []byte, offset int64) (int, error) {
	c.wlock.Lock()
	defer c.wlock.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if isClosed(c.closed) {
		return 0, c.opErr("iowrite", net.ErrClosed)
	}
	if c.wdl.wait().Err() != nil {
		return 0, c.opErr("iowrite", os.ErrDeadlineExceeded)
	}
	n, olen := 0, olapStart
	for n < len(p) {
		off := uint64(offset) + uint64(n)
		var iom *iomapEntry
		for i := range c.targetIOMap {
			e := &c.targetIOMap[i]
			if off >= e.offset && off < e.offset+uint64(e.sge.length) {
				iom = e
				break
			}
		}
		if iom == nil {
			return n, c.opErr("iowrite", ErrNoIOMap)
		}
		for c.state&stWritable == 0 || !c.canSend() {
			if c.state&stWritable == 0 {
				return n, c.errLocked("iowrite")
			}
			if err := c.wait("iowrite", waitWrite, c.wdl.wait()); err != nil {
				return n, err
			}
		}
		xfer := min(olen, len(p)-n, c.sbufAvail, int(iom.offset+uint64(iom.sge.length)-off))
		if olen < maxTransfer {
			olen <<= 1
		}
		head := c.sbufHead
		first := min(xfer, c.e.sbufSize-head)
		copy(c.e.sbuf[head:head+first], p[n:n+first])
		copy(c.e.sbuf[:xfer-first], p[n+first:n+xfer])
		c.post(msg(opWrite, uint32(xfer)), head, first, xfer, iom.sge.addr+off-iom.offset, iom.sge.key, false)
		if err := c.q.PostSend(&c.wr); err != nil {
			c.fail(fmt.Errorf("rsock: post iowrite: %w", err))
			return n, c.opErr("iowrite", err)
		}
		n += xfer
	}
	return n, nil
}

// keepalive posts a zero-length RDMA WRITE every period while a control
// slot is free (tcp_svc_send_keepalive): it needs no answer but the ACK, so
// a vanished peer ends the connection once its retries run out. On a
// connection nobody waits on, it also takes what completed off the CQ
// first (pollIdle), so that such a connection notices a peer's protocol
// violation, or its keepalive's failure, within a period.
func (c *Conn) keepalive(period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		c.pollIdle()
		if c.state&stConnected != 0 && c.ctrlSeq != c.ctrlMax {
			c.ctrlSeq++
			m := msg(opCtrl, ctrlAlive)
			c.wr = qp.SendWR{WRID: uint64(m), Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled}
			if err := c.q.PostSend(&c.wr); err != nil {
				c.fail(fmt.Errorf("rsock: post keepalive: %w", err))
			}
		}
		c.mu.Unlock()
	}
}

var _ io.ReaderFrom = (*Conn)(nil)
var _ io.WriterTo = (*Conn)(nil)
var _ net.Conn = (*Conn)(nil)
var _ net.Listener = (*Listener)(nil)
