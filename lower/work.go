package lower

import (
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/plan"
)

// This file records each dispatch's work in the plan (plan.Work): the FLOPs and bytes of its
// kernel problem (kernels.Work), with attention's run-time key count followed back to the
// function's inputs, so that vkc bench can say what a run computed at the positions it ran.
//
// Limit: a function with a run-time length (plan.Function.Length) needs terms in n too (a
// matmul's rows, an attention's queries, kv_len = pos + n through Count.PlusLength). This
// lowering does not compile such functions yet; when it does, kernels.Work must give those
// terms, or a bench of a short prompt is credited with the capacity's work.

// unitWork is the plan Work of u's whole launch.
func (fl *fnLowerer) unitWork(u *unit) plan.Work {
	wm := kernels.Work(u.prob, u.ch.launch)
	w := plan.Work{FLOPs: wm.Flops, Bytes: wm.Bytes}
	if wm.CountArg < 0 {
		return w
	}
	var a affine
	if wm.CountArg < len(u.vals) {
		a = fl.affineOf(u.vals[wm.CountArg])
	}
	for _, t := range a.terms {
		if typ := fl.f.Inputs[t].Type(); typ.Shape.NumElements() != 1 || typ.Shape.Rank() != 0 {
			a.ok = false // a sum over a tensor input: not one count per run
		}
	}
	if !a.ok || len(a.terms) == 0 {
		// The count is computed some other way (or is a constant): count the capacity, an upper
		// bound (the kernel clamps the count to it).
		n := float64(wm.MaxN)
		if a.ok && len(a.terms) == 0 {
			n = float64(min(max(a.off, int64(wm.MinN)), int64(wm.MaxN)))
		}
		return plan.Work{FLOPs: wm.Flops + n*wm.FlopsPerN, Bytes: wm.Bytes + n*wm.BytesPerN}
	}
	c := &plan.WorkCount{Add: a.off, Min: int64(wm.MinN), Max: int64(wm.MaxN)}
	for _, t := range a.terms {
		c.Inputs = append(c.Inputs, uint32(t))
	}
	w.Count = c
	w.Terms = []plan.WorkTerm{{Count: true, FLOPs: wm.FlopsPerN, Bytes: wm.BytesPerN}}
	return w
}

// stepWork is the share of u's work that its step i does: all of it for a launch of one step,
// otherwise in proportion to the bytes each step binds (a split reduction's first pass reads the
// tensor, its combining pass a few partials).
func (fl *fnLowerer) stepWork(u *unit, i int) plan.Work {
	w := fl.unitWork(u)
	steps := u.ch.launch.Steps
	if len(steps) <= 1 {
		return w
	}
	bound := func(st *kernels.Step) float64 {
		var n uint64
		for _, op := range st.Bindings {
			switch op.Kind {
			case kernels.Arg:
				n += u.args[op.Index].size
			case kernels.Out:
				n += u.outs[op.Index].size
			case kernels.Scratch:
				n += fl.bufs[u.scratch[op.Index]].size
			}
		}
		return float64(n)
	}
	total := 0.0
	for j := range steps {
		total += bound(&steps[j])
	}
	if total <= 0 {
		return plan.Work{}
	}
	f := bound(&steps[i]) / total
	out := plan.Work{FLOPs: w.FLOPs * f, Bytes: w.Bytes * f, Count: w.Count}
	for _, t := range w.Terms {
		t.FLOPs, t.Bytes = t.FLOPs*f, t.Bytes*f
		out.Terms = append(out.Terms, t)
	}
	return out
}

// affineOf is v as a sum of the function's inputs plus a constant (see ranges.go), or not ok.
func (fl *fnLowerer) affineOf(v ir.Value) affine {
	if fl.aff == nil {
		fl.aff = map[ir.Value]affine{}
		pos := map[*ir.Node]int{}
		for i, n := range fl.f.Inputs {
			pos[n] = i
		}
		for _, n := range fl.f.Nodes {
			for o, t := range n.Outs {
				if t.DType.IsInt() {
					fl.aff[ir.Value{Node: n, Out: o}] = affineOf(n, o, pos, fl.aff)
				}
			}
		}
	}
	return fl.aff[v]
}
