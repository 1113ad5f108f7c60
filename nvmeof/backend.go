package nvmeof

import (
	"fmt"
	"io"
	"os"
	"sync"
)

// Backend is a namespace's storage: an io.ReaderAt and io.WriterAt. A
// backend that also has Sync() error (an *os.File) is synced on Flush; one
// with Zero(off, n int64) error zeroes ranges for Write Zeroes and
// Dataset Management deallocate (others get zero-filled writes).
type Backend interface {
	io.ReaderAt
	io.WriterAt
}

type syncer interface{ Sync() error }

type zeroer interface {
	Zero(off, n int64) error
}

// Memory is a Backend in memory, safe for concurrent use.
type Memory struct {
	mu  sync.RWMutex
	buf []byte
}

// NewMemory returns a zeroed in-memory backend of size bytes.
func NewMemory(size int64) *Memory { return &Memory{buf: make([]byte, size)} }

// Size is the backend's size in bytes.
func (m *Memory) Size() int64 { return int64(len(m.buf)) }

// ReadAt implements io.ReaderAt.
func (m *Memory) ReadAt(p []byte, off int64) (int, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if off < 0 || off > int64(len(m.buf)) {
		return 0, io.EOF
	}
	n := copy(p, m.buf[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// WriteAt implements io.WriterAt; it never grows the backend.
func (m *Memory) WriteAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if off < 0 || off+int64(len(p)) > int64(len(m.buf)) {
		return 0, fmt.Errorf("nvmeof: write of %d bytes at %d beyond the %d-byte memory backend", len(p), off, len(m.buf))
	}
	return copy(m.buf[off:], p), nil
}

// Zero zeroes [off, off+n).
func (m *Memory) Zero(off, n int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if off < 0 || off+n > int64(len(m.buf)) {
		return fmt.Errorf("nvmeof: zero beyond the memory backend")
	}
	clear(m.buf[off : off+n])
	return nil
}

// OpenFile opens (creating it if needed) a file backend of size bytes
// (size 0: the file's current size). The file is synced on Flush.
func OpenFile(path string, size int64) (*os.File, int64, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if size == 0 {
		size = st.Size()
	} else if st.Size() < size {
		if err := f.Truncate(size); err != nil {
			f.Close()
			return nil, 0, err
		}
	}
	return f, size, nil
}

var zeros = make([]byte, 64<<10)

func zeroRange(b Backend, off, n int64) error {
	if z, ok := b.(zeroer); ok {
		return z.Zero(off, n)
	}
	for n > 0 {
		c := min(n, int64(len(zeros)))
		if _, err := b.WriteAt(zeros[:c], off); err != nil {
			return err
		}
		off += c
		n -= c
	}
	return nil
}
