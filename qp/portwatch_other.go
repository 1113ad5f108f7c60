//go:build !linux

package qp

// portWatch does nothing outside Linux: the port events come from netlink.
type portWatch struct{}

func watchPort(*Device, int) (*portWatch, error) { return &portWatch{}, nil }

// Close implements io.Closer.
func (*portWatch) Close() error { return nil }
