package egraph

import (
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
// whole selection drops, until a pass finds nothing (or maxPasses). Each trial is a full DAG
// evaluation, so a pass costs O(alternatives × reachable classes).
func (e *extractor) improveDAG(own [][]float64, maxPasses int) float64 {
	cur := e.dagCost(e.choice, own)
	for pass := 0; pass < maxPasses; pass++ {
		improved := false
		for _, c := range e.reachable(e.choice) {
			nodes := e.g.classes[c].nodes
			if len(nodes) < 2 {
				continue
			}
			for j := range nodes {
				if j == e.choice[c] || math.IsInf(own[c][j], 1) || !e.childrenFinite(nodes[j]) {
					continue
				}
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

// dagPasses bounds the local-improvement passes of the DAG extractor.
const dagPasses = 8

// Extract chooses one node per class needed by roots, minimising the DAG cost (a shared subterm
// counts once). g must be rebuilt.
//
// It is greedy, in two phases. First the tree-cost fixpoint (egg's extractor) picks in every class
// the node with the cheapest tree below it; this is optimal for trees but overcounts sharing.
// Then local search: for each reachable class in turn, each alternative node is tried and kept
// when the DAG cost of the whole selection drops, until a pass improves nothing.
//
// Guarantees: the result is acyclic, uses no +Inf node when a finite choice exists, costs no more
// than the tree-cost selection, and no single-class change lowers its DAG cost. Not guaranteed:
// the optimum (DAG extraction is NP-hard); a better selection that needs two classes changed
// together (say a fused op whose benefit appears only once its producer also switches) can be
// missed. Complexity: the fixpoint is O(passes × nodes); each improvement pass is
// O(alternatives × reachable classes).
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
	e.improveDAG(own, dagPasses)
	return e.result(e.choice, e.own), nil
}

// ExtractDiverse returns up to k distinct extractions, cheapest first by true DAG cost, for
// measurement on the device. The first attempt is Extract; each later attempt re-extracts with the
// nodes chosen so far made more expensive (cost doubled per earlier use, plus a small amount so
// free nodes count too), which steers it to alternatives where they exist. Two selections are the
// same when they choose the same nodes in the same reachable classes; duplicates are dropped. It
// stops after k distinct selections or 4k attempts, so fewer than k are returned when the graph
// has few alternatives. Deterministic: the same graph and costs give the same list.
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
	// eps: a small positive amount so that penalties also move zero-cost nodes.
	sum, cnt := 0.0, 0
	for _, row := range e.own {
		for _, v := range row {
			if v > 0 && !math.IsInf(v, 1) {
				sum, cnt = sum+v, cnt+1
			}
		}
	}
	eps := 1e-3
	if cnt > 0 {
		eps = 1e-3 * sum / float64(cnt)
	}
	uses := make([][]int, len(e.own))
	for c, row := range e.own {
		uses[c] = make([]int, len(row))
	}
	penalised := make([][]float64, len(e.own))
	var out []*Extraction
	seen := map[string]bool{}
	for attempt := 0; attempt < 4*k && len(out) < k; attempt++ {
		for c, row := range e.own {
			if penalised[c] == nil {
				penalised[c] = make([]float64, len(row))
			}
			for j, v := range row {
				if uses[c][j] == 0 || math.IsInf(v, 1) {
					penalised[c][j] = v
				} else {
					penalised[c][j] = (v+eps)*math.Exp2(float64(uses[c][j])) - eps
				}
			}
		}
		x, err := e.extract(penalised)
		if err != nil {
			if attempt == 0 {
				return nil, err
			}
			break
		}
		key := x.signature()
		for i, c := range x.Order {
			uses[c][e.choice[c]]++
			_ = i
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, x)
	}
	slices.SortStableFunc(out, func(a, b *Extraction) int {
		switch {
		case a.Cost < b.Cost:
			return -1
		case a.Cost > b.Cost:
			return 1
		}
		return 0
	})
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
