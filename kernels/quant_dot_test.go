package kernels_test

import (
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
)

// int8Caps is the test device's capabilities with 8-bit activations asked for wherever they
// apply; the test is skipped, naming the capability, on a device without integer dot products.
func int8Caps(t *testing.T) kernels.Caps {
	t.Helper()
	d := kerneltest.Device(t)
	caps := kerneltest.CapsOf(&d.Info)
	if !caps.IntegerDot {
		t.Skipf("%s has no integer dot products (shaderIntegerDotProduct, SPV_KHR_integer_dot_product): the 8-bit activation kernels cannot run", d.Info.Name)
	}
	caps.Int8 = kernels.Int8Only
	return caps
}

// int8Bound is, for each output element of linear-family problem p on args, the largest error
// 8-bit activations can cause: each activation of a block of 32 (after rmsnorm's scaling) moves
// by at most half a step, amax/254, so output (r, n) moves by at most Σ_blocks amax/254·Σ|w|,
// then through the epilogue (a residual or bias add passes it on; SwiGLU's product scales it by
// |silu(gate)|). It is computed in float64 from the inputs, not from the kernel.
func int8Bound(p *kernels.Problem, args []*ir.Tensor) []float64 {
	x, w := args[0], args[1]
	if p.Op == ir.RMSNormLinear {
		w = args[2]
	}
	K := x.Type.Shape[x.Type.Shape.Rank()-1]
	M := x.NumElements() / K
	N := w.Type.Shape[0]
	xs, ws := x.Float64s(), w.Float64s()
	if p.Op == ir.RMSNormLinear {
		g := args[1].Float64s()
		eps := p.Attrs.Float("eps", 1e-5)
		for r := 0; r < M; r++ {
			ss := 0.0
			for k := 0; k < K; k++ {
				ss += xs[r*K+k] * xs[r*K+k]
			}
			inv := 1 / math.Sqrt(ss/float64(K)+eps)
			for k := 0; k < K; k++ {
				xs[r*K+k] *= g[k] * inv
			}
		}
	}
	out := make([]float64, M*N)
	for r := 0; r < M; r++ {
		for b := 0; b < K/32; b++ {
			amax := 0.0
			for k := 32 * b; k < 32*b+32; k++ {
				amax = math.Max(amax, math.Abs(xs[r*K+k]))
			}
			step := amax / 254 * (1 + 1e-6)
			for n := 0; n < N; n++ {
				s := 0.0
				for k := 32 * b; k < 32*b+32; k++ {
					s += math.Abs(ws[n*K+k])
				}
				out[r*N+n] += step * s
			}
		}
	}
	if p.Expr != nil && len(p.Args) > 2 && p.Expr.Nodes[len(p.Expr.Nodes)-1].Op == ir.Mul {
		gate := args[len(args)-1].Float64s() // withSwiGLU: silu(y)·gate, gate the extra input
		// silu(y)·gate: the error of y moves silu(y) by at most 1.1·|Δy| (|silu'| ≤ 1.1).
		for i := range out {
			out[i] *= 1.1 * math.Abs(gate[i])
		}
	}
	return out
}

// TestMatmulVecQDot checks the integer-dot kernel for every format against the interpreter
// (exact arithmetic on the exact weights): every element within the rigorous bound of 8-bit
// activations (int8Bound) plus f32 rounding, and, for rows of 32 outputs or more, the
// row-relative error within the tolerance the tuner checks it at (kernels.Int8KernelTolerance).
// Besides the default point, the first problem runs at span 4 and at four columns a group (rows)
// with split where the format has it, the second (four rows of x) at two columns a group and
// span 1; N is a multiple of neither group.
func TestMatmulVecQDot(t *testing.T) {
	caps := int8Caps(t)
	d := kerneltest.Device(t)
	rng := rand.New(rand.NewSource(23))
	T := ir.T
	worst := 0.0
	splits := 0 // formats checked at split = 1
	for _, dt := range kernels.QuantizedDTypes() {
		t.Run(dt.String(), func(t *testing.T) {
			K := quantK(dt)
			for i, p := range []*kernels.Problem{
				opProblem(t, ir.Linear, nil, T(ir.F32, 1, K), T(dt, 37, K)),
				opProblem(t, ir.Linear, nil, T(ir.F32, 4, K), T(dt, 301, K)),
				opProblem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5}, T(ir.F32, 3, K), T(ir.F32, K), T(dt, 7, K)),
				withResidual(opProblem(t, ir.Linear, nil, T(ir.F32, 8, K), T(dt, 3, K))),
				withSwiGLU(opProblem(t, ir.Linear, nil, T(ir.F32, 2, K), T(dt, 11, K))),
				opProblem(t, ir.Linear, nil, T(ir.F16, 1, K), T(dt, 13, K)),
			} {
				if err := kernels.MatmulVecQ.Accepts(p, caps); err == nil {
					t.Errorf("%s: the float kernel accepts it although 8-bit activations are asked for", p.Key())
				}
				args := make([]*ir.Tensor, len(p.Args))
				for j, a := range p.Args {
					args[j] = kerneltest.Random(rng, a)
				}
				want, err := kerneltest.Expect(p, args)
				if err != nil {
					t.Fatal(err)
				}
				bound := int8Bound(p, args)
				configs := []kernels.Config{nil}
				switch i {
				case 0:
					// Four columns a group (rows) over 37 columns (groups of 16: a tail), with a
					// block's runs over the invocations (split) where the format has them.
					split := kernels.Config{"wg": 32, "cols": 4, "span": 2, "rows": 4, "split": 1, "unroll": 1}
					if kernels.MatmulVecQDot.Space.Valid(p, split, caps) != nil {
						split["split"] = 0
					} else {
						splits++
					}
					configs = append(configs, kernels.Config{"wg": 128, "cols": 2, "span": 4, "rows": 1, "split": 0, "unroll": 1}, split)
				case 1:
					// Two columns a group for four rows of x over 301 columns (groups of 16), at
					// span 1 (the default is 2; the first problem's points 4, and 2 at rows 4);
					// Q4_K, Q8_0 and Q4_0 at two units an iteration (unroll: a GPU's suggestion;
					// Q4_0's 3 units an invocation leave the loop's tail one), the other formats
					// at one (lavapipe compiles an unrolled kernel in about twice the time).
					unroll := 1
					if dt == ir.Q4_K || dt == ir.Q8_0 || dt == ir.Q4_0 {
						unroll = 2
					}
					configs = append(configs, kernels.Config{"wg": 32, "cols": 8, "span": 1, "rows": 2, "split": 0, "unroll": unroll})
				}
				for _, c := range configs {
					var l *kernels.Launch
					if c == nil {
						l, c, err = kernels.Build(kernels.MatmulVecQDot, p, caps)
					} else if err = kernels.MatmulVecQDot.Space.Valid(p, c, caps); err == nil {
						l, err = kernels.MatmulVecQDot.Build(p, c, caps)
					} else {
						t.Fatalf("%s [%s]: %v", p.Key(), c.Key(), err)
					}
					if err != nil {
						t.Fatalf("%s [%v]: %v", p.Key(), c, err)
					}
					got, err := kerneltest.Run(d, p, l, args)
					if err != nil {
						t.Fatalf("%s [%s]: %v", p.Key(), c.Key(), err)
					}
					g, w := got[0].Float64s(), want[0].Float64s()
					N := p.Outs[0].Shape[p.Outs[0].Shape.Rank()-1]
					rel := 0.0
					for r := 0; r < len(w)/N; r++ {
						scale := 0.0
						for _, v := range w[r*N : (r+1)*N] {
							scale = math.Max(scale, math.Abs(v))
						}
						for j := r * N; j < (r+1)*N; j++ {
							e := math.Abs(g[j] - w[j])
							if slack := 1e-5 * (scale + 1); e > bound[j]+slack || math.IsNaN(g[j]) {
								t.Fatalf("%s [%s]: element %d: got %g, want %g: error %.3g beyond 8-bit activations' bound %.3g", p.Key(), c.Key(), j, g[j], w[j], e, bound[j])
							}
							rel = math.Max(rel, e/(scale+1))
						}
					}
					// The row-relative figure the tuner checks holds for rows of real widths;
					// over a handful of outputs a row's largest magnitude is no scale.
					if N >= 32 {
						if msg := kerneltest.Compare(got[0], want[0], kernels.Int8KernelTolerance); msg != "" {
							t.Errorf("%s [%s]: %s", p.Key(), c.Key(), msg)
						}
						worst = math.Max(worst, rel)
					}
				}
			}
		})
	}
	t.Logf("largest error %.3g of the row scale (the tuner allows %g); %d formats at split = 1", worst, kernels.Int8KernelTolerance, splits)
	if splits == 0 {
		t.Error("no format was checked at split = 1")
	}
}

// TestInt8Policy: the integer-dot template is offered only when the compile asks for 8-bit
// activations and the device has integer dot products, and says which is missing.
func TestInt8Policy(t *testing.T) {
	p := opProblem(t, ir.Linear, nil, ir.T(ir.F32, 1, 64), ir.T(ir.Q8_0, 5, 64))
	for _, tc := range []struct {
		dot  bool
		mode kernels.Int8Mode
		want string // "" accepted, else part of the refusal
	}{
		{true, kernels.Int8Off, "8-bit activations are off"},
		{false, kernels.Int8Only, "no integer dot products (shaderIntegerDotProduct)"},
		{true, kernels.Int8Auto, ""},
		{true, kernels.Int8Only, ""},
	} {
		caps := kernels.Lavapipe
		caps.IntegerDot, caps.Int8 = tc.dot, tc.mode
		err := kernels.MatmulVecQDot.Accepts(p, caps)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(got, tc.want)) {
			t.Errorf("integer dot %v, int8 %s: %q, want %q", tc.dot, tc.mode, got, tc.want)
		}
		floatErr := kernels.MatmulVecQ.Accepts(p, caps)
		if (floatErr == nil) == (tc.mode == kernels.Int8Only && tc.dot) {
			t.Errorf("integer dot %v, int8 %s: the float kernel: %v", tc.dot, tc.mode, floatErr)
		}
	}
	for _, s := range []string{"off", "auto", "on"} {
		if m, err := kernels.ParseInt8Mode(s); err != nil || m.String() != s {
			t.Errorf("ParseInt8Mode(%q) = %v, %v", s, m, err)
		}
	}
	if _, err := kernels.ParseInt8Mode("yes"); err == nil {
		t.Error(`ParseInt8Mode("yes") accepted`)
	}
}

// TestMatmulVecQDotGPUStatic: on the H200 at K ≥ 4096 matmul_vec_qdot's static choice is a
// subgroup a group of two columns, span 4, rows 2, split where the format has runs to spread
// (Q4_K, Q6_K), unsplit two columns a group otherwise (Q8_0); at K = 2048 and on a CPU the
// space's first point (the H100 measured the former at the 8B's shapes only).
func TestMatmulVecQDotGPUStatic(t *testing.T) {
	for _, c := range []struct {
		d    ir.DType
		n, k int
		cpu  bool
		want string
	}{
		{ir.Q4_K, 28672, 4096, false, "cols=4,rows=2,span=4,split=1,unroll=1,wg=128"},
		{ir.Q6_K, 4096, 14336, false, "cols=4,rows=2,span=4,split=1,unroll=1,wg=128"},
		{ir.Q8_0, 4096, 4096, false, "cols=2,rows=2,span=4,split=0,unroll=1,wg=128"},
		{ir.Q4_K, 2048, 2048, false, "cols=2,rows=1,span=2,split=0,unroll=1,wg=128"},
		{ir.Q4_K, 28672, 4096, true, "cols=2,rows=1,span=2,split=0,unroll=1,wg=128"},
	} {
		caps := kernels.H200
		caps.IntegerDot, caps.Int8, caps.CPU = true, kernels.Int8Only, c.cpu
		p := opProblem(t, ir.Linear, nil, ir.T(ir.F32, 1, c.k), ir.T(c.d, c.n, c.k))
		_, got, err := kernels.Build(kernels.MatmulVecQDot, p, caps)
		if err != nil {
			t.Fatalf("%s: %v", p.Key(), err)
		}
		if got.Key() != c.want {
			t.Errorf("%s (cpu %v): static [%s], want [%s]", p.Key(), c.cpu, got.Key(), c.want)
		}
	}
}
