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
// use) and the node achieving it, by Bellman-Ford style passes until nothing improves: egg's
// extractor, Extract's second start. Ties keep the earlier node in class order, so the result is
// deterministic.
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
	seen := make([]bool, len(choice))
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

// dagPasses bounds the local-improvement phase of the DAG extractor.
const dagPasses = 8

// Extract chooses one node per class needed by roots, minimising the DAG cost (a shared subterm
// counts once). g must be rebuilt.
//
// It is greedy, in two phases. First the greedy DAG extractor (extraction-gym's, see greedyDAG)
// gives every class the cheapest sub-DAG it can build from its children's: a node's cost is its
// own plus the union of its children's selected sub-DAGs, each class in the union counted once,
// so a residual stream shared by every later layer is not counted once per use. Then local
// search: for each reachable class in turn, each alternative node is tried and kept when the DAG
// cost of the whole selection drops, until a pass improves nothing. The same local search also
// runs from egg's tree-cost selection (each use of a shared subterm counted again), and the
// cheaper of the two results is kept (the greedy one on a tie).
//
// Why not tree costs alone: in a transformer they grow geometrically with depth (the residual
// stream feeds several consumers per layer), so past a dozen layers float64 cannot tell a fused
// op from its parts, and a fusion that pays only when several classes switch together (a norm
// feeding q, k and v) is out of the local search's reach.
//
// Guarantees: the result is acyclic, uses no +Inf node, exists whenever every root has a finite
// term, costs no more than the tree-cost selection improved by the same local search when that
// selection is acyclic (the previous extractor), and no single-class change lowers its DAG cost
// (unless the pass limit of 8 stopped the search first). Deterministic: ties go to the node
// first in its class's canonical order. Not guaranteed: the optimum (DAG extraction is NP-hard);
// each class picks its own cheapest sub-DAG, not the one that shares most with what the rest of
// the selection needs, so a selection that needs two classes changed together (q, k and v all
// reading slices of one merged linear, each alone costing more) can be missed.
//
// Complexity: the greedy phase settles each class once in cost order (a heap) and computes each
// node's union once; cost sets are persistent tries that share structure, so a union costs time
// in proportion to where its operands differ (a few classes per layer in a layered model), not
// to their size. The tree-cost fixpoint is O(passes × nodes). The local search keeps reference
// counts and the running DAG cost, so a trial costs time proportional to the part of the
// selection it changes. Together about linear in the graph size for layered models (see
// BenchmarkExtractLayers).
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
	// The second start first: tree costs (which may overflow to +Inf in deep graphs, where
	// they are useless anyway) and their selection.
	saved := e.own
	e.own = own
	e.treeFixpoint()
	e.own = saved
	treeChoice, treeBest := slices.Clone(e.choice), slices.Clone(e.best)

	e.greedyDAG(own)
	for _, r := range e.roots {
		if math.IsInf(e.best[r], 1) {
			return nil, fmt.Errorf("egraph: e-class %d has no term of finite cost (every alternative needs a +Inf node)", r)
		}
	}
	// The same start gives the same local optimum: only a different one is searched again.
	same := slices.Equal(treeChoice, e.choice)
	cost := e.improveLocal(own, dagPasses)
	if treeCost := e.dagCost(treeChoice, own); !same && !math.IsInf(treeCost, 1) {
		greedyChoice, greedyBest := e.choice, e.best
		e.choice, e.best = treeChoice, treeBest
		if c := e.improveLocal(own, dagPasses); c < cost-1e-9*math.Max(1, math.Abs(cost)) {
			cost = c
		} else {
			e.choice = greedyChoice
		}
		e.best = greedyBest
	}
	if math.IsInf(cost, 1) || math.IsInf(e.dagCost(e.choice, own), 1) {
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
