package afxdp

import (
	"errors"
	"fmt"
)

// ErrNotSupported is what every *NotSupportedError matches: AF_XDP cannot
// run here. AF_XDP is Linux only: on other systems Open and
// AttachPassProgram always return such an error (Needs "Linux"). It wraps
// errors.ErrUnsupported.
var ErrNotSupported = fmt.Errorf("afxdp: AF_XDP not supported: %w", errors.ErrUnsupported)

// ErrBusy is matched by Open's error when another program holds the
// interface: a foreign XDP program, goroce's own held by a live bpf_link
// (another running goroce), or an AF_XDP socket already bound to the
// queue. AF_XDP gives one XDP program per interface; the message says what
// to do (stop the other process, or use AF_PACKET or another interface).
var ErrBusy = errors.New("afxdp: the interface is in use by another XDP program or AF_XDP socket")

// busy wraps a busy interface's detail and ErrBusy, with what to do.
func busy(step, detail string, err error) error {
	if err != nil {
		return fmt.Errorf("afxdp: %s: %s (%w): %w; stop the process that holds it, or use the afpacket backend (GOROCE_BACKEND=afpacket) or another interface",
			step, detail, err, ErrBusy)
	}
	return fmt.Errorf("afxdp: %s: %s: %w; stop the process that holds it, or use the afpacket backend (GOROCE_BACKEND=afpacket) or another interface",
		step, detail, ErrBusy)
}

// NotSupportedError says that this system, kernel, configuration or process
// cannot run the AF_XDP backend, and what it would need. It matches
// ErrNotSupported and errors.ErrUnsupported, and unwraps to the underlying
// error (usually an errno), so a caller can fall back to another backend:
//
//	l, err := afxdp.Open(ifname, 0, afxdp.Options{})
//	if errors.Is(err, errors.ErrUnsupported) { /* use AF_PACKET */ }
type NotSupportedError struct {
	What  string // the feature that failed, e.g. "AF_XDP socket"
	Needs string // what it needs, e.g. "CONFIG_XDP_SOCKETS and kernel >= 5.4"
	Err   error  // the underlying error
}

func (e *NotSupportedError) Error() string {
	s := "afxdp: " + e.What + " not supported"
	if e.Needs != "" {
		s += " (needs " + e.Needs + ")"
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying error.
func (e *NotSupportedError) Unwrap() error { return e.Err }

// Is reports whether target is ErrNotSupported or errors.ErrUnsupported.
func (e *NotSupportedError) Is(target error) bool {
	return target == ErrNotSupported || target == errors.ErrUnsupported
}

func notSupported(what, needs string, err error) error {
	return &NotSupportedError{What: what, Needs: needs, Err: err}
}

// opError wraps a failed step of Open with its name.
func opError(step string, err error) error {
	return fmt.Errorf("afxdp: %s: %w", step, err)
}
