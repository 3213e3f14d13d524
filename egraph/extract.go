package egraph

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
)

// CostFunc is the cost of one e-node by itself, children excluded: a static roofline estimate, or
// a measured kernel time. +Inf marks a node that cannot be implemented (no kernel); extraction
// never picks it. Costs must be >= 0.
type CostFunc func(g *EGraph, class Id, n Node) float64

// Extraction is the choice of one e-node per needed e-class: the classes reachable from Roots
// through the chosen nodes.
type Extraction struct {
	// Roots are the canonical classes extraction started from, in the caller's order.
	Roots []Id
	// Order lists the chosen classes with children before parents (a post-order from the roots,
	// deterministic); Nodes[i] is the node chosen for Order[i].
	Order []Id
	Nodes []Node
	// Cost is the DAG cost: each chosen node's cost counted once, however often it is shared.
	Cost float64

	index map[Id]int
}

// Node returns the node chosen for id's class (id may be non-canonical if g is given to Find it
// first; Extraction stores canonical ids).
//
// Example:
//
//	n, ok := x.Node(g.Find(id))
func (x *Extraction) Node(id Id) (Node, bool) {
	i, ok := x.index[id]
	if !ok {
		return Node{}, false
	}
	return x.Nodes[i], true
}

// Chose reports whether the extraction chose node n for class id: the test DOT export uses to
// highlight.
//
// Example:
//
//	if x.Chose(id, n) { ... }
func (x *Extraction) Chose(id Id, n Node) bool {
	c, ok := x.Node(id)
	return ok && equalNodes(c, n)
}

// String lists the extraction in order, one "c<id> = node" per line.
//
// Example:
//
//	fmt.Print(x.String(g))
func (x *Extraction) String(g *EGraph) string {
	var b strings.Builder
	for i, id := range x.Order {
		fmt.Fprintf(&b, "c%d = %s\n", id, g.NodeString(x.Nodes[i]))
	}
	fmt.Fprintf(&b, "roots %v cost %g\n", x.Roots, x.Cost)
	return b.String()
}

// extractor holds the dense per-class tables of one extraction.
type extractor struct {
	g      *EGraph
	roots  []Id
	own    [][]float64 // own[c][j]: cost of node j of class c (with penalties for diverse extraction)
	best   []float64   // tree cost per class
	choice []int       // chosen node index per class, -1 none
	// scratch for dagCost
	state []uint8
	stack []frame
}

type frame struct {
	c    Id
	next int
}

func newExtractor(g *EGraph, roots []Id, cost CostFunc) (*extractor, error) {
	if !g.clean {
		return nil, fmt.Errorf("egraph: extract from a graph with pending changes; call Rebuild first")
	}
	n := g.uf.size()
	e := &extractor{g: g, own: make([][]float64, n), best: make([]float64, n), choice: make([]int, n), state: make([]uint8, n)}
	for _, r := range roots {
		e.roots = append(e.roots, g.Find(r))
	}
	for _, c := range g.classes {
		if c == nil {
			continue
		}
		e.own[c.id] = make([]float64, len(c.nodes))
		for j, nd := range c.nodes {
			v := cost(g, c.id, nd)
			if v < 0 || math.IsNaN(v) {
				return nil, fmt.Errorf("egraph: cost of %s is %v; costs must be >= 0 or +Inf", g.NodeString(nd), v)
			}
			e.own[c.id][j] = v
		}
	}
	return e, nil
}

// treeFixpoint computes for every class the cheapest tree cost (a shared subterm counted once per
// use) and the node achieving it, by Bellman-Ford style passes until nothing improves. Ties keep
// the earlier node in class order, so the result is deterministic.
func (e *extractor) treeFixpoint() {
	g := e.g
	for i := range e.best {
		e.best[i], e.choice[i] = math.Inf(1), -1
	}
	for changed := true; changed; {
		changed = false
		for _, c := range g.classes {
			if c == nil {
				continue
			}
			for j, n := range c.nodes {
				s := e.own[c.id][j]
				for _, ch := range n.Children {
					s += e.best[ch]
				}
				if s < e.best[c.id] {
					e.best[c.id], e.choice[c.id] = s, j
					changed = true
				}
			}
		}
	}
}

// dagCost returns the cost of the selection reachable from the roots, each class once, and +Inf
// when the selection has a cycle or an unimplementable node.
func (e *extractor) dagCost(choice []int, own [][]float64) float64 {
	const (
		white, gray, black = 0, 1, 2
	)
	clear(e.state)
	total := 0.0
	for _, r := range e.roots {
		if e.state[r] != white {
			continue
		}
		e.stack = append(e.stack[:0], frame{c: r})
		e.state[r] = gray
		for len(e.stack) > 0 {
			f := &e.stack[len(e.stack)-1]
			j := choice[f.c]
			if j < 0 {
				return math.Inf(1)
			}
			n := e.g.classes[f.c].nodes[j]
			if f.next < len(n.Children) {
				ch := n.Children[f.next]
				f.next++
				switch e.state[ch] {
				case gray:
					return math.Inf(1)
				case white:
					e.state[ch] = gray
					e.stack = append(e.stack, frame{c: ch})
				}
				continue
			}
			total += own[f.c][j]
			e.state[f.c] = black
			e.stack = e.stack[:len(e.stack)-1]
		}
	}
	return total
}

// reachable returns the classes reachable from the roots under choice in post-order (children
// first); the selection must be acyclic.
func (e *extractor) reachable(choice []int) []Id {
	seen := make(map[Id]bool)
	var order []Id
	var visit func(c Id)
	visit = func(c Id) {
		if seen[c] {
			return
		}
		seen[c] = true
		for _, ch := range e.g.classes[c].nodes[choice[c]].Children {
			visit(ch)
		}
		order = append(order, c)
	}
	for _, r := range e.roots {
		visit(r)
	}
	return order
}

// improveDAG changes one class's choice at a time, keeping a change when the DAG cost of the
// whole selection drops, until a pass finds nothing, maxPasses passes ran, or about maxWork class
// visits were spent. Each trial is a full DAG evaluation, so a pass costs O(alternatives ×
// reachable classes): quadratic in the graph size, which the work bound caps. It is the
// reference for improveLocal (see the property test) and the fallback when the tree selection
// is cyclic.
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

func (e *extractor) childrenFinite(n Node) bool {
	for _, ch := range n.Children {
		if math.IsInf(e.best[ch], 1) {
			return false
		}
	}
	return true
}

func (e *extractor) result(choice []int, own [][]float64) *Extraction {
	x := &Extraction{Roots: slices.Clone(e.roots), index: map[Id]int{}}
	for _, c := range e.reachable(choice) {
		x.index[c] = len(x.Order)
		x.Order = append(x.Order, c)
		x.Nodes = append(x.Nodes, e.g.classes[c].nodes[choice[c]])
	}
	x.Cost = e.dagCost(choice, own)
	return x
}

// dagPasses and dagWork bound the local-improvement phase of the DAG extractor: at most 8 passes
// and about 5e7 class visits (a fraction of a second), whichever comes first.
const (
	dagPasses = 8
	dagWork   = 50_000_000
)

// Extract chooses one node per class needed by roots, minimising the DAG cost (a shared subterm
// counts once). g must be rebuilt.
//
// It is greedy, in two phases. First the tree-cost fixpoint (egg's extractor) picks in every class
// the node with the cheapest tree below it; this is optimal for trees but overcounts sharing.
// Then local search: for each reachable class in turn, each alternative node is tried and kept
// when the DAG cost of the whole selection drops, until a pass improves nothing.
//
// Guarantees: the result is acyclic, uses no +Inf node when a finite choice exists, costs no more
// than the tree-cost selection, and no single-class change lowers its DAG cost (unless a pass
// limit of 8 stopped it first). Not guaranteed: the optimum (DAG extraction is NP-hard); a better
// selection that needs two classes changed together (say a fused op whose benefit appears only
// once its producer also switches) can be missed.
//
// Complexity: the fixpoint is O(passes × nodes). The local search keeps reference counts and the
// running DAG cost, so a trial costs time proportional to the part of the selection it changes
// (plus a cycle check that topological labels cut short), not to the whole selection: about
// linear in the graph size for layered models.
//
// Example:
//
//	x, err := egraph.Extract(g, []egraph.Id{out}, func(g *egraph.EGraph, c egraph.Id, n egraph.Node) float64 { return 1 })
//	for i, id := range x.Order { fmt.Println(id, g.NodeString(x.Nodes[i])) }
func Extract(g *EGraph, roots []Id, cost CostFunc) (*Extraction, error) {
	e, err := newExtractor(g, roots, cost)
	if err != nil {
		return nil, err
	}
	return e.extract(e.own)
}

func (e *extractor) extract(own [][]float64) (*Extraction, error) {
	saved := e.own
	e.own = own
	e.treeFixpoint()
	e.own = saved
	for _, r := range e.roots {
		if math.IsInf(e.best[r], 1) {
			return nil, fmt.Errorf("egraph: e-class %d has no term of finite cost (every alternative needs a +Inf node)", r)
		}
	}
	if math.IsInf(e.dagCost(e.choice, own), 1) {
		// The tree selection is cyclic (possible only through zero-cost nodes); the full
		// evaluation accepts any acyclic selection from there.
		e.improveDAG(own, dagPasses, dagWork)
	} else {
		e.improveLocal(own, dagPasses)
	}
	if math.IsInf(e.dagCost(e.choice, own), 1) {
		return nil, fmt.Errorf("egraph: no acyclic selection of finite cost for roots %v", e.roots)
	}
	return e.result(e.choice, e.own), nil
}

// ExtractDiverse returns up to k distinct extractions for measurement on the device, cheapest
// first by DAG cost. The first is Extract's. Each other one forces one deviation from it: for
// every class of the best selection that has an implementable alternative, the cheapest
// single-node switch there is priced (a full DAG evaluation); in order of that price (ties by
// class id), the best selection's node in that class is excluded and the whole graph re-extracted,
// so the rest of the selection may adapt to the forced change (unfusing one op may make another
// fusion worthwhile). Selections equal to an earlier one (same node in every reachable class) are
// dropped.
//
// This is bounded enumeration, not a k-best search: every candidate differs from the best in a
// different place, and candidates that need two independent deviations from the best are not
// produced. Fewer than k are returned when there are fewer alternatives. Deterministic: the same
// graph and costs give the same list. Cost: pricing every alternative once (incrementally) plus
// k-1 extractions.
//
// Example:
//
//	cands, err := egraph.ExtractDiverse(g, roots, cost, 4)
//	for _, x := range cands { fmt.Println(x.Cost) }
func ExtractDiverse(g *EGraph, roots []Id, cost CostFunc, k int) ([]*Extraction, error) {
	e, err := newExtractor(g, roots, cost)
	if err != nil {
		return nil, err
	}
	best, err := e.extract(e.own)
	if err != nil {
		return nil, err
	}
	if k <= 1 {
		return []*Extraction{best}, nil
	}
	out := []*Extraction{best}
	seen := map[string]bool{best.signature(): true}
	base := slices.Clone(e.choice)
	ls := newLocalSearch(e, e.own)
	type pivot struct {
		c     Id
		price float64
	}
	var pivots []pivot
	for _, c := range best.Order {
		nodes := g.classes[c].nodes
		if len(nodes) < 2 {
			continue
		}
		price := math.Inf(1)
		for j := range nodes {
			if j == base[c] || math.IsInf(e.own[c][j], 1) || !e.childrenFinite(nodes[j]) {
				continue
			}
			price = min(price, ls.price(c, j))
		}
		if !math.IsInf(price, 1) {
			pivots = append(pivots, pivot{c, price})
		}
	}
	slices.SortStableFunc(pivots, func(a, b pivot) int {
		if c := cmp.Compare(a.price, b.price); c != 0 {
			return c
		}
		return cmp.Compare(a.c, b.c)
	})
	for _, p := range pivots {
		if len(out) >= k {
			break
		}
		own := slices.Clone(e.own)
		own[p.c] = slices.Clone(own[p.c])
		own[p.c][base[p.c]] = math.Inf(1)
		x, err := e.extract(own)
		if err != nil {
			continue // the excluded node was the only way to implement a root
		}
		if sig := x.signature(); !seen[sig] {
			seen[sig] = true
			out = append(out, x)
		}
	}
	slices.SortStableFunc(out, func(a, b *Extraction) int { return cmp.Compare(a.Cost, b.Cost) })
	return out, nil
}

// signature identifies a selection: its chosen nodes by class, in class order.
func (x *Extraction) signature() string {
	ids := slices.Clone(x.Order)
	slices.Sort(ids)
	var b []byte
	for _, id := range ids {
		b = binaryPut(b, uint32(id))
		b = x.Nodes[x.index[id]].key(b)
		b = append(b, 0xff)
	}
	return string(b)
}
