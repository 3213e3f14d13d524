package egraph

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"
)

// layered builds a chain of n layers shaped like a transformer block:
//
//	x' = add(x, act(lin(mul(norm(x), w_i), v_i)))
//
// and returns the last class.
func layered(t testing.TB, g *EGraph, n int) Id {
	x := addTerm(t, g, "x")
	for i := 0; i < n; i++ {
		w := addTerm(t, g, "w"+strconv.Itoa(i))
		v := addTerm(t, g, "v"+strconv.Itoa(i))
		nn := mustAdd(t, g, Node{Op: opNames["norm"], Children: []Id{x}})
		h := mustAdd(t, g, Node{Op: opMul, Children: []Id{nn, w}})
		l := mustAdd(t, g, Node{Op: opNames["lin"], Children: []Id{h, v}})
		a := mustAdd(t, g, Node{Op: opNames["act"], Children: []Id{l}})
		x = mustAdd(t, g, Node{Op: opAdd, Children: []Id{x, a}})
	}
	return x
}

func mustAdd(t testing.TB, g *EGraph, n Node) Id {
	id, err := g.Add(n)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// layerRules: commutativity, two single-node fusions and a two-output fusion (the sum feeding a
// norm becomes out0/out1 of one fused node), like the rule files will have.
func layerRules(t testing.TB) []*Rewrite {
	return []*Rewrite{
		rw(t, "mul-comm", "(mul ?a ?b)", "(mul ?b ?a)"),
		rw(t, "add-comm", "(add ?a ?b)", "(add ?b ?a)"),
		rw(t, "norm-mul", "(mul (norm ?x) ?w)", "(fused ?x ?w)"),
		rw(t, "lin-act", "(act (lin ?h ?v))", "(g ?h ?v)"),
		rw(t, "add-norm", "?s = (add ?a ?b) & (norm ?s)", "(out0 (pair ?a ?b)) & (out1 (pair ?a ?b))"),
	}
}

func saturateLayers(t testing.TB, n int) (*EGraph, *Report, Id) {
	g := New(nil)
	root := layered(t, g, n)
	r := Runner{IterLimit: 30, NodeLimit: 1_000_000, TimeLimit: time.Minute, Scheduler: &DefaultBackoff}
	rep, err := r.Run(context.Background(), g, layerRules(t))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Stop != Saturated {
		t.Fatalf("%d layers: stop %v", n, rep.Stop)
	}
	return g, rep, root
}

// TestLayeredGrowthIsLinear: every layer adds the same number of nodes and classes, so the
// saturated size is affine in the depth (no cross-layer blowup).
func TestLayeredGrowthIsLinear(t *testing.T) {
	size := map[int][2]int{}
	for _, n := range []int{2, 8, 30} {
		g, _, root := saturateLayers(t, n)
		size[n] = [2]int{g.NumNodes(), g.NumClasses()}
		if _, err := Extract(g, []Id{root}, unitCost); err != nil {
			t.Fatal(err)
		}
	}
	perLayer := (size[8][0] - size[2][0]) / 6
	if size[30][0]-size[8][0] != 22*perLayer {
		t.Errorf("nodes: %v; not affine in depth", size)
	}
}

// BenchmarkSaturateLayers reports saturation time and e-graph size for 2, 8 and 30 layers.
// Run: go test ./egraph -run '^$' -bench SaturateLayers -benchtime 20x
func BenchmarkSaturateLayers(b *testing.B) {
	for _, n := range []int{2, 8, 30} {
		b.Run(fmt.Sprintf("layers=%d", n), func(b *testing.B) {
			var g *EGraph
			var rep *Report
			for b.Loop() {
				g, rep, _ = saturateLayers(b, n)
			}
			b.ReportMetric(float64(g.NumNodes()), "nodes")
			b.ReportMetric(float64(g.NumClasses()), "classes")
			b.ReportMetric(float64(len(rep.Iterations)), "iters")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n)/1e3, "µs/layer")
		})
	}
}

// BenchmarkExtractLayers reports DAG-aware extraction time (one best, and four diverse
// candidates) on the saturated layered graphs.
// Run: go test ./egraph -run '^$' -bench ExtractLayers -benchtime 50x
func BenchmarkExtractLayers(b *testing.B) {
	cost := opCost(map[string]float64{"fused": 1.5, "g": 2, "norm": 2, "lin": 3, "pair": 2, "out0": 0, "out1": 0})
	for _, k := range []int{1, 4} {
		for _, n := range []int{2, 8, 30} {
			b.Run(fmt.Sprintf("k=%d/layers=%d", k, n), func(b *testing.B) {
				g, _, root := saturateLayers(b, n)
				for b.Loop() {
					if _, err := ExtractDiverse(g, []Id{root}, cost, k); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n)/1e3, "µs/layer")
			})
		}
	}
}
