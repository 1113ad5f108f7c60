package transport

import "fmt"

// Error makes a completion status usable as an error value, the way
// syscall.Errno is: errors.Is(wc.Err(), WCRemAccessErr) asks whether a
// completion failed with that status. The text is the status's name
// (String), so printing a status is unchanged by its being an error.
// WCSuccess is not an error; WC.Err never returns it.
func (s WCStatus) Error() string { return s.String() }

// CompletionError is the error of a work completion whose status is not
// WCSuccess (WC.Err). It unwraps to the status, so errors.Is(err,
// WCRetryExcErr) matches, and errors.As gives the whole record.
type CompletionError struct {
	Status WCStatus
	// VendorErr is the vendor syndrome (ibv_wc.vendor_err). goroce, like
	// rxe, reports none: it is 0.
	VendorErr uint32
	Opcode    WCOpcode
	WRID      uint64
	QPN       uint32
}

func (e *CompletionError) Error() string {
	return fmt.Sprintf("completion error: %v wr_id %d on QP %#x: %v", e.Opcode, e.WRID, e.QPN, e.Status)
}

// Unwrap returns the status.
func (e *CompletionError) Unwrap() error { return e.Status }

// Err returns nil for a successful completion and a *CompletionError
// otherwise. libibverbs defines only wr_id, status, qp_num and vendor_err
// of an error completion; Opcode is carried along as the engine filled it.
func (wc *WC) Err() error {
	if wc.Status == WCSuccess {
		return nil
	}
	return &CompletionError{Status: wc.Status, Opcode: wc.Opcode, WRID: wc.WRID, QPN: wc.QPNum}
}
