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
				l, _, err := kernels.Build(kernels.CacheScatter, p, caps)
				if err != nil {
					t.Fatal(err)
				}
				got, err := kerneltest.Run(d, p, l, args)
				if err != nil {
					t.Fatal(err)
				}
				want, err := kerneltest.Expect(p, args)
				if err != nil {
					t.Fatal(err)
				}
				blocks, steps := quantCacheDiff(t, got[0], want[0])
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
			for _, cfg := range []kernels.Config{nil, {"wg": 32, "block_k": 16}} {
				kerneltest.Check(t, kernels.AttentionRows, ap, cfg, vals)
			}
		})
	}
}
