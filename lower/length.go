package lower

import (
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/plan"
)

// A function with a run-time length (ir.Length) is lowered at its capacity like any other; on
// top of that every problem whose operands hold the length's rows (ir.LengthRows) carries
// kernels.Rows, so that its template reads n where the op's meaning needs it and declares the
// grids that follow n (kernels.Step.Scale, plan.GridScale); the length node is the plan's length
// region, and the bounded inputs and outputs are marked in the plan (plan.Value.Bounded).

// problemRows is the Rows of a problem of the function with arguments args and results outs;
// nil when the function has no run-time length or nothing of the problem is bounded.
func (fl *fnLowerer) problemRows(args, outs []ir.Value, reads bool) *kernels.Rows {
	l := fl.f.Length
	if l == nil {
		return nil
	}
	r := &kernels.Rows{Max: l.Max, Reads: reads}
	any := reads
	for _, a := range args {
		b := fl.rows[a]
		r.Args = append(r.Args, b)
		any = any || b
	}
	for _, o := range outs {
		b := fl.rows[o]
		r.Outs = append(r.Outs, b)
		any = any || b
	}
	if !any {
		return nil
	}
	return r
}

// planScale converts a step's grid scale to the plan's.
func planScale(s *kernels.GridScale) *plan.GridScale {
	if s == nil || s.Num <= 0 || s.Den <= 0 {
		return nil
	}
	axis := uint8(plan.LinearAxis)
	if s.Axis >= 0 && s.Axis <= 2 {
		axis = uint8(s.Axis)
	}
	return &plan.GridScale{Axis: axis, Num: uint32(s.Num), Den: uint32(s.Den)}
}
