package rules

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
)

// TestAttentionReadsOperandsWhereTheyLie: with the whole rule set and the static cost, an
// attention whose operands a model transposes into one layout reads each where it lies — q from
// a projection (shd) over heads-first k and v, and K given transposed (Whisper's
// permute(0, 2, 3, 1)), written with the op or as its composition — with no transpose left,
// computing what the graph as written computes.
func TestAttentionReadsOperandsWhereTheyLie(t *testing.T) {
	const sq, hq, skv, hkv, d = 5, 6, 9, 3, 4
	heads := ir.Attrs{"perm": []int{1, 0, 2}}
	for _, c := range []struct {
		name  string
		build func(b *ir.Builder, q, k, v ir.Value) ir.Value
		k     ir.Type
		want  ir.AttnLayouts
	}{
		{"q projection, k v heads-first", func(b *ir.Builder, q, k, v ir.Value) ir.Value {
			return b.MustOp(ir.Attention, ir.Attrs{"causal": true}, q, b.MustOp(ir.Transpose, heads, k), b.MustOp(ir.Transpose, heads, v))
		}, ir.T(ir.F32, hkv, skv, d), ir.AttnLayouts{Q: "shd", K: "hsd", V: "hsd"}},
		{"K transposed", func(b *ir.Builder, q, k, v ir.Value) ir.Value {
			kh := b.MustOp(ir.Transpose, ir.Attrs{"perm": []int{0, 2, 1}}, k)
			return b.MustOp(ir.Attention, ir.Attrs{"k_layout": "hsd", "v_layout": "hsd"}, q, kh, v)
		}, ir.T(ir.F32, hkv, d, skv), ir.AttnLayouts{Q: "shd", K: "hds", V: "hsd"}},
		{"K transposed, as primitives", func(b *ir.Builder, q, k, v ir.Value) ir.Value {
			out, err := ir.Decompose(b, ir.Attention, ir.Attrs{"k_layout": "hds", "v_layout": "hsd", "scale": 0.3}, q, k, v)
			if err != nil {
				t.Fatal(err)
			}
			return out
		}, ir.T(ir.F32, hkv, d, skv), ir.AttnLayouts{Q: "shd", K: "hds", V: "hsd"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 5))
			env := interp.Env{Inputs: map[string]*ir.Tensor{}}
			b := ir.NewBuilder("f")
			in := func(name string, ty ir.Type) ir.Value {
				v, err := b.Input(name, ty)
				if err != nil {
					t.Fatal(err)
				}
				vals := make([]float64, ty.Shape.NumElements())
				for i := range vals {
					vals[i] = rng.NormFloat64()
				}
				env.Inputs[name] = ir.TensorFromFloat64s(ty, vals)
				return v
			}
			q, k, v := in("q", ir.T(ir.F32, sq, hq, d)), in("k", c.k), in("v", ir.T(ir.F32, hkv, skv, d))
			if err := b.Output("a", c.build(b, q, k, v)); err != nil {
				t.Fatal(err)
			}
			f := b.Function()
			g, _, err := Optimize(context.Background(), nil, f, Options{})
			if err != nil {
				t.Fatal(err)
			}
			var got []ir.AttnLayouts
			for _, n := range g.Nodes {
				switch n.Op {
				case ir.Attention:
					got = append(got, ir.AttentionLayouts(n.Attrs))
				case ir.Transpose, ir.Matmul:
					t.Errorf("%s left in the extraction:\n%s", n.Op, funcString(g))
				}
			}
			if len(got) != 1 || got[0] != c.want {
				t.Errorf("attention layouts %v, want [%v]:\n%s", got, c.want, funcString(g))
			}
			want, have := evalOutputs(t, f, env), evalOutputs(t, g, env)
			if err := closeEnough(have[0], want[0], 1e-5); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestNoTransposedCacheOffered: the layout rules offer no other layout of a KV cache behind a
// transpose (a copy of the whole cache per call): tinyllama's decode saturates without one
// application of a k or v -rev rule, where Whisper's encoder, whose k and v are projections,
// gets them.
func TestNoTransposedCacheOffered(t *testing.T) {
	rev := func(path, fn string) int {
		m, err := ir.ParseModelWith(path, ir.ParseOptions{SkipWeights: true})
		if err != nil {
			t.Fatal(err)
		}
		_, rep, err := Optimize(context.Background(), m, m.Function(fn), Options{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range rep.Rules {
			if (strings.HasPrefix(r.Name, "attention-k-") || strings.HasPrefix(r.Name, "attention-v-")) && strings.HasSuffix(r.Name, "-rev") {
				n += r.Applied
			}
		}
		return n
	}
	if n := rev("../examples/tinyllama/model.yaml", "decode"); n != 0 {
		t.Errorf("k and v -rev rules applied %d times to tinyllama's decode (its k and v are caches)", n)
	}
	if n := rev("../examples/whisper-tiny-encoder/model.yaml", "encode"); n == 0 {
		t.Errorf("no k or v -rev rule applied to Whisper's encoder (its k and v are projections)")
	}
}

// TestWhisperKTransposedCandidate: among the diverse extractions of Whisper's encoder is one
// whose attention reads K transposed (k_layout hds) straight from the projection — the product
// written transposed (matmul-transpose-out, transpose-split), no transpose kernel in between —
// and it computes what the encoder as written computes.
func TestWhisperKTransposedCandidate(t *testing.T) {
	m, err := ir.ParseModel("../examples/whisper-tiny-encoder/model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f := m.Function("encode")
	cands, _, err := OptimizeK(context.Background(), m, f, Options{}, 4)
	if err != nil {
		t.Fatal(err)
	}
	var found *ir.Function
	for _, g := range cands {
		for _, n := range g.Nodes {
			if n.Op != ir.Attention || ir.AttentionLayouts(n.Attrs).K != "hds" {
				continue
			}
			k := n.Args[1].Node
			if k.Op == ir.Reshape && (k.Args[0].Node.Op == ir.Linear || k.Args[0].Node.Op == ir.Matmul) {
				found = g
			}
		}
	}
	if found == nil {
		t.Fatalf("no candidate of %d reads K transposed from the projection", len(cands))
	}
	inputs := randomInputs(m, f, rand.New(rand.NewPCG(1, 2)))
	want, _, err := interp.Run(m, f.Name, inputs, nil)
	if err != nil {
		t.Fatal(err)
	}
	om := &ir.Model{Name: m.Name, Params: m.Params, State: m.State, Weights: m.Weights, Functions: []*ir.Function{found}}
	got, _, err := interp.Run(om, f.Name, inputs, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, w := range want {
		if err := closeEnough(got[k], w, 1e-4); err != nil {
			t.Errorf("output %s: %v", k, err)
		}
	}
}

// TestTransposedProductOfTwoDTypes: f32 rows times f16 weights, transposed, keep their f32 result:
// matmul-transpose-out would make the f16 weights the first operand (an f16 result), so it does
// not apply, and the optimiser neither fails on the types nor changes the value.
func TestTransposedProductOfTwoDTypes(t *testing.T) {
	b := ir.NewBuilder("f")
	x, _ := b.Input("x", ir.T(ir.F32, 3, 4))
	w, _ := b.Input("w", ir.T(ir.F16, 5, 4))
	y := b.MustOp(ir.Transpose, ir.Attrs{"perm": []int{1, 0}}, b.MustOp(ir.Linear, nil, x, w))
	if err := b.Output("y", y); err != nil {
		t.Fatal(err)
	}
	g, rep, err := Optimize(context.Background(), nil, b.Function(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Rules {
		if r.Name == "matmul-transpose-out" && r.Applied > 0 {
			t.Errorf("matmul-transpose-out applied to f32 rows and f16 weights")
		}
	}
	if got := g.Outputs[0].Value.Type(); !got.Equal(ir.T(ir.F32, 5, 3)) {
		t.Errorf("result %s, want f32[5,3]", got)
	}
}
