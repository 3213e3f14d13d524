package interp

import (
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir"
)

// cacheModel is a model with one weight w [2], a state cache [4, 2] and a function step(x [1,2],
// pos i32[]) that writes x·w into the cache at pos and outputs the sum over the cache rows.
func cacheModel(t *testing.T) *ir.Model {
	t.Helper()
	b := ir.NewBuilder("step")
	x, _ := b.Input("x", ir.T(ir.F32, 1, 2))
	pos, _ := b.Input("pos", ir.T(ir.I32))
	w := b.Param("w", ir.T(ir.F32, 2))
	c := b.State("cache", ir.T(ir.F32, 4, 2))
	nc := b.MustOp(ir.CacheWrite, nil, c, b.MustOp(ir.Mul, nil, x, w), pos)
	if err := b.Update("cache", nc); err != nil {
		t.Fatal(err)
	}
	if err := b.Output("total", b.MustOp(ir.Sum, ir.Attrs{"axis": 0}, nc)); err != nil {
		t.Fatal(err)
	}
	m := &ir.Model{
		Name:      "cachemodel",
		Params:    []*ir.Decl{{Name: "w", Type: ir.T(ir.F32, 2)}},
		State:     []*ir.Decl{{Name: "cache", Type: ir.T(ir.F32, 4, 2)}},
		Functions: []*ir.Function{b.Function()},
		Weights:   map[string]*ir.Tensor{"w": f32(sh(2), 1, 10)},
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestSessionCarriesState(t *testing.T) {
	m := cacheModel(t)
	s := NewSession(m)
	step := func(x0, x1 float64, pos int) *ir.Tensor {
		t.Helper()
		out, err := s.Run("step", map[string]*ir.Tensor{"x": f32(sh(1, 2), x0, x1), "pos": i32(sh(), float64(pos))})
		if err != nil {
			t.Fatal(err)
		}
		return out["total"]
	}
	if msg := closeTo(step(1, 2, 0), f32(sh(2), 1, 20), 0); msg != "" {
		t.Error("first step:", msg)
	}
	if msg := closeTo(step(3, 4, 1), f32(sh(2), 4, 60), 0); msg != "" {
		t.Error("second step:", msg)
	}
	if msg := closeTo(s.State("cache"), f32(sh(4, 2), 1, 20, 3, 40, 0, 0, 0, 0), 0); msg != "" {
		t.Error("cache:", msg)
	}
	// A failing run leaves the state alone.
	if _, err := s.Run("step", map[string]*ir.Tensor{"x": f32(sh(1, 2), 5, 5), "pos": i32(sh(), 4)}); err == nil {
		t.Error("cache_write at pos 4 of a 4-row cache succeeded")
	}
	if msg := closeTo(step(0, 0, 3), f32(sh(2), 4, 60), 0); msg != "" {
		t.Error("after a failed run:", msg)
	}
	s.Reset()
	if msg := closeTo(step(1, 1, 2), f32(sh(2), 1, 10), 0); msg != "" {
		t.Error("after reset:", msg)
	}
}

func TestRunStateInAndOut(t *testing.T) {
	m := cacheModel(t)
	in := map[string]*ir.Tensor{"x": f32(sh(1, 2), 1, 1), "pos": i32(sh(), 3)}
	start := f32(sh(4, 2), 1, 1, 1, 1, 1, 1, 1, 1)
	out, st, err := Run(m, "step", in, map[string]*ir.Tensor{"cache": start})
	if err != nil {
		t.Fatal(err)
	}
	if msg := closeTo(out["total"], f32(sh(2), 4, 13), 0); msg != "" {
		t.Error(msg)
	}
	if msg := closeTo(st["cache"], f32(sh(4, 2), 1, 1, 1, 1, 1, 1, 1, 10), 0); msg != "" {
		t.Error(msg)
	}
	if start.Float64(7) != 1 {
		t.Error("Run modified the state tensor passed in")
	}
	// Absent state starts as zeros.
	out, _, err = Run(m, "step", in, nil)
	if err != nil {
		t.Fatal(err)
	}
	if msg := closeTo(out["total"], f32(sh(2), 1, 10), 0); msg != "" {
		t.Error(msg)
	}
}

func TestRunErrors(t *testing.T) {
	good := func() map[string]*ir.Tensor {
		return map[string]*ir.Tensor{"x": f32(sh(1, 2), 1, 1), "pos": i32(sh(), 0)}
	}
	for _, c := range []struct {
		name   string
		fn     string
		mutate func(in, st map[string]*ir.Tensor, m *ir.Model)
		want   []string
	}{
		{"unknown function", "nope", nil, []string{`no function "nope"`, "step"}},
		{"missing input", "step", func(in, st map[string]*ir.Tensor, m *ir.Model) { delete(in, "pos") },
			[]string{"function step", `input "pos"`, "i32[]", "missing"}},
		{"unknown input", "step", func(in, st map[string]*ir.Tensor, m *ir.Model) { in["y"] = f32(sh(1), 0) },
			[]string{"function step", `no input "y"`, "given f32[1]", "x f32[1,2]", "pos i32[]"}},
		{"wrong dtype", "step", func(in, st map[string]*ir.Tensor, m *ir.Model) { in["pos"] = f32(sh(), 0) },
			[]string{"function step", `input "pos" is f32[], want i32[]`}},
		{"wrong shape", "step", func(in, st map[string]*ir.Tensor, m *ir.Model) { in["x"] = f32(sh(2), 1, 1) },
			[]string{"function step", `input "x" is f32[2], want f32[1,2]`}},
		{"missing weight", "step", func(in, st map[string]*ir.Tensor, m *ir.Model) { m.Weights = nil },
			[]string{`parameter "w" has no weight`}},
		{"mis-shaped weight", "step", func(in, st map[string]*ir.Tensor, m *ir.Model) {
			m.Weights = map[string]*ir.Tensor{"w": f32(sh(3), 1, 2, 3)}
		},
			[]string{`parameter "w" is declared f32[2] but its weight is f32[3]`}},
		{"unknown state", "step", func(in, st map[string]*ir.Tensor, m *ir.Model) { st["kv"] = f32(sh(1), 0) },
			[]string{`no state "kv"`}},
		{"mis-typed state", "step", func(in, st map[string]*ir.Tensor, m *ir.Model) { st["cache"] = f32(sh(4), 0, 0, 0, 0) },
			[]string{`state "cache" is declared f32[4,2], got f32[4]`}},
		{"pos out of range", "step", func(in, st map[string]*ir.Tensor, m *ir.Model) { in["pos"] = i32(sh(), 7) },
			[]string{"function step", "cache_write", "pos 7"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := cacheModel(t)
			in, st := good(), map[string]*ir.Tensor{}
			if c.mutate != nil {
				c.mutate(in, st, m)
			}
			_, _, err := Run(m, c.fn, in, st)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestEvalMissingSource(t *testing.T) {
	b := ir.NewBuilder("f")
	p := b.Param("w", ir.T(ir.F32, 2))
	b.MustOp(ir.Neg, nil, p)
	_, err := Eval(b.Function(), Env{})
	if err == nil || !strings.Contains(err.Error(), `parameter "w" (f32[2]) is not provided`) {
		t.Fatalf("error %v", err)
	}
	_, err = Eval(b.Function(), Env{Params: map[string]*ir.Tensor{"w": f32(sh(1), 1)}})
	if err == nil || !strings.Contains(err.Error(), `parameter "w" is f32[1], want f32[2]`) {
		t.Fatalf("error %v", err)
	}
	vals, err := Eval(b.Function(), Env{Params: map[string]*ir.Tensor{"w": f32(sh(2), 1, -2)}})
	if err != nil {
		t.Fatal(err)
	}
	if msg := closeTo(vals[b.Function().Nodes[1]][0], f32(sh(2), -1, 2), 0); msg != "" {
		t.Error(msg)
	}
}

// A node whose recorded type disagrees with inference (a hand-made or mis-rewritten graph) is an
// error naming it, not a panic in the implementation.
func TestEvalRejectsMalformedNodes(t *testing.T) {
	b := ir.NewBuilder("f")
	x, _ := b.Input("x", ir.T(ir.F32, 2, 3))
	y := b.MustOp(ir.Transpose, ir.Attrs{"perm": []int{1, 0}}, x)
	y.Node.Outs[0] = ir.T(ir.F32, 2, 3)
	in := map[string]*ir.Tensor{"x": f32(sh(2, 3), 1, 2, 3, 4, 5, 6)}
	if _, err := Eval(b.Function(), Env{Inputs: in}); err == nil || !strings.Contains(err.Error(), "inference gives [f32[3,2]]") {
		t.Errorf("wrong output type: error %v", err)
	}
	y.Node.Outs[0] = ir.T(ir.F32, 3, 2)
	y.Node.Attrs = ir.Attrs{}
	if _, err := Eval(b.Function(), Env{Inputs: in}); err == nil || !strings.Contains(err.Error(), "needs attribute perm") {
		t.Errorf("missing attribute: error %v", err)
	}
	// Attributes left at their defaults are filled in.
	b = ir.NewBuilder("g")
	x, _ = b.Input("x", ir.T(ir.F32, 2, 3))
	s := b.MustOp(ir.Softmax, nil, x)
	s.Node.Attrs = nil
	if _, err := Eval(b.Function(), Env{Inputs: in}); err != nil {
		t.Error(err)
	}
}
