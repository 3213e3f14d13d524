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
// A problem with a run-time length n (kernels.Rows) does the work of its n rows: its FLOPs and the
// bytes of its bounded operands are terms in n (the capacity's over Max), the bytes of the rest
// (weights, caches) are fixed; attention over n queries sees kv_len − n + i + 1 keys for query
// i, which with kv_len = pos + n is n·pos + n(n+1)/2 query-key pairs (count pos, terms in n and
// n²). The capacity's work is then an upper bound of no run.

// unitWork is the plan Work of u's whole launch.
func (fl *fnLowerer) unitWork(u *unit) plan.Work {
	wm := kernels.Work(u.prob, u.ch.launch)
	if u.prob.Rows != nil {
		return fl.boundedWork(u, wm)
	}
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

// boundedWork is unitWork for a problem with a run-time length.
func (fl *fnLowerer) boundedWork(u *unit, wm kernels.WorkModel) plan.Work {
	p, r := u.prob, u.prob.Rows
	max := float64(r.Max)
	var bounded float64
	for i, t := range p.Args {
		if r.Arg(i) {
			bounded += float64(t.Bytes())
		}
	}
	for i, t := range p.Outs {
		if r.Out(i) {
			bounded += float64(t.Bytes())
		}
	}
	if wm.CountArg >= 0 && wm.CountArg < len(u.vals) && r.Arg(0) && p.Op == ir.Attention {
		a := fl.affineOf(u.vals[wm.CountArg])
		sq := float64(p.Args[0].Shape[0])
		if a.ok && sq == max && wm.FlopsPerN > 0 {
			perPair := wm.FlopsPerN / sq
			scalar := true
			for _, t := range a.terms {
				scalar = scalar && fl.f.Inputs[t].Type().Shape.NumElements() == 1
			}
			causal := wm.MinN == int(sq) // kernels.Work's causal model: at least sq keys
			if scalar && (!causal || a.length) {
				c := &plan.WorkCount{Add: a.off, Min: 0, Max: int64(wm.MaxN)}
				for _, t := range a.terms {
					c.Inputs = append(c.Inputs, uint32(t))
				}
				w := plan.Work{Count: c}
				if causal {
					// Count kv_len − n (= pos): pairs n·c + n(n+1)/2; the capacity's figure
					// holds epi − perPair·sq(sq−1)/2.
					epi := wm.Flops + perPair*sq*(sq-1)/2
					w.Terms = []plan.WorkTerm{
						{Length: 1, Count: true, FLOPs: perPair},
						{Length: 2, FLOPs: perPair / 2},
						{Length: 1, FLOPs: perPair/2 + epi/max, Bytes: wm.Bytes/max + wm.BytesPerN},
						{Count: true, Bytes: wm.BytesPerN},
					}
				} else {
					c.PlusLength = a.length
					w.Terms = []plan.WorkTerm{
						{Length: 1, Count: true, FLOPs: perPair},
						{Length: 1, FLOPs: wm.Flops / max, Bytes: wm.Bytes / max},
						{Count: true, Bytes: wm.BytesPerN},
					}
				}
				return w
			}
		}
	}
	// Linear in n: every FLOP and the bounded operands' bytes; the capacity's count (an upper
	// bound) for a count the analysis cannot follow.
	flops, bytes := wm.Flops, wm.Bytes
	if wm.CountArg >= 0 {
		flops += float64(wm.MaxN) * wm.FlopsPerN
		bytes += float64(wm.MaxN) * wm.BytesPerN
	}
	bounded = min(bounded, bytes)
	return plan.Work{Bytes: bytes - bounded, Terms: []plan.WorkTerm{{Length: 1, FLOPs: flops / max, Bytes: bounded / max}}}
}

// affineOf is v as a sum of the function's inputs (and its run-time length) plus a constant
// (see ranges.go), or not ok.
func (fl *fnLowerer) affineOf(v ir.Value) affine {
	if fl.aff == nil {
		fl.aff = map[ir.Value]affine{}
		pos := map[*ir.Node]int{}
		for i, n := range fl.f.Inputs {
			pos[n] = i
		}
		for _, n := range fl.f.Nodes {
			for o, t := range n.Outs {
				if !t.DType.IsInt() {
					continue
				}
				if fl.f.IsLength(n) {
					fl.aff[ir.Value{Node: n, Out: o}] = affine{ok: true, length: true}
					continue
				}
				fl.aff[ir.Value{Node: n, Out: o}] = affineOf(n, o, pos, fl.aff)
			}
		}
	}
	return fl.aff[v]
}
