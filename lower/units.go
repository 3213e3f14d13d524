package lower

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
)

func (fl *fnLowerer) lowerNode(n *ir.Node) error {
	if _, ok := fl.partOf[n]; ok {
		return nil // computed by its linear's column parts
	}
	if pp, ok := fl.parts[n]; ok {
		return fl.lowerParts(pp)
	}
	switch {
	case n.Op == ir.Input:
		return nil
	case n.Op == ir.Param || n.Op == ir.State || fl.folds(n):
		if fl.constScalar(n) && fl.onlyInGroups(n) {
			return nil // embedded in the kernels that use it
		}
		if fl.replacedByParts(n) {
			return nil // its only readers read it with their rows reordered (parts.go)
		}
		if n.Type().DType.Quantized() {
			// Placed when a unit reads it: as blocks, or dequantized by the fallback
			// (dequant.go), so a plan never carries a form no kernel reads.
			return nil
		}
		if fl.readInPieces(n) {
			return nil // placed in row pieces by the units that read it (split.go)
		}
		_, err := fl.locOf(n.V())
		return err
	case n.Op == ir.Reshape:
		src, err := fl.locOf(n.Args[0])
		if err != nil {
			return err
		}
		fl.locs[n.V()] = src
		return nil
	case n.Op == ir.Slice:
		if ok, err := fl.sliceView(n); ok || err != nil {
			return err
		}
	}
	if g, in := fl.group[n]; in && fl.pointwise(n) {
		grp := fl.groups[g]
		if n != grp.root {
			return nil
		}
		return fl.lowerGroup(grp)
	}
	if _, ok := fl.absorb[n]; ok {
		return nil // computed with its epilogue at the group's root
	}
	p := &kernels.Problem{Op: n.Op, Attrs: n.Attrs, Outs: append([]ir.Type(nil), n.Outs...), NumOpArgs: len(n.Args)}
	var vals []ir.Value
	for _, a := range n.Args {
		p.Args = append(p.Args, a.Type())
		vals = append(vals, a)
	}
	var outs []ir.Value
	for i := range n.Outs {
		outs = append(outs, ir.Value{Node: n, Out: i})
	}
	p.Rows = fl.problemRows(vals, outs, ir.NeedsLength(n, fl.rows))
	return fl.addUnit([]*ir.Node{n}, p, vals, outs)
}

// onlyInGroups reports whether every live consumer of n is a pointwise node (which embeds n).
func (fl *fnLowerer) onlyInGroups(n *ir.Node) bool {
	if fl.isResult[n] {
		return false
	}
	for _, c := range fl.consumers[n] {
		if !fl.pointwise(c) {
			return false
		}
	}
	return true
}

// sliceView makes a contiguous slice (all axes before the sliced one of size 1, step 1) a view
// when its byte offset keeps the binding alignment.
func (fl *fnLowerer) sliceView(n *ir.Node) (bool, error) {
	x := n.Args[0].Type()
	ax, err := ir.NormAxis(n.Attrs.Int("axis", 0), x.Shape.Rank())
	if err != nil || n.Attrs.Int("step", 1) != 1 || ir.NeedsLength(n, fl.rows) {
		// A slice of a run's last rows starts where n puts it: a kernel reads n.
		return false, nil
	}
	for _, d := range x.Shape[:ax] {
		if d != 1 {
			return false, nil
		}
	}
	start, _ := ir.ClampSlice(x.Shape[ax], n.Attrs.Int("start", 0), n.Attrs.Int("end", 0))
	inner := uint64(1)
	for _, d := range x.Shape[ax+1:] {
		inner *= uint64(d)
	}
	elem := deviceBytes(ir.Type{DType: x.DType, Shape: ir.Shape{1}})
	src, err := fl.locOf(n.Args[0])
	if err != nil {
		return false, err
	}
	off := src.off + uint64(start)*inner*elem
	if off%fl.l.align != 0 {
		return false, nil
	}
	fl.locs[n.V()] = loc{buf: src.buf, off: off, size: deviceBytes(n.Type())}
	return true, nil
}

func (fl *fnLowerer) lowerGroup(g *pwGroup) error {
	nodes := append([]*ir.Node(nil), g.members...)
	if g.epilogue != nil {
		nodes = append([]*ir.Node{g.epilogue}, nodes...)
	}
	var outs []ir.Value
	for _, o := range g.outputs {
		outs = append(outs, o.V())
	}
	return fl.addUnit(nodes, g.prob, g.inputs, outs)
}

// addUnit chooses a launch for p and gives its results storage: new arena buffers, or, for a
// result the launch computes in place, its argument's storage (a state tensor updated by this
// very value, or a private copy).
func (fl *fnLowerer) addUnit(nodes []*ir.Node, p *kernels.Problem, args []ir.Value, outs []ir.Value) error {
	if big := fl.bigArg(p, args); big >= 0 {
		return fl.addSplit(nodes, p, args, outs, big) // a weight cut into pieces (split.go)
	}
	root := nodes[len(nodes)-1]
	p, deq, err := fl.dequantFallback(p, args)
	if err != nil {
		return err
	}
	ch := fl.l.choose(p)
	if ch.err != nil {
		if nt, ok := ch.err.(*NoTemplateError); ok {
			e := *nt
			e.Function, e.Node = fl.f.Name, fl.where(root)
			return &e
		}
		return fmt.Errorf("function %s: %s: %w", fl.f.Name, fl.where(root), ch.err)
	}
	u := &unit{nodes: nodes, prob: p, ch: ch, label: label(nodes), vals: args}
	for i, a := range args {
		var lc loc
		var err error
		if dt, ok := deq[i]; ok {
			lc, err = fl.dequantLoc(a, dt)
		} else {
			lc, err = fl.locOf(a)
		}
		if err != nil {
			return err
		}
		u.args = append(u.args, lc)
	}
	ln := ch.launch
	for i, o := range outs {
		if a, ok := ln.InPlace[i]; ok {
			lc, err := fl.inPlace(u, args[a], u.args[a], o)
			if err != nil {
				return err
			}
			u.outs = append(u.outs, lc)
			continue
		}
		size := deviceBytes(o.Type())
		u.outs = append(u.outs, loc{buf: fl.arenaBuf(size), size: size})
	}
	for i, o := range outs {
		fl.locs[o] = u.outs[i]
	}
	for _, s := range ln.Scratch {
		u.scratch = append(u.scratch, fl.arenaBuf(uint64(max(s, 4))))
	}
	for _, s := range ln.Sync {
		u.sync = append(u.sync, fl.syncBuf(uint64(max(s, 4))))
	}
	fl.units = append(fl.units, u)
	fl.rep.Kernels = append(fl.rep.Kernels, KernelChoice{Label: u.label, Ops: opsOf(nodes), Problem: p.Key(),
		Template: ch.tmpl.Name, Config: ch.cfg, Estimated: ch.est, Tolerance: ch.launch.Tolerance})
	return nil
}

// addCopy appends a copy of src (a tensor of type t) into a new arena buffer.
func (fl *fnLowerer) addCopy(src loc, t ir.Type, bounded bool, what string) (loc, error) {
	size := deviceBytes(t)
	dst := loc{buf: fl.arenaBuf(size), size: size}
	return dst, fl.copyTo(src, dst, t, bounded, what)
}

// copyTo appends a kernel copying src into dst (an identity elementwise problem).
func (fl *fnLowerer) copyTo(src, dst loc, t ir.Type, bounded bool, what string) error {
	fu := &kernels.Fused{Inputs: []ir.Type{t}, Nodes: []kernels.FusedNode{{Op: ir.Input, DType: t.DType}}, Outputs: []int{0}}
	p := &kernels.Problem{Op: kernels.FusedElementwise, Args: []ir.Type{t}, Outs: []ir.Type{t}, Expr: fu}
	if bounded && fl.f.Length != nil {
		// A bounded value's copy moves the run's rows only.
		p.Rows = &kernels.Rows{Max: fl.f.Length.Max, Args: []bool{true}, Outs: []bool{true}}
	}
	ch := fl.l.choose(p)
	if ch.err != nil {
		return fmt.Errorf("function %s: copy for %s: %w", fl.f.Name, what, ch.err)
	}
	u := &unit{prob: p, ch: ch, label: "copy " + what, args: []loc{src}, outs: []loc{dst}, copy: true}
	for _, s := range ch.launch.Scratch {
		u.scratch = append(u.scratch, fl.arenaBuf(uint64(max(s, 4))))
	}
	fl.units = append(fl.units, u)
	fl.rep.Kernels = append(fl.rep.Kernels, KernelChoice{Label: u.label, Ops: []string{"copy"}, Problem: p.Key(),
		Template: ch.tmpl.Name, Config: ch.cfg, Estimated: ch.est, Tolerance: ch.launch.Tolerance})
	return nil
}

func label(nodes []*ir.Node) string {
	var parts []string
	for _, n := range nodes {
		s := "%" + strconv.Itoa(n.ID)
		if n.Name != "" {
			s += " " + n.Name
		}
		if n.Rule != "" {
			s += " (" + n.Rule + ")"
		}
		parts = append(parts, s)
	}
	if len(parts) > 4 {
		parts = append(parts[:2], "…", parts[len(parts)-1])
	}
	return strings.Join(parts, ", ")
}

func opsOf(nodes []*ir.Node) []string {
	var out []string
	for _, n := range nodes {
		if n.Op == ir.Expand && len(nodes) > 1 {
			continue
		}
		out = append(out, n.Op.String())
	}
	return out
}
