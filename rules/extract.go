package rules

import (
	"math"
	"slices"
	"strconv"

	"vkc/egraph"
	"vkc/ir"
)

// Segmented extraction. egraph.Extract starts from tree costs (a shared subterm counted once per
// use), which grow geometrically with depth in a transformer: the residual stream of layer i
// feeds five linears of layer i+1, so by layer 15 a class's tree cost is so large that float64
// cannot tell a fused op from its parts (a difference of one kernel launch), the choice there
// falls to tie-breaking, and the local search cannot repair it (dropping an rmsnorm needs its
// three consumers switched together). Measured on SmolLM2-135M: all five norm-linear fusions
// per layer up to 12 layers, none in the first 17 of 30.
//
// So the function is cut at its residual stream (the classes of adds whose value the model
// uses twice or more: x = add(x, …)), and each cut class is extracted on its own, in the order
// the model computes them, with every earlier cut class available as a free leaf (opCut) and
// every later one forbidden (no cycles); the outputs are extracted last the same way. Each
// segment is one layer's worth of graph, where tree costs stay small. What a segment cannot see:
// a fusion across a cut (add_rmsnorm on the residual sum itself is priced as an add in the cut's
// segment), and sharing between segments beyond the cut classes (a class two segments both use
// is built once, as the first chose it).

// cutClasses returns the classes extraction treats as segment boundaries, in the function's
// order: adds used by two or more nodes, that are not compile-time values.
func (a *adapter) cutClasses(f *ir.Function, vals map[ir.Value]egraph.Id) []egraph.Id {
	uses := map[*ir.Node]int{}
	for _, n := range f.Nodes {
		for _, v := range n.Args {
			uses[v.Node]++
		}
	}
	seen := map[egraph.Id]bool{}
	var cuts []egraph.Id
	for _, n := range f.Nodes {
		if n.Op != ir.Add || uses[n] < 2 || len(n.Outs) != 1 {
			continue
		}
		c := a.g.Find(vals[n.V()])
		if seen[c] || info(a.g, c).Static {
			continue
		}
		seen[c] = true
		cuts = append(cuts, c)
	}
	return cuts
}

// cutsPerSegment is how many cut classes one extraction covers (two per transformer layer): few
// enough that tree costs stay precise (egraph.Extract found every fusion of up to 12 layers at
// once), many enough that the whole-graph passes of each extraction do not add up to a
// quadratic cost in depth too soon.
const cutsPerSegment = 8

// addCuts puts a cut leaf into each cut class of f and returns the cut classes in order.
func (a *adapter) addCuts(f *ir.Function, vals map[ir.Value]egraph.Id) ([]egraph.Id, error) {
	g := a.g
	cuts := a.cutClasses(f, vals)
	for i, c := range cuts {
		leaf := egraph.Node{Op: opCut, Attr: g.InternAttrs(info(g, c).Type().String(), strconv.Itoa(i))}
		id, err := g.Add(leaf)
		if err != nil {
			return nil, err
		}
		if _, err := g.Union(c, id, "cut"); err != nil {
			return nil, err
		}
	}
	if _, err := g.Rebuild(); err != nil {
		return nil, err
	}
	return cuts, nil
}

// groupRules are rules whose benefit needs several classes to switch together: merging the q, k
// and v linears pays only once all three read slices of the merged one, but egraph.Extract
// prices one switch at a time, and each alone costs more (the merged linear is counted whole).
// Extraction therefore also runs with the ops that read a concatenation those rules built (the
// merged linear, or the rmsnorm_linear of concatenated weights) discounted by the square of the
// number of parts, so that each consumer's share of a wider merge looks cheaper than a narrower
// one (QKV rather than QK and KV); both selections are then priced with the true costs and the
// cheaper wins.
var groupRules = []string{"merge-linears", "merge-linears-bias"}

// groupBiased returns base with the consumers of groupRules' concatenations discounted.
func groupBiased(base egraph.CostFunc) egraph.CostFunc {
	parts := func(g *egraph.EGraph, id egraph.Id) int {
		for _, n := range g.Nodes(id) {
			if n.Op == egraph.Op(ir.Concat) && slices.Contains(groupRules, n.Origin()) {
				return len(n.Children)
			}
		}
		return 0
	}
	return func(g *egraph.EGraph, class egraph.Id, n egraph.Node) float64 {
		v := base(g, class, n)
		if n.Op == egraph.Op(ir.Concat) {
			return v
		}
		for _, c := range n.Children {
			if p := parts(g, c); p > 1 {
				return v / float64(p*p)
			}
		}
		return v
	}
}

// extractSegments extracts f's outputs and updates segment by segment and returns candidates,
// each a list of extractions for buildFunction: first egraph.Extract's selection in every
// segment; then, when k > 1, every segment's cheapest diverse selection together, and the
// selections that differ from the first in one segment (that segment's egraph.ExtractDiverse
// candidates). The caller prices the built functions, drops duplicates and
// keeps the k cheapest: a segment's own cost does not tell what a change there costs the whole
// function, since classes shared between segments are built once.
func (a *adapter) extractSegments(f *ir.Function, vals map[ir.Value]egraph.Id, cuts []egraph.Id, base egraph.CostFunc, k int) ([][]*egraph.Extraction, error) {
	g := a.g
	segment := func(limit int) egraph.CostFunc {
		return func(g *egraph.EGraph, class egraph.Id, n egraph.Node) float64 {
			if n.Op == opCut {
				if j, _ := strconv.Atoi(g.AttrValues(n.Attr)[1]); j < limit {
					return 0
				}
				return math.Inf(1)
			}
			return base(g, class, n)
		}
	}
	var segs [][]*egraph.Extraction
	var starts []int // each segment's first cut; the last segment (the outputs) starts after all
	for lo := 0; lo < len(cuts); lo += cutsPerSegment {
		starts = append(starts, lo)
	}
	starts = append(starts, len(cuts))
	for _, i := range starts {
		r := roots(f, vals)
		if i < len(cuts) {
			r = cuts[i:min(i+cutsPerSegment, len(cuts))]
		}
		x, err := egraph.Extract(g, r, segment(i))
		if err != nil {
			return nil, err
		}
		xs := []*egraph.Extraction{x}
		if k > 1 {
			div, err := egraph.ExtractDiverse(g, r, segment(i), k)
			if err != nil {
				return nil, err
			}
			xs = append(xs, div...)
		}
		segs = append(segs, xs)
	}
	best := make([]*egraph.Extraction, len(segs))
	for i, xs := range segs {
		best[i] = xs[0]
	}
	out := [][]*egraph.Extraction{best}
	if k > 1 {
		// Every segment's cheapest selection (by its own cost) together: the segments are
		// nearly independent, so this is usually the cheapest whole.
		low := make([]*egraph.Extraction, len(segs))
		for i, xs := range segs {
			low[i] = xs[0]
			for _, x := range xs[1:] {
				if x.Cost < low[i].Cost {
					low[i] = x
				}
			}
		}
		out = append(out, low)
	}
	for i, xs := range segs {
		for _, x := range xs[1:] {
			c := slices.Clone(best)
			c[i] = x
			out = append(out, c)
		}
	}
	return out, nil
}
