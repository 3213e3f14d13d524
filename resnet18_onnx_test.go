package vkc

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/onnx"
)

// resnet18ONNX writes ResNet-18 (torchvision's resnet18: a 7×7 stem, four stages of two basic
// blocks of 64, 128, 256 and 512 channels, the first block of stages 2–4 with a strided 1×1
// downsample, global average pooling and a 1000-class Gemm) as PyTorch exports it, with
// seeded random weights, a symbolic batch "N" and size×size images, and returns its path.
func resnet18ONNX(path string, size int) error {
	g := &onnx.Graph{Name: "resnet18"}
	rng := rand.New(rand.NewPCG(18, 1))
	param := func(name string, scale float64, dims ...int64) string {
		n := int64(1)
		for _, d := range dims {
			n *= d
		}
		raw := make([]byte, 4*n)
		for i := range n {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(float32(scale*(2*rng.Float64()-1))))
		}
		g.Initializers = append(g.Initializers, &onnx.Tensor{Name: name, Dims: dims, DataType: onnx.Float, RawData: raw, HasRaw: true})
		return name
	}
	constant := func(name string, v float32, n int64) string {
		raw := make([]byte, 4*n)
		for i := range n {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
		}
		g.Initializers = append(g.Initializers, &onnx.Tensor{Name: name, Dims: []int64{n}, DataType: onnx.Float, RawData: raw, HasRaw: true})
		return name
	}
	n := 0
	node := func(op string, ins []string, attrs ...*onnx.Attribute) string {
		n++
		out := fmt.Sprintf("%s_%d", op, n)
		g.Nodes = append(g.Nodes, &onnx.Node{Name: out, OpType: op, Inputs: ins, Outputs: []string{out}, Attrs: attrs})
		return out
	}
	ints := func(name string, v ...int64) *onnx.Attribute {
		return &onnx.Attribute{Name: name, Type: onnx.AttrInts, Ints: v}
	}
	conv := func(x, name string, cin, cout, k, stride, pad int64) string {
		w := param(name+".weight", math.Sqrt(2/float64(cin*k*k)), cout, cin, k, k)
		return node("Conv", []string{x, w}, ints("kernel_shape", k, k), ints("strides", stride, stride), ints("pads", pad, pad, pad, pad))
	}
	bn := func(x, name string, c int64) string {
		return node("BatchNormalization", []string{x, constant(name+".weight", 1, c), param(name+".bias", 0.1, c),
			param(name+".running_mean", 0.1, c), constant(name+".running_var", 1, c)},
			&onnx.Attribute{Name: "epsilon", Type: onnx.AttrFloat, F: 1e-5})
	}
	relu := func(x string) string { return node("Relu", []string{x}) }
	x := relu(bn(conv("input", "conv1", 3, 64, 7, 2, 3), "bn1", 64))
	x = node("MaxPool", []string{x}, ints("kernel_shape", 3, 3), ints("strides", 2, 2), ints("pads", 1, 1, 1, 1))
	cin := int64(64)
	for stage, cout := range []int64{64, 128, 256, 512} {
		for block := range 2 {
			name := fmt.Sprintf("layer%d.%d", stage+1, block)
			stride := int64(1)
			if stage > 0 && block == 0 {
				stride = 2
			}
			h := relu(bn(conv(x, name+".conv1", cin, cout, 3, stride, 1), name+".bn1", cout))
			h = bn(conv(h, name+".conv2", cout, cout, 3, 1, 1), name+".bn2", cout)
			short := x
			if stride != 1 || cin != cout {
				short = bn(conv(x, name+".downsample.0", cin, cout, 1, stride, 0), name+".downsample.1", cout)
			}
			x = relu(node("Add", []string{h, short}))
			cin = cout
		}
	}
	p := node("Flatten", []string{node("GlobalAveragePool", []string{x})}, &onnx.Attribute{Name: "axis", Type: onnx.AttrInt, I: 1})
	node("Gemm", []string{p, param("fc.weight", 1/math.Sqrt(512), 1000, 512), param("fc.bias", 0.01, 1000)},
		&onnx.Attribute{Name: "transB", Type: onnx.AttrInt, I: 1})
	g.Nodes[len(g.Nodes)-1].Outputs = []string{"logits"}
	dim := func(v int64) onnx.Dim { return onnx.Dim{Value: v, HasValue: true} }
	g.Inputs = []*onnx.ValueInfo{{Name: "input", Type: &onnx.TypeInfo{Kind: onnx.TypeTensor, Elem: onnx.Float, HasShape: true,
		Dims: []onnx.Dim{{Param: "N"}, dim(3), dim(int64(size)), dim(int64(size))}}}}
	g.Outputs = []*onnx.ValueInfo{{Name: "logits", Type: &onnx.TypeInfo{Kind: onnx.TypeTensor, Elem: onnx.Float, HasShape: true,
		Dims: []onnx.Dim{{Param: "N"}, dim(1000)}}}}
	model := &onnx.Model{IRVersion: 9, ProducerName: "vkc test", Opsets: []onnx.OpsetID{{Domain: "", Version: 17}}, Graph: g}
	return os.WriteFile(path, onnx.Marshal(model), 0o644)
}

// TestResNet18ONNX: the ResNet-18 the held-out benchmark measures (scripts/heldout-bench.sh),
// written with the project's ONNX writer, imports with its batch fixed into a model of
// ResNet-18's 11,689,512 parameters whose function gives [1, 1000] logits. With
// VKC_RESNET18_ONNX=FILE (and VKC_RESNET18_SIZE, default 64) the model is also written there,
// for the benchmark.
func TestResNet18ONNX(t *testing.T) {
	size := 32
	if out := os.Getenv("VKC_RESNET18_ONNX"); out != "" {
		if s := os.Getenv("VKC_RESNET18_SIZE"); s != "" {
			if _, err := fmt.Sscan(s, &size); err != nil || size < 32 {
				t.Fatalf("VKC_RESNET18_SIZE=%q: want an image size of at least 32", s)
			}
		} else {
			size = 64
		}
		if err := resnet18ONNX(out, size); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d×%d images)", out, size, size)
	}
	path := filepath.Join(t.TempDir(), "resnet18.onnx")
	if err := resnet18ONNX(path, size); err != nil {
		t.Fatal(err)
	}
	im, err := importer.ImportONNX(path, importer.ONNXOptions{Dims: map[string]int{"N": 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer im.Model.Close()
	params := 0
	for _, d := range im.Model.Params {
		params += d.Type.Shape.NumElements()
	}
	// torchvision counts 11,689,512 parameters; the batch norms' running means and variances
	// (4,800 channels each) are buffers there and initializers here.
	if params != 11689512+2*4800 {
		t.Errorf("%d parameters and batch-norm statistics, want ResNet-18's 11689512 + 9600", params)
	}
	f := im.Model.Function(importer.FunctionName)
	if f == nil || len(f.Outputs) != 1 || !f.Outputs[0].Value.Type().Shape.Equal(ir.Shape{1, 1000}) {
		t.Fatalf("function %s: outputs %v, want one output of [1 1000] logits", importer.FunctionName, f.Outputs)
	}
}
