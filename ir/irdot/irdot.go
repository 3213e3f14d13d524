// Package irdot draws an ir.Function as a Graphviz DOT graph: one node per op showing the op, its
// variable name, attributes, shape and dtype; sources (inputs, parameters, state, constants) and
// results (outputs, state updates) in their own shapes; and one cluster per repeat iteration, so
// a 30-layer model reads as 30 boxes. `vkc dot` uses it; a fused view can reuse it by passing
// its own grouping and labels in Options.
package irdot

import (
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/emicklei/dot"

	"github.com/vkc-project/vkc/ir"
)

// Options adjusts the drawing. The zero value draws every node, clustered by repeat iteration.
type Options struct {
	// Group names the cluster of a node ("" for the top level). When nil, DefaultGroup is used.
	Group func(n *ir.Node) string
	// Note, when set, adds a line to a node's label (e.g. the kernel a fused view chose).
	Note func(n *ir.Node) string
	// HideConsts leaves scalar constants out (their values still show in the consumer's edges).
	HideConsts bool
	// MaxAttrLen shortens long attribute lists in labels; 0 means 48 characters.
	MaxAttrLen int
}

var loopSuffix = regexp.MustCompile(`\[([a-z_A-Z0-9]+=[0-9]+(,[a-z_A-Z0-9]+=[0-9]+)*)\]$`)

// DefaultGroup places a node named "h[i=1]" (the model parser's name for a variable assigned in
// iteration i=1 of a repeat) in the cluster "i=1", and every other node nowhere in particular;
// Function then moves unnamed nodes into the cluster of the nodes that consume them.
func DefaultGroup(n *ir.Node) string {
	if m := loopSuffix.FindStringSubmatch(n.Name); m != nil {
		return m[1]
	}
	return ""
}

// Function returns the DOT graph of f.
func Function(m *ir.Model, f *ir.Function, opt Options) *dot.Graph {
	if opt.Group == nil {
		opt.Group = DefaultGroup
	}
	if opt.MaxAttrLen == 0 {
		opt.MaxAttrLen = 48
	}
	groups := assignGroups(f, opt.Group)
	g := dot.NewGraph(dot.Directed)
	title := f.Name
	if m != nil && m.Name != "" {
		title = m.Name + " · " + f.Name
	}
	g.Attr("label", title)
	g.Attr("labelloc", "t")
	g.Attr("rankdir", "TB")
	g.Attr("fontname", "Helvetica")
	g.NodeInitializer(func(n dot.Node) { n.Attr("fontname", "Helvetica").Attr("fontsize", "10") })
	g.EdgeInitializer(func(e dot.Edge) { e.Attr("fontname", "Helvetica").Attr("fontsize", "8") })

	clusters := map[string]*dot.Graph{}
	var order []string // clusters in the order their first node appears
	graphFor := func(group string) *dot.Graph {
		if group == "" {
			return g
		}
		c, ok := clusters[group]
		if !ok {
			c = g.Subgraph(group, dot.ClusterOption{})
			c.Attr("label", "repeat "+group)
			c.Attr("style", "rounded,filled")
			c.Attr("fillcolor", "#f4f6fb")
			clusters[group] = c
			order = append(order, group)
		}
		return c
	}
	nodes := map[*ir.Node]dot.Node{}
	for _, n := range f.Nodes {
		if opt.HideConsts && n.Op == ir.Const && n.Type().Shape.NumElements() == 1 {
			continue
		}
		dn := graphFor(groups[n]).Node(fmt.Sprintf("n%d", n.ID))
		dn.Attr("label", label(n, opt))
		style(dn, n)
		nodes[n] = dn
	}
	for _, n := range f.Nodes {
		to, ok := nodes[n]
		if !ok {
			continue
		}
		for i, a := range n.Args {
			from, ok := nodes[a.Node]
			if !ok {
				continue
			}
			e := g.Edge(from, to)
			if len(n.Args) > 1 && !n.Op.IsElementwise() {
				e.Attr("taillabel", "")
				e.Attr("headlabel", fmt.Sprint(i))
			}
			if a.Out != 0 {
				e.Attr("label", fmt.Sprintf(".%d", a.Out))
			}
		}
	}
	for i, o := range f.Outputs {
		on := g.Node(fmt.Sprintf("out%d", i))
		on.Attr("label", "output "+o.Name+"\n"+o.Value.Type().String())
		on.Attr("shape", "house").Attr("style", "filled").Attr("fillcolor", "#d9f2d9")
		if from, ok := nodes[o.Value.Node]; ok {
			g.Edge(from, on)
		}
	}
	for i, u := range f.Updates {
		un := g.Node(fmt.Sprintf("upd%d", i))
		un.Attr("label", "state "+u.Name+" ←\n"+u.Value.Type().String())
		un.Attr("shape", "cylinder").Attr("style", "filled").Attr("fillcolor", "#fde9c9")
		if from, ok := nodes[u.Value.Node]; ok {
			g.Edge(from, un).Dashed()
		}
	}
	return g
}

// Write writes the DOT text of f to w.
func Write(w io.Writer, m *ir.Model, f *ir.Function, opt Options) error {
	_, err := io.WriteString(w, Function(m, f, opt).String())
	return err
}

// assignGroups gives every node a cluster: its own when Group names one, else the common
// cluster of its consumers (so a parameter or an unnamed temporary used only inside layer 3
// is drawn inside layer 3). Inputs and named nodes outside a repeat stay at the top level.
func assignGroups(f *ir.Function, group func(*ir.Node) string) map[*ir.Node]string {
	users := map[*ir.Node][]*ir.Node{}
	for _, n := range f.Nodes {
		for _, a := range n.Args {
			users[a.Node] = append(users[a.Node], n)
		}
	}
	out := map[*ir.Node]string{}
	for i := len(f.Nodes) - 1; i >= 0; i-- {
		n := f.Nodes[i]
		if g := group(n); g != "" {
			out[n] = g
			continue
		}
		if n.Op == ir.Input || n.Name != "" && n.Op.Info().Kind != ir.KindSource {
			continue // inputs and variables assigned outside any repeat stay at the top level
		}
		common, first := "", true
		for _, u := range users[n] {
			g := out[u]
			if first {
				common, first = g, false
			} else if g != common {
				common = ""
				break
			}
		}
		out[n] = common
	}
	return out
}

func label(n *ir.Node, opt Options) string {
	var b strings.Builder
	switch n.Op {
	case ir.Input, ir.Param, ir.State:
		b.WriteString(n.Op.String() + " " + n.Name)
	case ir.Const:
		if n.Value != nil && n.Type().Shape.NumElements() == 1 {
			fmt.Fprintf(&b, "const %g", n.Value.Float64(0))
		} else {
			b.WriteString("const")
		}
	default:
		if n.Name != "" {
			b.WriteString(loopSuffix.ReplaceAllString(n.Name, "") + " = ")
		}
		b.WriteString(n.Op.String())
		if k := n.Attrs.Key(); k != "" {
			if len(k) > opt.MaxAttrLen {
				k = k[:opt.MaxAttrLen] + "…"
			}
			b.WriteString("\n" + k)
		}
		if n.Op == ir.Attention {
			// The operand layouts in full (the attribute list may be cut): the layout an
			// extraction chose for each of q, k and v.
			b.WriteString("\nlayouts: " + ir.AttentionLayouts(n.Attrs).String())
		}
	}
	for _, t := range n.Outs {
		b.WriteString("\n" + t.String())
	}
	if opt.Note != nil {
		if s := opt.Note(n); s != "" {
			b.WriteString("\n" + s)
		}
	}
	return b.String()
}

func style(dn dot.Node, n *ir.Node) {
	switch n.Op {
	case ir.Input:
		dn.Attr("shape", "invhouse").Attr("style", "filled").Attr("fillcolor", "#d9e8fb")
	case ir.Param:
		dn.Attr("shape", "note").Attr("style", "filled").Attr("fillcolor", "#eeeeee")
	case ir.State:
		dn.Attr("shape", "cylinder").Attr("style", "filled").Attr("fillcolor", "#fde9c9")
	case ir.Const:
		dn.Attr("shape", "plaintext")
	default:
		dn.Attr("shape", "box").Attr("style", "rounded,filled").Attr("fillcolor", "white")
	}
}
