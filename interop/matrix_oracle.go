//go:build linux

package interop

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/goroce/goroce/internal/pcapfile"
)

// WireProfile describes how one implementation fills the headers of the
// frames it sent in a capture: field → observed value(s) or class.
type WireProfile map[string]string

// Profiles reads a capture and builds a WireProfile per implementation
// (senders are recognised by their IPv4 source address in impls).
func Profiles(pcap string, impls map[netip.Addr]string) map[string]WireProfile {
	f, err := os.Open(pcap)
	if err != nil {
		return nil
	}
	defer f.Close()
	r, err := pcapfile.NewReader(f)
	if err != nil {
		return nil
	}
	var frames []roceFrame
	for {
		rec, err := r.Next()
		if err != nil {
			break
		}
		if fr, ok := parseRoCEFrame(rec.Data); ok {
			frames = append(frames, fr)
		}
	}
	return profilesOf(frames, impls)
}

// roceFrame is what the wire profile needs of an IPv4 RoCEv2 frame.
//
// parseRoCEFrame, which fills it, is deliberately a second RoCEv2 parser,
// independent of package wire: the profiles compare the frames goroce
// sends with the frames rxe sends, and reading both through goroce's own
// parser would hide any field goroce builds and parses wrong the same way.
// It reads the fixed offsets of IBTA vol. 1 §9.2 (BTH), §9.3.4 (AETH) and
// RFC 791 directly, plus what wire does not expose (IP ID, DF, padding
// after the datagram, reserved BTH bits). TestOracleAgreesWithWire checks
// the two parsers agree on rxe's own captures.
type roceFrame struct {
	src, dst   netip.Addr
	ttl, tos   uint8
	df         bool
	ihl        int
	id         uint16
	sport      uint16
	udpCsum    uint16
	frameExtra int // bytes after the IP datagram (Ethernet padding)
	op         byte
	se, migreq bool
	tver, pad  uint8
	pkey       uint16
	fecn, becn bool
	resv       bool // any reserved BTH bit set
	dqpn       uint32
	ackreq     bool
	psn        uint32
	hasAETH    bool
	syndrome   uint8
	msn        uint32
}

func parseRoCEFrame(fr []byte) (roceFrame, bool) {
	var x roceFrame
	if len(fr) < 14 || binary.BigEndian.Uint16(fr[12:]) != etherIPv4 {
		return x, false
	}
	ipb := fr[14:]
	if len(ipb) < 20 || ipb[0]>>4 != 4 || ipb[9] != 17 {
		return x, false
	}
	x.ihl = int(ipb[0]&0xf) * 4
	tot := int(binary.BigEndian.Uint16(ipb[2:]))
	if x.ihl < 20 || tot < x.ihl+8+12 || tot > len(ipb) {
		return x, false
	}
	x.frameExtra = len(ipb) - tot
	x.tos, x.ttl = ipb[1], ipb[8]
	x.id = binary.BigEndian.Uint16(ipb[4:])
	x.df = ipb[6]&0x40 != 0
	x.src = netip.AddrFrom4([4]byte(ipb[12:16]))
	x.dst = netip.AddrFrom4([4]byte(ipb[16:20]))
	u := ipb[x.ihl:tot]
	if binary.BigEndian.Uint16(u[2:]) != rocePort {
		return x, false
	}
	x.sport = binary.BigEndian.Uint16(u[0:])
	x.udpCsum = binary.BigEndian.Uint16(u[6:])
	b := u[8:]
	x.op = b[0]
	x.se, x.migreq = b[1]&0x80 != 0, b[1]&0x40 != 0
	x.pad, x.tver = (b[1]>>4)&3, b[1]&0xf
	x.pkey = binary.BigEndian.Uint16(b[2:])
	x.fecn, x.becn = b[4]&0x80 != 0, b[4]&0x40 != 0
	x.resv = b[4]&0x3f != 0 || b[8]&0x7f != 0
	x.dqpn = uint32(b[5])<<16 | uint32(b[6])<<8 | uint32(b[7])
	x.ackreq = b[8]&0x80 != 0
	x.psn = uint32(b[9])<<16 | uint32(b[10])<<8 | uint32(b[11])
	// AETH follows the BTH directly in ACK, ATOMIC_ACK and READ_RESPONSE
	// FIRST/LAST/ONLY (IBTA table 38).
	switch x.op {
	case 0x0d, 0x0f, 0x10, 0x11, 0x12:
		if len(b) >= 16 {
			x.hasAETH = true
			x.syndrome = b[12]
			x.msn = uint32(b[13])<<16 | uint32(b[14])<<8 | uint32(b[15])
		}
	}
	return x, true
}

// Opcode classes.
func isRequest(op byte) bool {
	return op <= 0x0c || op == 0x13 || op == 0x14 || op == 0x16 || op == 0x17
}

func isResponse(op byte) bool { return op >= 0x0d && op <= 0x12 }

func endsMessage(op byte) bool {
	switch op {
	case 0x02, 0x03, 0x04, 0x05, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x13, 0x14, 0x16, 0x17:
		return true
	}
	return false
}

// UDPSportFlowLabel and UDPSportHash32 restate, independently of package
// wire (RCSourcePort, UDSourcePort), the kernel's two choices of UDP source
// port, for the same reason as parseRoCEFrame: the profile judges goroce's
// ports against the kernel's formulas, not against goroce's copy of them.

// UDPSportFlowLabel is rdma_get_udp_sport(0, lqpn, rqpn) of newer rxe and
// mlx5: the symmetric flow label of both QPNs folded into 14 bits
// (include/rdma/ib_verbs.h rdma_calc_flow_label, rdma_flow_label_to_udp_sport).
func UDPSportFlowLabel(lqpn, rqpn uint32) uint16 {
	v := uint64(lqpn) * uint64(rqpn)
	v ^= v >> 20
	v ^= v >> 40
	fl := uint32(v & 0xFFFFF)
	return uint16(0xC000 | ((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14)))
}

// UDPSportHash32 is the older rxe default, 0xC000 + hash_32(qpn, 14).
func UDPSportHash32(qpn uint32) uint16 {
	return uint16(0xC000 + ((qpn * 0x61C88647) >> 18))
}

type counts struct{ yes, no int }

func (c counts) class() string {
	switch {
	case c.yes > 0 && c.no == 0:
		return "always"
	case c.yes == 0:
		return "never"
	}
	return "sometimes"
}

func setString[T comparable](m map[T]bool, format func(T) string) string {
	var s []string
	for v := range m {
		s = append(s, format(v))
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}

func profilesOf(frames []roceFrame, impls map[netip.Addr]string) map[string]WireProfile {
	// The QPN of each address: what its peer puts in DestQP.
	qpnOf := map[netip.Addr]uint32{}
	for _, f := range frames {
		qpnOf[f.dst] = f.dqpn
	}
	type acc struct {
		ttl, tos, ihl               map[uint8]bool
		df, migreq, fecn, becn, rsv map[bool]bool
		tver                        map[uint8]bool
		pkey                        map[uint16]bool
		csum, sport, pad            map[string]bool
		lastID                      map[netip.Addr]uint16
		haveID                      map[netip.Addr]bool
		idClass                     map[string]bool
		ackreq                      map[byte]*counts
		aeth                        map[byte]*counts
		ackSyn                      map[uint8]bool
		ackPSNs                     map[uint32]bool
		ackReqsSeen                 int
		ackPSN                      counts
		msnOff                      map[string]bool
		se                          map[byte]*counts
	}
	accs := map[string]*acc{}
	get := func(impl string) *acc {
		a := accs[impl]
		if a == nil {
			a = &acc{ttl: map[uint8]bool{}, tos: map[uint8]bool{}, ihl: map[uint8]bool{}, df: map[bool]bool{},
				migreq: map[bool]bool{}, fecn: map[bool]bool{}, becn: map[bool]bool{}, rsv: map[bool]bool{},
				tver: map[uint8]bool{}, pkey: map[uint16]bool{}, csum: map[string]bool{}, sport: map[string]bool{},
				pad: map[string]bool{}, lastID: map[netip.Addr]uint16{}, haveID: map[netip.Addr]bool{},
				idClass: map[string]bool{}, ackreq: map[byte]*counts{}, aeth: map[byte]*counts{},
				ackSyn: map[uint8]bool{}, msnOff: map[string]bool{}, se: map[byte]*counts{}, ackPSNs: map[uint32]bool{}}
			accs[impl] = a
		}
		return a
	}
	cnt := func(m map[byte]*counts, op byte, yes bool) {
		c := m[op]
		if c == nil {
			c = &counts{}
			m[op] = c
		}
		if yes {
			c.yes++
		} else {
			c.no++
		}
	}
	// Requests by receiver, first transmission only, for ACK PSN and MSN.
	type reqInfo struct {
		ackreq, ends bool
	}
	reqs := map[[2]netip.Addr]map[uint32]reqInfo{} // [requester, responder] → psn
	for _, f := range frames {
		if isRequest(f.op) {
			k := [2]netip.Addr{f.src, f.dst}
			if reqs[k] == nil {
				reqs[k] = map[uint32]reqInfo{}
			}
			if _, ok := reqs[k][f.psn]; !ok {
				reqs[k][f.psn] = reqInfo{f.ackreq, endsMessage(f.op)}
			}
		}
	}
	// Message-ending request PSNs per pair, sorted, for the MSN a response implies.
	type pairReqs struct {
		base uint32
		ends []uint32 // relative PSNs
	}
	pairs := map[[2]netip.Addr]*pairReqs{}
	for _, f := range frames {
		if !isRequest(f.op) {
			continue
		}
		k := [2]netip.Addr{f.src, f.dst}
		if pairs[k] == nil {
			pairs[k] = &pairReqs{base: f.psn}
		}
	}
	for k, m := range reqs {
		p := pairs[k]
		for psn, ri := range m {
			if ri.ends {
				p.ends = append(p.ends, (psn-p.base)&0xFFFFFF)
			}
		}
		sort.Slice(p.ends, func(i, j int) bool { return p.ends[i] < p.ends[j] })
	}
	for _, f := range frames {
		impl, ok := impls[f.src]
		if !ok {
			continue
		}
		a := get(impl)
		a.ttl[f.ttl], a.tos[f.tos], a.ihl[uint8(f.ihl)] = true, true, true
		a.df[f.df], a.migreq[f.migreq], a.fecn[f.fecn], a.becn[f.becn], a.rsv[f.resv] = true, true, true, true, true
		a.tver[f.tver], a.pkey[f.pkey] = true, true
		if f.udpCsum == 0 {
			a.csum["0"] = true
		} else {
			a.csum["set"] = true
		}
		if f.frameExtra == 0 {
			a.pad["none"] = true
		} else {
			a.pad[fmt.Sprintf("%d bytes", f.frameExtra)] = true
		}
		lq, rq := qpnOf[f.src], f.dqpn
		switch f.sport {
		case UDPSportFlowLabel(lq, rq):
			a.sport["flow label of both QPNs (rdma_get_udp_sport)"] = true
		case UDPSportHash32(lq):
			a.sport["0xC000 + hash_32(own QPN, 14)"] = true
		default:
			a.sport[fmt.Sprintf("other (0x%04x for QPNs 0x%x, 0x%x)", f.sport, lq, rq)] = true
		}
		if a.haveID[f.dst] {
			switch d := f.id - a.lastID[f.dst]; {
			case f.id == 0 && a.lastID[f.dst] == 0:
				a.idClass["0"] = true
			case d == 0:
				a.idClass["constant"] = true
			case d >= 1 && d < 0x8000:
				a.idClass["increasing per packet"] = true
			default:
				a.idClass["not increasing"] = true
			}
		}
		a.haveID[f.dst], a.lastID[f.dst] = true, f.id
		if isRequest(f.op) {
			cnt(a.ackreq, f.op, f.ackreq)
			cnt(a.se, f.op, f.se)
		}
		if isResponse(f.op) {
			if f.op >= 0x0d && f.op <= 0x10 {
				cnt(a.aeth, f.op, f.hasAETH)
			}
			k := [2]netip.Addr{f.dst, f.src} // requester, responder
			if f.op == 0x11 && f.hasAETH && f.syndrome>>5 == 0 {
				a.ackPSNs[f.psn] = true
				a.ackSyn[f.syndrome] = true
				if ri, ok := reqs[k][f.psn]; ok && ri.ackreq {
					a.ackPSN.yes++
				} else {
					a.ackPSN.no++
				}
			}
			if f.hasAETH && f.syndrome>>5 == 0 {
				if p := pairs[k]; p != nil {
					r := (f.psn - p.base) & 0xFFFFFF
					n := sort.Search(len(p.ends), func(i int) bool { return p.ends[i] > r })
					off := int(f.msn) - n
					a.msnOff[fmt.Sprintf("%s: %+d", OpcodeName(f.op), off)] = true
				}
			}
		}
	}
	// AckReq'd requests each implementation received (ACK coalescing).
	for k, m := range reqs {
		impl, ok := impls[k[1]]
		if !ok {
			continue
		}
		for _, ri := range m {
			if ri.ackreq {
				get(impl).ackReqsSeen++
			}
		}
	}
	out := map[string]WireProfile{}
	u8 := func(v uint8) string { return strconv.Itoa(int(v)) }
	bl := func(v bool) string { return strconv.FormatBool(v) }
	for impl, a := range accs {
		p := WireProfile{
			"IPv4 TTL":              setString(a.ttl, u8),
			"IPv4 TOS":              setString(a.tos, u8),
			"IPv4 header length":    setString(a.ihl, u8),
			"IPv4 DF":               setString(a.df, bl),
			"IPv4 ID":               setString(a.idClass, func(s string) string { return s }),
			"UDP checksum":          setString(a.csum, func(s string) string { return s }),
			"UDP source port":       setString(a.sport, func(s string) string { return s }),
			"Ethernet padding":      setString(a.pad, func(s string) string { return s }),
			"BTH P_Key":             setString(a.pkey, func(v uint16) string { return fmt.Sprintf("0x%04x", v) }),
			"BTH MigReq":            setString(a.migreq, bl),
			"BTH TVer":              setString(a.tver, u8),
			"BTH FECN":              setString(a.fecn, bl),
			"BTH BECN":              setString(a.becn, bl),
			"BTH reserved bits set": setString(a.rsv, bl),
		}
		for op, c := range a.ackreq {
			p["AckReq on "+OpcodeName(op)] = c.class()
		}
		for op, c := range a.se {
			p["SE on "+OpcodeName(op)] = c.class()
		}
		for op, c := range a.aeth {
			p["AETH on "+OpcodeName(op)] = c.class()
		}
		// Distinct ACK PSNs: a duplicate request is answered again (rxe_resp.c
		// duplicate_request), which is not coalescing's business.
		if acks := len(a.ackPSNs); acks > 0 {
			p["ACK syndrome"] = setString(a.ackSyn, func(v uint8) string { return fmt.Sprintf("0x%02x", v) })
			p["ACK PSN"] = map[string]string{"always": "the AckReq'd request's PSN", "never": "not a requested PSN",
				"sometimes": "sometimes an AckReq'd request's PSN"}[a.ackPSN.class()]
			switch {
			case acks == a.ackReqsSeen:
				p["ACKs per AckReq'd request"] = "one each"
			case acks < a.ackReqsSeen:
				p["ACKs per AckReq'd request"] = "fewer (coalesced)"
			default:
				p["ACKs per AckReq'd request"] = "more (unrequested ACKs)"
			}
		}
		if len(a.msnOff) > 0 {
			p["MSN minus messages completed"] = setString(a.msnOff, func(s string) string { return s })
		}
		out[impl] = p
	}
	return out
}

// ProfileDiff lists the fields where two profiles of one cell disagree
// (fields only one side has, e.g. AckReq on an opcode only one side sent in
// this cell, are left out).
func ProfileDiff(a, b WireProfile) []string {
	var d []string
	for k, va := range a {
		if vb, ok := b[k]; ok && va != vb {
			d = append(d, k)
		}
	}
	sort.Strings(d)
	return d
}
