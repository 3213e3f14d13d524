package rules

import (
	"context"
	"math/rand"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
)

func randomBlocks(r *rand.Rand, t ir.Type) *ir.Tensor {
	f := t.DType.Format()
	return &ir.Tensor{Type: t, Data: f.RandomBlocks(r, t.Bytes()/f.BlockBytes)}
}

// TestMergeLinearsQuantized: merge-linears joins block-quantized weights of one format row-wise
// (the concat of their blocks), and does not fire for weights of different formats (llama.cpp's
// Q4_K_M mix gives one layer's attn_v Q6_K beside Q4_K q and k). Both sides are evaluated.
func TestMergeLinearsQuantized(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	w := map[string]*ir.Tensor{
		"wq": randomBlocks(r, ir.T(ir.Q4_K, 64, 256)),
		"wk": randomBlocks(r, ir.T(ir.Q4_K, 32, 256)),
		"wv": randomBlocks(r, ir.T(ir.Q6_K, 32, 256)),
	}
	b := ir.NewBuilder("f")
	x, _ := b.Input("x", ir.T(ir.F32, 3, 256))
	for _, n := range []string{"wq", "wk", "wv"} {
		b.Output("y"+n[1:], b.MustOp(ir.Linear, nil, x, b.Param(n, w[n].Type)))
	}
	f := b.Function()
	m := &ir.Model{Name: "q", Functions: []*ir.Function{f}, Weights: w}
	for _, n := range []string{"wq", "wk", "wv"} {
		m.Params = append(m.Params, &ir.Decl{Name: n, Type: w[n].Type})
	}
	g, rep, err := Optimize(context.Background(), m, f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	applied := 0
	for _, s := range rep.Rules {
		if s.Name == "merge-linears" {
			applied = s.Applied
		}
	}
	if applied == 0 {
		t.Errorf("merge-linears did not fire on two q4_k weights")
	}
	// The extracted graph reads q and k through one concatenation of q4_k blocks, v alone.
	var cats []*ir.Node
	for _, n := range g.Nodes {
		if n.Op == ir.Concat {
			cats = append(cats, n)
			for _, a := range n.Args {
				if a.Type().DType != ir.Q4_K {
					t.Errorf("concat %s joins %s", n, a.Type())
				}
			}
		}
	}
	if len(cats) != 1 || cats[0].Type().String() != "q4_k[96,256]" {
		t.Errorf("concats %v, want one q4_k[96,256]", cats)
	}
	in := map[string]*ir.Tensor{"x": ir.TensorFromFloat64s(ir.T(ir.F32, 3, 256), randVals(r, 3*256))}
	outs := func(fn *ir.Function) []*ir.Tensor {
		var vs []ir.Value
		for _, o := range fn.Outputs {
			vs = append(vs, o.Value)
		}
		ts, err := interp.EvalValues(fn, interp.Env{Inputs: in, Params: w}, vs...)
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}
	want, got := outs(f), outs(g)
	for k, v := range want {
		for i, x := range v.Float64s() {
			if y := got[k].Float64(i); x != y {
				t.Fatalf("output %s[%d]: %v after merging, %v before", f.Outputs[k].Name, i, y, x)
			}
		}
	}
}

func randVals(r *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = r.Float64()*2 - 1
	}
	return v
}
