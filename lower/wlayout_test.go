package lower_test

import (
	"math/rand"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
)

// TestWeightViews: functions that merge a layer's projections differently (one Q, K and V, the
// other K and V apart from Q: extraction may choose so) read one stored copy: the second's K-V
// concatenation and its Q are views of the first's Q-K-V concatenation, which holds the same
// bytes in the same order; both functions match the interpreter.
func TestWeightViews(t *testing.T) {
	rng := rand.New(rand.NewSource(13))
	ws := map[string]*ir.Tensor{}
	param := func(b *ir.Builder, name string) ir.Value {
		if ws[name] == nil {
			ws[name] = random(rng, ir.T(ir.F32, 8, 16))
		}
		return b.Param(name, ir.T(ir.F32, 8, 16))
	}
	cat := func(b *ir.Builder, vs ...ir.Value) ir.Value { return b.MustOp(ir.Concat, ir.Attrs{"axis": 0}, vs...) }
	a := ir.NewBuilder("a")
	x, _ := a.Input("x", ir.T(ir.F32, 2, 16))
	q, k, v := param(a, "wq"), param(a, "wk"), param(a, "wv")
	a.Output("y", a.MustOp(ir.Linear, nil, x, cat(a, q, k, v)))
	b := ir.NewBuilder("b")
	x2, _ := b.Input("x", ir.T(ir.F32, 2, 16))
	q2, k2, v2 := param(b, "wq"), param(b, "wk"), param(b, "wv")
	b.Output("yq", b.MustOp(ir.Linear, nil, x2, q2))
	b.Output("ykv", b.MustOp(ir.Linear, nil, x2, cat(b, k2, v2)))
	m := newModel("views", ws, a.Function(), b.Function())
	p, _, exe := compile(t, m)
	if want := uint64(3 * 8 * 16 * 4); p.Weights.Size != want {
		t.Errorf("weights %d bytes, want %d (Q, K and V once)", p.Weights.Size, want)
		for _, w := range p.Weights.Tensors {
			t.Logf("%s at %d, %d bytes", w.Name, w.Offset, w.Size)
		}
	}
	s := interp.NewSession(m)
	for _, f := range m.Functions {
		runBoth(t, exe, s, f, map[string]*ir.Tensor{"x": random(rng, ir.T(ir.F32, 2, 16))})
	}
}
