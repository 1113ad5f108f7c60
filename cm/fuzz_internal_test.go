package cm

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/mad"
)

// checkAgent verifies the agent's bookkeeping: every table entry points to
// a live ID under the key it claims, the half-open list and its per-source
// counts agree and stay within the budget, and so do the SIDR handlers.
func checkAgent(a *agent) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for v, id := range a.ids {
		if v == 0 || id.localID != v {
			return fmt.Errorf("ID %#x under key %#x", id.localID, v)
		}
	}
	for k, id := range a.byRemote {
		if a.ids[id.localID] != id || !id.inRemote || k != (remoteKey{id.remoteID, id.remoteGUID}) {
			return fmt.Errorf("byRemote[%+v]: ID %#x (live %v, inRemote %v, remote %#x/%#x)", k, id.localID,
				a.ids[id.localID] == id, id.inRemote, id.remoteID, id.remoteGUID)
		}
	}
	for k, id := range a.byRemoteQP {
		if a.ids[id.localID] != id || !id.inRemoteQP || k != (remoteKey{id.remoteQPN, id.remoteGUID}) {
			return fmt.Errorf("byRemoteQP[%+v]: ID %#x", k, id.localID)
		}
	}
	if len(a.halfOpen) > halfOpenMax {
		return fmt.Errorf("%d half-open IDs", len(a.halfOpen))
	}
	by := map[netip.Addr]int{}
	for _, id := range a.halfOpen {
		if !id.halfOpen || a.ids[id.localID] != id {
			return fmt.Errorf("half-open list holds ID %#x (halfOpen %v, live %v, %v)", id.localID, id.halfOpen,
				a.ids[id.localID] == id, id.state)
		}
		if id.state != stReqRcvd && id.state != stRepSent && id.state != stMRARepRcvd {
			return fmt.Errorf("half-open ID %#x in %v", id.localID, id.state)
		}
		by[id.peer.GID.Unmap()]++
	}
	if len(by) != len(a.halfOpenBy) {
		return fmt.Errorf("half-open by source %v, counted %v", by, a.halfOpenBy)
	}
	for src, k := range by {
		if a.halfOpenBy[src] != k || k > halfOpenPerSource {
			return fmt.Errorf("half-open by source %v, counted %v", by, a.halfOpenBy)
		}
	}
	if len(a.sidrPending) > maxSIDRPending {
		return fmt.Errorf("%d SIDR_REQs pending", len(a.sidrPending))
	}
	return nil
}

// fuzzStep is one MAD the fuzzer sends: 8 bytes of input.
//
//	[0] what: REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ, SIDR_REP,
//	    LAP/APR/garbage, or "let time pass"
//	[1] bits 0-1 source (the client's address, the server's, or ipC),
//	    bit 2 destination (server or client), bits 3-7 sub-kinds
//	[2], [3] which comm IDs (the live connection's four, 0, or [4:8])
//	[4:8] a value: an ID, a QPN, a timeout, a duration
type fuzzStep [8]byte

func FuzzAgent(f *testing.F) {
	for _, s := range []string{
		"",
		// A REJ "for the REQ" naming the server's ID, from ipC and from the client.
		"\x02\x02\x02\x00\x00\x00\x00\x00" + "\x02\x00\x02\x00\x00\x00\x00\x00",
		// DREQ with both right IDs from ipC; then from the client.
		"\x05\x02\x02\x03\x00\x00\x00\x00" + "\x05\x00\x02\x03\x00\x00\x00\x00",
		// A flood of REQs reusing the client's QPN, time passing, an MRA.
		"\x00\x0a\x00\x00\x01\x00\x00\x00" + "\x00\x02\x00\x00\x02\x00\x00\x00" + "\x0a\x00\x00\x00\xff\x00\x00\x00" +
			"\x01\x06\x00\x01\x1f\x00\x00\x00",
		// SIDR_REQ and SIDR_REP, REP and RTU with guessed IDs, garbage.
		"\x07\x02\x00\x00\x01\x02\x03\x04" + "\x08\x06\x04\x00\x01\x02\x03\x04" + "\x03\x06\x04\x01\x00\x00\x00\x09" +
			"\x04\x02\x02\x03\x00\x00\x00\x00" + "\x09\x12\x00\x00\xde\xad\xbe\xef",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64*8 {
			data = data[:64*8]
		}
		synctest.Test(t, func(t *testing.T) { fuzzAgent(t, data) })
	})
}

func fuzzAgent(t *testing.T, data []byte) {
	n, a, b := setup(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	e := connect(t, ctx, a, b, Options{}, Options{})
	cl, cr, _ := ids(e.client)
	sl, sr, _ := ids(e.server)
	qpns := []uint32{e.client.QP().QPN(), e.server.QP().QPN()}
	guids := []uint64{e.client.c.a.guid, e.server.c.a.guid}
	onlyC := true
	for ; len(data) >= 8; data = data[8:] {
		var s fuzzStep
		copy(s[:], data)
		v := binary.BigEndian.Uint32(s[4:])
		src := [...]netip.Addr{ipA, ipB, ipC, ipC}[s[1]&3]
		dst := ipB
		if s[1]&4 != 0 {
			dst = ipA
		}
		if src == dst {
			continue
		}
		if src != ipC {
			onlyC = false
		}
		pick := func(sel byte) uint32 { return [...]uint32{cl, cr, sl, sr, 0, v, v ^ sl, v ^ cl}[sel&7] }
		sub := s[1] >> 3
		l, r := pick(s[2]), pick(s[3])
		var m mad.Message
		switch s[0] % 11 {
		case 0:
			req := floodREQ(int(v&0xFFFF), src)
			_, mm, err := mad.Parse(req)
			if err != nil {
				t.Fatal(err)
			}
			q := mm.(*mad.REQ)
			if sub&1 != 0 { // the stale-connection rule's key
				q.LocalQPN, q.LocalCAGUID = qpns[sub>>1&1], guids[sub>>1&1]
			}
			if sub&4 != 0 { // a duplicate of a live connection's
				q.LocalCommID = l
			}
			q.LocalCMResponseTimeout = s[4] & 31
			q.MaxCMRetries = s[5] & 15
			m = q
		case 1:
			m = &mad.MRA{LocalCommID: l, RemoteCommID: r, MsgMRAed: mad.MsgType(sub % 4), ServiceTimeout: s[4] & 31}
		case 2:
			rej := &mad.REJ{LocalCommID: l, RemoteCommID: r, MsgRejected: mad.MsgType(sub % 4),
				Reason: mad.RejectReason(s[4]) % 34}
			if rej.Reason == mad.RejTimeout {
				rej.RejInfoLen = 8
				binary.BigEndian.PutUint64(rej.ARI[:], guids[sub>>2&1])
			}
			m = rej
		case 3:
			m = &mad.REP{LocalCommID: l, RemoteCommID: r, LocalQPN: v & 0xFFFFFF, LocalCAGUID: guids[sub&1],
				TargetAckDelay: s[4] & 31}
		case 4:
			m = &mad.RTU{LocalCommID: l, RemoteCommID: r}
		case 5:
			m = &mad.DREQ{LocalCommID: l, RemoteCommID: r, RemoteQPN: qpns[sub&1]}
		case 6:
			m = &mad.DREP{LocalCommID: l, RemoteCommID: r}
		case 7:
			var hdr [mad.SIDRREQPrivateDataLen]byte
			h := mad.CMAHeader{IPVersion: 4, SrcPort: 1, Src: src, Dst: dst}
			h.Marshal(hdr[:])
			m = &mad.SIDRREQ{RequestID: v, PKey: defaultPKey, ServiceID: mad.ServiceID(mad.PortSpaceUDP, uint16(s[2])),
				PrivateData: hdr}
		case 8:
			m = &mad.SIDRREP{RequestID: l, QPN: v & 0xFFFFFF, Status: mad.SIDRStatus(sub % 8)}
		case 9:
			// LAP, APR or an unknown attribute: a header and noise.
			b := make([]byte, mad.MADLen)
			for i := 24; i < len(b); i++ {
				b[i] = s[4+i%4] ^ byte(i)
			}
			h := mad.CMHeader(uint64(v), [...]uint16{mad.AttrLAP, mad.AttrAPR, 0x0020, uint16(v)}[sub%4])
			h.Marshal(b)
			n.inject(src, dst, b)
			continue
		default:
			time.Sleep(time.Duration(s[4]) * 100 * time.Millisecond)
			continue
		}
		n.inject(src, dst, forge(uint64(v)<<8|uint64(s[0]), m))
	}
	synctest.Wait()
	for _, ag := range []*agent{e.client.c.a, e.server.c.a} {
		if err := checkAgent(ag); err != nil {
			t.Fatal(err)
		}
	}
	if onlyC {
		// Nothing from an address other than the peers' may end the
		// connection.
		stillUp(t, ctx, e)
	}
	e.client.Close()
	e.server.Close()
	time.Sleep(10 * time.Hour)
	for _, ag := range []*agent{e.client.c.a, e.server.c.a} {
		if err := checkAgent(ag); err != nil {
			t.Fatal(err)
		}
		ag.mu.Lock()
		left, h := len(ag.ids), len(ag.halfOpen)
		ag.mu.Unlock()
		if left != 0 || h != 0 {
			t.Fatalf("10 h later: %d IDs, %d half-open", left, h)
		}
	}
}
