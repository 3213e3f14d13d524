package tune

import (
	"math/rand"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
)

// Inputs gives integer operands values valid for the op that reads them, derived from the
// problem's shapes.
func TestInputsValidScalars(t *testing.T) {
	scalar := ir.T(ir.I32, 1)
	cases := []struct {
		name string
		p    *kernels.Problem
		arg  int
		ok   func(v float64) bool
		want string
	}{
		{"embedding ids in range", &kernels.Problem{Op: ir.Embedding, Args: []ir.Type{ir.T(ir.F32, 5, 4), ir.T(ir.I32, 64)}, Outs: []ir.Type{ir.T(ir.F32, 64, 4)}},
			1, func(v float64) bool { return v >= 0 && v < 5 }, "in [0, 5)"},
		{"expert ids in range", &kernels.Problem{Op: ir.MoeLinear, Args: []ir.Type{ir.T(ir.F32, 40, 8), ir.T(ir.F32, 3, 6, 8), ir.T(ir.I32, 40, 2)}, Outs: []ir.Type{ir.T(ir.F32, 40, 2, 6)}},
			2, func(v float64) bool { return v >= 0 && v < 3 }, "in [0, 3)"},
		{"moe_glu expert ids in range", &kernels.Problem{Op: ir.MoeGLU, Args: []ir.Type{ir.T(ir.F32, 40, 8), ir.T(ir.F32, 3, 6, 8), ir.T(ir.F32, 3, 6, 8), ir.T(ir.I32, 40, 2)}, Outs: []ir.Type{ir.T(ir.F32, 40, 2, 6)}},
			3, func(v float64) bool { return v >= 0 && v < 3 }, "in [0, 3)"},
		{"rope position", &kernels.Problem{Op: ir.Rope, Args: []ir.Type{ir.T(ir.F32, 3, 2, 8), scalar}, Outs: []ir.Type{ir.T(ir.F32, 3, 2, 8)}},
			1, func(v float64) bool { return v == 1 }, "1"},
		{"cache_write last valid position", &kernels.Problem{Op: ir.CacheWrite, Args: []ir.Type{ir.T(ir.F32, 16, 2, 8), ir.T(ir.F32, 3, 2, 8), scalar}, Outs: []ir.Type{ir.T(ir.F32, 16, 2, 8)}},
			2, func(v float64) bool { return v == 13 }, "13"},
		{"attention kv_len is the key length", &kernels.Problem{Op: ir.Attention, Args: []ir.Type{ir.T(ir.F32, 1, 4, 8), ir.T(ir.F32, 10, 2, 8), ir.T(ir.F32, 10, 2, 8), scalar}, Outs: []ir.Type{ir.T(ir.F32, 1, 4, 8)}},
			3, func(v float64) bool { return v == 10 }, "10"},
		{"attention hsd layout", &kernels.Problem{Op: ir.Attention, Attrs: ir.Attrs{"layout": "hsd"}, Args: []ir.Type{ir.T(ir.F32, 4, 1, 8), ir.T(ir.F32, 2, 12, 8), ir.T(ir.F32, 2, 12, 8), scalar}, Outs: []ir.Type{ir.T(ir.F32, 4, 1, 8)}},
			3, func(v float64) bool { return v == 12 }, "12"},
	}
	for _, c := range cases {
		args := Inputs(c.p, rand.New(rand.NewSource(1)))
		if len(args) != len(c.p.Args) {
			t.Fatalf("%s: %d inputs for %d arguments", c.name, len(args), len(c.p.Args))
		}
		for i, a := range args {
			if !a.Type.Equal(c.p.Args[i]) {
				t.Errorf("%s: input %d is %s, want %s", c.name, i, a.Type, c.p.Args[i])
			}
		}
		for _, v := range args[c.arg].Float64s() {
			if !c.ok(v) {
				t.Errorf("%s: value %g, want %s", c.name, v, c.want)
				break
			}
		}
	}
	// The same seed gives the same inputs.
	p := cases[0].p
	x, y := Inputs(p, rand.New(rand.NewSource(7))), Inputs(p, rand.New(rand.NewSource(7)))
	if string(x[0].Data) != string(y[0].Data) || string(x[1].Data) != string(y[1].Data) {
		t.Error("Inputs is not deterministic for a seed")
	}
}
