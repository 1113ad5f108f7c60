//go:build !linux

package afxdp

import (
	"errors"
	"io"

	"github.com/goroce/goroce/nic"
)

// Mode chooses how the XDP program is attached.
type Mode int

// Attach modes.
const (
	ModeAuto Mode = iota
	ModeNative
	ModeGeneric
)

// Options configure Open.
type Options struct {
	FrameSize, NumFrames, BatchSize, TxBudget int
	Mode                                      Mode
	ZeroCopy                                  bool
}

// Link is unavailable outside Linux.
type Link struct{ nic.Link }

// TryReadBatch is unavailable outside Linux.
func (l *Link) TryReadBatch(bufs [][]byte, sizes []int) (int, error) { return 0, nic.ErrClosed }

// Open always fails outside Linux.
func Open(ifname string, queue int, opts Options) (*Link, error) {
	return nil, notSupported("AF_XDP", "Linux", errors.ErrUnsupported)
}

// AttachPassProgram always fails outside Linux.
func AttachPassProgram(ifname string) (io.Closer, error) {
	return nil, notSupported("XDP", "Linux", errors.ErrUnsupported)
}
