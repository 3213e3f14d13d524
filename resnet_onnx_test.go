package vkc

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
	"github.com/vkc-project/vkc/ir/onnx"
	"github.com/vkc-project/vkc/runtime"
)

// resnetONNX writes examples/resnet-tiny as an ONNX model the way PyTorch exports one: Conv,
// BatchNormalization, Relu, Add, MaxPool, GlobalAveragePool, Flatten and Gemm nodes, the
// weights as initializers (raw_data, typed float_data, and one in an external data file), and a
// symbolic batch dimension "N".
func resnetONNX(t *testing.T, m *ir.Model, dir string) string {
	t.Helper()
	g := &onnx.Graph{Name: "resnet_tiny"}
	i := 0
	for _, d := range m.Params {
		w := m.Weights[d.Name]
		dims := make([]int64, len(d.Type.Shape))
		for k, v := range d.Type.Shape {
			dims[k] = int64(v)
		}
		init := &onnx.Tensor{Name: d.Name, Dims: dims, DataType: onnx.Float}
		switch {
		case d.Name == "fc.w":
			if err := os.WriteFile(filepath.Join(dir, "fc.bin"), append([]byte("pad!"), w.Data...), 0o644); err != nil {
				t.Fatal(err)
			}
			init.DataLocation = 1
			init.External = []onnx.KeyValue{{Key: "location", Value: "fc.bin"}, {Key: "offset", Value: "4"}}
		case i%2 == 0:
			init.RawData, init.HasRaw = w.Data, true
		default:
			for _, v := range w.Float64s() {
				init.FloatData = append(init.FloatData, float32(v))
			}
		}
		i++
		g.Initializers = append(g.Initializers, init)
	}
	n := 0
	node := func(op string, ins []string, attrs ...*onnx.Attribute) string {
		n++
		out := op + "_" + string(rune('a'+n%26)) + strings.Repeat("x", n/26)
		g.Nodes = append(g.Nodes, &onnx.Node{Name: out, OpType: op, Inputs: ins, Outputs: []string{out}, Attrs: attrs})
		return out
	}
	ints := func(name string, v ...int64) *onnx.Attribute {
		return &onnx.Attribute{Name: name, Type: onnx.AttrInts, Ints: v}
	}
	one := func(name string, v int64) *onnx.Attribute {
		return &onnx.Attribute{Name: name, Type: onnx.AttrInt, I: v}
	}
	conv := func(x, w, b string, stride int64, pad int64, group int64) string {
		ins := []string{x, w}
		if b != "" {
			ins = append(ins, b)
		}
		return node("Conv", ins, ints("strides", stride, stride), ints("pads", pad, pad, pad, pad), one("group", group))
	}
	bn := func(x, p string) string {
		return node("BatchNormalization", []string{x, p + ".scale", p + ".bias", p + ".mean", p + ".var"},
			&onnx.Attribute{Name: "epsilon", Type: onnx.AttrFloat, F: 1e-5})
	}
	relu := func(x string) string { return node("Relu", []string{x}) }
	add := func(a, b string) string { return node("Add", []string{a, b}) }

	x := relu(bn(conv("image", "stem.w", "", 1, 1, 1), "stem.bn"))
	x = node("MaxPool", []string{x}, ints("kernel_shape", 3, 3), ints("strides", 2, 2), ints("pads", 1, 1, 1, 1))
	h := relu(bn(conv(x, "b1.conv1.w", "", 1, 1, 1), "b1.bn1"))
	h = bn(conv(h, "b1.conv2.w", "", 1, 1, 1), "b1.bn2")
	x = relu(add(h, x))
	h = relu(bn(conv(x, "b2.conv1.w", "", 2, 1, 1), "b2.bn1"))
	h = bn(conv(h, "b2.conv2.w", "", 1, 1, 1), "b2.bn2")
	s := bn(conv(x, "b2.down.w", "", 2, 0, 1), "b2.down.bn")
	x = relu(add(h, s))
	x = relu(bn(conv(x, "dw.w", "dw.b", 1, 1, int64(m.Dims["c2"])), "dw.bn"))
	p := node("Flatten", []string{node("GlobalAveragePool", []string{x})}, one("axis", 1))
	logits := node("Gemm", []string{p, "fc.w", "fc.b"}, one("transB", 1))
	g.Nodes[len(g.Nodes)-1].Outputs = []string{"logits"}
	_ = logits

	dim := func(v int64) onnx.Dim { return onnx.Dim{Value: v, HasValue: true} }
	g.Inputs = []*onnx.ValueInfo{{Name: "image", Type: &onnx.TypeInfo{Kind: onnx.TypeTensor, Elem: onnx.Float, HasShape: true,
		Dims: []onnx.Dim{{Param: "N"}, dim(3), dim(16), dim(16)}}}}
	g.Outputs = []*onnx.ValueInfo{{Name: "logits", Type: &onnx.TypeInfo{Kind: onnx.TypeTensor, Elem: onnx.Float, HasShape: true,
		Dims: []onnx.Dim{{Param: "N"}, dim(10)}}}}
	path := filepath.Join(dir, "resnet_tiny.onnx")
	model := &onnx.Model{IRVersion: 9, ProducerName: "vkc test", Opsets: []onnx.OpsetID{{Domain: "", Version: 17}}, Graph: g}
	if err := os.WriteFile(path, onnx.Marshal(model), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestResNetONNXEndToEnd: the ResNet-style example written as ONNX (as PyTorch exports it)
// imports, with its symbolic batch fixed by a dimension option, into a model that computes
// what examples/resnet-tiny/model.yaml computes in the interpreter; it compiles for the device
// (every batch norm folded into its convolution) and matches the interpreter there; and
// written back as model.yaml it parses into the same function.
func TestResNetONNXEndToEnd(t *testing.T) {
	ref := parseExample(t, "resnet-tiny")
	dir := t.TempDir()
	path := resnetONNX(t, ref, dir)

	if _, err := importer.ImportONNX(path, importer.ONNXOptions{}); err == nil || !strings.Contains(err.Error(), `dimension 0 is "N", not static: fix it with --dim N=VALUE`) {
		t.Fatalf("import without --dim: %v", err)
	}
	im, err := importer.ImportONNX(path, importer.ONNXOptions{Dims: map[string]int{"N": ref.Dims["batch"]}})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	img := ir.NewTensor(ir.T(ir.F32, ref.Dims["batch"], 3, 16, 16))
	for k := 0; k < img.NumElements(); k++ {
		img.SetFloat64(k, 2*rng.Float64()-1)
	}
	want, _, err := interp.Run(ref, "forward", map[string]*ir.Tensor{"image": img}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := interp.Run(im.Model, importer.FunctionName, map[string]*ir.Tensor{"image": img}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := rowError(got["logits"], want["logits"]); err != nil || e > 1e-6 {
		t.Errorf("imported ONNX against model.yaml in the interpreter: row error %g (%v)", e, err)
	}

	d := device(t)
	p, _ := compileExample(t, im.Model, Options{Target: targetOf(d)})
	folds := 0
	for _, r := range p.Record.Rules {
		if strings.HasPrefix(r.Name, "fold-batchnorm") {
			folds += int(r.Count)
		}
	}
	for _, mod := range p.Modules {
		if strings.HasPrefix(mod.Key, "batch_norm") {
			t.Errorf("a batch norm kernel is left in the plan: %s", mod.Key)
		}
	}
	if folds == 0 {
		t.Error("fold-batchnorm never applied")
	}
	exe, err := d.Load(p, runtime.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	f := p.Function(importer.FunctionName)
	bin, err := Inputs(f, map[string]*ir.Tensor{"image": img})
	if err != nil {
		t.Fatal(err)
	}
	res, err := exe.Run(context.Background(), f.Name, bin)
	if err != nil {
		t.Fatal(err)
	}
	outs, err := Outputs(f, res)
	if err != nil {
		t.Fatal(err)
	}
	e := compare(t, "compiled ONNX import", outs["logits"], got["logits"])
	t.Logf("resnet-tiny from ONNX: %d dispatches (no batch norm kernel; fold-batchnorm applied %d times), compiled against interpreter row error %.3g", len(f.Dispatches), folds, e)

	yaml := filepath.Join(dir, "out", "model.yaml")
	if err := os.MkdirAll(filepath.Dir(yaml), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := importer.WriteModelYAML(context.Background(), im.Model, yaml, importer.YAMLOptions{}); err != nil {
		t.Fatal(err)
	}
	back, err := ir.ParseModel(yaml)
	if err != nil {
		t.Fatal(err)
	}
	again, _, err := interp.Run(back, importer.FunctionName, map[string]*ir.Tensor{"image": img}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again["logits"].Data, got["logits"].Data) {
		t.Error("model.yaml written from the import computes different logits")
	}
	if math.IsNaN(e) {
		t.Error("NaN error")
	}
}
