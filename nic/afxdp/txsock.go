//go:build linux

package afxdp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// openTxSocket gives a copy-mode link a second AF_XDP socket for its
// transmit side: the same interface and queue, the link's UMEM and buffer
// pool shared (XDP_SHARED_UMEM: the first socket's fill and completion
// rings stay the only ones), a TX ring of its own and no RX ring; the first
// socket keeps receiving (the XSKMAP points at it) and no longer transmits.
//
// Why: the first socket is in the runtime poller, and every poll of an
// AF_XDP socket in copy mode drives its transmit (xsk_poll calls
// xsk_generic_xmit, which takes the socket's mutex even with an empty TX
// ring). An epoll_wait that found the socket readable (a frame or an ACK
// arrived) while a goroutine's sendto was sending a batch on the same
// socket spun on that mutex for as long as the batch took: 5.8-7.9 % of all
// the CPU of the 64 B WRITE stream (perf, docs/performance.md "Where the
// time goes per frame"). And every transmitted frame's completion
// (sock_wfree) woke the socket's wait queue, which the poller's
// registration keeps occupied; the transmit socket has no waiter and no
// wake-up.
//
// Not for zero-copy sockets (their poll asks the driver, no mutex) nor
// multi-buffer ones (a shared socket takes no bind flags, XDP_USE_SG
// included). If the kernel refuses, the link transmits on its one socket
// as before; the error is returned for the log.
func (l *Link) openTxSocket(opts Options) error {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return opError("AF_XDP transmit socket", err)
	}
	ok := false
	var mem []byte
	defer func() {
		if !ok {
			if mem != nil {
				unix.Munmap(mem)
			}
			unix.Close(fd)
		}
	}()
	size := l.tx.size
	if err := unix.SetsockoptInt(fd, unix.SOL_XDP, unix.XDP_TX_RING, int(size)); err != nil {
		return opError("transmit socket ring size", err)
	}
	var off unix.XDPMmapOffsets
	optlen := uint32(unsafe.Sizeof(off))
	if err := getsockopt(fd, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), &optlen); err != nil {
		return opError("transmit socket XDP_MMAP_OFFSETS", err)
	}
	mem, err = unix.Mmap(fd, unix.XDP_PGOFF_TX_RING, ringBytes(off.Tx, size, uint32(unsafe.Sizeof(unix.XDPDesc{}))),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return opError("transmit socket mmap ring", err)
	}
	if opts.TxBudget > 0 {
		// Logged for the first socket already if the kernel lacks it.
		unix.SetsockoptInt(fd, unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET, opts.TxBudget)
	}
	sa := &unix.SockaddrXDP{Flags: unix.XDP_SHARED_UMEM, Ifindex: uint32(l.ifindex), QueueID: uint32(l.queue), SharedUmemFD: uint32(l.fd)}
	if err := unix.Bind(fd, sa); err != nil {
		return opError("transmit socket bind (XDP_SHARED_UMEM)", err)
	}
	ok = true
	l.txfd, l.txRingMem = fd, mem
	l.tx = descRing{}
	l.tx.initDesc(mem, off.Tx, size)
	l.txPoll[0].Fd = int32(fd)
	return nil
}

// txFD is the socket the link transmits on.
func (l *Link) txFD() int {
	if l.txfd >= 0 {
		return l.txfd
	}
	return l.fd
}

// closeTxSocket closes the transmit socket, if any (release).
func (l *Link) closeTxSocket() {
	if l.txRingMem != nil {
		unix.Munmap(l.txRingMem)
		l.txRingMem = nil
	}
	if l.txfd >= 0 {
		unix.Close(l.txfd)
		l.txfd = -1
	}
}
