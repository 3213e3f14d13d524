package lower

import (
	"fmt"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
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
	bufLength // the run-time length n (plan.RegionLength)
	bufSync   // counters a launch leaves zero (kernels.Launch.Sync), past the state tensors
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
	vals    []ir.Value // the values bound to prob.Args (nil for copies)
	args    []loc
	outs    []loc
	scratch []int // buffer indices
	sync    []int // buffer indices of the launch's Sync words
	deps    []int
	level   int
	copy    bool // a copy inserted by lowering (outputs, state updates, in-place preparation)
}

// fnLowerer lowers one function, in stages kept one file each:
//   - analyse.go: consumers, compile-time nodes, liveness and folding; pointwise groups and the
//     epilogues they fuse into (the kernel problems a function needs);
//   - units.go: one unit (a chosen launch) per problem, copies for outputs and state;
//   - place.go: where each value lives (weights, state, views, in-place results) and the arena's
//     memory plan;
//   - schedule.go: dependencies, barrier levels, dispatch order and the barriers themselves.
type fnLowerer struct {
	l *lowerer
	f *ir.Function

	consumers map[*ir.Node][]*ir.Node
	isResult  map[*ir.Node]bool // some output is a function output or a state update
	static    map[*ir.Node]bool
	live      map[*ir.Node]bool
	values    map[*ir.Node]*blob // evaluated static nodes (folded and constants)
	pos       map[*ir.Node]int   // node index

	group  map[*ir.Node]int // pointwise group of a node
	groups []*pwGroup
	absorb map[*ir.Node]int // matmul node → group whose epilogue it takes
	// Merged projections lowered with column parts (parts.go): by linear, and by absorbed node.
	parts, partOf map[*ir.Node]*partsPlan
	unitPos       map[*ir.Node]int // the node position at which the node's unit runs

	bufs    []buffer
	locs    map[ir.Value]loc
	deqLocs map[deqLocKey]loc   // dequantized weights (dequant.go)
	pieces  map[string]ir.Value // row pieces of weights larger than a storage buffer (split.go), by name
	aff     map[ir.Value]affine // integer values as sums of inputs (work.go), computed on first use
	units   []*unit
	rep     *FunctionReport

	// A function with a run-time length: the values that hold its rows (ir.LengthRows) and the
	// buffer of n.
	rows      map[ir.Value]bool
	lengthBuf int
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
		static: map[*ir.Node]bool{}, live: map[*ir.Node]bool{}, values: map[*ir.Node]*blob{},
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
	fl.chooseParts()
	// Inputs.
	pf := &plan.Function{Name: f.Name}
	l := f.Length
	if l != nil {
		pf.Length = &plan.Length{Name: l.Dim, Min: uint32(l.Min), Max: uint32(l.Max)}
		fl.lengthBuf = fl.newBuf(buffer{kind: bufLength, size: 4})
		fl.locs[l.Node.V()] = loc{buf: fl.lengthBuf, size: 4}
	}
	for i, n := range f.Inputs {
		dt, err := PlanDType(n.Type().DType)
		if err != nil {
			return nil, nil, fmt.Errorf("function %s: input %s: %w", f.Name, n.Name, err)
		}
		pf.Inputs = append(pf.Inputs, plan.Value{Name: n.Name, DType: dt, Shape: shape64(n.Type().Shape), Place: plan.Staging,
			Bounded: l != nil && i < len(l.Inputs) && l.Inputs[i]})
		b := fl.newBuf(buffer{kind: bufInput, index: i, size: deviceBytes(n.Type())})
		fl.locs[n.V()] = loc{buf: b, size: deviceBytes(n.Type())}
	}
	for i, o := range f.Outputs {
		dt, err := PlanDType(o.Value.Type().DType)
		if err != nil {
			return nil, nil, fmt.Errorf("function %s: output %s: %w", f.Name, o.Name, err)
		}
		pf.Outputs = append(pf.Outputs, plan.Value{Name: o.Name, DType: dt, Shape: shape64(o.Value.Type().Shape), Place: plan.Staging,
			Bounded: l != nil && i < len(l.Outputs) && l.Outputs[i]})
	}
	for _, n := range f.Nodes {
		if !fl.live[n] {
			continue
		}
		if err := fl.l.cancelled("function " + f.Name); err != nil {
			return nil, nil, err
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
