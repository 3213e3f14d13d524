package kernels_test

import (
	"math/rand"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
)

// TestRowsKVDTypes: a batched step over caches of another dtype than its rows (vkc import
// --parallel with --kv f16, q8_0, q4_0) against the interpreter: cache_scatter rounds f32 rows
// into an f16 cache and quantizes them into q8_0 and q4_0 caches (the cells it writes equal to
// the interpreter's blocks but for rounding ties, as TestQuantCacheWriteOnDevice allows; the
// other cells keep their bytes), and attention_rows reads f32 queries over each cache.
func TestRowsKVDTypes(t *testing.T) {
	d := kerneltest.Device(t)
	caps := kerneltest.CapsOf(&d.Info)
	rng := rand.New(rand.NewSource(12))
	const n, slots, ctx, kvh, hd = 5, 3, 9, 2, 32
	f32, i32 := ir.F32, ir.I32
	for _, kv := range []ir.DType{ir.F16, ir.Q8_0, ir.Q4_0} {
		t.Run(kv.String(), func(t *testing.T) {
			st, x := ir.T(kv, slots, ctx, kvh, hd), ir.T(f32, n, kvh, hd)
			state := kerneltest.Random(rng, st)
			slot, pos := rowsOperands(rng, n, slots, ctx)
			p := opProblem(t, ir.CacheScatter, nil, st, x, ir.T(i32, n), ir.T(i32, n))
			args := []*ir.Tensor{state, kerneltest.Random(rng, x), slot, pos}
			if !kv.Quantized() {
				kerneltest.Check(t, kernels.CacheScatter, p, nil, args)
			} else {
				blocks, steps := quantCacheRun(t, d, kernels.CacheScatter, p, args, caps)
				written := x.Shape.NumElements() / kv.Format().BlockElems
				t.Logf("cache_scatter: %d of %d written blocks differ from the interpreter's, by at most %.3g quant steps", blocks, written, steps)
				if blocks > 1 || steps > 1 {
					t.Errorf("cache_scatter: %d blocks differ (%d written), by up to %.3g quant steps", blocks, written, steps)
				}
			}
			// Attention over the cache: grouped heads (4 query heads per key/value head).
			q := ir.T(f32, n, 4*kvh, hd)
			ap := opProblem(t, ir.AttentionRows, nil, q, st, st, ir.T(i32, n), ir.T(i32, n))
			vals := []*ir.Tensor{kerneltest.Random(rng, q), kerneltest.Random(rng, st), kerneltest.Random(rng, st), slot, pos}
			kerneltest.Check(t, kernels.AttentionRows, ap, nil, vals)
		})
	}
}

// TestAttentionRowsChunks: attention_rows with blocks of rows (block_r) against the interpreter,
// on the runs the scheduler makes: a prompt chunk of one slot (its blocks attended in one pass
// each, the last block partial), decode rows of several slots (each row alone), a chunk
// followed by decode rows (a block of mixed slots), with a window (a block whose rows see
// different first keys) and over a q8_0 cache; then a chunk at a run-time length whose rows past
// the run are poisoned.
func TestAttentionRowsChunks(t *testing.T) {
	rng := rand.New(rand.NewSource(13))
	const n, slots, ctx = 11, 3, 40
	f32, i32 := ir.F32, ir.I32
	ints := func(v ...int) *ir.Tensor {
		f := make([]float64, len(v))
		for i, x := range v {
			f[i] = float64(x)
		}
		return ir.TensorFromFloat64s(ir.T(i32, len(v)), f)
	}
	seq := func(from, k int) []int {
		var v []int
		for i := range k {
			v = append(v, from+i)
		}
		return v
	}
	same := func(s, k int) []int {
		v := make([]int, k)
		for i := range v {
			v[i] = s
		}
		return v
	}
	runs := []struct {
		name      string
		slot, pos []int
	}{
		{"chunk", same(1, n), seq(20, n)},
		{"decode", []int{0, 1, 2, 2, 0, 1, 1, 2, 0, 0, 2}, []int{5, 9, 0, 39, 17, 3, 30, 12, 1, 39, 7}},
		{"chunk then decode", append(same(2, 6), 0, 1, 2, 0, 1), append(seq(0, 6), 30, 4, 6, 31, 5)},
	}
	for _, c := range []struct {
		name  string
		kv    ir.DType
		d     int
		attrs ir.Attrs
	}{{"f32", f32, 8, nil}, {"window", f32, 8, ir.Attrs{"window": 6}}, {"q8_0", ir.Q8_0, 32, nil}} {
		q, cache := ir.T(f32, n, 4, c.d), ir.T(c.kv, slots, ctx, 2, c.d)
		p := opProblem(t, ir.AttentionRows, c.attrs, q, cache, cache, ir.T(i32, n), ir.T(i32, n))
		k, v := kerneltest.Random(rng, cache), kerneltest.Random(rng, cache)
		for _, run := range runs {
			t.Run(c.name+"/"+run.name, func(t *testing.T) {
				vals := []*ir.Tensor{kerneltest.Random(rng, q), k, v, ints(run.slot...), ints(run.pos...)}
				// block_r 8 and (f32 only: each configuration is a pipeline for lavapipe to
				// compile) 4
				cfgs := []kernels.Config{{"wg": 64, "block_k": 16, "block_r": 8}}
				if c.name == "f32" {
					cfgs = append(cfgs, kernels.Config{"wg": 32, "block_k": 32, "block_r": 4})
				}
				for _, cfg := range cfgs {
					kerneltest.Check(t, kernels.AttentionRows, p, cfg, vals)
				}
			})
		}
	}
	// A chunk of 7 rows at a run-time length of up to 11: the block of rows 0..7 reaches a
	// poisoned row.
	q, cache := ir.T(f32, n, 4, 8), ir.T(f32, slots, ctx, 2, 8)
	bp := bounded(opProblem(t, ir.AttentionRows, nil, q, cache, cache, ir.T(i32, n), ir.T(i32, n)), n, []int{0, 3, 4}, []int{0}, false)
	vals := []*ir.Tensor{kerneltest.Random(rng, q), kerneltest.Random(rng, cache), kerneltest.Random(rng, cache), ints(same(1, n)...), ints(seq(3, n)...)}
	kerneltest.CheckAtWith(t, kernels.AttentionRows, bp, kernels.Config{"wg": 64, "block_k": 16, "block_r": 8}, vals, []int{7, n}, kerneltest.CapsOf(&kerneltest.Device(t).Info))
}
