package kernels_test

import (
	"math/rand"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
)

// silu(a)·b + bias with broadcasting, an f16 input, a comparison and a where: one kernel.
func TestElementwiseFusedOnDevice(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	a := ir.T(ir.F32, 3, 37)
	bt := ir.T(ir.F16, 3, 37)
	bias := ir.T(ir.F32, 37)
	f := &kernels.Fused{
		Inputs: []ir.Type{a, bt, bias},
		Nodes: []kernels.FusedNode{
			{Op: ir.Input, Index: 0, DType: ir.F32},
			{Op: ir.Input, Index: 1, DType: ir.F16},
			{Op: ir.Input, Index: 2, DType: ir.F32},
			{Op: ir.Silu, Args: []int{0}, DType: ir.F32},
			{Op: ir.Cast, Attrs: ir.Attrs{"to": "f32"}, Args: []int{1}, DType: ir.F32},
			{Op: ir.Mul, Args: []int{3, 4}, DType: ir.F32},
			{Op: ir.Add, Args: []int{5, 2}, DType: ir.F32},
			{Op: ir.Const, Value: 0, DType: ir.F32},
			{Op: ir.Gt, Args: []int{6, 7}, DType: ir.Bool},
			{Op: ir.Gelu, Args: []int{6}, DType: ir.F32},
			{Op: ir.Where, Args: []int{8, 6, 9}, DType: ir.F32},
			{Op: ir.Cast, Attrs: ir.Attrs{"to": "f16"}, Args: []int{10}, DType: ir.F16},
		},
		Outputs: []int{10, 11, 8},
	}
	p := &kernels.Problem{Op: kernels.FusedElementwise, Args: f.Inputs, Expr: f,
		Outs: []ir.Type{ir.T(ir.F32, 3, 37), ir.T(ir.F16, 3, 37), ir.T(ir.Bool, 3, 37)}}
	args := []*ir.Tensor{kerneltest.Random(rng, a), kerneltest.Random(rng, bt), kerneltest.Random(rng, bias)}
	for _, c := range []kernels.Config{nil, {"wg": 64, "per_thread": 4}} {
		kerneltest.Check(t, kernels.Elementwise, p, c, args)
	}
}

// Integer powers, i32 with negative bases and exponents (and the interpreter's wrap-around past
// 2³¹) and u32, against the interpreter.
func TestElementwiseIntPowOnDevice(t *testing.T) {
	for _, d := range []ir.DType{ir.I32, ir.U32} {
		x, y := ir.T(d, 12), ir.T(d, 12)
		xs := []float64{2, -3, 1, -1, -1, 0, 5, 7, -2, 3, 2, 10}
		ys := []float64{10, 3, -4, -3, -2, 3, 0, 12, 31, -1, 33, 9}
		if d == ir.U32 {
			for i := range xs {
				xs[i], ys[i] = float64(int(xs[i]+4)), float64(int(ys[i]+5))
			}
		}
		f := &kernels.Fused{Inputs: []ir.Type{x, y}, Nodes: []kernels.FusedNode{
			{Op: ir.Input, Index: 0, DType: d}, {Op: ir.Input, Index: 1, DType: d}, {Op: ir.Pow, Args: []int{0, 1}, DType: d},
		}, Outputs: []int{2}}
		p := &kernels.Problem{Op: kernels.FusedElementwise, Args: f.Inputs, Expr: f, Outs: []ir.Type{x}}
		kerneltest.Check(t, kernels.Elementwise, p, nil, []*ir.Tensor{ir.TensorFromFloat64s(x, xs), ir.TensorFromFloat64s(y, ys)})
	}
}
