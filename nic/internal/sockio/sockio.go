//go:build linux

// Package sockio holds the Linux socket plumbing the nic backends share:
// an eventfd Stopper that wakes blocked polls (gVisor's link/stopfd model),
// and preallocated sendmmsg/recvmmsg batches so that a batch of frames costs
// one system call and no allocation.
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

// Batch is a preallocated array of mmsghdrs, each with one iovec and room
// for a socket address, for sendmmsg/recvmmsg.
type Batch struct {
	Msgs  []unix.Mmsghdr
	Iovs  []unix.Iovec
	Names []unix.RawSockaddrInet6 // large enough for IPv4, IPv6 and packet addresses
}

// NewBatch allocates a batch of n messages. withNames gives each message a
// name buffer (recvmmsg source / sendmmsg destination).
func NewBatch(n int, withNames bool) *Batch {
	b := &Batch{Msgs: make([]unix.Mmsghdr, n), Iovs: make([]unix.Iovec, n)}
	if withNames {
		b.Names = make([]unix.RawSockaddrInet6, n)
	}
	for i := range b.Msgs {
		b.Msgs[i].Hdr.Iov = &b.Iovs[i]
		b.Msgs[i].Hdr.SetIovlen(1)
		if withNames {
			b.Msgs[i].Hdr.Name = (*byte)(unsafe.Pointer(&b.Names[i]))
			b.Msgs[i].Hdr.Namelen = unix.SizeofSockaddrInet6
		}
	}
	return b
}

// SetBuf points message i's iovec at p.
func (b *Batch) SetBuf(i int, p []byte) {
	if len(p) == 0 {
		b.Iovs[i].Base = nil
		b.Iovs[i].SetLen(0)
		return
	}
	b.Iovs[i].Base = &p[0]
	b.Iovs[i].SetLen(len(p))
}

// Sendmmsg sends msgs[0:n] with one system call and returns how many were
// sent (the kernel stops at the first failing message; its error is
// returned only when none was sent).
func Sendmmsg(fd int, msgs []unix.Mmsghdr, flags int) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	for {
		n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), uintptr(flags), 0, 0)
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
		n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), uintptr(flags), 0, 0)
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
