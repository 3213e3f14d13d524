package ir_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
)

type decCase struct {
	name  string
	op    ir.Op
	attrs ir.Attrs
	args  []*ir.Tensor
}

func rnd(rng *rand.Rand, t ir.Type, r float64) *ir.Tensor {
	v := make([]float64, t.Shape.NumElements())
	for i := range v {
		v[i] = (rng.Float64()*2 - 1) * r
	}
	return ir.TensorFromFloat64s(t, v)
}

func scalar(d ir.DType, v float64, shape ...int) *ir.Tensor {
	return ir.TensorFromFloat64s(ir.Type{DType: d, Shape: shape}, []float64{v})
}

// decCases returns the composite-op cases of one float dtype: odd sizes, head counts that are
// not powers of two, both rope modes and seq axes, every attention mask.
func decCases(rng *rand.Rand, dt ir.DType) []decCase {
	T := func(s ...int) ir.Type { return ir.Type{DType: dt, Shape: s} }
	var cs []decCase
	add := func(name string, op ir.Op, attrs ir.Attrs, args ...*ir.Tensor) {
		cs = append(cs, decCase{name, op, attrs, args})
	}
	for _, op := range []ir.Op{ir.Silu, ir.Gelu, ir.GeluTanh} {
		add("", op, nil, rnd(rng, T(3, 7), 5))
		add("rank 1", op, nil, rnd(rng, T(11), 3))
	}
	add("1d", ir.Softmax, nil, rnd(rng, T(5), 4))
	add("axis 0", ir.Softmax, ir.Attrs{"axis": 0}, rnd(rng, T(3, 7), 4))
	add("axis 1 of 3", ir.Softmax, ir.Attrs{"axis": 1}, rnd(rng, T(2, 3, 5), 4))
	add("", ir.RMSNorm, ir.Attrs{"eps": 1e-6}, rnd(rng, T(3, 7), 3), rnd(rng, T(7), 2))
	add("rank 3", ir.RMSNorm, nil, rnd(rng, T(2, 3, 9), 3), rnd(rng, T(9), 2))
	add("", ir.LayerNorm, nil, rnd(rng, T(2, 3, 9), 3), rnd(rng, T(9), 2), rnd(rng, T(9), 1))
	add("eps", ir.LayerNorm, ir.Attrs{"eps": 0.1}, rnd(rng, T(5), 3), rnd(rng, T(5), 2), rnd(rng, T(5), 1))
	pos := func(n int) *ir.Tensor { // a positive variance
		v := rnd(rng, T(n), 1).Float64s()
		for i := range v {
			v[i] = math.Abs(v[i]) + 0.05
		}
		return ir.TensorFromFloat64s(T(n), v)
	}
	add("nchw", ir.BatchNorm, nil, rnd(rng, T(2, 3, 4, 5), 3), rnd(rng, T(3), 2), rnd(rng, T(3), 1), rnd(rng, T(3), 1), pos(3))
	add("nhwc eps", ir.BatchNorm, ir.Attrs{"layout": "nhwc", "eps": 0.01}, rnd(rng, T(2, 4, 5, 3), 3), rnd(rng, T(3), 2), rnd(rng, T(3), 1), rnd(rng, T(3), 1), pos(3))
	add("rank 2", ir.BatchNorm, nil, rnd(rng, T(4, 7), 3), rnd(rng, T(7), 2), rnd(rng, T(7), 1), rnd(rng, T(7), 1), pos(7))
	add("rank 1", ir.Linear, nil, rnd(rng, T(9), 1), rnd(rng, T(7, 9), 1))
	add("bias", ir.Linear, nil, rnd(rng, T(3, 5), 1), rnd(rng, T(7, 5), 1), rnd(rng, T(7), 1))
	add("rank 3", ir.Linear, nil, rnd(rng, T(2, 3, 5), 1), rnd(rng, T(7, 5), 1))
	for _, mode := range []string{"half", "interleaved"} {
		add(mode+" [s,h,d]", ir.Rope, ir.Attrs{"mode": mode}, rnd(rng, T(5, 3, 6), 2), scalar(ir.I32, 13))
		add(mode+" seq_axis 1", ir.Rope, ir.Attrs{"mode": mode, "seq_axis": 1, "theta": 1e6}, rnd(rng, T(3, 5, 10), 2), scalar(ir.I32, 0, 1))
		add(mode+" [s,d] u32 pos", ir.Rope, ir.Attrs{"mode": mode, "theta": 500.0}, rnd(rng, T(7, 2), 2), scalar(ir.U32, 40))
		add(mode+" decode", ir.Rope, ir.Attrs{"mode": mode, "theta": 100000.0}, rnd(rng, T(1, 9, 14), 2), scalar(ir.I32, 57))
		add(mode+" linear", ir.Rope, ir.Attrs{"mode": mode, "scaling": "linear", "factor": 2.5}, rnd(rng, T(3, 2, 8), 2), scalar(ir.I32, 9))
		add(mode+" llama3", ir.Rope, ir.Attrs{"mode": mode, "theta": 10000.0, "scaling": "llama3", "factor": 8.0, "high_freq_factor": 40.0, "original_ctx": 1000},
			rnd(rng, T(4, 3, 10), 2), scalar(ir.I32, 300))
	}
	for _, c := range []struct {
		sq, skv, hq, hkv, d, dv int
		attrs                   ir.Attrs
		kvLen                   int // 0: no kv_len argument
	}{
		{4, 4, 6, 3, 5, 5, ir.Attrs{"causal": true}, 0},                      // prefill, GQA group 2
		{1, 11, 9, 3, 6, 6, ir.Attrs{"causal": true}, 7},                     // decode over a cache
		{4, 10, 5, 1, 4, 3, ir.Attrs{"causal": true}, 6},                     // multi-query, chunked prefill
		{6, 6, 3, 3, 7, 7, ir.Attrs{"causal": true, "window": 3}, 0},         // sliding window
		{5, 9, 6, 2, 4, 4, ir.Attrs{"window": 2}, 8},                         // window without causal
		{3, 7, 3, 3, 5, 2, nil, 0},                                           // cross attention
		{3, 8, 6, 2, 5, 5, ir.Attrs{"scale": 0.3}, 5},                        // kv_len only
		{4, 4, 6, 3, 5, 5, ir.Attrs{"causal": true, "layout": "hsd"}, 0},     // heads first
		{2, 9, 10, 5, 3, 4, ir.Attrs{"causal": true, "layout": "hsd"}, 9},    // hsd with kv_len
		{1, 1, 7, 7, 3, 3, ir.Attrs{"causal": true, "window": 4}, 1},         // one key
		{3, 12, 4, 2, 8, 8, ir.Attrs{"causal": true, "scale": 0.125}, 12},    // kv_len = all keys
		{2, 12, 15, 5, 4, 4, ir.Attrs{"causal": true, "window": 5}, 11},      // everything
		{1, 16, 3, 1, 16, 16, ir.Attrs{"causal": true, "layout": "shd"}, 16}, // decode at the end
	} {
		shp := func(s, h, f int) ir.Type {
			if c.attrs.String("layout", "shd") == "hsd" {
				return T(h, s, f)
			}
			return T(s, h, f)
		}
		args := []*ir.Tensor{rnd(rng, shp(c.sq, c.hq, c.d), 2), rnd(rng, shp(c.skv, c.hkv, c.d), 2), rnd(rng, shp(c.skv, c.hkv, c.dv), 2)}
		if c.kvLen > 0 {
			args = append(args, scalar(ir.I32, float64(c.kvLen)))
		}
		add(fmt.Sprintf("sq%d skv%d hq%d hkv%d %s kv_len %d", c.sq, c.skv, c.hq, c.hkv, c.attrs.Key(), c.kvLen), ir.Attention, c.attrs, args...)
	}
	return cs
}

// TestDecomposeAgreesWithFusedOp evaluates each composite op and its composition in the
// interpreter and compares them. This is what lets the e-graph rules that recognise
// compositions be trusted: both sides compute the same function.
func TestDecomposeAgreesWithFusedOp(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 7))
	covered := map[ir.Op]bool{}
	for _, dt := range []struct {
		d   ir.DType
		tol float64
	}{{ir.F32, 2e-5}, {ir.F16, 1.5e-2}, {ir.BF16, 8e-2}} {
		for _, c := range decCases(rng, dt.d) {
			name := fmt.Sprintf("%s/%s/%s", dt.d, c.op, c.name)
			t.Run(name, func(t *testing.T) {
				covered[c.op] = true
				b := ir.NewBuilder("dec")
				in := map[string]*ir.Tensor{}
				vs := make([]ir.Value, len(c.args))
				for i, a := range c.args {
					name := fmt.Sprintf("a%d", i)
					vs[i], _ = b.Input(name, a.Type)
					in[name] = a
				}
				fused, err := b.Op(c.op, c.attrs, vs...)
				if err != nil {
					t.Fatal(err)
				}
				first := len(b.Function().Nodes)
				dec, err := ir.Decompose(b, c.op, c.attrs, vs...)
				if err != nil {
					t.Fatal(err)
				}
				if !dec.Type().Equal(fused.Type()) {
					t.Fatalf("composition is %s, fused op %s", dec.Type(), fused.Type())
				}
				for _, n := range b.Function().Nodes[first:] {
					if n.Op.Info().Composite {
						t.Errorf("composition contains the composite op %s", n)
					}
				}
				out, err := interp.EvalValues(b.Function(), interp.Env{Inputs: in}, fused, dec)
				if err != nil {
					t.Fatal(err)
				}
				if e := relErr(out[1], out[0]); !(e <= dt.tol) {
					t.Errorf("composition differs from the fused op by %g (tol %g)\n fused %v\n comp  %v", e, dt.tol, head(out[0]), head(out[1]))
				}
			})
		}
	}
	for _, op := range ir.Ops() {
		if op.Info().Composite && !covered[op] {
			t.Errorf("composite op %s has no decomposition case", op)
		}
	}
}

// relErr is max |a-b| over max(1, max |b|).
func relErr(a, b *ir.Tensor) float64 {
	m, scale := 0.0, 1.0
	for i := 0; i < b.NumElements(); i++ {
		scale = math.Max(scale, math.Abs(b.Float64(i)))
		d := math.Abs(a.Float64(i) - b.Float64(i))
		if math.IsNaN(d) {
			return math.NaN()
		}
		m = math.Max(m, d)
	}
	return m / scale
}

func head(x *ir.Tensor) []float64 {
	v := x.Float64s()
	return v[:min(len(v), 12)]
}

func TestDecomposeErrors(t *testing.T) {
	b := ir.NewBuilder("e")
	x, _ := b.Input("x", ir.T(ir.F32, 3, 4))
	w, _ := b.Input("w", ir.T(ir.F32, 5))
	for _, c := range []struct {
		op   ir.Op
		args []ir.Value
		want string
	}{
		{ir.Add, []ir.Value{x, x}, "add is not a composite op"},
		{ir.RMSNorm, []ir.Value{x, w}, "parameter 2 must be [4]"},
		{ir.Softmax, []ir.Value{x, x}, "softmax takes 1 arguments, got 2"},
	} {
		_, err := ir.Decompose(b, c.op, nil, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.op, err, c.want)
		}
	}
}

// DecomposeAll keeps the signature order, names, outputs and updates and leaves no composite
// op; the rewritten function computes the same outputs and state.
func TestDecomposeAllKeepsTheFunction(t *testing.T) {
	b := ir.NewBuilder("f")
	pos, _ := b.Input("pos", ir.T(ir.I32))
	x, _ := b.Input("x", ir.T(ir.F32, 3, 2, 4))
	w := b.Param("w", ir.T(ir.F32, 4))
	h := b.MustOp(ir.RMSNorm, nil, x, w)
	b.Name(h, "h")
	r := b.MustOp(ir.Rope, nil, h, pos)
	c := b.MustOp(ir.CacheWrite, nil, b.State("cache", ir.T(ir.F32, 5, 2, 4)), r, pos)
	if err := b.Update("cache", c); err != nil {
		t.Fatal(err)
	}
	if err := b.Output("y", b.MustOp(ir.Silu, nil, r)); err != nil {
		t.Fatal(err)
	}
	f := b.Function()
	g, err := ir.DecomposeAll(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Inputs) != 2 || g.Inputs[0].Name != "pos" || g.Inputs[1].Name != "x" {
		t.Errorf("inputs %v, want pos then x", g.Inputs)
	}
	named := false
	for _, n := range g.Nodes {
		if n.Op.Info().Composite {
			t.Errorf("composite node left: %s", n)
		}
		named = named || n.Name == "h"
	}
	if !named {
		t.Error("the name h was lost")
	}
	if len(g.Outputs) != 1 || g.Outputs[0].Name != "y" || len(g.Updates) != 1 || g.Updates[0].Name != "cache" {
		t.Fatalf("outputs %v, updates %v", g.Outputs, g.Updates)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	env := interp.Env{
		Inputs: map[string]*ir.Tensor{"pos": scalar(ir.I32, 2), "x": rnd(rng, ir.T(ir.F32, 3, 2, 4), 2)},
		Params: map[string]*ir.Tensor{"w": rnd(rng, ir.T(ir.F32, 4), 2)},
		State:  map[string]*ir.Tensor{"cache": rnd(rng, ir.T(ir.F32, 5, 2, 4), 2)},
	}
	want, err := interp.EvalValues(f, env, f.Outputs[0].Value, f.Updates[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	got, err := interp.EvalValues(g, env, g.Outputs[0].Value, g.Updates[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if e := relErr(got[i], want[i]); !(e < 1e-5) {
			t.Errorf("result %d differs by %g", i, e)
		}
	}
}
