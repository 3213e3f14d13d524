package kernels_test

import (
	"math/rand"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
	"github.com/vkc-project/vkc/runtime"
)

// TestMatmulVecQValidates builds MatmulVecQ for the H200 at its default point and every point a
// GPU's budgeted search measures first, for every format it reads, one and three rows of x and
// rmsnorm_linear, and runs spirv-val on each module (lavapipe runs a sample of the points against
// the interpreter: TestMatmulVecQ).
func TestMatmulVecQValidates(t *testing.T) {
	caps := kernels.H200
	f32 := ir.F32
	for _, d := range kernels.QuantizedDTypes() {
		t.Run(d.String(), func(t *testing.T) {
			K := quantK(d)
			for _, p := range []*kernels.Problem{
				opProblem(t, ir.Linear, nil, ir.T(f32, 1, K), ir.T(d, 64, K)),
				opProblem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5}, ir.T(f32, 3, K), ir.T(f32, K), ir.T(d, 64, K)),
			} {
				_, def, err := kernels.Build(kernels.MatmulVecQ, p, caps)
				if err != nil {
					t.Fatalf("%s: %v", p.Key(), err)
				}
				checkVecQStatic(t, p, d, K, def)
				cs := append([]kernels.Config{def}, kernels.MatmulVecQ.Space.Suggestions(p, caps)...)
				if len(cs) < 6 {
					t.Errorf("%s: %d points", p.Key(), len(cs))
				}
				for _, c := range cs {
					l, c, err := kernels.BuildAt(kernels.MatmulVecQ, p, c, caps)
					if err != nil {
						t.Fatalf("%s [%s]: %v", p.Key(), c.Key(), err)
					}
					validate(t, l)
				}
			}
		})
	}
}

// checkVecQStatic: a GPU's static choice gives each invocation of a column group a unit of its
// column's K to read where K has that many units (a unit is span words of each of a block's runs
// of low bits: K-quants 32·span elements, Q8_0 4·span, Q4_0/Q5_0 8·span).
func checkVecQStatic(t *testing.T, p *kernels.Problem, d ir.DType, k int, c kernels.Config) {
	t.Helper()
	f := d.Format()
	words := f.Layout.Low.Radix[0] / 4
	units := k / f.BlockElems * (words / c["span"])
	if c["split"] > 0 {
		units *= 4 // at least four groups of runs a block (kernels.splitOf: Q4_K, Q6_K, Q5_K …)
	}
	kp := c["wg"] / c["cols"]
	if units < kp && (c["span"] != 1 || kp > 1) {
		t.Errorf("%s: static [%s]: %d invocations a column for %d units of K", p.Key(), c.Key(), kp, units)
	}
}

// TestMatmulVecQGPUStatic: the H200's static choice at Llama-3.2-1B's and Llama-3.1-8B's decode
// shapes gives every invocation of a column group a unit of K, and the small products (the 1B
// model's K/V projections: 512 columns) more invocations than the space's first point, which ran
// 64 workgroups there (docs/bench/h200-2026-12-05, call 8).
func TestMatmulVecQGPUStatic(t *testing.T) {
	caps := kernels.H200
	for _, d := range []ir.DType{ir.Q4_K, ir.Q6_K, ir.Q8_0, ir.Q5_0, ir.Q4_0} {
		for _, nk := range [][2]int{{512, 2048}, {2048, 2048}, {3072, 2048}, {16384, 2048}, {2048, 8192}, {128256, 2048},
			{4096, 4096}, {14336, 4096}, {4096, 14336}} {
			p := opProblem(t, ir.Linear, nil, ir.T(ir.F32, 1, nk[1]), ir.T(d, nk[0], nk[1]))
			_, c, err := kernels.Build(kernels.MatmulVecQ, p, caps)
			if err != nil {
				t.Fatalf("%s: %v", p.Key(), err)
			}
			checkVecQStatic(t, p, d, nk[1], c)
			inv := nk[0] / max(c["rows"], 1) * c["wg"] / c["cols"]
			if nk[0] == 512 && inv <= 512/2*32 {
				t.Errorf("%s: static [%s] runs %d invocations, no more than the space's first point", p.Key(), c.Key(), inv)
			}
			// A byte a quant: units of 16 bytes (span 4) from 2048 columns of K up (the
			// H100's best points, docs/bench/h100-2026-12-06 call 3); the K-quants span 2, or
			// span 4 with a block's runs over the invocations (split) where that measured
			// faster (session 10): Q6_K from 4096 columns up, Q4_K at 4096 columns.
			span, split := map[ir.DType]int{ir.Q8_0: 4, ir.Q4_K: 2, ir.Q6_K: 2}[d], 0
			if d == ir.Q6_K && nk[0] >= 4096 || d == ir.Q4_K && nk[0] == 4096 { // linear's; rmsnorm_linear never splits
				span, split = 4, 1
			}
			if span > 0 && nk[0] >= 2048 && (c["span"] != span || c["split"] != split) {
				t.Errorf("%s: static [%s], want span %d, split %d", p.Key(), c.Key(), span, split)
			}
			// Q8_0 at the 8B shapes (vecQByteRows): four columns an invocation over 14336
			// columns, two in column groups of 64 over 4096.
			if d == ir.Q8_0 && nk[1] >= 4096 && nk[0] >= 4096 {
				rows, kp := map[int]int{14336: 4, 4096: 2}[nk[0]], map[int]int{14336: 32, 4096: 64}[nk[0]]
				if c["rows"] != rows || c["wg"]/c["cols"] != kp {
					t.Errorf("%s: static [%s], want %d columns an invocation, column groups of %d", p.Key(), c.Key(), rows, kp)
				}
			}
		}
	}
	// rmsnorm_linear does not split (the 8B plan's Q6_K LM head and Q4_K QKV ran slower so).
	for _, d := range []ir.DType{ir.Q4_K, ir.Q6_K} {
		p := opProblem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5}, ir.T(ir.F32, 1, 4096), ir.T(ir.F32, 4096), ir.T(d, 4096, 4096))
		if _, c, err := kernels.Build(kernels.MatmulVecQ, p, caps); err != nil || c["split"] != 0 {
			t.Errorf("%s: static [%s] (%v), want split 0", p.Key(), c.Key(), err)
		}
	}
}

// TestMatmulVecQSuggestedGPU checks, on a GPU, MatmulVecQ at its static choice and at every
// point a budgeted search measures first (Space.Suggestions: the split points among them)
// against the interpreter, for the formats of Q4_K_M and Q8_0 files and the other layouts a
// split spreads differently (Q5_K, Q3_K, Q2_K, IQ4_XS) or not at all (Q4_0): one row of x
// through 96 columns and K = 1024, and rmsnorm_linear's three rows. Lavapipe runs a sample of
// the points (TestMatmulVecQ); a GPU's form builds the same code with other points.
func TestMatmulVecQSuggestedGPU(t *testing.T) {
	d := kerneltest.Device(t)
	if d.Info.Type == runtime.CPU {
		t.Skip("needs a GPU: the search's points are a GPU's (lavapipe runs a sample of the space: TestMatmulVecQ)")
	}
	caps := kerneltest.CapsOf(&d.Info)
	rng := rand.New(rand.NewSource(41))
	for _, dt := range []ir.DType{ir.Q4_K, ir.Q6_K, ir.Q8_0, ir.Q5_K, ir.Q3_K, ir.Q2_K, ir.IQ4_XS, ir.Q4_0} {
		t.Run(dt.String(), func(t *testing.T) {
			for _, p := range []*kernels.Problem{
				opProblem(t, ir.Linear, nil, ir.T(ir.F32, 1, 1024), ir.T(dt, 96, 1024)),
				opProblem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5}, ir.T(ir.F32, 3, 1024), ir.T(ir.F32, 1024), ir.T(dt, 96, 1024)),
			} {
				args := randomArgs(rng, p)
				kerneltest.Check(t, kernels.MatmulVecQ, p, nil, args)
				for _, c := range kernels.MatmulVecQ.Space.Suggestions(p, caps) {
					kerneltest.Check(t, kernels.MatmulVecQ, p, c, args)
				}
			}
		})
	}
}

// TestMatmulVecQStaged checks MatmulVecQ's stage = 1 (rmsnorm_linear's x·gamma written to shared
// memory once a workgroup, each row's Σx² summed over the workgroup before the K loop) against
// the interpreter: Q4_K, Q8_0 (34-byte blocks) and Q6_K (210), one row and three, odd N, a
// SwiGLU epilogue, at the GPU default's column groups and at lavapipe's, with the workgroup's
// sum by subgroup adds and, with them taken from the caps, by a shared-memory tree; f16 x once.
// A linear has no x·gamma: the space refuses it stage = 1.
func TestMatmulVecQStaged(t *testing.T) {
	rng := rand.New(rand.NewSource(29))
	caps, tree := stagedCaps(t)
	f32 := ir.F32
	T := ir.T
	eps := ir.Attrs{"eps": 1e-5}
	pt := func(wg, cols, span, rows int) kernels.Config {
		return kernels.Config{"wg": wg, "cols": cols, "span": span, "rows": rows, "split": 0, "stage": 1, "unroll": 1}
	}
	for _, dt := range []ir.DType{ir.Q4_K, ir.Q8_0, ir.Q6_K} {
		t.Run(dt.String(), func(t *testing.T) {
			K := quantK(dt)
			one := opProblem(t, ir.RMSNormLinear, eps, T(f32, 1, K), T(f32, K), T(dt, 37, K))
			three := withSwiGLU(opProblem(t, ir.RMSNormLinear, eps, T(f32, 3, K), T(f32, K), T(dt, 22, K)))
			cases := []stagedCase{
				{one, pt(128, 4, 1, 2), caps},
				{one, pt(32, 8, 1, 4), tree},
				{three, pt(64, 2, 1, 2), caps},
			}
			if dt == ir.Q4_K {
				cases = append(cases, stagedCase{opProblem(t, ir.RMSNormLinear, eps, T(ir.F16, 2, K), T(f32, K), T(dt, 9, K)), pt(32, 8, 1, 1), caps})
				lin := opProblem(t, ir.Linear, nil, T(f32, 1, K), T(dt, 37, K))
				if err := kernels.MatmulVecQ.Space.Valid(lin, pt(128, 4, 1, 2), caps); err == nil {
					t.Errorf("stage=1 valid for %s, which has no gamma", lin.Key())
				}
			}
			checkStaged(t, rng, kernels.MatmulVecQ, cases)
		})
	}
}

// stagedCase is a point with stage = 1 of a matrix-vector template, checked on caps.
type stagedCase struct {
	p    *kernels.Problem
	c    kernels.Config
	caps kernels.Caps
}

// stagedCaps are the device's caps, and the same without subgroup arithmetic (so that
// stageNorm sums Σx² by its shared-memory tree).
func stagedCaps(t *testing.T) (caps, tree kernels.Caps) {
	d := kerneltest.Device(t)
	caps = kerneltest.CapsOf(&d.Info)
	tree = caps
	tree.SubgroupArithmetic = false
	return caps, tree
}

// checkStaged checks each case's point against the interpreter on random arguments; a point
// the space refuses fails the test.
func checkStaged(t *testing.T, rng *rand.Rand, tmpl *kernels.Template, cases []stagedCase) {
	t.Helper()
	for _, c := range cases {
		if err := tmpl.Space.Valid(c.p, c.c, c.caps); err != nil {
			t.Fatalf("%s [%s]: %v", c.p.Key(), c.c.Key(), err)
		}
		args := make([]*ir.Tensor, len(c.p.Args))
		for j, a := range c.p.Args {
			args[j] = kerneltest.Random(rng, a)
		}
		kerneltest.CheckWith(t, tmpl, c.p, c.c, args, c.caps)
	}
}
