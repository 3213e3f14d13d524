package onnx

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/internal/oracles"
)

// oracleDir is ONNX's node tests, ../shared/oracles/onnx-node, or skips the test naming it.
func oracleDir(t testing.TB) string {
	t.Helper()
	return filepath.Dir(oracles.File(t, "onnx-node", "manifest.json"))
}

// TestDecodeOracle decodes every model and tensor file of ONNX's node tests: each model has a
// graph with nodes and typed inputs and outputs; each data file's tensor has the name, dtype
// and dims of the graph input or output it feeds, and its data the size they imply. Each file
// also survives Marshal and decode unchanged.
func TestDecodeOracle(t *testing.T) {
	dir := oracleDir(t)
	tests, err := filepath.Glob(filepath.Join(dir, "test_*"))
	if err != nil || len(tests) < 400 {
		t.Fatalf("found %d tests in %s (%v)", len(tests), dir, err)
	}
	var typed, constants int
	for _, td := range tests {
		name := filepath.Base(td)
		raw, err := os.ReadFile(filepath.Join(td, "model.onnx"))
		if err != nil {
			t.Fatal(err)
		}
		m, err := DecodeModel(raw)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if len(m.Graph.Nodes) == 0 || len(m.Graph.Outputs) == 0 || len(m.Opsets) == 0 {
			t.Errorf("%s: %d nodes, %d outputs, %d opsets", name, len(m.Graph.Nodes), len(m.Graph.Outputs), len(m.Opsets))
		}
		if again := Marshal(mustDecode(t, Marshal(m))); !bytes.Equal(again, Marshal(m)) {
			t.Errorf("%s: Marshal is not a fixed point of decoding", name)
		}
		for _, n := range m.Graph.Nodes {
			for _, a := range n.Attrs {
				if a.Type == AttrTensor {
					if _, err := a.T.Data(td); err != nil {
						t.Errorf("%s: node %s attribute %s: %v", name, n.OpType, a.Name, err)
					}
					if !a.T.HasRaw {
						typed++
					}
					constants++
				}
			}
		}
		for kind, vis := range map[string][]*ValueInfo{"input": m.Graph.Inputs, "output": m.Graph.Outputs} {
			for i, vi := range vis {
				if vi.Type == nil || vi.Type.Kind != TypeTensor || !vi.Type.HasShape {
					t.Errorf("%s: %s %s has no tensor type with a shape", name, kind, vi.Name)
					continue
				}
				tp, err := ReadTensor(filepath.Join(td, "test_data_set_0", kind+"_"+strconv.Itoa(i)+".pb"))
				if err != nil {
					t.Errorf("%s: %v", name, err)
					continue
				}
				if tp.Name != vi.Name || tp.DataType != vi.Type.Elem || len(tp.Dims) != len(vi.Type.Dims) {
					t.Errorf("%s: %s %d is %q %s %v, the graph declares %q %s %v", name, kind, i, tp.Name, tp.DataType, tp.Dims, vi.Name, vi.Type.Elem, vi.Type.Dims)
					continue
				}
				for k, d := range vi.Type.Dims {
					if !d.HasValue || d.Value != tp.Dims[k] {
						t.Errorf("%s: %s %s dim %d is %d, declared %s", name, kind, vi.Name, k, tp.Dims[k], d)
					}
				}
				if int64(len(tp.RawData)) != tp.NumElements()*int64(tp.DataType.Size()) {
					t.Errorf("%s: %s %s: %d bytes", name, kind, vi.Name, len(tp.RawData))
				}
			}
		}
	}
	// The README: the Constant tensors inside model.onnx use the typed fields (29 here).
	if typed < 25 || typed != constants {
		t.Errorf("%d of %d constant tensors use typed fields; the README says all of them (about 30)", typed, constants)
	}
}

func mustDecode(t *testing.T, b []byte) *Model {
	t.Helper()
	m, err := DecodeModel(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestTensorEncodings checks both encodings of repeated scalars (packed and one tag per
// element), every typed data field, and the errors for counts that do not match the dims.
func TestTensorEncodings(t *testing.T) {
	// dims [2, 3] unpacked (tag 0x08 per element), data_type int64, int64_data packed.
	unpacked := []byte{0x08, 2, 0x08, 3, 0x10, byte(Int64), 0x3a, 6, 1, 2, 3, 4, 5, 0x7f}
	x, err := DecodeTensor(unpacked)
	if err != nil {
		t.Fatal(err)
	}
	d, err := x.Data("")
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{1, 2, 3, 4, 5, 127} {
		if got := int64(binary.LittleEndian.Uint64(d[8*i:])); got != want {
			t.Errorf("element %d = %d, want %d", i, got, want)
		}
	}
	// The same dims packed, int64_data unpacked with a negative value (10-byte varint).
	neg := []byte{0x0a, 2, 2, 3, 0x10, byte(Int64)}
	for _, v := range []int64{-1, 0, 1, 2, 3, 4} {
		neg = append(neg, 0x38)
		neg = binary.AppendUvarint(neg, uint64(v))
	}
	y, err := DecodeTensor(neg)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := y.Data(""); int64(binary.LittleEndian.Uint64(d)) != -1 {
		t.Errorf("first element %d, want -1", int64(binary.LittleEndian.Uint64(d)))
	}
	for _, c := range []struct {
		name string
		t    *Tensor
		want []byte
		err  string
	}{
		{"float_data", &Tensor{Dims: []int64{2}, DataType: Float, FloatData: []float32{1.5, -2}}, le32(math.Float32bits(1.5), math.Float32bits(-2)), ""},
		{"float16 in int32_data", &Tensor{Dims: []int64{1}, DataType: Float16, Int32Data: []int32{0x3c00}}, []byte{0x00, 0x3c}, ""},
		{"bool in int32_data", &Tensor{Dims: []int64{3}, DataType: Bool, Int32Data: []int32{1, 0, 1}}, []byte{1, 0, 1}, ""},
		{"int8 in int32_data", &Tensor{Dims: []int64{2}, DataType: Int8, Int32Data: []int32{-1, 5}}, []byte{0xff, 5}, ""},
		{"uint32 in uint64_data", &Tensor{Dims: []int64{1}, DataType: Uint32, Uint64Data: []uint64{7}}, le32(7), ""},
		{"double", &Tensor{Dims: []int64{1}, DataType: Double, DoubleData: []float64{0.5}}, binary.LittleEndian.AppendUint64(nil, math.Float64bits(0.5)), ""},
		{"scalar raw", &Tensor{DataType: Int32, RawData: le32(9), HasRaw: true}, le32(9), ""},
		{"zero-size", &Tensor{Dims: []int64{3, 0}, DataType: Float}, []byte{}, ""},
		{"count", &Tensor{Name: "w", Dims: []int64{3}, DataType: Float, FloatData: []float32{1}}, nil, `tensor "w": float_data has 1 elements, dims [3] need 3`},
		{"raw size", &Tensor{Name: "w", Dims: []int64{2}, DataType: Int64, RawData: make([]byte, 8), HasRaw: true}, nil, "raw_data has 8 bytes, dims [2] of int64 need 16"},
		{"huge dims, no data", &Tensor{Name: "w", Dims: []int64{1 << 40, 1 << 20}, DataType: Float}, nil, "float_data has 0 elements"},
		{"overflow", &Tensor{Name: "w", Dims: []int64{1 << 62, 1 << 62}, DataType: Float}, nil, "negative or too large"},
		{"string", &Tensor{Name: "s", Dims: []int64{1}, DataType: String, StringData: [][]byte{[]byte("a")}}, nil, "element type string is not supported"},
		{"external outside", &Tensor{Name: "e", Dims: []int64{1}, DataType: Float, DataLocation: 1, External: []KeyValue{{"location", "../secret"}}}, nil, "leaves the model's folder"},
		{"external absolute", &Tensor{Name: "e", Dims: []int64{1}, DataType: Float, DataLocation: 1, External: []KeyValue{{"location", "/etc/passwd"}}}, nil, "leaves the model's folder"},
	} {
		got, err := c.t.Data(t.TempDir())
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, c.want) {
			t.Errorf("%s: %v, %v; want %v", c.name, got, err, c.want)
		}
		// Marshal and decode keep the data.
		back, err := DecodeTensor(MarshalTensor(c.t))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
		} else if d, err := back.Data(""); err != nil || !bytes.Equal(d, c.want) {
			t.Errorf("%s: after Marshal: %v, %v", c.name, d, err)
		}
	}
}

func le32(vs ...uint32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return b
}

// TestExternalData reads a tensor from an external file at an offset, and refuses a file that
// is too short.
func TestExternalData(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "w"), 0o755); err != nil {
		t.Fatal(err)
	}
	payload := append([]byte("junk"), le32(math.Float32bits(1), math.Float32bits(2))...)
	if err := os.WriteFile(filepath.Join(dir, "w", "data.bin"), payload, 0o644); err != nil {
		t.Fatal(err)
	}
	x := &Tensor{Name: "w", Dims: []int64{2}, DataType: Float, DataLocation: 1,
		External: []KeyValue{{"location", "w/data.bin"}, {"offset", "4"}, {"length", "8"}}}
	d, err := x.Data(dir)
	if err != nil || !bytes.Equal(d, payload[4:]) {
		t.Fatalf("got %v, %v", d, err)
	}
	x.External[1].Value = "8"
	x.External = x.External[:2]
	if _, err := x.Data(dir); err == nil || !strings.Contains(err.Error(), "holds 12 bytes, the tensor needs 8 at offset 8") {
		t.Errorf("short file: %v", err)
	}
}

// TestDecodeErrors: malformed input is an error that says what is wrong, never a panic.
func TestDecodeErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		data []byte
		err  string
	}{
		{"empty", nil, "ModelProto has no graph"},
		{"truncated varint", []byte{0x08, 0x80}, "truncated"},
		{"long field", []byte{0x3a, 0x10, 1}, "runs past the end"},
		{"wrong wire type", []byte{0x3d, 0, 0, 0, 0}, "ModelProto field 7 has wire type 5, want 2"},
		{"group", []byte{0x7b}, "unsupported wire type 3"}, // field 15, unknown to ModelProto: skipped, but groups cannot be
		{"field zero", []byte{0x00}, "invalid field number 0"},
		{"two graphs", []byte{0x3a, 0, 0x3a, 0}, "graph given twice"},
		{"bad node", []byte{0x3a, 3, 0x0a, 1, 0x08}, "node 0: NodeProto: NodeProto field 1 has wire type 0, want 2"},
	} {
		_, err := DecodeModel(c.data)
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.err)
		}
	}
	// Deeply nested subgraphs stop at maxDepth.
	g := &Graph{}
	for i := 0; i < maxDepth+2; i++ {
		g = &Graph{Nodes: []*Node{{OpType: "If", Attrs: []*Attribute{{Name: "then_branch", Type: AttrGraph, G: g}}}}}
	}
	if _, err := DecodeModel(Marshal(&Model{Graph: g})); err == nil || !strings.Contains(err.Error(), "nested more than") {
		t.Errorf("deep nesting: %v", err)
	}
}

// FuzzDecodeModel: decoding never panics, and what decodes re-encodes to a fixed point.
func FuzzDecodeModel(f *testing.F) {
	f.Add(Marshal(&Model{IRVersion: 8, Opsets: []OpsetID{{"", 13}}, Graph: &Graph{Name: "g",
		Nodes:   []*Node{{OpType: "Conv", Inputs: []string{"x", "w", ""}, Outputs: []string{"y"}, Attrs: []*Attribute{{Name: "pads", Type: AttrInts, Ints: []int64{1, 1, 1, 1}}, {Name: "alpha", Type: AttrFloat, F: 0.5}}}},
		Inputs:  []*ValueInfo{{Name: "x", Type: &TypeInfo{Kind: TypeTensor, Elem: Float, HasShape: true, Dims: []Dim{{Value: 1, HasValue: true}, {Param: "n"}}}}},
		Outputs: []*ValueInfo{{Name: "y"}}, Initializers: []*Tensor{{Name: "w", Dims: []int64{1}, DataType: Float, FloatData: []float32{2}}}}}))
	if dir, err := oracles.Find("onnx-node"); err == nil { // the seeds are optional
		for _, name := range []string{"test_conv_with_strides_padding", "test_softmax_axis_0_expanded", "test_mvn_expanded_ver18", "test_clip_default_max"} {
			if b, err := os.ReadFile(filepath.Join(dir, name, "model.onnx")); err == nil {
				f.Add(b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeModel(data)
		if err != nil {
			return
		}
		for _, init := range m.Graph.Initializers {
			init.Data("") // must not panic
		}
		once := Marshal(m)
		m2, err := DecodeModel(once)
		if err != nil {
			t.Fatalf("re-encoded model does not decode: %v", err)
		}
		if !bytes.Equal(Marshal(m2), once) {
			t.Fatal("Marshal is not a fixed point of decoding")
		}
	})
}

// FuzzDecodeTensor: decoding and resolving a tensor never panics nor allocates past its input.
func FuzzDecodeTensor(f *testing.F) {
	f.Add(MarshalTensor(&Tensor{Name: "x", Dims: []int64{2, 2}, DataType: Float, RawData: make([]byte, 16), HasRaw: true}))
	f.Add(MarshalTensor(&Tensor{Name: "i", Dims: []int64{3}, DataType: Int64, Int64Data: []int64{-1, 2, 3}}))
	f.Add(MarshalTensor(&Tensor{Name: "b", Dims: []int64{2}, DataType: Bool, Int32Data: []int32{1, 0}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		x, err := DecodeTensor(data)
		if err != nil {
			return
		}
		d, err := x.Data("")
		if err == nil && int64(len(d)) != x.NumElements()*int64(x.DataType.Size()) {
			t.Fatalf("%d bytes for dims %v of %s", len(d), x.Dims, x.DataType)
		}
		if err == nil && len(d) > 8*len(data)+16 {
			t.Fatalf("%d bytes of data from %d bytes of input", len(d), len(data))
		}
	})
}
