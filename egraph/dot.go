package egraph

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/emicklei/dot"
)

// DotOptions selects what Dot draws.
type DotOptions struct {
	// Roots, when set, limits the drawing to classes reachable from them within Depth child
	// steps (Depth <= 0: unlimited).
	Roots []Id
	Depth int
	// Filter, when set, must also accept a class for it to be drawn (for example "its label
	// names layer 3"). Edges to classes not drawn end at a small grey stub.
	Filter func(g *EGraph, id Id) bool
	// Extraction highlights the chosen node of each class it covers.
	Extraction *Extraction
	// ChosenOnly draws only the extraction's chosen nodes (the extracted graph). Needs Extraction.
	ChosenOnly bool
	// NodeLabel labels an e-node (default: op[attrs]); ClassLabel labels a cluster (default
	// "c<id>"), for example with the class's tensor type.
	NodeLabel  func(g *EGraph, n Node) string
	ClassLabel func(g *EGraph, id Id) string
	// ShowOrigin adds to each node's label the rule that produced it (Node.Origin).
	ShowOrigin bool
}

// Dot draws g (rebuilt) as a graphviz graph: one cluster per e-class holding its e-nodes, an edge
// from each e-node to each child class (ending at the cluster), chosen nodes filled and bold.
// Output is deterministic.
//
// Example:
//
//	d := egraph.Dot(g, egraph.DotOptions{Roots: []egraph.Id{out}, Depth: 4, Extraction: x})
//	os.WriteFile("g.dot", []byte(d.String()), 0o644)
func Dot(g *EGraph, opt DotOptions) *dot.Graph {
	g.mustBeClean("Dot")
	out := dot.NewGraph(dot.Directed)
	out.Attr("compound", "true")
	out.Attr("rankdir", "BT")
	out.Attr("fontname", "Helvetica")

	shown := map[Id]bool{}
	var order []Id
	add := func(id Id) {
		if !shown[id] && (opt.Filter == nil || opt.Filter(g, id)) {
			shown[id] = true
			order = append(order, id)
		}
	}
	chosenOnly := opt.ChosenOnly && opt.Extraction != nil
	nodesOf := func(id Id) []Node {
		if chosenOnly {
			if n, ok := opt.Extraction.Node(id); ok {
				return []Node{n}
			}
			return nil
		}
		return g.Nodes(id)
	}
	if len(opt.Roots) == 0 {
		if chosenOnly {
			for _, id := range opt.Extraction.Order {
				add(id)
			}
		} else {
			for _, id := range g.Classes() {
				add(id)
			}
		}
	} else {
		// Breadth-first from the roots, so that Depth counts child steps.
		depth := map[Id]int{}
		queue := []Id{}
		for _, r := range opt.Roots {
			r = g.Find(r)
			if _, ok := depth[r]; !ok {
				depth[r] = 0
				queue = append(queue, r)
			}
		}
		for len(queue) > 0 {
			c := queue[0]
			queue = queue[1:]
			add(c)
			if opt.Depth > 0 && depth[c] >= opt.Depth {
				continue
			}
			for _, n := range nodesOf(c) {
				for _, ch := range n.Children {
					if _, ok := depth[ch]; !ok {
						depth[ch] = depth[c] + 1
						queue = append(queue, ch)
					}
				}
			}
		}
	}

	label := opt.NodeLabel
	if label == nil {
		label = func(g *EGraph, n Node) string {
			s := g.OpString(n.Op)
			if n.Attr != 0 {
				s += "[" + strings.Join(g.AttrValues(n.Attr), ",") + "]"
			}
			return s
		}
	}
	clusters := map[Id]*dot.Graph{}
	first := map[Id]dot.Node{}
	dnodes := map[string]dot.Node{}
	for _, id := range order {
		cl := out.Subgraph("c"+strconv.Itoa(int(id)), dot.ClusterOption{})
		name := "c" + strconv.Itoa(int(id))
		if opt.ClassLabel != nil {
			name = opt.ClassLabel(g, id)
		}
		cl.Attr("label", name)
		cl.Attr("style", "dashed")
		cl.Attr("color", "grey50")
		clusters[id] = cl
		for j, n := range nodesOf(id) {
			key := fmt.Sprintf("c%dn%d", id, j)
			text := label(g, n)
			if opt.ShowOrigin && n.Origin() != "" {
				text += "\n(" + n.Origin() + ")"
			}
			dn := cl.Node(key).Label(text).Box()
			dnodes[key] = dn
			if opt.Extraction != nil && opt.Extraction.Chose(id, n) {
				dn.Attr("style", "filled,bold").Attr("fillcolor", "lightblue").Attr("penwidth", "2")
			}
			if j == 0 {
				first[id] = dn
			}
		}
	}
	stubs := map[Id]dot.Node{}
	for _, id := range order {
		for j, n := range nodesOf(id) {
			from := dnodes[fmt.Sprintf("c%dn%d", id, j)]
			for k, ch := range n.Children {
				var e dot.Edge
				if to, ok := first[ch]; ok {
					e = out.Edge(from, to)
					e.Attr("lhead", clusters[ch].GetID())
				} else {
					stub, ok := stubs[ch]
					if !ok {
						stub = out.Node("stub" + strconv.Itoa(int(ch))).Label("c" + strconv.Itoa(int(ch)) + " …")
						stub.Attr("shape", "plaintext").Attr("fontcolor", "grey50")
						stubs[ch] = stub
					}
					e = out.Edge(from, stub).Dashed()
				}
				if len(n.Children) > 1 {
					e.Label(strconv.Itoa(k))
				}
				if opt.Extraction != nil && opt.Extraction.Chose(id, n) {
					e.Bold()
				}
			}
		}
	}
	return out
}
