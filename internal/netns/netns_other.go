//go:build !linux

package netns

import (
	"os/exec"

	"github.com/vishvananda/netlink"
)

// New fails outside Linux: network namespaces are Linux's.
func New(opts Options) (*Pair, error) {
	return nil, ErrNotSupported
}

// Close does nothing: no Pair exists outside Linux.
func (p *Pair) Close() error { return nil }

// Do fails outside Linux.
func (p *Pair) Do(side Side, fn func() error) error {
	return ErrNotSupported
}

// Command returns a command that fails when run: there is no namespace to
// run it in.
func (p *Pair) Command(side Side, name string, args ...string) *exec.Cmd {
	c := exec.Command(name, args...)
	c.Err = ErrNotSupported
	return c
}

// Handle fails outside Linux.
func (p *Pair) Handle(side Side) (*netlink.Handle, error) {
	return nil, ErrNotSupported
}
