package dump

import (
	"errors"
	"fmt"
	"runtime"
)

// LiveOptions control a live capture.
type LiveOptions struct {
	Snaplen int  // bytes kept per packet (0: 262144)
	All     bool // do not attach the RoCEv2 filter (count every packet)
}

// ErrLiveUnsupported is wrapped by OpenLive's and Live's errors outside
// Linux: live capture reads an AF_PACKET socket. Reading capture files
// works everywhere. It matches errors.ErrUnsupported.
var ErrLiveUnsupported = fmt.Errorf("live capture needs Linux (AF_PACKET), this is %s: %w", runtime.GOOS, errors.ErrUnsupported)
