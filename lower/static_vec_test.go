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

// A static compile leaves matmul_coop_dq (kernels.Template.MeasuredOnly) to measured compiles:
// the 512-row prefill products of Llama-3.1-8B's shape in Q4_K take matmul_coop on the H200
// target. Without the flag the roofline took matmul_coop_dq for most of them (it counted the
// dequantization step's invocations as the product's occupancy), unmeasured.
func TestStaticChoiceLeavesMeasuredOnly(t *testing.T) {
	f16, f32, T := ir.F16, ir.F32, ir.T
	for _, c := range []struct {
		op    ir.Op
		attrs ir.Attrs
		args  []ir.Type
	}{
		{ir.Linear, nil, []ir.Type{T(f16, 512, 4096), T(ir.Q4_K, 4096, 4096)}},
		{ir.RMSNormLinear, ir.Attrs{"eps": 1e-5, "act": "f16"}, []ir.Type{T(f32, 512, 4096), T(f32, 4096), T(ir.Q4_K, 6144, 4096)}},
		// few workgroups (the K/V projections): the products the roofline gave matmul_coop_dq
		{ir.Linear, nil, []ir.Type{T(f16, 512, 4096), T(ir.Q6_K, 1024, 4096)}},
		{ir.RMSNormLinear, ir.Attrs{"eps": 1e-5, "act": "f16"}, []ir.Type{T(f32, 512, 4096), T(f32, 4096), T(ir.Q4_K, 2048, 4096)}},
	} {
		_, outs, err := ir.Infer(c.op, c.attrs, c.args)
		if err != nil {
			t.Fatal(err)
		}
		p := &kernels.Problem{Op: c.op, Attrs: c.attrs, Args: c.args, Outs: outs, NumOpArgs: len(c.args)}
		if err := kernels.MatmulCoopDQ.Accepts(p, kernels.H200); err != nil {
			t.Fatalf("%s: matmul_coop_dq refuses it: %v", p.Key(), err)
		}
		tm, cfg, err := lower.StaticChoice(p, kernels.H200, lower.DiscreteGPU)
		if err != nil {
			t.Fatal(err)
		}
		if tm.Name != "matmul_coop" {
			t.Errorf("%s: static choice %s [%s], want matmul_coop", p.Key(), tm.Name, cfg.Key())
		}
	}
}
