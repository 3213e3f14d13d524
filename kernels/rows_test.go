package kernels_test

import (
	"math/rand"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
)

// rowsOperands gives n rows distinct (slot, position) cells of a [slots, ctx] cache, in a
// scrambled order, with positions spread over the whole context.
func rowsOperands(rng *rand.Rand, n, slots, ctx int) (slot, pos *ir.Tensor) {
	cells := rng.Perm(slots * ctx)[:n]
	s, p := make([]float64, n), make([]float64, n)
	for i, c := range cells {
		s[i], p[i] = float64(c/ctx), float64(c%ctx)
	}
	return ir.TensorFromFloat64s(ir.T(ir.I32, n), s), ir.TensorFromFloat64s(ir.T(ir.I32, n), p)
}

// The batched-step templates against the interpreter, static and with a run-time number of
// rows (the rows past the run poisoned): rope_rows in both modes, cache_scatter (in place, the
// run's rows only), attention_rows with grouped-query heads, f32 and f16, a window, and
// configurations whose key tiles are smaller and larger than the keys.
func TestRowsTemplates(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	const slots, ctx = 3, 37
	type tc struct {
		name  string
		tmpl  *kernels.Template
		op    ir.Op
		attrs ir.Attrs
		args  []ir.Type
		rows  bool // bounded: args 0.. marked below, checked at n = 1, 4, 7
		cfgs  []kernels.Config
	}
	f32, f16, i32 := ir.F32, ir.F16, ir.I32
	const n = 7
	cases := []tc{
		{"rope_rows half", kernels.RopeRows, ir.RopeRows, ir.Attrs{"theta": 10000.0}, []ir.Type{ir.T(f32, n, 3, 8), ir.T(i32, n)}, true, nil},
		{"rope_rows interleaved f16", kernels.RopeRows, ir.RopeRows, ir.Attrs{"theta": 500.0, "mode": "interleaved"}, []ir.Type{ir.T(f16, n, 2, 6), ir.T(i32, n)}, false, nil},
		{"cache_scatter f32", kernels.CacheScatter, ir.CacheScatter, nil, []ir.Type{ir.T(f32, slots, ctx, 2, 4), ir.T(f32, n, 2, 4), ir.T(i32, n), ir.T(i32, n)}, true, nil},
		{"cache_scatter f16", kernels.CacheScatter, ir.CacheScatter, nil, []ir.Type{ir.T(f16, slots, ctx, 2, 4), ir.T(f16, n, 2, 4), ir.T(i32, n), ir.T(i32, n)}, false, nil},
		{"attention_rows gqa", kernels.AttentionRows, ir.AttentionRows, ir.Attrs{"scale": 0.35},
			[]ir.Type{ir.T(f32, n, 6, 8), ir.T(f32, slots, ctx, 2, 8), ir.T(f32, slots, ctx, 2, 8), ir.T(i32, n), ir.T(i32, n)}, true,
			[]kernels.Config{nil, {"wg": 32, "block_k": 16, "block_r": 1}, {"wg": 128, "block_k": 64, "block_r": 4}}},
		{"attention_rows f16 window dv", kernels.AttentionRows, ir.AttentionRows, ir.Attrs{"window": 5},
			[]ir.Type{ir.T(f16, n, 2, 8), ir.T(f16, slots, ctx, 1, 8), ir.T(f16, slots, ctx, 1, 6), ir.T(i32, n), ir.T(i32, n)}, false, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := opProblem(t, c.op, c.attrs, c.args...)
			var vals []*ir.Tensor
			for i, a := range c.args {
				if a.DType == i32 {
					continue
				}
				vals = append(vals, kerneltest.Random(rng, a))
				_ = i
			}
			slot, pos := rowsOperands(rng, n, slots, ctx)
			switch c.op {
			case ir.RopeRows:
				vals = append(vals, pos)
			case ir.CacheScatter:
				vals = append(vals, slot, pos)
			case ir.AttentionRows:
				vals = append(vals, slot, pos)
			}
			cfgs := c.cfgs
			if cfgs == nil {
				cfgs = []kernels.Config{nil}
			}
			for _, cfg := range cfgs {
				kerneltest.Check(t, c.tmpl, p, cfg, vals)
			}
			if !c.rows {
				return
			}
			// The same problem as part of a function of up to n rows.
			var bArgs, bOuts []int
			switch c.op {
			case ir.RopeRows:
				bArgs, bOuts = []int{0, 1}, []int{0}
			case ir.CacheScatter:
				bArgs = []int{1, 2, 3}
			case ir.AttentionRows:
				bArgs, bOuts = []int{0, 3, 4}, []int{0}
			}
			bp := bounded(opProblem(t, c.op, c.attrs, c.args...), n, bArgs, bOuts, c.op == ir.CacheScatter)
			ts, err := kernels.For(bp, kerneltest.CapsOf(&kerneltest.Device(t).Info))
			if err != nil || len(ts) != 1 || ts[0] != c.tmpl {
				t.Fatalf("templates for the bounded problem: %v %v", kerneltest.Names(ts), err)
			}
			kerneltest.CheckAtWith(t, c.tmpl, bp, nil, vals, []int{1, 4, n}, kerneltest.CapsOf(&kerneltest.Device(t).Info))
		})
	}
}
