package lower_test

import (
	"testing"

	"github.com/vkc-project/vkc/codegen"
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

// h100Coop2 is kernels.H200 with the workgroup-scope products the H100's driver reports for
// VK_NV_cooperative_matrix2 (f16 into f32; session 12's `vkc devices`).
func h100Coop2() kernels.Caps {
	caps := kernels.H200
	f16, f32 := codegen.F16, codegen.F32
	caps.Coop2 = &kernels.Coop2Caps{MaxWorkgroupSize: 256, MaxDimension: 1024, ReservedShared: 8192, Shapes: []kernels.Coop2Shape{
		{MGran: 16, NGran: 16, KGran: 16, A: f16, B: f16, C: f32, Result: f32, Invocations: 32},
		{MGran: 16, NGran: 16, KGran: 16, A: f16, B: f16, C: f32, Result: f32, Invocations: 64},
		{MGran: 32, NGran: 16, KGran: 16, A: f16, B: f16, C: f32, Result: f32, Invocations: 128},
		{MGran: 32, NGran: 32, KGran: 16, A: f16, B: f16, C: f32, Result: f32, Invocations: 256},
	}}
	return caps
}

// TestStaticChoiceCM2: where the device has workgroup-scope matrices, the prefill products of
// the 1B and 8B shapes statically take matmul_cm2 at its measured points (a product that
// stores its result itself: 128×256 blocks two slices a step where there are 128 of them; the
// others 128×256 blocks over 256 invocations where they are many, 128×128 over 128
// where those are; 32 to 127 blocks of 128×256 with K split over 2 or 4 workgroups), f16
// and Q4_K alike; a Q4_K product of fewer rows than the copy pays for stays on matmul_coop.
func TestStaticChoiceCM2(t *testing.T) {
	f16, f32, T := ir.F16, ir.F32, ir.T
	// A product with nothing to apply element by element stores its result itself (direct=1).
	big := "bk=64,bm=128,bn=256,direct=1,split_k=1,unroll=2,wg=256"
	bigRMS, wideRMS := "bk=64,bm=128,bn=256,direct=0,split_k=1,unroll=1,wg=256", "bk=32,bm=128,bn=128,direct=0,split_k=1,unroll=1,wg=128"
	// 32 to 127 blocks of 128×256: K split until they make 128 workgroups.
	split2, split4 := "bk=64,bm=128,bn=256,direct=0,split_k=2,unroll=2,wg=256", "bk=64,bm=128,bn=256,direct=0,split_k=4,unroll=2,wg=256"
	for _, c := range []struct {
		op    ir.Op
		attrs ir.Attrs
		args  []ir.Type
		want  string
		point string
	}{
		{ir.Linear, nil, []ir.Type{T(f16, 512, 4096), T(f16, 14336, 4096)}, "matmul_cm2", big},
		{ir.Linear, nil, []ir.Type{T(f16, 512, 14336), T(ir.Q4_K, 4096, 14336)}, "matmul_cm2", split2},
		{ir.Linear, nil, []ir.Type{T(f16, 512, 4096), T(f16, 4096, 4096)}, "matmul_cm2", split2},
		{ir.RMSNormLinear, ir.Attrs{"eps": 1e-5, "act": "f16"}, []ir.Type{T(f32, 512, 4096), T(f32, 4096), T(ir.Q4_K, 6144, 4096)}, "matmul_cm2", split2},
		{ir.Linear, nil, []ir.Type{T(f16, 512, 2048), T(f16, 16384, 2048)}, "matmul_cm2", big},
		{ir.Linear, nil, []ir.Type{T(f16, 512, 8192), T(f16, 2048, 8192)}, "matmul_cm2", split4},
		{ir.RMSNormLinear, ir.Attrs{"eps": 1e-5, "act": "f16"}, []ir.Type{T(f32, 512, 4096), T(f32, 4096), T(ir.Q4_K, 28672, 4096)}, "matmul_cm2", bigRMS},
		{ir.RMSNormLinear, ir.Attrs{"eps": 1e-5, "act": "f16"}, []ir.Type{T(f32, 512, 4096), T(f32, 4096), T(ir.Q4_K, 14336, 4096)}, "matmul_cm2", wideRMS},
		{ir.Linear, nil, []ir.Type{T(f16, 4096, 4096), T(f16, 4096, 4096)}, "matmul_cm2", big},
		{ir.Linear, nil, []ir.Type{T(f16, 64, 4096), T(ir.Q4_K, 14336, 4096)}, "matmul_coop", ""},
	} {
		_, outs, err := ir.Infer(c.op, c.attrs, c.args)
		if err != nil {
			t.Fatal(err)
		}
		p := &kernels.Problem{Op: c.op, Attrs: c.attrs, Args: c.args, Outs: outs, NumOpArgs: len(c.args)}
		tm, cfg, err := lower.StaticChoice(p, h100Coop2(), lower.DiscreteGPU)
		if err != nil {
			t.Fatal(err)
		}
		if tm.Name != c.want {
			t.Errorf("%s: static choice %s [%s], want %s", p.Key(), tm.Name, cfg.Key(), c.want)
		}
		if tm.Name == "matmul_cm2" && cfg.Key() != c.point {
			t.Errorf("%s: matmul_cm2 at [%s], want [%s]", p.Key(), cfg.Key(), c.point)
		}
	}
}
