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
