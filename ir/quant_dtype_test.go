package ir_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/gguf"
	"github.com/vkc-project/vkc/ir/quant"
)

// TestQuantizedInfer: block-quantized types are accepted exactly where an op takes a weight.
func TestQuantizedInfer(t *testing.T) {
	f32 := func(d ...int) ir.Type { return ir.T(ir.F32, d...) }
	q := func(d ...int) ir.Type { return ir.T(ir.Q4_K, d...) }
	for _, c := range []struct {
		name string
		op   ir.Op
		at   ir.Attrs
		args []ir.Type
		want ir.Type
		err  string
	}{
		{"linear", ir.Linear, nil, []ir.Type{f32(3, 256), q(5, 256)}, f32(3, 5), ""},
		{"linear bias f32", ir.Linear, nil, []ir.Type{f32(3, 256), q(5, 256), f32(5)}, f32(3, 5), ""},
		{"linear x", ir.Linear, nil, []ir.Type{q(3, 256), f32(5, 256)}, ir.Type{}, "argument 1 is q4_k[3,256]"},
		{"linear bias q", ir.Linear, nil, []ir.Type{f32(3, 256), ir.T(ir.Q8_0, 5, 256), ir.T(ir.Q8_0, 32)}, ir.Type{}, "argument 3"},
		{"matmul b", ir.Matmul, ir.Attrs{"tb": true}, []ir.Type{f32(3, 256), q(5, 256)}, f32(3, 5), ""},
		{"matmul b batched", ir.Matmul, nil, []ir.Type{f32(2, 3, 256), q(2, 256, 256)}, ir.Type{}, "must be a matrix"},
		{"embedding", ir.Embedding, nil, []ir.Type{q(10, 256), ir.T(ir.I32, 4)}, f32(4, 256), ""},
		{"rmsnorm_linear", ir.RMSNormLinear, nil, []ir.Type{f32(3, 256), f32(256), q(7, 256)}, f32(3, 7), ""},
		{"concat rows", ir.Concat, ir.Attrs{"axis": 0}, []ir.Type{q(5, 256), q(3, 256)}, q(8, 256), ""},
		{"concat mixed", ir.Concat, ir.Attrs{"axis": 0}, []ir.Type{q(5, 256), ir.T(ir.Q6_K, 3, 256)}, ir.Type{}, "cannot concatenate"},
		{"cast dequantizes", ir.Cast, ir.Attrs{"to": "f16"}, []ir.Type{q(2, 256)}, ir.T(ir.F16, 2, 256), ""},
		{"cast quantizes", ir.Cast, ir.Attrs{"to": "q8_0"}, []ir.Type{f32(2, 32)}, ir.Type{}, "cannot cast to q8_0"},
		{"add", ir.Add, nil, []ir.Type{q(2, 256), q(2, 256)}, ir.Type{}, "block-quantized weight; add takes no argument"},
		{"reshape", ir.Reshape, ir.Attrs{"shape": []int{512}}, []ir.Type{q(2, 256)}, ir.Type{}, "block-quantized"},
		{"partial block", ir.Linear, nil, []ir.Type{f32(3, 100), q(5, 100)}, ir.Type{}, "not a whole number of q4_k blocks"},
		// A KV cache in q8_0 or q4_0: written from float rows, read by attention with float
		// queries (the result has q's dtype); no other block format, and k and v alike.
		{"cache_write q8_0", ir.CacheWrite, nil, []ir.Type{ir.T(ir.Q8_0, 8, 2, 64), f32(3, 2, 64), ir.T(ir.I32)}, ir.T(ir.Q8_0, 8, 2, 64), ""},
		{"cache_write f16 rows", ir.CacheWrite, nil, []ir.Type{ir.T(ir.Q4_0, 8, 32), ir.T(ir.F16, 1, 32), ir.T(ir.I32)}, ir.T(ir.Q4_0, 8, 32), ""},
		{"cache_write f32 into f16", ir.CacheWrite, nil, []ir.Type{ir.T(ir.F16, 8, 32), f32(1, 32), ir.T(ir.I32)}, ir.T(ir.F16, 8, 32), ""},
		{"cache_write q4_k", ir.CacheWrite, nil, []ir.Type{q(8, 256), f32(1, 256), ir.T(ir.I32)}, ir.Type{}, "argument 1 is q4_k"},
		{"cache_write int rows", ir.CacheWrite, nil, []ir.Type{f32(8, 32), ir.T(ir.I32, 1, 32), ir.T(ir.I32)}, ir.Type{}, "differ in dtype"},
		{"attention q8_0", ir.Attention, nil, []ir.Type{f32(1, 4, 32), ir.T(ir.Q8_0, 8, 2, 32), ir.T(ir.Q8_0, 8, 2, 32)}, f32(1, 4, 32), ""},
		{"attention f16 cache", ir.Attention, nil, []ir.Type{f32(1, 4, 32), ir.T(ir.F16, 8, 2, 32), ir.T(ir.F16, 8, 2, 32)}, f32(1, 4, 32), ""},
		{"attention k, v apart", ir.Attention, nil, []ir.Type{f32(1, 4, 32), ir.T(ir.Q8_0, 8, 2, 32), ir.T(ir.Q4_0, 8, 2, 32)}, ir.Type{}, "k, v share"},
		// The batched step's (--parallel --kv): cache_scatter converts as cache_write, and
		// attention_rows reads as attention.
		{"cache_scatter q8_0", ir.CacheScatter, nil, []ir.Type{ir.T(ir.Q8_0, 3, 8, 2, 32), f32(2, 2, 32), ir.T(ir.I32, 2), ir.T(ir.I32, 2)}, ir.T(ir.Q8_0, 3, 8, 2, 32), ""},
		{"cache_scatter f32 into f16", ir.CacheScatter, nil, []ir.Type{ir.T(ir.F16, 3, 8, 2, 32), f32(2, 2, 32), ir.T(ir.I32, 2), ir.T(ir.I32, 2)}, ir.T(ir.F16, 3, 8, 2, 32), ""},
		{"cache_scatter q4_k", ir.CacheScatter, nil, []ir.Type{ir.T(ir.Q4_K, 3, 8, 256), f32(2, 256), ir.T(ir.I32, 2), ir.T(ir.I32, 2)}, ir.Type{}, "argument 1 is q4_k"},
		{"cache_scatter int rows", ir.CacheScatter, nil, []ir.Type{f32(3, 8, 32), ir.T(ir.I32, 2, 32), ir.T(ir.I32, 2), ir.T(ir.I32, 2)}, ir.Type{}, "differ in dtype"},
		{"attention_rows q4_0", ir.AttentionRows, nil, []ir.Type{f32(2, 4, 32), ir.T(ir.Q4_0, 3, 8, 2, 32), ir.T(ir.Q4_0, 3, 8, 2, 32), ir.T(ir.I32, 2), ir.T(ir.I32, 2)}, f32(2, 4, 32), ""},
		{"attention_rows f16 cache", ir.AttentionRows, nil, []ir.Type{f32(2, 4, 32), ir.T(ir.F16, 3, 8, 2, 32), ir.T(ir.F16, 3, 8, 2, 32), ir.T(ir.I32, 2), ir.T(ir.I32, 2)}, f32(2, 4, 32), ""},
		{"attention_rows k, v apart", ir.AttentionRows, nil, []ir.Type{f32(2, 4, 32), ir.T(ir.F16, 3, 8, 2, 32), ir.T(ir.F32, 3, 8, 2, 32), ir.T(ir.I32, 2), ir.T(ir.I32, 2)}, ir.Type{}, "k, v of one dtype"},
		{"attention quantized q", ir.Attention, nil, []ir.Type{ir.T(ir.Q8_0, 1, 4, 32), ir.T(ir.Q8_0, 8, 2, 32), ir.T(ir.Q8_0, 8, 2, 32)}, ir.Type{}, "argument 1 is q8_0"},
	} {
		_, outs, err := ir.Infer(c.op, c.at, c.args)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || !outs[0].Equal(c.want) {
			t.Errorf("%s: %v %v, want %s", c.name, outs, err, c.want)
		}
	}
	if n := ir.T(ir.Q4_K, 3, 512).Bytes(); n != 3*2*144 {
		t.Errorf("q4_k[3,512] is %d bytes", n)
	}
	for _, d := range ir.QuantizedDTypes() {
		if p, err := ir.ParseDType(d.String()); err != nil || p != d || !d.Quantized() || d.Format() == nil || d.Format().Name != d.String() {
			t.Errorf("%s: parse %v %v, format %v", d, p, err, d.Format())
		}
		if got, ok := ir.DTypeOfFormat(d.Format()); !ok || got != d {
			t.Errorf("%s: DTypeOfFormat gives %s", d, got)
		}
	}
}

const quantModel = `model: q
dims: {vocab: 4, d: 32, out: 3, layers: 1}
weights: {file: w.gguf, names: {embed: token_embd.weight, w: blk.0.w, norm: blk.0.norm}}
params:
  embed: q8_0[vocab, d]
  w: q8_0[out, d]
  norm: [d]
functions:
  f:
    inputs: {tokens: "i32[2]"}
    outputs: [y]
    body:
      - y = linear(rmsnorm(embedding(embed, tokens), norm), w)
`

// q8Block is a Q8_0 block with scale d (f16 bits) and quants q0, q0+1, ….
func q8Block(d uint16, q0 int) []byte {
	b := make([]byte, 34)
	binary.LittleEndian.PutUint16(b, d)
	for j := 0; j < 32; j++ {
		b[2+j] = byte(int8(q0 + j))
	}
	return b
}

func writeQuantGGUF(t *testing.T, dir string) {
	t.Helper()
	b := &gguf.Builder{}
	b.Add("general.architecture", gguf.MustValue("test"))
	var emb, w []byte
	for r := 0; r < 4; r++ {
		emb = append(emb, q8Block(0x3800, r*10-20)...) // d = 0.5
	}
	for r := 0; r < 3; r++ {
		w = append(w, q8Block(0x3400, -r*5)...) // d = 0.25
	}
	norm := make([]byte, 4*32)
	for i := 0; i < 32; i++ {
		binary.LittleEndian.PutUint32(norm[4*i:], 0x3f800000)
	}
	b.Tensor("token_embd.weight", quant.Q8_0.GGML, []uint64{32, 4}, emb)
	b.Tensor("blk.0.w", quant.Q8_0.GGML, []uint64{32, 3}, w)
	b.Tensor("blk.0.norm", quant.FormatF32.GGML, []uint64{32}, norm)
	b.Tensor("q4", quant.Q4_0.GGML, []uint64{32, 3}, make([]byte, 3*18))
	b.Tensor("f2d", quant.FormatF32.GGML, []uint64{32, 3}, make([]byte, 3*32*4))
	data, err := b.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "w.gguf"), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestGGUFWeights: a model.yaml reads its parameters from a GGUF file by tensor name; block
// formats stay blocks, and declared float dtypes dequantize.
func TestGGUFWeights(t *testing.T) {
	dir := t.TempDir()
	writeQuantGGUF(t, dir)
	m, err := ir.ParseModelBytes("m.yaml", []byte(quantModel), dir)
	if err != nil {
		t.Fatal(err)
	}
	e := m.Weights["embed"]
	if e.Type.String() != "q8_0[4,32]" || len(e.Data) != 4*34 {
		t.Fatalf("embed: %s, %d bytes", e.Type, len(e.Data))
	}
	// Row 1, column 3: quant 1·10 − 20 + 3 = −7, scale 0.5.
	if v := e.Float64(32 + 3); v != -3.5 {
		t.Errorf("embed[1,3] = %v, want -3.5", v)
	}
	// A float declaration dequantizes.
	src := strings.Replace(quantModel, "embed: q8_0[vocab, d]", "embed: [vocab, d]", 1)
	m2, err := ir.ParseModelBytes("m.yaml", []byte(src), dir)
	if err != nil {
		t.Fatal(err)
	}
	if e2 := m2.Weights["embed"]; e2.Type.DType != ir.F32 || e2.Float64(35) != -3.5 {
		t.Errorf("dequantized embed: %s %v", e2.Type, e2.Float64(35))
	}
	for _, c := range []struct{ name, from, to, want string }{
		{"other format", "w: q8_0[out, d]", "w: q4_k[out, d]", "not a whole number"},
		{"wrong quant", "w: q8_0[out, d]", "w: q4_0[out, d]", "declared q4_0 but blk.0.w in w.gguf is q8_0"},
		{"quant from float", "w: blk.0.w", "w: f2d", "f2d in w.gguf is f32; vkc does not quantize"},
		{"state", "functions:", "state: {s: \"q4_k[2, 256]\"}\nfunctions:", "state cannot be q4_k: a block-quantized state is a KV cache in q8_0 or q4_0"},
		{"input", `tokens: "i32[2]"`, `tokens: "i32[2]", z: "q8_0[1, 32]"`, "an input cannot be q8_0"},
		{"default dtype", "dims:", "dtype: q8_0\ndims:", "default dtype cannot be q8_0"},
		{"random init", "weights: {file: w.gguf, names: {embed: token_embd.weight, w: blk.0.w, norm: blk.0.norm}}",
			"weights: {init: random, seed: 1}", "init random cannot make quantized blocks"},
		{"missing", "w: blk.0.w", "w: blk.0.ww", `missing weight: w.gguf has no tensor "blk.0.ww"`},
		{"bad use", "      - y = linear(", "      - z = add(embed, embed)\n      - y = linear(", "block-quantized weight"},
	} {
		src := strings.Replace(quantModel, c.from, c.to, 1)
		if src == quantModel {
			t.Fatalf("%s: the replacement did not apply", c.name)
		}
		_, err := ir.ParseModelBytes("m.yaml", []byte(src), dir)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}
