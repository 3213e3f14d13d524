package rules

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
	"github.com/vkc-project/vkc/ir/safetensors"
)

// optimizeModel returns a copy of m whose functions are optimized (after DecomposeAll when
// decompose is set), with the reports.
func optimizeModel(t testing.TB, m *ir.Model, decompose bool) (*ir.Model, []*Report) {
	t.Helper()
	out := &ir.Model{Name: m.Name, Dims: m.Dims, Params: m.Params, State: m.State, Weights: m.Weights, Source: m.Source}
	var reps []*Report
	for _, f := range m.Functions {
		if decompose {
			var err error
			if f, err = ir.DecomposeAll(f); err != nil {
				t.Fatal(err)
			}
		}
		g, rep, err := Optimize(context.Background(), m, f, Options{})
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		out.Functions = append(out.Functions, g)
		reps = append(reps, rep)
	}
	if err := out.Validate(); err != nil {
		t.Fatal(err)
	}
	return out, reps
}

// opSummary lists a function's op counts (sources and constants left out) as "op×n ...".
func opSummary(f *ir.Function) string {
	var parts []string
	for _, c := range f.OpCounts() {
		if c.Op.Info().Kind == ir.KindSource {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s×%d", c.Op, c.Count))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// checkRows applies the oracle's tolerance: per row, max abs error ≤ 1e-4 × the row's largest
// magnitude.
func checkRows(t *testing.T, what string, got, want []float64, width int) {
	t.Helper()
	for r := 0; r < len(want)/width; r++ {
		scale, diff := 0.0, 0.0
		for i := r * width; i < (r+1)*width; i++ {
			scale = math.Max(scale, math.Abs(want[i]))
			diff = math.Max(diff, math.Abs(got[i]-want[i]))
		}
		if !(diff <= 1e-4*scale) {
			t.Errorf("%s row %d: max abs error %.3g, allowed %.3g", what, r, diff, 1e-4*scale)
		}
	}
}

func scalarI32(v float64) *ir.Tensor { return ir.TensorFromFloat64s(ir.T(ir.I32), []float64{v}) }

// TestTinyllamaOracle runs the extracted tinyllama graphs (from the fused-op model and from its
// DecomposeAll form) in the interpreter against the Hugging Face outputs: the prompt, then the
// decode steps with the KV cache carried over.
func TestTinyllamaOracle(t *testing.T) {
	m, err := ir.ParseModel("../examples/tinyllama/model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	golden, err := safetensors.ReadAll("../testdata/hf/tinyllama/golden.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	vocab := m.Dims["vocab"]
	for _, decompose := range []bool{false, true} {
		t.Run(fmt.Sprintf("decompose=%v", decompose), func(t *testing.T) {
			om, reps := optimizeModel(t, m, decompose)
			for _, r := range reps {
				t.Logf("%s", r)
			}
			s := interp.NewSession(om)
			out, err := s.Run("prefill", map[string]*ir.Tensor{"tokens": golden["input_ids"], "pos": scalarI32(0)})
			if err != nil {
				t.Fatal(err)
			}
			checkRows(t, "prefill logits", out["logits"].Float64s(), golden["prefill_logits"].Float64s(), vocab)
			seq := golden["input_ids"].NumElements()
			dt, dl := golden["decode_tokens"].Float64s(), golden["decode_logits"].Float64s()
			for i, tok := range dt {
				out, err := s.Run("decode", map[string]*ir.Tensor{"tokens": ir.TensorFromFloat64s(ir.T(ir.I32, 1), []float64{tok}), "pos": scalarI32(float64(seq + i))})
				if err != nil {
					t.Fatal(err)
				}
				checkRows(t, fmt.Sprintf("decode step %d logits", i), out["logits"].Float64s(), dl[i*vocab:(i+1)*vocab], vocab)
			}
		})
	}
}

// TestDecomposedExtractsToFused: tinyllama written with primitives (ir.DecomposeAll) extracts to
// the same graph as tinyllama written with composite ops: the same ops, counted per op.
func TestDecomposedExtractsToFused(t *testing.T) {
	m, err := ir.ParseModelWith("../examples/tinyllama/model.yaml", ir.ParseOptions{SkipWeights: true})
	if err != nil {
		t.Fatal(err)
	}
	fused, _ := optimizeModel(t, m, false)
	prim, reps := optimizeModel(t, m, true)
	for i, f := range fused.Functions {
		want, got := opSummary(f), opSummary(prim.Functions[i])
		t.Logf("%s: %s", f.Name, want)
		if got != want {
			t.Errorf("%s: decomposed model extracts to\n  %s\nfused-op model to\n  %s\n%s", f.Name, got, want, reps[i])
		}
		ws, gs := structure(f), structure(prim.Functions[i])
		for k, w := range ws {
			if gs[k] != w {
				t.Errorf("%s: %s is computed differently:\n  fused-op model  %.300s\n  decomposed model %.300s", f.Name, k, w, gs[k])
			}
		}
	}
}

// structure spells each output and state update of f as the expression computing it (ops,
// attributes, sources by name, constants by value), so two graphs compare by what they compute
// and how, whatever their node order.
func structure(f *ir.Function) map[string]string {
	memo := map[ir.Value]string{}
	var expr func(v ir.Value) string
	expr = func(v ir.Value) string {
		if s, ok := memo[v]; ok {
			return s
		}
		n := v.Node
		var s string
		switch n.Op {
		case ir.Input, ir.Param, ir.State:
			s = n.Op.String() + ":" + n.Name
		case ir.Const:
			s = fmt.Sprintf("const%v", n.Value.Float64s())
		default:
			parts := []string{n.Op.String() + "[" + n.Attrs.Key() + "]"}
			for _, a := range n.Args {
				parts = append(parts, expr(a))
			}
			s = "(" + strings.Join(parts, " ") + ")"
			if v.Out > 0 {
				s += fmt.Sprintf(".%d", v.Out)
			}
		}
		// Long expressions are compared by hash to keep the memo small.
		if len(s) > 256 {
			s = fmt.Sprintf("#%x", sha256.Sum256([]byte(s)))
		}
		memo[v] = s
		return s
	}
	out := map[string]string{}
	for _, o := range f.Outputs {
		out["output "+o.Name] = expr(o.Value)
	}
	for _, u := range f.Updates {
		out["update "+u.Name] = expr(u.Value)
	}
	return out
}
