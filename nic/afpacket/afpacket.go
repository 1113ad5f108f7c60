//go:build linux

package afpacket

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/internal/linkcore"
	"github.com/goroce/goroce/nic/internal/sockio"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

const (
	defaultBlockSize = 1 << 20
	defaultNumBlocks = 8
	defaultBatch     = 64
	frameSizeHint    = 2048 // tp_frame_size: only checked for consistency in V3
	// maxBusyRetries bounds the retries of one frame the driver refuses
	// with ENOBUFS before it is dropped.
	maxBusyRetries = 1000
	// Offsets in struct tpacket_block_desc (version, offset_to_priv, then
	// tpacket_hdr_v1).
	bdBlockStatus = 8
	bdNumPkts     = 12
	bdFirstPkt    = 16
)

// testNoIgnoreOutgoing makes Open take the pre-4.20 path (tests only).
var testNoIgnoreOutgoing bool

// Link is an AF_PACKET nic.Link bound to one interface.
type Link struct {
	ifname  string
	ifindex int
	mac     net.HardwareAddr
	mtu     int
	batch   int
	fd      int
	stop    *sockio.Stopper

	rxMu      sync.Mutex
	ring      []byte
	blockSize int
	numBlocks int
	cur       int // V3: block being read; V2: frame slot being read
	pktLeft   int // V3: frames left in block cur (0: not yet taken)
	pktOff    int // V3: ring offset of the next frame in block cur
	v2        bool
	frameSize int // V2 slot size
	frameNr   int // V2 slots in all
	perBlock  int // V2 slots per block

	txMu sync.Mutex
	tx   *sockio.Batch

	features []string

	w sockio.BatchWait // wait_linux.go

	c           linkcore.Core // counters, closed, Close's order
	kernelDrops atomic.Uint64 // PACKET_STATISTICS drops, summed (each read resets them)
}

var _ nic.Link = (*Link)(nil)

// Open creates the socket, the receive ring and the filter, and binds to
// ifname. It must run in the network namespace of ifname.
func Open(ifname string, opts Options) (*Link, error) {
	ifc, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("afpacket: %w", err)
	}
	if opts.BlockSize <= 0 {
		opts.BlockSize = defaultBlockSize
	}
	if opts.NumBlocks <= 0 {
		opts.NumBlocks = defaultNumBlocks
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = defaultBatch
	}
	if opts.Port == 0 {
		opts.Port = 4791
	}
	tov := opts.BlockTimeout.Milliseconds()
	if tov < 1 {
		tov = 1
	}
	if opts.NumBlocks < 3 {
		return nil, fmt.Errorf("afpacket: NumBlocks %d: need at least 3", opts.NumBlocks)
	}
	page := unix.Getpagesize()
	if opts.BlockSize%page != 0 || opts.BlockSize < ifc.MTU+18+unix.SizeofTpacket3Hdr+64 {
		return nil, fmt.Errorf("afpacket: block size %d must be a multiple of %d and hold a %d-byte frame", opts.BlockSize, page, ifc.MTU+18)
	}

	l := &Link{
		ifname:    ifname,
		ifindex:   ifc.Index,
		mac:       ifc.HardwareAddr,
		mtu:       ifc.MTU,
		batch:     opts.BatchSize,
		blockSize: opts.BlockSize,
		numBlocks: opts.NumBlocks,
		tx:        sockio.NewBatch(opts.BatchSize, false),
		fd:        -1,
	}
	ok := false
	defer func() {
		if !ok {
			l.release()
		}
	}()

	// Protocol 0: the socket receives nothing until bind, so no frame
	// reaches the ring before the filter is in place.
	l.fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("afpacket: socket: %w (needs CAP_NET_RAW)", err)
	}
	if opts.LowLatency {
		if err := l.setupV2(ifc.MTU); err != nil {
			return nil, err
		}
		l.features = append(l.features, fmt.Sprintf("TPACKET_V2 %d x %d B slots", l.frameNr, l.frameSize))
	} else {
		l.features = append(l.features, fmt.Sprintf("TPACKET_V3 %d x %d B blocks, %d ms timeout", opts.NumBlocks, opts.BlockSize, tov))
		if err := unix.SetsockoptInt(l.fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V3); err != nil {
			return nil, fmt.Errorf("afpacket: TPACKET_V3: %w", err)
		}
		req := unix.TpacketReq3{
			Block_size:     uint32(opts.BlockSize),
			Block_nr:       uint32(opts.NumBlocks),
			Frame_size:     frameSizeHint,
			Frame_nr:       uint32(opts.BlockSize / frameSizeHint * opts.NumBlocks),
			Retire_blk_tov: uint32(tov),
		}
		if err := unix.SetsockoptTpacketReq3(l.fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
			return nil, fmt.Errorf("afpacket: PACKET_RX_RING (%d x %d B): %w", opts.NumBlocks, opts.BlockSize, err)
		}
	}
	l.ring, err = unix.Mmap(l.fd, 0, opts.BlockSize*opts.NumBlocks, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("afpacket: mmap ring: %w", err)
	}
	// Our own transmissions must not come back into the ring. Kernels
	// before 4.20 lack PACKET_IGNORE_OUTGOING: the filter does it instead.
	ignoreOut := !testNoIgnoreOutgoing &&
		unix.SetsockoptInt(l.fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1) == nil
	l.features = append(l.features, map[bool]string{true: "ignore-outgoing", false: "outgoing-dropped-by-filter"}[ignoreOut])
	if !opts.NoFilter || !ignoreOut {
		prog, err := roceFilter(opts.Port, !ignoreOut)
		if opts.NoFilter {
			prog, err = outgoingOnlyFilter()
		}
		if err != nil {
			return nil, err
		}
		if err := attachFilter(l.fd, prog); err != nil {
			return nil, fmt.Errorf("afpacket: SO_ATTACH_FILTER: %w", err)
		}
	}
	if !opts.NoQdiscBypass {
		if err := unix.SetsockoptInt(l.fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1); err != nil {
			return nil, fmt.Errorf("afpacket: PACKET_QDISC_BYPASS: %w", err)
		}
		l.features = append(l.features, "qdisc-bypass")
	}
	sa := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifc.Index}
	if err := unix.Bind(l.fd, sa); err != nil {
		return nil, fmt.Errorf("afpacket: bind to %s: %w", ifname, err)
	}
	l.stop, err = sockio.NewStopper()
	if err != nil {
		return nil, fmt.Errorf("afpacket: eventfd: %w", err)
	}
	if err := l.initWait(); err != nil {
		return nil, err
	}
	ok = true
	return l, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// setupV2 configures a TPACKET_V2 ring: slots big enough for the header
// (tpacket2_hdr + sockaddr_ll, aligned), the kernel's 16-byte MAC offset
// slack, a VLAN tag and an MTU-sized frame, rounded to TPACKET_ALIGNMENT.
func (l *Link) setupV2(mtu int) error {
	if err := unix.SetsockoptInt(l.fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V2); err != nil {
		return fmt.Errorf("afpacket: TPACKET_V2: %w", err)
	}
	const hdr = (unix.SizeofTpacket2Hdr + unix.SizeofSockaddrLinklayer + unix.TPACKET_ALIGNMENT - 1) &^ (unix.TPACKET_ALIGNMENT - 1)
	fs := hdr + 16 + 4 + mtu + 18 + 64
	fs = (fs + unix.TPACKET_ALIGNMENT - 1) &^ (unix.TPACKET_ALIGNMENT - 1)
	l.v2 = true
	l.frameSize = fs
	l.perBlock = l.blockSize / fs
	l.frameNr = l.perBlock * l.numBlocks
	req := unix.TpacketReq{
		Block_size: uint32(l.blockSize),
		Block_nr:   uint32(l.numBlocks),
		Frame_size: uint32(fs),
		Frame_nr:   uint32(l.frameNr),
	}
	if err := unix.SetsockoptTpacketReq(l.fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
		return fmt.Errorf("afpacket: PACKET_RX_RING V2 (%d x %d B slots): %w", l.frameNr, fs, err)
	}
	return nil
}

func attachFilter(fd int, prog []bpf.RawInstruction) error {
	f := make([]unix.SockFilter, len(prog))
	for i, ins := range prog {
		f[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]})
}

func (l *Link) release() {
	l.w.Close()
	if l.ring != nil {
		unix.Munmap(l.ring)
		l.ring = nil
	}
	if l.fd >= 0 {
		unix.Close(l.fd)
		l.fd = -1
	}
	if l.stop != nil {
		l.stop.Close()
	}
}

// BatchSize implements nic.Link.
func (l *Link) BatchSize() int { return l.batch }

// MTU implements nic.Link (the interface MTU when opened).
func (l *Link) MTU() int { return l.mtu }

// HardwareAddr implements nic.Link.
func (l *Link) HardwareAddr() net.HardwareAddr { return append(net.HardwareAddr(nil), l.mac...) }

// Features describes how the link was set up (ring flavour and size, qdisc
// bypass, how outgoing frames are kept out), for logs.
func (l *Link) Features() []string { return append([]string(nil), l.features...) }

// Ifname returns the interface name.
func (l *Link) Ifname() string { return l.ifname }

// ReadBatch implements nic.Link.
func (l *Link) ReadBatch(bufs [][]byte, sizes []int) (int, error) {
	l.rxMu.Lock()
	defer l.rxMu.Unlock()
	for {
		if l.c.Closed() {
			return 0, nic.ErrClosed
		}
		if n := l.drain(bufs, sizes); n > 0 {
			return n, nil
		}
		_, stopped, err := l.stop.Wait(l.fd, unix.POLLIN, -1)
		l.c.Wakeups.Add(1)
		if stopped {
			return 0, nic.ErrClosed
		}
		if err != nil {
			return 0, fmt.Errorf("afpacket: poll: %w", err)
		}
	}
}

// TryReadBatch returns the frames already in the ring without blocking
// (for busy-polling loops).
func (l *Link) TryReadBatch(bufs [][]byte, sizes []int) (int, error) {
	l.rxMu.Lock()
	defer l.rxMu.Unlock()
	if l.c.Closed() {
		return 0, nic.ErrClosed
	}
	return l.drain(bufs, sizes), nil
}

func (l *Link) blockStatus(blk int) *uint32 {
	return (*uint32)(unsafe.Pointer(&l.ring[blk*l.blockSize+bdBlockStatus]))
}

// drain copies frames from the ring into bufs. Called with rxMu held.
func (l *Link) drain(bufs [][]byte, sizes []int) int {
	if l.v2 {
		return l.drainV2(bufs, sizes)
	}
	return l.drainV3(bufs, sizes)
}

// deliver copies one received frame (data, as the kernel stored it, VLAN
// tag possibly in metadata) into b. It returns the frame length, or 0 if
// the frame was dropped (counted).
func (l *Link) deliver(b, data []byte, wireLen int, vlan bool, tpid, tci uint16) int {
	snap := len(data)
	need := snap
	if vlan {
		need += 4
	}
	if snap < wireLen || need > len(b) || snap < 14 {
		l.c.RxDrops.Add(1) // truncated by the ring, or too big for the caller
		return 0
	}
	if !vlan {
		return copy(b, data)
	}
	copy(b[0:12], data[0:12])
	binary.BigEndian.PutUint16(b[12:], tpid)
	binary.BigEndian.PutUint16(b[14:], tci)
	copy(b[16:], data[12:])
	return need
}

// drainV2 reads TPACKET_V2 slots in order, each owned by us while its
// tp_status has TP_STATUS_USER.
func (l *Link) drainV2(bufs [][]byte, sizes []int) int {
	n := 0
	ne := binary.NativeEndian
	for n < len(bufs) && n < len(sizes) {
		off := (l.cur/l.perBlock)*l.blockSize + (l.cur%l.perBlock)*l.frameSize
		st := (*uint32)(unsafe.Pointer(&l.ring[off]))
		status := atomic.LoadUint32(st)
		if status&unix.TP_STATUS_USER == 0 {
			break
		}
		h := l.ring[off : off+unix.SizeofTpacket2Hdr]
		wireLen := int(ne.Uint32(h[4:]))
		snap := int(ne.Uint32(h[8:]))
		mac := int(ne.Uint16(h[12:]))
		if mac+snap <= l.frameSize {
			tpid := uint16(unix.ETH_P_8021Q)
			if status&unix.TP_STATUS_VLAN_TPID_VALID != 0 {
				tpid = ne.Uint16(h[26:])
			}
			data := l.ring[off+mac : off+mac+snap]
			if k := l.deliver(bufs[n], data, wireLen, status&unix.TP_STATUS_VLAN_VALID != 0, tpid, ne.Uint16(h[24:])); k > 0 {
				sizes[n] = k
				l.c.RxBytes.Add(uint64(k))
				n++
			}
		} else {
			l.c.RxDrops.Add(1)
		}
		atomic.StoreUint32(st, unix.TP_STATUS_KERNEL)
		l.cur++
		if l.cur == l.frameNr {
			l.cur = 0
		}
	}
	l.c.RxFrames.Add(uint64(n))
	return n
}

// drainV3 copies frames from retired TPACKET_V3 blocks into bufs.
func (l *Link) drainV3(bufs [][]byte, sizes []int) int {
	n := 0
	ne := binary.NativeEndian
	for n < len(bufs) && n < len(sizes) {
		if l.pktLeft == 0 {
			status := atomic.LoadUint32(l.blockStatus(l.cur))
			if status&unix.TP_STATUS_USER == 0 {
				break
			}
			base := l.cur * l.blockSize
			l.pktLeft = int(ne.Uint32(l.ring[base+bdNumPkts:]))
			l.pktOff = base + int(ne.Uint32(l.ring[base+bdFirstPkt:]))
			if l.pktLeft == 0 {
				l.releaseBlock()
				continue
			}
		}
		if l.pktOff+unix.SizeofTpacket3Hdr > len(l.ring) {
			l.c.RxDrops.Add(uint64(l.pktLeft))
			l.releaseBlock()
			continue
		}
		h := l.ring[l.pktOff : l.pktOff+unix.SizeofTpacket3Hdr]
		next := int(ne.Uint32(h[0:]))
		snap := int(ne.Uint32(h[12:]))
		wireLen := int(ne.Uint32(h[16:]))
		status := ne.Uint32(h[20:])
		mac := int(ne.Uint16(h[24:]))
		start := l.pktOff + mac
		if start+snap > len(l.ring) || snap < 14 {
			// Corrupt descriptor: give the block back rather than read out of bounds.
			l.c.RxDrops.Add(uint64(l.pktLeft))
			l.releaseBlock()
			continue
		}
		tpid := uint16(unix.ETH_P_8021Q)
		if status&unix.TP_STATUS_VLAN_TPID_VALID != 0 {
			tpid = ne.Uint16(h[36:])
		}
		if k := l.deliver(bufs[n], l.ring[start:start+snap], wireLen, status&unix.TP_STATUS_VLAN_VALID != 0, tpid, uint16(ne.Uint32(h[32:]))); k > 0 {
			sizes[n] = k
			l.c.RxBytes.Add(uint64(k))
			n++
		}
		l.pktLeft--
		if l.pktLeft == 0 {
			l.releaseBlock()
		} else {
			l.pktOff += next
		}
	}
	l.c.RxFrames.Add(uint64(n))
	return n
}

// releaseBlock gives block cur back to the kernel and moves to the next.
func (l *Link) releaseBlock() {
	atomic.StoreUint32(l.blockStatus(l.cur), unix.TP_STATUS_KERNEL)
	l.pktLeft = 0
	l.cur++
	if l.cur == l.numBlocks {
		l.cur = 0
	}
}

// WriteBatch implements nic.Link. It returns len(frames) unless the link is
// closed or the interface fails; frames the driver refused are counted in
// Stats.TxDrops.
func (l *Link) WriteBatch(frames [][]byte) (int, error) {
	l.txMu.Lock()
	defer l.txMu.Unlock()
	done, busy := 0, 0
	for done < len(frames) {
		if l.c.Closed() {
			return done, nic.ErrClosed
		}
		k := min(len(frames)-done, len(l.tx.Msgs))
		for i := 0; i < k; i++ {
			l.tx.SetBuf(i, frames[done+i])
		}
		n, err := sockio.Sendmmsg(l.fd, l.tx.Msgs[:k], 0)
		if n > 0 {
			for i := 0; i < n; i++ {
				l.c.TxBytes.Add(uint64(len(frames[done+i])))
			}
			l.c.TxFrames.Add(uint64(n))
			done += n
			busy = 0
			continue
		}
		switch {
		case sockio.IsAgain(err):
			l.c.RingFull.Add(1)
			if _, stopped, perr := l.stop.Wait(l.fd, unix.POLLOUT, -1); stopped {
				return done, nic.ErrClosed
			} else if perr != nil {
				return done, fmt.Errorf("afpacket: poll: %w", perr)
			}
		case errors.Is(err, unix.ENOBUFS) && busy < maxBusyRetries:
			// The driver's queue is stopped (qdisc bypass gives no
			// queueing of its own): yield and retry, as back-pressure,
			// rather than lose a frame the transport must retransmit.
			l.c.RingFull.Add(1)
			busy++
			runtime.Gosched()
			continue
		case errors.Is(err, unix.ENOBUFS), errors.Is(err, unix.EMSGSIZE), errors.Is(err, unix.EINVAL):
			// Still busy after the retries, or the frame is
			// malformed/oversize: lose this one frame.
			l.c.TxDrops.Add(1)
			done++
		default:
			return done, fmt.Errorf("afpacket: sendmmsg on %s: %w", l.ifname, err)
		}
	}
	l.tx.Clear() // do not keep the caller's buffers reachable
	return done, nil
}

// Stats implements nic.Link. RxDrops includes the kernel's ring drops.
func (l *Link) Stats() nic.Stats {
	return l.c.Stats(func() (uint64, uint64) {
		if !l.c.Closed() {
			// PACKET_STATISTICS resets the kernel's counters on each read.
			if st, err := unix.GetsockoptTpacketStatsV3(l.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
				l.kernelDrops.Add(uint64(st.Drops))
			}
		}
		return l.kernelDrops.Load(), 0
	})
}

// Close implements nic.Link: it wakes blocked ReadBatch/WriteBatch calls
// (ErrClosed), waits for them to return, then unmaps the ring and closes
// the socket.
func (l *Link) Close() error {
	return l.c.Close(&l.rxMu, &l.txMu, func() {
		l.stop.Stop()
		l.w.Close() // wakes a parked WaitReadBatch
	}, func() error {
		l.release()
		return nil
	})
}
