package tune

import (
	"testing"

	"github.com/vkc-project/vkc/ir"
)

// TestReferenceFitsQuantized: a block-quantized weight that only products and embeddings read
// costs the interpreter no float64 copy (interp.ReadsRaw), so it does not count against the
// host memory limit; the same weight read by another op (a cast) is converted whole and counts.
func TestReferenceFitsQuantized(t *testing.T) {
	model := func(cast bool) *ir.Model {
		w := ir.T(ir.Q8_0, 1024, 1024) // 1 MiB of blocks, 8 MiB in float64
		b := ir.NewBuilder("f")
		x, _ := b.Input("x", ir.T(ir.F32, 2, 1024))
		pw := b.Param("w", w)
		y := b.MustOp(ir.Linear, nil, x, pw)
		if cast {
			c := b.MustOp(ir.Cast, ir.Attrs{"to": "f32"}, pw)
			y = b.MustOp(ir.Matmul, ir.Attrs{"tb": true}, y, c)
		}
		b.Output("y", y)
		return &ir.Model{Name: "q", Params: []*ir.Decl{{Name: "w", Type: w}}, Functions: []*ir.Function{b.Function()}}
	}
	t.Setenv("VKC_HOST_MEMORY", "4MiB")
	if err := ReferenceFits(model(false)); err != nil {
		t.Errorf("a Q8_0 weight read by linear only: %v", err)
	}
	if err := ReferenceFits(model(true)); err == nil {
		t.Error("a Q8_0 weight cast to f32 (8 MiB in float64) fits a limit of 4 MiB")
	}
}
