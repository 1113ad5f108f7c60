//go:build darwin || freebsd

package udp

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// setSocketOptions sets DF on every datagram (never fragment); the IPv4 ID
// is the system's choice (see the package comment).
func setSocketOptions(fd uintptr, v6 bool) error {
	var err error
	if v6 {
		err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_DONTFRAG, 1)
	} else {
		err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_DONTFRAG, 1)
	}
	if err != nil {
		return fmt.Errorf("udp: don't-fragment option: %w", err)
	}
	return nil
}
