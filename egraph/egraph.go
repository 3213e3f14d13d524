package egraph

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Analysis is an e-class analysis (egg §4): a value attached to every e-class, computed from its
// nodes (Make), combined when classes merge (Merge), and a hook that may change the graph once a
// class's value is known (Modify), for example to add a constant node for a folded value.
//
// Data is an interface value rather than a type parameter: Go methods cannot have type parameters,
// so a generic EGraph[D] would force Pattern, Rewrite, Runner, the cost functions and every client
// signature to carry [D]; the data is read in only a few places (the analysis itself, guards,
// costs), where a one-line typed accessor in the client does the assertion.
type Analysis interface {
	// Make computes the data of a new node's class. Children are canonical and their data is
	// available through g.Data. An error (for example an ill-typed node built by a rule) makes Add
	// fail.
	Make(g *EGraph, n Node) (any, error)
	// Merge combines the data of two classes being unioned. It reports whether the result differs
	// from a and from b, so that the engine knows whose parents to re-analyse. An error (two
	// different tensor types: a wrong rule) aborts the union; it should name both values.
	Merge(a, b any) (merged any, did DidMerge, err error)
	// Modify is called after a class's data changed. It may add nodes and union classes (constant
	// folding) or prune nodes. Keep it idempotent: it runs again on later changes.
	Modify(g *EGraph, id Id) error
}

// DidMerge reports which side of a Merge changed: A when the result differs from a, B when it
// differs from b.
type DidMerge struct{ A, B bool }

// MergeError is the error of a union whose analysis data could not be merged. Rule is the reason
// given to Union (a rule name); Congruence is set when the union was implied by congruence
// closure during Rebuild after a union for that rule.
type MergeError struct {
	Rule       string
	Congruence bool
	A, B       Id
	Err        error
}

// Error says which rule tried to merge which classes, and the analysis's reason naming both values.
//
// Example:
//
//	var me *egraph.MergeError
//	if errors.As(err, &me) { log.Printf("bad rule %s: %v", me.Rule, me.Err) }
func (e *MergeError) Error() string {
	how := ""
	if e.Congruence {
		how = " (by congruence)"
	}
	return fmt.Sprintf("rule %q: cannot merge e-class %d with e-class %d%s: %v", e.Rule, e.A, e.B, how, e.Err)
}

// Unwrap returns the analysis's error.
//
// Example:
//
//	errors.Is(err, errTypeMismatch) // sees through the MergeError
func (e *MergeError) Unwrap() error { return e.Err }

// pendingRef is a parent whose canonical form may have changed, with the reason of the union that
// changed it.
type pendingRef struct {
	parentRef
	reason string
}

// EGraph is an e-graph. The zero value is not usable; call New. An EGraph is not safe for
// concurrent use.
type EGraph struct {
	// OpName names an operator in NodeString, errors and DOT output; nil prints "op<N>".
	OpName func(Op) string

	analysis Analysis
	uf       unionFind
	classes  []*eclass // indexed by Id; nil unless the Id is canonical
	memo     map[string]Id
	byOp     map[Op][]Id // canonical classes holding a node of each op, sorted; valid when clean

	pending         []pendingRef
	analysisPending []pendingRef
	clean           bool

	attrs     [][]string
	attrIndex map[string]Attr

	origin string // the rule being applied, recorded on the nodes it adds

	numNodes   int
	numClasses int
	version    uint64
	buf        []byte
}

// New returns an empty e-graph with the given analysis (nil for none: every class's data is nil).
//
// Example:
//
//	g := egraph.New(nil)
func New(a Analysis) *EGraph {
	return &EGraph{
		analysis:  a,
		memo:      map[string]Id{},
		byOp:      map[Op][]Id{},
		clean:     true,
		attrs:     [][]string{nil},
		attrIndex: map[string]Attr{"": 0},
	}
}

// InternAttrs returns the handle of an attribute tuple, interning it on first use. Values are
// compared as strings, so the client must spell each value canonically (for example with
// strconv.FormatFloat(v, 'g', -1, 64)). No values give the zero Attr.
//
// Example:
//
//	eps := g.InternAttrs("1e-05")
//	n := egraph.Node{Op: opRMSNorm, Attr: eps, Children: []egraph.Id{x, w}}
func (g *EGraph) InternAttrs(values ...string) Attr {
	var b strings.Builder
	for _, v := range values {
		b.WriteString(strconv.Itoa(len(v)))
		b.WriteByte(':')
		b.WriteString(v)
	}
	k := b.String()
	if a, ok := g.attrIndex[k]; ok {
		return a
	}
	a := Attr(len(g.attrs))
	g.attrs = append(g.attrs, slices.Clone(values))
	g.attrIndex[k] = a
	return a
}

// AttrValues returns the tuple interned as a. The slice must not be modified.
//
// Example:
//
//	eps := g.AttrValues(n.Attr)[0]
func (g *EGraph) AttrValues(a Attr) []string { return g.attrs[a] }

// Find returns the canonical id of id's class.
//
// Example:
//
//	if g.Find(a) == g.Find(b) { /* a and b are known equal */ }
func (g *EGraph) Find(id Id) Id { return g.uf.find(id) }

// canonical returns n with canonical children, in a new slice.
func (g *EGraph) canonical(n Node) Node {
	c := make([]Id, len(n.Children))
	for i, ch := range n.Children {
		c[i] = g.uf.find(ch)
	}
	n.Children = c
	return n
}

// canonicalInPlace rewrites n's children to canonical ids in place.
func (g *EGraph) canonicalInPlace(n Node) {
	for i, ch := range n.Children {
		n.Children[i] = g.uf.find(ch)
	}
}

// Lookup returns the class of a node equal to n (after canonicalising its children), if any.
//
// Example:
//
//	if id, ok := g.Lookup(egraph.Node{Op: opAdd, Children: []egraph.Id{a, b}}); ok { ... }
func (g *EGraph) Lookup(n Node) (Id, bool) {
	g.buf = g.buf[:0]
	g.buf = binaryPut(g.buf, uint32(n.Op))
	g.buf = binaryPut(g.buf, uint32(n.Attr))
	for _, c := range n.Children {
		g.buf = binaryPut(g.buf, uint32(g.uf.find(c)))
	}
	id, ok := g.memo[string(g.buf)]
	if !ok {
		return 0, false
	}
	return g.uf.find(id), true
}

func binaryPut(buf []byte, v uint32) []byte {
	return append(buf, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
}

// Add inserts n (hash-consed: an existing equal node returns its class) and returns the
// canonical id of its class. The analysis's Make and Modify run for a new class; their errors are
// returned and, for Make, leave the graph unchanged.
//
// Example:
//
//	x, err := g.Add(egraph.Node{Op: opVar, Attr: g.InternAttrs("x")})
//	y, err := g.Add(egraph.Node{Op: opNeg, Children: []egraph.Id{x}})
func (g *EGraph) Add(n Node) (Id, error) {
	for _, c := range n.Children {
		if int(c) >= g.uf.size() {
			return 0, fmt.Errorf("egraph: add %s: child e-class %d does not exist", g.NodeString(n), c)
		}
	}
	if int(n.Attr) >= len(g.attrs) {
		return 0, fmt.Errorf("egraph: add %s: attribute handle %d was not interned", g.OpString(n.Op), n.Attr)
	}
	if id, ok := g.Lookup(n); ok {
		return id, nil
	}
	n = g.canonical(n)
	n.origin = g.origin
	var data any
	if g.analysis != nil {
		d, err := g.analysis.Make(g, n)
		if err != nil {
			return 0, fmt.Errorf("egraph: add %s: %w", g.NodeString(n), err)
		}
		data = d
	}
	id := g.uf.makeSet()
	g.classes = append(g.classes, &eclass{id: id, nodes: []Node{n}, data: data})
	g.memo[string(n.key(nil))] = id
	for _, c := range n.Children {
		cl := g.classes[c]
		cl.parents = append(cl.parents, parentRef{node: n, class: id})
	}
	g.numNodes++
	g.numClasses++
	g.version++
	g.clean = false
	if g.analysis != nil {
		if err := g.analysis.Modify(g, id); err != nil {
			return id, fmt.Errorf("egraph: add %s: modify: %w", g.NodeString(n), err)
		}
	}
	return g.uf.find(id), nil
}

// Union merges the classes of a and b, recording reason (the rule name) for error messages. It
// reports whether anything changed. Congruence closure is deferred to Rebuild. A failing analysis
// merge returns a *MergeError and leaves the classes apart.
//
// Example:
//
//	changed, err := g.Union(a, b, "mul-comm")
func (g *EGraph) Union(a, b Id, reason string) (bool, error) {
	return g.union(a, b, reason, false)
}

func (g *EGraph) union(a, b Id, reason string, congruence bool) (bool, error) {
	a, b = g.uf.find(a), g.uf.find(b)
	if a == b {
		return false, nil
	}
	ca, cb := g.classes[a], g.classes[b]
	// The class with more parents survives, so the shorter parent list is the one appended.
	if len(ca.parents) < len(cb.parents) {
		a, b, ca, cb = b, a, cb, ca
	}
	data := ca.data
	var did DidMerge
	if g.analysis != nil {
		d, dm, err := g.analysis.Merge(ca.data, cb.data)
		if err != nil {
			return false, &MergeError{Rule: reason, Congruence: congruence, A: a, B: b, Err: err}
		}
		data, did = d, dm
	}
	g.uf.union(a, b)
	for _, p := range cb.parents {
		g.pending = append(g.pending, pendingRef{p, reason})
	}
	if did.A {
		for _, p := range ca.parents {
			g.analysisPending = append(g.analysisPending, pendingRef{p, reason})
		}
	}
	if did.B {
		for _, p := range cb.parents {
			g.analysisPending = append(g.analysisPending, pendingRef{p, reason})
		}
	}
	ca.nodes = append(ca.nodes, cb.nodes...)
	ca.parents = append(ca.parents, cb.parents...)
	ca.data = data
	g.classes[b] = nil
	g.numClasses--
	g.version++
	g.clean = false
	if g.analysis != nil && (did.A || did.B) {
		if err := g.analysis.Modify(g, a); err != nil {
			return true, fmt.Errorf("rule %q: modify e-class %d: %w", reason, a, err)
		}
	}
	return true, nil
}

// Rebuild restores the invariants after unions (egg §3): congruence closure over the parents of
// merged classes, re-analysis of parents whose children's data changed, canonical and sorted node
// lists, deduplicated parent lists and the index of classes by operator. It returns the number of
// unions that congruence closure performed. Search requires a rebuilt graph; the Runner rebuilds
// once per iteration.
//
// Example:
//
//	g.Union(a, b, "test")
//	if _, err := g.Rebuild(); err != nil { ... }
func (g *EGraph) Rebuild() (int, error) {
	unions := 0
	for len(g.pending) > 0 || len(g.analysisPending) > 0 {
		for len(g.pending) > 0 {
			p := g.pending[len(g.pending)-1]
			g.pending = g.pending[:len(g.pending)-1]
			g.canonicalInPlace(p.node)
			cls := g.uf.find(p.class)
			g.buf = p.node.key(g.buf[:0])
			if old, ok := g.memo[string(g.buf)]; ok {
				if ch, err := g.union(old, cls, p.reason, true); err != nil {
					return unions, err
				} else if ch {
					unions++
				}
			} else {
				g.memo[string(g.buf)] = cls
			}
		}
		for len(g.analysisPending) > 0 {
			p := g.analysisPending[len(g.analysisPending)-1]
			g.analysisPending = g.analysisPending[:len(g.analysisPending)-1]
			cls := g.classes[g.uf.find(p.class)]
			node := g.canonical(p.node)
			d, err := g.analysis.Make(g, node)
			if err != nil {
				return unions, fmt.Errorf("rule %q: re-analyse %s: %w", p.reason, g.NodeString(node), err)
			}
			merged, did, err := g.analysis.Merge(cls.data, d)
			if err != nil {
				return unions, fmt.Errorf("rule %q: re-analysis of %s in e-class %d: %w", p.reason, g.NodeString(node), cls.id, err)
			}
			if did.A {
				cls.data = merged
				for _, pp := range cls.parents {
					g.analysisPending = append(g.analysisPending, pendingRef{pp, p.reason})
				}
				if err := g.analysis.Modify(g, cls.id); err != nil {
					return unions, fmt.Errorf("rule %q: modify e-class %d: %w", p.reason, cls.id, err)
				}
			}
		}
	}
	g.rebuildClasses()
	return unions, nil
}

// rebuildClasses canonicalises, sorts and deduplicates every class's nodes and parents and
// rebuilds the operator index. It is linear in the graph size (plus the sorts).
func (g *EGraph) rebuildClasses() {
	g.numNodes = 0
	clear(g.byOp)
	for _, c := range g.classes {
		if c == nil {
			continue
		}
		for _, n := range c.nodes {
			g.canonicalInPlace(n)
		}
		// Stable, so that of equal nodes the one added first (and its origin) is kept.
		slices.SortStableFunc(c.nodes, compareNodes)
		c.nodes = slices.CompactFunc(c.nodes, equalNodes)
		g.numNodes += len(c.nodes)
		for i, n := range c.nodes {
			if i == 0 || n.Op != c.nodes[i-1].Op {
				g.byOp[n.Op] = append(g.byOp[n.Op], c.id)
			}
		}
		for i := range c.parents {
			g.canonicalInPlace(c.parents[i].node)
			c.parents[i].class = g.uf.find(c.parents[i].class)
		}
		slices.SortFunc(c.parents, func(a, b parentRef) int { return compareNodes(a.node, b.node) })
		c.parents = slices.CompactFunc(c.parents, func(a, b parentRef) bool { return equalNodes(a.node, b.node) })
	}
	g.clean = true
}

// Clean reports whether the graph is rebuilt (no unions or additions since the last Rebuild).
//
// Example:
//
//	if !g.Clean() { g.Rebuild() }
func (g *EGraph) Clean() bool { return g.clean }

// Classes returns the canonical class ids in increasing order.
//
// Example:
//
//	for _, id := range g.Classes() { fmt.Println(id, len(g.Nodes(id))) }
func (g *EGraph) Classes() []Id {
	ids := make([]Id, 0, g.numClasses)
	for _, c := range g.classes {
		if c != nil {
			ids = append(ids, c.id)
		}
	}
	return ids
}

// Nodes returns the nodes of id's class; after a Rebuild they are canonical, sorted and distinct.
// The slice belongs to the graph: do not modify it.
//
// Example:
//
//	for _, n := range g.Nodes(id) { fmt.Println(g.NodeString(n)) }
func (g *EGraph) Nodes(id Id) []Node { return g.classes[g.uf.find(id)].nodes }

// Data returns the analysis data of id's class.
//
// Example:
//
//	t := g.Data(id).(TensorType)
func (g *EGraph) Data(id Id) any { return g.classes[g.uf.find(id)].data }

// SetData replaces the analysis data of id's class; meant for Analysis.Modify. Parents are not
// re-analysed.
//
// Example:
//
//	g.SetData(id, folded)
func (g *EGraph) SetData(id Id, d any) { g.classes[g.uf.find(id)].data = d }

// ParentNodes returns the nodes that have id's class as a child, with their classes (canonical
// after a Rebuild).
//
// Example:
//
//	nodes, classes := g.ParentNodes(x)
func (g *EGraph) ParentNodes(id Id) ([]Node, []Id) {
	ps := g.classes[g.uf.find(id)].parents
	nodes, classes := make([]Node, len(ps)), make([]Id, len(ps))
	for i, p := range ps {
		nodes[i], classes[i] = p.node, g.uf.find(p.class)
	}
	return nodes, classes
}

// ClassesWithOp returns, in increasing order, the canonical classes holding a node with operator
// op. It needs a rebuilt graph.
//
// Example:
//
//	adds := g.ClassesWithOp(opAdd)
func (g *EGraph) ClassesWithOp(op Op) []Id {
	g.mustBeClean("ClassesWithOp")
	return g.byOp[op]
}

func (g *EGraph) mustBeClean(what string) {
	if !g.clean {
		panic("egraph: " + what + " on a graph with pending changes; call Rebuild first")
	}
}

// NumNodes returns the number of e-nodes (exact after a Rebuild, an upper bound between).
//
// Example:
//
//	fmt.Println(g.NumNodes(), g.NumClasses())
func (g *EGraph) NumNodes() int { return g.numNodes }

// NumClasses returns the number of e-classes.
//
// Example:
//
//	fmt.Println(g.NumClasses())
func (g *EGraph) NumClasses() int { return g.numClasses }

// Version is incremented by every change (a new node, an effective union). The runner uses it to
// detect saturation.
//
// Example:
//
//	v := g.Version(); applyRules(); changed := g.Version() != v
func (g *EGraph) Version() uint64 { return g.version }

// OpString names op with OpName, or "op<N>".
//
// Example:
//
//	fmt.Println(g.OpString(n.Op))
func (g *EGraph) OpString(op Op) string {
	if g.OpName != nil {
		return g.OpName(op)
	}
	return "op" + strconv.Itoa(int(op))
}

// NodeString formats n as "op[attr,...](c1 c2)" with class ids as children.
//
// Example:
//
//	fmt.Println(g.NodeString(n)) // add(3 5)
func (g *EGraph) NodeString(n Node) string {
	var b strings.Builder
	b.WriteString(g.OpString(n.Op))
	if n.Attr != 0 && int(n.Attr) < len(g.attrs) {
		b.WriteByte('[')
		b.WriteString(strings.Join(g.attrs[n.Attr], ","))
		b.WriteByte(']')
	}
	if len(n.Children) > 0 {
		b.WriteByte('(')
		for i, c := range n.Children {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(strconv.Itoa(int(c)))
		}
		b.WriteByte(')')
	}
	return b.String()
}
