package main

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir/npy"
	"github.com/vkc-project/vkc/ir/onnx"
	"github.com/vkc-project/vkc/runtime"
)

// writeONNXConv writes a small ONNX model: y = relu(conv(x, W, b) + 1) with a symbolic batch
// "N", W and b initializers, and an input x as a TensorProto file; it returns both paths.
func writeONNXConv(t *testing.T, dir string) (model, input string) {
	t.Helper()
	f32 := func(vals ...float32) []byte {
		var b []byte
		for _, v := range vals {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
		return b
	}
	w := make([]float32, 2*3*3*3)
	for i := range w {
		w[i] = float32(i%7) - 3
	}
	g := &onnx.Graph{
		Name: "conv",
		Initializers: []*onnx.Tensor{
			{Name: "W", Dims: []int64{2, 3, 3, 3}, DataType: onnx.Float, RawData: f32(w...), HasRaw: true},
			{Name: "b", Dims: []int64{2}, DataType: onnx.Float, FloatData: []float32{0.5, -0.5}},
			{Name: "one", DataType: onnx.Float, FloatData: []float32{1}},
		},
		Nodes: []*onnx.Node{
			{OpType: "Conv", Inputs: []string{"x", "W", "b"}, Outputs: []string{"c"},
				Attrs: []*onnx.Attribute{{Name: "pads", Type: onnx.AttrInts, Ints: []int64{1, 1, 1, 1}}}},
			{OpType: "Add", Inputs: []string{"c", "one"}, Outputs: []string{"a"}},
			{OpType: "Relu", Inputs: []string{"a"}, Outputs: []string{"y"}},
		},
		Inputs: []*onnx.ValueInfo{{Name: "x", Type: &onnx.TypeInfo{Kind: onnx.TypeTensor, Elem: onnx.Float, HasShape: true,
			Dims: []onnx.Dim{{Param: "N"}, {Value: 3, HasValue: true}, {Value: 5, HasValue: true}, {Value: 4, HasValue: true}}}}},
		Outputs: []*onnx.ValueInfo{{Name: "y"}},
	}
	model = filepath.Join(dir, "conv.onnx")
	if err := os.WriteFile(model, onnx.Marshal(&onnx.Model{IRVersion: 8, Opsets: []onnx.OpsetID{{Version: 13}}, Graph: g}), 0o644); err != nil {
		t.Fatal(err)
	}
	x := make([]float32, 2*3*5*4)
	for i := range x {
		x[i] = float32(math.Sin(float64(i)))
	}
	input = filepath.Join(dir, "x.pb")
	tp := &onnx.Tensor{Name: "x", Dims: []int64{2, 3, 5, 4}, DataType: onnx.Float, RawData: f32(x...), HasRaw: true}
	if err := os.WriteFile(input, onnx.MarshalTensor(tp), 0o644); err != nil {
		t.Fatal(err)
	}
	return model, input
}

// TestImportONNX: vkc import writes a model.yaml and its weights beside it (after --dim fixes
// the symbolic batch); check, eval and compile take the .onnx file itself; eval and run take a
// TensorProto input; the .onnx and the model.yaml evaluate to the same bytes, and the compiled
// plan agrees.
func TestImportONNX(t *testing.T) {
	dir := t.TempDir()
	model, input := writeONNXConv(t, dir)
	yaml := filepath.Join(dir, "out", "conv.yaml")
	if err := os.MkdirAll(filepath.Dir(yaml), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"import", model, "-o", yaml}, 1, `input "x": dimension 0 is "N", not static: fix it with --dim N=VALUE`},
		{[]string{"import", model, "-o", yaml, "--dim", "N=0"}, 2, "want NAME=VALUE with a positive integer VALUE"},
		{[]string{"import", model, "-o", yaml, "--dim", "N=2", "--ctx", "8"}, 2, "--ctx, --prefill and --parallel go with GGUF files"},
		{[]string{"check", "../../examples/mlp/model.yaml", "--dim", "N=2"}, 2, "--dim fixes the symbolic dimensions of ONNX models"},
		{[]string{"check", model}, 1, `fix it with --dim N=VALUE`},
	} {
		code, _, errs := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, %q; want exit %d and %q", c.args, code, errs, c.code, c.want)
		}
	}
	if _, err := os.Stat(yaml); err == nil {
		t.Fatal("a failed import left a model.yaml")
	}
	code, out, errs := runCLI(t, "import", model, "-o", yaml, "--dim", "N=2")
	if code != 0 || !strings.Contains(out, "wrote "+yaml) {
		t.Fatalf("import: exit %d: %s%s", code, out, errs)
	}
	if _, err := os.Stat(filepath.Join(dir, "out", "conv.safetensors")); err != nil {
		t.Fatalf("no weights beside the model.yaml: %v", err)
	}
	if code, out, errs := runCLI(t, "check", yaml); code != 0 || !strings.Contains(out, "forward(x: f32[2,3,5,4]) -> (y: f32[2,2,5,4])") {
		t.Fatalf("check model.yaml: exit %d: %s%s", code, out, errs)
	}
	// The same function from the .onnx file (with --dim) and from the model.yaml.
	var results [][]byte
	for i, m := range []string{model, yaml} {
		o := filepath.Join(dir, "y"+string(rune('0'+i))+".npy")
		args := []string{"eval", m, "--input", "x=" + input, "-o", o}
		if m == model {
			args = append(args, "--dim", "N=2")
		}
		if code, out, errs := runCLI(t, args...); code != 0 {
			t.Fatalf("%v: exit %d: %s%s", args, code, out, errs)
		}
		b, err := os.ReadFile(o)
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, b)
	}
	if !bytes.Equal(results[0], results[1]) {
		t.Error("eval of the .onnx file and of its model.yaml differ")
	}
	y, err := npy.Read(bytes.NewReader(results[0]))
	if err != nil {
		t.Fatal(err)
	}
	// y[0, 0, 0, 0] = relu(b[0] + 1 + Σ W[0, c, i, j]·x[0, c, i-1, j-1]) over the taps inside.
	want := 1.5
	for c := 0; c < 3; c++ {
		for i := 1; i < 3; i++ {
			for j := 1; j < 3; j++ {
				want += float64(float32((c*9+i*3+j)%7)-3) * float64(float32(math.Sin(float64(c*20+(i-1)*4+(j-1)))))
			}
		}
	}
	if got := y.Float64(0); math.Abs(got-math.Max(want, 0)) > 1e-5 {
		t.Errorf("y[0,0,0,0] = %g, want %g", got, math.Max(want, 0))
	}

	if _, _, err := runtime.Devices(runtime.Options{}); err != nil {
		t.Skipf("no Vulkan device for the compile half: %v", err)
	}
	plan := filepath.Join(dir, "conv.plan")
	if code, out, errs := runCLI(t, "compile", model, "--dim", "N=2", "-o", plan, "-q"); code != 0 {
		t.Fatalf("compile .onnx: exit %d: %s%s", code, out, errs)
	}
	o := filepath.Join(dir, "yplan.npy")
	if code, out, errs := runCLI(t, "run", plan, "-f", "forward", "--input", "x="+input, "-o", o); code != 0 {
		t.Fatalf("run: exit %d: %s%s", code, out, errs)
	}
	got, err := npy.ReadFile(o)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < y.NumElements(); i++ {
		if d := math.Abs(got.Float64(i) - y.Float64(i)); d > 1e-4*math.Max(1, math.Abs(y.Float64(i))) {
			t.Fatalf("compiled plan element %d: %g, interpreter %g", i, got.Float64(i), y.Float64(i))
		}
	}
}
