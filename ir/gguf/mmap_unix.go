//go:build unix

package gguf

import (
	"fmt"
	"syscall"

	"github.com/vkc-project/vkc/internal/regular"
)

// Open memory-maps the GGUF file at path (read-only) and parses its header. Close the File
// when done; tensor data returned by Data lives in the mapping.
func Open(path string) (*File, error) {
	fd, err := regular.Open(path) // a FIFO or device is refused, without blocking
	if err != nil {
		return nil, err
	}
	defer fd.Close() // the mapping outlives the descriptor
	st, err := fd.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	if size < 4 {
		return nil, fmt.Errorf("%s: not a GGUF file (%d bytes)", path, size)
	}
	if size > int64(int(^uint(0)>>1)) {
		return nil, fmt.Errorf("%s: %d bytes do not fit this machine's address space", path, size)
	}
	data, err := syscall.Mmap(int(fd.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%s: memory-mapping the file: %w", path, err)
	}
	f, err := parse(path, data)
	if err != nil {
		syscall.Munmap(data)
		return nil, err
	}
	f.unmap = func() error { return syscall.Munmap(data) }
	return f, nil
}
