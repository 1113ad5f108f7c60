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

// ErrHeldByGoroce is matched, besides ErrBusy (which it wraps), when the
// interface is held by another goroce device: goroce's XDP program behind a
// live bpf_link, or an AF_XDP socket on the queue. That program redirects
// every RoCEv2 frame (UDP 4791) of the interface to its own socket, so a
// second device there would receive nothing on any backend: AF_PACKET and
// the kernel's UDP sockets see only what XDP passes. One goroce process per
// interface.
var ErrHeldByGoroce = fmt.Errorf("%w: another goroce device holds it", ErrBusy)

// heldByGoroce wraps a held interface's detail with ErrHeldByGoroce, and
// says what to do: no fallback backend would receive.
func heldByGoroce(step, detail string, err error) error {
	if err != nil {
		detail = fmt.Sprintf("%s (%v)", detail, err)
	}
	return fmt.Errorf("afxdp: %s: %s: %w; its XDP program takes every RoCEv2 frame, so a second device here would receive nothing on any backend: stop that process or use another interface",
		step, detail, ErrHeldByGoroce)
}

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
