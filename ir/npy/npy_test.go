package npy

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir"
)

// numpyFile builds a .npy file the way numpy.save does (version 1.0, header padded to 64).
func numpyFile(header string, data []byte) []byte {
	total := 10 + len(header) + 1
	header += strings.Repeat(" ", (64-total%64)%64) + "\n"
	var b bytes.Buffer
	b.WriteString("\x93NUMPY\x01\x00")
	binary.Write(&b, binary.LittleEndian, uint16(len(header)))
	b.WriteString(header)
	b.Write(data)
	return b.Bytes()
}

func TestReadNumpyLayouts(t *testing.T) {
	f32 := make([]byte, 24)
	for i := 0; i < 6; i++ {
		binary.LittleEndian.PutUint32(f32[4*i:], math.Float32bits(float32(i)+0.5))
	}
	f64 := make([]byte, 16)
	binary.LittleEndian.PutUint64(f64, math.Float64bits(1.25))
	binary.LittleEndian.PutUint64(f64[8:], math.Float64bits(-2))
	i64 := make([]byte, 24)
	for i, v := range []int64{3, -1, 255} {
		binary.LittleEndian.PutUint64(i64[8*i:], uint64(v))
	}
	for _, c := range []struct {
		name, header string
		data         []byte
		want         ir.Type
		vals         []float64
	}{
		{"f32 2x3", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f32, ir.T(ir.F32, 2, 3), []float64{0.5, 1.5, 2.5, 3.5, 4.5, 5.5}},
		{"f64 narrowed", "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", f64, ir.T(ir.F32, 2), []float64{1.25, -2}},
		{"i64 narrowed", "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", i64, ir.T(ir.I32, 3), []float64{3, -1, 255}},
		{"i32 scalar", "{'descr': '<i4', 'fortran_order': False, 'shape': (), }", []byte{7, 0, 0, 0}, ir.T(ir.I32), []float64{7}},
		{"bool", "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", []byte{1, 0, 1}, ir.T(ir.Bool, 3), []float64{1, 0, 1}},
		{"f16", "{'descr': '<f2', 'fortran_order': False, 'shape': (1,), }", []byte{0x00, 0x3c}, ir.T(ir.F16, 1), []float64{1}},
	} {
		x, err := Read(bytes.NewReader(numpyFile(c.header, c.data)))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !x.Type.Equal(c.want) {
			t.Errorf("%s: type %s, want %s", c.name, x.Type, c.want)
		}
		for i, v := range c.vals {
			if x.Float64(i) != v {
				t.Errorf("%s: element %d = %v, want %v", c.name, i, x.Float64(i), v)
			}
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for _, typ := range []ir.Type{ir.T(ir.F32, 2, 3), ir.T(ir.F16, 5), ir.T(ir.I32), ir.T(ir.U32, 1, 1, 4), ir.T(ir.Bool, 3)} {
		vals := make([]float64, typ.Shape.NumElements())
		for i := range vals {
			vals[i] = float64(i % 2)
			if typ.DType != ir.Bool {
				vals[i] = float64(i) * 3
			}
		}
		x := ir.TensorFromFloat64s(typ, vals)
		var b bytes.Buffer
		if err := Write(&b, x); err != nil {
			t.Fatal(err)
		}
		if (b.Len()-len(x.Data))%64 != 0 {
			t.Errorf("%s: data starts at %d, not a multiple of 64", typ, b.Len()-len(x.Data))
		}
		y, err := Read(&b)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		if !y.Type.Equal(x.Type) || !bytes.Equal(x.Data, y.Data) {
			t.Errorf("%s: round trip gave %s %v", typ, y.Type, y.Float64s())
		}
	}
	// bf16 is written as f32
	x := ir.TensorFromFloat64s(ir.T(ir.BF16, 2), []float64{1, -0.5})
	var b bytes.Buffer
	if err := Write(&b, x); err != nil {
		t.Fatal(err)
	}
	y, err := Read(&b)
	if err != nil || !y.Type.Equal(ir.T(ir.F32, 2)) || y.Float64(1) != -0.5 {
		t.Errorf("bf16: %v %v", y, err)
	}
}

func TestReadErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		file []byte
		want string
	}{
		{"not npy", []byte("hello world"), "not a .npy file"},
		{"fortran", numpyFile("{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }", make([]byte, 4)), "Fortran order"},
		{"big endian", numpyFile("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", make([]byte, 4)), "dtype >f4 is not supported"},
		{"short data", numpyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", make([]byte, 4)), "want 16 bytes"},
		{"bad shape", numpyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (a,), }", nil), "not a list of sizes"},
		{"version", []byte("\x93NUMPY\x09\x00\x00\x00"), "version 9.0"},
	} {
		_, err := Read(bytes.NewReader(c.file))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}

// FuzzRead: any bytes give a tensor or an error, never a panic.
func FuzzRead(f *testing.F) {
	var b bytes.Buffer
	Write(&b, ir.TensorFromFloat64s(ir.T(ir.F32, 2, 2), []float64{1, 2, 3, 4}))
	f.Add(b.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		x, err := Read(bytes.NewReader(data))
		if err == nil && len(x.Data) != x.Type.Bytes() {
			t.Fatalf("%s with %d bytes", x.Type, len(x.Data))
		}
	})
}

// A header whose shape is more than the host memory limit is refused before its data is read.
func TestShapeBeyondHostLimit(t *testing.T) {
	t.Setenv("VKC_HOST_MEMORY", "1MiB")
	h := "{'descr': '<f4', 'fortran_order': False, 'shape': (1024, 1024), }"
	for (10+len(h)+1)%64 != 0 {
		h += " "
	}
	h += "\n"
	b := append([]byte("\x93NUMPY\x01\x00"), byte(len(h)), byte(len(h)>>8))
	b = append(b, h...)
	_, err := Read(bytes.NewReader(b))
	if err == nil || !strings.Contains(err.Error(), ".npy data of shape [1024,1024]: 8.0 MiB") || !strings.Contains(err.Error(), "VKC_HOST_MEMORY=1MiB") {
		t.Fatalf("got %v", err)
	}
}
