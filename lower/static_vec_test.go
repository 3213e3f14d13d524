package lower_test

import (
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower"
)

// TestStaticChoiceDecodeVec: on lavapipe and on the H200, lowering's static choice for decode's
// one-row products is a matrix-vector template for float and block-quantized weights alike (on
// lavapipe matmul_tiled on one row took 21–30× matmul_vec_q's CPU time: docs/decode.md).
func TestStaticChoiceDecodeVec(t *testing.T) {
	f32, T := ir.F32, ir.T
	prob := func(op ir.Op, attrs ir.Attrs, args ...ir.Type) *kernels.Problem {
		_, outs, err := ir.Infer(op, attrs, args)
		if err != nil {
			t.Fatal(err)
		}
		return &kernels.Problem{Op: op, Attrs: attrs, Args: args, Outs: outs, NumOpArgs: len(args)}
	}
	for _, c := range []struct {
		p    *kernels.Problem
		want string
	}{
		{prob(ir.RMSNormLinear, ir.Attrs{"eps": 1e-5}, T(f32, 1, 576), T(f32, 576), T(ir.F16, 3072, 576)), "matmul_vec"},
		{prob(ir.RMSNormLinear, ir.Attrs{"eps": 1e-5}, T(f32, 1, 576), T(f32, 576), T(ir.F16, 49152, 576)), "matmul_vec"},
		{prob(ir.RMSNormLinear, ir.Attrs{"eps": 1e-5}, T(f32, 1, 576), T(f32, 576), T(ir.Q5_0, 3072, 576)), "matmul_vec_q"},
		{prob(ir.Linear, nil, T(f32, 1, 1536), T(ir.Q4_K, 576, 1536)), "matmul_vec_q"},
		{prob(ir.Linear, nil, T(f32, 1, 1536), T(ir.Q6_K, 576, 1536)), "matmul_vec_q"},
		{prob(ir.RMSNormLinear, ir.Attrs{"eps": 1e-5}, T(f32, 1, 576), T(f32, 576), T(ir.Q8_0, 49152, 576)), "matmul_vec_q"},
	} {
		for _, d := range []struct {
			name string
			caps kernels.Caps
			dev  lower.DeviceModel
		}{{"lavapipe", kernels.Lavapipe, lower.Lavapipe}, {"h200", kernels.H200, lower.DiscreteGPU}} {
			tm, cfg, err := lower.StaticChoice(c.p, d.caps, d.dev)
			if err != nil {
				t.Fatalf("%s %s: %v", d.name, c.p.Key(), err)
			}
			if tm.Name != c.want {
				t.Errorf("%s: %s chose %s [%s], want %s", d.name, c.p.Key(), tm.Name, cfg.Key(), c.want)
			}
		}
	}
}
