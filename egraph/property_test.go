package egraph

import (
	"math"
	"math/rand"
	"testing"
)

// TestRebuildMatchesNaiveCongruence builds random terms, unions random pairs, and checks the
// e-graph against a naive congruence closure over the same terms: two terms are equal in one
// exactly when they are equal in the other.
func TestRebuildMatchesNaiveCongruence(t *testing.T) {
	for seed := int64(1); seed <= 30; seed++ {
		rng := rand.New(rand.NewSource(seed))
		g := New(nil)
		type term struct {
			op       Op
			children []int // indices of earlier terms
		}
		var terms []term
		var ids []Id
		leaves := 4
		for i := 0; i < leaves; i++ {
			terms = append(terms, term{op: Op(100 + i)})
			ids = append(ids, mustAdd(t, g, Node{Op: Op(100 + i)}))
		}
		for i := 0; i < 40; i++ {
			op := []Op{opF, opG, opAdd}[rng.Intn(3)]
			arity := 1
			if op == opAdd {
				arity = 2
			}
			tm := term{op: op}
			n := Node{Op: op}
			for j := 0; j < arity; j++ {
				c := rng.Intn(len(terms))
				tm.children = append(tm.children, c)
				n.Children = append(n.Children, ids[c])
			}
			terms = append(terms, tm)
			ids = append(ids, mustAdd(t, g, n))
		}
		// Naive closure: a union-find over term indices, closed under congruence by fixpoint.
		parent := make([]int, len(terms))
		for i := range parent {
			parent[i] = i
		}
		var find func(int) int
		find = func(i int) int {
			for parent[i] != i {
				i = parent[i]
			}
			return i
		}
		for k := 0; k < 3; k++ {
			a, b := rng.Intn(len(terms)), rng.Intn(len(terms))
			parent[find(a)] = find(b)
			if _, err := g.Union(ids[a], ids[b], "random"); err != nil {
				t.Fatal(err)
			}
			if rng.Intn(2) == 0 {
				rebuild(t, g)
			}
		}
		rebuild(t, g)
		for changed := true; changed; {
			changed = false
			for i := range terms {
				for j := i + 1; j < len(terms); j++ {
					if find(i) == find(j) || terms[i].op != terms[j].op || len(terms[i].children) != len(terms[j].children) {
						continue
					}
					same := true
					for c := range terms[i].children {
						if find(terms[i].children[c]) != find(terms[j].children[c]) {
							same = false
						}
					}
					if same {
						parent[find(i)] = find(j)
						changed = true
					}
				}
			}
		}
		for i := range terms {
			for j := range terms {
				if (find(i) == find(j)) != (g.Find(ids[i]) == g.Find(ids[j])) {
					t.Fatalf("seed %d: terms %d and %d: naive says %v, e-graph %v", seed, i, j, find(i) == find(j), g.Find(ids[i]) == g.Find(ids[j]))
				}
			}
		}
		// Invariants after a rebuild: nodes canonical and distinct, hash-cons finds every node.
		count := 0
		for _, c := range g.Classes() {
			for k, n := range g.Nodes(c) {
				for _, ch := range n.Children {
					if g.Find(ch) != ch {
						t.Fatalf("seed %d: non-canonical child in class %d", seed, c)
					}
				}
				if k > 0 && compareNodes(g.Nodes(c)[k-1], n) >= 0 {
					t.Fatalf("seed %d: class %d nodes not sorted and distinct", seed, c)
				}
				if id, ok := g.Lookup(n); !ok || id != c {
					t.Fatalf("seed %d: Lookup(%s) = %d, %v; want %d", seed, g.NodeString(n), id, ok, c)
				}
				count++
			}
		}
		if count != g.NumNodes() {
			t.Fatalf("seed %d: NumNodes %d, counted %d", seed, g.NumNodes(), count)
		}
	}
}

// TestAnchoredSearchEqualsIndexScan checks the parent-list walk for multi-patterns against the
// plain operator-index scan on random graphs: the same matches in the same order.
func TestAnchoredSearchEqualsIndexScan(t *testing.T) {
	pats := [][]string{
		{"(f ?a)", "(add ?a ?b)"},
		{"(g (f ?x))", "(add (f ?x) ?y)"},
		{"?s = (add ?a ?b)", "(g ?s)"},
		{"(add ?a ?a)", "(f (g ?a))"},
		{"(g ?s)", "?s = (add ?a ?b)"},
	}
	total := make([]int, len(pats))
	for seed := int64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewSource(seed))
		g := New(nil)
		var ids []Id
		for i := 0; i < 3; i++ {
			ids = append(ids, mustAdd(t, g, Node{Op: Op(100 + i)}))
		}
		for i := 0; i < 60; i++ {
			op := []Op{opF, opG, opAdd}[rng.Intn(3)]
			n := Node{Op: op, Children: []Id{ids[rng.Intn(len(ids))]}}
			if op == opAdd {
				n.Children = append(n.Children, ids[rng.Intn(len(ids))])
			}
			ids = append(ids, mustAdd(t, g, n))
		}
		for k := 0; k < 4; k++ {
			g.Union(ids[rng.Intn(len(ids))], ids[rng.Intn(len(ids))], "random")
		}
		rebuild(t, g)
		for pi, terms := range pats {
			p := mustPattern(t, terms...)
			anchored := p.Search(g, 0)
			scan := *p
			scan.anchors = make([]anchor, len(p.anchors))
			plain := scan.Search(g, 0)
			if len(anchored) != len(plain) {
				t.Fatalf("seed %d %v: anchored %d matches, scan %d", seed, terms, len(anchored), len(plain))
			}
			for i := range plain {
				if anchored[i].Subst.String() != plain[i].Subst.String() {
					t.Fatalf("seed %d %v: match %d differs: %s vs %s", seed, terms, i, anchored[i].Subst, plain[i].Subst)
				}
			}
			total[pi] += len(plain)
		}
	}
	for i, n := range total {
		if n == 0 {
			t.Errorf("%v never matched: the comparison tested nothing", pats[i])
		}
	}
}

// TestLocalSearchEqualsFullEvaluation checks the incremental DAG improvement against the
// straightforward one (a full DAG evaluation per trial) on random e-graphs with cycles and
// integer costs: both must pick the same selection.
func TestLocalSearchEqualsFullEvaluation(t *testing.T) {
	improvedSome := 0
	for seed := int64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewSource(seed))
		g, ids := randomCyclicGraph(t, rng)
		costs := map[Op]float64{opF: float64(rng.Intn(5)), opG: float64(rng.Intn(5)), opAdd: float64(1 + rng.Intn(5)), opMul: float64(rng.Intn(9)), 100: 1, 101: 2, 102: 3}
		cost := func(_ *EGraph, _ Id, n Node) float64 { return costs[n.Op] }
		roots := []Id{g.Find(ids[len(ids)-1]), g.Find(ids[len(ids)-5])}

		full, _ := newExtractor(g, roots, cost)
		full.treeFixpoint()
		if math.IsInf(full.best[roots[0]], 1) || math.IsInf(full.best[roots[1]], 1) {
			continue
		}
		tree := full.dagCost(full.choice, full.own)
		fullCost := full.improveDAG(full.own, dagPasses, dagWork)

		local, _ := newExtractor(g, roots, cost)
		local.treeFixpoint()
		localCost := local.improveLocal(local.own, dagPasses)

		if fullCost != localCost || local.dagCost(local.choice, local.own) != localCost {
			t.Fatalf("seed %d: full evaluation %v, incremental %v (recomputed %v), tree %v", seed, fullCost, localCost, local.dagCost(local.choice, local.own), tree)
		}
		if math.IsInf(localCost, 1) || localCost > tree {
			t.Fatalf("seed %d: incremental cost %v worse than tree selection %v", seed, localCost, tree)
		}
		if localCost < tree {
			improvedSome++
		}
	}
	if improvedSome == 0 {
		t.Error("no random graph had a DAG improvement over the tree selection: the comparison tested nothing")
	}
	t.Logf("%d graphs improved by the DAG phase", improvedSome)
}

// dagWork bounds improveDAG's trials (about 5e7 class visits).
const dagWork = 50_000_000

// improveDAG changes one class's choice at a time, keeping a change when the DAG cost of the
// whole selection drops, until a pass finds nothing, maxPasses passes ran, or about maxWork class
// visits were spent. Each trial is a full DAG evaluation, so a pass costs O(alternatives ×
// reachable classes): quadratic in the graph size, which the work bound caps. It is the
// reference for improveLocal in TestLocalSearchEqualsFullEvaluation.
func (e *extractor) improveDAG(own [][]float64, maxPasses, maxWork int) float64 {
	cur := e.dagCost(e.choice, own)
	work := 0
	for pass := 0; pass < maxPasses; pass++ {
		improved := false
		reach := e.reachable(e.choice)
		for _, c := range reach {
			nodes := e.g.classes[c].nodes
			if len(nodes) < 2 {
				continue
			}
			for j := range nodes {
				if j == e.choice[c] || math.IsInf(own[c][j], 1) || !e.childrenFinite(nodes[j]) {
					continue
				}
				if work > maxWork {
					return cur
				}
				work += len(reach)
				old := e.choice[c]
				e.choice[c] = j
				if v := e.dagCost(e.choice, own); v < cur {
					cur, improved = v, true
				} else {
					e.choice[c] = old
				}
			}
		}
		if !improved {
			break
		}
	}
	return cur
}

// randomCyclicGraph builds a random e-graph of 3 leaves and 30 unary or binary nodes over them,
// with 8 random unions (which make cycles), rebuilt; ids are the nodes in the order added.
func randomCyclicGraph(t *testing.T, rng *rand.Rand) (*EGraph, []Id) {
	t.Helper()
	g := New(nil)
	var ids []Id
	for i := 0; i < 3; i++ {
		ids = append(ids, mustAdd(t, g, Node{Op: Op(100 + i)}))
	}
	for i := 0; i < 30; i++ {
		op := []Op{opF, opG, opAdd, opMul}[rng.Intn(4)]
		n := Node{Op: op, Children: []Id{ids[rng.Intn(len(ids))]}}
		if op == opAdd || op == opMul {
			n.Children = append(n.Children, ids[rng.Intn(len(ids))])
		}
		ids = append(ids, mustAdd(t, g, n))
	}
	for k := 0; k < 8; k++ {
		g.Union(ids[rng.Intn(len(ids))], ids[rng.Intn(len(ids))], "random")
	}
	rebuild(t, g)
	return g, ids
}
