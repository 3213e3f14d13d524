package kernels_test

import (
	"math/rand"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
)

// opProblem builds the Problem of op on args, its result types inferred.
func opProblem(t testing.TB, op ir.Op, attrs ir.Attrs, args ...ir.Type) *kernels.Problem {
	t.Helper()
	_, outs, err := ir.Infer(op, attrs, args)
	if err != nil {
		t.Fatal(err)
	}
	return &kernels.Problem{Op: op, Attrs: attrs, Args: args, Outs: outs, NumOpArgs: len(args)}
}

// withGeluBias gives p the epilogue gelu(y + bias) with bias [N] broadcast over the rows.
func withGeluBias(p *kernels.Problem) *kernels.Problem {
	out := p.Outs[0]
	bias := ir.T(ir.F32, out.Shape[out.Shape.Rank()-1])
	q := *p
	q.Args = append(append([]ir.Type(nil), p.Args...), bias)
	q.Expr = &kernels.Fused{
		Inputs: []ir.Type{out, bias},
		Nodes: []kernels.FusedNode{
			{Op: ir.Input, Index: 0, DType: out.DType},
			{Op: ir.Input, Index: 1, DType: ir.F32},
			{Op: ir.Cast, Attrs: ir.Attrs{"to": "f32"}, Args: []int{0}, DType: ir.F32},
			{Op: ir.Add, Args: []int{2, 1}, DType: ir.F32},
			{Op: ir.Gelu, Args: []int{3}, DType: ir.F32},
		},
		Outputs: []int{4},
	}
	q.Outs = []ir.Type{{DType: ir.F32, Shape: out.Shape}}
	return &q
}

// withResidual gives p the epilogue y + r with r of the result's type (a residual add).
func withResidual(p *kernels.Problem) *kernels.Problem {
	out := p.Outs[0]
	q := *p
	q.Args = append(append([]ir.Type(nil), p.Args...), out)
	q.Expr = &kernels.Fused{
		Inputs: []ir.Type{out, out},
		Nodes: []kernels.FusedNode{
			{Op: ir.Input, Index: 0, DType: out.DType},
			{Op: ir.Input, Index: 1, DType: out.DType},
			{Op: ir.Add, Args: []int{0, 1}, DType: out.DType},
		},
		Outputs: []int{2},
	}
	return &q
}

type gemmCase struct {
	name string
	p    *kernels.Problem
	// every: run every configuration of the test, not only the default (each case is a new
	// kernel for lavapipe to compile, so the non-default points run on a subset).
	every bool
}

func gemmCases(t testing.TB) []gemmCase {
	f32, f16 := ir.F32, ir.F16
	T := ir.T
	return []gemmCase{
		{"linear 5x37->67 bias", opProblem(t, ir.Linear, nil, T(f32, 5, 37), T(f32, 67, 37), T(f32, 67)), true},
		{"linear f16 3x5->37", opProblem(t, ir.Linear, nil, T(f16, 3, 5), T(f16, 37, 5)), false},
		{"linear f32 x f16 W rank 3", opProblem(t, ir.Linear, nil, T(f32, 2, 3, 36), T(f16, 67, 36)), true},
		{"linear 1 row", opProblem(t, ir.Linear, nil, T(f32, 1, 67), T(f32, 5, 67)), false},
		{"matmul 37x5x3", opProblem(t, ir.Matmul, nil, T(f32, 37, 5), T(f32, 5, 3)), false},
		{"matmul broadcast batch ta", opProblem(t, ir.Matmul, ir.Attrs{"ta": true}, T(f32, 2, 1, 5, 3), T(f32, 3, 5, 7)), true},
		{"matmul batch tb f16", opProblem(t, ir.Matmul, ir.Attrs{"tb": true}, T(f16, 3, 9, 37), T(f16, 3, 5, 37)), true},
		{"matmul ta tb", opProblem(t, ir.Matmul, ir.Attrs{"ta": true, "tb": true}, T(f32, 37, 6), T(f32, 5, 37)), false},
		{"rmsnorm_linear", opProblem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5}, T(f32, 6, 37), T(f32, 37), T(f32, 67, 37)), true},
		{"rmsnorm_linear f16 1 row", opProblem(t, ir.RMSNormLinear, nil, T(f16, 1, 64), T(f16, 64), T(f16, 9, 64)), false},
		{"linear bias+gelu", withGeluBias(opProblem(t, ir.Linear, nil, T(f32, 5, 37), T(f16, 67, 37))), true},
		{"matmul residual f16", withResidual(opProblem(t, ir.Matmul, ir.Attrs{"tb": true}, T(f16, 3, 36), T(f16, 67, 36))), true},
		// bf16 weights with f32 activations, read as words on any device
		{"linear f32 x bf16 W", opProblem(t, ir.Linear, nil, T(f32, 3, 36), T(ir.BF16, 37, 36), T(f32, 37)), true},
		{"rmsnorm_linear bf16 W odd K", opProblem(t, ir.RMSNormLinear, nil, T(f32, 5, 37), T(f32, 37), T(ir.BF16, 67, 37)), true},
		// an import's f16 activations read from the f32 residual stream (the rows rounded to
		// f16 before the product, the result f16), prefill-sized and a decode row
		{"rmsnorm_linear[act=f16] f16 W", opProblem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5, "act": "f16"}, T(f32, 17, 64), T(f32, 64), T(f16, 40, 64)), false},
		{"rmsnorm_linear[act=f16] 1 row", opProblem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5, "act": "f16"}, T(f32, 1, 64), T(f32, 64), T(f16, 24, 64)), false},
	}
}

func runGemmCases(t *testing.T, tmpl *kernels.Template, configs []kernels.Config) {
	rng := rand.New(rand.NewSource(7))
	caps := kernels.Lavapipe
	ran := make([]int, len(configs))
	defer func() {
		for ci, c := range configs {
			if c != nil && ran[ci] == 0 && !t.Failed() {
				t.Errorf("configuration %s is valid on none of the cases", c.Key())
			}
		}
	}()
	for _, tc := range gemmCases(t) {
		if err := tmpl.Accepts(tc.p, caps); err != nil {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			args := make([]*ir.Tensor, len(tc.p.Args))
			for i, a := range tc.p.Args {
				args[i] = kerneltest.Random(rng, a)
			}
			for ci, c := range configs {
				if ci > 0 && !tc.every {
					break
				}
				if c != nil && tmpl.Space.Valid(tc.p, c, caps) != nil {
					continue
				}
				ran[ci]++
				kerneltest.Check(t, tmpl, tc.p, c, args)
			}
		})
	}
}

func TestMatmulTiled(t *testing.T) {
	runGemmCases(t, kernels.MatmulTiled, []kernels.Config{
		nil,
		{"tile_m": 16, "tile_n": 32, "tile_k": 8, "micro_m": 2, "micro_n": 1},
	})
}

// TestMatmulTiledCPUStatic: on a CPU implementation the tiled template's static choice for
// products of more than 64 rows and columns is 16×16 micro tiles of a 128×128 tile (tiledStatic),
// and the space's first point (4×4) below that. The large point is checked against the
// interpreter once (f16, a residual epilogue, partial tiles in both dimensions); its loop over
// the micro rows in the epilogue (micro_m ≥ 8) is checked at a small point of 8×2 micro tiles,
// which lavapipe compiles in seconds, on Q4_K weights with rmsnorm, f16 activations and SwiGLU,
// and on a merged Q/K/V projection's column parts (paired columns, rope, cache writes).
func TestMatmulTiledCPUStatic(t *testing.T) {
	d := kerneltest.Device(t)
	// The static choice is a function of the problem and the capabilities: it is asserted for
	// a CPU implementation's on any device, and the points are checked on this one.
	cpu := kerneltest.CapsOf(&d.Info)
	cpu.CPU = true
	f32, f16, T := ir.F32, ir.F16, ir.T
	K := quantK(ir.Q4_K)
	rng := rand.New(rand.NewSource(31))
	small := kernels.Config{"tile_m": 16, "tile_n": 16, "tile_k": 8, "micro_m": 8, "micro_n": 2}
	for _, c := range []struct {
		name  string
		p     *kernels.Problem
		micro int
		run   kernels.Config // the point checked against the interpreter (nil: the static one)
	}{
		{"linear f16 residual 70x36->130", withResidual(opProblem(t, ir.Linear, nil, T(f16, 70, 36), T(f16, 130, 36))), 16, nil},
		{"rmsnorm_linear[act=f16] q4_k swiglu 66->136", withSwiGLU(opProblem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5, "act": "f16"}, T(f32, 66, K), T(f32, K), T(ir.Q4_K, 136, K))), 16, small},
		{"qkv parts f16 66 rows", qkvProblemW(t, 66, f16, f16, 40, true), 16, small},
		{"linear bias 17x37->67", opProblem(t, ir.Linear, nil, T(f32, 17, 37), T(f32, 67, 37), T(f32, 67)), 4, nil},
		{"linear 1 row", opProblem(t, ir.Linear, nil, T(f32, 1, 67), T(f32, 5, 67)), 4, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, cfg, err := kernels.Build(kernels.MatmulTiled, c.p, cpu)
			if err != nil {
				t.Fatal(err)
			}
			if cfg["micro_m"] != c.micro || cfg["micro_n"] != c.micro {
				t.Errorf("static choice %s, want %d×%d micro tiles", cfg.Key(), c.micro, c.micro)
			}
			if run := c.run; run != nil || c.micro == 16 {
				if run == nil {
					run = cfg
				}
				kerneltest.Check(t, kernels.MatmulTiled, c.p, run, tune.Inputs(c.p, rng))
			}
		})
	}
}

// TestMatmulTiledStagingForms: matmul_tiled stages its tiles in two forms, by the device
// (Caps.CPU): in a loop at the top of each step on a CPU implementation, and as loads issued
// during the previous step's products on a GPU. Each test device runs its own form through
// TestMatmulTiled; here both run on whichever device there is, on the cases whose staging
// differs (A or B transposed, a batch, 16-bit and bf16 B, rmsnorm's gamma, a block-quantized B,
// partial tiles), at a point of three steps of K or more.
func TestMatmulTiledStagingForms(t *testing.T) {
	rng := rand.New(rand.NewSource(41))
	f32, f16, T := ir.F32, ir.F16, ir.T
	K := quantK(ir.Q4_K)
	cfg := kernels.Config{"tile_m": 16, "tile_n": 32, "tile_k": 8, "micro_m": 2, "micro_n": 4}
	for _, c := range []struct {
		name string
		p    *kernels.Problem
	}{
		{"linear 5x37->67 bias", opProblem(t, ir.Linear, nil, T(f32, 5, 37), T(f32, 67, 37), T(f32, 67))},
		{"matmul broadcast batch ta", opProblem(t, ir.Matmul, ir.Attrs{"ta": true}, T(f32, 2, 1, 37, 3), T(f32, 3, 37, 7))},
		{"matmul batch tb f16", opProblem(t, ir.Matmul, ir.Attrs{"tb": true}, T(f16, 3, 9, 37), T(f16, 3, 5, 37))},
		{"rmsnorm_linear bf16 W odd K", opProblem(t, ir.RMSNormLinear, nil, T(f32, 5, 37), T(f32, 37), T(ir.BF16, 67, 37))},
		{"rmsnorm_linear[act=f16] q4_k swiglu", withSwiGLU(opProblem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5, "act": "f16"}, T(f32, 19, K), T(f32, K), T(ir.Q4_K, 72, K)))},
	} {
		args := tune.Inputs(c.p, rng)
		t.Run(c.name, func(t *testing.T) { kerneltest.CheckForms(t, kernels.MatmulTiled, c.p, cfg, args) })
	}
}

// Every case is accepted by at least one matmul template, and the tiled one takes them all.
func TestMatmulTemplatesCoverCases(t *testing.T) {
	for _, tc := range gemmCases(t) {
		ts, err := kernels.For(tc.p, kernels.Lavapipe)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if err := kernels.MatmulTiled.Accepts(tc.p, kernels.Lavapipe); err != nil {
			t.Errorf("%s: tiled refuses: %v (accepted by %s)", tc.name, err, kerneltest.Names(ts))
		}
	}
}

func TestMatmulVec(t *testing.T) {
	// On lavapipe (subgroups of 8) a column of kp = wg/cols invocations is reduced by subgroup
	// adds and shared memory when kp > 8, by shuffles when kp ≤ 8, and not at all when kp = 1;
	// the cases laid out along N (B not contiguous along K) take the shared-memory tree.
	runGemmCases(t, kernels.MatmulVec, []kernels.Config{
		nil,
		{"wg": 128, "cols": 8, "vec": 1, "unroll": 1, "stage": 0}, // kp 16: subgroup adds, shared memory
		{"wg": 32, "cols": 8, "vec": 2, "unroll": 1, "stage": 0},  // kp 4: two columns a subgroup, shuffles
		{"wg": 32, "cols": 8, "vec": 1, "unroll": 4, "stage": 0},  // four steps an iteration, then the rest
		{"wg": 64, "cols": 16, "vec": 4, "unroll": 2, "stage": 0}, // kp 4, two steps an iteration
		{"wg": 32, "cols": 32, "vec": 1, "unroll": 2, "stage": 0}, // kp 1: no reduction
	})
}

// TestMatmulVecStaged checks MatmulVec's stage = 1 (rmsnorm_linear's x·gamma staged in shared
// memory, as MatmulVecQ's: TestMatmulVecQStaged) against the interpreter: f16, bf16 and f32
// weights, one row and three, odd N, a SwiGLU epilogue, the workgroup's Σx² by subgroup adds and
// by a shared-memory tree; a linear, and a strided x (vec 1), are refused it.
func TestMatmulVecStaged(t *testing.T) {
	rng := rand.New(rand.NewSource(31))
	caps, tree := stagedCaps(t)
	f32 := ir.F32
	T := ir.T
	eps := ir.Attrs{"eps": 1e-5}
	pt := func(wg, cols, unroll int) kernels.Config {
		return kernels.Config{"wg": wg, "cols": cols, "vec": 4, "unroll": unroll, "stage": 1}
	}
	for _, dt := range []ir.DType{ir.F16, ir.BF16, ir.F32} {
		t.Run(dt.String(), func(t *testing.T) {
			one := opProblem(t, ir.RMSNormLinear, eps, T(f32, 1, 96), T(f32, 96), T(dt, 37, 96))
			three := withSwiGLU(opProblem(t, ir.RMSNormLinear, eps, T(f32, 3, 64), T(f32, 64), T(dt, 22, 64)))
			checkStaged(t, rng, kernels.MatmulVec, []stagedCase{{one, pt(64, 32, 1), caps}, {one, pt(128, 2, 2), tree}, {three, pt(32, 4, 1), caps}})
		})
	}
	lin := opProblem(t, ir.Linear, nil, T(f32, 1, 96), T(ir.F16, 37, 96))
	if err := kernels.MatmulVec.Space.Valid(lin, pt(64, 32, 1), caps); err == nil {
		t.Errorf("stage=1 valid for %s, which has no gamma", lin.Key())
	}
	one := opProblem(t, ir.RMSNormLinear, eps, T(f32, 1, 96), T(f32, 96), T(ir.F16, 37, 96))
	if err := kernels.MatmulVec.Space.Valid(one, kernels.Config{"wg": 64, "cols": 32, "vec": 1, "unroll": 1, "stage": 1}, caps); err == nil {
		t.Errorf("stage=1 valid at vec=1")
	}
}

// The matrix-vector templates' static choices: on lavapipe many columns of few invocations for
// an LM head (matmul_vec 32 of 2, matmul_vec_q 16 of 2), falling back to a column a subgroup (8
// invocations) and fewer columns where a problem has few; on the H200 matmul_vec the space's
// first point, matmul_vec_q column groups of one unit of K each (vecQGPUStatic).
func TestMatvecStatic(t *testing.T) {
	f32, f16 := ir.F32, ir.F16
	head := opProblem(t, ir.RMSNormLinear, nil, ir.T(f32, 1, 576), ir.T(f32, 576), ir.T(f16, 49152, 576))
	narrow := opProblem(t, ir.Linear, nil, ir.T(f32, 1, 64), ir.T(f16, 5, 64))
	qhead := opProblem(t, ir.Linear, nil, ir.T(f32, 1, 256), ir.T(ir.Q6_K, 4096, 256))
	for _, c := range []struct {
		name string
		tmpl *kernels.Template
		p    *kernels.Problem
		caps kernels.Caps
		want string
	}{
		{"lavapipe lm head", kernels.MatmulVec, head, kernels.Lavapipe, "cols=32,stage=1,unroll=1,vec=4,wg=64"},
		{"lavapipe 5 columns", kernels.MatmulVec, narrow, kernels.Lavapipe, "cols=8,stage=0,unroll=1,vec=4,wg=64"},
		{"lavapipe q6_k", kernels.MatmulVecQ, qhead, kernels.Lavapipe, "cols=8,rows=4,span=1,split=0,stage=0,unroll=1,wg=32"},
		{"h200 lm head", kernels.MatmulVec, head, kernels.H200, "cols=2,stage=0,unroll=1,vec=4,wg=128"},
		{"h200 q6_k", kernels.MatmulVecQ, qhead, kernels.H200, "cols=16,rows=1,span=1,split=0,stage=0,unroll=1,wg=128"}, // K of 8 units at span 1
	} {
		_, cfg, err := kernels.Build(c.tmpl, c.p, c.caps)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if cfg.Key() != c.want {
			t.Errorf("%s: static choice %s, want %s", c.name, cfg.Key(), c.want)
		}
	}
}

// The points a budgeted search measures first are valid points of the spaces, unrolled ones
// among matmul_vec's on a GPU.
func TestMatvecSuggestions(t *testing.T) {
	f32, f16 := ir.F32, ir.F16
	head := opProblem(t, ir.Linear, nil, ir.T(f32, 1, 2048), ir.T(f16, 4096, 2048))
	qhead := opProblem(t, ir.Linear, nil, ir.T(f32, 1, 2048), ir.T(ir.Q4_K, 4096, 2048))
	for _, c := range []struct {
		tmpl *kernels.Template
		p    *kernels.Problem
	}{{kernels.MatmulVec, head}, {kernels.MatmulVecQ, qhead}} {
		for _, caps := range []kernels.Caps{kernels.H200, kernels.Lavapipe} {
			s := c.tmpl.Space.Suggestions(c.p, caps)
			unrolled := 0
			for _, cfg := range s {
				if err := c.tmpl.Space.Valid(c.p, cfg, caps); err != nil {
					t.Errorf("%s: suggested %s: %v", c.tmpl.Name, cfg.Key(), err)
				}
				if cfg["unroll"] > 1 {
					unrolled++
				}
			}
			if len(s) == 0 || !caps.CPU && c.tmpl == kernels.MatmulVec && unrolled == 0 {
				t.Errorf("%s (CPU %v): %d suggestions, %d unrolled", c.tmpl.Name, caps.CPU, len(s), unrolled)
			}
		}
	}
}
