//go:build linux

package udp

import "unsafe"

// rawPointer converts a pointer for reinterpreting socket address storage.
func rawPointer[T any](p *T) unsafe.Pointer { return unsafe.Pointer(p) }
