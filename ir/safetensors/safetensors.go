// Package safetensors reads and writes the safetensors format: an 8-byte little-endian header
// length, a JSON header mapping tensor names to dtype, shape and byte offsets, then the data.
// The implementation is in package ir (its model loader reads weights with it); this package
// gives it short names.
package safetensors

import (
	"io"

	"github.com/vkc-project/vkc/internal/safefile"
	"github.com/vkc-project/vkc/ir"
)

// File is an open safetensors file's index.
type File = ir.SafetensorsFile

// Entry describes one tensor of a file.
type Entry = ir.SafetensorsEntry

// Open reads the header of a safetensors file. Errors name the file and what is wrong.
func Open(path string) (*File, error) { return ir.OpenSafetensors(path) }

// ReadAll loads every tensor of a file.
func ReadAll(path string) (map[string]*ir.Tensor, error) { return ir.ReadSafetensors(path) }

// Write writes tensors to path atomically (a temporary file renamed into place), in name order;
// it refuses to replace a directory or a file that is not a safetensors file (ir.WriteSafetensors).
func Write(path string, tensors map[string]*ir.Tensor) error {
	return ir.WriteSafetensors(path, tensors)
}

// Encode writes tensors in the safetensors format to w, in name order.
func Encode(w io.Writer, tensors map[string]*ir.Tensor) error {
	return ir.EncodeSafetensors(w, tensors)
}

// FileOptions are the checks Write makes (safefile): a command passes the files it reads, and
// force to replace a file that is not a safetensors file.
func FileOptions(inputs []string, force bool) safefile.Options {
	return ir.SafetensorsFileOptions(inputs, force)
}
