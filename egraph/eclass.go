package egraph

import (
	"cmp"
	"slices"
)

// Op is an operator id chosen by the client (for example an index into its op table). The engine
// only compares Ops; names come from EGraph.OpName for display.
type Op uint32

// Attr is a handle to an interned attribute tuple (see EGraph.InternAttrs). The zero Attr is the
// empty tuple. Handles are only meaningful within the e-graph that interned them.
type Attr uint32

// Node is an e-node: an operator, its attribute tuple and its child e-classes. Two nodes are the
// same node when all three are equal (hash-consing); children are compared by canonical Id.
//
// Example:
//
//	n := egraph.Node{Op: opAdd, Children: []egraph.Id{a, b}}
type Node struct {
	Op       Op
	Attr     Attr
	Children []Id

	// origin is the rule whose application added the node ("" for nodes the client added). It
	// is not part of the node's identity.
	origin string
}

// Origin returns the name of the rule whose application first added n to the e-graph, or "" when
// the client added it (nodes returned by EGraph.Nodes and Extraction carry it). DOT export uses it
// to label fused nodes with the rule that produced them.
//
// Example:
//
//	for _, n := range g.Nodes(id) { fmt.Println(g.NodeString(n), "from", n.Origin()) }
func (n Node) Origin() string { return n.origin }

// compareNodes orders nodes by op, attribute handle, arity, then children. Class node lists are kept
// in this order so that matching can binary-search an op and iteration is deterministic.
func compareNodes(a, b Node) int {
	if c := cmp.Compare(a.Op, b.Op); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Attr, b.Attr); c != 0 {
		return c
	}
	if c := cmp.Compare(len(a.Children), len(b.Children)); c != 0 {
		return c
	}
	return slices.Compare(a.Children, b.Children)
}

// equalNodes reports whether a and b are the same node (without canonicalising children).
func equalNodes(a, b Node) bool { return compareNodes(a, b) == 0 }

// clone returns n with its own copy of Children, so that the caller's slice may be reused.
func (n Node) clone() Node {
	n.Children = slices.Clone(n.Children)
	return n
}

// key appends a byte encoding of n to buf: the hash-consing key. Equal nodes have equal keys.
func (n Node) key(buf []byte) []byte {
	put := func(v uint32) {
		buf = append(buf, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
	}
	put(uint32(n.Op))
	put(uint32(n.Attr))
	for _, c := range n.Children {
		put(uint32(c))
	}
	return buf
}

// parentRef records that node (as it was when recorded) lives in class; canonicalise both
// before use.
type parentRef struct {
	node  Node
	class Id
}

// eclass is one equivalence class: its nodes (canonical and sorted after a rebuild), the
// analysis data and the nodes that use it as a child.
type eclass struct {
	id      Id
	nodes   []Node
	data    any
	parents []parentRef
}

// opRange returns the index range of nodes with operator op in the sorted node list.
func (c *eclass) opRange(op Op) (int, int) {
	lo, _ := slices.BinarySearchFunc(c.nodes, op, func(n Node, op Op) int { return cmp.Compare(n.Op, op) })
	hi := lo
	for hi < len(c.nodes) && c.nodes[hi].Op == op {
		hi++
	}
	return lo, hi
}
