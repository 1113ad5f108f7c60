//go:build !linux

package dump

import (
	"context"
	"errors"
)

// LiveOptions control a live capture.
type LiveOptions struct {
	Snaplen int
	All     bool
}

// Live is only implemented on Linux (AF_PACKET).
func Live(ctx context.Context, iface string, d *Dumper, opts LiveOptions) error {
	return errors.New("live capture needs Linux (AF_PACKET)")
}
