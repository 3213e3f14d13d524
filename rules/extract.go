package rules

import (
	"slices"

	"github.com/vkc-project/vkc/egraph"
	"github.com/vkc-project/vkc/ir"
)

// Extraction is whole-function: egraph.Extract prices a selection by DAG cost (each shared class
// once), so the residual stream that every later layer reads does not make deep layers' choices
// imprecise, and a fusion across a layer boundary (add_rmsnorm: the residual sum of one layer
// with the norm that starts the next) is priced like any other. An earlier version cut the
// function at the residual stream and extracted four layers at a time, because egraph's tree-cost
// start lost the fusions of the first layers past about 12; it hid every fusion across a cut and
// was quadratic in depth.

// groupRules are rules whose benefit needs several classes to switch together: merging the q, k
// and v linears pays only once all three read slices of the merged one, but egraph.Extract
// chooses each class's own cheapest sub-DAG and its local search changes one class at a time,
// and each alone costs more (the merged linear is counted whole). Extraction therefore also runs
// with the ops that read a concatenation those rules built (the merged linear, or the
// rmsnorm_linear of concatenated weights) discounted by the square of the number of parts, so
// that each consumer's share of a wider merge looks cheaper than a narrower one (QKV rather than
// QK and KV); both selections are then priced with the true costs and the cheaper wins.
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

// extractCandidates extracts the function with roots r: egraph.ExtractDiverse's width
// candidates (egraph.Extract's selection first), then the selection with merged linears
// favoured (groupBiased). The caller builds each, prices it with the true costs, drops
// duplicates and keeps the cheapest.
func extractCandidates(g *egraph.EGraph, r []egraph.Id, cost egraph.CostFunc, width int) ([]*egraph.Extraction, error) {
	xs, err := egraph.ExtractDiverse(g, r, cost, width)
	if err != nil {
		return nil, err
	}
	grouped, err := egraph.Extract(g, r, groupBiased(cost))
	if err != nil {
		return nil, err
	}
	return append(xs, grouped), nil
}
