// Package npy reads and writes NumPy .npy files (format versions 1.0, 2.0 and 3.0) as ir.Tensors:
// little-endian, C order, dtypes f32, f16, i32, u32 and bool. For convenience, float64 and int64
// arrays (NumPy's defaults) are read and narrowed to f32 and i32; bf16 tensors, which .npy cannot
// hold, are written as f32.
package npy

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/vkc-project/vkc/internal/hostmem"
	"github.com/vkc-project/vkc/internal/safefile"
	"github.com/vkc-project/vkc/ir"
)

var magic = []byte("\x93NUMPY")

var descrs = map[string]ir.DType{"<f4": ir.F32, "<f2": ir.F16, "<i4": ir.I32, "<u4": ir.U32, "|b1": ir.Bool, "|u1": ir.Bool}

func descrOf(d ir.DType) (string, bool) {
	switch d {
	case ir.F32:
		return "<f4", true
	case ir.F16:
		return "<f2", true
	case ir.I32:
		return "<i4", true
	case ir.U32:
		return "<u4", true
	case ir.Bool:
		return "|b1", true
	}
	return "", false
}

// maxHeader bounds the header so a corrupt length cannot exhaust memory.
const maxHeader = 1 << 20

var (
	descrRE   = regexp.MustCompile(`'descr'\s*:\s*'([^']*)'`)
	fortranRE = regexp.MustCompile(`'fortran_order'\s*:\s*(True|False)`)
	shapeRE   = regexp.MustCompile(`'shape'\s*:\s*\(([^)]*)\)`)
)

// Read decodes one .npy file from r.
func Read(r io.Reader) (*ir.Tensor, error) {
	var pre [8]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil || !bytes.Equal(pre[:6], magic) {
		return nil, fmt.Errorf("not a .npy file (no \\x93NUMPY magic)")
	}
	var hlen int
	switch pre[6] {
	case 1:
		var b [2]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return nil, fmt.Errorf("truncated .npy header")
		}
		hlen = int(binary.LittleEndian.Uint16(b[:]))
	case 2, 3:
		var b [4]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return nil, fmt.Errorf("truncated .npy header")
		}
		hlen = int(binary.LittleEndian.Uint32(b[:]))
	default:
		return nil, fmt.Errorf(".npy format version %d.%d is not supported", pre[6], pre[7])
	}
	if hlen > maxHeader {
		return nil, fmt.Errorf(".npy header of %d bytes is too large", hlen)
	}
	hb := make([]byte, hlen)
	if _, err := io.ReadFull(r, hb); err != nil {
		return nil, fmt.Errorf("truncated .npy header")
	}
	h := string(hb)
	m := descrRE.FindStringSubmatch(h)
	if m == nil {
		return nil, fmt.Errorf(".npy header has no descr: %q", h)
	}
	descr := m[1]
	if f := fortranRE.FindStringSubmatch(h); f == nil || f[1] != "False" {
		return nil, fmt.Errorf(".npy array is in Fortran order (or the header says neither); vkc reads C order")
	}
	sm := shapeRE.FindStringSubmatch(h)
	if sm == nil {
		return nil, fmt.Errorf(".npy header has no shape: %q", h)
	}
	shape := ir.Shape{}
	n := 1
	for _, part := range strings.Split(sm[1], ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		d, err := strconv.Atoi(strings.TrimSuffix(part, "L"))
		if err != nil || d < 0 || d > 1<<40 {
			return nil, fmt.Errorf(".npy shape (%s) is not a list of sizes", sm[1])
		}
		if d > 0 && n > (1<<40)/d {
			return nil, fmt.Errorf(".npy shape (%s) is too large", sm[1])
		}
		n *= d
		shape = append(shape, d)
	}
	// The data is read into memory whole (a sparse file or a pipe would deliver all of it):
	// refuse what the host memory limit cannot hold before reading.
	if err := hostmem.Check(fmt.Sprintf(".npy data of shape %v", shape), uint64(n)*8); err != nil {
		return nil, err
	}
	switch descr {
	case "<f8", "<i8":
		raw, err := readN(r, 8*n)
		if err != nil {
			return nil, fmt.Errorf(".npy data: %v", err)
		}
		if descr == "<f8" {
			x := ir.NewTensor(ir.Type{DType: ir.F32, Shape: shape})
			for i := 0; i < n; i++ {
				binary.LittleEndian.PutUint32(x.Data[4*i:], math.Float32bits(float32(math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:])))))
			}
			return x, nil
		}
		x := ir.NewTensor(ir.Type{DType: ir.I32, Shape: shape})
		for i := 0; i < n; i++ {
			v := int64(binary.LittleEndian.Uint64(raw[8*i:]))
			if v < math.MinInt32 || v > math.MaxInt32 {
				return nil, fmt.Errorf(".npy int64 element %d = %d does not fit i32", i, v)
			}
			binary.LittleEndian.PutUint32(x.Data[4*i:], uint32(int32(v)))
		}
		return x, nil
	}
	d, ok := descrs[descr]
	if !ok {
		return nil, fmt.Errorf(".npy dtype %s is not supported (vkc reads <f4 <f2 <i4 <u4 |b1, and <f8 <i8 narrowed to f32 and i32)", descr)
	}
	x := &ir.Tensor{Type: ir.Type{DType: d, Shape: shape}}
	var err error
	if x.Data, err = readN(r, x.Type.Bytes()); err != nil {
		return nil, fmt.Errorf(".npy data: %v for %s", err, x.Type)
	}
	if d == ir.Bool {
		for i, b := range x.Data {
			if b != 0 {
				x.Data[i] = 1
			}
		}
	}
	return x, nil
}

// readN reads exactly n bytes, growing the buffer as data arrives so that a corrupt shape
// cannot make it allocate more than the input holds.
func readN(r io.Reader, n int) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, int64(n)))
	if err != nil {
		return nil, err
	}
	if len(b) != n {
		return nil, fmt.Errorf("want %d bytes, the file has %d", n, len(b))
	}
	return b, nil
}

// ReadFile reads a .npy file.
func ReadFile(path string) (*ir.Tensor, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	x, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return x, nil
}

// Write encodes x as a version 1.0 .npy file (bf16 is converted to f32).
func Write(w io.Writer, x *ir.Tensor) error {
	if x.Type.DType == ir.BF16 {
		x = x.Convert(ir.F32)
	}
	descr, ok := descrOf(x.Type.DType)
	if !ok {
		return fmt.Errorf("npy: dtype %s cannot be written", x.Type.DType)
	}
	var shape strings.Builder
	for i, d := range x.Type.Shape {
		if i > 0 {
			shape.WriteString(", ")
		}
		shape.WriteString(strconv.Itoa(d))
	}
	if len(x.Type.Shape) == 1 {
		shape.WriteString(",")
	}
	h := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, shape.String())
	// Pad with spaces so the data starts at a multiple of 64 bytes; the header ends with '\n'.
	total := len(magic) + 2 + 2 + len(h) + 1
	h += strings.Repeat(" ", (64-total%64)%64) + "\n"
	if len(h) > math.MaxUint16 {
		return fmt.Errorf("npy: header too long for shape %s", x.Type.Shape)
	}
	var buf bytes.Buffer
	buf.Write(magic)
	buf.Write([]byte{1, 0})
	binary.Write(&buf, binary.LittleEndian, uint16(len(h)))
	buf.WriteString(h)
	if _, err := w.Write(buf.Bytes()); err != nil {
		return err
	}
	_, err := w.Write(x.Data)
	return err
}

// WriteFile writes x to path atomically (a temporary file renamed into place); it refuses to
// replace a directory, a special file (a character device or FIFO is written through) or a
// non-empty file that is not a .npy file.
func WriteFile(path string, x *ir.Tensor) error {
	return safefile.Write(context.Background(), path, FileOptions(nil, false), func(w io.Writer) error { return Write(w, x) })
}

// FileOptions are the checks WriteFile makes (safefile): a command passes the files it reads, and
// force to replace a file that is not a .npy file.
func FileOptions(inputs []string, force bool) safefile.Options {
	return safefile.Options{What: ".npy file", Inputs: inputs, Force: force, Check: checkFile}
}

// checkFile recognises a .npy file by its magic string.
func checkFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var b [6]byte
	n, _ := io.ReadFull(f, b[:])
	if string(b[:n]) != "\x93NUMPY" {
		return fmt.Errorf("no .npy magic")
	}
	return nil
}
