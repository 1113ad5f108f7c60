package udp

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/windows"
)

// IP_DONTFRAGMENT and IPV6_DONTFRAG (ws2ipdef.h), which x/sys/windows does
// not define.
const (
	ipDontFragment = 14
	ipv6DontFrag   = 14
)

// setSocketOptions turns off the WSAECONNRESET a UDP socket otherwise
// reports on the next read after an ICMP port unreachable
// (SIO_UDP_CONNRESET), and sets DF on every datagram.
func setSocketOptions(fd uintptr, v6 bool) error {
	h := windows.Handle(fd)
	var off, ret uint32
	if err := windows.WSAIoctl(h, windows.SIO_UDP_CONNRESET, (*byte)(unsafe.Pointer(&off)), uint32(unsafe.Sizeof(off)), nil, 0, &ret, nil, 0); err != nil {
		return fmt.Errorf("udp: SIO_UDP_CONNRESET: %w", err)
	}
	var err error
	if v6 {
		err = windows.SetsockoptInt(h, windows.IPPROTO_IPV6, ipv6DontFrag, 1)
	} else {
		err = windows.SetsockoptInt(h, windows.IPPROTO_IP, ipDontFragment, 1)
	}
	if err != nil {
		return fmt.Errorf("udp: don't-fragment option: %w", err)
	}
	return nil
}
