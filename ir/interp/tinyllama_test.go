package interp

import (
	"fmt"
	"math"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/safetensors"
)

// The tinyllama oracle (testdata/hf/tinyllama, Hugging Face transformers with random weights),
// built by hand with ir.Builder: an end-to-end check of rmsnorm, rope (rotate-half), grouped-query
// attention over a KV cache, SwiGLU and the Session's state, independent of model.yaml. It is run
// with the fused ops and again with every composite op replaced by its Decompose composition.

const (
	tlVocab, tlD, tlHeads, tlKV, tlHD, tlFFN, tlLayers = 256, 64, 4, 2, 16, 176, 2
	tlCtx                                              = 32 // enough for the 24 positions of the oracle
	tlEps, tlTheta                                     = 1e-5, 10000.0
)

type llamaBuilder struct {
	b         *ir.Builder
	decompose bool
}

func (l *llamaBuilder) op(op ir.Op, a ir.Attrs, args ...ir.Value) ir.Value {
	if l.decompose && op.Info().Composite {
		v, err := ir.Decompose(l.b, op, a, args...)
		if err != nil {
			panic(err)
		}
		return v
	}
	return l.b.MustOp(op, a, args...)
}

func tinyllamaFunction(t *testing.T, name string, seq int, decompose bool) *ir.Function {
	t.Helper()
	l := &llamaBuilder{b: ir.NewBuilder(name), decompose: decompose}
	b := l.b
	w := func(n string, s ...int) ir.Value { return b.Param(n, ir.T(ir.F32, s...)) }
	ids, _ := b.Input("ids", ir.T(ir.I32, seq))
	pos, _ := b.Input("pos", ir.T(ir.I32))
	x := l.op(ir.Embedding, nil, w("model.embed_tokens.weight", tlVocab, tlD), ids)
	kvLen := l.op(ir.Add, nil, pos, b.Scalar(ir.I32, float64(seq)))
	for i := 0; i < tlLayers; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		h := l.op(ir.RMSNorm, ir.Attrs{"eps": tlEps}, x, w(p+"input_layernorm.weight", tlD))
		q := l.op(ir.Reshape, ir.Attrs{"shape": []int{seq, tlHeads, tlHD}}, l.op(ir.Linear, nil, h, w(p+"self_attn.q_proj.weight", tlHeads*tlHD, tlD)))
		k := l.op(ir.Reshape, ir.Attrs{"shape": []int{seq, tlKV, tlHD}}, l.op(ir.Linear, nil, h, w(p+"self_attn.k_proj.weight", tlKV*tlHD, tlD)))
		v := l.op(ir.Reshape, ir.Attrs{"shape": []int{seq, tlKV, tlHD}}, l.op(ir.Linear, nil, h, w(p+"self_attn.v_proj.weight", tlKV*tlHD, tlD)))
		q = l.op(ir.Rope, ir.Attrs{"theta": tlTheta}, q, pos)
		k = l.op(ir.Rope, ir.Attrs{"theta": tlTheta}, k, pos)
		kc := l.op(ir.CacheWrite, nil, b.State(fmt.Sprintf("k_cache.%d", i), ir.T(ir.F32, tlCtx, tlKV, tlHD)), k, pos)
		vc := l.op(ir.CacheWrite, nil, b.State(fmt.Sprintf("v_cache.%d", i), ir.T(ir.F32, tlCtx, tlKV, tlHD)), v, pos)
		if err := b.Update(fmt.Sprintf("k_cache.%d", i), kc); err != nil {
			t.Fatal(err)
		}
		if err := b.Update(fmt.Sprintf("v_cache.%d", i), vc); err != nil {
			t.Fatal(err)
		}
		o := l.op(ir.Attention, ir.Attrs{"causal": true}, q, kc, vc, kvLen)
		o = l.op(ir.Linear, nil, l.op(ir.Reshape, ir.Attrs{"shape": []int{seq, tlD}}, o), w(p+"self_attn.o_proj.weight", tlD, tlD))
		x = l.op(ir.Add, nil, x, o)
		h = l.op(ir.RMSNorm, ir.Attrs{"eps": tlEps}, x, w(p+"post_attention_layernorm.weight", tlD))
		g := l.op(ir.Silu, nil, l.op(ir.Linear, nil, h, w(p+"mlp.gate_proj.weight", tlFFN, tlD)))
		u := l.op(ir.Linear, nil, h, w(p+"mlp.up_proj.weight", tlFFN, tlD))
		x = l.op(ir.Add, nil, x, l.op(ir.Linear, nil, l.op(ir.Mul, nil, g, u), w(p+"mlp.down_proj.weight", tlD, tlFFN)))
	}
	x = l.op(ir.RMSNorm, ir.Attrs{"eps": tlEps}, x, w("model.norm.weight", tlD))
	if err := b.Output("logits", l.op(ir.Linear, nil, x, w("lm_head.weight", tlVocab, tlD))); err != nil {
		t.Fatal(err)
	}
	return b.Function()
}

// tinyllamaModel builds the model with fused ops ("fused"), with each composite op replaced by
// Decompose as it is built ("decompose"), or with the fused functions rewritten by DecomposeAll
// ("decompose-all").
func tinyllamaModel(t *testing.T, form string) *ir.Model {
	t.Helper()
	weights, err := safetensors.ReadAll("../../testdata/hf/tinyllama/weights.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	m := &ir.Model{Name: "tinyllama", Weights: weights}
	fns := []*ir.Function{tinyllamaFunction(t, "prefill", 16, form == "decompose"), tinyllamaFunction(t, "decode", 1, form == "decompose")}
	for i, f := range fns {
		if form == "decompose-all" {
			if fns[i], err = ir.DecomposeAll(f); err != nil {
				t.Fatal(err)
			}
			for _, n := range fns[i].Nodes {
				if n.Op.Info().Composite {
					t.Fatalf("DecomposeAll left %s", n)
				}
			}
		}
	}
	for _, f := range fns {
		m.Functions = append(m.Functions, f)
		for _, n := range f.Nodes {
			switch {
			case n.Op == ir.Param && m.Param(n.Name) == nil:
				m.Params = append(m.Params, &ir.Decl{Name: n.Name, Type: n.Type()})
			case n.Op == ir.State && m.StateDecl(n.Name) == nil:
				m.State = append(m.State, &ir.Decl{Name: n.Name, Type: n.Type()})
			}
		}
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	return m
}

// checkRows applies the oracle's tolerance: per row, max abs error ≤ 1e-4 × the row's largest
// magnitude.
func checkRows(t *testing.T, what string, got, want []float64, width int) {
	t.Helper()
	for r := 0; r < len(want)/width; r++ {
		scale, diff := 0.0, 0.0
		for i := r * width; i < (r+1)*width; i++ {
			scale = math.Max(scale, math.Abs(want[i]))
			diff = math.Max(diff, math.Abs(got[i]-want[i]))
		}
		if !(diff <= 1e-4*scale) {
			t.Errorf("%s row %d: max abs error %.3g, allowed %.3g", what, r, diff, 1e-4*scale)
		}
	}
}

func argmaxRow(v []float64) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

func TestTinyllamaOracle(t *testing.T) {
	golden, err := safetensors.ReadAll("../../testdata/hf/tinyllama/golden.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	for _, form := range []string{"fused", "decompose", "decompose-all"} {
		t.Run(form, func(t *testing.T) {
			s := NewSession(tinyllamaModel(t, form))
			out, err := s.Run("prefill", map[string]*ir.Tensor{"ids": golden["input_ids"], "pos": i32(sh(), 0)})
			if err != nil {
				t.Fatal(err)
			}
			checkRows(t, "prefill logits", out["logits"].Float64s(), golden["prefill_logits"].Float64s(), tlVocab)
			pl := out["logits"].Float64s()
			greedy := []int{argmaxRow(pl[15*tlVocab:])}
			dt, dl := golden["decode_tokens"].Float64s(), golden["decode_logits"].Float64s()
			for i, tok := range dt {
				out, err := s.Run("decode", map[string]*ir.Tensor{"ids": i32(sh(1), tok), "pos": i32(sh(), float64(16+i))})
				if err != nil {
					t.Fatal(err)
				}
				lg := out["logits"].Float64s()
				checkRows(t, fmt.Sprintf("decode step %d logits", i), lg, dl[i*tlVocab:(i+1)*tlVocab], tlVocab)
				greedy = append(greedy, argmaxRow(lg))
			}
			for i, w := range golden["greedy_tokens"].Float64s() {
				if greedy[i] != int(w) {
					t.Errorf("greedy token %d is %d, want %d", i, greedy[i], int(w))
				}
			}
		})
	}
}
