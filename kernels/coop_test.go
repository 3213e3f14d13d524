package kernels_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/codegen/spirvval"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
	"github.com/vkc-project/vkc/runtime"
)

// The cooperative-matrix templates (MatmulCoop, AttentionCoop). Lavapipe has no cooperative
// matrices, so here their modules are built for the H200's capabilities (kernels.H200) and
// validated with spirv-val; TestCoop*GPU run them against the interpreter on a device that has
// them (the H200, through the test binary) and skip elsewhere, saying so.

// withSwiGLU gives p the epilogue silu(y)·up with up of the result's type (the gate/up product of
// a SwiGLU MLP computed as one matmul whose epilogue reads the other half).
func withSwiGLU(p *kernels.Problem) *kernels.Problem {
	out := p.Outs[0]
	q := *p
	q.Args = append(append([]ir.Type(nil), p.Args...), out)
	q.Expr = &kernels.Fused{
		Inputs: []ir.Type{out, out},
		Nodes: []kernels.FusedNode{
			{Op: ir.Input, Index: 0, DType: out.DType},
			{Op: ir.Input, Index: 1, DType: out.DType},
			{Op: ir.Silu, Args: []int{0}, DType: out.DType},
			{Op: ir.Mul, Args: []int{2, 1}, DType: out.DType},
		},
		Outputs: []int{3},
	}
	return &q
}

// withCast gives p the epilogue cast(y, f32).
func withCast(p *kernels.Problem) *kernels.Problem {
	out := p.Outs[0]
	q := *p
	q.Expr = &kernels.Fused{
		Inputs:  []ir.Type{out},
		Nodes:   []kernels.FusedNode{{Op: ir.Input, Index: 0, DType: out.DType}, {Op: ir.Cast, Attrs: ir.Attrs{"to": "f32"}, Args: []int{0}, DType: ir.F32}},
		Outputs: []int{1},
	}
	q.Outs = []ir.Type{{DType: ir.F32, Shape: out.Shape}}
	return &q
}

func coopGemmCases(t testing.TB) []gemmCase {
	f16, bf16, f32 := ir.F16, ir.BF16, ir.F32
	T := ir.T
	return []gemmCase{
		{"linear f16 64x64->96 f32 bias", opProblem(t, ir.Linear, nil, T(f16, 64, 64), T(f16, 96, 64), T(f32, 96)), true},
		{"linear f16 edges 37x72->40", opProblem(t, ir.Linear, nil, T(f16, 37, 72), T(f16, 40, 72)), true},
		{"matmul f16 row-major B 48x40x56", opProblem(t, ir.Matmul, nil, T(f16, 48, 40), T(f16, 40, 56)), true},
		{"matmul f16 ta 32x24x24", opProblem(t, ir.Matmul, ir.Attrs{"ta": true}, T(f16, 24, 32), T(f16, 24, 24)), false},
		{"matmul f16 batch tb broadcast", opProblem(t, ir.Matmul, ir.Attrs{"tb": true}, T(f16, 2, 1, 24, 40), T(f16, 3, 56, 40)), false},
		{"rmsnorm_linear f16 37x64->72", opProblem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5}, T(f16, 37, 64), T(f16, 64), T(f16, 72, 64)), true},
		{"rmsnorm_linear f16 x f32 gamma", opProblem(t, ir.RMSNormLinear, nil, T(f16, 2, 20, 48), T(f32, 48), T(f16, 24, 48)), false},
		{"linear bias+gelu", withGeluBias(opProblem(t, ir.Linear, nil, T(f16, 33, 64), T(f16, 80, 64))), true},
		{"matmul residual", withResidual(opProblem(t, ir.Matmul, ir.Attrs{"tb": true}, T(f16, 40, 64), T(f16, 72, 64))), false},
		{"linear swiglu", withSwiGLU(opProblem(t, ir.Linear, nil, T(f16, 40, 64), T(f16, 48, 64))), false},
		{"linear cast to f32", withCast(opProblem(t, ir.Linear, nil, T(f16, 20, 32), T(f16, 24, 32))), false},
		{"linear bf16 40x64->48", opProblem(t, ir.Linear, nil, T(bf16, 40, 64), T(bf16, 48, 64)), true},
		{"rmsnorm_linear bf16", opProblem(t, ir.RMSNormLinear, nil, T(bf16, 24, 64), T(bf16, 64), T(bf16, 40, 64)), false},
	}
}

// coopConfigs are the matmul_coop points the tests run besides the default: single buffering,
// deep slices (lean: the next slice stored before the products, A matrices one at a time), tall
// and wide subgroup grids.
var coopConfigs = []kernels.Config{
	nil,
	{"warps_m": 1, "warps_n": 1, "tiles_m": 1, "tiles_n": 1, "k_steps": 1, "stages": 1, "split_k": 1, "lean": 0},
	{"warps_m": 1, "warps_n": 2, "tiles_m": 2, "tiles_n": 1, "k_steps": 4, "stages": 2, "split_k": 1, "lean": 1},
	{"warps_m": 4, "warps_n": 1, "tiles_m": 1, "tiles_n": 4, "k_steps": 2, "stages": 1, "split_k": 1, "lean": 0},
}

// coopSplitConfigs are split-K points (each case takes those that leave no split without work):
// two and four splits single-buffered, three uneven ones double-buffered (and lean), two with
// several subgroups (rmsnorm's row sums from more than one invocation).
var coopSplitConfigs = []kernels.Config{
	{"warps_m": 1, "warps_n": 1, "tiles_m": 1, "tiles_n": 1, "k_steps": 1, "stages": 1, "split_k": 2, "lean": 0},
	{"warps_m": 1, "warps_n": 2, "tiles_m": 2, "tiles_n": 1, "k_steps": 1, "stages": 2, "split_k": 3, "lean": 1},
	{"warps_m": 2, "warps_n": 2, "tiles_m": 1, "tiles_n": 1, "k_steps": 2, "stages": 2, "split_k": 2, "lean": 0},
	{"warps_m": 2, "warps_n": 1, "tiles_m": 2, "tiles_n": 2, "k_steps": 1, "stages": 1, "split_k": 4, "lean": 0},
}

// validate runs spirv-val on every module of l for Vulkan 1.3, skipping where only an old
// spirv-val exists.
func validate(t *testing.T, l *kernels.Launch) {
	t.Helper()
	tool, err := spirvval.Find()
	if err != nil {
		t.Skipf("missing capability: %v", err)
	}
	if !tool.AtLeast(2025, 2) {
		t.Skipf("missing capability: %s (%s) predates CooperativeMatrixKHR; put SPIRV-Tools v2025.2 or newer in ../shared/tools", tool.Path, tool.VersionLine)
	}
	for _, st := range l.Steps {
		if err := tool.Validate(st.Kernel.Bytes(), "vulkan1.3", t.TempDir()); err != nil {
			t.Fatalf("kernel %s: %v", st.Kernel.Name, err)
		}
	}
}

func TestCoopMatmulValidates(t *testing.T) {
	caps := kernels.H200
	for _, tc := range coopGemmCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			if err := kernels.MatmulCoop.Accepts(tc.p, caps); err != nil {
				t.Fatalf("refused on the H200: %v", err)
			}
			for _, c := range coopConfigs {
				l, c, err := kernels.BuildAt(kernels.MatmulCoop, tc.p, c, caps)
				if err != nil {
					t.Fatalf("[%s]: %v", c.Key(), err)
				}
				if !l.Matrix || !l.Steps[0].Kernel.Needs.Has(codegen.FeatureCooperativeMatrix) {
					t.Errorf("[%s]: launch not marked as matrix work, or module without matrices", c.Key())
				}
				if len(l.Steps) != 1 || len(l.Scratch) != 0 {
					t.Errorf("[%s]: %d steps and %d scratch buffers without split-K", c.Key(), len(l.Steps), len(l.Scratch))
				}
				validate(t, l)
			}
			split := 0
			for _, c := range coopSplitConfigs {
				if kernels.MatmulCoop.Space.Valid(tc.p, c, caps) != nil {
					continue
				}
				l, err := kernels.MatmulCoop.Build(tc.p, c, caps)
				if err != nil {
					t.Fatalf("[%s]: %v", c.Key(), err)
				}
				checkSplitLaunch(t, tc.p, c, l)
				validate(t, l)
				split++
			}
			if split == 0 {
				t.Errorf("no split-K point of %d is valid", len(coopSplitConfigs))
			}
		})
	}
}

// checkSplitLaunch checks the shape of a split-K launch: the product (with matrices) and the
// reduction (without), the partials in scratch, the splits along z, the epilogue's result bound
// by the second step only.
func checkSplitLaunch(t *testing.T, p *kernels.Problem, c kernels.Config, l *kernels.Launch) {
	t.Helper()
	if len(l.Steps) != 2 {
		t.Fatalf("[%s]: %d steps, want the product and the reduction", c.Key(), len(l.Steps))
	}
	prod, red := l.Steps[0], l.Steps[1]
	if !prod.Kernel.Needs.Has(codegen.FeatureCooperativeMatrix) || red.Kernel.Needs.Has(codegen.FeatureCooperativeMatrix) {
		t.Errorf("[%s]: the product step must use matrices and the reduction none", c.Key())
	}
	want := 1
	if p.Op == ir.RMSNormLinear {
		want = 2 // the rows' partial sums of squares
	}
	if len(l.Scratch) != want {
		t.Errorf("[%s]: %d scratch buffers, want %d", c.Key(), len(l.Scratch), want)
	}
	if prod.Grid[2]%uint32(c["split_k"]) != 0 {
		t.Errorf("[%s]: grid %v does not hold %d splits along z", c.Key(), prod.Grid, c["split_k"])
	}
	for _, op := range prod.Bindings {
		if op.Kind == kernels.Out {
			t.Errorf("[%s]: the product step binds result %d; only the reduction writes results", c.Key(), op.Index)
		}
	}
	outs := 0
	for _, op := range red.Bindings {
		if op.Kind == kernels.Out {
			outs++
		}
	}
	if outs != len(p.Outs) {
		t.Errorf("[%s]: the reduction binds %d of %d results", c.Key(), outs, len(p.Outs))
	}
}

// TestCoopSpaceBuilds: every point of the space either builds a module on the H200 or is
// refused by the space's predicate, never by Build.
// Every third valid point is built (split_k varies fastest, so the third cycles through its
// values across the other parameters): the space has thousands.
func TestCoopSpaceBuilds(t *testing.T) {
	p := opProblem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5}, ir.T(ir.F16, 128, 576), ir.T(ir.F16, 576), ir.T(ir.F16, 576, 576))
	valid := 0
	for _, c := range kernels.MatmulCoop.Space.Points() {
		if kernels.MatmulCoop.Space.Valid(p, c, kernels.H200) != nil {
			continue
		}
		if valid%3 == 0 {
			if _, err := kernels.MatmulCoop.Build(p, c, kernels.H200); err != nil {
				t.Errorf("[%s]: %v", c.Key(), err)
			}
		}
		valid++
	}
	t.Logf("%d valid points of %d", valid, kernels.MatmulCoop.Space.Size())
	if valid < 100 {
		t.Errorf("only %d valid points of %d", valid, kernels.MatmulCoop.Space.Size())
	}
}

// TestCoopNeverOnLavapipe: no cooperative-matrix template accepts a problem on lavapipe, as the
// test device describes itself and as kernels.Lavapipe does, so neither lowering nor the tuner
// (both take their candidates from kernels.For) ever offers one there.
func TestCoopNeverOnLavapipe(t *testing.T) {
	capsList := []kernels.Caps{kernels.Lavapipe}
	if d := kerneltest.Device(t); d != nil {
		c := kerneltest.CapsOf(&d.Info)
		if len(c.CoopShapes) > 0 {
			t.Skipf("%s has cooperative matrices; this test is about devices without them", d.Info.Name)
		}
		capsList = append(capsList, c)
	}
	var probs []*kernels.Problem
	for _, tc := range append(coopGemmCases(t), gemmCases(t)...) {
		probs = append(probs, tc.p)
	}
	for _, c := range append(coopAttnCases(t), attnCases()...) {
		p, _ := c.problem(t)
		probs = append(probs, p)
	}
	for _, caps := range capsList {
		for _, p := range probs {
			ts, _ := kernels.For(p, caps)
			for _, tm := range ts {
				if strings.Contains(tm.Name, "coop") {
					t.Errorf("%s offered for %s on a device without cooperative matrices", tm.Name, p.Key())
				}
			}
			for _, tm := range []*kernels.Template{kernels.MatmulCoop, kernels.AttentionCoop} {
				if err := tm.Accepts(p, caps); err == nil {
					t.Errorf("%s accepts %s without cooperative matrices", tm.Name, p.Key())
				}
			}
		}
	}
}

// coopDevice returns the test device's capabilities, skipping unless it has cooperative matrices.
func coopDevice(t *testing.T) kernels.Caps {
	d := kerneltest.Device(t)
	caps := kerneltest.CapsOf(&d.Info)
	if len(caps.CoopShapes) == 0 {
		t.Skipf("%s has no cooperative matrices (lavapipe has none): the cooperative-matrix kernels run on the GPU machine", d.Info.Name)
	}
	return caps
}

// TestCoopMatmulGPU runs every case at several points of the space on the device and compares
// with the interpreter.
func TestCoopMatmulGPU(t *testing.T) {
	caps := coopDevice(t)
	rng := rand.New(rand.NewSource(11))
	for _, tc := range coopGemmCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			if err := kernels.MatmulCoop.Accepts(tc.p, caps); err != nil {
				t.Skipf("the device refuses it: %v", err)
			}
			args := make([]*ir.Tensor, len(tc.p.Args))
			for i, a := range tc.p.Args {
				args[i] = kerneltest.Random(rng, a)
			}
			for ci, c := range coopConfigs {
				if ci > 0 && !tc.every {
					break
				}
				if c != nil && kernels.MatmulCoop.Space.Valid(tc.p, c, caps) != nil {
					continue
				}
				kerneltest.Check(t, kernels.MatmulCoop, tc.p, c, args)
			}
			for _, c := range coopSplitConfigs {
				if kernels.MatmulCoop.Space.Valid(tc.p, c, caps) == nil {
					kerneltest.Check(t, kernels.MatmulCoop, tc.p, c, args)
				}
			}
		})
	}
}

// TestCoopMatmulSmolLM2GPU checks the template on SmolLM2-135M's prefill shapes (128 tokens) at
// the points the benchmarks and the tuner favour (large blocks, single and double buffering, the
// space's suggestions for the problem: split-K among them); the reference is computed once per
// problem. Split-K points run twice and must give the same bits (the partials are summed in a
// fixed order, whichever workgroup finished first).
func TestCoopMatmulSmolLM2GPU(t *testing.T) {
	caps := coopDevice(t)
	d := kerneltest.Device(t)
	rng := rand.New(rand.NewSource(12))
	configs := append(append([]kernels.Config(nil), coopConfigs...),
		kernels.Config{"warps_m": 2, "warps_n": 2, "tiles_m": 4, "tiles_n": 4, "k_steps": 2, "stages": 2, "split_k": 1, "lean": 0},
		kernels.Config{"warps_m": 4, "warps_n": 2, "tiles_m": 2, "tiles_n": 4, "k_steps": 2, "stages": 2, "split_k": 1, "lean": 0},
		kernels.Config{"warps_m": 2, "warps_n": 4, "tiles_m": 4, "tiles_n": 2, "k_steps": 1, "stages": 2, "split_k": 1, "lean": 0},
		kernels.Config{"warps_m": 2, "warps_n": 2, "tiles_m": 4, "tiles_n": 4, "k_steps": 4, "stages": 1, "split_k": 1, "lean": 0},
	)
	for _, p := range smolPrefillProblems(t) {
		t.Run(p.Key(), func(t *testing.T) {
			args := make([]*ir.Tensor, len(p.Args))
			for i, a := range p.Args {
				args[i] = kerneltest.Random(rng, a)
			}
			want, err := kerneltest.Expect(p, args)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range append(append([]kernels.Config(nil), configs...), kernels.MatmulCoop.Space.Suggestions(p, caps)...) {
				var l *kernels.Launch
				if c == nil {
					l, c, err = kernels.Build(kernels.MatmulCoop, p, caps)
				} else if err = kernels.MatmulCoop.Space.Valid(p, c, caps); err == nil {
					l, err = kernels.MatmulCoop.Build(p, c, caps)
				} else {
					continue
				}
				if err != nil {
					t.Fatalf("[%s]: %v", c.Key(), err)
				}
				got, err := kerneltest.Run(d, p, l, args)
				if err != nil {
					t.Fatalf("[%s]: run: %v", c.Key(), err)
				}
				if msg := kerneltest.Compare(got[0], want[0], tune.ProblemTolerance(p, 0)); msg != "" {
					t.Errorf("[%s]: %s", c.Key(), msg)
				}
				if c["split_k"] > 1 {
					again, err := kerneltest.Run(d, p, l, args)
					if err != nil {
						t.Fatalf("[%s]: second run: %v", c.Key(), err)
					}
					if !bytes.Equal(got[0].Data, again[0].Data) {
						t.Errorf("[%s]: two runs of a split-K launch differ", c.Key())
					}
				}
			}
		})
	}
}

// smolPrefillProblems are SmolLM2-135M's prefill-128 matmuls (d 576, 9 heads of 64, 3 kv heads,
// ffn 1536, vocabulary 49152): the fused q/k/v projection after rmsnorm, the output projection
// with its residual, the gate/up projection after rmsnorm, the down projection, the lm head.
func smolPrefillProblems(t testing.TB) []*kernels.Problem {
	f16 := ir.F16
	T := ir.T
	return []*kernels.Problem{
		opProblem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5}, T(f16, 128, 576), T(f16, 576), T(f16, 960, 576)),
		withResidual(opProblem(t, ir.Linear, nil, T(f16, 128, 576), T(f16, 576, 576))),
		opProblem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5}, T(f16, 128, 576), T(f16, 576), T(f16, 3072, 576)),
		withResidual(opProblem(t, ir.Linear, nil, T(f16, 128, 1536), T(f16, 576, 1536))),
		opProblem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5}, T(f16, 128, 576), T(f16, 576), T(f16, 49152, 576)),
	}
}

func TestCoopShapesFromCaps(t *testing.T) {
	s, ok := kernels.H200.CoopShape(codegen.F16, codegen.F16, codegen.F32)
	if !ok || s.M != 16 || s.N != 16 || s.K != 16 {
		t.Errorf("H200 f16→f32 shape %v %v", s, ok)
	}
	if _, ok := kernels.Lavapipe.CoopShape(codegen.F16, codegen.F16, codegen.F32); ok {
		t.Error("lavapipe has a cooperative-matrix shape")
	}
	if got := fmt.Sprint(s); got != "16x16x16 f16*f16+f32->f32" {
		t.Errorf("shape prints %q", got)
	}
}

func coopAttnCases(t testing.TB) []attnCase {
	f16, bf16 := ir.F16, ir.BF16
	return []attnCase{
		// SmolLM2-135M's prefill: 9 query heads of 64 over 3 key/value heads, causal.
		{sq: 128, hq: 9, skv: 128, hkv: 3, d: 64, dv: 64, dt: f16, attrs: ir.Attrs{"causal": true}, every: true},
		// Rows that do not fill a block, a key range cut by kv_len, a window, the hsd layout.
		{sq: 37, hq: 2, skv: 50, hkv: 1, d: 32, dv: 16, dt: f16, attrs: ir.Attrs{"causal": true, "window": 20, "layout": "hsd"}, kvLen: 45, every: true},
		{sq: 20, hq: 4, skv: 67, hkv: 2, d: 16, dv: 32, dt: f16, attrs: ir.Attrs{"scale": 0.3}, kvLen: 30, residual: true},
		{sq: 24, hq: 4, skv: 40, hkv: 4, d: 32, dv: 32, dt: bf16, attrs: ir.Attrs{"causal": true}, kvLen: 40},
	}
}

var attnCoopConfigs = []kernels.Config{nil, {"warps": 1, "block_k": 16}, {"warps": 4, "block_k": 64}, {"warps": 8, "block_k": 32}}

// attnEmuConfigs are the points the emulated attention runs: few key tiles each.
var attnEmuConfigs = []kernels.Config{nil, {"warps": 1, "block_k": 16}}

func TestCoopAttentionValidates(t *testing.T) {
	for _, c := range coopAttnCases(t) {
		p, _ := c.problem(t)
		t.Run(c.name(), func(t *testing.T) {
			if err := kernels.AttentionCoop.Accepts(p, kernels.H200); err != nil {
				t.Fatalf("refused on the H200: %v", err)
			}
			built := 0
			for _, cfg := range attnCoopConfigs {
				var l *kernels.Launch
				var err error
				if cfg == nil {
					l, _, err = kernels.Build(kernels.AttentionCoop, p, kernels.H200)
				} else if kernels.AttentionCoop.Space.Valid(p, cfg, kernels.H200) != nil {
					continue
				} else {
					l, err = kernels.AttentionCoop.Build(p, cfg, kernels.H200)
				}
				if err != nil {
					t.Fatalf("[%s]: %v", cfg.Key(), err)
				}
				validate(t, l)
				built++
			}
			if built < 2 {
				t.Errorf("only %d configurations valid", built)
			}
		})
	}
}

func TestCoopAttentionGPU(t *testing.T) {
	caps := coopDevice(t)
	for _, c := range coopAttnCases(t) {
		p, vals := c.problem(t)
		t.Run(c.name(), func(t *testing.T) {
			if err := kernels.AttentionCoop.Accepts(p, caps); err != nil {
				t.Skipf("the device refuses it: %v", err)
			}
			for ci, cfg := range attnCoopConfigs {
				if ci > 0 && !c.every {
					break
				}
				if cfg != nil && kernels.AttentionCoop.Space.Valid(p, cfg, caps) != nil {
					continue
				}
				kerneltest.Check(t, kernels.AttentionCoop, p, cfg, vals)
			}
		})
	}
}

var (
	emuOnce sync.Once
	emuDev  *runtime.Device
	emuErr  error
)

// emulationDevice is the default device opened once without the Khronos validation layer: the
// layer took tens of seconds per emulated module once a few dozen had been created (the emulated
// tests ran in 1.6 s without it and in over 100 s with it on lavapipe), and the emulated kernels
// use the API exactly as the other kernels, which run under the layer.
func emulationDevice(t *testing.T) *runtime.Device {
	emuOnce.Do(func() { emuDev, emuErr = runtime.Open(runtime.Options{CacheDir: "off"}) })
	if errors.Is(emuErr, runtime.ErrNoVulkan) || errors.Is(emuErr, runtime.ErrNoDevice) {
		t.Skipf("no Vulkan device (install mesa-vulkan-drivers): %v", emuErr)
	}
	if emuErr != nil {
		t.Fatal(emuErr)
	}
	return emuDev
}

// emulatedCaps is the test device with emulated f16 cooperative matrices (8x8x8 into f32), or a
// skip without a Vulkan device; on a device with real matrices the GPU tests cover the templates.
func emulatedCaps(t *testing.T) kernels.Caps {
	d := emulationDevice(t)
	caps := kerneltest.CapsOf(&d.Info)
	if len(caps.CoopShapes) > 0 {
		t.Skipf("%s has cooperative matrices: TestCoop*GPU run the templates on them", d.Info.Name)
	}
	if !caps.VulkanMemoryModel {
		t.Skipf("%s lacks the Vulkan memory model the templates use", d.Info.Name)
	}
	// An 8x8x8 product: the emulation's cost on lavapipe grows with the matrices' size (a 16x16x16
	// product per invocation made a test take minutes), and the templates take any device shape.
	caps.CoopShapes = []kernels.CoopShape{{M: 8, N: 8, K: 8, A: codegen.F16, B: codegen.F16, C: codegen.F32, Result: codegen.F32}}
	caps.EmulateMatrices = true
	return caps
}

// TestCoopMatmulEmulated runs the f16 cases on the test device with emulated matrices (lavapipe
// has none) and compares with the interpreter: the template's staging, layouts, prologue and
// epilogues are checked where the real matrices cannot run.
func TestCoopMatmulEmulated(t *testing.T) {
	caps := emulatedCaps(t)
	rng := rand.New(rand.NewSource(13))
	splitSeen := map[string]bool{}
	for _, tc := range coopGemmCases(t) {
		if err := kernels.MatmulCoop.Accepts(tc.p, caps); err != nil {
			continue // bf16
		}
		t.Run(tc.name, func(t *testing.T) {
			args := make([]*ir.Tensor, len(tc.p.Args))
			for i, a := range tc.p.Args {
				args[i] = kerneltest.Random(rng, a)
			}
			for ci, c := range coopConfigs {
				if ci > 0 && !tc.every {
					break
				}
				if c != nil && kernels.MatmulCoop.Space.Valid(tc.p, c, caps) != nil {
					continue
				}
				checkWith(t, kernels.MatmulCoop, tc.p, c, args, caps)
			}
			// Split-K: each case at its first valid point, and every point on some case (lavapipe
			// compiles an emulated kernel in seconds; TestCoopMatmulGPU runs them all on the H200).
			split := 0
			for _, c := range coopSplitConfigs {
				if kernels.MatmulCoop.Space.Valid(tc.p, c, caps) != nil || (split > 0 && splitSeen[c.Key()]) {
					continue
				}
				checkWith(t, kernels.MatmulCoop, tc.p, c, args, caps)
				splitSeen[c.Key()] = true
				split++
			}
			if split == 0 {
				t.Errorf("no split-K point of %d is valid", len(coopSplitConfigs))
			}
		})
	}
	for _, c := range coopSplitConfigs {
		if !splitSeen[c.Key()] {
			t.Errorf("split-K point [%s] ran on no case", c.Key())
		}
	}
}

// TestCoopAttentionEmulated runs attention cases with emulated matrices on lavapipe: the f16 ones
// of coopAttnCases but SmolLM2's (it passed, but took lavapipe 250 s; it runs on the GPU), and
// small ones for the second configuration.
func TestCoopAttentionEmulated(t *testing.T) {
	caps := emulatedCaps(t)
	f16 := ir.F16
	cases := append(coopAttnCases(t)[1:],
		attnCase{sq: 9, hq: 2, skv: 20, hkv: 1, d: 16, dv: 8, dt: f16, attrs: ir.Attrs{"causal": true, "window": 6, "layout": "hsd"}, kvLen: 18, every: true},
		attnCase{sq: 6, hq: 4, skv: 21, hkv: 2, d: 8, dv: 16, dt: f16, attrs: ir.Attrs{"scale": 0.3}, kvLen: 19, residual: true, every: true},
		// per-operand layouts: q from a projection over heads-first k and v (the loads are the
		// emulation's and the matrices' alike; heads-first q is the case above)
		attnCase{sq: 7, hq: 2, skv: 17, hkv: 1, d: 8, dv: 8, dt: f16, attrs: ir.Attrs{"causal": true, "k_layout": "hsd", "v_layout": "hsd"}, kvLen: 15},
	)
	for _, c := range cases {
		p, vals := c.problem(t)
		if err := kernels.AttentionCoop.Accepts(p, caps); err != nil {
			continue
		}
		t.Run(c.name(), func(t *testing.T) {
			for ci, cfg := range attnEmuConfigs {
				if ci > 0 && !c.every {
					break
				}
				if cfg != nil && kernels.AttentionCoop.Space.Valid(p, cfg, caps) != nil {
					continue
				}
				checkWith(t, kernels.AttentionCoop, p, cfg, vals, caps)
			}
		})
	}
}

// checkWith is kerneltest.Check with the given capabilities, on the emulation device.
func checkWith(t *testing.T, tmpl *kernels.Template, p *kernels.Problem, c kernels.Config, args []*ir.Tensor, caps kernels.Caps) {
	t.Helper()
	var l *kernels.Launch
	var err error
	if c == nil {
		l, c, err = kernels.Build(tmpl, p, caps)
	} else {
		l, err = tmpl.Build(p, c, caps)
	}
	if err != nil {
		t.Fatalf("%s %s: %v", tmpl.Name, p.Key(), err)
	}
	got, err := kerneltest.Run(emulationDevice(t), p, l, args)
	if err != nil {
		t.Fatalf("%s [%s]: run: %v", tmpl.Name, c.Key(), err)
	}
	want, err := kerneltest.Expect(p, args)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if msg := kerneltest.Compare(got[i], want[i], tune.LaunchTolerance(l, p, i)); msg != "" {
			t.Errorf("%s [%s]: result %d: %s", tmpl.Name, c.Key(), i, msg)
		}
	}
}

// TestCoopSuggestions: the points matmul_coop asks a search to measure first, on the H200, for
// SmolLM2's prefill shapes and the 4096³ GEMM: valid, building modules that validate, split-K
// for the prefill's small results (18 to 96 workgroups unsplit) and never for the GEMM, whose
// 1024 blocks of 128×128 fill the device; the default point stays unsplit either way.
func TestCoopSuggestions(t *testing.T) {
	caps := kernels.H200
	gemm := opProblem(t, ir.Linear, nil, ir.T(ir.F16, 4096, 4096), ir.T(ir.F16, 4096, 4096))
	for _, p := range append(smolPrefillProblems(t), gemm) {
		t.Run(p.Key(), func(t *testing.T) {
			sug := kernels.MatmulCoop.Space.Suggestions(p, caps)
			if len(sug) == 0 || len(sug) > 24 {
				t.Fatalf("%d suggestions; want some, and few enough to leave a 32-point search room", len(sug))
			}
			split := 0
			for _, c := range sug {
				l, err := kernels.MatmulCoop.Build(p, c, caps)
				if err != nil {
					t.Fatalf("[%s]: %v", c.Key(), err)
				}
				if c["split_k"] > 1 {
					split++
					checkSplitLaunch(t, p, c, l)
				}
				validate(t, l)
			}
			small := p.Outs[0].Shape[1] <= 3072
			if small && split == 0 {
				t.Errorf("no split-K suggestion for a %v result", p.Outs[0].Shape)
			}
			if p == gemm && split > 0 {
				t.Errorf("%d split-K suggestions for the 4096³ GEMM", split)
			}
			_, def, err := kernels.Build(kernels.MatmulCoop, p, caps)
			if err != nil || def["split_k"] != 1 {
				t.Errorf("default point %s (%v), want split_k=1", def.Key(), err)
			}
		})
	}
}
