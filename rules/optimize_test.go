package rules

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/vkc-project/vkc/egraph"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
)

func TestOptimizeRoundTrip(t *testing.T) {
	m, err := ir.ParseModel("../examples/tinyllama/model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range m.Functions {
		g, rep, err := Optimize(context.Background(), m, f, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s", rep)
		if len(g.Outputs) != len(f.Outputs) || len(g.Updates) != len(f.Updates) {
			t.Fatalf("signature changed")
		}
	}
}

// TestOptimizeK: k candidates, distinct, cheapest first, each a valid function with the same
// signature.
func TestOptimizeK(t *testing.T) {
	m, err := ir.ParseModelWith("../examples/tinyllama/model.yaml", ir.ParseOptions{SkipWeights: true})
	if err != nil {
		t.Fatal(err)
	}
	f := m.Function("decode")
	cands, rep, err := OptimizeK(context.Background(), m, f, Options{}, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(cands) != 4 {
		t.Fatalf("%d candidates, want 4", len(cands))
	}
	seen := map[string]bool{}
	for i, g := range cands {
		s := funcString(g)
		if seen[s] {
			t.Errorf("candidate %d repeats an earlier one", i)
		}
		seen[s] = true
		if len(g.Outputs) != len(f.Outputs) || len(g.Updates) != len(f.Updates) {
			t.Errorf("candidate %d changed the signature", i)
		}
	}
	// The diverse search may find a cheaper selection than the single extraction, never a
	// dearer first candidate.
	_, rep1, err := Optimize(context.Background(), m, f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Cost > rep1.Cost {
		t.Errorf("OptimizeK's first candidate costs %g, Optimize's result %g", rep.Cost, rep1.Cost)
	}
	t.Logf("%s", rep)
}

// TestOptimizeLimits: a node limit stops saturation early; the graph so far is still extracted.
func TestOptimizeLimits(t *testing.T) {
	m, err := ir.ParseModelWith("../examples/tinyllama/model.yaml", ir.ParseOptions{SkipWeights: true})
	if err != nil {
		t.Fatal(err)
	}
	f, err := ir.DecomposeAll(m.Function("prefill"))
	if err != nil {
		t.Fatal(err)
	}
	g, rep, err := Optimize(context.Background(), m, f, Options{NodeLimit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Stop != egraph.NodeLimit || len(g.Outputs) != 1 {
		t.Errorf("stop %s, %d outputs; want the node limit and one output", rep.Stop, len(g.Outputs))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := Optimize(ctx, m, f, Options{}); err == nil {
		t.Error("a cancelled context did not stop Optimize")
	}
}

// TestOptimizeMultiOutputInput: a function that already holds a two-output op (add_rmsnorm) goes
// through the e-graph with its projections and comes back computing the same values; an
// optimised function optimised again keeps its ops.
func TestOptimizeMultiOutputInput(t *testing.T) {
	b := ir.NewBuilder("f")
	x, _ := b.Input("x", ir.T(ir.F32, 3, 5))
	y, _ := b.Input("y", ir.T(ir.F32, 3, 5))
	w := b.Param("w", ir.T(ir.F32, 5))
	s := b.MustOp(ir.AddRMSNorm, ir.Attrs{"eps": 1e-6}, x, y, w)
	n := ir.Value{Node: s.Node, Out: 1}
	_ = b.Output("sum", s)
	_ = b.Output("norm", b.MustOp(ir.Linear, nil, n, b.Param("W", ir.T(ir.F32, 7, 5))))
	f := b.Function()
	g, _, err := Optimize(context.Background(), nil, f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	c := &caseGen{t: t, rng: rng}
	env := interp.Env{Inputs: map[string]*ir.Tensor{"x": c.randTensor(ir.T(ir.F32, 3, 5)), "y": c.randTensor(ir.T(ir.F32, 3, 5))},
		Params: map[string]*ir.Tensor{"w": c.randTensor(ir.T(ir.F32, 5)), "W": c.randTensor(ir.T(ir.F32, 7, 5))}}
	want, got := evalOutputs(t, f, env), evalOutputs(t, g, env)
	for i := range want {
		if err := closeEnough(got[i], want[i], 1e-5); err != nil {
			t.Errorf("output %d: %v\n%s", i, err, funcString(g))
		}
	}
	g2, _, err := Optimize(context.Background(), nil, g, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if opSummary(g2) != opSummary(g) {
		t.Errorf("optimising again changed %s to %s", opSummary(g), opSummary(g2))
	}
}

// TestOptimizeDisable: a disabled rule neither matches nor shows in the result.
func TestOptimizeDisable(t *testing.T) {
	m, err := ir.ParseModelWith("../examples/tinyllama/model.yaml", ir.ParseOptions{SkipWeights: true})
	if err != nil {
		t.Fatal(err)
	}
	g, rep, err := Optimize(context.Background(), m, m.Function("decode"), Options{Disable: []string{"rmsnorm-linear", "rope-cache-write"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range g.Nodes {
		if n.Op == ir.RMSNormLinear || n.Op == ir.RopeCacheWrite {
			t.Errorf("disabled fusion extracted: %s", n)
		}
	}
	for _, s := range rep.Rules {
		if s.Name == "rmsnorm-linear" || s.Name == "rope-cache-write" {
			t.Errorf("disabled rule %s ran", s.Name)
		}
	}
}

// TestOptimizeRecognisesScaledRope: a rope written as its composition (ir.Decompose) with a
// scaled frequency table is recognised as one rope op carrying the same scaling: Llama 3.1's
// llama3 scaling on a 128-wide head, and a linear one.
func TestOptimizeRecognisesScaledRope(t *testing.T) {
	for _, at := range []ir.Attrs{
		{"theta": 500000.0, "scaling": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_ctx": 8192},
		{"theta": 10000.0, "scaling": "linear", "factor": 4.0},
	} {
		b := ir.NewBuilder("f")
		x, _ := b.Input("x", ir.T(ir.F32, 3, 2, 128))
		pos, _ := b.Input("pos", ir.T(ir.I32))
		r, err := ir.Decompose(b, ir.Rope, at, x, pos)
		if err != nil {
			t.Fatal(err)
		}
		_ = b.Output("y", r)
		f := b.Function()
		g, _, err := Optimize(context.Background(), nil, f, Options{})
		if err != nil {
			t.Fatal(err)
		}
		var got ir.Attrs
		for _, n := range g.Nodes {
			if n.Op == ir.Rope {
				got = n.Attrs
			}
		}
		if got == nil {
			t.Fatalf("%v: no rope recognised:\n%s", at, funcString(g))
		}
		for k, v := range at {
			if got[k] != v {
				t.Errorf("%v: recognised rope has %s=%v", at, k, got[k])
			}
		}
	}
}

// One saturation serves several extractions: extracting from a Saturated under the static
// model, then again for k candidates, gives what Optimize and OptimizeK give from scratch.
func TestSaturateThenExtractTwice(t *testing.T) {
	m, err := ir.ParseModel("../examples/tinyllama/model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, f := range m.Functions {
		one, _, err := Optimize(ctx, m, f, Options{})
		if err != nil {
			t.Fatal(err)
		}
		four, _, err := OptimizeK(ctx, m, f, Options{}, 4)
		if err != nil {
			t.Fatal(err)
		}
		sat, _, err := Saturate(ctx, m, f, Options{})
		if err != nil {
			t.Fatal(err)
		}
		gotOne, rep1, err := sat.Extract(nil, 1)
		if err != nil {
			t.Fatal(err)
		}
		gotFour, rep4, err := sat.Extract(nil, 4)
		if err != nil {
			t.Fatal(err)
		}
		if FunctionKey(gotOne[0]) != FunctionKey(one) {
			t.Errorf("%s: the first extraction differs from Optimize's", f.Name)
		}
		if len(gotFour) != len(four) {
			t.Fatalf("%s: %d candidates, OptimizeK gives %d", f.Name, len(gotFour), len(four))
		}
		for i := range four {
			if FunctionKey(gotFour[i]) != FunctionKey(four[i]) {
				t.Errorf("%s: candidate %d of the second extraction differs from OptimizeK's", f.Name, i)
			}
		}
		if len(rep1.Candidates) != 1 || len(rep4.Candidates) != len(four) || rep4.Iterations == 0 {
			t.Errorf("%s: reports with %d and %d candidates, %d iterations", f.Name, len(rep1.Candidates), len(rep4.Candidates), rep4.Iterations)
		}
	}
}
