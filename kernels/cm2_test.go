package kernels_test

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
)

// cm2Point is a small block for the emulated tests: workgroup matrices of 32×32 over slices of
// 16, 64 invocations (emulated, every subgroup computes the whole accumulator).
var cm2Point = kernels.Config{"bm": 32, "bn": 32, "bk": 16, "wg": 64, "unroll": 1, "direct": 0, "split_k": 1}

// cm2DirectPoint is cm2Point storing the result itself where the form allows.
var cm2DirectPoint = kernels.Config{"bm": 32, "bn": 32, "bk": 16, "wg": 64, "unroll": 1, "direct": 1, "split_k": 1}

// emulatedCM2Caps is emulatedCaps with VK_NV_cooperative_matrix2's workgroup matrices pretended
// (granules of 16, any workgroup size), emulated on the test device.
func emulatedCM2Caps(t *testing.T) kernels.Caps {
	caps := emulatedCaps(t)
	caps.Coop2 = &kernels.Coop2Caps{MaxWorkgroupSize: 256, MaxDimension: 256,
		Shapes: []kernels.Coop2Shape{{MGran: 16, NGran: 16, KGran: 16, A: codegen.F16, B: codegen.F16, C: codegen.F32, Result: codegen.F32}}}
	return caps
}

// cm2Cases are matmul_cm2's forms at edges no block divides: an f16 linear with a bias, an
// import's rmsnorm_linear[act=f16] of an f32 x, rmsnorm_linear of an f16 x with a residual
// epilogue, and a Q4_K linear (B copied to f16 first).
func cm2Cases(t *testing.T) []gemmCase {
	f16, f32 := ir.F16, ir.F32
	res := withResidual(opProblem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5}, ir.T(f16, 40, 64), ir.T(f16, 64), ir.T(f16, 48, 64)))
	return []gemmCase{
		{"cm2 linear f16 40x64->48 bias", opProblem(t, ir.Linear, nil, ir.T(f16, 40, 64), ir.T(f16, 48, 64), ir.T(f16, 48)), false},
		{"cm2 rmsnorm_linear[act=f16] f32 40x64->24", opProblem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5, "act": "f16"}, ir.T(f32, 40, 64), ir.T(f32, 64), ir.T(f16, 24, 64)), false},
		{"cm2 rmsnorm_linear f16 40x64->48 + residual", res, false},
		{"cm2 linear f16 x q4_k 130x256->40", opProblem(t, ir.Linear, nil, ir.T(f16, 130, 256), ir.T(ir.Q4_K, 40, 256)), false},
		{"cm2 linear f16 40x64->48", opProblem(t, ir.Linear, nil, ir.T(f16, 40, 64), ir.T(f16, 48, 64)), false},
	}
}

// TestMatmulCM2Direct: at direct = 1 a product with nothing to apply element by element
// stores its result itself (one step; the Q4_K one after its copy of B); a bias or rmsnorm
// makes the point invalid. TestMatmulCM2Emulated checks the direct forms against the
// interpreter.
func TestMatmulCM2Direct(t *testing.T) {
	caps := emulatedCM2Caps(t)
	cases := cm2Cases(t)
	for _, c := range []struct {
		name  string
		steps int // at direct = 1; 0: not valid
	}{
		{"cm2 linear f16 40x64->48", 1},
		{"cm2 linear f16 x q4_k 130x256->40", 2},
		{"cm2 linear f16 40x64->48 bias", 0},
		{"cm2 rmsnorm_linear[act=f16] f32 40x64->24", 0},
	} {
		i := slices.IndexFunc(cases, func(g gemmCase) bool { return g.name == c.name })
		p := cases[i].p
		err := kernels.MatmulCM2.Space.Valid(p, cm2DirectPoint, caps)
		if c.steps == 0 {
			if err == nil {
				t.Errorf("%s: direct=1 accepted", c.name)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		l, err := kernels.MatmulCM2.Build(p, cm2DirectPoint, caps)
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Steps) != c.steps || !strings.HasSuffix(l.Steps[len(l.Steps)-1].Kernel.Name, "_out") {
			t.Errorf("%s: %d steps ending in %s, want %d ending in the direct product", c.name, len(l.Steps), l.Steps[len(l.Steps)-1].Kernel.Name, c.steps)
		}
		if l0, err := kernels.MatmulCM2.Build(p, cm2Point, caps); err != nil || len(l0.Steps) != c.steps+1 {
			t.Errorf("%s at direct=0: want the reduction step too: %v", c.name, err)
		}
	}
}

// TestMatmulCM2Emulated runs matmul_cm2 with emulated workgroup matrices on the test device
// against the interpreter.
func TestMatmulCM2Emulated(t *testing.T) {
	caps := emulatedCM2Caps(t)
	rng := rand.New(rand.NewSource(41))
	for _, tc := range cm2Cases(t) {
		t.Run(tc.name, func(t *testing.T) {
			if err := kernels.MatmulCM2.Space.Valid(tc.p, cm2Point, caps); err != nil {
				t.Fatal(err)
			}
			args := randomArgs(rng, tc.p)
			checkWith(t, kernels.MatmulCM2, tc.p, cm2Point, args, caps)
			if kernels.MatmulCM2.Space.Valid(tc.p, cm2DirectPoint, caps) == nil {
				checkWith(t, kernels.MatmulCM2, tc.p, cm2DirectPoint, args, caps)
			}
		})
	}
}

// TestMatmulCM2Unrolled: the product's loop with slices written out, K = 112 (seven slices of
// 16): two and four a step leave one and three slices to the loop of the rest; seven is not a
// point, and one step of more than K is refused.
func TestMatmulCM2Unrolled(t *testing.T) {
	caps := emulatedCM2Caps(t)
	rng := rand.New(rand.NewSource(53))
	p := withResidual(opProblem(t, ir.Linear, nil, ir.T(ir.F16, 40, 112), ir.T(ir.F16, 48, 112)))
	for _, u := range []int{2, 4} {
		c := kernels.Config{"bm": 32, "bn": 32, "bk": 16, "wg": 64, "unroll": u, "direct": 0, "split_k": 1}
		t.Run(c.Key(), func(t *testing.T) {
			l, err := kernels.MatmulCM2.Build(p, c, caps)
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("_u%d", u); !strings.HasSuffix(l.Steps[0].Kernel.Name, want) {
				t.Errorf("product kernel %q, want its name to end in %s", l.Steps[0].Kernel.Name, want)
			}
			checkWith(t, kernels.MatmulCM2, p, c, randomArgs(rng, p), caps)
		})
	}
	if err := kernels.MatmulCM2.Space.Valid(p, kernels.Config{"bm": 32, "bn": 32, "bk": 16, "wg": 64, "unroll": 8, "direct": 0, "split_k": 1}, caps); err == nil {
		t.Error("8 slices of 16 (128) over K = 112 accepted")
	}
}

// TestMatmulCM2SplitK: K split over workgroups, the splits' partial sums added by the reduction
// step: K = 112 (seven slices of 16) in two and four splits, at one and two slices a step (the
// last split with a slice left over), with a residual epilogue; rmsnorm_linear (its Σx² whole
// from the row step, not one part a split); a Q4_K weight copied to f16 first; the gate/up
// form's column parts. A direct store and a split that would be empty are refused.
func TestMatmulCM2SplitK(t *testing.T) {
	caps := emulatedCM2Caps(t)
	rng := rand.New(rand.NewSource(59))
	f16, f32 := ir.F16, ir.F32
	res := withResidual(opProblem(t, ir.Linear, nil, ir.T(f16, 40, 112), ir.T(f16, 48, 112)))
	rms := opProblem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5, "act": "f16"}, ir.T(f32, 40, 64), ir.T(f32, 64), ir.T(f16, 24, 64))
	q4 := opProblem(t, ir.Linear, nil, ir.T(f16, 130, 256), ir.T(ir.Q4_K, 40, 256))
	gateUp := opProblem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5, "act": "f16"}, ir.T(f32, 130, 256), ir.T(f32, 256), ir.T(ir.Q4_K, 48, 256))
	gateUp.Outs = []ir.Type{ir.T(f16, 130, 24)}
	gateUp.Parts = []kernels.Part{{Kind: kernels.PartPair, Cols: 48, Out: 0, Expr: swiglu(f16)}}
	point := func(unroll, split int) kernels.Config {
		return kernels.Config{"bm": 32, "bn": 32, "bk": 16, "wg": 64, "unroll": unroll, "direct": 0, "split_k": split}
	}
	for _, tc := range []struct {
		name string
		p    *kernels.Problem
		c    kernels.Config
	}{
		{"residual K=112 split 2", res, point(1, 2)},
		{"residual K=112 split 4", res, point(1, 4)},
		{"residual K=112 split 2 unroll 2", res, point(2, 2)},
		{"rmsnorm_linear split 2", rms, point(1, 2)},
		{"q4_k split 4", q4, point(2, 4)},
		{"gate/up parts split 2", gateUp, point(1, 2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := kernels.MatmulCM2.Build(tc.p, tc.c, caps)
			if err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("_s%d", tc.c["split_k"])
			found := false
			for _, st := range l.Steps {
				found = found || strings.Contains(st.Kernel.Name, want)
			}
			if !found {
				t.Errorf("no step's kernel is named for its splits (%s)", want)
			}
			checkWith(t, kernels.MatmulCM2, tc.p, tc.c, randomArgs(rng, tc.p), caps)
		})
	}
	direct := point(1, 2)
	direct["direct"] = 1
	if err := kernels.MatmulCM2.Space.Valid(opProblem(t, ir.Linear, nil, ir.T(f16, 40, 112), ir.T(f16, 48, 112)), direct, caps); err == nil {
		t.Error("split_k=2 with direct=1 accepted")
	}
	// K = 48 in four splits of 16: the fourth would be empty.
	if err := kernels.MatmulCM2.Space.Valid(opProblem(t, ir.Linear, nil, ir.T(f16, 40, 48), ir.T(f16, 48, 48)), point(1, 4), caps); err == nil {
		t.Error("split_k=4 over K = 48 accepted")
	}
}

// TestMatmulCM2Parts: the 8B's merged gate/up form in an import's prefill (rmsnorm_linear[act=f16]
// of an f32 x over Q4_K with interleaved gate and up rows, silu(gate)·up through column parts),
// with the copy of B cut in two parts of one column block each.
func TestMatmulCM2Parts(t *testing.T) {
	caps := emulatedCM2Caps(t)
	defer kernels.SetCoopDQScratch(32 * 256 * 2)()
	p := opProblem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5, "act": "f16"}, ir.T(ir.F32, 130, 256), ir.T(ir.F32, 256), ir.T(ir.Q4_K, 48, 256))
	p.Outs = []ir.Type{ir.T(ir.F16, 130, 24)}
	p.Parts = []kernels.Part{{Kind: kernels.PartPair, Cols: 48, Out: 0, Expr: swiglu(ir.F16)}}
	l, err := kernels.MatmulCM2.Build(p, cm2Point, caps)
	if err != nil {
		t.Fatal(err)
	}
	// rows, (copy, product) × 2, reduction
	if len(l.Steps) != 6 {
		t.Fatalf("%d steps, want 6: the copy of 48 rows was not made in two parts", len(l.Steps))
	}
	checkWith(t, kernels.MatmulCM2, p, cm2Point, tune.Inputs(p, rand.New(rand.NewSource(43))), caps)
}

// TestMatmulCM2Accepts: what matmul_cm2 leaves to other templates.
func TestMatmulCM2Accepts(t *testing.T) {
	caps := emulatedCM2Caps(t)
	f16, f32 := ir.F16, ir.F32
	for _, c := range []struct {
		name string
		p    *kernels.Problem
	}{
		{"no coopmat2", nil},
		{"f32 linear", opProblem(t, ir.Linear, nil, ir.T(f32, 40, 64), ir.T(f32, 48, 64))},
		{"decode row", opProblem(t, ir.Linear, nil, ir.T(f16, 1, 64), ir.T(f16, 48, 64))},
		{"batched matmul", opProblem(t, ir.Matmul, nil, ir.T(f16, 2, 32, 64), ir.T(f16, 2, 64, 32))},
		{"q4_k at 37 rows", opProblem(t, ir.Linear, nil, ir.T(f16, 37, 256), ir.T(ir.Q4_K, 40, 256))},
	} {
		p, cc := c.p, caps
		if p == nil {
			p, cc = opProblem(t, ir.Linear, nil, ir.T(f16, 40, 64), ir.T(f16, 48, 64)), kernels.Lavapipe
		}
		if err := kernels.MatmulCM2.Accepts(p, cc); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
}

// cm2GPUPoints are the points TestMatmulCM2GPU runs (nil: the static point).
var cm2GPUPoints = []kernels.Config{nil,
	{"bm": 128, "bn": 128, "bk": 32, "wg": 128, "unroll": 1, "direct": 0, "split_k": 1},
	{"bm": 64, "bn": 64, "bk": 32, "wg": 128, "unroll": 1, "direct": 0, "split_k": 1},
	{"bm": 128, "bn": 256, "bk": 64, "wg": 256, "unroll": 1, "direct": 0, "split_k": 1},
	{"bm": 64, "bn": 128, "bk": 16, "wg": 256, "unroll": 1, "direct": 0, "split_k": 1},
	{"bm": 128, "bn": 128, "bk": 32, "wg": 128, "unroll": 8, "direct": 0, "split_k": 1},
	{"bm": 128, "bn": 256, "bk": 64, "wg": 256, "unroll": 4, "direct": 0, "split_k": 1},
	{"bm": 128, "bn": 128, "bk": 32, "wg": 128, "unroll": 1, "direct": 1, "split_k": 1},
	{"bm": 64, "bn": 128, "bk": 16, "wg": 256, "unroll": 4, "direct": 1, "split_k": 1},
	{"bm": 128, "bn": 256, "bk": 64, "wg": 256, "unroll": 1, "direct": 1, "split_k": 1}, // cm2Static's big point
	{"bm": 128, "bn": 256, "bk": 64, "wg": 256, "unroll": 2, "direct": 1, "split_k": 1},
	{"bm": 128, "bn": 256, "bk": 64, "wg": 256, "unroll": 2, "direct": 0, "split_k": 1},
	{"bm": 128, "bn": 128, "bk": 32, "wg": 128, "unroll": 1, "direct": 0, "split_k": 2},
	{"bm": 128, "bn": 128, "bk": 32, "wg": 128, "unroll": 2, "direct": 0, "split_k": 4},
	{"bm": 128, "bn": 256, "bk": 64, "wg": 256, "unroll": 2, "direct": 0, "split_k": 4},
}

// TestMatmulCM2GPU runs matmul_cm2 on the device's workgroup matrices against the interpreter:
// the emulated tests' forms at a few hundred rows and columns that no block divides, and the
// gate/up form through column parts, at several points.
func TestMatmulCM2GPU(t *testing.T) {
	d := kerneltest.Device(t)
	caps := kerneltest.CapsOf(&d.Info)
	if caps.Coop2 == nil {
		t.Skipf("missing capability: %s has no VK_NV_cooperative_matrix2 workgroup-scope matrices (lavapipe has none): matmul_cm2 runs on the GPU machine", d.Info.Name)
	}
	t.Logf("%s: workgroup-scope shapes %+v", d.Info.Name, caps.Coop2)
	f16, f32 := ir.F16, ir.F32
	gateUp := opProblem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5, "act": "f16"}, ir.T(f32, 300, 512), ir.T(f32, 512), ir.T(ir.Q4_K, 528, 512))
	gateUp.Outs = []ir.Type{ir.T(f16, 300, 264)}
	gateUp.Parts = []kernels.Part{{Kind: kernels.PartPair, Cols: 528, Out: 0, Expr: swiglu(f16)}}
	cases := []gemmCase{
		{"linear f16 300x512->264 bias", opProblem(t, ir.Linear, nil, ir.T(f16, 300, 512), ir.T(f16, 264, 512), ir.T(f16, 264)), false},
		{"linear f16 300x512->264 (stored directly)", opProblem(t, ir.Linear, nil, ir.T(f16, 300, 512), ir.T(f16, 264, 512)), false},
		{"linear f16 x q4_k 300x512->264 (stored directly)", opProblem(t, ir.Linear, nil, ir.T(f16, 300, 512), ir.T(ir.Q4_K, 264, 512)), false},
		{"rmsnorm_linear[act=f16] f32 300x512->392", opProblem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5, "act": "f16"}, ir.T(f32, 300, 512), ir.T(f32, 512), ir.T(f16, 392, 512)), false},
		{"linear f16 x q6_k 300x512->264 + residual", withResidual(opProblem(t, ir.Linear, nil, ir.T(f16, 300, 512), ir.T(ir.Q6_K, 264, 512))), false},
		{"gate/up rmsnorm q4_k swiglu parts 300x512->528", gateUp, false},
	}
	rng := rand.New(rand.NewSource(47))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := randomArgs(rng, tc.p)
			for _, c := range cm2GPUPoints {
				if c != nil && kernels.MatmulCM2.Space.Valid(tc.p, c, caps) != nil {
					t.Logf("point %s not valid here", c.Key())
					continue
				}
				kerneltest.Check(t, kernels.MatmulCM2, tc.p, c, args)
			}
		})
	}
}

// TestMatmulCM2Validates: matmul_cm2's modules as a device with VK_NV_cooperative_matrix2
// gets them (workgroup matrices, tensor addressing, not emulated) pass spirv-val, for the
// forms of the emulated tests at points with and without the K loop written out, the direct
// store included.
func TestMatmulCM2Validates(t *testing.T) {
	caps := kernels.H200
	caps.Coop2 = &kernels.Coop2Caps{MaxWorkgroupSize: 256, MaxDimension: 1024, ReservedShared: 8192, Shapes: []kernels.Coop2Shape{
		{MGran: 16, NGran: 16, KGran: 16, A: codegen.F16, B: codegen.F16, C: codegen.F32, Result: codegen.F32, Invocations: 64},
	}}
	for _, tc := range cm2Cases(t) {
		t.Run(tc.name, func(t *testing.T) {
			for _, u := range []int{1, 4} {
				for direct := range 3 {
					// direct 2: the accumulators in two splits of K
					c := kernels.Config{"bm": 32, "bn": 32, "bk": 16, "wg": 64, "unroll": u, "direct": direct % 2, "split_k": 1 + direct/2}
					if direct > 0 && kernels.MatmulCM2.Space.Valid(tc.p, c, caps) != nil {
						continue
					}
					l, err := kernels.MatmulCM2.Build(tc.p, c, caps)
					if err != nil {
						t.Fatalf("[%s]: %v", c.Key(), err)
					}
					validate(t, l)
				}
			}
		})
	}
}
