//go:build !linux

package qp

import (
	"context"
	"fmt"
	"runtime"

	"github.com/goroce/goroce/nic"
)

// AFPacketOptions tune the AF_PACKET backend, which exists only on Linux.
type AFPacketOptions struct{}

// OpenInterface binds a goroce device to the network interface ifname. On
// Linux it offers the AF_XDP, AF_PACKET and UDP backends (see the Linux
// documentation of this function). Here AF_XDP and AF_PACKET do not exist
// and the UDP backend's socket layer (nic/udp) is built only for Linux so
// far, so every backend returns an error wrapping ErrNotSupported.
func OpenInterface(ctx context.Context, ifname string, o InterfaceOptions) (*Device, *InterfaceInfo, error) {
	return nil, nil, notSupported(ifname, &o)
}

// OpenInterfaceLink opens the backend link OpenInterface would use, without
// a device. See OpenInterface for what this system supports.
func OpenInterfaceLink(ctx context.Context, ifname string, o InterfaceOptions) (nic.Link, *InterfaceInfo, error) {
	return nil, nil, notSupported(ifname, &o)
}

func notSupported(ifname string, o *InterfaceOptions) error {
	if err := o.defaults(ifname); err != nil {
		return err
	}
	if o.Backend == BackendUDP {
		return fmt.Errorf("qp: open interface %s: the udp backend is built only for Linux so far (%s): %w", ifname, runtime.GOOS, ErrNotSupported)
	}
	return fmt.Errorf("qp: open interface %s: backend %s: AF_XDP/AF_PACKET are Linux only (%s): %w", ifname, o.Backend, runtime.GOOS, ErrNotSupported)
}
