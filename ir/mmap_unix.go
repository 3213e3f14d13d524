//go:build unix

package ir

import (
	"fmt"
	"os"
	"syscall"
)

// mapFile memory-maps the whole of f read-only. A file of zero bytes, or one too large for the
// address space, is not mapped (nil, nil): the caller reads it instead.
func mapFile(f *os.File) (*Mapping, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	if size <= 0 || size > int64(int(^uint(0)>>1)) {
		return nil, nil
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%s: memory-mapping the file: %w", f.Name(), err)
	}
	return &Mapping{Data: data, File: f, unmap: func() error { return syscall.Munmap(data) }}, nil
}
