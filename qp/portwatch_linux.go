//go:build linux

package qp

import (
	"fmt"
	"net"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// portWatch follows the interface of a device opened with OpenInterface
// over netlink (RTNLGRP_LINK) and raises the port events rxe raises from
// its netdev notifier (rxe_net.c rxe_notify): the port is active while the
// interface is up with carrier (rxe_set_port_state), PORT_ERR when it goes
// down or loses carrier, PORT_ACTIVE when it comes back. The interface
// disappearing (RTM_DELLINK) is DEVICE_FATAL: rxe unregisters the device
// on NETDEV_UNREGISTER and uverbs reports IB_EVENT_DEVICE_FATAL to its
// users.
type portWatch struct {
	done chan struct{}
	wg   sync.WaitGroup
}

// linkActive is rxe_set_port_state's condition: netif_running and
// netif_carrier_ok.
func linkActive(a *netlink.LinkAttrs) bool {
	return a.Flags&net.FlagUp != 0 && a.RawFlags&unix.IFF_LOWER_UP != 0
}

// watchPort subscribes in the calling thread's network namespace (the
// device's: OpenInterface runs there), then reads the interface's state.
func watchPort(d *Device, ifindex int) (*portWatch, error) {
	w := &portWatch{done: make(chan struct{})}
	ch := make(chan netlink.LinkUpdate, 16)
	if err := netlink.LinkSubscribeWithOptions(ch, w.done, netlink.LinkSubscribeOptions{}); err != nil {
		return nil, fmt.Errorf("qp: open interface: netlink link subscription: %w", err)
	}
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		close(w.done)
		for range ch {
		}
		return nil, fmt.Errorf("qp: open interface: %w", err)
	}
	d.ev.setPort(linkActive(l.Attrs()), l.Attrs().Flags&net.FlagUp != 0)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for u := range ch { // closed once done closes the socket
			if int(u.Index) != ifindex {
				continue
			}
			if u.Header.Type == unix.RTM_DELLINK {
				d.portGone()
				continue
			}
			a := u.Link.Attrs()
			d.portState(linkActive(a), a.Flags&net.FlagUp != 0)
		}
	}()
	return w, nil
}

// Close ends the subscription.
func (w *portWatch) Close() error {
	close(w.done)
	w.wg.Wait()
	return nil
}
