//go:build !linux

package netns

import (
	"errors"
	"testing"
)

// Outside Linux every entry point says why it cannot work, and NewPair
// skips.
func TestNotSupported(t *testing.T) {
	if _, err := New(Options{}); !errors.Is(err, ErrNotSupported) || !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("New: %v", err)
	}
	var p Pair
	if err := p.Do(A, func() error { return nil }); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("Do: %v", err)
	}
	if err := p.Command(A, "true").Run(); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("Command: %v", err)
	}
	t.Run("NewPair", func(t *testing.T) {
		NewPair(t, Options{})
		t.Fatal("NewPair did not skip")
	})
}
