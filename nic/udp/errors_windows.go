package udp

import (
	"errors"

	"golang.org/x/sys/windows"
)

// lostSend reports errors that lose one datagram, as a wire would: no
// route, too big, no buffer space, or a pending ICMP error from an earlier
// datagram.
func lostSend(err error) bool {
	return errors.Is(err, windows.WSAECONNRESET) || errors.Is(err, windows.WSAECONNREFUSED) ||
		errors.Is(err, windows.WSAEHOSTUNREACH) || errors.Is(err, windows.WSAENETUNREACH) ||
		errors.Is(err, windows.WSAEMSGSIZE) || errors.Is(err, windows.WSAENOBUFS)
}

// lostRead reports read errors that consumed a datagram: Windows reports a
// datagram larger than the buffer as WSAEMSGSIZE.
func lostRead(err error) bool { return errors.Is(err, windows.WSAEMSGSIZE) }

// icmpFeedback reports read errors that only echo an ICMP error for an
// earlier datagram (WSAECONNRESET after port unreachable; the net package
// turns those reports off with SIO_UDP_CONNRESET and SIO_UDP_NETRESET, so
// this is only a second line).
func icmpFeedback(err error) bool {
	return errors.Is(err, windows.WSAECONNRESET) || errors.Is(err, windows.WSAENETRESET) ||
		errors.Is(err, windows.WSAECONNREFUSED)
}
