package kernels_test

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
)

// bounded marks p as part of a function with a run-time length of capacity max: the arguments
// and results listed are bounded; reads says the op's meaning depends on the length.
func bounded(p *kernels.Problem, max int, args, outs []int, reads bool) *kernels.Problem {
	r := &kernels.Rows{Max: max, Args: make([]bool, len(p.Args)), Outs: make([]bool, len(p.Outs)), Reads: reads}
	for _, i := range args {
		r.Args[i] = true
	}
	for _, i := range outs {
		r.Outs[i] = true
	}
	p.Rows = r
	return p
}

// TestRunTimeLengthTemplates runs every template that accepts each problem below (a prefill's
// ops at a capacity of 12 rows) at lengths 1, 5 and 12 against the interpreter's evaluation of
// the problem written at that length, with the bounded arguments' rows past the run poisoned.
func TestRunTimeLengthTemplates(t *testing.T) {
	const max = 12
	f32, f16, i32 := ir.F32, ir.F16, ir.I32
	add := &kernels.Fused{Inputs: []ir.Type{ir.T(f32, max, 100), ir.T(f32, 100)},
		Nodes: []kernels.FusedNode{{Op: ir.Input, DType: f32}, {Op: ir.Input, Index: 1, DType: f32}, {Op: ir.Add, Args: []int{0, 1}, DType: f32}}, Outputs: []int{2}}
	silu := &kernels.Fused{Inputs: []ir.Type{ir.T(f32, max, 24)},
		Nodes: []kernels.FusedNode{{Op: ir.Input, DType: f32}, {Op: ir.Silu, Args: []int{0}, DType: f32}}, Outputs: []int{1}}
	type tc struct {
		name string
		p    *kernels.Problem
		pos  int // the position argument (rope, caches): its index, or -1
	}
	var cases []tc
	mk := func(name string, op ir.Op, attrs ir.Attrs, args []ir.Type, bArgs, bOuts []int, reads bool, pos int) {
		cases = append(cases, tc{name, bounded(problem(t, op, attrs, args...), max, bArgs, bOuts, reads), pos})
	}
	cases = append(cases, tc{"elementwise", bounded(&kernels.Problem{Op: kernels.FusedElementwise, Args: add.Inputs,
		Outs: []ir.Type{ir.T(f32, max, 100)}, Expr: add}, max, []int{0}, []int{0}, false), -1})
	mk("embedding", ir.Embedding, nil, []ir.Type{ir.T(f16, 20, 8), ir.T(i32, max)}, []int{1}, []int{0}, false, -1)
	mk("rmsnorm", ir.RMSNorm, ir.Attrs{"eps": 1e-5}, []ir.Type{ir.T(f32, max, 8), ir.T(f32, 8)}, []int{0}, []int{0}, false, -1)
	mk("add_rmsnorm", ir.AddRMSNorm, ir.Attrs{"eps": 1e-5}, []ir.Type{ir.T(f32, max, 8), ir.T(f32, max, 8), ir.T(f32, 8)}, []int{0, 1}, []int{0, 1}, false, -1)
	mk("linear", ir.Linear, nil, []ir.Type{ir.T(f32, max, 16), ir.T(f32, 24, 16)}, []int{0}, []int{0}, false, -1)
	mk("rmsnorm_linear", ir.RMSNormLinear, ir.Attrs{"eps": 1e-5}, []ir.Type{ir.T(f16, max, 16), ir.T(f16, 16), ir.T(f16, 24, 16)}, []int{0}, []int{0}, false, -1)
	mk("matmul_batched", ir.Matmul, nil, []ir.Type{ir.T(f32, max, 3, 16), ir.T(f32, 16, 8)}, []int{0}, []int{0}, false, -1)
	mk("rope", ir.Rope, ir.Attrs{"theta": 10000.0}, []ir.Type{ir.T(f32, max, 2, 8), ir.T(i32)}, []int{0}, []int{0}, false, 1)
	mk("rope_norm", ir.RopeNorm, ir.Attrs{"eps": 1e-5, "theta": 10000.0}, []ir.Type{ir.T(f32, max, 2, 8), ir.T(f32, 8), ir.T(i32)}, []int{0}, []int{0}, false, 2)
	mk("rope_cache_write", ir.RopeCacheWrite, ir.Attrs{"theta": 10000.0}, []ir.Type{ir.T(f32, 40, 2, 8), ir.T(f32, max, 2, 8), ir.T(i32)}, []int{1}, nil, true, 2)
	mk("cache_write", ir.CacheWrite, nil, []ir.Type{ir.T(f16, 40, 2, 8), ir.T(f16, max, 2, 8), ir.T(i32)}, []int{1}, nil, true, 2)
	mk("argmax", ir.Argmax, ir.Attrs{"axis": -1}, []ir.Type{ir.T(f32, max, 300)}, []int{0}, []int{0}, false, -1)
	mk("softmax", ir.Softmax, ir.Attrs{"axis": -1}, []ir.Type{ir.T(f32, max, 2, 9)}, []int{0}, []int{0}, false, -1)
	mk("transpose", ir.Transpose, ir.Attrs{"perm": []int{0, 2, 1}}, []ir.Type{ir.T(f32, max, 3, 5)}, []int{0}, []int{0}, false, -1)
	// The run's last row (and the last of two rows per unit of the length): not bounded, so
	// it keeps its grid; its start follows n.
	mk("slice_last_row", ir.Slice, ir.Attrs{"axis": 0, "start": -1, "end": max}, []ir.Type{ir.T(f32, max, 3, 5)}, []int{0}, nil, true, -1)
	mk("slice_last_of_2k", ir.Slice, ir.Attrs{"axis": 0, "start": -2, "end": 2 * max}, []ir.Type{ir.T(f16, 2*max, 7)}, []int{0}, nil, true, -1)
	mk("concat", ir.Concat, ir.Attrs{"axis": 1}, []ir.Type{ir.T(f32, max, 3), ir.T(f32, max, 5)}, []int{0, 1}, []int{0}, false, -1)
	for _, causal := range []bool{true, false} {
		// q: the run's rows; kv_len = pos + n rows of a 40-row cache (the test passes kv_len
		// as pos + n).
		mk(fmt.Sprintf("attention_causal=%v", causal), ir.Attention, ir.Attrs{"causal": causal, "scale": 0.3},
			[]ir.Type{ir.T(f32, max, 4, 8), ir.T(f32, 40, 2, 8), ir.T(f32, 40, 2, 8), ir.T(i32)}, []int{0}, []int{0}, true, -1)
	}
	// A sliding window shorter than the run (Gemma's local layers): query i sees keys
	// kv_len − n + i − 3 … kv_len − n + i.
	mk("attention_window", ir.Attention, ir.Attrs{"causal": true, "window": 4, "scale": 0.3},
		[]ir.Type{ir.T(f32, max, 4, 8), ir.T(f32, 40, 2, 8), ir.T(f32, 40, 2, 8), ir.T(i32)}, []int{0}, []int{0}, true, -1)
	// Mixtures of experts (8 experts: randomArgs draws ids in 0..7): each row routed and
	// computed alone.
	mk("moe_route", ir.MoeRoute, ir.Attrs{"k": 2}, []ir.Type{ir.T(f32, max, 8)}, []int{0}, []int{0, 1}, false, -1)
	mk("moe_linear", ir.MoeLinear, nil, []ir.Type{ir.T(f32, max, 32), ir.T(ir.Q8_0, 8, 6, 32), ir.T(i32, max, 2)}, []int{0, 2}, []int{0}, false, -1)
	mk("moe_linear_sum", ir.MoeLinearSum, nil, []ir.Type{ir.T(f32, max, 2, 12), ir.T(f32, 8, 5, 12), ir.T(i32, max, 2), ir.T(f32, max, 2)}, []int{0, 2, 3}, []int{0}, false, -1)
	mk("moe_glu", ir.MoeGLU, ir.Attrs{"act": "silu"}, []ir.Type{ir.T(f32, max, 12), ir.T(f32, 8, 5, 12), ir.T(f32, 8, 5, 12), ir.T(i32, max, 2)}, []int{0, 3}, []int{0}, false, -1)
	mk("moe_sum", ir.MoeSum, nil, []ir.Type{ir.T(f32, max, 2, 7), ir.T(f32, max, 2)}, []int{0, 1}, []int{0}, false, -1)
	// With a silu epilogue: the epilogue's input is the op's bounded value.
	lin := bounded(problem(t, ir.Linear, nil, ir.T(f32, max, 16), ir.T(f32, 24, 16)), max, []int{0}, []int{0}, false)
	lin.Expr, lin.NumOpArgs = silu, 2
	cases = append(cases, tc{"linear+silu", lin, -1})

	rng := rand.New(rand.NewSource(3))
	d := kerneltest.Device(t)
	caps := kerneltest.CapsOf(&d.Info)
	for _, c := range cases {
		ts, err := kernels.For(c.p, caps)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for _, tmpl := range ts {
			// The grids follow n: every step of these templates walks the rows in order.
			// (attention_split's ranges and combine walk heads first and keep their grids;
			// matmul_vec takes all rows of a few-row problem in one workgroup; moe_grouped's
			// lists and tiles are by expert, only its weighted sum follows the rows.)
			if l, _, err := kernels.Build(tmpl, c.p, caps); err == nil && tmpl.Name != "attention_split" && tmpl.Name != "matmul_vec" && tmpl.Name != "slice" && tmpl.Name != "moe_grouped" {
				for i, st := range l.Steps {
					if st.Scale == nil {
						t.Errorf("%s/%s: step %d keeps its full grid %v", c.name, tmpl.Name, i, st.Grid)
					}
				}
			}
			t.Run(fmt.Sprintf("%s/%s", c.name, tmpl.Name), func(t *testing.T) {
				args := randomArgs(rng, c.p)
				if c.pos >= 0 {
					args[c.pos] = posTensor(3)
				}
				if c.p.Op == ir.Attention {
					args[3] = posTensor(7 + max) // kv_len: the run's queries are the last n of 19 keys
				}
				if c.p.Op == ir.Embedding {
					for i := range args[1].Data {
						args[1].Data[i] %= 16 // ids within the 20 rows
					}
				}
				kerneltest.CheckAtWith(t, tmpl, c.p, nil, args, []int{1, 5, max}, caps)
			})
		}
	}
}

// TestRunTimeLengthRefusal: an op whose meaning depends on the length is offered only to
// templates that read it, and the key tells bounded problems apart.
func TestRunTimeLengthRefusal(t *testing.T) {
	static := problem(t, ir.CacheWrite, nil, ir.T(ir.F32, 40, 8), ir.T(ir.F32, 12, 8), ir.T(ir.I32))
	b := bounded(problem(t, ir.CacheWrite, nil, ir.T(ir.F32, 40, 8), ir.T(ir.F32, 12, 8), ir.T(ir.I32)), 12, []int{1}, nil, true)
	if static.Key() == b.Key() {
		t.Errorf("a bounded problem has the static problem's key %s", b.Key())
	}
	ts, err := kernels.For(b, kernels.Lavapipe)
	if err != nil {
		t.Fatal(err)
	}
	for _, tmpl := range ts {
		if !tmpl.ReadsLength {
			t.Errorf("template %s does not read the length but is offered %s", tmpl.Name, b.Key())
		}
	}
	at, err := b.At(5)
	if err != nil {
		t.Fatal(err)
	}
	if at.Rows != nil || !at.Args[1].Equal(ir.T(ir.F32, 5, 8)) || !at.Args[0].Equal(ir.T(ir.F32, 40, 8)) {
		t.Errorf("At(5): %s", at.Key())
	}
}

// TestRunTimeLengthCoopEmulated runs the cooperative-matrix templates on bounded problems with
// emulated matrices (lavapipe has none): their grids follow n and attention reads it.
func TestRunTimeLengthCoopEmulated(t *testing.T) {
	caps := emulatedCaps(t)
	const max = 12
	f16, i32 := ir.F16, ir.I32
	// The smallest configurations: lavapipe's JIT takes tens of seconds on the larger
	// emulated kernels.
	cases := []struct {
		tmpl *kernels.Template
		p    *kernels.Problem
		c    kernels.Config
	}{
		{kernels.MatmulCoop, bounded(problem(t, ir.Linear, nil, ir.T(f16, max, 16), ir.T(f16, 24, 16)), max, []int{0}, []int{0}, false),
			kernels.Config{"warps_m": 1, "warps_n": 1, "tiles_m": 1, "tiles_n": 1, "k_steps": 1, "stages": 1, "split_k": 1, "lean": 0}},
		// Split-K: both the product and the reduction of the partials follow n.
		{kernels.MatmulCoop, bounded(problem(t, ir.Linear, nil, ir.T(f16, max, 32), ir.T(f16, 24, 32)), max, []int{0}, []int{0}, false),
			kernels.Config{"warps_m": 1, "warps_n": 1, "tiles_m": 1, "tiles_n": 1, "k_steps": 1, "stages": 1, "split_k": 2, "lean": 0}},
		{kernels.AttentionCoop, bounded(problem(t, ir.Attention, ir.Attrs{"causal": true, "scale": 0.3},
			ir.T(f16, max, 2, 16), ir.T(f16, 40, 1, 16), ir.T(f16, 40, 1, 16), ir.T(i32)), max, []int{0}, []int{0}, true),
			kernels.Config{"warps": 1, "block_k": 16}},
	}
	rng := rand.New(rand.NewSource(5))
	for _, c := range cases {
		if err := c.tmpl.Accepts(c.p, caps); err != nil {
			t.Fatalf("%s: %v", c.tmpl.Name, err)
		}
		l, err := c.tmpl.Build(c.p, c.c, caps)
		if err != nil {
			t.Fatal(err)
		}
		for i, st := range l.Steps {
			if st.Scale == nil {
				t.Errorf("%s [%s]: step %d keeps its full grid for a bounded problem", c.tmpl.Name, c.c.Key(), i)
			}
		}
		t.Run(c.tmpl.Name+"/"+c.c.Key(), func(t *testing.T) {
			args := randomArgs(rng, c.p)
			if c.p.Op == ir.Attention {
				args[3] = posTensor(12) // kv_len: 7 + n cached rows at n = 5; at 1 and 12 other positions
			}
			kerneltest.CheckAtWith(t, c.tmpl, c.p, c.c, args, []int{1, 5, max}, caps)
		})
	}
}
