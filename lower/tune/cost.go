package tune

import (
	"context"
	"time"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
)

// ProblemOf is the kernel problem of one operation as the e-graph sees it (op, attributes,
// operand and result types), for pricing e-nodes by measurement. An elementwise op becomes a
// fused elementwise problem of one node, as lowering builds for a lone elementwise op with
// distinct operands, so its tuning is shared with the lowering. ok is false for sources and
// reshapes (views, free once lowered): the caller prices those statically.
//
// This prices operations one at a time: the epilogues and elementwise chains that lowering
// fuses into a neighbour are priced as kernels of their own, so a measured cost overstates
// them by a launch. It is a cost for ranking candidates; SelectFunction measures the winners
// whole.
func ProblemOf(op ir.Op, attrs ir.Attrs, args, outs []ir.Type) (*kernels.Problem, bool) {
	if op.Info() == nil || op.Info().Kind == ir.KindSource || op == ir.Reshape || len(outs) == 0 {
		return nil, false
	}
	if op.IsElementwise() {
		fu := &kernels.Fused{Inputs: append([]ir.Type(nil), args...)}
		ix := make([]int, len(args))
		for i, a := range args {
			fu.Nodes = append(fu.Nodes, kernels.FusedNode{Op: ir.Input, Index: i, DType: a.DType})
			ix[i] = i
		}
		fu.Nodes = append(fu.Nodes, kernels.FusedNode{Op: op, Attrs: attrs, Args: ix, DType: outs[0].DType})
		fu.Outputs = []int{len(fu.Nodes) - 1}
		return &kernels.Problem{Op: kernels.FusedElementwise, Args: fu.Inputs, Outs: outs[:1], Expr: fu}, true
	}
	return &kernels.Problem{Op: op, Attrs: attrs, Args: append([]ir.Type(nil), args...), Outs: append([]ir.Type(nil), outs...), NumOpArgs: len(args)}, true
}

// OpCost returns a function pricing operations for e-graph extraction by measurement: the
// measured median of the fastest template and configuration of the operation's problem (tuned on
// first use, or taken from the database), and ok=false where nothing could be measured (no
// template, a view, the budget spent), for which the caller uses its static cost in the same
// unit. ctx bounds all the tuning the function does.
//
// Wiring into rules.Options.Cost (static costs there are bytes; convert one way or the other):
//
//	price := tuner.OpCost(ctx)
//	opts.Cost = rules.CostFunc(func(n rules.CostNode) float64 {
//		if d, ok := price(n.Op, n.Attrs, n.Args, n.Outs); ok {
//			return d.Seconds() * bytesPerSecond
//		}
//		return rules.DefaultCost.Cost(n)
//	})
func (t *Tuner) OpCost(ctx context.Context) func(op ir.Op, attrs ir.Attrs, args, outs []ir.Type) (time.Duration, bool) {
	return func(op ir.Op, attrs ir.Attrs, args, outs []ir.Type) (time.Duration, bool) {
		p, ok := PricedProblem(op, attrs, args, outs)
		if !ok {
			return 0, false
		}
		return t.Cost(ctx, p)
	}
}

// KnownCost is OpCost pricing only what was measured already (by TuneAll, or an earlier Best):
// it never tunes, so extraction after TuneAll spends no budget of its own.
func (t *Tuner) KnownCost() func(op ir.Op, attrs ir.Attrs, args, outs []ir.Type) (time.Duration, bool) {
	return func(op ir.Op, attrs ir.Attrs, args, outs []ir.Type) (time.Duration, bool) {
		p, ok := PricedProblem(op, attrs, args, outs)
		if !ok {
			return 0, false
		}
		return t.Known(p)
	}
}

// PricedProblem is ProblemOf for operations the tuner can price: it is false also for a problem
// the interpreter cannot check (a malformed e-node). A compile lists the problems to tune by
// calling it on every e-node extraction prices (see TuneAll).
func PricedProblem(op ir.Op, attrs ir.Attrs, args, outs []ir.Type) (*kernels.Problem, bool) {
	p, ok := ProblemOf(op, attrs, args, outs)
	if !ok {
		return nil, false
	}
	if _, err := p.Reference(); err != nil {
		return nil, false
	}
	return p, true
}
