package lower

import (
	"slices"
	"testing"
	"time"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
)

const adoptModel = `
model: adopt
dims: {d: 16, f: 8}
dtype: f32
weights: {init: random, seed: 3, scale: 0.5}
params:
  w_gate: [f, d]
  w_up: [f, d]
functions:
  prefill:
    dims: {seq: 4}
    inputs:
      x: f32[seq, d]
    outputs:
      y: f32[seq, f]
    body:
      - y = mul(silu(linear(x, w_gate)), linear(x, w_up))
  decode:
    dims: {seq: 1}
    inputs:
      x: f32[seq, d]
    outputs:
      y: f32[seq, f]
    body:
      - gu = linear(x, concat(w_gate, w_up, axis=0))
      - y = mul(silu(slice(gu, axis=-1, start=0, end=f)), slice(gu, axis=-1, start=f, end=2*f))
`

// TestMergeAdoptedOrGivenUp: decode merged the gate and up projections, prefill did not. Where
// the estimates say the merge costs prefill more than it saves decode (as matmul_coop_dq's copy
// bound makes it for Llama-3.1-8B's prefill on a GPU), decode gives it up: two linears over the
// parameters, no concatenation, and the same values as before in the interpreter; where they
// say it saves, prefill adopts it as before. The estimates are the test's (a price per product
// by its rows and weight rows), not lowering's.
func TestMergeAdoptedOrGivenUp(t *testing.T) {
	m, err := ir.ParseModelBytes("adopt.yaml", []byte(adoptModel), ".")
	if err != nil {
		t.Fatal(err)
	}
	fns := []*ir.Function{m.Function("prefill"), m.Function("decode")}
	count := func(f *ir.Function, op ir.Op) int {
		n := 0
		for _, x := range f.Nodes {
			if x.Op == op {
				n++
			}
		}
		return n
	}
	price := func(merged4 time.Duration) estimator {
		return func(op ir.Op, attrs ir.Attrs, args []ir.Type) (time.Duration, bool) {
			rows, wrows := args[0].Shape[0], args[1].Shape[0]
			switch {
			case wrows == 16 && rows == 4:
				return merged4, true // prefill's merged product
			case wrows == 16:
				return 1, true // decode's merged product
			}
			return 10, true // a product of one weight
		}
	}
	// Adopting costs prefill 100 - 2·10 = 80; giving up costs decode 2·10 - 1 = 19.
	out := adoptMerges(fns, price(100))
	if out[0] != fns[0] {
		t.Error("prefill changed though decode gave the merge up")
	}
	if c, l := count(out[1], ir.Concat), count(out[1], ir.Linear); c != 0 || l != 2 {
		t.Errorf("decode after giving the merge up: %d concatenations, %d linears; want 0 and 2", c, l)
	}
	x := ir.NewTensor(ir.T(ir.F32, 1, 16))
	for i := range 16 {
		x.SetFloat64(i, float64(i%5)-2)
	}
	want, err := interp.NewSession(m).Run("decode", map[string]*ir.Tensor{"x": x})
	if err != nil {
		t.Fatal(err)
	}
	m2 := *m
	m2.Functions = []*ir.Function{out[0], out[1]}
	got, err := interp.NewSession(&m2).Run("decode", map[string]*ir.Tensor{"x": x})
	if err != nil {
		t.Fatal(err)
	}
	if g, w := got["y"].Float64s(), want["y"].Float64s(); !slices.Equal(g, w) {
		t.Errorf("decode without the merge: %v, with it %v", g, w)
	}
	// Adopting saves prefill 20 - 15 = 5 (and giving up would cost 19): prefill merges.
	out = adoptMerges(fns, price(15))
	if out[1] != fns[1] || count(out[0], ir.Concat) != 1 {
		t.Errorf("prefill did not adopt the merge (%d concatenations), or decode changed", count(out[0], ir.Concat))
	}
}
