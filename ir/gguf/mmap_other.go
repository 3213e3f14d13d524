//go:build !unix

package gguf

import "fmt"

// Open needs a memory map, which vkc only uses on unix systems; elsewhere read the file into
// memory and use FromBytes.
func Open(path string) (*File, error) {
	return nil, fmt.Errorf("%s: reading GGUF files needs mmap, which vkc uses only on unix systems", path)
}
