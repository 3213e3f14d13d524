package lower_test

import (
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower"
)

// TestWorkRecorded lowers tinyllama and checks the work its plan records against counts made
// here from the model's dimensions: the attention dispatches of a run at position pos do
// 2·(hd+hd)·heads FLOPs per query-key pair the causal mask lets through (decode at pos: pos+1
// keys; prefill of 16 at pos: 16·(pos+16) − 16·15/2 pairs), per layer, counted through the pos
// input. The prefill has a run-time length (1..64): its work is taken at the run's length 16.
func TestWorkRecorded(t *testing.T) {
	m, err := ir.ParseModel("../examples/tinyllama/model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := lower.Lower(m, m.Functions, lower.Options{Caps: kernels.Lavapipe, CompilerVersion: "t"})
	if err != nil {
		t.Fatal(err)
	}
	const layers, heads, hd, seq = 2, 4, 16, 16
	perPair := float64(2 * (hd + hd) * heads)
	for _, c := range []struct {
		fn    string
		pos   int64
		pairs int64
	}{
		{"decode", 0, 1}, {"decode", 40, 41}, {"decode", 127, 128},
		{"prefill", 0, seq*seq - seq*(seq-1)/2}, {"prefill", 32, seq*(32+seq) - seq*(seq-1)/2},
	} {
		f := p.Function(c.fn)
		posIn := -1
		for i, v := range f.Inputs {
			if v.Name == "pos" {
				posIn = i
			}
		}
		scalar := func(i uint32) int64 {
			if int(i) != posIn {
				t.Errorf("%s: work counted through input %d, not pos", c.fn, i)
			}
			return c.pos
		}
		attn := 0.0
		counted := 0
		for _, d := range f.Dispatches {
			if !contains(d.Ops, "attention") {
				continue
			}
			n := int64(0)
			if f.Length != nil {
				n = seq
			}
			fl, _, _ := d.Work.At(n, scalar)
			attn += fl
			if d.Work.Count != nil {
				counted++
			}
		}
		if want := layers * perPair * float64(c.pairs); attn != want {
			t.Errorf("%s at pos %d: attention does %v FLOPs, %d pairs per layer give %v", c.fn, c.pos, attn, c.pairs, want)
		}
		if counted == 0 {
			t.Errorf("%s: no attention dispatch counts its keys at run time", c.fn)
		}
	}

	// A matmul and a linear with a fused bias and relu: 2·m·n·k FLOPs, plus one per output
	// element and epilogue op; bytes: each operand and result once.
	src := `model: mm
dims: {m: 3, k: 8, n: 5}
weights: {init: random, seed: 1}
params:
  w: [n, k]
  wt: [k, n]
  b: [n]
functions:
  f:
    inputs:
      x: f32[m, k]
    outputs: [y, z]
    body:
      - y = matmul(x, wt)
      - z = relu(linear(x, w, b))
`
	mm, err := ir.ParseModelBytes("mm.yaml", []byte(src), ".")
	if err != nil {
		t.Fatal(err)
	}
	q, _, err := lower.Lower(mm, mm.Functions, lower.Options{Caps: kernels.Lavapipe, CompilerVersion: "t"})
	if err != nil {
		t.Fatal(err)
	}
	const mr, kr, nr = 3, 8, 5
	want := map[string][2]float64{
		"y": {2 * mr * nr * kr, 4 * (mr*kr + kr*nr + mr*nr)},
		"z": {2*mr*nr*kr + 2*mr*nr, 4 * (mr*kr + nr*kr + nr + mr*nr)},
	}
	got := map[string][2]float64{}
	for _, d := range q.Function("f").Dispatches {
		if contains(d.Ops, "matmul") || contains(d.Ops, "linear") {
			name := "y"
			if contains(d.Ops, "relu") {
				name = "z"
			}
			fl, by, _ := d.Work.At(0, nil)
			got[name] = [2]float64{fl, by}
		}
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %v FLOPs and bytes, want %v", name, got[name], w)
		}
	}
}

func contains(ops []string, op string) bool {
	for _, o := range ops {
		if o == op {
			return true
		}
	}
	return false
}
