package dump

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/goroce/goroce/internal/dumpjson"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/wire"
)

// CM decoding.
//
// A MAD is a UD SEND ONLY to destination QP 1 (the GSI) whose payload is at
// least 256 bytes; package mad decodes it. The packet line gets the CM
// message after the packet's own fields,
//
//	... payload=256 icrc=ok CM_REQ local_comm_id=0x... remote_comm_id=0x0 service_id=0x0000000001061c06 (TCP port 7174) ...
//
// and the JSON object a "cm" object. A MAD of another class, or a CM MAD
// that package mad does not decode (LAP, APR), is shown as "MAD" with its
// class, attribute and the reason.
//
// The summary's connections pair the messages: a REQ opens one, keyed by
// the sender's IP and local comm ID; the REP names it by its remote comm
// ID and gives the passive side's comm ID; every later message is matched
// by the sender's (IP, local comm ID) or, failing that, the receiver's
// (IP, remote comm ID), which covers a REJ of a REQ (local comm ID 0).

// cmDecoded is the CM part of a decoded packet.
type cmDecoded struct {
	ok  bool // the packet is a MAD on QP1
	hdr mad.Header
	msg mad.Message // nil when it did not decode
	err error
}

// decodeCM fills x.cm for UD SENDs to QP1; the message is one of dec's and
// only valid until the next packet.
func decodeCM(x *decoded, dec *mad.Decoder) {
	if x.kind != kindRoCE && x.kind != kindBadICRC {
		return
	}
	p := &x.p
	if p.Opcode() != wire.UDSendOnly || p.BTH.DestQP() != mad.GSIQPN || len(p.Payload) < mad.MADLen {
		return
	}
	x.cm.ok = true
	x.cm.hdr, x.cm.msg, x.cm.err = dec.Parse(p.Payload)
}

func serviceText(b []byte, id uint64) []byte {
	b = append(b, " service_id="...)
	b = fmt.Appendf(b, "%#016x", id)
	if ps, port, ok := mad.ParseServiceID(id); ok {
		b = fmt.Appendf(b, " (%v port %d)", ps, port)
	}
	return b
}

func cmaText(b []byte, h mad.CMAHeader, id uint64) []byte {
	b = append(b, " cma "...)
	b = netip.AddrPortFrom(h.Src, h.SrcPort).AppendTo(b)
	b = append(b, " -> "...)
	if _, port, ok := mad.ParseServiceID(id); ok {
		return netip.AddrPortFrom(h.Dst, port).AppendTo(b)
	}
	return h.Dst.AppendTo(b)
}

// appendCM appends the CM message of a MAD to a text line.
func appendCM(b []byte, c *cmDecoded) []byte {
	if c.msg == nil {
		b = fmt.Appendf(b, " MAD class=%#02x method=%#02x attr=%#04x tid=%#x", c.hdr.MgmtClass, c.hdr.Method, c.hdr.AttrID, c.hdr.TID)
		if c.hdr.MgmtClass == mad.ClassCM {
			b = append(b, " ("...)
			b = append(b, mad.AttrName(c.hdr.AttrID)...)
			b = append(b, ')')
		}
		if c.err != nil {
			b = append(b, ": "...)
			b = append(b, c.err.Error()...)
		}
		return b
	}
	b = append(b, " CM_"...)
	b = append(b, c.msg.Name()...)
	ids := func(local, remote uint32) {
		b = append(b, " local_comm_id="...)
		b = appendHex(b, uint64(local))
		b = append(b, " remote_comm_id="...)
		b = appendHex(b, uint64(remote))
	}
	switch m := c.msg.(type) {
	case *mad.REQ:
		ids(m.LocalCommID, 0)
		b = serviceText(b, m.ServiceID)
		b = fmt.Appendf(b, " qpn=%#x starting_psn=%d resp_res=%d init_depth=%d", m.LocalQPN, m.StartingPSN, m.ResponderResources, m.InitiatorDepth)
		if m.TransportType != mad.TransportRC {
			b = append(b, " transport="...)
			b = append(b, m.TransportType.String()...)
		}
		if mtu := pathMTU(m.PathMTU); mtu > 0 {
			b = fmt.Appendf(b, " mtu=%d", mtu)
		}
		b = fmt.Appendf(b, " retry=%d rnr_retry=%d", m.RetryCount, m.RNRRetryCount)
		if h, err := m.CMAHeader(); err == nil {
			b = cmaText(b, h, m.ServiceID)
		}
	case *mad.REP:
		ids(m.LocalCommID, m.RemoteCommID)
		b = fmt.Appendf(b, " qpn=%#x starting_psn=%d resp_res=%d init_depth=%d", m.LocalQPN, m.StartingPSN, m.ResponderResources, m.InitiatorDepth)
	case *mad.RTU:
		ids(m.LocalCommID, m.RemoteCommID)
	case *mad.REJ:
		ids(m.LocalCommID, m.RemoteCommID)
		b = fmt.Appendf(b, " rejected=%v reason=%d (%v)", m.MsgRejected, uint16(m.Reason), m.Reason)
	case *mad.MRA:
		ids(m.LocalCommID, m.RemoteCommID)
		b = fmt.Appendf(b, " mraed=%v service_timeout=%d (%v)", m.MsgMRAed, m.ServiceTimeout, mad.Timeout(m.ServiceTimeout))
	case *mad.DREQ:
		ids(m.LocalCommID, m.RemoteCommID)
		b = fmt.Appendf(b, " remote_qpn=%#x", m.RemoteQPN)
	case *mad.DREP:
		ids(m.LocalCommID, m.RemoteCommID)
	case *mad.SIDRREQ:
		b = fmt.Appendf(b, " request_id=%#x", m.RequestID)
		b = serviceText(b, m.ServiceID)
		if h, err := m.CMAHeader(); err == nil {
			b = cmaText(b, h, m.ServiceID)
		}
	case *mad.SIDRREP:
		b = fmt.Appendf(b, " request_id=%#x status=%d (%v) qpn=%#x qkey=%#x", m.RequestID, uint8(m.Status), m.Status, m.QPN, m.QKey)
		b = serviceText(b, m.ServiceID)
	}
	return b
}

// pathMTU is the byte count of an IBTA MTU code, 0 for an invalid one.
func pathMTU(code uint8) int {
	if code >= 1 && code <= 5 {
		return 128 << code
	}
	return 0
}

// jsonCM is the "cm" object of a MAD.
func jsonCM(c *cmDecoded) *dumpjson.CM {
	j := &dumpjson.CM{Msg: "MAD", TID: Hex64(c.hdr.TID)}
	if c.msg == nil {
		j.MgmtClass, j.AttrID = ptr(c.hdr.MgmtClass), ptr(c.hdr.AttrID)
		if c.err != nil {
			j.Error = c.err.Error()
		}
		return j
	}
	j.Msg = c.msg.Name()
	service := func(id uint64) {
		j.ServiceID = ptr(Hex64(id))
		if ps, port, ok := mad.ParseServiceID(id); ok {
			j.PortSpace, j.Port = ps.String(), ptr(port)
		}
	}
	cma := func(h mad.CMAHeader, err error) {
		if err == nil {
			j.CMASrc = netip.AddrPortFrom(h.Src, h.SrcPort).String()
			j.CMADst = h.Dst.String()
			if j.Port != nil {
				j.CMADst = netip.AddrPortFrom(h.Dst, *j.Port).String()
			}
		}
	}
	switch m := c.msg.(type) {
	case *mad.REQ:
		j.LocalCommID = m.LocalCommID
		service(m.ServiceID)
		j.QPN, j.StartingPSN = ptr(m.LocalQPN), ptr(m.StartingPSN)
		j.RespRes, j.InitDepth = ptr(m.ResponderResources), ptr(m.InitiatorDepth)
		cma(m.CMAHeader())
	case *mad.REP:
		j.LocalCommID, j.RemoteCommID = m.LocalCommID, m.RemoteCommID
		j.QPN, j.StartingPSN = ptr(m.LocalQPN), ptr(m.StartingPSN)
		j.RespRes, j.InitDepth = ptr(m.ResponderResources), ptr(m.InitiatorDepth)
	case *mad.RTU:
		j.LocalCommID, j.RemoteCommID = m.LocalCommID, m.RemoteCommID
	case *mad.REJ:
		j.LocalCommID, j.RemoteCommID = m.LocalCommID, m.RemoteCommID
		j.Reason, j.ReasonCode, j.Of = m.Reason.String(), ptr(uint16(m.Reason)), m.MsgRejected.String()
	case *mad.MRA:
		j.LocalCommID, j.RemoteCommID = m.LocalCommID, m.RemoteCommID
		j.Of = m.MsgMRAed.String()
		j.ServiceTimeout, j.ServiceTimeoutUs = ptr(m.ServiceTimeout), ptr(mad.Timeout(m.ServiceTimeout).Microseconds())
	case *mad.DREQ:
		j.LocalCommID, j.RemoteCommID = m.LocalCommID, m.RemoteCommID
		j.QPN = ptr(m.RemoteQPN)
	case *mad.DREP:
		j.LocalCommID, j.RemoteCommID = m.LocalCommID, m.RemoteCommID
	case *mad.SIDRREQ:
		j.RequestID = ptr(m.RequestID)
		service(m.ServiceID)
		cma(m.CMAHeader())
	case *mad.SIDRREP:
		j.RequestID = ptr(m.RequestID)
		service(m.ServiceID)
		j.Status, j.QPN, j.QKey = m.Status.String(), ptr(m.QPN), ptr(m.QKey)
	}
	return j
}

// commKey names one side's comm ID.
type commKey struct {
	ip netip.Addr
	id uint32
}

// cmConn is a connection being followed.
type cmConn struct {
	active, passive netip.Addr
	j               dumpjson.Connection
}

// cmTable pairs CM messages into connections.
type cmTable struct {
	byID  map[commKey]*cmConn
	sidr  map[commKey]*cmConn // by the SIDR_REQ sender's (IP, request ID)
	order []*cmConn
}

// commIDs returns the local and remote comm IDs of the connection messages.
func commIDs(m mad.Message) (local, remote uint32, ok bool) {
	switch m := m.(type) {
	case *mad.REP:
		return m.LocalCommID, m.RemoteCommID, true
	case *mad.RTU:
		return m.LocalCommID, m.RemoteCommID, true
	case *mad.REJ:
		return m.LocalCommID, m.RemoteCommID, true
	case *mad.MRA:
		return m.LocalCommID, m.RemoteCommID, true
	case *mad.DREQ:
		return m.LocalCommID, m.RemoteCommID, true
	case *mad.DREP:
		return m.LocalCommID, m.RemoteCommID, true
	}
	return 0, 0, false
}

// add follows one decoded MAD; frame is its 1-based record number.
func (t *cmTable) add(x *decoded, frame int) {
	if !x.cm.ok || x.cm.msg == nil {
		return
	}
	if t.byID == nil {
		t.byID = map[commKey]*cmConn{}
	}
	src, dst := x.ip, x.ipDst
	switch m := x.cm.msg.(type) {
	case *mad.SIDRREQ:
		t.sidrReq(m, x, frame)
		return
	case *mad.SIDRREP:
		if c := t.sidr[commKey{dst, m.RequestID}]; c != nil {
			c.j.PassiveQPN = ptr(m.QPN)
			state := "resolved"
			if m.Status != mad.SIDRSuccess {
				state, c.j.Reason = "rejected", m.Status.String()
			}
			t.step(c, x, frame, "<", state)
		}
		return
	}
	if req, ok := x.cm.msg.(*mad.REQ); ok {
		k := commKey{src, req.LocalCommID}
		c := t.byID[k]
		if c == nil { // a resent REQ joins its connection
			c = &cmConn{active: src, passive: dst}
			c.j = dumpjson.Connection{
				Active: src.String(), Passive: dst.String(), ServiceID: Hex64(req.ServiceID),
				ActiveCommID: req.LocalCommID, ActiveQPN: req.LocalQPN, ActivePSN: req.StartingPSN,
				Messages: []string{}, Packets: []int{},
			}
			if ps, port, ok := mad.ParseServiceID(req.ServiceID); ok {
				c.j.PortSpace, c.j.Port = ps.String(), ptr(port)
				c.j.Passive = netip.AddrPortFrom(dst, port).String()
			}
			if h, err := req.CMAHeader(); err == nil && h.Src == src.Unmap() {
				c.j.Active = netip.AddrPortFrom(src, h.SrcPort).String()
			}
			t.byID[k] = c
			t.order = append(t.order, c)
		}
		t.step(c, x, frame, ">", "requested")
		return
	}
	local, remote, ok := commIDs(x.cm.msg)
	if !ok {
		return
	}
	c := t.byID[commKey{src, local}]
	if c == nil || local == 0 {
		c = t.byID[commKey{dst, remote}]
	}
	if c == nil {
		return
	}
	dir := ">"
	if src == c.passive && dst == c.active {
		dir = "<"
	}
	state := c.j.State
	switch m := x.cm.msg.(type) {
	case *mad.REP:
		if c.j.PassiveCommID == 0 {
			c.j.PassiveCommID = m.LocalCommID
			t.byID[commKey{src, m.LocalCommID}] = c
		}
		c.j.PassiveQPN, c.j.PassivePSN = ptr(m.LocalQPN), ptr(m.StartingPSN)
		if state != "established" {
			state = "replied"
		}
	case *mad.RTU:
		state = "established"
	case *mad.REJ:
		state, c.j.Reason = "rejected", m.Reason.String()
	case *mad.DREQ:
		state = "disconnecting"
	case *mad.DREP:
		state = "closed"
	}
	t.step(c, x, frame, dir, state)
}

// sidrReq opens (or, resent, continues) a service ID resolution: a
// Connection whose ActiveCommID is the request ID and whose PassiveQPN is
// the UD QP the SIDR_REP names.
func (t *cmTable) sidrReq(m *mad.SIDRREQ, x *decoded, frame int) {
	if t.sidr == nil {
		t.sidr = map[commKey]*cmConn{}
	}
	k := commKey{x.ip, m.RequestID}
	c := t.sidr[k]
	if c == nil {
		c = &cmConn{active: x.ip, passive: x.ipDst}
		c.j = dumpjson.Connection{
			Active: x.ip.String(), Passive: x.ipDst.String(), ServiceID: Hex64(m.ServiceID),
			ActiveCommID: m.RequestID, Messages: []string{}, Packets: []int{},
		}
		if ps, port, ok := mad.ParseServiceID(m.ServiceID); ok {
			c.j.PortSpace, c.j.Port = ps.String(), ptr(port)
			c.j.Passive = netip.AddrPortFrom(x.ipDst, port).String()
		}
		if h, err := m.CMAHeader(); err == nil && h.Src == x.ip.Unmap() {
			c.j.Active = netip.AddrPortFrom(x.ip, h.SrcPort).String()
		}
		t.sidr[k] = c
		t.order = append(t.order, c)
	}
	t.step(c, x, frame, ">", "resolving")
}

func (t *cmTable) step(c *cmConn, x *decoded, frame int, dir, state string) {
	c.j.Messages = append(c.j.Messages, x.cm.msg.Name()+dir)
	c.j.Packets = append(c.j.Packets, frame)
	c.j.State = state
}

func (t *cmTable) summary() []dumpjson.Connection {
	if len(t.order) == 0 {
		return nil
	}
	out := make([]dumpjson.Connection, len(t.order))
	for i, c := range t.order {
		out[i] = c.j
	}
	return out
}

// writeConnectionsText prints the connections section of the text summary:
//
//	connections (IB CM):
//	  198.18.0.12:47730 > 198.18.0.11:7174 service 0x0000000001061c06 (TCP port 7174): closed
//	    comm 0x... qpn 0x11 psn 13531771 > comm 0x... qpn 0x1f psn 4791119
//	    setup REQ> REP< RTU>  teardown DREQ> DREP<
func writeConnectionsText(b *strings.Builder, conns []dumpjson.Connection) {
	if len(conns) == 0 {
		return
	}
	b.WriteString("connections (IB CM):\n")
	for _, c := range conns {
		fmt.Fprintf(b, "  %s > %s service %#016x", c.Active, c.Passive, uint64(c.ServiceID))
		if c.Port != nil {
			fmt.Fprintf(b, " (%s port %d)", c.PortSpace, *c.Port)
		}
		b.WriteString(": " + c.State)
		if c.Reason != "" {
			b.WriteString(" (" + c.Reason + ")")
		}
		b.WriteByte('\n')
		if len(c.Messages) > 0 && strings.HasPrefix(c.Messages[0], "SIDR") {
			fmt.Fprintf(b, "    request id %#x", c.ActiveCommID)
			if c.PassiveQPN != nil {
				fmt.Fprintf(b, ", UD qpn %#x", *c.PassiveQPN)
			}
		} else {
			fmt.Fprintf(b, "    active comm %#x qpn %#x starting psn %d", c.ActiveCommID, c.ActiveQPN, c.ActivePSN)
			if c.PassiveQPN != nil {
				fmt.Fprintf(b, ", passive comm %#x qpn %#x starting psn %d", c.PassiveCommID, *c.PassiveQPN, *c.PassivePSN)
			}
		}
		b.WriteByte('\n')
		var setup, down []string
		for _, m := range c.Messages {
			if strings.HasPrefix(m, "DREQ") || strings.HasPrefix(m, "DREP") {
				down = append(down, m)
			} else {
				setup = append(setup, m)
			}
		}
		b.WriteString("    setup " + strings.Join(setup, " "))
		if len(down) > 0 {
			b.WriteString("  teardown " + strings.Join(down, " "))
		}
		b.WriteString("  (packets " + joinInts(c.Packets) + ")\n")
	}
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, " ")
}
