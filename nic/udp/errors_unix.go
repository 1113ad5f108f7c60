//go:build unix

package udp

import (
	"errors"
	"syscall"
)

// lostSend reports errors that lose one datagram, as a wire would: no
// route, too big, no buffer space, or a pending ICMP error from an earlier
// datagram.
func lostSend(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EMSGSIZE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.EHOSTDOWN)
}

// lostRead reports read errors that consumed a datagram. Unix systems
// truncate oversized datagrams without an error (the ring's slots are one
// byte larger than the MTU to see it).
func lostRead(error) bool { return false }

// icmpFeedback reports read errors that only echo an ICMP error for an
// earlier datagram.
func icmpFeedback(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH)
}
