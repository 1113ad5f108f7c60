//go:build !linux

package afpacket

import (
	"errors"
	"testing"
)

func TestOpenNotSupported(t *testing.T) {
	_, err := Open("lo0", Options{})
	if !errors.Is(err, ErrNotSupported) || !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Open: %v", err)
	}
}
