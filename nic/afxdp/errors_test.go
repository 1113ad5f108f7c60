package afxdp

import (
	"errors"
	"runtime"
	"testing"
)

// A *NotSupportedError matches both sentinels and keeps its cause; outside
// Linux Open and AttachPassProgram return one.
func TestNotSupportedMatches(t *testing.T) {
	cause := errors.New("EAFNOSUPPORT")
	err := notSupported("AF_XDP socket", "CONFIG_XDP_SOCKETS", cause)
	if !errors.Is(err, ErrNotSupported) || !errors.Is(err, errors.ErrUnsupported) || !errors.Is(err, cause) {
		t.Fatalf("%v does not match its sentinels and cause", err)
	}
	if runtime.GOOS == "linux" {
		return
	}
	if _, err := Open("lo0", 0, Options{}); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("Open: %v", err)
	}
	if _, err := AttachPassProgram("lo0"); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("AttachPassProgram: %v", err)
	}
}
