package mad

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// ServiceID is the CM service ID rdma_cm uses for port in port space ps
// (cma_get_service_id): 0x0000000001060000 | port for TCP, so rping's
// port 7174 is 0x0000000001061c06.
func ServiceID(ps PortSpace, port uint16) uint64 { return uint64(ps)<<16 | uint64(port) }

// ParseServiceID splits an rdma_cm service ID into its port space and
// port. ok is false when id is not in one of the four port spaces.
func ParseServiceID(id uint64) (ps PortSpace, port uint16, ok bool) {
	if id>>32 != 0 {
		return 0, 0, false
	}
	ps = PortSpace(id >> 16)
	switch ps {
	case PortSpaceIPoIB, PortSpaceTCP, PortSpaceUDP, PortSpaceIB:
		return ps, uint16(id), true
	}
	return 0, 0, false
}

// CMAHeaderLen is the size of the rdma_cm header (struct cma_hdr).
const CMAHeaderLen = 36

// The user's private data rdma_cm carries after its header: what is left of
// the REQ's and the SIDR_REQ's private data (rdma_connect and
// rdma_resolve_route's limits on non-AF_IB addresses, cma_user_data_offset).
// The other messages carry no header: their whole private data is the user's.
const (
	REQUserDataLen     = REQPrivateDataLen - CMAHeaderLen     // 56
	SIDRREQUserDataLen = SIDRREQPrivateDataLen - CMAHeaderLen // 180
)

// CMAVersion is the only cma_hdr version (CMA_VERSION).
const CMAVersion = 0

// ErrCMAHeader: the private data does not hold a valid rdma_cm header.
var ErrCMAHeader = errors.New("mad: bad rdma_cm header")

// CMAHeader is the header rdma_cm puts at the start of a REQ's (and a
// SIDR_REQ's) private data so the passive side learns the IP endpoints
// (struct cma_hdr, drivers/infiniband/core/cma.c).
//
//	0   Version (0)
//	1   IPVersion in the high nibble (4 or 6)
//	2   SrcPort u16: the active side's port
//	4   Src (16 bytes; IPv4: 12 zero bytes, then the address)
//	20  Dst (16 bytes, likewise)
//
// The destination port is not here: it is the service ID's.
type CMAHeader struct {
	Version   uint8
	IPVersion uint8 // 4 or 6
	SrcPort   uint16
	Src, Dst  netip.Addr // 4-byte addresses for IPv4
}

// Marshal writes h into b[:CMAHeaderLen]. Src and Dst must both be IPv4
// (IPVersion 4; IPv4-mapped IPv6 addresses count as IPv4) or both IPv6
// (IPVersion 6).
func (h *CMAHeader) Marshal(b []byte) error {
	if len(b) < CMAHeaderLen {
		return fmt.Errorf("%w: needs %d bytes, have %d", ErrCMAHeader, CMAHeaderLen, len(b))
	}
	src, dst := h.Src.Unmap(), h.Dst.Unmap()
	switch {
	case h.IPVersion == 4 && src.Is4() && dst.Is4():
		clear(b[4:CMAHeaderLen])
		s, d := src.As4(), dst.As4()
		copy(b[16:20], s[:])
		copy(b[32:36], d[:])
	case h.IPVersion == 6 && h.Src.Is6() && h.Dst.Is6() && !src.Is4() && !dst.Is4():
		s, d := h.Src.As16(), h.Dst.As16()
		copy(b[4:20], s[:])
		copy(b[20:36], d[:])
	default:
		return fmt.Errorf("%w: IP version %d with addresses %v and %v", ErrCMAHeader, h.IPVersion, h.Src, h.Dst)
	}
	b[0] = h.Version
	b[1] = h.IPVersion << 4
	binary.BigEndian.PutUint16(b[2:], h.SrcPort)
	return nil
}

// ParseCMAHeader reads an rdma_cm header from the start of b. As the
// passive kernel does (cma_check_req_qp_type, cma_save_ip_info), it rejects
// a version other than 0 and an IP version other than 4 or 6.
func ParseCMAHeader(b []byte) (CMAHeader, error) {
	if len(b) < CMAHeaderLen {
		return CMAHeader{}, fmt.Errorf("%w: needs %d bytes, have %d", ErrCMAHeader, CMAHeaderLen, len(b))
	}
	h := CMAHeader{Version: b[0], IPVersion: b[1] >> 4, SrcPort: binary.BigEndian.Uint16(b[2:])}
	if h.Version != CMAVersion {
		return h, fmt.Errorf("%w: version %d", ErrCMAHeader, h.Version)
	}
	switch h.IPVersion {
	case 4:
		h.Src = netip.AddrFrom4([4]byte(b[16:20]))
		h.Dst = netip.AddrFrom4([4]byte(b[32:36]))
	case 6:
		h.Src = netip.AddrFrom16([16]byte(b[4:20]))
		h.Dst = netip.AddrFrom16([16]byte(b[20:36]))
	default:
		return h, fmt.Errorf("%w: IP version %d", ErrCMAHeader, h.IPVersion)
	}
	return h, nil
}

// timeoutUnit is the unit of the CM's 5-bit timeouts: 4.096 µs.
const timeoutUnit = 4096 * time.Nanosecond

// MaxTimeoutCode is the largest 5-bit CM timeout code.
const MaxTimeoutCode = 31

// Timeout is the duration a CM timeout code t means: 4.096 µs × 2^t (the
// REQ's CM response timeouts and local ACK timeout, the REP's target ACK
// delay, the MRA's service timeout). Codes above 31 count as 31.
func Timeout(t uint8) time.Duration {
	return timeoutUnit << min(t, MaxTimeoutCode)
}

// TimeoutCode is the smallest code whose Timeout is at least d, at most 31.
func TimeoutCode(d time.Duration) uint8 {
	var t uint8
	for t < MaxTimeoutCode && Timeout(t) < d {
		t++
	}
	return t
}
