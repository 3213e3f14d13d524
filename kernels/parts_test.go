package kernels_test

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
)

// swiglu is silu(in0)·in1 in dtype dt.
func swiglu(dt ir.DType) *kernels.Fused {
	return &kernels.Fused{Inputs: []ir.Type{{DType: dt}, {DType: dt}},
		Nodes: []kernels.FusedNode{{Op: ir.Input, DType: dt}, {Op: ir.Silu, Args: []int{0}, DType: dt},
			{Op: ir.Input, Index: 1, DType: dt}, {Op: ir.Mul, Args: []int{1, 2}, DType: dt}}, Outputs: []int{3}}
}

// qkvProblem is a merged Q/K/V projection of m rows writing q rotated, k rotated into its
// cache and v into its cache (3 query heads over 1 key/value head of d features; caches of 10
// rows), as the lowering stage builds it for a decode or prefill layer.
func qkvProblem(t *testing.T, m int, dt ir.DType, half bool) *kernels.Problem {
	return qkvProblemW(t, m, dt, dt, 40, half)
}

// qkvProblemW is qkvProblem with a weight of dtype wdt (block-quantized ones included) and
// activations of k features.
func qkvProblemW(t *testing.T, m int, dt, wdt ir.DType, k int, half bool) *kernels.Problem {
	const d = 16
	p := problem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5}, ir.T(dt, m, k), ir.T(dt, k), ir.T(wdt, 5*d, k))
	cache := ir.T(dt, max(10, m+2), 1, d)
	p.Args = append(p.Args, ir.T(ir.I32), cache, cache)
	p.Outs = []ir.Type{ir.T(dt, m, 3, d), cache, cache}
	p.Pos = 3
	p.Parts = []kernels.Part{
		{Kind: kernels.PartRope, Cols: 3 * d, Out: 0, Head: d, Theta: 10000, Half: half},
		{Kind: kernels.PartRope, Cols: d, Out: 1, Head: d, Theta: 10000, Half: half, Cache: true, State: 4},
		{Kind: kernels.PartStore, Cols: d, Out: 2, Cache: true, State: 5},
	}
	return p
}

// qkvRowsProblem is qkvProblem for a batched step (Problem.RowPos): m rows each at a position and
// slot of its own, q and k rotated by their row's position (rope_rows), k and v written into
// their row's cell of [3 slots, 8 positions, 1, d] caches (cache_scatter).
func qkvRowsProblem(t *testing.T, m int, dt ir.DType, half bool) *kernels.Problem {
	const d, k = 16, 40
	p := problem(t, ir.RMSNormLinear, ir.Attrs{"eps": 1e-5}, ir.T(dt, m, k), ir.T(dt, k), ir.T(dt, 5*d, k))
	cache := ir.T(dt, 3, 8, 1, d)
	p.Args = append(p.Args, ir.T(ir.I32, m), ir.T(ir.I32, m), cache, cache)
	p.Outs = []ir.Type{ir.T(dt, m, 3, d), cache, cache}
	p.Pos, p.Slot, p.RowPos = 3, 4, true
	p.Parts = []kernels.Part{
		{Kind: kernels.PartRope, Cols: 3 * d, Out: 0, Head: d, Theta: 10000, Half: half},
		{Kind: kernels.PartRope, Cols: d, Out: 1, Head: d, Theta: 10000, Half: half, Cache: true, State: 5},
		{Kind: kernels.PartStore, Cols: d, Out: 2, Cache: true, State: 6},
	}
	return p
}

// qkvScaled is qkvProblem (f32, mode half) with Llama 3's frequency scaling on its ropes.
func qkvScaled(t *testing.T, m int) *kernels.Problem {
	p := qkvProblem(t, m, ir.F32, true)
	sc := ir.RopeScaling{Type: ir.RopeScalingLlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 20, OriginalCtx: 2000}
	for i := range p.Parts {
		if p.Parts[i].Kind == kernels.PartRope {
			p.Parts[i].Scaling = sc
		}
	}
	return p
}

// gateUpProblem is a merged gate/up projection (rows interleaved) writing silu(gate)·up, and a
// plain part after it.
func gateUpProblem(t *testing.T, m int, dt ir.DType, bias bool) *kernels.Problem {
	return gateUpProblemW(t, m, dt, dt, 24, bias)
}

// gateUpProblemW is gateUpProblem with a weight of dtype wdt and activations of k features.
func gateUpProblemW(t *testing.T, m int, dt, wdt ir.DType, k int, bias bool) *kernels.Problem {
	const f = 20
	args := []ir.Type{ir.T(dt, m, k), ir.T(wdt, 2*f+6, k)}
	if bias {
		args = append(args, ir.T(dt, 2*f+6))
	}
	p := problem(t, ir.Linear, nil, args...)
	p.Outs = []ir.Type{ir.T(dt, m, f), ir.T(dt, m, 6)}
	p.Parts = []kernels.Part{{Kind: kernels.PartPair, Cols: 2 * f, Out: 0, Expr: swiglu(dt)}, {Kind: kernels.PartStore, Cols: 6, Out: 1}}
	return p
}

// Configurations the matmul templates are checked at with column parts besides their default.
var partConfigs = map[string][]kernels.Config{
	"matmul_vec": {
		{"wg": 128, "cols": 8, "vec": 1, "unroll": 1, "stage": 0}, // 16 invocations a column: subgroup adds, shared memory
		{"wg": 32, "cols": 4, "vec": 2, "unroll": 2, "stage": 0},  // 8 invocations a column (lavapipe's subgroup): shuffles
		{"wg": 32, "cols": 8, "vec": 1, "unroll": 1, "stage": 0},  // 4 invocations a column: two columns a subgroup
	},
	"matmul_tiled": {
		{"tile_m": 16, "tile_n": 32, "tile_k": 8, "micro_m": 2, "micro_n": 1},
		{"tile_m": 16, "tile_n": 16, "tile_k": 8, "micro_m": 1, "micro_n": 4},
	},
}

// TestColumnParts runs merged projections with column parts (rope, cache writes, SwiGLU pairs,
// plain ranges) on every template that takes them and compares each result, the caches
// included, with the interpreter's evaluation of the op followed by slices, ropes and cache
// writes (Problem.Reference).
func TestColumnParts(t *testing.T) {
	cases := []struct {
		name string
		p    *kernels.Problem
	}{
		{"qkv decode f16", qkvProblem(t, 1, ir.F16, true)},
		{"qkv prefill f16", qkvProblem(t, 5, ir.F16, true)},
		{"qkv prefill f32 interleaved", qkvProblem(t, 5, ir.F32, false)},
		{"qkv prefill f32 llama3 scaling", qkvScaled(t, 5)},
		{"qkv rows f16", qkvRowsProblem(t, 7, ir.F16, true)},
		{"qkv rows f32 interleaved", qkvRowsProblem(t, 2, ir.F32, false)},
		{"gate/up decode f16", gateUpProblem(t, 1, ir.F16, false)},
		{"gate/up prefill f32 bias", gateUpProblem(t, 7, ir.F32, true)},
		{"gate/up prefill f16 bias", gateUpProblem(t, 9, ir.F16, true)},
	}
	rng := rand.New(rand.NewSource(5))
	d := kerneltest.Device(t)
	caps := kerneltest.CapsOf(&d.Info)
	for _, c := range cases {
		ts, err := kernels.For(c.p, caps)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		args := tune.Inputs(c.p, rng)
		for _, tmpl := range ts {
			for _, cfg := range append([]kernels.Config{nil}, partConfigs[tmpl.Name]...) {
				if cfg != nil && tmpl.Space.Valid(c.p, cfg, caps) != nil {
					continue
				}
				t.Run(fmt.Sprintf("%s/%s/%s", c.name, tmpl.Name, cfg.Key()), func(t *testing.T) {
					kerneltest.Check(t, tmpl, c.p, cfg, args)
				})
			}
		}
	}
}

// TestColumnPartsQuantized: column parts over block-quantized weights (rows reordered whole, so
// blocks stay blocks) on the templates that read the blocks, matmul_vec_q also at 2 and 4 columns
// an invocation (rows: a pair is two of an invocation's columns). (A few cases: lavapipe compiles
// the quantized kernels slowly.)
func TestColumnPartsQuantized(t *testing.T) {
	rng := rand.New(rand.NewSource(8))
	q8, q4k := quantK(ir.Q8_0), quantK(ir.Q4_K)
	rows := func(n int) kernels.Config {
		return kernels.Config{"wg": 32, "cols": 4, "span": 1, "rows": n, "split": 0, "stage": 0, "unroll": 1}
	}
	for _, c := range []struct {
		w    ir.DType
		p    *kernels.Problem
		tmpl *kernels.Template
		cfg  kernels.Config
	}{
		{ir.Q8_0, qkvProblemW(t, 1, ir.F32, ir.Q8_0, q8, true), kernels.MatmulVecQ, nil},
		{ir.Q8_0, gateUpProblemW(t, 9, ir.F32, ir.Q8_0, q8, true), kernels.MatmulTiled, nil},
		{ir.Q4_K, qkvProblemW(t, 6, ir.F16, ir.Q4_K, q4k, true), kernels.MatmulVecQ, nil},
		{ir.Q4_K, gateUpProblemW(t, 1, ir.F16, ir.Q4_K, q4k, false), kernels.MatmulVecQ, nil},
		{ir.Q8_0, qkvProblemW(t, 1, ir.F32, ir.Q8_0, q8, true), kernels.MatmulVecQ, rows(2)},
		{ir.Q4_K, gateUpProblemW(t, 1, ir.F16, ir.Q4_K, q4k, false), kernels.MatmulVecQ, rows(4)},
	} {
		t.Run(fmt.Sprintf("%s/%s/m=%d/%s/%s", c.w, c.p.Op, c.p.Args[0].Shape[0], c.tmpl.Name, c.cfg.Key()), func(t *testing.T) {
			kerneltest.Check(t, c.tmpl, c.p, c.cfg, tune.Inputs(c.p, rng))
		})
	}
}

// TestColumnPartsCoopEmulated runs column parts through the cooperative-matrix matmul with
// emulated matrices (lavapipe has none; TestCoop*GPU run the template on real ones).
func TestColumnPartsCoopEmulated(t *testing.T) {
	caps := emulatedCaps(t)
	rng := rand.New(rand.NewSource(6))
	for _, p := range []*kernels.Problem{qkvProblem(t, 12, ir.F16, true), qkvRowsProblem(t, 12, ir.F16, true), gateUpProblem(t, 9, ir.F16, true)} {
		if err := kernels.MatmulCoop.Accepts(p, caps); err != nil {
			t.Fatalf("%s: %v", p.Key(), err)
		}
		checkWith(t, kernels.MatmulCoop, p, nil, tune.Inputs(p, rng), caps)
	}
}

// TestColumnPartsAtLength: a prefill's merged projection at a run-time length writes the run's
// rows only into the caches (the rows past them hold poison on the device, and the reference
// is the problem at that length).
func TestColumnPartsAtLength(t *testing.T) {
	const max = 6
	p := bounded(qkvProblem(t, max, ir.F16, true), max, []int{0}, []int{0}, true)
	rng := rand.New(rand.NewSource(9))
	d := kerneltest.Device(t)
	caps := kerneltest.CapsOf(&d.Info)
	ts, err := kernels.For(p, caps)
	if err != nil {
		t.Fatal(err)
	}
	for _, tmpl := range ts {
		for _, n := range []int{1, 4, max} {
			t.Run(fmt.Sprintf("%s/n=%d", tmpl.Name, n), func(t *testing.T) {
				args := randomArgs(rng, p)
				args[3] = posTensor(2) // rows 2..2+n of the 10-row caches
				kerneltest.CheckAt(t, tmpl, p, nil, args, n)
			})
		}
	}
}

// TestColumnPartsRowsAtLength: a batched step's merged projection at a run-time length writes
// the run's rows only into their slots' cells (the rows past the run hold poison: positions and
// slots too, which the kernel clamps), as a prompt chunk of one slot and as decode rows of
// several.
func TestColumnPartsRowsAtLength(t *testing.T) {
	const max = 6
	p := bounded(qkvRowsProblem(t, max, ir.F16, true), max, []int{0, 3, 4}, []int{0}, true)
	rng := rand.New(rand.NewSource(10))
	d := kerneltest.Device(t)
	caps := kerneltest.CapsOf(&d.Info)
	ts, err := kernels.For(p, caps)
	if err != nil {
		t.Fatal(err)
	}
	ints := func(v ...int) *ir.Tensor {
		f := make([]float64, max)
		for i := range f {
			f[i] = float64(v[i%len(v)])
		}
		return ir.TensorFromFloat64s(ir.T(ir.I32, max), f)
	}
	for _, tmpl := range ts {
		for _, c := range []struct {
			name      string
			n         int
			pos, slot *ir.Tensor
		}{
			{"chunk", 5, ints(2, 3, 4, 5, 6, 7), ints(1)},
			{"decode", 3, ints(7, 0, 4, 1, 1, 1), ints(2, 0, 1, 0, 1, 2)},
		} {
			t.Run(fmt.Sprintf("%s/%s", tmpl.Name, c.name), func(t *testing.T) {
				args := randomArgs(rng, p)
				args[3], args[4] = c.pos, c.slot
				kerneltest.CheckAt(t, tmpl, p, nil, args, c.n)
			})
		}
	}
}

// TestColumnPartsRefused: problems whose parts do not fit their op are refused with a reason.
func TestColumnPartsRefused(t *testing.T) {
	odd := gateUpProblem(t, 1, ir.F32, false)
	odd.Parts[1].Cols = 5
	gap := gateUpProblem(t, 1, ir.F32, false)
	gap.Parts = gap.Parts[:1]
	gap.Outs = gap.Outs[:1]
	noPos := qkvProblem(t, 1, ir.F32, true)
	noPos.Pos = 0
	badState := qkvProblem(t, 1, ir.F32, true)
	badState.Parts[2].State = 3
	scalarRowPos := qkvProblem(t, 2, ir.F32, true)
	scalarRowPos.RowPos = true // a scalar position where one per row is needed
	noSlot := qkvRowsProblem(t, 2, ir.F32, true)
	noSlot.Slot = 0
	for name, p := range map[string]*kernels.Problem{"odd width": odd, "uncovered columns": gap, "no position": noPos, "state argument": badState,
		"scalar row positions": scalarRowPos, "no slots": noSlot} {
		if ts, err := kernels.For(p, kernels.Lavapipe); err == nil {
			t.Errorf("%s: accepted by %s", name, kerneltest.Names(ts))
		}
	}
	if k1, k2 := qkvProblem(t, 1, ir.F16, true).Key(), qkvProblem(t, 1, ir.F16, false).Key(); k1 == k2 {
		t.Errorf("rope modes share the key %s", k1)
	}
}
