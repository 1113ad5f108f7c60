//go:build !linux

package afxdp

import (
	"errors"
	"io"
	"net"

	"github.com/goroce/goroce/nic"
)

// XDPStats mirrors struct xdp_statistics (the Linux type is
// unix.XDPStatistics).
type XDPStats struct {
	Rx_dropped               uint64
	Rx_invalid_descs         uint64
	Tx_invalid_descs         uint64
	Rx_ring_full             uint64
	Rx_fill_ring_empty_descs uint64
	Tx_ring_empty_descs      uint64
}

// Link is an AF_XDP socket; outside Linux Open never returns one.
type Link struct{}

var _ nic.Link = (*Link)(nil)

// Open fails outside Linux with a *NotSupportedError (it matches
// ErrNotSupported and errors.ErrUnsupported).
func Open(ifname string, queue int, opts Options) (*Link, error) {
	return nil, notSupported("AF_XDP", "Linux", errors.ErrUnsupported)
}

// OpenQueues fails outside Linux like Open.
func OpenQueues(ifname string, n int, opts Options) ([]*Link, error) {
	return nil, notSupported("AF_XDP", "Linux", errors.ErrUnsupported)
}

// AttachPassProgram fails outside Linux like Open.
func AttachPassProgram(ifname string) (io.Closer, error) {
	return nil, notSupported("XDP", "Linux", errors.ErrUnsupported)
}

// The methods of a Link that cannot exist: they report a closed link.

func (l *Link) ReadBatch(bufs [][]byte, sizes []int) (int, error)    { return 0, nic.ErrClosed }
func (l *Link) TryReadBatch(bufs [][]byte, sizes []int) (int, error) { return 0, nic.ErrClosed }
func (l *Link) WriteBatch(frames [][]byte) (int, error)              { return 0, nic.ErrClosed }
func (l *Link) BatchSize() int                                       { return 0 }
func (l *Link) MTU() int                                             { return 0 }
func (l *Link) HardwareAddr() net.HardwareAddr                       { return nil }
func (l *Link) Stats() nic.Stats                                     { return nic.Stats{} }
func (l *Link) KernelStats() XDPStats                                { return XDPStats{} }
func (l *Link) Mode() string                                         { return "" }
func (l *Link) ZeroCopy() bool                                       { return false }
func (l *Link) MultiBuffer() bool                                    { return false }
func (l *Link) Close() error                                         { return nil }
