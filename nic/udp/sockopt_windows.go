package udp

import (
	"fmt"

	"golang.org/x/sys/windows"
)

// IP_DONTFRAGMENT and IPV6_DONTFRAG (ws2ipdef.h), which x/sys/windows does
// not define.
const (
	ipDontFragment = 14
	ipv6DontFrag   = 14
)

// setSocketOptions sets DF on every datagram. (The net package already
// turns off the WSAECONNRESET and WSAENETRESET reports that ICMP errors
// would otherwise raise on later reads: SIO_UDP_CONNRESET, SIO_UDP_NETRESET.)
func setSocketOptions(fd uintptr, v6 bool) error {
	h := windows.Handle(fd)
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
