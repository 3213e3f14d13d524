package egraph

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// opCost prices nodes by operator name; unnamed ops cost 1.
func opCost(prices map[string]float64) CostFunc {
	return func(g *EGraph, _ Id, n Node) float64 {
		if v, ok := prices[opName(n.Op)]; ok {
			return v
		}
		return 1
	}
}

// sharingGraph: root = pair(p, S) where S = exp(x) is needed anyway. p is either u(S) (cost 1,
// but its tree cost counts S again: 1+8+1) or cheap(x) (cost 5, tree 6). Tree cost picks cheap;
// the DAG, where S is already paid for, is cheaper with u(S).
func sharingGraph(t *testing.T) (*EGraph, Id) {
	g := New(nil)
	g.OpName = opName
	root := addTerm(t, g, "(pair (u (exp x)) (exp x))")
	p := addTerm(t, g, "(u (exp x))")
	cheap := addTerm(t, g, "(cheap x)")
	g.Union(p, cheap, "alt")
	rebuild(t, g)
	return g, root
}

var sharingPrices = map[string]float64{"pair": 1, "u": 1, "exp": 8, "var": 1, "cheap": 5}

func TestExtractDAGBeatsTreeCost(t *testing.T) {
	g, root := sharingGraph(t)
	e, _ := newExtractor(g, []Id{root}, opCost(sharingPrices))
	e.treeFixpoint()
	treeSel := e.result(e.choice, e.own)
	x, err := Extract(g, []Id{root}, opCost(sharingPrices))
	if err != nil {
		t.Fatal(err)
	}
	// Tree selection: pair 1 + cheap 5 + exp 8 + x 1 = 15. DAG: pair 1 + u 1 + exp 8 + x 1 = 11.
	if treeSel.Cost != 15 {
		t.Errorf("tree-cost selection DAG cost = %v, want 15\n%s", treeSel.Cost, treeSel.String(g))
	}
	if x.Cost != 11 {
		t.Errorf("DAG extraction cost = %v, want 11\n%s", x.Cost, x.String(g))
	}
	if n, _ := x.Node(g.Find(addTerm(t, g, "(cheap x)"))); opName(n.Op) != "u" {
		t.Errorf("DAG extraction chose %s, want u", g.NodeString(n))
	}
	// Children come before parents, the root last, each class once.
	if x.Order[len(x.Order)-1] != root || len(x.Order) != 4 {
		t.Errorf("order %v", x.Order)
	}
	pos := map[Id]int{}
	for i, c := range x.Order {
		pos[c] = i
	}
	for i, n := range x.Nodes {
		for _, ch := range n.Children {
			if pos[ch] >= i {
				t.Errorf("child %d of %d after its parent", ch, x.Order[i])
			}
		}
	}
}

func TestExtractSharedSubtermCountsOnce(t *testing.T) {
	// (add (mul a b) (mul a b)) is one mul used twice: DAG cost 1 add + 1 mul + a + b = 4.
	g := New(nil)
	root := addTerm(t, g, "(add (mul a b) (mul a b))")
	rebuild(t, g)
	x, err := Extract(g, []Id{root}, unitCost)
	if err != nil {
		t.Fatal(err)
	}
	if x.Cost != 4 {
		t.Errorf("cost %v, want 4", x.Cost)
	}
}

func TestExtractInfiniteCost(t *testing.T) {
	g := New(nil)
	a := addTerm(t, g, "(f x)")
	b := addTerm(t, g, "(g x)")
	g.Union(a, b, "alt")
	rebuild(t, g)
	noF := opCost(map[string]float64{"f": math.Inf(1)})
	x, err := Extract(g, []Id{a}, noF)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := x.Node(g.Find(a)); n.Op != opG {
		t.Errorf("chose %s, which is not implementable", g.NodeString(n))
	}
	noFG := opCost(map[string]float64{"f": math.Inf(1), "g": math.Inf(1)})
	if _, err := Extract(g, []Id{a}, noFG); err == nil || !strings.Contains(err.Error(), "finite") {
		t.Errorf("extract with every alternative +Inf: err = %v", err)
	}
}

func TestExtractCycleFree(t *testing.T) {
	// x = (mul x 1) makes a cycle in the e-graph; extraction must not select it.
	g := New(nil)
	x := addTerm(t, g, "x")
	m := addTerm(t, g, "(mul x 1)")
	g.Union(x, m, "mul-one")
	rebuild(t, g)
	ex, err := Extract(g, []Id{x}, opCost(map[string]float64{"var": 5, "mul": 0, "num": 0}))
	if err != nil {
		t.Fatal(err)
	}
	if len(ex.Order) != 1 || ex.Nodes[0].Op != opVar {
		t.Errorf("extracted %s", ex.String(g))
	}
}

// diverseGraph has three independent choices of two nodes each under one root.
func diverseGraph(t *testing.T) (*EGraph, Id) {
	g := New(nil)
	g.OpName = opName
	root := addTerm(t, g, "(pair (pair (f a) (f b)) (f c))")
	for _, v := range []string{"a", "b", "c"} {
		g.Union(addTerm(t, g, "(f "+v+")"), addTerm(t, g, "(g "+v+")"), "alt")
	}
	rebuild(t, g)
	return g, root
}

func TestExtractDiverse(t *testing.T) {
	prices := map[string]float64{"f": 1, "g": 1.5}
	run := func() []*Extraction {
		g, root := diverseGraph(t)
		xs, err := ExtractDiverse(g, []Id{root}, opCost(prices), 4)
		if err != nil {
			t.Fatal(err)
		}
		return xs
	}
	xs := run()
	if len(xs) != 4 {
		t.Fatalf("%d candidates, want 4", len(xs))
	}
	seen := map[string]bool{}
	for i, x := range xs {
		if seen[x.signature()] {
			t.Errorf("candidate %d repeats an earlier selection", i)
		}
		seen[x.signature()] = true
		if i > 0 && x.Cost < xs[i-1].Cost {
			t.Errorf("candidates not sorted by cost: %v then %v", xs[i-1].Cost, x.Cost)
		}
	}
	g, root := diverseGraph(t)
	best, _ := Extract(g, []Id{root}, opCost(prices))
	if xs[0].Cost != best.Cost || xs[0].signature() != best.signature() {
		t.Errorf("first candidate %v is not the single best %v", xs[0].Cost, best.Cost)
	}
	// Deterministic: a fresh graph gives the same candidates in the same order.
	for round := 0; round < 3; round++ {
		ys := run()
		for i := range xs {
			if xs[i].signature() != ys[i].signature() || xs[i].Cost != ys[i].Cost {
				t.Fatalf("round %d: candidate %d differs", round, i)
			}
		}
	}
	// With no alternatives there is only one candidate.
	g2 := New(nil)
	r2 := addTerm(t, g2, "(f a)")
	rebuild(t, g2)
	if ys, err := ExtractDiverse(g2, []Id{r2}, unitCost, 3); err != nil || len(ys) != 1 {
		t.Errorf("no alternatives: %d candidates, err %v", len(ys), err)
	}
}

func TestDot(t *testing.T) {
	g, root := sharingGraph(t)
	x, err := Extract(g, []Id{root}, opCost(sharingPrices))
	if err != nil {
		t.Fatal(err)
	}
	full := Dot(g, DotOptions{Extraction: x}).String()
	for _, want := range []string{"cluster_", "lightblue", "compound", `label="exp"`, "lhead"} {
		if !strings.Contains(full, want) {
			t.Errorf("DOT lacks %q:\n%s", want, full)
		}
	}
	if again := Dot(g, DotOptions{Extraction: x}).String(); again != full {
		t.Error("DOT output is not deterministic")
	}
	// Region: one step below the root shows the root, its two children and a stub for x.
	region := Dot(g, DotOptions{Roots: []Id{root}, Depth: 1}).String()
	if strings.Count(region, "subgraph cluster_") != 3 || !strings.Contains(region, "…") {
		t.Errorf("depth-1 region:\n%s", region)
	}
	filtered := Dot(g, DotOptions{Filter: func(g *EGraph, id Id) bool {
		for _, n := range g.Nodes(id) {
			if opName(n.Op) == "exp" {
				return true
			}
		}
		return false
	}}).String()
	if strings.Count(filtered, "subgraph cluster_") != 1 {
		t.Errorf("filtered:\n%s", filtered)
	}
	chosen := Dot(g, DotOptions{Extraction: x, ChosenOnly: true}).String()
	if strings.Contains(chosen, `"cheap"`) || strings.Count(chosen, "subgraph cluster_") != 4 {
		t.Errorf("chosen-only:\n%s", chosen)
	}
	dotBin, err := exec.LookPath("dot")
	if err != nil {
		t.Skip("missing capability: graphviz dot is not installed; DOT text checked but not rendered")
	}
	dir := t.TempDir()
	for i, src := range []string{full, region, filtered, chosen} {
		in := filepath.Join(dir, "g.dot")
		if err := os.WriteFile(in, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(dotBin, "-Tsvg", "-o", filepath.Join(dir, "g.svg"), in).CombinedOutput(); err != nil {
			t.Errorf("dot -Tsvg rejects output %d: %v\n%s\n%s", i, err, out, src)
		}
	}
}

// fanOutLayers builds n layers in which the residual x feeds one norm shared by three linears
// and the residual add, as a transformer's attention input feeds q, k and v:
//
//	x' = add(x, add(add(lin(norm(x), v0), lin(norm(x), v1)), lin(norm(x), v2)))
//
// and saturates it with (lin (norm ?x) ?v) => (nl ?x ?v). Tree costs grow fourfold per layer.
func fanOutLayers(t testing.TB, n int) (*EGraph, Id) {
	g := New(nil)
	g.OpName = opName
	x := addTerm(t, g, "x")
	for i := 0; i < n; i++ {
		nn := mustAdd(t, g, Node{Op: opNames["norm"], Children: []Id{x}})
		var s Id
		for k := 0; k < 3; k++ {
			v := addTerm(t, g, fmt.Sprintf("v%d_%d", i, k))
			l := mustAdd(t, g, Node{Op: opNames["lin"], Children: []Id{nn, v}})
			if k == 0 {
				s = l
			} else {
				s = mustAdd(t, g, Node{Op: opAdd, Children: []Id{s, l}})
			}
		}
		x = mustAdd(t, g, Node{Op: opAdd, Children: []Id{x, s}})
	}
	r := Runner{IterLimit: 10, NodeLimit: 100_000, TimeLimit: time.Minute}
	if _, err := r.Run(context.Background(), g, []*Rewrite{rw(t, "norm-lin", "(lin (norm ?x) ?v)", "(nl ?x ?v)")}); err != nil {
		t.Fatal(err)
	}
	return g, x
}

// TestExtractFusionsAtDepth: three fused nl (3.5 each) beat one norm (2) and three lin (3 each)
// only together, so no single-class change finds them; tree costs, which count the residual
// four times more per layer, stop telling them apart past about 25 layers (float64 has 53 bits).
// The DAG-cost extractor must fuse in every layer of 40.
func TestExtractFusionsAtDepth(t *testing.T) {
	const layers = 40
	g, root := fanOutLayers(t, layers)
	cost := opCost(map[string]float64{"norm": 2, "lin": 3, "nl": 3.5, "add": 1, "var": 0})
	x, err := Extract(g, []Id{root}, cost)
	if err != nil {
		t.Fatal(err)
	}
	ops := map[string]int{}
	for _, n := range x.Nodes {
		ops[opName(n.Op)]++
	}
	if ops["nl"] != 3*layers || ops["norm"] != 0 || ops["lin"] != 0 {
		t.Errorf("extracted %v; want %d nl and no norm or lin", ops, 3*layers)
	}
	if want := float64(layers) * (3*3.5 + 3); x.Cost != want {
		t.Errorf("cost %v, want %v", x.Cost, want)
	}
	// What the tree-cost start alone (egg's extractor and the local search) finds, for the record.
	e, _ := newExtractor(g, []Id{root}, cost)
	e.treeFixpoint()
	t.Logf("tree-cost start with local search: DAG cost %v; greedy DAG: %v", e.improveLocal(e.own, dagPasses), x.Cost)
}

// TestGreedyDAGProperties checks the greedy phase alone on random e-graphs with cycles: every
// class with a finite term is settled, the selection is acyclic and uses no +Inf node, each
// class's recorded cost is the DAG cost of its selected sub-DAG, and Extract never costs more
// than the tree-cost start improved by the same local search.
func TestGreedyDAGProperties(t *testing.T) {
	beatTree := 0
	for seed := int64(1); seed <= 300; seed++ {
		rng := rand.New(rand.NewSource(seed))
		g, ids := randomCyclicGraph(t, rng)
		costs := map[Op]float64{opF: float64(rng.Intn(5)), opG: math.Inf(1), opAdd: float64(1 + rng.Intn(5)), opMul: float64(rng.Intn(9)), 100: 1, 101: 2, 102: 3}
		if rng.Intn(2) == 0 {
			costs[opG] = float64(rng.Intn(5))
		}
		cost := func(_ *EGraph, _ Id, n Node) float64 { return costs[n.Op] }
		roots := []Id{g.Find(ids[len(ids)-1]), g.Find(ids[len(ids)-5])}

		tree, _ := newExtractor(g, roots, cost)
		tree.treeFixpoint()
		e, _ := newExtractor(g, roots, cost)
		e.greedyDAG(e.own)
		for _, c := range g.Classes() {
			if math.IsInf(tree.best[c], 1) != math.IsInf(e.best[c], 1) {
				t.Fatalf("seed %d: class %d tree cost %v, greedy DAG cost %v", seed, c, tree.best[c], e.best[c])
			}
			if math.IsInf(e.best[c], 1) {
				continue
			}
			if math.IsInf(e.own[c][e.choice[c]], 1) {
				t.Fatalf("seed %d: class %d chose a +Inf node", seed, c)
			}
			e.roots = []Id{c}
			if d := e.dagCost(e.choice, e.own); d != e.best[c] {
				t.Fatalf("seed %d: class %d recorded cost %v, DAG cost of its selection %v", seed, c, e.best[c], d)
			}
		}
		if math.IsInf(tree.best[roots[0]], 1) || math.IsInf(tree.best[roots[1]], 1) {
			if _, err := Extract(g, roots, cost); err == nil {
				t.Fatalf("seed %d: extraction of a root with no finite term succeeded", seed)
			}
			continue
		}
		treeLocal := math.Inf(1)
		if !math.IsInf(tree.dagCost(tree.choice, tree.own), 1) {
			treeLocal = tree.improveLocal(tree.own, dagPasses)
		}
		x, err := Extract(g, roots, cost)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if x.Cost > treeLocal {
			t.Fatalf("seed %d: Extract costs %v, the tree-cost start with local search %v", seed, x.Cost, treeLocal)
		}
		if x.Cost < treeLocal {
			beatTree++
		}
	}
	if beatTree == 0 {
		t.Error("the greedy DAG start never beat the tree-cost start: the comparison tested nothing")
	}
	t.Logf("%d graphs extracted cheaper than from the tree-cost start", beatTree)
}
