//go:build !linux

package dump

import (
	"context"
	"fmt"
)

// Capture is an open live capture; outside Linux OpenLive never returns
// one.
type Capture struct{}

// OpenLive fails outside Linux with an error wrapping ErrLiveUnsupported.
func OpenLive(iface string, opts LiveOptions) (*Capture, error) {
	return nil, fmt.Errorf("capture on %s: %w", iface, ErrLiveUnsupported)
}

// Close does nothing.
func (c *Capture) Close() error { return nil }

// Run fails like OpenLive.
func (c *Capture) Run(ctx context.Context, d *Dumper) error { return ErrLiveUnsupported }

// Live fails outside Linux like OpenLive.
func Live(ctx context.Context, iface string, d *Dumper, opts LiveOptions) error {
	_, err := OpenLive(iface, opts)
	return err
}
