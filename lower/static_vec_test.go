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

// The static choice for the prefill products of a block-quantized weight over 128 rows or more
// on a GPU with cooperative matrices is matmul_coop_dq: on the H100 at 512 rows it ran the
// Llama-3.1-8B merged gate/up from Q4_K 2.3× faster than matmul_coop's best point, its
// rmsnorm_linear forms 1.8–3×, the Llama-3.2-1B gate/up as fast (docs/bench/h100-2026-12-06).
// Below 128 rows it refuses, and matmul_coop stays. Before coopQuantRate the roofline priced
// matmul_coop's staging at the full tensor rate and chose it.
func TestStaticChoiceCoopDQ(t *testing.T) {
	f16, f32, T := ir.F16, ir.F32, ir.T
	for _, c := range []struct {
		op    ir.Op
		attrs ir.Attrs
		args  []ir.Type
		want  string
	}{
		{ir.Linear, nil, []ir.Type{T(f16, 512, 4096), T(ir.Q4_K, 14336, 4096)}, "matmul_coop_dq"},
		{ir.RMSNormLinear, ir.Attrs{"eps": 1e-5}, []ir.Type{T(f16, 512, 4096), T(f16, 4096), T(ir.Q4_K, 14336, 4096)}, "matmul_coop_dq"},
		{ir.RMSNormLinear, ir.Attrs{"eps": 1e-5, "act": "f16"}, []ir.Type{T(f32, 512, 4096), T(f32, 4096), T(ir.Q4_K, 14336, 4096)}, "matmul_coop_dq"},
		{ir.Linear, nil, []ir.Type{T(f16, 512, 2048), T(ir.Q4_K, 16384, 2048)}, "matmul_coop_dq"},
		{ir.Linear, nil, []ir.Type{T(f16, 512, 14336), T(ir.Q6_K, 4096, 14336)}, "matmul_coop_dq"},
		{ir.Linear, nil, []ir.Type{T(f16, 64, 4096), T(ir.Q4_K, 14336, 4096)}, "matmul_coop"},
	} {
		_, outs, err := ir.Infer(c.op, c.attrs, c.args)
		if err != nil {
			t.Fatal(err)
		}
		p := &kernels.Problem{Op: c.op, Attrs: c.attrs, Args: c.args, Outs: outs, NumOpArgs: len(c.args)}
		tm, cfg, err := lower.StaticChoice(p, kernels.H200, lower.DiscreteGPU)
		if err != nil {
			t.Fatal(err)
		}
		if tm.Name != c.want {
			t.Errorf("%s: static choice %s [%s], want %s", p.Key(), tm.Name, cfg.Key(), c.want)
		}
	}
}
