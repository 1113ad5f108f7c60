package cm

import (
	"context"
	"errors"
	"strings"
)

// OpError is the error Dial, DialUD, Listen, ListenUD and Accept return,
// as *net.OpError is for package net: the operation, the address it was
// for, and the cause. errors.Is and errors.As see through it to the
// cause (ErrTimeout, ErrRejected, ErrConnRefused, ErrClosed, a
// *RejectError or *SIDRError, context.DeadlineExceeded, a qp error):
//
//	cm: dial 198.18.0.2:7174: timed out waiting for the peer: no REP from 198.18.0.2:7174 after 16 REQs
type OpError struct {
	// Op is "dial", "dial ud", "listen", "listen ud" or "accept".
	Op string
	// Addr is the address dialled, or the one listened on.
	Addr string
	// Err is the cause.
	Err error
}

func (e *OpError) Error() string {
	// One "cm: " prefix: the cause's own is dropped.
	return "cm: " + e.Op + " " + e.Addr + ": " + strings.TrimPrefix(e.Err.Error(), "cm: ")
}

// Unwrap returns the cause.
func (e *OpError) Unwrap() error { return e.Err }

// Timeout reports whether the operation failed because time ran out: the
// peer never answered (ErrTimeout) or the context's deadline (or
// Options.Timeout) passed. It makes an OpError a net.Error's kind of
// timeout.
func (e *OpError) Timeout() bool {
	return errors.Is(e.Err, ErrTimeout) || errors.Is(e.Err, context.DeadlineExceeded)
}

// opError wraps err (nil stays nil) in an *OpError.
func opError(op, addr string, err error) error {
	if err == nil {
		return nil
	}
	return &OpError{Op: op, Addr: addr, Err: err}
}
