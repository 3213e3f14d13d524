package onnx

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vkc-project/vkc/internal/regular"
)

// ReadModel reads and decodes an .onnx file. Tensors stored in external data files are not
// read here; Tensor.Data reads them, relative to the model's folder.
func ReadModel(path string) (*Model, error) {
	b, err := regular.ReadFile(path, 0)
	if err != nil {
		return nil, err
	}
	m, err := DecodeModel(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// ReadTensor reads and decodes a TensorProto file (.pb), resolving its data: the result has
// its elements in RawData.
func ReadTensor(path string) (*Tensor, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := DecodeTensor(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	raw, err := t.Data(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t.RawData, t.HasRaw, t.DataLocation = raw, true, 0
	return t, nil
}

// Data returns the tensor's elements little-endian and densely packed in the layout of
// raw_data (bool one byte, float16 and bfloat16 their 16 bits), whichever field holds them:
// raw_data (returned as is, aliasing the decoded input), the typed field ONNX assigns to the
// data type (float_data; int32_data for the 8-, 16- and 32-bit integers, bool, float16 and
// bfloat16; int64_data; double_data; uint64_data for uint32 and uint64), or an external file
// named by external_data's location (relative to dir, which it may not leave), offset and
// length. A count that does not match the dims is an error naming the field.
func (t *Tensor) Data(dir string) ([]byte, error) {
	if t.Segment {
		return nil, fmt.Errorf("tensor %q is a segment of a larger tensor (not supported)", t.Name)
	}
	n := t.NumElements()
	if n < 0 {
		return nil, fmt.Errorf("tensor %q: dims %v are negative or too large", t.Name, t.Dims)
	}
	size := t.DataType.Size()
	if size == 0 || t.DataType == Complex64 || t.DataType == Complex128 {
		return nil, fmt.Errorf("tensor %q: element type %s is not supported", t.Name, t.DataType)
	}
	if n > math.MaxInt64/int64(size) {
		return nil, fmt.Errorf("tensor %q: %d elements of %s overflow a byte count", t.Name, n, t.DataType)
	}
	nb := int(n) * size
	if t.DataLocation == 1 {
		return t.external(dir, nb)
	}
	if t.HasRaw {
		if len(t.RawData) != nb {
			return nil, fmt.Errorf("tensor %q: raw_data has %d bytes, dims %v of %s need %d", t.Name, len(t.RawData), t.Dims, t.DataType, nb)
		}
		return t.RawData, nil
	}
	// A tensor with no elements may leave every field empty.
	if n == 0 {
		return []byte{}, nil
	}
	var out []byte // allocated once the typed field's count matches (it is bounded by the input)
	count := func(field string, have int) error {
		if int64(have) != n {
			return fmt.Errorf("tensor %q: %s has %d elements, dims %v need %d", t.Name, field, have, t.Dims, n)
		}
		out = make([]byte, nb)
		return nil
	}
	switch t.DataType {
	case Float:
		if err := count("float_data", len(t.FloatData)); err != nil {
			return nil, err
		}
		for i, v := range t.FloatData {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
		}
	case Int32, Int16, Int8, Uint16, Uint8, Bool, Float16, BFloat16:
		if err := count("int32_data", len(t.Int32Data)); err != nil {
			return nil, err
		}
		for i, v := range t.Int32Data {
			switch size {
			case 1:
				out[i] = byte(v)
			case 2:
				binary.LittleEndian.PutUint16(out[2*i:], uint16(v))
			default:
				binary.LittleEndian.PutUint32(out[4*i:], uint32(v))
			}
		}
	case Int64:
		if err := count("int64_data", len(t.Int64Data)); err != nil {
			return nil, err
		}
		for i, v := range t.Int64Data {
			binary.LittleEndian.PutUint64(out[8*i:], uint64(v))
		}
	case Double:
		if err := count("double_data", len(t.DoubleData)); err != nil {
			return nil, err
		}
		for i, v := range t.DoubleData {
			binary.LittleEndian.PutUint64(out[8*i:], math.Float64bits(v))
		}
	case Uint32, Uint64:
		if err := count("uint64_data", len(t.Uint64Data)); err != nil {
			return nil, err
		}
		for i, v := range t.Uint64Data {
			if size == 4 {
				binary.LittleEndian.PutUint32(out[4*i:], uint32(v))
			} else {
				binary.LittleEndian.PutUint64(out[8*i:], v)
			}
		}
	default:
		return nil, fmt.Errorf("tensor %q: element type %s is not supported", t.Name, t.DataType)
	}
	return out, nil
}

// external reads nb bytes of an external data file.
func (t *Tensor) external(dir string, nb int) ([]byte, error) {
	var loc string
	var off, length int64 = 0, -1
	for _, kv := range t.External {
		var err error
		switch kv.Key {
		case "location":
			loc = kv.Value
		case "offset":
			off, err = strconv.ParseInt(kv.Value, 10, 64)
		case "length":
			length, err = strconv.ParseInt(kv.Value, 10, 64)
		}
		if err != nil || off < 0 {
			return nil, fmt.Errorf("tensor %q: external_data %s=%q is not a byte count", t.Name, kv.Key, kv.Value)
		}
	}
	if loc == "" {
		return nil, fmt.Errorf("tensor %q: external data without a location", t.Name)
	}
	// ONNX's checker refuses locations that leave the model's folder; so does this reader, so
	// a model file cannot make vkc read an arbitrary file.
	clean := filepath.Clean(filepath.FromSlash(loc))
	if filepath.IsAbs(clean) || filepath.VolumeName(clean) != "" || clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
		return nil, fmt.Errorf("tensor %q: external data location %q leaves the model's folder", t.Name, loc)
	}
	if length >= 0 && length != int64(nb) {
		return nil, fmt.Errorf("tensor %q: external data length %d, dims %v of %s need %d bytes", t.Name, length, t.Dims, t.DataType, nb)
	}
	path := filepath.Join(dir, clean)
	// A symbolic link inside the folder may not lead out of it either: the location is
	// resolved, links and all, and must stay under the folder resolved the same way. Only a
	// regular file is read (a FIFO would block, a device stream without end).
	real, err := insideFolder(dir, path)
	if err != nil {
		return nil, fmt.Errorf("tensor %q: external data location %q: %w", t.Name, loc, err)
	}
	f, err := regular.Open(real)
	if err != nil {
		return nil, fmt.Errorf("tensor %q: external data: %w", t.Name, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("tensor %q: external data: %w", t.Name, err)
	}
	if off > st.Size() || st.Size()-off < int64(nb) {
		return nil, fmt.Errorf("tensor %q: external data %s holds %d bytes, the tensor needs %d at offset %d", t.Name, path, st.Size(), nb, off)
	}
	out := make([]byte, nb)
	if _, err := f.ReadAt(out, off); err != nil && err != io.EOF {
		return nil, fmt.Errorf("tensor %q: external data %s: %w", t.Name, path, err)
	}
	return out, nil
}

// insideFolder resolves path's symbolic links and returns the file it names, or an error when
// that lies outside dir (whose own links are resolved too: a model folder may be reached through
// a link).
func insideFolder(dir, path string) (string, error) {
	rdir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	if rdir, err = filepath.Abs(rdir); err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", err
	}
	if real, err = filepath.Abs(real); err != nil {
		return "", err
	}
	rel, err := filepath.Rel(rdir, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return "", fmt.Errorf("%s is a symbolic link to %s, outside the model's folder %s", path, real, rdir)
	}
	return real, nil
}
