//go:build linux

package afxdp

import (
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"net"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/internal/linkcore"
	"github.com/goroce/goroce/nic/internal/sockio"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

const (
	defaultFrameSize = 4096
	defaultNumFrames = 4096
	// smallChunkMTU is the largest interface MTU a 2048-byte chunk carries
	// (2048 - headroom - Ethernet header - VLAN tag).
	smallChunkMTU = 2048 - xdpPacketHeadroom - ethHeaderLen - vlanTagLen
	// defaultBatchSize is 64 frames per WriteBatch and per wait. 256 (the
	// copy-mode TX budget of one kick, what the raw reference sender
	// kicks) with 8192 chunks of 2048 bytes cut goroce's CPU per 64 KiB
	// WRITE byte to about 0.7x at MTU 1500, but on a quiet machine it cost
	// 15-25 % of the 64 KiB WRITE and READ goodput (docs/performance.md,
	// "Batch size"): bench's raw cells use those options (RawrefOptions),
	// goroce's links keep 64.
	defaultBatchSize = 64
	defaultTxBudget  = 256
	// xdpPacketHeadroom is what the kernel keeps in front of a received
	// frame inside its chunk (XDP_PACKET_HEADROOM).
	xdpPacketHeadroom = unix.XDP_PACKET_HEADROOM
	ethHeaderLen      = 14
	vlanTagLen        = 4
	xskMapEntries     = 64
)

// Link is an AF_XDP socket on one queue of one interface, with the steering
// program attached. It implements nic.Link.
type Link struct {
	ifname  string
	ifindex int
	queue   int
	mtu     int
	hw      net.HardwareAddr
	mode    string
	batch   int
	busy    time.Duration

	fd   int // AF_XDP socket
	efd  int // eventfd: written once by Close, wakes poll(2)
	umem []byte
	// frameSize is the chunk size; frameMask clears the offset inside a
	// chunk from a UMEM address.
	frameSize uint32
	frameMask uint64
	// multiBuf: bound with XDP_USE_SG and a frags-aware program, so a
	// frame may span several chunks (descriptors chained by XDP_PKT_CONTD,
	// multibuf.go). maxTx is the largest frame WriteBatch sends.
	multiBuf bool
	maxTx    int

	ringMem [4][]byte

	// Receive side, owned by ReadBatch (rxMu).
	rxMu   sync.Mutex
	rx     descRing
	fill   addrRing
	rxPoll [2]unix.PollFd
	// lend: the reads lend frames in their chunks (LendRx, lend.go);
	// lent holds the chunks the last read lent.
	lend bool
	lent []uint64

	// Transmit side, owned by WriteBatch (txMu).
	txMu   sync.Mutex
	tx     descRing
	comp   addrRing
	txFree []uint64 // free transmit chunks (a stack)
	// txReserved counts the chunks ReserveTx handed out and WriteBatch
	// has not taken back.
	txReserved int
	txPoll     [2]unix.PollFd
	// txfd is the copy-mode link's transmit socket (txsock.go), -1 when
	// the link transmits on fd; txRingMem is its TX ring's mapping.
	txfd      int
	txRingMem []byte

	needWakeup bool // bound with XDP_USE_NEED_WAKEUP
	zeroCopy   bool

	xsks *ebpf.Map
	prog *ebpf.Program
	lnk  link.Link
	// shared counts the sockets of OpenQueues that use xsks, prog and
	// lnk (nil for a link of Open alone).
	shared *steering

	w sockio.BatchWait // wait_linux.go

	c            linkcore.Core      // counters, closed, Close's order
	lastXDPStats unix.XDPStatistics // after Close
}

var _ nic.Link = (*Link)(nil)

var memlockOnce sync.Once

// Open creates an AF_XDP socket on queue queue of the interface ifname,
// attaches the steering program (see the package doc) and returns the link.
// It acts in the calling thread's network namespace. It needs root (or
// CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF); missing kernel features and
// privileges give a *NotSupportedError.
func Open(ifname string, queue int, opts Options) (_ *Link, err error) {
	if queue < 0 || queue >= xskMapEntries {
		return nil, fmt.Errorf("afxdp: queue %d out of range [0, %d)", queue, xskMapEntries)
	}
	attrs, err := interfaceByName(ifname)
	if err != nil {
		return nil, err
	}
	if err := opts.fill(); err != nil {
		return nil, err
	}
	l := &Link{
		ifname:    ifname,
		ifindex:   attrs.Index,
		queue:     queue,
		hw:        append(net.HardwareAddr(nil), attrs.HardwareAddr...),
		batch:     opts.BatchSize,
		busy:      max(opts.BusyPoll, 0),
		fd:        -1,
		efd:       -1,
		txfd:      -1,
		frameSize: uint32(opts.FrameSize),
		frameMask: ^uint64(opts.FrameSize - 1),
	}
	// The IP MTU a frame in one chunk can carry: the interface's, capped by
	// one chunk minus the kernel's headroom, an Ethernet header and a VLAN
	// tag. Above that, frames span chunks if the kernel has multi-buffer.
	chunkMTU := opts.FrameSize - xdpPacketHeadroom - ethHeaderLen - vlanTagLen
	l.mtu = min(attrs.MTU, chunkMTU)
	l.maxTx = opts.FrameSize
	wantMultiBuf := !opts.SingleBuffer && attrs.MTU > chunkMTU
	defer func() {
		if err != nil {
			l.release()
		}
	}()

	// Kernels before 5.11 charge BPF maps and programs to RLIMIT_MEMLOCK;
	// later ones use memory cgroups and this is a no-op.
	memlockOnce.Do(func() { rlimit.RemoveMemlock() })

	if err := l.setupSocket(opts); err != nil {
		return nil, err
	}
	if err := removeStaleProgram(attrs); err != nil {
		return nil, err
	}
	if l.xsks, err = newXSKMap(xskMapEntries); err != nil {
		return nil, err
	}
	// multiBufErr says why a multi-buffer socket was wanted and not had.
	var multiBufErr error
	if wantMultiBuf {
		l.prog, multiBufErr = loadRedirectProgram(l.xsks, xdpPass, true)
	}
	if l.prog == nil {
		if l.prog, err = loadRedirectProgram(l.xsks, xdpPass, false); err != nil {
			return nil, err
		}
	}
	var nativeErr error
	l.lnk, l.mode, nativeErr, err = attachXDP(l.prog, l.ifindex, opts.Mode)
	if err != nil {
		return nil, err
	}
	sgErr, err := l.bind(opts, wantMultiBuf && multiBufErr == nil)
	if err != nil {
		return nil, err
	}
	if sgErr != nil {
		multiBufErr = sgErr
	}
	if l.multiBuf {
		l.mtu = min(attrs.MTU, multiBufMTU(opts.FrameSize))
		l.maxTx = l.mtu + ethHeaderLen + vlanTagLen
	}
	l.zeroCopy = l.readZeroCopy()
	l.splitTx(opts)
	if err := l.initWait(); err != nil {
		return nil, err
	}
	if err := l.xsks.Put(uint32(queue), uint32(l.fd)); err != nil {
		return nil, opError("XSKMAP update", err)
	}
	if l.mtu < attrs.MTU {
		why := "multi-buffer AF_XDP off (Options.SingleBuffer)"
		if multiBufErr != nil {
			why = "multi-buffer AF_XDP not available: " + multiBufErr.Error()
		} else if l.multiBuf {
			why = "more chunks than a frame may span"
		}
		opts.Logger.Warn("afxdp: interface MTU larger than the socket carries; reporting the smaller MTU",
			"ifname", ifname, "if_mtu", attrs.MTU, "mtu", l.mtu, "frame_size", opts.FrameSize, "reason", why)
	}
	logAttrs := []any{"ifname", ifname, "queue", queue, "mode", l.mode, "zerocopy", l.ZeroCopy(),
		"multi_buffer", l.multiBuf, "mtu", l.mtu, "tx_socket", l.txfd >= 0}
	if nativeErr != nil {
		logAttrs = append(logAttrs, "native_error", nativeErr.Error())
	}
	opts.Logger.Info("afxdp: XDP program attached", logAttrs...)
	return l, nil
}

// fill sets the defaults of the zero fields and checks the others.
func (opts *Options) fill() error {
	if opts.FrameSize == 0 {
		opts.FrameSize = defaultFrameSize
	}
	if opts.FrameSize != 2048 && opts.FrameSize != 4096 {
		return fmt.Errorf("afxdp: frame size %d: must be 2048 or 4096", opts.FrameSize)
	}
	if opts.NumFrames == 0 {
		opts.NumFrames = defaultNumFrames
	}
	if opts.NumFrames < 64 || opts.NumFrames > 1<<20 || bits.OnesCount(uint(opts.NumFrames)) != 1 {
		return fmt.Errorf("afxdp: %d frames: must be a power of two in [64, 2^20]", opts.NumFrames)
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = defaultBatchSize
	}
	if opts.TxBudget == 0 {
		opts.TxBudget = defaultTxBudget
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// interfaceByName looks the interface up through netlink, which also
// reports an attached XDP program.
func interfaceByName(ifname string) (*netlink.LinkAttrs, error) {
	nl, err := netlink.LinkByName(ifname)
	if err != nil {
		return nil, opError("interface "+ifname, err)
	}
	return nl.Attrs(), nil
}

// removeStaleProgram deals with an XDP program already on the interface.
// Programs attached through a bpf_link (as Open does) vanish with their
// process, so a crashed goroce leaves nothing behind that way; a program
// attached through netlink (IFLA_XDP) stays. If it is one of ours (by name)
// it is detached through netlink; if it is foreign, or held by a live
// bpf_link (netlink then answers EBUSY), Open fails rather than take the
// interface from its owner.
func removeStaleProgram(attrs *netlink.LinkAttrs) error {
	x := attrs.Xdp
	if x == nil || !x.Attached || x.ProgId == 0 {
		return nil
	}
	name := "?"
	if p, err := ebpf.NewProgramFromID(ebpf.ProgramID(x.ProgId)); err == nil {
		if info, err := p.Info(); err == nil {
			name = info.Name
		}
		p.Close()
	}
	if name != redirectProgName && name != passProgName {
		return busy("attach XDP", fmt.Sprintf("%s already has XDP program %q (id %d), not goroce's (if nothing uses it: ip link set dev %s xdp off)",
			attrs.Name, name, x.ProgId, attrs.Name), nil)
	}
	// XDP_ATTACHED_DRV = 1, XDP_ATTACHED_SKB = 2 (include/uapi/linux/if_link.h).
	var flags int
	switch x.AttachMode {
	case 1:
		flags = unix.XDP_FLAGS_DRV_MODE
	case 2:
		flags = unix.XDP_FLAGS_SKB_MODE
	}
	nl, err := netlink.LinkByIndex(attrs.Index)
	if err == nil {
		err = netlink.LinkSetXdpFdWithFlags(nl, -1, flags)
	}
	if err != nil {
		if errors.Is(err, unix.EBUSY) {
			return heldByGoroce("attach XDP", fmt.Sprintf("%s: goroce XDP program %q (id %d) is held by a live bpf_link: another process is using this interface",
				attrs.Name, name, x.ProgId), nil)
		}
		return opError("remove stale XDP program", err)
	}
	return nil
}

// setupSocket creates the socket and the UMEM and maps the four rings.
func (l *Link) setupSocket(opts Options) error {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		switch {
		case errors.Is(err, unix.EAFNOSUPPORT), errors.Is(err, unix.EPROTONOSUPPORT):
			return notSupported("AF_XDP socket", "CONFIG_XDP_SOCKETS and kernel >= 5.4", err)
		case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
			return notSupported("AF_XDP socket", "CAP_NET_RAW (root)", err)
		}
		return opError("AF_XDP socket", err)
	}
	l.fd = fd
	l.efd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return opError("eventfd", err)
	}

	n := uint32(opts.NumFrames)
	half := n / 2
	l.umem, err = unix.Mmap(-1, 0, int(n)*opts.FrameSize, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return opError("mmap UMEM", err)
	}
	reg := unix.XDPUmemReg{
		Addr: uint64(uintptr(unsafe.Pointer(&l.umem[0]))),
		Len:  uint64(len(l.umem)),
		Size: uint32(opts.FrameSize),
	}
	if err := setsockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		// Without CAP_IPC_LOCK (in the initial user namespace) the UMEM is
		// charged to RLIMIT_MEMLOCK, and xdp_umem_account_pages
		// (net/xdp/xdp_umem.c) answers ENOBUFS when it does not fit.
		if errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOBUFS) {
			return notSupported("AF_XDP UMEM registration", "RLIMIT_MEMLOCK >= UMEM size or CAP_IPC_LOCK", err)
		}
		return opError("XDP_UMEM_REG", err)
	}
	for _, o := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING, unix.XDP_TX_RING} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, o, int(half)); err != nil {
			return opError("ring size", err)
		}
	}
	var off unix.XDPMmapOffsets
	optlen := uint32(unsafe.Sizeof(off))
	if err := getsockopt(fd, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), &optlen); err != nil {
		return opError("XDP_MMAP_OFFSETS", err)
	}
	if optlen != uint32(unsafe.Sizeof(off)) {
		// Kernels before 5.4 have no flags word (no need_wakeup).
		return notSupported("AF_XDP ring flags", "kernel >= 5.4", unix.EINVAL)
	}
	maps := []struct {
		pgoff    int64
		off      unix.XDPRingOffset
		descSize uint32
	}{
		{unix.XDP_UMEM_PGOFF_FILL_RING, off.Fr, 8},
		{unix.XDP_UMEM_PGOFF_COMPLETION_RING, off.Cr, 8},
		{unix.XDP_PGOFF_RX_RING, off.Rx, uint32(unsafe.Sizeof(unix.XDPDesc{}))},
		{unix.XDP_PGOFF_TX_RING, off.Tx, uint32(unsafe.Sizeof(unix.XDPDesc{}))},
	}
	for i, m := range maps {
		mem, err := unix.Mmap(fd, m.pgoff, ringBytes(m.off, half, m.descSize),
			unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			return opError("mmap ring", err)
		}
		l.ringMem[i] = mem
	}
	l.fill.initAddr(l.ringMem[0], off.Fr, half)
	l.comp.initAddr(l.ringMem[1], off.Cr, half)
	l.rx.initDesc(l.ringMem[2], off.Rx, half)
	l.tx.initDesc(l.ringMem[3], off.Tx, half)

	// Chunks [0, half) receive: all of them start on the fill ring.
	// Chunks [half, n) transmit: all of them start free.
	for i := range half {
		l.fill.descs[i&l.fill.mask] = uint64(i) * uint64(opts.FrameSize)
	}
	l.fill.submit(l.fill.free(half))
	l.txFree = make([]uint64, 0, half)
	for i := n - 1; i >= half; i-- {
		l.txFree = append(l.txFree, uint64(i)*uint64(opts.FrameSize))
	}

	if opts.TxBudget > 0 {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET, opts.TxBudget); err != nil {
			opts.Logger.Info("afxdp: XDP_MAX_TX_SKB_BUDGET not available; copy-mode kicks send 32 frames",
				"ifname", l.ifname, "error", err)
		}
	}
	l.rxPoll = [2]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(l.efd), Events: unix.POLLIN}}
	l.txPoll = [2]unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}, {Fd: int32(l.efd), Events: unix.POLLIN}}
	return nil
}

const (
	bindRetries    = 50
	bindRetryDelay = 20 * time.Millisecond
)

// bind binds the socket to the queue, with need_wakeup; copy mode in
// generic XDP mode, zero copy only when asked; with sg, multi-buffer
// (XDP_USE_SG, kernel >= 6.6). If the kernel refuses XDP_USE_SG (EINVAL on
// older kernels, EOPNOTSUPP for a zero-copy driver without multi-buffer) it
// binds without it and returns why as sgErr.
func (l *Link) bind(opts Options, sg bool) (sgErr, err error) {
	flags := uint16(unix.XDP_USE_NEED_WAKEUP)
	switch {
	case opts.ZeroCopy:
		flags |= unix.XDP_ZEROCOPY
	case l.mode == "generic":
		flags |= unix.XDP_COPY
	}
	if sg {
		err = l.bindFlags(flags | unix.XDP_USE_SG)
		if err == nil {
			l.multiBuf = true
			return nil, nil
		}
		if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EOPNOTSUPP) {
			return nil, err
		}
		sgErr = fmt.Errorf("bind with XDP_USE_SG (kernel >= 6.6): %w", err)
	}
	return sgErr, l.bindFlags(flags)
}

func (l *Link) bindFlags(flags uint16) error {
	sa := &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(l.ifindex), QueueID: uint32(l.queue)}
	err := unix.Bind(l.fd, sa)
	// A socket closed just before (by this or a crashed process) holds the
	// queue until the kernel releases its buffer pool from a work queue
	// (xp_put_pool → xp_release_deferred): retry EBUSY for a moment.
	for i := 0; i < bindRetries && errors.Is(err, unix.EBUSY); i++ {
		time.Sleep(bindRetryDelay)
		err = unix.Bind(l.fd, sa)
	}
	if err != nil {
		switch {
		case flags&unix.XDP_ZEROCOPY != 0 && errors.Is(err, unix.EOPNOTSUPP):
			return notSupported("AF_XDP zero copy", "a driver with AF_XDP zero-copy support", err)
		case errors.Is(err, unix.EBUSY):
			return heldByGoroce("bind", fmt.Sprintf("%s queue %d already has an AF_XDP socket", l.ifname, l.queue), err)
		case errors.Is(err, unix.EINVAL):
			return opError("bind", fmt.Errorf("%s queue %d (does the queue exist? need_wakeup needs kernel >= 5.4): %w", l.ifname, l.queue, err))
		}
		return opError("bind", err)
	}
	l.needWakeup = true
	return nil
}

// splitTx moves a copy-mode, single-buffer link's transmit side to a
// socket of its own (txsock.go) unless Options.OneSocket; a refusal leaves
// it on the one socket, with a log line.
func (l *Link) splitTx(opts Options) {
	if opts.OneSocket || l.zeroCopy || l.multiBuf {
		return
	}
	if err := l.openTxSocket(opts); err != nil {
		opts.Logger.Info("afxdp: no transmit socket of its own; transmitting on the receiving socket",
			"ifname", l.ifname, "queue", l.queue, "error", err)
	}
}

// ZeroCopy reports whether the socket runs in zero-copy mode (XDP_OPTIONS
// at Open); false means copy mode.
func (l *Link) ZeroCopy() bool { return l.zeroCopy }

func (l *Link) readZeroCopy() bool {
	var o struct{ flags uint32 }
	optlen := uint32(unsafe.Sizeof(o))
	if err := getsockopt(l.fd, unix.XDP_OPTIONS, unsafe.Pointer(&o), &optlen); err != nil {
		return false
	}
	return o.flags&unix.XDP_OPTIONS_ZEROCOPY != 0
}

// Mode says how the XDP program is attached: "native" or "generic".
func (l *Link) Mode() string { return l.mode }

// BatchSize implements nic.Link.
func (l *Link) BatchSize() int { return l.batch }

// MTU implements nic.Link: the interface MTU, capped by what one UMEM chunk
// carries (FrameSize - 256 - 18) unless the socket is multi-buffer.
func (l *Link) MTU() int { return l.mtu }

// HardwareAddr implements nic.Link.
func (l *Link) HardwareAddr() net.HardwareAddr { return l.hw }

// ReadBatch implements nic.Link. It copies frames out of the UMEM and gives
// their chunks straight back to the fill ring (or, after LendRx, lends them:
// lend.go); it sleeps in poll(2) only
// when the RX ring is empty (after Options.BusyPoll of spinning). If the
// interface goes away, a blocked ReadBatch stays blocked until Close.
func (l *Link) ReadBatch(bufs [][]byte, sizes []int) (int, error) {
	l.rxMu.Lock()
	defer l.rxMu.Unlock()
	l.giveBack()
	want := uint32(min(len(bufs), len(sizes)))
	var spins uint
	var spinUntil time.Time
	for {
		if l.c.Closed() {
			return 0, nic.ErrClosed
		}
		if want == 0 {
			return 0, nil
		}
		if n := l.rx.available(l.rx.size); n > 0 {
			if got := l.receive(n, bufs[:want], sizes); got > 0 {
				return got, nil
			}
			continue // all of them were too big for their buffers
		}
		if l.busy > 0 {
			if spins == 0 {
				spinUntil = time.Now().Add(l.busy)
			}
			spins++
			if spins%64 != 0 || time.Now().Before(spinUntil) {
				if l.needWakeup && l.fill.needWakeup() {
					rxWakeup(l.fd)
					l.c.Wakeups.Add(1)
				}
				runtime.Gosched()
				continue
			}
			spins = 0 // spun out: sleep, and spin again after the wake-up
		}
		_, err := unix.Poll(l.rxPoll[:], -1)
		if err != nil && err != unix.EINTR {
			return 0, opError("poll", err)
		}
	}
}

// TryReadBatch is ReadBatch without blocking, for callers that drive the
// link by polling (qp.ModeBusyPoll): it copies out the frames already on
// the RX ring and returns 0 when there are none. With the ring empty it
// costs one atomic load and no system call, unless the kernel asked to be
// woken on the fill ring (XDP_RING_NEED_WAKEUP: a zero-copy driver that ran
// out of fill descriptors), which takes one non-blocking recvfrom(2).
// After Close it returns nic.ErrClosed.
func (l *Link) TryReadBatch(bufs [][]byte, sizes []int) (int, error) {
	l.rxMu.Lock()
	defer l.rxMu.Unlock()
	l.giveBack()
	if l.c.Closed() {
		return 0, nic.ErrClosed
	}
	want := uint32(min(len(bufs), len(sizes)))
	if want == 0 {
		return 0, nil
	}
	for {
		n := l.rx.available(l.rx.size)
		if n == 0 {
			break
		}
		if got := l.receive(n, bufs[:want], sizes); got > 0 {
			return got, nil
		}
		// Every one of them was too big for its buffer (counted): look again.
	}
	if l.needWakeup && l.fill.needWakeup() {
		rxWakeup(l.fd)
		l.c.Wakeups.Add(1)
	}
	return 0, nil
}

// receive copies up to len(bufs) frames out of the avail descriptors ready
// on the RX ring and gives their chunks back to the fill ring. A
// multi-buffer frame (every descriptor but its last carries XDP_PKT_CONTD)
// is assembled straight into its buffer. A frame larger than its buffer is
// consumed, dropped and counted, and takes no buffer.
func (l *Link) receive(avail uint32, bufs [][]byte, sizes []int) int {
	if l.lend {
		return l.lendFrames(avail, bufs, sizes)
	}
	got, bytes, tooBig := 0, 0, uint64(0)
	var used uint32 // descriptors consumed, whole frames only
frames:
	for used < avail && got < len(bufs) {
		buf, off, fits := bufs[got], 0, true
		i := used
		for {
			d := l.rx.descs[(l.rx.cons+i)&l.rx.mask]
			i++
			end := d.Addr + uint64(d.Len)
			if fits && end <= uint64(len(l.umem)) && off+int(d.Len) <= len(buf) {
				off += copy(buf[off:], l.umem[d.Addr:end])
			} else {
				fits = false
			}
			if d.Options&unix.XDP_PKT_CONTD == 0 {
				break
			}
			if i == avail {
				// The kernel publishes whole frames only (af_xdp.rst,
				// "Multi-Buffer Support"); should the rest ever be
				// missing, leave the frame on the ring for the next call.
				l.rx.prod = l.rx.producer.Load()
				break frames
			}
		}
		used = i
		if fits {
			sizes[got] = off
			bytes += off
			got++
		} else {
			tooBig++
		}
	}
	// The fill ring has as many slots as there are receive chunks, so the
	// chunks in hand always fit; free is only a safety net.
	fn := l.fill.free(used)
	for i := range fn {
		l.fill.descs[(l.fill.prod+i)&l.fill.mask] = l.rx.descs[(l.rx.cons+i)&l.rx.mask].Addr & l.frameMask
	}
	l.rx.release(used)
	l.fill.submit(fn)
	if l.needWakeup && l.fill.needWakeup() {
		// Zero-copy drivers stop receiving when the fill ring ran dry and
		// ask to be woken (af_xdp.rst, "XDP_USE_NEED_WAKEUP").
		rxWakeup(l.fd)
		l.c.Wakeups.Add(1)
	}
	l.c.RxFrames.Add(uint64(got))
	l.c.RxBytes.Add(uint64(bytes))
	if tooBig > 0 {
		l.c.RxDrops.Add(tooBig)
	}
	return got
}

// WriteBatch implements nic.Link. A frame built in a chunk ReserveTx
// handed out is posted where it is; every other frame is copied into free transmit
// chunks (several, chained by XDP_PKT_CONTD, for a multi-buffer frame
// larger than a chunk) and posted on the TX ring; the batch is then kicked
// with one sendto(2) if the kernel asks for it. When the ring or the
// transmit chunks run out it reaps completions, kicks and waits
// (back-pressure) until every frame is queued or the link is closed; if the
// interface is down or gone by then it returns the count so far and an
// error wrapping ENETDOWN or ENXIO. A frame larger than the link carries
// (FrameSize, or MTU+18 with multi-buffer), or empty, is dropped and counted
// (TxDrops) and still counts as accepted.
func (l *Link) WriteBatch(frames [][]byte) (int, error) {
	l.txMu.Lock()
	defer l.txMu.Unlock()
	done, posted := 0, false
	for done < len(frames) {
		if l.c.Closed() {
			return done, nic.ErrClosed
		}
		l.reap()
		room := l.tx.free(l.tx.size)
		var k uint32 // descriptors written
		bytes, sent, need := 0, 0, uint32(0)
		needChunks := false
		for done < len(frames) {
			f := frames[done]
			addr, inPlace := l.reserved(f)
			if len(f) == 0 || len(f) > l.maxTx {
				if inPlace {
					l.txFree = append(l.txFree, addr)
					l.txReserved--
				}
				l.c.TxDrops.Add(1)
				done++
				continue
			}
			if inPlace {
				// Built in a chunk ReserveTx handed out: no copy.
				if k+1 > room {
					need = 1
					break
				}
				l.tx.descs[(l.tx.prod+k)&l.tx.mask] = unix.XDPDesc{Addr: addr, Len: uint32(len(f))}
				k++
				l.txReserved--
			} else {
				need = (uint32(len(f)) + l.frameSize - 1) / l.frameSize
				if k+need > room || need > uint32(len(l.txFree)) {
					needChunks = true
					break
				}
				for off := 0; off < len(f); {
					addr := l.txFree[len(l.txFree)-1]
					l.txFree = l.txFree[:len(l.txFree)-1]
					n := copy(l.umem[addr:addr+uint64(l.frameSize)], f[off:])
					off += n
					var opt uint32
					if off < len(f) {
						opt = unix.XDP_PKT_CONTD
					}
					l.tx.descs[(l.tx.prod+k)&l.tx.mask] = unix.XDPDesc{Addr: addr, Len: uint32(n), Options: opt}
					k++
				}
			}
			done++
			sent++
			bytes += len(f)
			need = 0
		}
		if k > 0 {
			posted = true
			l.tx.submit(k)
			l.c.TxFrames.Add(uint64(sent))
			l.c.TxBytes.Add(uint64(bytes))
		}
		if need == 0 {
			continue
		}
		// The next frame needs more descriptors than the ring or the
		// transmit chunks have free.
		l.c.RingFull.Add(1)
		if err := l.kick(); err != nil {
			// Nothing will complete while the interface is down or
			// gone: report it rather than wait.
			return done, opError("transmit", err)
		}
		l.reap()
		if (needChunks && uint32(len(l.txFree)) < need) || l.tx.free(need) < need {
			if _, err := unix.Poll(l.txPoll[:], 1); err != nil && err != unix.EINTR {
				return done, opError("poll", err)
			}
		}
	}
	if posted {
		l.kick() // a down interface shows up at the next full ring
	}
	return done, nil
}

// ReserveTx implements nic.TxReserver: it hands out free transmit chunks
// (FrameSize bytes each) for the caller to build frames in, so that
// WriteBatch posts them without copying. At most half of the transmit
// chunks are out at a time, so that copied frames always find chunks; a
// multi-buffer link reserves none (its frames may span chunks).
func (l *Link) ReserveTx(bufs [][]byte) int {
	if l.multiBuf {
		return 0
	}
	l.txMu.Lock()
	defer l.txMu.Unlock()
	if l.c.Closed() {
		return 0
	}
	l.reap()
	n := min(len(bufs), len(l.txFree), max(int(l.tx.size)/2-l.txReserved, 0))
	fs := uint64(l.frameSize)
	for i := range n {
		addr := l.txFree[len(l.txFree)-1]
		l.txFree = l.txFree[:len(l.txFree)-1]
		bufs[i] = l.umem[addr : addr+fs : addr+fs]
	}
	l.txReserved += n
	return n
}

// reserved reports whether f starts a chunk ReserveTx handed out (f lies
// in the UMEM), and the chunk's address.
func (l *Link) reserved(f []byte) (uint64, bool) {
	if len(l.umem) == 0 || cap(f) == 0 {
		return 0, false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(l.umem)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(f)))
	if p < base || p >= base+uintptr(len(l.umem)) {
		return 0, false
	}
	return uint64(p - base), true
}

// maxKicks bounds the sendto calls of one kick: in copy mode each sends at
// most the TX budget and answers EAGAIN while descriptors remain.
const maxKicks = 16

// kick asks the kernel to send what is on the TX ring, if it needs asking.
// It returns ENXIO (the socket lost its device) and ENETDOWN (the interface
// is down), which leave the frames on the ring; other errors are transient.
func (l *Link) kick() error {
	// A transmit socket of its own is in copy mode, where the kernel never
	// clears the flag: kick without looking.
	if l.txfd < 0 && l.needWakeup && !l.tx.needWakeup() {
		return nil
	}
	fd := l.txFD()
	for range maxKicks {
		l.c.Wakeups.Add(1)
		l.c.TxKicks.Add(1)
		err := txKick(fd)
		switch err {
		case nil:
			return nil
		case unix.EAGAIN:
			if l.tx.consumer.Load() == l.tx.prod {
				return nil
			}
		case unix.ENXIO, unix.ENETDOWN:
			return err
		default:
			// EBUSY, ENOBUFS: the frames stay on the ring for the next kick.
			return nil
		}
	}
	return nil
}

// reap moves completed transmit chunks back to the free list.
func (l *Link) reap() {
	n := l.comp.available(l.comp.size)
	for i := range n {
		l.txFree = append(l.txFree, l.comp.descs[(l.comp.cons+i)&l.comp.mask]&l.frameMask)
	}
	if n > 0 {
		l.comp.release(n)
	}
}

// XDPStats are the kernel's per-socket counters (XDP_STATISTICS).
type XDPStats = unix.XDPStatistics

// KernelStats returns the socket's XDP_STATISTICS (the last values after
// Close).
func (l *Link) KernelStats() XDPStats {
	l.c.StatsMu.Lock()
	defer l.c.StatsMu.Unlock()
	return l.kernelStats()
}

// kernelStats is KernelStats with the stats lock held.
func (l *Link) kernelStats() XDPStats {
	if l.fd < 0 {
		return l.lastXDPStats
	}
	return l.readXDPStats()
}

func (l *Link) readXDPStats() XDPStats {
	var s unix.XDPStatistics
	optlen := uint32(unsafe.Sizeof(s))
	if l.fd >= 0 {
		getsockopt(l.fd, unix.XDP_STATISTICS, unsafe.Pointer(&s), &optlen)
	}
	if l.txfd >= 0 {
		// The transmit socket's: its invalid and empty-ring counts.
		var t unix.XDPStatistics
		optlen = uint32(unsafe.Sizeof(t))
		getsockopt(l.txfd, unix.XDP_STATISTICS, unsafe.Pointer(&t), &optlen)
		s.Tx_invalid_descs += t.Tx_invalid_descs
		s.Tx_ring_empty_descs += t.Tx_ring_empty_descs
	}
	return s
}

// Stats implements nic.Link. RxDrops adds frames too big for the caller's
// buffer to the kernel's rx_dropped (no fill chunk, frame larger than a
// chunk) and rx_ring_full; TxDrops adds oversized frames to
// tx_invalid_descs; RingFull counts the times WriteBatch found the TX ring
// or the transmit chunks exhausted; Wakeups counts sendto/recvfrom kicks,
// TxKicks the sendto kicks alone.
func (l *Link) Stats() nic.Stats {
	return l.c.Stats(func() (uint64, uint64) {
		k := l.kernelStats()
		return k.Rx_dropped + k.Rx_ring_full, k.Tx_invalid_descs
	})
}

// Close detaches and unloads the XDP program, wakes every blocked
// ReadBatch and WriteBatch (they return nic.ErrClosed), waits for them to
// leave, then closes the socket and unmaps its memory.
func (l *Link) Close() error {
	return l.c.Close(&l.rxMu, &l.txMu, func() {
		var one [8]byte
		one[0] = 1 // eventfd counters are host-endian; any non-zero value wakes
		unix.Write(l.efd, one[:])
		l.w.Close() // wakes a parked WaitReadBatch
	}, func() error {
		l.lastXDPStats = l.readXDPStats()
		return l.release()
	})
}

// release frees everything Open acquired, in reverse order.
func (l *Link) release() error {
	var errs []error
	l.w.Close()
	if l.xsks != nil && l.fd >= 0 {
		// Drop the map's reference to the socket now rather than when the
		// kernel frees the map after the program (RCU, then a work queue).
		l.xsks.Delete(uint32(l.queue))
	}
	if l.shared != nil && !l.shared.release() {
		// Other queues' sockets still use the program and the map
		// (OpenQueues): the last one closes them.
		l.lnk, l.prog, l.xsks = nil, nil, nil
	}
	if l.lnk != nil {
		if err := l.lnk.Close(); err != nil {
			errs = append(errs, fmt.Errorf("detach XDP: %w", err))
		}
		l.lnk = nil
	}
	if l.prog != nil {
		l.prog.Close()
		l.prog = nil
	}
	if l.xsks != nil {
		l.xsks.Close()
		l.xsks = nil
	}
	l.closeTxSocket()
	for i, m := range l.ringMem {
		if m != nil {
			unix.Munmap(m)
			l.ringMem[i] = nil
		}
	}
	if l.fd >= 0 {
		unix.Close(l.fd)
		l.fd = -1
	}
	if l.umem != nil {
		unix.Munmap(l.umem)
		l.umem = nil
	}
	if l.efd >= 0 {
		unix.Close(l.efd)
		l.efd = -1
	}
	if len(errs) > 0 {
		return opError("close", errors.Join(errs...))
	}
	return nil
}

func setsockopt(fd, name int, p unsafe.Pointer, n uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(name), uintptr(p), n, 0)
	if e != 0 {
		return e
	}
	return nil
}

func getsockopt(fd, name int, p unsafe.Pointer, n *uint32) error {
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(name), uintptr(p), uintptr(unsafe.Pointer(n)), 0)
	if e != 0 {
		return e
	}
	return nil
}

// txKick asks the kernel to transmit what is on the TX ring (sendto with
// MSG_DONTWAIT, no data) and rxWakeup to resume receiving into the fill
// ring (recvfrom, MSG_DONTWAIT). Neither blocks, so they are raw system
// calls: entersyscall, which unix.Sendto makes, wakes the runtime's sysmon
// thread when it sleeps for want of work, which it does between the round
// trips of a sleeping ping-pong: a futex wake and a context switch on
// every kick (perf: 23 % of the futex calls of the bench's sleeping write_lat
// client), besides the P hand-off bookkeeping. A raw call keeps the P for
// its few microseconds (copy mode runs the transmit, and the peer's XDP
// receive on veth, inside it).
func txKick(fd int) error {
	_, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

func rxWakeup(fd int) {
	unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
}

// RawrefOptions are the options of the raw AF_XDP reference sender
// (../shared/rawref) for an interface of the given MTU: 256 descriptors per
// kick and rings of 4096 (8192 chunks of 2048 bytes) where the MTU fits a
// 2048-byte chunk, else 64 per kick and 4096 chunks of 4096. bench's raw
// cells open their links with them; goroce's own links keep Open's defaults.
func RawrefOptions(mtu int) Options {
	if mtu <= smallChunkMTU {
		return Options{BatchSize: defaultTxBudget, FrameSize: 2048, NumFrames: 2 * defaultNumFrames}
	}
	return Options{BatchSize: 64}
}
