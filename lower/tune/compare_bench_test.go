package tune

import (
	"math/rand"
	"testing"

	"github.com/vkc-project/vkc/ir"
)

// BenchmarkCompareScore times a check's comparison of SmolLM2's scoring outputs at the check's
// length (37 rows of 49152 f32 logits, their argmax and top 64): "fresh" derives everything from
// the reference again (as every candidate's check did), "shared" keeps what it derived for the
// candidates after the first (compareOutputs through SelectOptions.refs).
func BenchmarkCompareScore(b *testing.B) {
	const rows, vocab, k = 37, 49152, 64
	rng := rand.New(rand.NewSource(1))
	want := Random(rng, ir.Type{DType: ir.F32, Shape: ir.Shape{rows, vocab}})
	got := ir.NewTensor(want.Type)
	w := want.Float64s()
	for i, v := range w {
		got.SetFloat64(i, v+1e-6*rng.NormFloat64())
	}
	ids := ir.NewTensor(ir.Type{DType: ir.I32, Shape: ir.Shape{rows, k}})
	arg := ir.NewTensor(ir.Type{DType: ir.I32, Shape: ir.Shape{rows}})
	for r := range rows {
		row := w[r*vocab : (r+1)*vocab]
		top := largest(row, k)
		for t, v := range top {
			for i, x := range row {
				if x == v {
					ids.SetFloat64(r*k+t, float64(i))
					if t == 0 {
						arg.SetFloat64(r, float64(i))
					}
					break
				}
			}
		}
	}
	check := func(b *testing.B, v *refView) {
		if msg := v.compare(got, 1e-4); msg != "" {
			b.Fatal(msg)
		}
		if msg := v.compareArgmax(arg, 1e-4); msg != "" {
			b.Fatal(msg)
		}
		if msg := v.compareTopK(ids, k, 1e-4); msg != "" {
			b.Fatal(msg)
		}
	}
	b.Run("fresh", func(b *testing.B) {
		for b.Loop() {
			check(b, newRefView(want))
		}
	})
	b.Run("shared", func(b *testing.B) {
		v := newRefView(want)
		check(b, v)
		for b.Loop() {
			check(b, v)
		}
	})
}
