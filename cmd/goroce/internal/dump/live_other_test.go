//go:build !linux

package dump

import (
	"context"
	"errors"
	"io"
	"testing"
)

func TestLiveUnsupported(t *testing.T) {
	err := Live(context.Background(), "lo0", New(io.Discard, Options{}), LiveOptions{})
	if !errors.Is(err, ErrLiveUnsupported) || !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Live: %v", err)
	}
}
