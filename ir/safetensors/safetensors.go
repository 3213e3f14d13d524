// Package safetensors reads and writes the safetensors format: an 8-byte little-endian header
// length, a JSON header mapping tensor names to dtype, shape and byte offsets, then the data.
package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"vkc/ir"
)

var dtypes = map[string]ir.DType{"F32": ir.F32, "F16": ir.F16, "BF16": ir.BF16, "I32": ir.I32, "U32": ir.U32, "BOOL": ir.Bool}

func dtypeName(d ir.DType) (string, bool) {
	for k, v := range dtypes {
		if v == d {
			return k, true
		}
	}
	return "", false
}

// Entry describes one tensor of a file.
type Entry struct {
	Name   string
	Type   ir.Type
	Offset int64 // byte offset of the data from the start of the file
	Size   int64
}

// File is an open safetensors file's index.
type File struct {
	Path     string
	Entries  map[string]Entry
	Metadata map[string]string
	f        *os.File
}

type headerEntry struct {
	DType       string  `json:"dtype"`
	Shape       []int   `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"`
}

// maxHeader bounds the JSON header so a corrupt length cannot exhaust memory.
const maxHeader = 100 << 20

// Open reads the header of a safetensors file. Errors name the file and what is wrong.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	sf, err := parse(path, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	sf.f = f
	return sf, nil
}

func parse(path string, f *os.File) (*File, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	var lenb [8]byte
	if _, err := io.ReadFull(f, lenb[:]); err != nil {
		return nil, fmt.Errorf("%s: not a safetensors file: too short", path)
	}
	n := binary.LittleEndian.Uint64(lenb[:])
	if n == 0 || n > maxHeader || int64(n)+8 > st.Size() {
		return nil, fmt.Errorf("%s: not a safetensors file: header length %d does not fit a file of %d bytes", path, n, st.Size())
	}
	hb := make([]byte, n)
	if _, err := io.ReadFull(f, hb); err != nil {
		return nil, fmt.Errorf("%s: reading header: %w", path, err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hb, &raw); err != nil {
		return nil, fmt.Errorf("%s: not a safetensors file: header is not JSON: %v", path, err)
	}
	base := int64(8 + n)
	out := &File{Path: path, Entries: map[string]Entry{}, Metadata: map[string]string{}}
	for name, msg := range raw {
		if name == "__metadata__" {
			_ = json.Unmarshal(msg, &out.Metadata)
			continue
		}
		var h headerEntry
		if err := json.Unmarshal(msg, &h); err != nil {
			return nil, fmt.Errorf("%s: tensor %q: %v", path, name, err)
		}
		d, ok := dtypes[h.DType]
		if !ok {
			return nil, fmt.Errorf("%s: tensor %q has dtype %s; vkc reads F32, F16, BF16, I32, U32, BOOL", path, name, h.DType)
		}
		if len(h.DataOffsets) != 2 || h.DataOffsets[0] < 0 || h.DataOffsets[1] < h.DataOffsets[0] {
			return nil, fmt.Errorf("%s: tensor %q has bad data_offsets %v", path, name, h.DataOffsets)
		}
		t := ir.Type{DType: d, Shape: ir.Shape(h.Shape)}
		for _, dim := range h.Shape {
			if dim < 0 {
				return nil, fmt.Errorf("%s: tensor %q has a negative dimension in %v", path, name, h.Shape)
			}
		}
		size := h.DataOffsets[1] - h.DataOffsets[0]
		if size != int64(t.Bytes()) {
			return nil, fmt.Errorf("%s: tensor %q: %s needs %d bytes, the file gives %d", path, name, t, t.Bytes(), size)
		}
		if base+h.DataOffsets[1] > st.Size() {
			return nil, fmt.Errorf("%s: tensor %q lies past the end of the file (truncated?)", path, name)
		}
		out.Entries[name] = Entry{Name: name, Type: t, Offset: base + h.DataOffsets[0], Size: size}
	}
	return out, nil
}

// Names lists the tensor names, sorted.
func (f *File) Names() []string {
	n := make([]string, 0, len(f.Entries))
	for k := range f.Entries {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// Read loads the named tensor.
func (f *File) Read(name string) (*ir.Tensor, error) {
	e, ok := f.Entries[name]
	if !ok {
		return nil, fmt.Errorf("%s: no tensor %q", f.Path, name)
	}
	t := &ir.Tensor{Type: e.Type, Data: make([]byte, e.Size)}
	if _, err := f.f.ReadAt(t.Data, e.Offset); err != nil {
		return nil, fmt.Errorf("%s: reading %q: %w", f.Path, name, err)
	}
	return t, nil
}

// Close closes the file.
func (f *File) Close() error { return f.f.Close() }

// ReadAll loads every tensor of a file.
func ReadAll(path string) (map[string]*ir.Tensor, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]*ir.Tensor{}
	for _, n := range f.Names() {
		t, err := f.Read(n)
		if err != nil {
			return nil, err
		}
		out[n] = t
	}
	return out, nil
}

// Write writes tensors to path atomically (a temporary file renamed into place), in name order.
func Write(path string, tensors map[string]*ir.Tensor) error {
	names := make([]string, 0, len(tensors))
	for k := range tensors {
		names = append(names, k)
	}
	sort.Strings(names)
	header := map[string]any{}
	var off int64
	for _, n := range names {
		t := tensors[n]
		dn, ok := dtypeName(t.Type.DType)
		if !ok {
			return fmt.Errorf("safetensors: tensor %q: dtype %s cannot be written", n, t.Type.DType)
		}
		shape := t.Type.Shape
		if shape == nil {
			shape = ir.Shape{}
		}
		header[n] = headerEntry{DType: dn, Shape: shape, DataOffsets: []int64{off, off + int64(len(t.Data))}}
		off += int64(len(t.Data))
	}
	hb, err := json.Marshal(header) // map keys are sorted: deterministic
	if err != nil {
		return err
	}
	for len(hb)%8 != 0 {
		hb = append(hb, ' ')
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".vkc-*.safetensors.tmp")
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	var lenb [8]byte
	binary.LittleEndian.PutUint64(lenb[:], uint64(len(hb)))
	if _, err := tmp.Write(lenb[:]); err != nil {
		return err
	}
	if _, err := tmp.Write(hb); err != nil {
		return err
	}
	for _, n := range names {
		if _, err := tmp.Write(tensors[n].Data); err != nil {
			return err
		}
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	ok = true
	return nil
}
