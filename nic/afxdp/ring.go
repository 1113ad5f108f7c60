//go:build linux

package afxdp

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ring is the shared part of one AF_XDP ring: the producer and consumer
// indices and the flags word live in the mmapped area at the offsets that
// XDP_MMAP_OFFSETS reported. Indices are free-running uint32s; a slot is
// index & mask.
//
// Exactly one side produces and the other consumes. The local copies
// (prod or cons, whichever this side owns) are authoritative; the other
// side's index is cached and reloaded only when the cache says "empty" or
// "full", so a batch costs one acquire load and one release store.
type ring struct {
	mem      []byte
	producer *atomic.Uint32
	consumer *atomic.Uint32
	flags    *atomic.Uint32
	mask     uint32
	size     uint32

	prod, cons uint32 // this side's view: one is ours, the other a cache
}

func (r *ring) init(mem []byte, off unix.XDPRingOffset, size uint32) {
	r.mem = mem
	r.producer = (*atomic.Uint32)(unsafe.Pointer(&mem[off.Producer]))
	r.consumer = (*atomic.Uint32)(unsafe.Pointer(&mem[off.Consumer]))
	r.flags = (*atomic.Uint32)(unsafe.Pointer(&mem[off.Flags]))
	r.size = size
	r.mask = size - 1
	r.prod = r.producer.Load()
	r.cons = r.consumer.Load()
}

// needWakeup reports whether the kernel set XDP_RING_NEED_WAKEUP on the ring.
func (r *ring) needWakeup() bool { return r.flags.Load()&unix.XDP_RING_NEED_WAKEUP != 0 }

// --- producer side (fill ring, TX ring) ---

// free returns how many slots (up to want) the producer may fill, reloading
// the consumer index (acquire) only if the cached one does not give enough.
func (r *ring) free(want uint32) uint32 {
	n := r.size - (r.prod - r.cons)
	if n < want {
		r.cons = r.consumer.Load()
		n = r.size - (r.prod - r.cons)
	}
	return min(n, want)
}

// submit publishes n descriptors written at prod..prod+n (release).
func (r *ring) submit(n uint32) {
	r.prod += n
	r.producer.Store(r.prod)
}

// --- consumer side (RX ring, completion ring) ---

// available returns how many descriptors (up to want) are ready at cons,
// reloading the producer index (acquire) only if the cache has none.
func (r *ring) available(want uint32) uint32 {
	n := r.prod - r.cons
	if n == 0 {
		r.prod = r.producer.Load()
		n = r.prod - r.cons
	}
	return min(n, want)
}

// release hands n consumed descriptors back to the producer (release).
func (r *ring) release(n uint32) {
	r.cons += n
	r.consumer.Store(r.cons)
}

// addrRing carries UMEM addresses (fill and completion rings).
type addrRing struct {
	ring
	descs []uint64
}

func (r *addrRing) initAddr(mem []byte, off unix.XDPRingOffset, size uint32) {
	r.init(mem, off, size)
	r.descs = unsafe.Slice((*uint64)(unsafe.Pointer(&mem[off.Desc])), size)
}

// descRing carries {addr, len, options} descriptors (RX and TX rings).
type descRing struct {
	ring
	descs []unix.XDPDesc
}

func (r *descRing) initDesc(mem []byte, off unix.XDPRingOffset, size uint32) {
	r.init(mem, off, size)
	r.descs = unsafe.Slice((*unix.XDPDesc)(unsafe.Pointer(&mem[off.Desc])), size)
}

// ringBytes is the mmap length of a ring of size descriptors of descSize.
func ringBytes(off unix.XDPRingOffset, size, descSize uint32) int {
	return int(off.Desc) + int(size)*int(descSize)
}
