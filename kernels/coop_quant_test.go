package kernels_test

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
)

// The cooperative-matrix matmul with a block-quantized B (a GGUF weight): the B slice is
// dequantized into f16 units as it is staged. Every format the kernels read is built for the
// H200 and validated (spirv-val); a few run with emulated matrices on lavapipe against the
// interpreter; TestCoopMatmulQuantGPU runs them all on a device with cooperative matrices.

// coopQuantCases are the quantized-B problems of format d with K = blocks of its blocks (at
// least 64): linear (odd rows and columns, f16 result), rmsnorm_linear with its gamma folded into
// the dequantized slice, linear with a cast epilogue to f32 (the prefill's residual products),
// and rmsnorm_linear[act=f16] over an f32 x.
func coopQuantCases(t testing.TB, d ir.DType, blocks int) []gemmCase {
	f16, f32 := ir.F16, ir.F32
	k := blocks * d.Format().BlockElems
	if k < 64 {
		k = 64
	}
	return []gemmCase{
		{fmt.Sprintf("linear f16 x %s 37x%d->40", d, k), opProblem(t, ir.Linear, nil, ir.T(f16, 37, k), ir.T(d, 40, k)), false},
		{fmt.Sprintf("rmsnorm_linear f16 x %s 20x%d->24", d, k), opProblem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5}, ir.T(f16, 20, k), ir.T(f32, k), ir.T(d, 24, k)), false},
		{fmt.Sprintf("linear f16 x %s cast to f32", d), withCast(opProblem(t, ir.Linear, nil, ir.T(f16, 24, k), ir.T(d, 16, k))), false},
		// an import's prefill: the f32 residual stream normalised and read as f16
		{fmt.Sprintf("rmsnorm_linear[act=f16] f32 x %s", d), opProblem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5, "act": "f16"}, ir.T(f32, 17, k), ir.T(f32, k), ir.T(d, 24, k)), false},
	}
}

// coopActCases: rmsnorm_linear[act=f16] with an f32 x (the residual stream) and f16 weights: A
// is rounded to f16 units as it is staged.
func coopActCases(t testing.TB) []gemmCase {
	f16, f32 := ir.F16, ir.F32
	return []gemmCase{
		{"rmsnorm_linear[act=f16] f32 x f16 W 37x64->40", opProblem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5, "act": "f16"}, ir.T(f32, 37, 64), ir.T(f32, 64), ir.T(f16, 40, 64)), false},
		{"rmsnorm_linear[act=f16] f32 x f16 W cast to f32", withCast(opProblem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5, "act": "f16"}, ir.T(f32, 20, 48), ir.T(f16, 48), ir.T(f16, 24, 48))), false},
	}
}

// TestCoopMatmulAct validates coopActCases' modules for the H200 and, with emulated matrices on
// the test device, runs the first against the interpreter (the second's emulated kernel took
// lavapipe four minutes to compile on a loaded machine; the GPU tests run it).
func TestCoopMatmulAct(t *testing.T) {
	for i, tc := range coopActCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			if err := kernels.MatmulCoop.Accepts(tc.p, kernels.H200); err != nil {
				t.Fatalf("refused on the H200: %v", err)
			}
			l, _, err := kernels.Build(kernels.MatmulCoop, tc.p, kernels.H200)
			if err != nil {
				t.Fatal(err)
			}
			validate(t, l)
			if i > 0 {
				return
			}
			caps := emulatedCaps(t)
			rng := rand.New(rand.NewSource(23))
			args := make([]*ir.Tensor, len(tc.p.Args))
			for i, a := range tc.p.Args {
				args[i] = kerneltest.Random(rng, a)
			}
			checkWith(t, kernels.MatmulCoop, tc.p, nil, args, caps)
		})
	}
	// Refused: an f32 A without act (the result promises f32 arithmetic).
	if err := kernels.MatmulCoop.Accepts(opProblem(t, ir.RMSNormLinear, nil, ir.T(ir.F32, 32, 64), ir.T(ir.F32, 64), ir.T(ir.F16, 16, 64)), kernels.H200); err == nil {
		t.Error("rmsnorm_linear with an f32 x and no act accepted")
	}
}

// TestCoopMatmulQuantValidates builds the quantized-B cases of every format the kernels read
// (kernels.QuantizedDTypes: generated from ir/quant's layout table, so a format added there is
// here too) for the H200, at the default point and a split-K one, and validates the modules.
func TestCoopMatmulQuantValidates(t *testing.T) {
	caps := kernels.H200
	for _, d := range kernels.QuantizedDTypes() {
		for _, tc := range coopQuantCases(t, d, 2) {
			t.Run(tc.name, func(t *testing.T) {
				if err := kernels.MatmulCoop.Accepts(tc.p, caps); err != nil {
					t.Fatalf("refused on the H200: %v", err)
				}
				for _, c := range []kernels.Config{nil, coopSplitConfigs[0]} {
					var l *kernels.Launch
					var err error
					if c == nil {
						l, _, err = kernels.Build(kernels.MatmulCoop, tc.p, caps)
					} else if err = kernels.MatmulCoop.Space.Valid(tc.p, c, caps); err == nil {
						l, err = kernels.MatmulCoop.Build(tc.p, c, caps)
					} else {
						continue
					}
					if err != nil {
						t.Fatalf("[%s]: %v", c.Key(), err)
					}
					validate(t, l)
				}
			})
		}
	}
	// Refused: an f32 A (the matrices are f16), blocks along N (matmul without tb).
	for _, p := range []*kernels.Problem{
		opProblem(t, ir.Linear, nil, ir.T(ir.F32, 32, 64), ir.T(ir.Q8_0, 16, 64)),
		opProblem(t, ir.Matmul, nil, ir.T(ir.F16, 32, 64), ir.T(ir.Q8_0, 64, 64)),
	} {
		if err := kernels.MatmulCoop.Accepts(p, caps); err == nil {
			t.Errorf("%s accepted", p.Key())
		}
	}
}

// coopQuantEmulated are the formats run with emulated matrices on lavapipe (a legacy format, a
// K-quant with sub-block scales and mins, one with high bits apart). Emulated matrices are slow
// on lavapipe (a 512-deep q4_k product ran past ten minutes on a loaded machine): one block
// deep, every case on q4_0, the plain linear on the others.
var coopQuantEmulated = []ir.DType{ir.Q4_0, ir.Q8_0, ir.Q4_K, ir.Q6_K}

// TestCoopMatmulQuantEmulated runs quantized-B cases with emulated matrices on the test device
// (skipped, naming it, on one with cooperative matrices) against the interpreter.
func TestCoopMatmulQuantEmulated(t *testing.T) {
	caps := emulatedCaps(t)
	rng := rand.New(rand.NewSource(17))
	for _, d := range coopQuantEmulated {
		for i, tc := range coopQuantCases(t, d, 1) {
			if i > 0 && d != ir.Q4_0 {
				continue
			}
			t.Run(tc.name, func(t *testing.T) {
				args := make([]*ir.Tensor, len(tc.p.Args))
				for i, a := range tc.p.Args {
					args[i] = kerneltest.Random(rng, a)
				}
				checkWith(t, kernels.MatmulCoop, tc.p, nil, args, caps)
			})
		}
	}
}

// TestCoopMatmulQuantGPU runs every format's quantized-B cases, at every point of coopConfigs
// and split-K, on a device with cooperative matrices (skipped elsewhere, saying so).
func TestCoopMatmulQuantGPU(t *testing.T) {
	caps := coopDevice(t)
	rng := rand.New(rand.NewSource(19))
	for _, d := range kernels.QuantizedDTypes() {
		for _, tc := range coopQuantCases(t, d, 2) {
			t.Run(tc.name, func(t *testing.T) {
				if err := kernels.MatmulCoop.Accepts(tc.p, caps); err != nil {
					t.Skipf("the device refuses it: %v", err)
				}
				args := make([]*ir.Tensor, len(tc.p.Args))
				for i, a := range tc.p.Args {
					args[i] = kerneltest.Random(rng, a)
				}
				for _, c := range append(append([]kernels.Config(nil), coopConfigs...), coopSplitConfigs...) {
					if c != nil && kernels.MatmulCoop.Space.Valid(tc.p, c, caps) != nil {
						continue
					}
					kerneltest.Check(t, kernels.MatmulCoop, tc.p, c, args)
				}
			})
		}
	}
}
