//go:build linux

package sockio

import (
	"errors"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Stopper is an eventfd that becomes readable, once and for good, when Stop
// is called. Blocking loops poll it next to their socket.
type Stopper struct {
	fd      int
	stopped atomic.Bool
}

// NewStopper creates the eventfd.
func NewStopper() (*Stopper, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, err
	}
	return &Stopper{fd: fd}, nil
}

// Stop makes the eventfd readable and Stopped true. Idempotent.
func (s *Stopper) Stop() {
	if s.stopped.Swap(true) {
		return
	}
	var one = [8]byte{1}
	unix.Write(s.fd, one[:])
}

// Stopped reports whether Stop was called.
func (s *Stopper) Stopped() bool { return s.stopped.Load() }

// Close releases the eventfd; call it only once nobody polls any more.
func (s *Stopper) Close() error { return unix.Close(s.fd) }

// Wait blocks until fd reports one of events, the Stopper is stopped, or
// timeoutMs passes (-1: no timeout). It returns ready=true when fd is ready
// and stopped=true when the Stopper fired.
func (s *Stopper) Wait(fd int, events int16, timeoutMs int) (ready, stopped bool, err error) {
	fds := [2]unix.PollFd{{Fd: int32(fd), Events: events}, {Fd: int32(s.fd), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds[:], timeoutMs)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, false, err
		}
		return fds[0].Revents != 0, fds[1].Revents != 0 || s.stopped.Load(), nil
	}
}

// Batch is a preallocated array of mmsghdrs, each with one or two iovecs
// and, optionally, room for a socket address, for sendmmsg/recvmmsg.
type Batch struct {
	Msgs  []unix.Mmsghdr
	Iovs  []unix.Iovec            // iovPerMsg per message
	Names []unix.RawSockaddrInet6 // large enough for IPv4, IPv6 and packet addresses
	per   int
}

// NewBatch allocates a batch of n messages with one iovec each. withNames
// gives each message a name buffer (recvmmsg source / sendmmsg destination).
func NewBatch(n int, withNames bool) *Batch { return NewBatchIov(n, 1, withNames) }

// NewBatchIov is NewBatch with iovPerMsg (1 or 2) iovecs per message.
func NewBatchIov(n, iovPerMsg int, withNames bool) *Batch {
	b := &Batch{Msgs: make([]unix.Mmsghdr, n), Iovs: make([]unix.Iovec, n*iovPerMsg), per: iovPerMsg}
	if withNames {
		b.Names = make([]unix.RawSockaddrInet6, n)
	}
	for i := range b.Msgs {
		b.Msgs[i].Hdr.Iov = &b.Iovs[i*iovPerMsg]
		b.Msgs[i].Hdr.SetIovlen(iovPerMsg)
		if withNames {
			b.Msgs[i].Hdr.Name = (*byte)(unsafe.Pointer(&b.Names[i]))
			b.Msgs[i].Hdr.Namelen = unix.SizeofSockaddrInet6
		}
	}
	return b
}

// SetBuf points message i's (first) iovec at p.
func (b *Batch) SetBuf(i int, p []byte) { setIov(&b.Iovs[i*b.per], p) }

// SetBufs points message i's two iovecs at p and q (NewBatchIov(n, 2, ...)).
func (b *Batch) SetBufs(i int, p, q []byte) {
	setIov(&b.Iovs[i*b.per], p)
	setIov(&b.Iovs[i*b.per+1], q)
}

// Clear drops every iovec pointer so that the batch keeps no caller buffer
// reachable.
func (b *Batch) Clear() {
	for i := range b.Iovs {
		b.Iovs[i] = unix.Iovec{}
	}
}

func setIov(v *unix.Iovec, p []byte) {
	if len(p) == 0 {
		v.Base = nil
		v.SetLen(0)
		return
	}
	v.Base = &p[0]
	v.SetLen(len(p))
}

// Sendmmsg sends msgs[0:n] with one system call and returns how many were
// sent (the kernel stops at the first failing message; its error is
// returned only when none was sent).
//
// Sendmmsg and Recvmmsg are raw system calls: fd must be non-blocking (the
// backends open their sockets with SOCK_NONBLOCK), so neither blocks, and
// they skip entersyscall, which wakes the runtime's sysmon thread when it
// sleeps for want of work, a futex wake and a context switch per call in a
// sleeping ping-pong (see nic/afxdp's txKick).
func Sendmmsg(fd int, msgs []unix.Mmsghdr, flags int) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	for {
		n, _, e := unix.RawSyscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), uintptr(flags), 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(n), nil
	}
}

// Recvmmsg receives up to len(msgs) datagrams with one system call.
func Recvmmsg(fd int, msgs []unix.Mmsghdr, flags int) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	for {
		n, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), uintptr(flags), 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(n), nil
	}
}

// IsAgain reports EAGAIN/EWOULDBLOCK.
func IsAgain(err error) bool {
	return errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EWOULDBLOCK)
}

// Errno returns err as a syscall.Errno when it is one.
func Errno(err error) (syscall.Errno, bool) {
	var e syscall.Errno
	ok := errors.As(err, &e)
	return e, ok
}

// skMeminfoDrops is SK_MEMINFO_DROPS, the index of the drop counter in the
// SO_MEMINFO array (include/uapi/linux/sock_diag.h).
const (
	skMeminfoDrops = 8
	skMeminfoVars  = 9
)

// SocketDrops returns the kernel's count of packets dropped on fd's socket
// (receive buffer full, filter ...), read with SO_MEMINFO; 0 if unavailable.
func SocketDrops(fd int) uint32 {
	var mem [skMeminfoVars]uint32
	n := uint32(unsafe.Sizeof(mem))
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_MEMINFO,
		uintptr(unsafe.Pointer(&mem[0])), uintptr(unsafe.Pointer(&n)), 0)
	if e != 0 || n < (skMeminfoDrops+1)*4 {
		return 0
	}
	return mem[skMeminfoDrops]
}
