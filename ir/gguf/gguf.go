// Package gguf reads GGUF files, llama.cpp's model format (versions 2 and 3, little-endian):
// a header, typed metadata (every value type, arrays and nested arrays included), tensor
// infos, and the tensor data, aligned to general.alignment.
//
// Open memory-maps the file and reads only the header into the heap; a tensor's bytes are a
// slice of the mapping (File.Data), so a multi-gigabyte file costs no copy until a caller
// copies a tensor. Every length, count and offset is checked against the file's size before it
// is used, so a corrupt or hostile file is an error naming the file and the place, never a
// panic or a huge allocation (FuzzGGUF).
//
// Tensor types are ggml's (package ir/quant has the table). A tensor of a type vkc does not read
// (an IQ format, say) still parses, so the metadata of any file can be read; reading its data
// is an error naming the tensor and its type.
//
// For vocabularies (the tokenizer package) the typed getters read the tokenizer.ggml.* keys:
//
//	f, err := gguf.Open("model.gguf")
//	defer f.Close()
//	model, err := f.String("tokenizer.ggml.model")        // "gpt2", "llama", …
//	tokens, err := f.Strings("tokenizer.ggml.tokens")     // []string
//	scores, err := f.Float32s("tokenizer.ggml.scores")    // []float32 (sentencepiece)
//	types, err := f.Ints("tokenizer.ggml.token_type")     // []int64 from any integer array
//	merges, err := f.Strings("tokenizer.ggml.merges")     // "a b" pairs (BPE)
//	bos, err := f.Uint("tokenizer.ggml.bos_token_id")     // any unsigned (or non-negative) integer
//	add, err := f.Bool("tokenizer.ggml.add_bos_token")
//	if errors.Is(err, gguf.ErrNoKey) { ... }               // the key is absent
//
// Limits: big-endian files and GGUF version 1 are rejected with a message saying so; tensors
// have at most 4 dimensions (ggml's GGML_MAX_DIMS); on systems without mmap (not unix) Open
// fails, and FromBytes reads an in-memory file.
package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strings"

	"github.com/vkc-project/vkc/ir/quant"
)

// Magic is the first four bytes of a GGUF file.
const Magic = "GGUF"

// DefaultAlignment is the data alignment when general.alignment is absent.
const DefaultAlignment = 32

// MaxDims is the most dimensions a tensor may have (ggml's GGML_MAX_DIMS).
const MaxDims = 4

// maxNesting bounds nested arrays, so a hostile file cannot recurse the parser to death.
const maxNesting = 16

// ErrNoKey is wrapped by the typed getters' error when the key is absent.
var ErrNoKey = errors.New("no such metadata key")

// ValueType is the type of a metadata value (gguf_type).
type ValueType uint32

const (
	Uint8   ValueType = 0
	Int8    ValueType = 1
	Uint16  ValueType = 2
	Int16   ValueType = 3
	Uint32  ValueType = 4
	Int32   ValueType = 5
	Float32 ValueType = 6
	Bool    ValueType = 7
	String  ValueType = 8
	Array   ValueType = 9
	Uint64  ValueType = 10
	Int64   ValueType = 11
	Float64 ValueType = 12
)

var valueTypeNames = [...]string{"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"}

func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// size is the bytes of a fixed-size value type (0 for string and array).
func (t ValueType) size() int {
	switch t {
	case Uint8, Int8, Bool:
		return 1
	case Uint16, Int16:
		return 2
	case Uint32, Int32, Float32:
		return 4
	case Uint64, Int64, Float64:
		return 8
	}
	return 0
}

// Value is one metadata value. Scalars are read with the As* methods; arrays of a scalar type
// are kept as one typed slice (Strings, Float32s, Ints), arrays of arrays as []Value (Values).
type Value struct {
	Type ValueType
	Elem ValueType // the element type of an Array
	u    uint64    // Uint*, Bool
	i    int64     // Int*
	f    float64   // Float*
	s    string
	arr  any // []uint8 … []float64, []bool, []string, or []Value for arrays of arrays
}

// KV is one metadata entry.
type KV struct {
	Key   string
	Value Value
}

// Len is the number of elements of an array (0 for a scalar).
func (v Value) Len() int {
	switch a := v.arr.(type) {
	case []uint8:
		return len(a)
	case []int8:
		return len(a)
	case []uint16:
		return len(a)
	case []int16:
		return len(a)
	case []uint32:
		return len(a)
	case []int32:
		return len(a)
	case []float32:
		return len(a)
	case []bool:
		return len(a)
	case []string:
		return len(a)
	case []uint64:
		return len(a)
	case []int64:
		return len(a)
	case []float64:
		return len(a)
	case []Value:
		return len(a)
	}
	return 0
}

// TypeString describes the value's type: "u32", "array of string", "array of array of i32".
func (v Value) TypeString() string {
	if v.Type != Array {
		return v.Type.String()
	}
	if a, ok := v.arr.([]Value); ok {
		if len(a) > 0 {
			return "array of " + a[0].TypeString()
		}
		return "array of array"
	}
	return "array of " + v.Elem.String()
}

// AsString returns a String value.
func (v Value) AsString() (string, bool) { return v.s, v.Type == String }

// AsBool returns a Bool value.
func (v Value) AsBool() (bool, bool) { return v.u != 0, v.Type == Bool }

// AsUint returns an integer value of any integer type that is not negative.
func (v Value) AsUint() (uint64, bool) {
	switch v.Type {
	case Uint8, Uint16, Uint32, Uint64:
		return v.u, true
	case Int8, Int16, Int32, Int64:
		return uint64(v.i), v.i >= 0
	}
	return 0, false
}

// AsInt returns an integer value of any integer type that fits an int64.
func (v Value) AsInt() (int64, bool) {
	switch v.Type {
	case Uint8, Uint16, Uint32, Uint64:
		return int64(v.u), v.u <= math.MaxInt64
	case Int8, Int16, Int32, Int64:
		return v.i, true
	}
	return 0, false
}

// AsFloat returns a Float32 or Float64 value (an f32 exactly, as float64).
func (v Value) AsFloat() (float64, bool) {
	return v.f, v.Type == Float32 || v.Type == Float64
}

// Strings returns an array of strings.
func (v Value) Strings() ([]string, bool) { a, ok := v.arr.([]string); return a, ok }

// Float32s returns an array of f32 (an f64 array is not converted: it would lose precision).
func (v Value) Float32s() ([]float32, bool) { a, ok := v.arr.([]float32); return a, ok }

// Float64s returns an array of f32 or f64 as float64 (exactly).
func (v Value) Float64s() ([]float64, bool) {
	switch a := v.arr.(type) {
	case []float64:
		return a, true
	case []float32:
		out := make([]float64, len(a))
		for i, x := range a {
			out[i] = float64(x)
		}
		return out, true
	}
	return nil, false
}

// Ints returns an array of any integer type as int64 (false for a u64 element above MaxInt64).
func (v Value) Ints() ([]int64, bool) {
	conv := func(n int, at func(int) int64) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = at(i)
		}
		return out
	}
	switch a := v.arr.(type) {
	case []uint8:
		return conv(len(a), func(i int) int64 { return int64(a[i]) }), true
	case []int8:
		return conv(len(a), func(i int) int64 { return int64(a[i]) }), true
	case []uint16:
		return conv(len(a), func(i int) int64 { return int64(a[i]) }), true
	case []int16:
		return conv(len(a), func(i int) int64 { return int64(a[i]) }), true
	case []uint32:
		return conv(len(a), func(i int) int64 { return int64(a[i]) }), true
	case []int32:
		return conv(len(a), func(i int) int64 { return int64(a[i]) }), true
	case []int64:
		return a, true
	case []uint64:
		for _, x := range a {
			if x > math.MaxInt64 {
				return nil, false
			}
		}
		return conv(len(a), func(i int) int64 { return int64(a[i]) }), true
	}
	return nil, false
}

// Bools returns an array of bool.
func (v Value) Bools() ([]bool, bool) { a, ok := v.arr.([]bool); return a, ok }

// Values returns the elements of an array of arrays.
func (v Value) Values() ([]Value, bool) { a, ok := v.arr.([]Value); return a, ok }

// String formats the value briefly for people: arrays show their length and first elements.
func (v Value) String() string {
	switch v.Type {
	case String:
		if len(v.s) > 60 {
			return fmt.Sprintf("%q…", v.s[:60])
		}
		return fmt.Sprintf("%q", v.s)
	case Bool:
		return fmt.Sprint(v.u != 0)
	case Uint8, Uint16, Uint32, Uint64:
		return fmt.Sprint(v.u)
	case Int8, Int16, Int32, Int64:
		return fmt.Sprint(v.i)
	case Float32, Float64:
		return fmt.Sprint(v.f)
	case Array:
		return fmt.Sprintf("[%d × %s]", v.Len(), strings.TrimPrefix(v.TypeString(), "array of "))
	}
	return "?"
}

// TensorInfo describes one tensor of a file.
type TensorInfo struct {
	Name string
	// Dims are ggml's ne: the innermost (contiguous) dimension first.
	Dims []uint64
	// Type is the ggml type number; Format is its entry in quant's table, or nil when vkc does
	// not read that type.
	Type   uint32
	Format *quant.Format
	// Offset is the data's byte offset from the start of the file, Size its length (-1 when
	// the type is unknown, so the size cannot be known).
	Offset int64
	Size   int64
}

// Shape is the tensor's shape outermost first, as ir writes it: ne reversed (a matrix with
// ne = [cols, rows] is [rows, cols]).
func (t *TensorInfo) Shape() []int {
	s := make([]int, len(t.Dims))
	for i, d := range t.Dims {
		s[len(s)-1-i] = int(d)
	}
	return s
}

// Elements is the number of elements.
func (t *TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// TypeName names the tensor's type ("q4_k", or ggml's name of a type vkc does not read).
func (t *TensorInfo) TypeName() string { return quant.GGMLName(t.Type) }

// File is a parsed GGUF file. Its tensors' data stay in the file (memory-mapped) until Close.
type File struct {
	Path      string
	Version   uint32
	Alignment int
	// DataOffset is where the tensor data section starts.
	DataOffset int64
	// Metadata is every entry in file order; Tensors every tensor info in file order.
	Metadata []KV
	Tensors  []TensorInfo

	meta   map[string]int
	byName map[string]int
	data   []byte // the whole file (a memory map, or the bytes given to FromBytes)
	unmap  func() error
}

// FromBytes parses a GGUF file held in memory (name is used in messages). The File refers to
// data; it must not change while the File is used.
func FromBytes(name string, data []byte) (*File, error) {
	return parse(name, data)
}

// Close releases the memory map. Slices returned by Data are invalid afterwards.
func (f *File) Close() error {
	if f.unmap == nil {
		return nil
	}
	u := f.unmap
	f.unmap, f.data = nil, nil
	return u()
}

// Get returns the metadata value of key.
func (f *File) Get(key string) (Value, bool) {
	i, ok := f.meta[key]
	if !ok {
		return Value{}, false
	}
	return f.Metadata[i].Value, true
}

// Has reports whether the file has key.
func (f *File) Has(key string) bool { _, ok := f.meta[key]; return ok }

func (f *File) get(key string) (Value, error) {
	v, ok := f.Get(key)
	if !ok {
		return Value{}, fmt.Errorf("%s: metadata key %s: %w", f.Path, key, ErrNoKey)
	}
	return v, nil
}

func (f *File) typeErr(key string, v Value, want string) error {
	return fmt.Errorf("%s: metadata key %s is %s (%s), want %s", f.Path, key, v.TypeString(), v, want)
}

// String returns a string value.
func (f *File) String(key string) (string, error) {
	v, err := f.get(key)
	if err != nil {
		return "", err
	}
	s, ok := v.AsString()
	if !ok {
		return "", f.typeErr(key, v, "a string")
	}
	return s, nil
}

// Uint returns a non-negative integer value of any integer type.
func (f *File) Uint(key string) (uint64, error) {
	v, err := f.get(key)
	if err != nil {
		return 0, err
	}
	u, ok := v.AsUint()
	if !ok {
		return 0, f.typeErr(key, v, "a non-negative integer")
	}
	return u, nil
}

// Int returns an integer value of any integer type.
func (f *File) Int(key string) (int64, error) {
	v, err := f.get(key)
	if err != nil {
		return 0, err
	}
	i, ok := v.AsInt()
	if !ok {
		return 0, f.typeErr(key, v, "an integer")
	}
	return i, nil
}

// Float returns an f32 or f64 value (an f32 exactly, as float64).
func (f *File) Float(key string) (float64, error) {
	v, err := f.get(key)
	if err != nil {
		return 0, err
	}
	x, ok := v.AsFloat()
	if !ok {
		return 0, f.typeErr(key, v, "a float")
	}
	return x, nil
}

// Bool returns a bool value.
func (f *File) Bool(key string) (bool, error) {
	v, err := f.get(key)
	if err != nil {
		return false, err
	}
	b, ok := v.AsBool()
	if !ok {
		return false, f.typeErr(key, v, "a bool")
	}
	return b, nil
}

// Strings returns an array of strings.
func (f *File) Strings(key string) ([]string, error) {
	v, err := f.get(key)
	if err != nil {
		return nil, err
	}
	s, ok := v.Strings()
	if !ok {
		return nil, f.typeErr(key, v, "an array of string")
	}
	return s, nil
}

// Float32s returns an array of f32.
func (f *File) Float32s(key string) ([]float32, error) {
	v, err := f.get(key)
	if err != nil {
		return nil, err
	}
	s, ok := v.Float32s()
	if !ok {
		return nil, f.typeErr(key, v, "an array of f32")
	}
	return s, nil
}

// Ints returns an array of any integer type as int64.
func (f *File) Ints(key string) ([]int64, error) {
	v, err := f.get(key)
	if err != nil {
		return nil, err
	}
	s, ok := v.Ints()
	if !ok {
		return nil, f.typeErr(key, v, "an array of integers")
	}
	return s, nil
}

// Tensor returns the info of the named tensor.
func (f *File) Tensor(name string) (*TensorInfo, bool) {
	i, ok := f.byName[name]
	if !ok {
		return nil, false
	}
	return &f.Tensors[i], true
}

// Names lists the tensor names, sorted.
func (f *File) Names() []string {
	n := make([]string, len(f.Tensors))
	for i := range f.Tensors {
		n[i] = f.Tensors[i].Name
	}
	sort.Strings(n)
	return n
}

// Data returns the named tensor's bytes: a read-only slice of the file's mapping, valid until
// Close (copy it to keep it). A tensor of a type vkc does not read is an error naming it.
func (f *File) Data(name string) ([]byte, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("%s: no tensor %q", f.Path, name)
	}
	if t.Format == nil {
		return nil, fmt.Errorf("%s: tensor %s has ggml type %d (%s), which vkc does not read (it reads %s)",
			f.Path, name, t.Type, t.TypeName(), formatNames())
	}
	if f.data == nil {
		return nil, fmt.Errorf("%s: the file is closed", f.Path)
	}
	return f.data[t.Offset : t.Offset+t.Size : t.Offset+t.Size], nil
}

// Dequantize returns the named tensor's elements as float32, exactly as ggml dequantizes them.
func (f *File) Dequantize(name string) ([]float32, error) {
	b, err := f.Data(name)
	if err != nil {
		return nil, err
	}
	t, _ := f.Tensor(name)
	y := make([]float32, t.Elements())
	if err := t.Format.Dequantize(b, y); err != nil {
		return nil, fmt.Errorf("%s: tensor %s: %w", f.Path, name, err)
	}
	return y, nil
}

func formatNames() string {
	var n []string
	for _, f := range quant.Formats {
		n = append(n, f.Name)
	}
	return strings.Join(n, ", ")
}

// reader walks the header with every read bounds-checked.
type reader struct {
	name   string
	b      []byte
	off    int
	nested int // values in arrays of arrays so far
}

// maxNestedValues bounds the values of arrays of arrays in a file (real files have none: a
// vocabulary is an array of strings).
const maxNestedValues = 1 << 20

func (r *reader) fail(what string, args ...any) error {
	return fmt.Errorf("%s: at byte %d: %s", r.name, r.off, fmt.Sprintf(what, args...))
}

func (r *reader) need(n int, what string) error {
	if n < 0 || n > len(r.b)-r.off {
		return r.fail("%s needs %d bytes, the file has %d left (truncated?)", what, n, len(r.b)-r.off)
	}
	return nil
}

func (r *reader) u32(what string) (uint32, error) {
	if err := r.need(4, what); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v, nil
}

func (r *reader) u64(what string) (uint64, error) {
	if err := r.need(8, what); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint64(r.b[r.off:])
	r.off += 8
	return v, nil
}

// count reads a u64 count of items of at least min bytes each, checked against what is left.
func (r *reader) count(what string, min int) (int, error) {
	n, err := r.u64(what)
	if err != nil {
		return 0, err
	}
	left := uint64(len(r.b) - r.off)
	if min > 0 && n > left/uint64(min) || n > math.MaxInt32 {
		return 0, r.fail("%s is %d, more than the %d bytes left can hold", what, n, left)
	}
	return int(n), nil
}

func (r *reader) str(what string) (string, error) {
	n, err := r.count(what+" length", 1)
	if err != nil {
		return "", err
	}
	s := string(r.b[r.off : r.off+n])
	r.off += n
	return s, nil
}

func parse(name string, b []byte) (*File, error) {
	r := &reader{name: name, b: b}
	if len(b) < 4 || string(b[:4]) != Magic {
		return nil, fmt.Errorf("%s: not a GGUF file (it does not start with %q)", name, Magic)
	}
	r.off = 4
	ver, err := r.u32("version")
	if err != nil {
		return nil, err
	}
	switch {
	case ver == 2 || ver == 3:
	case ver == 1:
		return nil, fmt.Errorf("%s: GGUF version 1 is not supported (versions 2 and 3 are; convert it again with a current llama.cpp)", name)
	case bits.ReverseBytes32(ver) == 2 || bits.ReverseBytes32(ver) == 3:
		return nil, fmt.Errorf("%s: a big-endian GGUF file (version %d byte-swapped); vkc reads little-endian files only", name, bits.ReverseBytes32(ver))
	default:
		return nil, fmt.Errorf("%s: GGUF version %d is not supported (versions 2 and 3 are)", name, ver)
	}
	f := &File{Path: name, Version: ver, Alignment: DefaultAlignment, meta: map[string]int{}, byName: map[string]int{}, data: b}
	// Each tensor info takes at least 8+4+8+4+8 bytes, each metadata entry 8+4+1.
	nt, err := r.count("tensor count", 32)
	if err != nil {
		return nil, err
	}
	nkv, err := r.count("metadata count", 13)
	if err != nil {
		return nil, err
	}
	f.Metadata = make([]KV, 0, nkv)
	for i := 0; i < nkv; i++ {
		key, err := r.str(fmt.Sprintf("metadata entry %d: key", i))
		if err != nil {
			return nil, err
		}
		if _, dup := f.meta[key]; dup {
			return nil, r.fail("metadata key %s appears twice", key)
		}
		t, err := r.u32("metadata " + key + ": type")
		if err != nil {
			return nil, err
		}
		v, err := r.value("metadata "+key, ValueType(t), 0)
		if err != nil {
			return nil, err
		}
		f.meta[key] = len(f.Metadata)
		f.Metadata = append(f.Metadata, KV{key, v})
	}
	if v, ok := f.Get("general.alignment"); ok {
		a, isU32 := v.AsUint()
		if v.Type != Uint32 || !isU32 || a == 0 || a&(a-1) != 0 || a > 1<<20 {
			return nil, fmt.Errorf("%s: general.alignment is %s %s; it must be a u32 power of two", name, v.TypeString(), v)
		}
		f.Alignment = int(a)
	}
	f.Tensors = make([]TensorInfo, 0, nt)
	for i := 0; i < nt; i++ {
		t, err := r.tensorInfo(i)
		if err != nil {
			return nil, err
		}
		if _, dup := f.byName[t.Name]; dup {
			return nil, r.fail("tensor %s appears twice", t.Name)
		}
		f.byName[t.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
	}
	// The data section starts at the next multiple of the alignment (the padding may be absent
	// when there are no tensors).
	start := (int64(r.off) + int64(f.Alignment) - 1) / int64(f.Alignment) * int64(f.Alignment)
	if nt > 0 && start > int64(len(b)) {
		return nil, fmt.Errorf("%s: the tensor data would start at byte %d, past the end of the file (%d bytes)", name, start, len(b))
	}
	f.DataOffset = start
	dataSize := int64(len(b)) - start
	for i := range f.Tensors {
		t := &f.Tensors[i]
		rel := t.Offset
		if rel%int64(f.Alignment) != 0 {
			return nil, fmt.Errorf("%s: tensor %s: offset %d is not a multiple of the alignment %d", name, t.Name, rel, f.Alignment)
		}
		if rel > dataSize || t.Size > dataSize-rel {
			size := fmt.Sprint(t.Size)
			if t.Size < 0 {
				size = "?"
			}
			return nil, fmt.Errorf("%s: tensor %s: bytes %d..%d+%s lie past the end of the data section (%d bytes; truncated?)", name, t.Name, rel, rel, size, dataSize)
		}
		t.Offset = start + rel
	}
	// A writer never lays two tensors over each other; a file that does gives one tensor's bytes
	// to another.
	byOffset := make([]*TensorInfo, 0, len(f.Tensors))
	for i := range f.Tensors {
		if t := &f.Tensors[i]; t.Size > 0 {
			byOffset = append(byOffset, t)
		}
	}
	sort.Slice(byOffset, func(i, j int) bool { return byOffset[i].Offset < byOffset[j].Offset })
	for i := 1; i < len(byOffset); i++ {
		if a, b := byOffset[i-1], byOffset[i]; b.Offset < a.Offset+a.Size {
			return nil, fmt.Errorf("%s: tensors %s (bytes %d..%d) and %s (bytes %d..%d) overlap", name, a.Name, a.Offset, a.Offset+a.Size, b.Name, b.Offset, b.Offset+b.Size)
		}
	}
	return f, nil
}

func (r *reader) tensorInfo(i int) (TensorInfo, error) {
	var t TensorInfo
	var err error
	if t.Name, err = r.str(fmt.Sprintf("tensor %d: name", i)); err != nil {
		return t, err
	}
	what := "tensor " + t.Name
	nd, err := r.u32(what + ": dimension count")
	if err != nil {
		return t, err
	}
	if nd > MaxDims {
		return t, r.fail("%s has %d dimensions; ggml tensors have at most %d", what, nd, MaxDims)
	}
	t.Dims = make([]uint64, nd)
	n := uint64(1)
	for k := range t.Dims {
		d, err := r.u64(what + ": dimension")
		if err != nil {
			return t, err
		}
		t.Dims[k] = d
		hi, lo := bits.Mul64(n, d)
		if hi != 0 || lo > math.MaxInt64/8 {
			return t, r.fail("%s: dimensions %v… have too many elements", what, t.Dims[:k+1])
		}
		n = lo
	}
	if t.Type, err = r.u32(what + ": type"); err != nil {
		return t, err
	}
	off, err := r.u64(what + ": offset")
	if err != nil {
		return t, err
	}
	if off > math.MaxInt64 {
		return t, r.fail("%s: offset %d is too large", what, off)
	}
	t.Offset, t.Size = int64(off), -1
	t.Format = quant.ByGGML(t.Type)
	if t.Format != nil {
		size, err := t.Format.Bytes(t.Shape())
		if err != nil {
			return t, r.fail("%s (%s, ne %v): %v", what, t.Format.Name, t.Dims, err)
		}
		t.Size = int64(size)
	}
	return t, nil
}

// value reads one metadata value of type t.
func (r *reader) value(what string, t ValueType, depth int) (Value, error) {
	v := Value{Type: t}
	switch t {
	case Uint8, Int8, Uint16, Int16, Uint32, Int32, Uint64, Int64, Float32, Float64, Bool:
		sz := t.size()
		if err := r.need(sz, what); err != nil {
			return v, err
		}
		if err := v.setScalar(r.b[r.off:], t); err != nil {
			return v, r.fail("%s: %v", what, err)
		}
		r.off += sz
	case String:
		s, err := r.str(what)
		if err != nil {
			return v, err
		}
		v.s = s
	case Array:
		if depth >= maxNesting {
			return v, r.fail("%s: arrays nested more than %d deep", what, maxNesting)
		}
		et, err := r.u32(what + ": element type")
		if err != nil {
			return v, err
		}
		v.Elem = ValueType(et)
		min := v.Elem.size()
		switch v.Elem {
		case String, Array:
			min = 8 // a length or an element type and count
		}
		if min == 0 {
			return v, r.fail("%s: arrays of %s do not exist", what, v.Elem)
		}
		n, err := r.count(what+": array length", min)
		if err != nil {
			return v, err
		}
		if v.arr, err = r.array(what, v.Elem, n, depth); err != nil {
			return v, err
		}
	default:
		return v, r.fail("%s: unknown value type %d", what, uint32(t))
	}
	return v, nil
}

func (v *Value) setScalar(b []byte, t ValueType) error {
	switch t {
	case Uint8:
		v.u = uint64(b[0])
	case Int8:
		v.i = int64(int8(b[0]))
	case Uint16:
		v.u = uint64(binary.LittleEndian.Uint16(b))
	case Int16:
		v.i = int64(int16(binary.LittleEndian.Uint16(b)))
	case Uint32:
		v.u = uint64(binary.LittleEndian.Uint32(b))
	case Int32:
		v.i = int64(int32(binary.LittleEndian.Uint32(b)))
	case Uint64:
		v.u = binary.LittleEndian.Uint64(b)
	case Int64:
		v.i = int64(binary.LittleEndian.Uint64(b))
	case Float32:
		v.f = float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	case Float64:
		v.f = math.Float64frombits(binary.LittleEndian.Uint64(b))
	case Bool:
		if b[0] > 1 {
			return fmt.Errorf("a bool is 0 or 1, got %d", b[0])
		}
		v.u = uint64(b[0])
	}
	return nil
}

// array reads n elements of type et (their total size is checked before any allocation).
func (r *reader) array(what string, et ValueType, n, depth int) (any, error) {
	if sz := et.size(); sz > 0 {
		if err := r.need(n*sz, what); err != nil {
			return nil, err
		}
		b := r.b[r.off : r.off+n*sz]
		r.off += n * sz
		le := binary.LittleEndian
		switch et {
		case Uint8:
			return append([]uint8(nil), b...), nil
		case Int8:
			a := make([]int8, n)
			for i := range a {
				a[i] = int8(b[i])
			}
			return a, nil
		case Bool:
			a := make([]bool, n)
			for i := range a {
				if b[i] > 1 {
					return nil, r.fail("%s: element %d: a bool is 0 or 1, got %d", what, i, b[i])
				}
				a[i] = b[i] == 1
			}
			return a, nil
		case Uint16:
			a := make([]uint16, n)
			for i := range a {
				a[i] = le.Uint16(b[2*i:])
			}
			return a, nil
		case Int16:
			a := make([]int16, n)
			for i := range a {
				a[i] = int16(le.Uint16(b[2*i:]))
			}
			return a, nil
		case Uint32:
			a := make([]uint32, n)
			for i := range a {
				a[i] = le.Uint32(b[4*i:])
			}
			return a, nil
		case Int32:
			a := make([]int32, n)
			for i := range a {
				a[i] = int32(le.Uint32(b[4*i:]))
			}
			return a, nil
		case Float32:
			a := make([]float32, n)
			for i := range a {
				a[i] = math.Float32frombits(le.Uint32(b[4*i:]))
			}
			return a, nil
		case Uint64:
			a := make([]uint64, n)
			for i := range a {
				a[i] = le.Uint64(b[8*i:])
			}
			return a, nil
		case Int64:
			a := make([]int64, n)
			for i := range a {
				a[i] = int64(le.Uint64(b[8*i:]))
			}
			return a, nil
		case Float64:
			a := make([]float64, n)
			for i := range a {
				a[i] = math.Float64frombits(le.Uint64(b[8*i:]))
			}
			return a, nil
		}
	}
	switch et {
	case String:
		a := make([]string, n)
		for i := range a {
			s, err := r.str(what) // the element's index only in a message: no string per element
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", i, err)
			}
			a[i] = s
		}
		return a, nil
	case Array:
		// A Value costs tens of bytes for the 12 an empty nested array takes in the file: the
		// nested arrays of a file hold at most maxNestedValues in all.
		if r.nested += n; r.nested > maxNestedValues {
			return nil, r.fail("%s: arrays of arrays hold more than %d values in all", what, maxNestedValues)
		}
		a := make([]Value, n)
		for i := range a {
			v, err := r.value(what, Array, depth+1)
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", i, err)
			}
			a[i] = v
		}
		return a, nil
	}
	return nil, r.fail("%s: arrays of %s do not exist", what, et)
}
