package lower

import (
	"sort"
	"time"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/plan"
)

// memKey identifies the memory a buffer occupies for dependency purposes: weights, a state
// tensor, an input or output slot, or one arena buffer (arena buffers that the memory plan later
// overlaps get barriers from the exact check at emission).
type memKey struct {
	kind  bufKind
	index int
}

func (fl *fnLowerer) mem(b int) memKey {
	x := fl.bufs[b]
	if x.kind == bufArena || x.kind == bufSync {
		return memKey{x.kind, b}
	}
	return memKey{x.kind, x.index}
}

// dependencies orders units by their reads and writes in unit order: a reader after the last
// writer (RAW), a writer after the readers since the last write (WAR) and after the last writer
// (WAW).
func (fl *fnLowerer) dependencies() {
	lastW := map[memKey]int{}
	readers := map[memKey][]int{}
	for i, u := range fl.units {
		deps := map[int]bool{}
		var rs, ws []memKey
		for _, a := range u.args {
			rs = append(rs, fl.mem(a.buf))
		}
		for _, o := range u.outs {
			ws = append(ws, fl.mem(o.buf))
		}
		for _, s := range u.scratch {
			ws = append(ws, fl.mem(s))
		}
		for _, s := range u.sync {
			ws = append(ws, fl.mem(s))
		}
		for _, k := range rs {
			if w, ok := lastW[k]; ok {
				deps[w] = true
			}
		}
		for _, k := range ws {
			if w, ok := lastW[k]; ok {
				deps[w] = true
			}
			for _, r := range readers[k] {
				deps[r] = true
			}
		}
		delete(deps, i)
		for d := range deps {
			u.deps = append(u.deps, d)
		}
		sort.Ints(u.deps)
		for _, k := range rs {
			if k.kind != bufWeight {
				readers[k] = append(readers[k], i)
			}
		}
		for _, k := range ws {
			lastW[k] = i
			readers[k] = nil
		}
	}
}

// levels gives each unit the earliest barrier level after its dependencies (a launch of k steps
// spans k levels).
func (fl *fnLowerer) levels() {
	for _, u := range fl.units {
		u.level = 0
		for _, d := range u.deps {
			p := fl.units[d]
			u.level = max(u.level, p.level+len(p.ch.launch.Steps))
		}
	}
}

// step is one dispatch before ordering.
type step struct {
	unit, index, level int
}

// emit orders the dispatches by level (units in graph order within a level) and sets
// BarrierBefore exactly where a dispatch touches bytes that a dispatch since the last barrier
// wrote, or writes bytes that one of them touched.
func (fl *fnLowerer) emit(pf *plan.Function) {
	var steps []step
	for ui, u := range fl.units {
		for si := range u.ch.launch.Steps {
			steps = append(steps, step{ui, si, u.level + si})
		}
	}
	sort.SliceStable(steps, func(a, b int) bool {
		if steps[a].level != steps[b].level {
			return steps[a].level < steps[b].level
		}
		if steps[a].unit != steps[b].unit {
			return steps[a].unit < steps[b].unit
		}
		return steps[a].index < steps[b].index
	})
	var interval []span
	for _, s := range steps {
		u := fl.units[s.unit]
		st := &u.ch.launch.Steps[s.index]
		key := u.ch.tmpl.Name + " " + u.prob.Key()
		mi := fl.l.module(st, key, u.ch.cfg)
		d := plan.Dispatch{Module: uint32(mi), Push: append([]byte(nil), st.Push...), Grid: st.Grid,
			Ops: opsOf(u.nodes), Label: u.label, Scale: planScale(st.Scale)}
		if u.copy {
			d.Ops = []string{"copy"}
		}
		if n := len(u.ch.launch.Steps); n > 0 {
			d.Estimated = u.ch.est / time.Duration(n)
		}
		d.Work = fl.stepWork(u, s.index)
		m := &fl.l.modules[mi]
		var spans []span
		var wb []weightFix // the weight bindings, their offsets fixed once the weights are laid out
		for bi, op := range st.Bindings {
			var lc loc
			switch op.Kind {
			case kernels.Arg:
				lc = u.args[op.Index]
			case kernels.Out:
				lc = u.outs[op.Index]
			case kernels.Scratch:
				lc = loc{buf: u.scratch[op.Index], size: fl.bufs[u.scratch[op.Index]].size}
			case kernels.Len:
				lc = loc{buf: fl.lengthBuf, size: 4}
			case kernels.Sync:
				lc = loc{buf: u.sync[op.Index], size: fl.bufs[u.sync[op.Index]].size}
			}
			ref := fl.ref(lc)
			if b := fl.bufs[lc.buf]; b.kind == bufWeight {
				wb = append(wb, weightFix{at: len(d.Bindings), weight: b.index})
			}
			d.Bindings = append(d.Bindings, plan.Binding{Binding: uint32(bi), Buffer: ref})
			spans = append(spans, span{ref.Region, ref.Offset, ref.Offset + ref.Range, m.Bindings[bi].Access&plan.Write != 0})
		}
		for _, f := range wb {
			f.b = &d.Bindings[f.at] // d.Bindings is complete: the pointer stays valid in the plan
			fl.l.wfix = append(fl.l.wfix, f)
		}
		if conflicts(interval, spans) {
			d.BarrierBefore = true
			interval = interval[:0]
			fl.rep.Barriers++
		}
		interval = append(interval, spans...)
		pf.Dispatches = append(pf.Dispatches, d)
		fl.rep.Dispatches++
		fl.rep.Estimated += d.Estimated
		if d.BarrierBefore {
			fl.rep.Estimated += fl.l.dev.Barrier
		}
	}
	for _, u := range fl.units {
		fl.l.cands = append(fl.l.cands, plan.Candidate{Subject: fl.f.Name + "/" + u.label, Kernel: u.ch.tmpl.Name + " " + u.prob.Key(),
			Config: u.ch.cfg.Spec64(), Estimated: u.ch.est, Chosen: true})
	}
}

func (fl *fnLowerer) ref(lc loc) plan.BufferRef {
	b := fl.bufs[lc.buf]
	switch b.kind {
	case bufWeight:
		w := fl.l.weights[b.index]
		size := lc.size
		if w.t.DType.Quantized() || w.t.DType == ir.BF16 {
			// Kernels read blocks (and bf16 weights) as u32 words: a weight that ends mid-word
			// (an odd number of 18-byte Q4_0 blocks or of bf16 values) is bound to the end of
			// its last word, which the region's alignment (finishWeights) keeps inside it.
			size = alignUp(lc.off+size, 4) - lc.off
		}
		// Relative to the weight until layoutWeights places it (weightFix); weights are read
		// only, so the barrier placement below never compares their bytes.
		return plan.BufferRef{Region: plan.Region{Kind: plan.RegionWeights}, Offset: lc.off, Range: size}
	case bufState:
		return plan.BufferRef{Region: plan.Region{Kind: plan.RegionState}, Offset: fl.l.stateOff[b.index] + lc.off, Range: lc.size}
	case bufInput:
		return plan.BufferRef{Region: plan.Region{Kind: plan.RegionInput, Index: uint32(b.index)}, Offset: lc.off, Range: lc.size}
	case bufOutput:
		return plan.BufferRef{Region: plan.Region{Kind: plan.RegionOutput, Index: uint32(b.index)}, Offset: lc.off, Range: lc.size}
	case bufLength:
		return plan.BufferRef{Region: plan.Region{Kind: plan.RegionLength}, Offset: lc.off, Range: lc.size}
	case bufSync:
		return plan.BufferRef{Region: plan.Region{Kind: plan.RegionState}, Offset: fl.l.syncBase + b.off + lc.off, Range: lc.size}
	}
	return plan.BufferRef{Region: plan.Region{Kind: plan.RegionArena}, Offset: b.off + lc.off, Range: lc.size}
}

// span is a byte range a dispatch uses.
type span struct {
	region   plan.Region
	off, end uint64
	write    bool
}

// conflicts reports whether a dispatch using spans must wait for the dispatches of interval:
// overlapping bytes of one region with a write on either side.
func conflicts(interval, spans []span) bool {
	for _, s := range spans {
		for _, t := range interval {
			if s.region == t.region && s.off < t.end && t.off < s.end && (s.write || t.write) {
				return true
			}
		}
	}
	return false
}
