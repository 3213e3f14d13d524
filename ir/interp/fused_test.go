package interp

import (
	"math"
	"math/rand"
	"testing"

	"github.com/vkc-project/vkc/ir"
)

// Each fused op must equal its composition (ir/fused.go) on random values of odd sizes.
func TestFusedOpsEqualCompositions(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	randT := func(ty ir.Type) *ir.Tensor {
		v := make([]float64, ty.Shape.NumElements())
		for i := range v {
			v[i] = rng.NormFloat64()
		}
		return ir.TensorFromFloat64s(ty, v)
	}
	type build func(b *ir.Builder, in []ir.Value) (fused, composed []ir.Value)
	pos := ir.T(ir.I32)
	cases := []struct {
		name string
		ins  []ir.Type
		f    build
	}{
		{"add_rmsnorm", []ir.Type{ir.T(ir.F32, 3, 7), ir.T(ir.F32, 3, 7), ir.T(ir.F32, 7)}, func(b *ir.Builder, in []ir.Value) ([]ir.Value, []ir.Value) {
			f := b.MustOp(ir.AddRMSNorm, ir.Attrs{"eps": 1e-6}, in...)
			s := b.MustOp(ir.Add, nil, in[0], in[1])
			return []ir.Value{f, {Node: f.Node, Out: 1}}, []ir.Value{s, b.MustOp(ir.RMSNorm, ir.Attrs{"eps": 1e-6}, s, in[2])}
		}},
		{"rmsnorm_linear", []ir.Type{ir.T(ir.F32, 5, 9), ir.T(ir.F32, 9), ir.T(ir.F32, 11, 9)}, func(b *ir.Builder, in []ir.Value) ([]ir.Value, []ir.Value) {
			f := b.MustOp(ir.RMSNormLinear, nil, in...)
			h := b.MustOp(ir.RMSNorm, nil, in[0], in[1])
			return []ir.Value{f}, []ir.Value{b.MustOp(ir.Linear, nil, h, in[2])}
		}},
		{"rope_norm", []ir.Type{ir.T(ir.F32, 3, 5, 6), ir.T(ir.F32, 6), pos}, func(b *ir.Builder, in []ir.Value) ([]ir.Value, []ir.Value) {
			at := ir.Attrs{"theta": 500.0, "mode": "interleaved"}
			f := b.MustOp(ir.RopeNorm, ir.Attrs{"theta": 500.0, "mode": "interleaved", "eps": 1e-6}, in...)
			h := b.MustOp(ir.RMSNorm, ir.Attrs{"eps": 1e-6}, in[0], in[1])
			return []ir.Value{f}, []ir.Value{b.MustOp(ir.Rope, at, h, in[2])}
		}},
		{"rope_cache_write", []ir.Type{ir.T(ir.F32, 9, 3, 4), ir.T(ir.F32, 2, 3, 4), pos}, func(b *ir.Builder, in []ir.Value) ([]ir.Value, []ir.Value) {
			f := b.MustOp(ir.RopeCacheWrite, ir.Attrs{"theta": 100.0}, in...)
			r := b.MustOp(ir.Rope, ir.Attrs{"theta": 100.0}, in[1], in[2])
			return []ir.Value{f}, []ir.Value{b.MustOp(ir.CacheWrite, nil, in[0], r, in[2])}
		}},
		{"moe_linear_sum", []ir.Type{ir.T(ir.F32, 3, 2, 6), ir.T(ir.F32, 4, 5, 6), ir.T(ir.F32, 3, 4)}, func(b *ir.Builder, in []ir.Value) ([]ir.Value, []ir.Value) {
			r := b.MustOp(ir.MoeRoute, ir.Attrs{"k": 2}, in[2])
			w := ir.Value{Node: r.Node, Out: 1}
			f := b.MustOp(ir.MoeLinearSum, nil, in[0], in[1], r, w)
			return []ir.Value{f}, []ir.Value{b.MustOp(ir.MoeSum, nil, b.MustOp(ir.MoeLinear, nil, in[0], in[1], r), w)}
		}},
		{"moe_glu", []ir.Type{ir.T(ir.F32, 3, 6), ir.T(ir.F32, 4, 5, 6), ir.T(ir.F32, 4, 5, 6), ir.T(ir.F32, 3, 4)}, func(b *ir.Builder, in []ir.Value) ([]ir.Value, []ir.Value) {
			r := b.MustOp(ir.MoeRoute, ir.Attrs{"k": 2}, in[3])
			f := b.MustOp(ir.MoeGLU, ir.Attrs{"act": "gelu_tanh"}, in[0], in[1], in[2], r)
			g := b.MustOp(ir.GeluTanh, nil, b.MustOp(ir.MoeLinear, nil, in[0], in[1], r))
			return []ir.Value{f}, []ir.Value{b.MustOp(ir.Mul, nil, g, b.MustOp(ir.MoeLinear, nil, in[0], in[2], r))}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := ir.NewBuilder(c.name)
			env := Env{Inputs: map[string]*ir.Tensor{}}
			var in []ir.Value
			for i, ty := range c.ins {
				name := string(rune('a' + i))
				v, _ := b.Input(name, ty)
				in = append(in, v)
				if ty.Equal(pos) {
					env.Inputs[name] = ir.TensorFromFloat64s(ty, []float64{4})
				} else {
					env.Inputs[name] = randT(ty)
				}
			}
			fused, comp := c.f(b, in)
			got, err := EvalValues(b.Function(), env, append(fused, comp...)...)
			if err != nil {
				t.Fatal(err)
			}
			for i := range fused {
				x, y := got[i].Float64s(), got[len(fused)+i].Float64s()
				for j := range x {
					if math.Abs(x[j]-y[j]) > 1e-6*(1+math.Abs(y[j])) {
						t.Fatalf("output %d element %d: fused %g, composition %g", i, j, x[j], y[j])
					}
				}
			}
		})
	}
}
