package importer_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/internal/oracles"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
	"github.com/vkc-project/vkc/ir/onnx"
)

func tensorInfo(name string, dt onnx.DataType, dims ...int64) *onnx.ValueInfo {
	ti := &onnx.TypeInfo{Kind: onnx.TypeTensor, Elem: dt, HasShape: true}
	for _, d := range dims {
		ti.Dims = append(ti.Dims, onnx.Dim{Value: d, HasValue: true})
	}
	return &onnx.ValueInfo{Name: name, Type: ti}
}

func int64s(name string, v ...int64) *onnx.Tensor {
	var raw []byte
	for _, x := range v {
		raw = binary.LittleEndian.AppendUint64(raw, uint64(x))
	}
	return &onnx.Tensor{Name: name, Dims: []int64{int64(len(v))}, DataType: onnx.Int64, RawData: raw, HasRaw: true}
}

func writeModel(t *testing.T, opset int64, g *onnx.Graph) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "m.onnx")
	if err := os.WriteFile(p, onnx.Marshal(&onnx.Model{IRVersion: 8, Opsets: []onnx.OpsetID{{Version: opset}}, Graph: g}), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestImportErrors: what the importer cannot take is an error naming the node, its op type and
// the opset (or the input and its dimension), never a panic or a silently different graph.
func TestImportErrors(t *testing.T) {
	x := tensorInfo("x", onnx.Float, 2, 3)
	for _, c := range []struct {
		name  string
		opset int64
		g     *onnx.Graph
		want  string
	}{
		{"unsupported op", 13, &onnx.Graph{Inputs: []*onnx.ValueInfo{x}, Outputs: []*onnx.ValueInfo{{Name: "y"}},
			Nodes: []*onnx.Node{{Name: "lstm0", OpType: "LSTM", Inputs: []string{"x"}, Outputs: []string{"y"}}}},
			`node 0 "lstm0" (LSTM, opset 13): op LSTM is not supported`},
		{"old opset", 11, &onnx.Graph{Inputs: []*onnx.ValueInfo{x}, Outputs: []*onnx.ValueInfo{{Name: "y"}},
			Nodes: []*onnx.Node{{OpType: "Relu", Inputs: []string{"x"}, Outputs: []string{"y"}}}},
			"opset 11: vkc imports opset 13 and newer"},
		{"other domain", 13, &onnx.Graph{Inputs: []*onnx.ValueInfo{x}, Outputs: []*onnx.ValueInfo{{Name: "y"}},
			Nodes: []*onnx.Node{{Name: "q", OpType: "QuickGelu", Domain: "com.microsoft", Inputs: []string{"x"}, Outputs: []string{"y"}}}},
			`node 0 "q" (QuickGelu, opset 13): domain "com.microsoft" is not supported`},
		{"shape from an input", 13, &onnx.Graph{Inputs: []*onnx.ValueInfo{x, tensorInfo("s", onnx.Int64, 2)}, Outputs: []*onnx.ValueInfo{{Name: "y"}},
			Nodes: []*onnx.Node{{Name: "r", OpType: "Reshape", Inputs: []string{"x", "s"}, Outputs: []string{"y"}}}},
			`node 0 "r" (Reshape, opset 13): input 1 (shape, "s") must be a constant`},
		{"unknown dim", 13, &onnx.Graph{Inputs: []*onnx.ValueInfo{{Name: "x", Type: &onnx.TypeInfo{Kind: onnx.TypeTensor, Elem: onnx.Float, HasShape: true, Dims: []onnx.Dim{{}}}}},
			Outputs: []*onnx.ValueInfo{{Name: "x"}}},
			`input "x": dimension 0 is unknown`},
		{"string input", 13, &onnx.Graph{Inputs: []*onnx.ValueInfo{tensorInfo("s", onnx.String, 2)}, Outputs: []*onnx.ValueInfo{{Name: "s"}}},
			`input "s": ONNX element type string has no vkc form`},
		{"int64 constant out of range", 13, &onnx.Graph{Inputs: []*onnx.ValueInfo{tensorInfo("i", onnx.Int64, 1)}, Outputs: []*onnx.ValueInfo{{Name: "y"}},
			Initializers: []*onnx.Tensor{int64s("big", 1<<40)},
			Nodes:        []*onnx.Node{{Name: "a", OpType: "Add", Inputs: []string{"i", "big"}, Outputs: []string{"y"}}}},
			`constant "big": element 0 is 1099511627776, outside the i32 range`},
		{"zero-size slice", 13, &onnx.Graph{Inputs: []*onnx.ValueInfo{x}, Outputs: []*onnx.ValueInfo{{Name: "y"}},
			Initializers: []*onnx.Tensor{int64s("st", 5), int64s("en", 9), int64s("ax", 1)},
			Nodes:        []*onnx.Node{{Name: "sl", OpType: "Slice", Inputs: []string{"x", "st", "en", "ax"}, Outputs: []string{"y"}}}},
			"the slice 5:9:1 of 3 elements is empty: vkc has no empty tensors"},
		{"3-D pooling", 13, &onnx.Graph{Inputs: []*onnx.ValueInfo{tensorInfo("v", onnx.Float, 1, 1, 4, 4, 4)}, Outputs: []*onnx.ValueInfo{{Name: "y"}},
			Nodes: []*onnx.Node{{Name: "p", OpType: "MaxPool", Inputs: []string{"v"}, Outputs: []string{"y"},
				Attrs: []*onnx.Attribute{{Name: "kernel_shape", Type: onnx.AttrInts, Ints: []int64{2, 2, 2}}}}}},
			"MaxPool over 3 spatial dimensions: vkc has 1-D and 2-D windows"},
	} {
		_, err := importer.ImportONNX(writeModel(t, c.opset, c.g), importer.ONNXOptions{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// TestImportFoldsShapes: Shape, Gather, Unsqueeze, Concat and ConstantOfShape on constants fold
// at import time (PyTorch's exports compute reshape targets so), and the Reshape they feed is
// static.
func TestImportFoldsShapes(t *testing.T) {
	g := &onnx.Graph{
		Inputs:       []*onnx.ValueInfo{tensorInfo("x", onnx.Float, 2, 3, 4)},
		Outputs:      []*onnx.ValueInfo{{Name: "y"}, {Name: "z"}},
		Initializers: []*onnx.Tensor{int64s("i0", 0), int64s("m1", -1)},
		Nodes: []*onnx.Node{
			{OpType: "Shape", Inputs: []string{"x"}, Outputs: []string{"s"}},
			{OpType: "Gather", Inputs: []string{"s", "i0"}, Outputs: []string{"n"}},
			{OpType: "Concat", Inputs: []string{"n", "m1"}, Outputs: []string{"target"}, Attrs: []*onnx.Attribute{{Name: "axis", Type: onnx.AttrInt}}},
			{OpType: "Reshape", Inputs: []string{"x", "target"}, Outputs: []string{"y"}},
			{OpType: "ConstantOfShape", Inputs: []string{"target2"}, Outputs: []string{"ones"},
				Attrs: []*onnx.Attribute{{Name: "value", Type: onnx.AttrTensor, T: &onnx.Tensor{Dims: []int64{1}, DataType: onnx.Float, FloatData: []float32{1}}}}},
			{OpType: "Add", Inputs: []string{"y", "ones"}, Outputs: []string{"z"}},
		},
	}
	// target2 = Shape(y) from a Constant-free path: Shape of the reshaped value.
	g.Nodes = append(g.Nodes[:4], append([]*onnx.Node{{OpType: "Shape", Inputs: []string{"y"}, Outputs: []string{"target2"}}}, g.Nodes[4:]...)...)
	im, err := importer.ImportONNX(writeModel(t, 17, g), importer.ONNXOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := im.Model.Functions[0]
	if got := f.Outputs[0].Value.Type(); !got.Equal(ir.T(ir.F32, 2, 12)) {
		t.Fatalf("y is %s, want f32[2,12]", got)
	}
	x := ir.NewTensor(ir.T(ir.F32, 2, 3, 4))
	for i := 0; i < x.NumElements(); i++ {
		x.SetFloat64(i, float64(i))
	}
	out, _, err := interp.Run(im.Model, importer.FunctionName, map[string]*ir.Tensor{"x": x}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if z := out["z"]; z.Float64(13) != 14 {
		t.Errorf("z[13] = %g, want 14", z.Float64(13))
	}
}

// FuzzImportONNX: a decodable model imports or fails with an error, never a panic, and what
// imports validates.
func FuzzImportONNX(f *testing.F) {
	x := tensorInfo("x", onnx.Float, 2, 3)
	f.Add(onnx.Marshal(&onnx.Model{Opsets: []onnx.OpsetID{{Version: 13}}, Graph: &onnx.Graph{Inputs: []*onnx.ValueInfo{x},
		Outputs: []*onnx.ValueInfo{{Name: "y"}}, Initializers: []*onnx.Tensor{int64s("ax", 1)},
		Nodes: []*onnx.Node{{OpType: "ReduceSum", Inputs: []string{"x", "ax"}, Outputs: []string{"y"}}}}}))
	if dir, err := oracles.Find("onnx-node"); err == nil {
		for _, name := range []string{"test_conv_with_strides_padding", "test_softmax_axis_0_expanded", "test_gather_2d_indices",
			"test_slice_neg_steps", "test_layer_normalization_4d_axis1", "test_averagepool_2d_ceil", "test_split_variable_parts_2d_opset18"} {
			if b, err := os.ReadFile(filepath.Join(dir, name, "model.onnx")); err == nil {
				f.Add(b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := onnx.DecodeModel(data)
		if err != nil {
			return
		}
		im, err := importer.ImportONNXModel(m, "", "fuzz", importer.ONNXOptions{})
		if err != nil {
			return
		}
		if err := im.Model.Validate(); err != nil {
			t.Fatalf("an imported model does not validate: %v", err)
		}
	})
}

// TestSupportedONNXOps: every op issue 15 lists is translated (plus RMSNormalization, which the
// node tests include).
func TestSupportedONNXOps(t *testing.T) {
	have := map[string]bool{}
	for _, op := range importer.SupportedONNXOps() {
		have[op] = true
	}
	for _, op := range strings.Fields(`Add Sub Mul Div Pow Neg Abs Exp Log Sqrt Reciprocal Sin Cos Tanh Erf
		Sigmoid Relu LeakyRelu Gelu HardSigmoid HardSwish Clip Cast Equal Less LessOrEqual Greater
		GreaterOrEqual Where Max Min ReduceSum ReduceMean ReduceMax ReduceMin ArgMax Softmax
		LayerNormalization MatMul Gemm Reshape Transpose Slice Concat Split Squeeze Unsqueeze Flatten
		Expand Gather Identity Conv MaxPool AveragePool GlobalAveragePool BatchNormalization Constant
		Shape ConstantOfShape RMSNormalization`) {
		if !have[op] {
			t.Errorf("ONNX op %s is not translated", op)
		}
	}
}
