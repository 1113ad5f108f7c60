// Package afxdp is goroce's AF_XDP backend for nic.Link: it moves whole
// Ethernet frames between goroce and one queue of a Linux interface through
// an AF_XDP socket, with an XDP program that steers only RoCEv2 (UDP port
// 4791) to the socket and leaves everything else to the kernel.
//
// # Model
//
// An AF_XDP socket shares one memory area, the UMEM, with the kernel. The
// UMEM is cut into equal frames (chunks) of Options.FrameSize bytes (2048
// by default where the interface MTU fits, else 4096). Four single-producer/single-consumer rings of
// descriptors, each mmapped from the socket, move frames between the two
// sides (see Documentation/networking/af_xdp.rst in the kernel):
//
//	fill ring        user → kernel  UMEM addresses the kernel may receive into
//	RX ring          kernel → user  {addr, len} of received frames
//	TX ring          user → kernel  {addr, len} of frames to send
//	completion ring  kernel → user  UMEM addresses whose transmission is done
//
// Each ring has a producer and a consumer index in shared memory. The
// producer writes descriptors, then publishes them with a release store of
// its index; the consumer reads the other side's index with an acquire load,
// reads the descriptors, then releases them with a release store of its own
// index. This is the order libxdp's xsk.h uses (__atomic_load_n with
// __ATOMIC_ACQUIRE, __atomic_store_n with __ATOMIC_RELEASE); Go's sync/atomic
// loads and stores are sequentially consistent, which is stronger. Each side
// caches the other side's index and only reloads it when the cache says the
// ring is empty (consumer) or full (producer), so a batch costs two atomic
// operations, not two per frame.
//
// The kernel takes no chunk larger than a page (XDP_UMEM_REG answers EINVAL
// for 8192 bytes, aligned or unaligned, without huge pages), so a frame
// larger than a chunk spans several: see "Multi-buffer" below.
//
// The UMEM is split in two fixed halves: the receive half circulates between
// the fill ring and the RX ring (ReadBatch copies a frame out and gives its
// chunk straight back to the fill ring), the transmit half is a free list
// owned by WriteBatch (a frame is copied into a free chunk, posted on the TX
// ring, and the chunk returns to the free list when the completion ring hands
// it back). ReserveTx (nic.TxReserver) lends free transmit chunks, up to half
// of them, to a caller that builds its frames there (qp's transmit batch):
// WriteBatch posts such a frame without the copy. After LendRx
// (nic.RxLender) the reads lend the received frames in their chunks
// instead of copying them, and give the chunks back to the fill ring at the
// next read (qp's link reader, lend.go). The receive side is owned by the ReadBatch goroutine and the
// transmit side by the WriteBatch goroutine, so neither needs a lock on the
// data path.
//
// In copy mode a single-buffer link transmits on a second AF_XDP socket
// bound to the same queue with XDP_SHARED_UMEM (a TX ring and nothing else;
// the first socket keeps the fill, completion and RX rings and stays the
// XSKMAP's): every poll of a copy-mode socket drives its transmit under the
// socket's mutex, so the runtime poller's epoll_wait on the receiving socket
// spun on that mutex while a sendto sent a batch (txsock.go;
// Options.OneSocket keeps one socket).
//
// # Syscalls
//
// Receiving costs no syscall while frames are waiting; ReadBatch sleeps in
// poll(2) on the socket and an eventfd only when the RX ring is empty (or,
// with Options.BusyPoll, after spinning on the ring for that long). Close
// writes the eventfd, which wakes every sleeper. TryReadBatch, for callers
// that poll (qp.ModeBusyPoll), never sleeps: on an empty ring it is one
// atomic load of the producer index and returns 0. Transmitting costs one
// sendto(2) "kick" per batch, and only when the kernel asks for one
// (XDP_RING_NEED_WAKEUP on the TX ring; in copy mode it always does). The
// socket sets XDP_MAX_TX_SKB_BUDGET to 256 when the kernel has it, so one kick
// sends a whole batch in copy mode (the default budget of 32 halves the rate,
// see PERF-FACTS.md).
//
// # The XDP program
//
// The program is assembled at run time with cilium/ebpf/asm (no C compiler):
// it parses Ethernet (with at most one 802.1Q/802.1ad tag), IPv4 (honouring
// IHL, only unfragmented datagrams) or IPv6 (fixed header only, no extension
// headers) and UDP, and redirects UDP destination port 4791 (RoCEv2, IBTA
// Annex A17.2.1) into the XSKMAP at the frame's rx_queue_index with
// XDP_PASS as the fallback action (bpf_redirect_map's flags, kernel >= 5.3).
// Everything else (ARP, ICMP, TCP, other UDP) gets XDP_PASS and goes through
// the kernel stack as before.
//
// The program is attached with a bpf_link (link.AttachXDP, kernel >= 5.9),
// in native (driver) mode when the driver accepts it and in generic (SKB)
// mode otherwise; Link.Mode says which. A bpf_link is owned by a file
// descriptor, so when the process dies the kernel detaches the program by
// itself: a crashed run cannot leave a goroce program behind through the
// link. A program attached the legacy way (netlink IFLA_XDP, e.g. by `ip
// link set dev X xdp ...` or by an older goroce) does survive its process;
// Open finds it through netlink and, if it is a goroce program (by name),
// detaches it before attaching its own. A foreign program, or one held by a
// live bpf_link (another running process), makes Open fail instead of
// silently taking over the interface.
//
// # veth and MTU
//
// veth has no zero-copy support: the socket runs in copy mode, and native
// XDP is used. PERF-FACTS.md records that a native-mode XDP program on one
// veth end only delivers redirected frames when the peer end has an XDP
// program too. When both ends are opened with this package that holds
// already; when the other end is a plain socket (the kernel stack, a raw
// socket, AF_PACKET), put a trivial program on it with AttachPassProgram,
// from a process that stays up (the program lives as long as its bpf_link).
// On this project's Linux 6.18 machines TestVethOneSided passes both ways
// without it as well (run it with AFXDP_NO_PEER_PROG=1), so the rule may
// only matter on other kernels or for XDP_REDIRECT into a veth; attaching
// it costs nothing measurable.
//
// # Multi-buffer
//
// One chunk holds FrameSize-256 bytes of a received frame (the kernel keeps
// XDP_PACKET_HEADROOM in front), an IP MTU of 3822 for 4096-byte chunks.
// When the interface MTU is larger (a veth at MTU 9000), Open makes the
// socket multi-buffer (af_xdp.rst, "Multi-Buffer Support"): the program is
// loaded with BPF_F_XDP_HAS_FRAGS (libbpf's SEC("xdp.frags"), kernel >=
// 5.18), which also lets it attach natively to a device whose MTU exceeds a
// page, and the socket is bound with XDP_USE_SG (kernel >= 6.6). A frame
// then spans up to 16 chunks: every descriptor but its last carries
// XDP_PKT_CONTD in options, on the RX ring (the kernel copies the frame
// into as many fill chunks as it needs and publishes whole frames only) and
// on the TX ring (WriteBatch splits a frame at chunk boundaries and posts a
// frame only when all its descriptors fit). ReadBatch assembles a frame
// straight into the caller's buffer, so the transport sees one contiguous
// frame and nothing is allocated per packet. Link.MTU is then the
// interface's; Link.MultiBuffer says whether the socket is multi-buffer.
//
// If the kernel refuses XDP_USE_SG or the frags flag (or
// Options.SingleBuffer asks), the socket is single-buffer and Link.MTU is
// capped by the chunk (3822), logged with the reason. Without the frags
// flag the program cannot be attached natively to a device whose MTU
// exceeds one page minus headroom (veth answers ERANGE), so Open falls back
// to generic mode, logged as well.
//
// # Namespaces and limits
//
// Open and AttachPassProgram act in the network namespace of the calling
// thread (a test switches a locked thread with setns(2)); the socket, map,
// program and link keep that namespace and may then be used from any
// goroutine. One Link per interface: the steering program is per interface,
// and a second Open on any queue of the same interface fails (the XSKMAP
// could take one socket per queue, but sharing the program between Links is
// not implemented).
//
// # Fallback
//
// Open probes what it needs and returns a *NotSupportedError (which matches
// ErrNotSupported and errors.ErrUnsupported) naming the missing feature, so a
// caller can fall back to AF_PACKET or UDP mode. The package builds on every
// system; outside Linux Open and AttachPassProgram always return that error,
// wrapping ErrNotSupported.
package afxdp
