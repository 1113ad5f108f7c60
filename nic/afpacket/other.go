//go:build !linux

package afpacket

import (
	"net"

	"github.com/goroce/goroce/nic"
)

// Link is an AF_PACKET socket; outside Linux Open never returns one.
type Link struct{}

var _ nic.Link = (*Link)(nil)

// Open fails outside Linux with ErrNotSupported.
func Open(ifname string, opts Options) (*Link, error) { return nil, ErrNotSupported }

// The methods of a Link that cannot exist: they report a closed link.

func (l *Link) ReadBatch(bufs [][]byte, sizes []int) (int, error)    { return 0, nic.ErrClosed }
func (l *Link) TryReadBatch(bufs [][]byte, sizes []int) (int, error) { return 0, nic.ErrClosed }
func (l *Link) WriteBatch(frames [][]byte) (int, error)              { return 0, nic.ErrClosed }
func (l *Link) BatchSize() int                                       { return 0 }
func (l *Link) MTU() int                                             { return 0 }
func (l *Link) HardwareAddr() net.HardwareAddr                       { return nil }
func (l *Link) Stats() nic.Stats                                     { return nic.Stats{} }
func (l *Link) Features() []string                                   { return nil }
func (l *Link) Ifname() string                                       { return "" }
func (l *Link) Close() error                                         { return nil }
