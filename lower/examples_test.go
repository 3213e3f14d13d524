package lower_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"path/filepath"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
	"github.com/vkc-project/vkc/ir/safetensors"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
	"github.com/vkc-project/vkc/rules"
	"github.com/vkc-project/vkc/runtime"
)

// rowTol is the examples' tolerance: the largest |got-want| of a row at most 1e-4 of the row's
// largest |want| (f32).
const rowTol = 1e-4

func rowError(got, want *ir.Tensor) float64 {
	cols := 1
	if r := want.Type.Shape.Rank(); r > 0 {
		cols = want.Type.Shape[r-1]
	}
	g, w := got.Float64s(), want.Float64s()
	worst := 0.0
	for r := 0; r < len(w)/cols; r++ {
		scale, diff := 0.0, 0.0
		for c := r * cols; c < (r+1)*cols; c++ {
			scale = math.Max(scale, math.Abs(w[c]))
			diff = math.Max(diff, math.Abs(g[c]-w[c]))
			if math.IsNaN(g[c]) != math.IsNaN(w[c]) {
				return math.Inf(1)
			}
		}
		if diff > 0 {
			worst = math.Max(worst, diff/math.Max(scale, 1e-30))
		}
	}
	return worst
}

// exampleInputs makes deterministic inputs: token ids below the embedding's rows, the given
// position for scalars, floats in [-1, 1].
func exampleInputs(m *ir.Model, f *ir.Function, pos int, seed uint64) map[string]*ir.Tensor {
	rows := 1 << 30
	for _, d := range m.Params {
		if d.Type.Shape.Rank() == 2 {
			rows = min(rows, d.Type.Shape[0])
		}
	}
	in := map[string]*ir.Tensor{}
	s := seed
	for _, n := range f.Inputs {
		t := n.Type()
		x := ir.NewTensor(t)
		for i := 0; i < x.NumElements(); i++ {
			s = s*6364136223846793005 + 1442695040888963407
			u := float64(s>>40) / (1 << 24)
			switch {
			case t.DType.IsInt() && t.Shape.NumElements() == 1 && t.Shape.Rank() == 0:
				x.SetFloat64(i, float64(pos))
			case t.DType.IsInt():
				x.SetFloat64(i, math.Floor(u*float64(rows)))
			default:
				x.SetFloat64(i, 2*u-1)
			}
		}
		in[n.Name] = x
	}
	return in
}

// blocked lists the examples that cannot compile yet and the op whose template is missing. An
// example that compiles although listed, or fails on another op, fails the test, so the table
// shrinks as templates land.
var blocked = map[string]string{}

// TestExamplesEndToEnd compiles every example (except the 135M-parameter one), as written and
// after the rewrite rules (rules.Optimize: the fused graph the compiler really lowers), runs each
// function on lavapipe and compares the outputs with the interpreter; functions that share state
// run in one session in model order (tinyllama: prefill at 0, then decode steps carrying the KV
// cache).
func TestExamplesEndToEnd(t *testing.T) {
	paths, err := filepath.Glob("../examples/*/model.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	for _, path := range paths {
		name := filepath.Base(filepath.Dir(path))
		if name == "smollm2-135m" {
			continue
		}
		for _, optimized := range []bool{false, true} {
			sub := name
			if optimized {
				sub += "/optimized"
			}
			t.Run(sub, func(t *testing.T) { exampleEndToEnd(t, path, name, optimized) })
		}
	}
}

func exampleEndToEnd(t *testing.T, path, name string, optimized bool) {
	m, err := ir.ParseModel(path)
	if err != nil {
		t.Fatal(err)
	}
	fns := m.Functions
	if optimized {
		fns = nil
		for _, f := range m.Functions {
			g, _, err := rules.Optimize(context.Background(), m, f, rules.Options{})
			if err != nil {
				t.Fatalf("optimize %s: %v", f.Name, err)
			}
			fns = append(fns, g)
		}
	}
	d := kerneltest.Device(t)
	p, rep, err := lower.Lower(m, fns, options(d))
	var nt *lower.NoTemplateError
	if errors.As(err, &nt) {
		if op, ok := blocked[name]; ok && op == nt.Op {
			t.Logf("blocked on op %s (no template yet): %v", nt.Op, err)
			return
		}
		t.Fatalf("blocked on op %s, not listed in blocked: %v", nt.Op, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if op, ok := blocked[name]; ok {
		t.Errorf("compiles although listed as blocked on %s: remove it from the table", op)
	}
	for _, fr := range rep.Functions {
		t.Logf("%s: %d dispatches, %d barriers, arena %d of %d bytes of intermediates, %d in place, %d state copies, %d modules",
			fr.Name, fr.Dispatches, fr.Barriers, fr.ArenaBytes, fr.Intermediates, fr.InPlace, fr.StateCopies, rep.Modules)
		if fr.ArenaBytes > fr.Intermediates {
			t.Errorf("%s: arena %d larger than the sum of intermediates %d", fr.Name, fr.ArenaBytes, fr.Intermediates)
		}
	}
	exe, err := d.Load(p, runtime.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	s := interp.NewSession(m)
	pos := 0
	for _, f := range m.Functions {
		steps := 1
		if len(m.State) > 0 && f.Name == "decode" {
			steps = 3
		}
		for k := 0; k < steps; k++ {
			in := exampleInputs(m, f, pos, uint64(17+k))
			compareRun(t, exe, s, f, in)
			if len(m.State) > 0 {
				for _, n := range f.Inputs {
					if n.Type().DType.IsInt() && n.Type().Shape.Rank() > 0 {
						pos += n.Type().Shape[0] // tokens consumed
					}
				}
			}
		}
	}
	for _, st := range m.State {
		got, err := exe.ReadState(st.Name)
		if err != nil {
			t.Fatal(err)
		}
		if e := rowError(&ir.Tensor{Type: st.Type, Data: got}, s.State(st.Name)); e > rowTol {
			t.Errorf("state %s: row-relative error %.3g > %g", st.Name, e, rowTol)
		}
	}
}

func compareRun(t *testing.T, exe *runtime.Executable, s *interp.Session, f *ir.Function, in map[string]*ir.Tensor) {
	t.Helper()
	got, want := runPair(t, exe, s, f, in)
	for _, o := range f.Outputs {
		typ := o.Value.Type()
		g := got[o.Name]
		if !typ.DType.IsFloat() {
			if msg := kerneltest.Compare(g, want[o.Name], 0); msg != "" {
				t.Errorf("%s: output %s: %s", f.Name, o.Name, msg)
			}
			continue
		}
		e := rowError(g, want[o.Name])
		t.Logf("%s: output %s: row-relative error %.3g", f.Name, o.Name, e)
		if e > rowTol {
			t.Errorf("%s: output %s: row-relative error %.3g > %g", f.Name, o.Name, e, rowTol)
		}
	}
}

// TestHFOraclesThroughPlans runs the Hugging Face oracles (written by no one here) through
// compiled plans: tinyllama's prefill and 8 decode steps over the KV cache (logits and greedy
// tokens) and the Whisper encoder's last hidden state.
func TestHFOraclesThroughPlans(t *testing.T) {
	ctx := context.Background()
	d := kerneltest.Device(t)
	load := func(path string) (*ir.Model, *runtime.Executable, map[string]*ir.Tensor) {
		m, err := ir.ParseModel(path)
		if err != nil {
			t.Fatal(err)
		}
		p, _, err := lower.Lower(m, m.Functions, options(d))
		if err != nil {
			t.Fatal(err)
		}
		exe, err := d.Load(p, runtime.LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { exe.Close() })
		gold, err := safetensors.ReadAll(filepath.Join("../testdata/hf", filepath.Base(filepath.Dir(path)), "golden.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		return m, exe, gold
	}
	t.Run("tinyllama", func(t *testing.T) {
		_, exe, gold := load("../examples/tinyllama/model.yaml")
		out, err := exe.Run(ctx, "prefill", map[string][]byte{"tokens": gold["input_ids"].Data, "pos": scalarI32(0).Data})
		if err != nil {
			t.Fatal(err)
		}
		logits := &ir.Tensor{Type: gold["prefill_logits"].Type, Data: out["logits"]}
		if e := rowError(logits, gold["prefill_logits"]); e > rowTol {
			t.Errorf("prefill logits: row-relative error %.3g > %g", e, rowTol)
		}
		greedy := []int{argmaxRow(logits, 15)}
		fed := gold["decode_tokens"]
		want := gold["decode_logits"]
		cols := want.Type.Shape[1]
		for step := 0; step < 8; step++ {
			tok := ir.TensorFromFloat64s(ir.T(ir.I32, 1), []float64{fed.Float64(step)})
			out, err := exe.Run(ctx, "decode", map[string][]byte{"tokens": tok.Data, "pos": scalarI32(16 + step).Data})
			if err != nil {
				t.Fatal(err)
			}
			got := &ir.Tensor{Type: ir.T(ir.F32, 1, cols), Data: out["logits"]}
			row := &ir.Tensor{Type: ir.T(ir.F32, 1, cols), Data: want.Data[4*cols*step : 4*cols*(step+1)]}
			if e := rowError(got, row); e > rowTol {
				t.Errorf("decode step %d: row-relative error %.3g > %g", step, e, rowTol)
			}
			greedy = append(greedy, argmaxRow(got, 0))
		}
		for i, g := range greedy {
			if w := int(gold["greedy_tokens"].Float64(i)); w != g {
				t.Errorf("greedy token %d: got %d, want %d (all %v)", i, g, w, greedy)
				break
			}
		}
	})
	t.Run("whisper-tiny-encoder", func(t *testing.T) {
		_, exe, gold := load("../examples/whisper-tiny-encoder/model.yaml")
		out, err := exe.Run(ctx, "encode", map[string][]byte{"features": gold["input_features"].Data})
		if err != nil {
			t.Fatal(err)
		}
		want := gold["last_hidden_state"]
		if e := rowError(&ir.Tensor{Type: want.Type, Data: out["hidden"]}, want); e > rowTol {
			t.Errorf("last_hidden_state: row-relative error %.3g > %g", e, rowTol)
		}
	})
}

func argmaxRow(x *ir.Tensor, row int) int {
	cols := x.Type.Shape[x.Type.Shape.Rank()-1]
	best := 0
	for c := 1; c < cols; c++ {
		if x.Float64(row*cols+c) > x.Float64(row*cols+best) {
			best = c
		}
	}
	return best
}

// Lowering tinyllama twice gives byte-identical plans.
func TestDeterministicTinyllama(t *testing.T) {
	m, err := ir.ParseModel("../examples/tinyllama/model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var enc [2][]byte
	for i := range enc {
		p, _, err := lower.Lower(m, m.Functions, lower.Options{Caps: kernels.Lavapipe, CompilerVersion: "t"})
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := p.Encode(&buf); err != nil {
			t.Fatal(err)
		}
		enc[i] = buf.Bytes()
	}
	if !bytes.Equal(enc[0], enc[1]) {
		t.Errorf("two lowerings of tinyllama differ (%d and %d bytes)", len(enc[0]), len(enc[1]))
	}
}
