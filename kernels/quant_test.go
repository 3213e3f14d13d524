package kernels_test

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
)

// quantK is a K of three blocks for the legacy formats and two for the K-quants: a whole
// number of blocks that is not a power of two for the legacy ones.
func quantK(d ir.DType) int {
	be := d.Format().BlockElems
	if be == 32 {
		return 3 * be
	}
	return 2 * be
}

// quantCases are the problems every block format is checked on: odd N, K a multiple of the block
// size, one to eight rows, rmsnorm_linear, a bias, a residual and SwiGLU epilogue, matmul with
// tb, f16 activations. The first case of each format runs at every point of MatmulVecQ's
// space; the others at their default.
func quantCases(t testing.TB, d ir.DType) []*kernels.Problem {
	K := quantK(d)
	f32, f16 := ir.F32, ir.F16
	T := ir.T
	return []*kernels.Problem{
		opProblem(t, ir.Linear, nil, T(f32, 1, K), T(d, 37, K)),
		opProblem(t, ir.Linear, nil, T(f32, 5, K), T(d, 9, K), T(f32, 9)),
		opProblem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5}, T(f32, 3, K), T(f32, K), T(d, 7, K)),
		withResidual(opProblem(t, ir.Linear, nil, T(f32, 8, K), T(d, 3, K))),
		withSwiGLU(opProblem(t, ir.Linear, nil, T(f32, 2, K), T(d, 11, K))),
		opProblem(t, ir.Matmul, ir.Attrs{"tb": true}, T(f32, 2, 1, K), T(d, 5, K)),
		opProblem(t, ir.Linear, nil, T(f16, 1, K), T(d, 13, K)),
	}
}

// vecQConfigs are the points of MatmulVecQ's space a format's first case runs at (odd N = 37,
// so a group of rows columns runs past the last one). For Q4_K (the format of most weights of a
// Q4_K_M file): every cols at wg=128 and the default span and rows (the reductions: shuffles,
// subgroup adds with shared memory, the shared-memory tree), every wg at the default cols, span
// and rows, every other span at the default rows and every other rows at the default span at
// the default workgroup, lavapipe's static choice and four columns at span 2. For the
// others each span and each rows once (the format's unit code: a kernel of its own per span and
// rows) at the default workgroup: (span, rows) = (4, 2) the GPU default, (1, 4) and (2, 1), and
// for Q8_0 (4, 4), its GPU static choice over many columns. Q4_K and Q4_0 also run two units an
// iteration (unroll = 2, a GPU's suggestion) at span 1 in column groups of 4 invocations: Q4_K's
// 64 units a column are 16 an invocation, Q4_0's 12 are 3 (the loop's tail runs). The
// reductions are the format-independent vecFrame's. Each point is a pipeline lavapipe compiles,
// 0.1 to 35 s of CPU (IQ4_XS's (4, 2) the most; its code grows with span × rows).
func vecQConfigs(d ir.DType) []kernels.Config {
	pt := func(wg, cols, span, rows int) kernels.Config {
		return kernels.Config{"wg": wg, "cols": cols, "span": span, "rows": rows, "split": 0, "stage": 0, "unroll": 1}
	}
	// A block's runs spread over invocations (split = 1, where the format's layout allows it:
	// MatmulVecQ.Space.Valid refuses it elsewhere): span 2 with two columns an invocation, span 1
	// with one.
	unrolled := func() kernels.Config {
		c := pt(32, 8, 1, 2)
		c["unroll"] = 2
		return c
	}
	splits := []kernels.Config{pt(128, 4, 2, 2), pt(128, 4, 1, 1)}
	for _, c := range splits {
		c["split"] = 1
	}
	if d == ir.Q4_K {
		var out []kernels.Config
		for _, c := range kernels.MatmulVecQ.Space.Points() {
			sr := c["span"] == 4 && c["rows"] != 2 || c["span"] != 4 && c["rows"] == 2 // a step from the default
			def := c["span"] == 4 && c["rows"] == 2
			if c["split"] == 0 && c["unroll"] == 1 && (c["wg"] == 128 && def || c["cols"] == 4 && def || c["wg"] == 128 && c["cols"] == 4 && sr) {
				out = append(out, c)
			}
		}
		// four columns an invocation at span 2: a GPU suggestion (vecQSuggest)
		return append(append(out, pt(32, 16, 1, 1), pt(128, 4, 2, 4), unrolled()), splits...)
	}
	out := []kernels.Config{pt(128, 4, 4, 2), pt(128, 4, 1, 4), pt(128, 4, 2, 1)}
	switch d {
	case ir.Q8_0:
		out = append(out, pt(128, 4, 4, 4)) // the GPU static choice over many columns (vecQByteRows)
	case ir.Q4_0:
		out = append(out, unrolled())
	}
	return append(out, splits...)
}

// vecQRowsCase reports whether case i of format d (quantCases) also runs at two columns an
// invocation (rows = 2, span 1), beside lavapipe's static choice (rows = 1): Q4_K's rmsnorm_linear,
// bias, SwiGLU's pairs, batches and f16 x, the frame's epilogues for a group of columns
// (format-independent; every format runs rows 2 and 4 on its first case). Not the 8-row case:
// lavapipe takes about 20 s to compile that kernel (7 s the rmsnorm_linear one).
func vecQRowsCase(d ir.DType, i int) bool { return d == ir.Q4_K && i > 0 && i != 3 }

// TestMatmulVecQ checks the quantized matrix-vector kernel for every format it reads against
// the interpreter (which dequantizes as ggml does).
func TestMatmulVecQ(t *testing.T) {
	rng := rand.New(rand.NewSource(13))
	caps := kernels.Lavapipe
	for _, d := range kernels.QuantizedDTypes() {
		t.Run(d.String(), func(t *testing.T) {
			for i, p := range quantCases(t, d) {
				if err := kernels.MatmulVecQ.Accepts(p, caps); err != nil {
					t.Fatalf("%s: refused: %v", p.Key(), err)
				}
				args := make([]*ir.Tensor, len(p.Args))
				for j, a := range p.Args {
					args[j] = kerneltest.Random(rng, a)
				}
				if i > 0 {
					kerneltest.Check(t, kernels.MatmulVecQ, p, nil, args)
					if vecQRowsCase(d, i) {
						c := kernels.Config{"wg": 128, "cols": 4, "span": 1, "rows": 2, "split": 0, "stage": 0, "unroll": 1}
						if err := kernels.MatmulVecQ.Space.Valid(p, c, caps); err != nil {
							c["cols"] = 1 // fewer than 4 columns
						}
						kerneltest.Check(t, kernels.MatmulVecQ, p, c, args)
					}
					continue
				}
				n := 0
				for _, c := range vecQConfigs(d) {
					if kernels.MatmulVecQ.Space.Valid(p, c, caps) == nil {
						kerneltest.Check(t, kernels.MatmulVecQ, p, c, args)
						n++
					}
				}
				if n < 3 {
					t.Errorf("%s: only %d valid configurations", p.Key(), n)
				}
			}
		})
	}
}

// TestQuantAccepts: the quantized templates take exactly the weights stored with blocks along
// K, and the float templates none.
func TestQuantAccepts(t *testing.T) {
	caps := kernels.Lavapipe
	T := ir.T
	lin := opProblem(t, ir.Linear, nil, T(ir.F32, 2, 64), T(ir.Q8_0, 5, 64))
	for _, tmpl := range []*kernels.Template{kernels.MatmulVec, kernels.MatmulTiled} {
		if tmpl.Quantized == nil {
			if err := tmpl.Accepts(lin, caps); err == nil {
				t.Errorf("%s accepts %s", tmpl.Name, lin.Key())
			}
		}
	}
	if err := kernels.MatmulVecQ.Accepts(lin, caps); err != nil {
		t.Errorf("%s refuses %s: %v", kernels.MatmulVecQ.Name, lin.Key(), err)
	}
	// matmul without tb: b [K, N] has its blocks along N
	mm := opProblem(t, ir.Matmul, nil, T(ir.F32, 2, 5), T(ir.Q8_0, 5, 64))
	if err := kernels.MatmulVecQ.Accepts(mm, caps); err == nil {
		t.Errorf("accepts %s, whose blocks run along N", mm.Key())
	}
	ts, err := kernels.For(lin, caps)
	if err != nil {
		t.Fatal(err)
	}
	for _, tm := range ts {
		if len(tm.Quantized) == 0 {
			t.Errorf("For offers %s to %s, which reads no blocks", lin.Key(), tm.Name)
		}
	}
	got := fmt.Sprint(kernels.QuantizedDTypes())
	if want := "[q4_0 q4_1 q5_0 q5_1 q8_0 q2_k q3_k q4_k q5_k q6_k q8_k iq4_nl iq4_xs mxfp4]"; got != want {
		t.Errorf("kernels read %s, want %s", got, want)
	}
}

// TestMatmulTiledQ checks the tiled kernel (prefill) on block-quantized weights of every format:
// tiles dequantized exactly into shared memory, then the f32 tile product; odd M and N.
func TestMatmulTiledQ(t *testing.T) {
	rng := rand.New(rand.NewSource(17))
	T := ir.T
	for _, d := range kernels.QuantizedDTypes() {
		t.Run(d.String(), func(t *testing.T) {
			K := quantK(d)
			for i, p := range []*kernels.Problem{
				opProblem(t, ir.Linear, nil, T(ir.F32, 17, K), T(d, 37, K), T(ir.F32, 37)),
				withSwiGLU(opProblem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5}, T(ir.F32, 9, K), T(ir.F32, K), T(d, 19, K))),
			} {
				args := make([]*ir.Tensor, len(p.Args))
				for j, a := range p.Args {
					args[j] = kerneltest.Random(rng, a)
				}
				kerneltest.Check(t, kernels.MatmulTiled, p, nil, args)
				if i == 0 {
					kerneltest.Check(t, kernels.MatmulTiled, p, kernels.Config{"tile_m": 16, "tile_n": 32, "tile_k": 8, "micro_m": 2, "micro_n": 1}, args)
				}
			}
		})
	}
}

// TestEmbeddingQ: rows gathered from a block-quantized table of every format are ggml's values.
func TestEmbeddingQ(t *testing.T) {
	rng := rand.New(rand.NewSource(19))
	for i, d := range kernels.QuantizedDTypes() {
		tab, ids := ir.T(d, 13, quantK(d)), ir.T(ir.I32, 5)
		p := problem(t, ir.Embedding, nil, tab, ids)
		args := []*ir.Tensor{kerneltest.Random(rng, tab), idsTensor(ids, rng, 13)}
		checkConfigs(t, kernels.Embedding, p, args, firstOnly(i, flatConfigs))
	}
}

// TestEmbeddingBF16: a bf16 table is gathered as words with the cast to f32 fused (the rows of a
// model with bf16 weights and f32 activations); without the cast its bf16 rows have no storage
// on a device without the bfloat16 type, and the template says so.
func TestEmbeddingBF16(t *testing.T) {
	rng := rand.New(rand.NewSource(29))
	tab, ids := ir.T(ir.BF16, 11, 37), ir.T(ir.I32, 5)
	p := problem(t, ir.Embedding, nil, tab, ids)
	caps := kernels.Lavapipe
	if err := kernels.Embedding.Accepts(p, caps); err == nil || !strings.Contains(err.Error(), "bf16") {
		t.Errorf("bf16 rows without a cast: %v, want a refusal naming bf16", err)
	}
	rows := ir.T(ir.BF16, 5, 37)
	q := *p
	q.Outs = []ir.Type{ir.T(ir.F32, 5, 37)}
	q.Expr = &kernels.Fused{
		Inputs: []ir.Type{rows},
		Nodes: []kernels.FusedNode{
			{Op: ir.Input, Index: 0, DType: ir.BF16},
			{Op: ir.Cast, Attrs: ir.Attrs{"to": "f32"}, Args: []int{0}, DType: ir.F32},
		},
		Outputs: []int{1},
	}
	args := []*ir.Tensor{kerneltest.Random(rng, tab), idsTensor(ids, rng, 11)}
	checkConfigs(t, kernels.Embedding, &q, args, flatConfigs)
}
