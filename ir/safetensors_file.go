package ir

// The safetensors format: an 8-byte little-endian header length, a JSON header mapping tensor
// names to dtype, shape and byte offsets, then the data. It lives in package ir because the model
// loader reads weights with it; package ir/safetensors is the short-named API for everyone else.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/vkc-project/vkc/internal/hostmem"
	"github.com/vkc-project/vkc/internal/regular"
	"github.com/vkc-project/vkc/internal/safefile"
)

var safetensorsDTypes = map[string]DType{"F32": F32, "F16": F16, "BF16": BF16, "I32": I32, "U32": U32, "BOOL": Bool}

func safetensorsDTypeName(d DType) (string, bool) {
	for k, v := range safetensorsDTypes {
		if v == d {
			return k, true
		}
	}
	return "", false
}

// SafetensorsEntry describes one tensor of a safetensors file.
type SafetensorsEntry struct {
	Name   string
	Type   Type
	Offset int64 // byte offset of the data from the start of the file
	Size   int64
	// Unsupported is the file's dtype name when vkc cannot read it (Type is then invalid): such a
	// tensor is an error only when it is read, so a checkpoint with an i64 buffer still loads.
	Unsupported string
}

// SafetensorsFile is an open safetensors file's index.
type SafetensorsFile struct {
	Path     string
	Entries  map[string]SafetensorsEntry
	Metadata map[string]string
	f        *os.File
	mapping  *Mapping
}

type safetensorsHeaderEntry struct {
	DType       string  `json:"dtype"`
	Shape       []int   `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"`
}

// maxHeader bounds the JSON header so a corrupt length cannot exhaust memory.
const maxSafetensorsHeader = 100 << 20

// OpenSafetensors reads the header of a safetensors file. Errors name the file and what is wrong.
func OpenSafetensors(path string) (*SafetensorsFile, error) {
	f, err := regular.Open(path) // a FIFO or device is refused, without blocking
	if err != nil {
		return nil, err
	}
	sf, err := parseSafetensors(path, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	sf.f = f
	return sf, nil
}

func parseSafetensors(path string, f *os.File) (*SafetensorsFile, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	var lenb [8]byte
	if _, err := io.ReadFull(f, lenb[:]); err != nil {
		return nil, fmt.Errorf("%s: not a safetensors file: too short", path)
	}
	n := binary.LittleEndian.Uint64(lenb[:])
	if n == 0 || n > maxSafetensorsHeader || int64(n)+8 > st.Size() {
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
	out := &SafetensorsFile{Path: path, Entries: map[string]SafetensorsEntry{}, Metadata: map[string]string{}}
	for name, msg := range raw {
		if name == "__metadata__" {
			_ = json.Unmarshal(msg, &out.Metadata)
			continue
		}
		var h safetensorsHeaderEntry
		if err := json.Unmarshal(msg, &h); err != nil {
			return nil, fmt.Errorf("%s: tensor %q: %v", path, name, err)
		}
		d, ok := safetensorsDTypes[h.DType]
		if !ok {
			out.Entries[name] = SafetensorsEntry{Name: name, Unsupported: h.DType}
			continue
		}
		if len(h.DataOffsets) != 2 || h.DataOffsets[0] < 0 || h.DataOffsets[1] < h.DataOffsets[0] {
			return nil, fmt.Errorf("%s: tensor %q has bad data_offsets %v", path, name, h.DataOffsets)
		}
		t := Type{DType: d, Shape: Shape(h.Shape)}
		for _, dim := range h.Shape {
			if dim < 0 {
				return nil, fmt.Errorf("%s: tensor %q has a negative dimension in %v", path, name, h.Shape)
			}
		}
		// A shape whose element count overflows would wrap to a small size (0 for [2^32, 2^32])
		// and pass the size check below with no data at all.
		if n, ok := t.Shape.CheckedElements(); !ok || n > 1<<62/8 {
			return nil, fmt.Errorf("%s: tensor %q: shape %v has too many elements", path, name, h.Shape)
		}
		size := h.DataOffsets[1] - h.DataOffsets[0]
		if size != int64(t.Bytes()) {
			return nil, fmt.Errorf("%s: tensor %q: %s needs %d bytes, the file gives %d", path, name, t, t.Bytes(), size)
		}
		if h.DataOffsets[1] > st.Size()-base {
			return nil, fmt.Errorf("%s: tensor %q lies past the end of the file (truncated?)", path, name)
		}
		out.Entries[name] = SafetensorsEntry{Name: name, Type: t, Offset: base + h.DataOffsets[0], Size: size}
	}
	if err := safetensorsOverlap(out.Entries); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// safetensorsOverlap refuses two tensors whose bytes overlap: a writer never makes them, and a
// file that has them gives one tensor's bytes to another.
func safetensorsOverlap(entries map[string]SafetensorsEntry) error {
	var es []SafetensorsEntry
	for _, e := range entries {
		if e.Unsupported == "" && e.Size > 0 {
			es = append(es, e)
		}
	}
	sort.Slice(es, func(i, j int) bool {
		if es[i].Offset != es[j].Offset {
			return es[i].Offset < es[j].Offset
		}
		return es[i].Name < es[j].Name
	})
	for i := 1; i < len(es); i++ {
		if a, b := es[i-1], es[i]; b.Offset < a.Offset+a.Size {
			return fmt.Errorf("tensors %q (bytes %d..%d) and %q (bytes %d..%d) overlap", a.Name, a.Offset, a.Offset+a.Size, b.Name, b.Offset, b.Offset+b.Size)
		}
	}
	return nil
}

// Names lists the tensor names, sorted.
func (f *SafetensorsFile) Names() []string {
	n := make([]string, 0, len(f.Entries))
	for k := range f.Entries {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// Read loads the named tensor.
func (f *SafetensorsFile) Read(name string) (*Tensor, error) {
	e, ok := f.Entries[name]
	if !ok {
		return nil, fmt.Errorf("%s: no tensor %q", f.Path, name)
	}
	if e.Unsupported != "" {
		return nil, fmt.Errorf("%s: tensor %q has dtype %s; vkc reads F32, F16, BF16, I32, U32, BOOL", f.Path, name, e.Unsupported)
	}
	t := &Tensor{Type: e.Type, Data: make([]byte, e.Size)}
	if _, err := f.f.ReadAt(t.Data, e.Offset); err != nil {
		return nil, fmt.Errorf("%s: reading %q: %w", f.Path, name, err)
	}
	return t, nil
}

// Map memory-maps the file (read-only) for View; the Mapping then owns the open file, and
// closing it (not f) releases both. On systems without mmap, and for an empty file, it returns
// nil and View reads instead.
func (f *SafetensorsFile) Map() (*Mapping, error) {
	mp, err := mapFile(f.f)
	if err != nil || mp == nil {
		return nil, err
	}
	f.mapping = mp
	return mp, nil
}

// View returns the named tensor with Data aliasing the file's mapping (see Map), or read into
// memory when the file is not mapped.
func (f *SafetensorsFile) View(name string) (*Tensor, error) {
	if f.mapping == nil {
		return f.Read(name)
	}
	e, ok := f.Entries[name]
	if !ok || e.Unsupported != "" {
		return f.Read(name) // its error
	}
	// parseSafetensors checked that every tensor lies inside the file.
	return &Tensor{Type: e.Type, Data: f.mapping.Data[e.Offset : e.Offset+e.Size : e.Offset+e.Size]}, nil
}

// Close closes the file, unless a Mapping took it over (Map).
func (f *SafetensorsFile) Close() error {
	if f.mapping != nil {
		return nil
	}
	return f.f.Close()
}

// ReadSafetensors loads every tensor of a safetensors file.
func ReadSafetensors(path string) (map[string]*Tensor, error) {
	f, err := OpenSafetensors(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Every tensor is copied into memory: refuse what the host memory limit cannot hold before
	// reading (a sparse file with a valid header would be read whole).
	var total uint64
	for _, n := range f.Names() {
		total += uint64(f.Entries[n].Size)
	}
	if err := hostmem.Check(fmt.Sprintf("%s: %d tensors", path, len(f.Names())), total); err != nil {
		return nil, err
	}
	out := map[string]*Tensor{}
	for _, n := range f.Names() {
		t, err := f.Read(n)
		if err != nil {
			return nil, err
		}
		out[n] = t
	}
	return out, nil
}

// WriteSafetensors writes tensors to path atomically (a temporary file renamed into place), in
// name order, with safefile's checks: it refuses to replace a directory, a special file (a
// character device or FIFO is written through) or a non-empty file that is not a safetensors
// file.
func WriteSafetensors(path string, tensors map[string]*Tensor) error {
	return safefile.Write(context.Background(), path, SafetensorsFileOptions(nil, false),
		func(w io.Writer) error { return EncodeSafetensors(w, tensors) })
}

// SafetensorsFileOptions are safefile's checks for a safetensors file written by a command that
// reads inputs, optionally forced over a file of another kind.
func SafetensorsFileOptions(inputs []string, force bool) safefile.Options {
	return safefile.Options{What: "safetensors file", Inputs: inputs, Force: force, Check: checkSafetensorsFile}
}

// checkSafetensorsFile recognises a safetensors file by its first bytes: a header length that
// fits the file and a header that starts with '{'.
func checkSafetensorsFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	var b [9]byte
	if n, _ := io.ReadFull(f, b[:]); n < len(b) {
		return fmt.Errorf("%d bytes, shorter than a safetensors header", n)
	}
	if n := binary.LittleEndian.Uint64(b[:]); n > uint64(st.Size())-8 || b[8] != '{' {
		return fmt.Errorf("no safetensors header")
	}
	return nil
}

// EncodeSafetensors writes tensors in the safetensors format to w, in name order.
func EncodeSafetensors(w io.Writer, tensors map[string]*Tensor) error {
	names := make([]string, 0, len(tensors))
	for k := range tensors {
		names = append(names, k)
	}
	sort.Strings(names)
	header := map[string]any{}
	var off int64
	for _, n := range names {
		t := tensors[n]
		dn, ok := safetensorsDTypeName(t.Type.DType)
		if !ok {
			return fmt.Errorf("tensor %q: dtype %s cannot be written to safetensors", n, t.Type.DType)
		}
		shape := t.Type.Shape
		if shape == nil {
			shape = Shape{}
		}
		header[n] = safetensorsHeaderEntry{DType: dn, Shape: shape, DataOffsets: []int64{off, off + int64(len(t.Data))}}
		off += int64(len(t.Data))
	}
	hb, err := json.Marshal(header) // map keys are sorted: deterministic
	if err != nil {
		return err
	}
	for len(hb)%8 != 0 {
		hb = append(hb, ' ')
	}
	var lenb [8]byte
	binary.LittleEndian.PutUint64(lenb[:], uint64(len(hb)))
	if _, err := w.Write(lenb[:]); err != nil {
		return err
	}
	if _, err := w.Write(hb); err != nil {
		return err
	}
	for _, n := range names {
		if _, err := w.Write(tensors[n].Data); err != nil {
			return err
		}
	}
	return nil
}

// Similar suggests a tensor name of the file sharing the longest suffix with name, as
// ` (it has "...")`, or "" when none shares at least 4 bytes; for "missing weight" messages.
func (f *SafetensorsFile) Similar(name string) string {
	best, bestN := "", 0
	for k := range f.Entries {
		n := 0
		for n < len(k) && n < len(name) && k[len(k)-1-n] == name[len(name)-1-n] {
			n++
		}
		if n > bestN || n == bestN && k < best {
			best, bestN = k, n
		}
	}
	if bestN < 4 {
		return ""
	}
	return fmt.Sprintf(" (it has %q)", best)
}
