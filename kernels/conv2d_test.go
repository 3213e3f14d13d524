package kernels_test

import (
	"math"
	"math/rand"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
)

// TestConv2dOnDevice checks both convolution templates against the interpreter on odd shapes:
// strides, asymmetric pads, dilations, groups and depthwise, both layouts, f16, bias and an
// epilogue. The implicit GEMM compiles slowly on lavapipe (about a second cold per
// configuration), so it runs on a subset with one extra configuration.
func TestConv2dOnDevice(t *testing.T) {
	rng := rand.New(rand.NewSource(23))
	for i, tc := range []struct {
		x, w  ir.Type
		bias  bool
		attrs ir.Attrs
		gemm  bool
	}{
		{ir.T(ir.F32, 1, 3, 9, 7), ir.T(ir.F32, 5, 3, 3, 3), true, ir.Attrs{"pads": []int{1, 1, 1, 1}}, true},
		{ir.T(ir.F32, 2, 4, 11, 6), ir.T(ir.F32, 10, 2, 3, 2), false, ir.Attrs{"strides": []int{2, 1}, "pads": []int{1, 0, 2, 1}, "groups": 2, "dilations": []int{1, 2}}, true},
		{ir.T(ir.F32, 1, 7, 5, 6), ir.T(ir.F32, 6, 1, 3, 3), true, ir.Attrs{"layout": "nhwc", "groups": 6, "strides": []int{2, 2}, "pads": []int{1, 1, 1, 1}}, false}, // depthwise nhwc
		{ir.T(ir.F32, 1, 5, 6, 4), ir.T(ir.F32, 8, 2, 3, 3), false, ir.Attrs{"layout": "nhwc", "groups": 2, "pads": []int{0, 1, 2, 1}}, true},
		{ir.T(ir.F16, 1, 5, 8, 3), ir.T(ir.F16, 4, 5, 1, 1), true, nil, false}, // 1×1, f16
		{ir.T(ir.F32, 3, 1, 1, 1), ir.T(ir.F32, 2, 1, 1, 1), false, nil, false},
	} {
		args := []ir.Type{tc.x, tc.w}
		if tc.bias {
			args = append(args, ir.T(tc.x.DType, tc.w.Shape[0]))
		}
		p := problem(t, ir.Conv2d, tc.attrs, args...)
		a := randomArgs(rng, p)
		checkConfigs(t, kernels.Conv2d, p, a, firstOnly(i, []kernels.Config{{"wg": 32, "per_thread": 1}, {"wg": 64, "per_thread": 8}}))
		if tc.gemm {
			checkConfigs(t, kernels.Conv2dGemm, p, a, firstOnly(i, []kernels.Config{{"tile_m": 16, "tile_n": 32, "tile_k": 8}}))
		}
	}
	// conv + gelu (+ a broadcast residual) in one kernel, both templates.
	p := withEpilogue(problem(t, ir.Conv2d, ir.Attrs{"pads": []int{1, 1, 1, 1}}, ir.T(ir.F32, 1, 3, 6, 5), ir.T(ir.F32, 4, 3, 3, 3), ir.T(ir.F32, 4)), ir.Shape{4, 1, 1}, ir.F32)
	a := randomArgs(rng, p)
	checkConfigs(t, kernels.Conv2d, p, a, nil)
	checkConfigs(t, kernels.Conv2dGemm, p, a, nil)
}

// TestPool2dOnDevice checks max and average pooling (ceil_mode, count_include_pad, dilations,
// asymmetric pads, both layouts) and global average pooling against the interpreter.
func TestPool2dOnDevice(t *testing.T) {
	rng := rand.New(rand.NewSource(29))
	for i, tc := range []struct {
		op    ir.Op
		x     ir.Type
		attrs ir.Attrs
	}{
		{ir.MaxPool2d, ir.T(ir.F32, 1, 3, 9, 7), ir.Attrs{"kernel": []int{3, 3}, "strides": []int{2, 2}, "pads": []int{1, 1, 1, 1}}},
		{ir.MaxPool2d, ir.T(ir.F16, 2, 5, 6, 3), ir.Attrs{"kernel": []int{2, 2}, "strides": []int{2, 2}, "ceil_mode": true, "layout": "nhwc"}},
		{ir.AvgPool2d, ir.T(ir.F32, 1, 2, 7, 8), ir.Attrs{"kernel": []int{3, 2}, "strides": []int{3, 2}, "pads": []int{1, 0, 1, 1}, "ceil_mode": true, "count_include_pad": true}},
		{ir.AvgPool2d, ir.T(ir.F32, 2, 3, 9, 9), ir.Attrs{"kernel": []int{2, 3}, "dilations": []int{2, 1}, "pads": []int{1, 2, 0, 1}}},
		{ir.AvgPool2d, ir.T(ir.F32, 1, 4, 5, 5), ir.Attrs{"kernel": []int{3, 3}, "pads": []int{1, 1, 1, 1}, "layout": "nhwc"}},
		{ir.GlobalAvgPool, ir.T(ir.F32, 2, 3, 7, 5), nil},
		{ir.GlobalAvgPool, ir.T(ir.F16, 1, 3, 4, 6), ir.Attrs{"layout": "nhwc"}},
	} {
		p := problem(t, tc.op, tc.attrs, tc.x)
		checkConfigs(t, kernels.Pool2d, p, randomArgs(rng, p), firstOnly(i, flatConfigs))
	}
}

// TestBatchNormOnDevice checks batch_norm in both layouts, with an epilogue, against the
// interpreter.
func TestBatchNormOnDevice(t *testing.T) {
	rng := rand.New(rand.NewSource(31))
	for i, tc := range []struct {
		x     ir.Type
		attrs ir.Attrs
	}{
		{ir.T(ir.F32, 2, 3, 5, 7), ir.Attrs{"eps": 1e-3}},
		{ir.T(ir.F16, 1, 4, 3, 5), ir.Attrs{"layout": "nhwc"}},
		{ir.T(ir.F32, 3, 6), nil},
	} {
		c := tc.x.Shape[ir.BatchNormChannelAxis(tc.attrs, tc.x)]
		pt := ir.T(ir.F32, c)
		p := problem(t, ir.BatchNorm, tc.attrs, tc.x, pt, pt, pt, pt)
		a := randomArgs(rng, p)
		a[4] = positive(a[4])
		checkConfigs(t, kernels.BatchNorm, p, a, firstOnly(i, flatConfigs))
	}
	p := withEpilogue(problem(t, ir.BatchNorm, nil, ir.T(ir.F32, 1, 3, 4, 4), ir.T(ir.F32, 3), ir.T(ir.F32, 3), ir.T(ir.F32, 3), ir.T(ir.F32, 3)), ir.Shape{4}, ir.F32)
	a := randomArgs(rng, p)
	a[4] = positive(a[4])
	checkConfigs(t, kernels.BatchNorm, p, a, nil)
}

// positive makes a variance: |x| + 0.1.
func positive(x *ir.Tensor) *ir.Tensor {
	v := x.Float64s()
	for i := range v {
		v[i] = math.Abs(v[i]) + 0.1
	}
	return ir.TensorFromFloat64s(x.Type, v)
}
