package lower

import (
	"fmt"
	"strings"

	"github.com/vkc-project/vkc/internal/hostmem"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/memplan"
	"github.com/vkc-project/vkc/plan"
)

func (fl *fnLowerer) newBuf(b buffer) int {
	fl.bufs = append(fl.bufs, b)
	return len(fl.bufs) - 1
}

func (fl *fnLowerer) arenaBuf(size uint64) int {
	return fl.newBuf(buffer{kind: bufArena, size: size})
}

// syncRoom is the bytes of the state region kept for the launches' sync words (syncBuf): far
// more than a model's launches take (a word per workgroup of a split reduction).
const syncRoom = 64 << 10

// fit returns where size bytes go in a region at the first offset off (aligned) or later: at
// off, unless they would make the region's last buffer (which begins at the last offset of split)
// larger than one device allocation may be (l.chunk); then a new buffer begins at off. Nothing
// placed this way crosses from one buffer into the next.
func (l *lowerer) fit(off, size uint64, split *plan.Split) (uint64, error) {
	if l.chunk == 0 || size == 0 {
		return off, nil
	}
	if alignUp(size, l.align) > l.chunk {
		return 0, fmt.Errorf("%s (%d bytes), more than one device allocation may hold (maxMemoryAllocationSize %s): %w",
			hostmem.Size(size), size, hostmem.Size(l.chunk), ErrDeviceLimit)
	}
	start := uint64(0)
	if n := len(*split); n > 0 {
		start = (*split)[n-1]
	}
	if off > start && off+alignUp(size, l.align)-start > l.chunk {
		*split = append(*split, off)
	}
	return off, nil
}

// arenaSplit cuts an arena of size bytes into buffers of l.chunk bytes: the memory plans
// (memoryPlan) place no buffer across a multiple of it.
func (l *lowerer) arenaSplit(size uint64) plan.Split {
	var s plan.Split
	for at := l.chunk; l.chunk > 0 && at < size; at += l.chunk {
		s = append(s, at)
	}
	return s
}

// syncBuf places size bytes of Sync words (kernels.Launch.Sync) of one unit in the plan's sync
// area past the state tensors: zero at load, left zero by the launch, never shared with another
// unit.
func (fl *fnLowerer) syncBuf(size uint64) int {
	l := fl.l
	l.syncSize = alignUp(l.syncSize, l.align)
	b := fl.newBuf(buffer{kind: bufSync, size: size, off: l.syncSize})
	l.syncSize += size
	return b
}

// locOf returns where value v is, creating weights for parameters, constants and folded values
// on first use.
func (fl *fnLowerer) locOf(v ir.Value) (loc, error) {
	if lc, ok := fl.locs[v]; ok {
		return lc, nil
	}
	n := v.Node
	var name string
	var x *blob
	switch {
	case n.Op == ir.Param:
		w := fl.l.m.Weights[n.Name]
		if w == nil {
			return loc{}, fmt.Errorf("function %s: parameter %s has no weights loaded", fl.f.Name, n.Name)
		}
		name, x = n.Name, blobOf(w)
	case n.Op == ir.State:
		i, ok := fl.l.stateIndex[n.Name]
		if !ok {
			return loc{}, fmt.Errorf("function %s: unknown state %s", fl.f.Name, n.Name)
		}
		b := fl.newBuf(buffer{kind: bufState, index: i, size: deviceBytes(n.Type())})
		lc := loc{buf: b, size: deviceBytes(n.Type())}
		fl.locs[v] = lc
		return lc, nil
	case fl.folds(n):
		x = fl.values[n]
		if x == nil {
			return loc{}, fmt.Errorf("function %s: %s: no compile-time value (a bug in lower)", fl.f.Name, fl.where(n))
		}
		if fl.l.external != nil {
			return loc{}, fmt.Errorf("function %s: %s: a constant tensor needs inline weights (the plan cannot add bytes to an external weight file)", fl.f.Name, fl.where(n))
		}
		name = x.name
		if name == "" {
			name = fl.l.constName(x)
		}
		if n.Op != ir.Const {
			fl.l.folded++
		}
	default:
		return loc{}, fmt.Errorf("function %s: %s: value used before it is computed (a bug in lower)", fl.f.Name, fl.where(n))
	}
	wi, err := fl.l.weight(name, x)
	if err != nil {
		return loc{}, err
	}
	b := fl.newBuf(buffer{kind: bufWeight, index: wi, size: fl.l.weights[wi].size})
	lc := loc{buf: b, size: fl.l.weights[wi].size}
	fl.locs[v] = lc
	return lc, nil
}

// constName names a constant tensor of the graph by its type and content (SHA-256), so two
// functions using the same constant share one weight and two different tensors never share a
// name. (Folded values are named by their subgraph, see analyse.)
func (l *lowerer) constName(x *blob) string {
	h := l.contentHash(x)
	return fmt.Sprintf("const.%s.%x", strings.ReplaceAll(x.t.String(), ",", "x"), h[:12])
}

// inPlace decides the storage of result o that the launch writes over argument a (held at
// src). A state read straight from its source node and updated by o is written in place; if some
// kernel that runs later still reads the old state, the old state is copied first and those
// kernels read the copy. Anything else is copied into a private buffer that the launch updates.
func (fl *fnLowerer) inPlace(u *unit, a ir.Value, src loc, o ir.Value) (loc, error) {
	n := a.Node
	b := fl.bufs[src.buf]
	// Views of the state (a reshape or slice of it) would keep pointing at the state region after
	// the write; with one, the state is not written in place.
	viewed := false
	late := fl.isResult[n] // a function output of the old state is copied out after every kernel
	me := fl.pos[u.nodes[len(u.nodes)-1]]
	for _, c := range fl.consumers[n] {
		if c.Op == ir.Reshape || c.Op == ir.Slice {
			viewed = true
		}
		if fl.runsAt(c) > me {
			late = true
		}
	}
	if n.Op == ir.State && b.kind == bufState && src.off == 0 && fl.updates(n.Name, o) && !viewed {
		if late {
			cp, err := fl.addCopy(src, n.Type(), false, "old "+n.Name)
			if err != nil {
				return loc{}, err
			}
			fl.locs[a] = cp // later readers of the old state read the copy
			fl.rep.StateCopies++
		}
		fl.rep.InPlace++
		return src, nil
	}
	// An intermediate of its own that nothing else reads is simply overwritten.
	if b.kind == bufArena && src.off == 0 && src.size == b.size && n.Op != ir.Reshape && n.Op != ir.Slice &&
		len(n.Outs) == 1 && !fl.isResult[n] && len(fl.consumers[n]) == 1 {
		return src, nil
	}
	cp, err := fl.addCopy(src, a.Type(), fl.rows[a], "in-place "+label([]*ir.Node{n}))
	if err != nil {
		return loc{}, err
	}
	// The launch reads its argument from the copy too.
	for i := range u.args {
		if u.args[i] == src {
			u.args[i] = cp
		}
	}
	return cp, nil
}

// runsAt is the node position at which the unit computing n runs.
func (fl *fnLowerer) runsAt(n *ir.Node) int {
	if g, ok := fl.group[n]; ok && fl.pointwise(n) {
		return fl.pos[fl.groups[g].root]
	}
	if g, ok := fl.absorb[n]; ok {
		return fl.pos[fl.groups[g].root]
	}
	if pp, ok := fl.partOf[n]; ok {
		return fl.pos[pp.gemm]
	}
	return fl.pos[n]
}

func (fl *fnLowerer) updates(name string, v ir.Value) bool {
	for _, u := range fl.f.Updates {
		if u.Name == name && u.Value == v {
			return true
		}
	}
	return false
}

// placeResults puts function outputs in their output slots (the producing kernel writes there
// directly when the value is a whole intermediate of its own; otherwise a copy) and makes every
// state update land in its state tensor.
func (fl *fnLowerer) placeResults() error {
	f := fl.f
	claimed := map[int]bool{}
	for i, o := range f.Outputs {
		src, err := fl.locOf(o.Value)
		if err != nil {
			return err
		}
		size := deviceBytes(o.Value.Type())
		b := &fl.bufs[src.buf]
		if b.kind == bufArena && src.off == 0 && src.size == b.size && !claimed[src.buf] && !fl.updatesAny(o.Value) {
			claimed[src.buf] = true
			b.kind, b.index = bufOutput, i
			continue
		}
		dst := loc{buf: fl.newBuf(buffer{kind: bufOutput, index: i, size: size}), size: size}
		if err := fl.copyTo(src, dst, o.Value.Type(), fl.rows[o.Value], "output "+o.Name); err != nil {
			return err
		}
	}
	for _, u := range f.Updates {
		src, err := fl.locOf(u.Value)
		if err != nil {
			return err
		}
		si := fl.l.stateIndex[u.Name]
		if b := fl.bufs[src.buf]; b.kind == bufState && b.index == si && src.off == 0 {
			continue // written in place (or unchanged)
		}
		size := deviceBytes(u.Value.Type())
		dst := loc{buf: fl.newBuf(buffer{kind: bufState, index: si, size: size}), size: size}
		fl.rep.StateCopies++
		if err := fl.copyTo(src, dst, u.Value.Type(), fl.rows[u.Value], "state "+u.Name); err != nil {
			return err
		}
	}
	return nil
}

func (fl *fnLowerer) updatesAny(v ir.Value) bool {
	for _, u := range fl.f.Updates {
		if u.Value == v {
			return true
		}
	}
	return false
}

// memoryPlan places the arena buffers: lifetimes in levels from the first to the last step that
// touches them.
func (fl *fnLowerer) memoryPlan() {
	touch := func(b, lv int) {
		x := &fl.bufs[b]
		if !x.used {
			x.first, x.last, x.used = lv, lv, true
			return
		}
		x.first, x.last = min(x.first, lv), max(x.last, lv)
	}
	for _, u := range fl.units {
		for si, st := range u.ch.launch.Steps {
			lv := u.level + si
			for _, op := range st.Bindings {
				switch op.Kind {
				case kernels.Arg:
					touch(u.args[op.Index].buf, lv)
				case kernels.Out:
					touch(u.outs[op.Index].buf, lv)
				case kernels.Scratch:
					touch(u.scratch[op.Index], lv)
				}
			}
		}
	}
	var reqs []memplan.Buffer
	var ids []int
	for i, b := range fl.bufs {
		if b.kind == bufArena && b.used {
			reqs = append(reqs, memplan.Buffer{Size: b.size, First: b.first, Last: b.last})
			ids = append(ids, i)
			fl.rep.Intermediates += alignUp(b.size, fl.l.align)
		}
	}
	offs, size := memplan.AssignWithin(reqs, fl.l.align, fl.l.chunk)
	for k, i := range ids {
		fl.bufs[i].off = offs[k]
	}
	fl.rep.ArenaBytes = size
}
