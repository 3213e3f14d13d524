package lower

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/memplan"
	"github.com/vkc-project/vkc/plan"
)

// bufKind is where a buffer lives.
type bufKind uint8

const (
	bufWeight bufKind = iota + 1
	bufState
	bufInput
	bufOutput
	bufArena
)

// buffer is one tensor's storage: a weight, a state tensor, an input or output slot, or an
// intermediate (or scratch) in the arena, placed by the memory plan.
type buffer struct {
	kind  bufKind
	index int // weight buffer, state tensor, input or output index
	size  uint64
	// arena buffers: lifetime in barrier levels and the offset the memory plan gave it
	first, last int
	off         uint64
	used        bool
}

// loc is a byte range of a buffer: a whole tensor, or a view (reshape, contiguous slice).
type loc struct {
	buf       int
	off, size uint64
}

// unit is one Problem of a function, realised by a Launch.
type unit struct {
	nodes   []*ir.Node // the graph nodes it implements, in order
	label   string
	prob    *kernels.Problem
	ch      *choice
	args    []loc
	outs    []loc
	scratch []int // buffer indices
	deps    []int
	level   int
	copy    bool // a copy inserted by lowering (outputs, state updates, in-place preparation)
}

type fnLowerer struct {
	l *lowerer
	f *ir.Function

	consumers map[*ir.Node][]*ir.Node
	isResult  map[*ir.Node]bool // some output is a function output or a state update
	static    map[*ir.Node]bool
	live      map[*ir.Node]bool
	values    map[*ir.Node]*ir.Tensor // evaluated static nodes (folded and constants)
	pos       map[*ir.Node]int        // node index

	group   map[*ir.Node]int // pointwise group of a node
	groups  []*pwGroup
	absorb  map[*ir.Node]int // matmul node → group whose epilogue it takes
	unitPos map[*ir.Node]int // the node position at which the node's unit runs

	bufs  []buffer
	locs  map[ir.Value]loc
	units []*unit
	rep   *FunctionReport
}

// pwGroup is a set of pointwise nodes computed by one kernel (or one epilogue).
type pwGroup struct {
	root     *ir.Node
	members  []*ir.Node // topological order
	epilogue *ir.Node   // the matmul whose epilogue this group becomes, if any
	prob     *kernels.Problem
	inputs   []ir.Value // values bound to prob.Args (after the op's own arguments)
	outputs  []*ir.Node // members whose values leave the group
}

func newFnLowerer(l *lowerer, f *ir.Function) *fnLowerer {
	return &fnLowerer{l: l, f: f, consumers: map[*ir.Node][]*ir.Node{}, isResult: map[*ir.Node]bool{},
		static: map[*ir.Node]bool{}, live: map[*ir.Node]bool{}, values: map[*ir.Node]*ir.Tensor{},
		pos: map[*ir.Node]int{}, group: map[*ir.Node]int{}, absorb: map[*ir.Node]int{}, unitPos: map[*ir.Node]int{},
		locs: map[ir.Value]loc{}, rep: &FunctionReport{Name: f.Name}}
}

func (fl *fnLowerer) where(n *ir.Node) string {
	s := n.String()
	if n.Pos.Line > 0 {
		s = n.Pos.String() + ": " + s
	}
	return s
}

// folds reports whether n is computed at compile time and stored as a weight.
func (fl *fnLowerer) folds(n *ir.Node) bool {
	if n.Op == ir.Const {
		return true
	}
	return fl.l.external == nil && fl.static[n] && n.Op.Info().Kind != ir.KindSource && n.Op != ir.Reshape
}

// constScalar reports whether n is a compile-time scalar that a fused kernel can embed.
func (fl *fnLowerer) constScalar(n *ir.Node) bool {
	return (n.Op == ir.Const || fl.folds(n)) && len(n.Outs) == 1 && n.Type().Shape.NumElements() == 1
}

func (fl *fnLowerer) pointwise(n *ir.Node) bool {
	return fl.live[n] && !fl.folds(n) && n.Op.Info().Kind != ir.KindSource && (n.Op.IsElementwise() || n.Op == ir.Expand)
}

func (fl *fnLowerer) lower(progress func(string)) (*plan.Function, *FunctionReport, error) {
	f := fl.f
	if err := fl.analyse(); err != nil {
		return nil, nil, err
	}
	fl.formGroups()
	fl.chooseEpilogues()
	// Inputs.
	pf := &plan.Function{Name: f.Name}
	for i, n := range f.Inputs {
		dt, err := PlanDType(n.Type().DType)
		if err != nil {
			return nil, nil, fmt.Errorf("function %s: input %s: %w", f.Name, n.Name, err)
		}
		pf.Inputs = append(pf.Inputs, plan.Value{Name: n.Name, DType: dt, Shape: shape64(n.Type().Shape), Place: plan.Staging})
		b := fl.newBuf(buffer{kind: bufInput, index: i, size: deviceBytes(n.Type())})
		fl.locs[n.V()] = loc{buf: b, size: deviceBytes(n.Type())}
	}
	for _, o := range f.Outputs {
		dt, err := PlanDType(o.Value.Type().DType)
		if err != nil {
			return nil, nil, fmt.Errorf("function %s: output %s: %w", f.Name, o.Name, err)
		}
		pf.Outputs = append(pf.Outputs, plan.Value{Name: o.Name, DType: dt, Shape: shape64(o.Value.Type().Shape), Place: plan.Staging})
	}
	for _, n := range f.Nodes {
		if !fl.live[n] {
			continue
		}
		progress(n.Op.String())
		if err := fl.lowerNode(n); err != nil {
			return nil, nil, err
		}
	}
	if err := fl.placeResults(); err != nil {
		return nil, nil, err
	}
	fl.dependencies()
	fl.levels()
	fl.memoryPlan()
	fl.emit(pf)
	return pf, fl.rep, nil
}

// analyse finds consumers, compile-time (static) nodes, live nodes, and evaluates what folds.
func (fl *fnLowerer) analyse() error {
	f := fl.f
	for i, n := range f.Nodes {
		fl.pos[n] = i
		switch n.Op {
		case ir.Param, ir.Const:
			fl.static[n] = true
		case ir.Input, ir.State:
		default:
			s := len(n.Args) > 0
			for _, a := range n.Args {
				s = s && fl.static[a.Node]
			}
			fl.static[n] = s
		}
	}
	// Live nodes: reachable from the results without passing through a folded node.
	var stack []*ir.Node
	mark := func(n *ir.Node) {
		if !fl.live[n] {
			fl.live[n] = true
			stack = append(stack, n)
		}
	}
	for _, o := range f.Outputs {
		mark(o.Value.Node)
		fl.isResult[o.Value.Node] = true
	}
	for _, u := range f.Updates {
		mark(u.Value.Node)
		fl.isResult[u.Value.Node] = true
	}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if fl.folds(n) {
			continue
		}
		for _, a := range n.Args {
			mark(a.Node)
		}
	}
	for _, n := range f.Nodes {
		if !fl.live[n] || fl.folds(n) {
			continue
		}
		for _, a := range n.Args {
			fl.consumers[a.Node] = append(fl.consumers[a.Node], n)
		}
	}
	// Evaluate the folded nodes (and whatever static nodes they need) in the interpreter.
	need := map[*ir.Node]bool{}
	var walk func(n *ir.Node)
	walk = func(n *ir.Node) {
		if need[n] {
			return
		}
		need[n] = true
		for _, a := range n.Args {
			walk(a.Node)
		}
	}
	// Values folded before (by another function or another lowering of the same model) are
	// taken from the fold cache; only the rest are evaluated.
	cache, keys := fl.l.folds, structKeys{}
	any := false
	for _, n := range f.Nodes {
		if fl.live[n] && fl.folds(n) && n.Op != ir.Const {
			if v, ok := cache.get(keys.key(n)); ok {
				fl.values[n] = v
				continue
			}
			walk(n)
			any = true
		}
	}
	if any {
		sub := &ir.Function{Name: f.Name + ":fold"}
		for _, n := range f.Nodes {
			if need[n] {
				sub.Nodes = append(sub.Nodes, n)
			}
		}
		vals, err := interp.Eval(sub, interp.Env{Params: fl.l.m.Weights})
		if err != nil {
			return fmt.Errorf("function %s: folding constant subgraphs: %w", f.Name, err)
		}
		for n, v := range vals {
			if fl.live[n] && fl.folds(n) && fl.values[n] == nil {
				fl.values[n] = v[0]
				cache.put(keys.key(n), v[0])
			}
		}
	}
	for _, n := range f.Nodes {
		if n.Op == ir.Const && fl.live[n] {
			fl.values[n] = n.Value
		}
	}
	return nil
}

// formGroups puts pointwise nodes into groups, one kernel each: a node joins the group of its
// consumers when all of them are in one group (so a group never feeds a node outside it that
// feeds back into it) and, if it is also a function result, when it has the group's shape (it is
// then one more output of the kernel).
func (fl *fnLowerer) formGroups() {
	nodes := fl.f.Nodes
	for i := len(nodes) - 1; i >= 0; i-- {
		n := nodes[i]
		if !fl.pointwise(n) {
			continue
		}
		g := -1
		ok := len(fl.consumers[n]) > 0
		for _, c := range fl.consumers[n] {
			gc, in := fl.group[c]
			if !in || (g >= 0 && gc != g) {
				ok = false
				break
			}
			g = gc
		}
		if ok && fl.isResult[n] && !n.Type().Shape.Equal(fl.groups[g].root.Type().Shape) {
			ok = false
		}
		if !ok {
			g = len(fl.groups)
			fl.groups = append(fl.groups, &pwGroup{root: n})
		}
		fl.group[n] = g
		fl.groups[g].members = append(fl.groups[g].members, n)
	}
	for _, g := range fl.groups {
		// members were collected in reverse order
		sort.Slice(g.members, func(a, b int) bool { return fl.pos[g.members[a]] < fl.pos[g.members[b]] })
		for _, m := range g.members {
			if m == g.root || fl.isResult[m] {
				g.outputs = append(g.outputs, m)
			}
		}
	}
}

// epilogueHost reports whether n is a kernel that may take an elementwise epilogue: any op with one
// result that is computed by a kernel of its own (not a source, a view or a pointwise op). The
// templates decide: one that cannot apply the epilogue rejects the problem, and the group then
// stays a kernel of its own.
func epilogueHost(n *ir.Node) bool {
	switch {
	case n.Op.Info().Kind == ir.KindSource, n.Op == ir.Reshape, n.Op == ir.Slice, n.Op == ir.Expand, n.Op.IsElementwise():
		return false
	}
	return len(n.Outs) == 1
}

// chooseEpilogues folds a group into the kernel that feeds it (a matmul's bias, activation or
// residual add; a norm's or a convolution's activation) when that kernel's only consumer is the
// group, the group has one output of the kernel's shape, and a template implements the op with
// that epilogue (otherwise the two stay separate kernels).
func (fl *fnLowerer) chooseEpilogues() {
outer:
	for gi, g := range fl.groups {
		if len(g.outputs) != 1 {
			continue
		}
		for _, m := range g.members {
			for _, a := range m.Args {
				p := a.Node
				if _, in := fl.group[p]; in || !fl.live[p] || fl.folds(p) || len(p.Outs) != 1 || fl.isResult[p] {
					continue
				}
				if !epilogueHost(p) || !p.Type().Shape.Equal(g.root.Type().Shape) {
					continue
				}
				if _, taken := fl.absorb[p]; taken {
					continue
				}
				all := true
				for _, c := range fl.consumers[p] {
					all = all && fl.group[c] == gi && fl.pointwise(c)
				}
				if !all {
					continue
				}
				prob, inputs := fl.groupProblem(g, p)
				if ch := fl.l.choose(prob); ch.err != nil {
					continue
				}
				g.epilogue, g.prob, g.inputs = p, prob, inputs
				fl.absorb[p] = gi
				continue outer
			}
		}
	}
	for _, g := range fl.groups {
		if g.prob == nil {
			g.prob, g.inputs = fl.groupProblem(g, nil)
		}
	}
}

// groupProblem builds the fused expression of a group: an elementwise problem, or (with epi) the
// problem of matmul epi with the group as its epilogue.
func (fl *fnLowerer) groupProblem(g *pwGroup, epi *ir.Node) (*kernels.Problem, []ir.Value) {
	fu := &kernels.Fused{}
	idx := map[*ir.Node]int{}
	inIdx := map[ir.Value]int{}
	var inputs []ir.Value
	input := func(v ir.Value) int {
		if k, ok := inIdx[v]; ok {
			return k
		}
		fu.Inputs = append(fu.Inputs, v.Type())
		fu.Nodes = append(fu.Nodes, kernels.FusedNode{Op: ir.Input, Index: len(fu.Inputs) - 1, DType: v.Type().DType})
		inIdx[v] = len(fu.Nodes) - 1
		inputs = append(inputs, v)
		return len(fu.Nodes) - 1
	}
	if epi != nil {
		input(epi.V())
	}
	gi := fl.group[g.root]
	for _, m := range g.members {
		args := make([]int, len(m.Args))
		for k, a := range m.Args {
			switch {
			case fl.group[a.Node] == gi && fl.pointwise(a.Node):
				args[k] = idx[a.Node]
			case fl.constScalar(a.Node):
				fu.Nodes = append(fu.Nodes, kernels.FusedNode{Op: ir.Const, Value: fl.values[a.Node].Float64(0), DType: a.Type().DType})
				args[k] = len(fu.Nodes) - 1
			default:
				args[k] = input(a)
			}
		}
		if m.Op == ir.Expand {
			idx[m] = args[0] // broadcasting is implicit in the kernel's indexing
			continue
		}
		fu.Nodes = append(fu.Nodes, kernels.FusedNode{Op: m.Op, Attrs: m.Attrs, Args: args, DType: m.Type().DType})
		idx[m] = len(fu.Nodes) - 1
	}
	var outs []ir.Type
	for _, o := range g.outputs {
		fu.Outputs = append(fu.Outputs, idx[o])
		outs = append(outs, o.Type())
	}
	if epi == nil {
		return &kernels.Problem{Op: kernels.FusedElementwise, Args: append([]ir.Type(nil), fu.Inputs...), Outs: outs, Expr: fu}, inputs
	}
	p := &kernels.Problem{Op: epi.Op, Attrs: epi.Attrs, Outs: outs, Expr: fu, NumOpArgs: len(epi.Args)}
	var vals []ir.Value
	for _, a := range epi.Args {
		p.Args = append(p.Args, a.Type())
		vals = append(vals, a)
	}
	p.Args = append(p.Args, fu.Inputs[1:]...)
	return p, append(vals, inputs[1:]...)
}

func (fl *fnLowerer) newBuf(b buffer) int {
	fl.bufs = append(fl.bufs, b)
	return len(fl.bufs) - 1
}

func (fl *fnLowerer) arenaBuf(size uint64) int {
	return fl.newBuf(buffer{kind: bufArena, size: size})
}

// locOf returns where value v is, creating weights for parameters, constants and folded values
// on first use.
func (fl *fnLowerer) locOf(v ir.Value) (loc, error) {
	if lc, ok := fl.locs[v]; ok {
		return lc, nil
	}
	n := v.Node
	var name string
	var x *ir.Tensor
	switch {
	case n.Op == ir.Param:
		name, x = n.Name, fl.l.m.Weights[n.Name]
		if x == nil {
			return loc{}, fmt.Errorf("function %s: parameter %s has no weights loaded", fl.f.Name, n.Name)
		}
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
		name = constName(x)
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

// constName names a compile-time tensor by its type and content (SHA-256), so two functions
// folding the same subgraph share one weight and two different tensors never share a name.
func constName(x *ir.Tensor) string {
	h := contentHash(x)
	return fmt.Sprintf("const.%s.%x", strings.ReplaceAll(x.Type.String(), ",", "x"), h[:12])
}

func (fl *fnLowerer) lowerNode(n *ir.Node) error {
	switch {
	case n.Op == ir.Input:
		return nil
	case n.Op == ir.Param || n.Op == ir.State || fl.folds(n):
		if fl.constScalar(n) && fl.onlyInGroups(n) {
			return nil // embedded in the kernels that use it
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
	if err != nil || n.Attrs.Int("step", 1) != 1 {
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
	root := nodes[len(nodes)-1]
	ch := fl.l.choose(p)
	if ch.err != nil {
		if nt, ok := ch.err.(*NoTemplateError); ok {
			e := *nt
			e.Function, e.Node = fl.f.Name, fl.where(root)
			return &e
		}
		return fmt.Errorf("function %s: %s: %w", fl.f.Name, fl.where(root), ch.err)
	}
	u := &unit{nodes: nodes, prob: p, ch: ch, label: label(nodes)}
	for _, a := range args {
		lc, err := fl.locOf(a)
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
	fl.units = append(fl.units, u)
	fl.rep.Kernels = append(fl.rep.Kernels, KernelChoice{Label: u.label, Ops: opsOf(nodes), Problem: p.Key(),
		Template: ch.tmpl.Name, Config: ch.cfg, Estimated: ch.est})
	return nil
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
			cp, err := fl.addCopy(src, n.Type(), "old "+n.Name)
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
	cp, err := fl.addCopy(src, a.Type(), "in-place "+label([]*ir.Node{n}))
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

// addCopy appends a copy of src (a tensor of type t) into a new arena buffer.
func (fl *fnLowerer) addCopy(src loc, t ir.Type, what string) (loc, error) {
	size := deviceBytes(t)
	dst := loc{buf: fl.arenaBuf(size), size: size}
	return dst, fl.copyTo(src, dst, t, what)
}

// copyTo appends a kernel copying src into dst (an identity elementwise problem).
func (fl *fnLowerer) copyTo(src, dst loc, t ir.Type, what string) error {
	fu := &kernels.Fused{Inputs: []ir.Type{t}, Nodes: []kernels.FusedNode{{Op: ir.Input, DType: t.DType}}, Outputs: []int{0}}
	p := &kernels.Problem{Op: kernels.FusedElementwise, Args: []ir.Type{t}, Outs: []ir.Type{t}, Expr: fu}
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
		Template: ch.tmpl.Name, Config: ch.cfg, Estimated: ch.est})
	return nil
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
		if err := fl.copyTo(src, dst, o.Value.Type(), "output "+o.Name); err != nil {
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
		if err := fl.copyTo(src, dst, u.Value.Type(), "state "+u.Name); err != nil {
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

// memKey identifies the memory a buffer occupies for dependency purposes: weights, a state
// tensor, an input or output slot, or one arena buffer (arena buffers that the memory plan later
// overlaps get barriers from the exact check at emission).
type memKey struct {
	kind  bufKind
	index int
}

func (fl *fnLowerer) mem(b int) memKey {
	x := fl.bufs[b]
	if x.kind == bufArena {
		return memKey{bufArena, b}
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
	offs, size := memplan.Assign(reqs, fl.l.align)
	for k, i := range ids {
		fl.bufs[i].off = offs[k]
	}
	fl.rep.ArenaBytes = size
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
			Ops: opsOf(u.nodes), Label: u.label}
		if u.copy {
			d.Ops = []string{"copy"}
		}
		if n := len(u.ch.launch.Steps); n > 0 {
			d.Estimated = u.ch.est / time.Duration(n)
		}
		m := &fl.l.modules[mi]
		var spans []span
		for bi, op := range st.Bindings {
			var lc loc
			switch op.Kind {
			case kernels.Arg:
				lc = u.args[op.Index]
			case kernels.Out:
				lc = u.outs[op.Index]
			case kernels.Scratch:
				lc = loc{buf: u.scratch[op.Index], size: fl.bufs[u.scratch[op.Index]].size}
			}
			ref := fl.ref(lc)
			d.Bindings = append(d.Bindings, plan.Binding{Binding: uint32(bi), Buffer: ref})
			spans = append(spans, span{ref.Region, ref.Offset, ref.Offset + ref.Range, m.Bindings[bi].Access&plan.Write != 0})
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
		return plan.BufferRef{Region: plan.Region{Kind: plan.RegionWeights}, Offset: fl.l.weights[b.index].off + lc.off, Range: lc.size}
	case bufState:
		return plan.BufferRef{Region: plan.Region{Kind: plan.RegionState}, Offset: fl.l.stateOff[b.index] + lc.off, Range: lc.size}
	case bufInput:
		return plan.BufferRef{Region: plan.Region{Kind: plan.RegionInput, Index: uint32(b.index)}, Offset: lc.off, Range: lc.size}
	case bufOutput:
		return plan.BufferRef{Region: plan.Region{Kind: plan.RegionOutput, Index: uint32(b.index)}, Offset: lc.off, Range: lc.size}
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
