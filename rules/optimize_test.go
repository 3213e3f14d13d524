package rules

import (
	"context"
	"testing"

	"vkc/egraph"
	"vkc/ir"
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
