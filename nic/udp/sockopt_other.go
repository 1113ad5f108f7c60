//go:build !linux && !darwin && !freebsd && !windows

package udp

// setSocketOptions: the standard library's defaults (the system may
// fragment datagrams larger than the path MTU).
func setSocketOptions(uintptr, bool) error { return nil }
