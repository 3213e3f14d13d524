package lower

import (
	"fmt"
	"sort"
	"strings"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
	"github.com/vkc-project/vkc/kernels"
)

// analyse finds consumers, compile-time (static) nodes, live nodes, and evaluates what folds;
// for a function with a run-time length, the values that hold its rows.
func (fl *fnLowerer) analyse() error {
	f := fl.f
	rows, err := ir.LengthRows(f)
	if err != nil {
		return fmt.Errorf("function %s: %w", f.Name, err)
	}
	fl.rows = rows
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
	// Evaluate the folded nodes. Values folded before (by another function or another lowering
	// of the same model) come from the fold cache. The rest are computed in node order: views,
	// concatenations, transposes and float casts of known values natively (foldNative), in the
	// weights' own dtype and mostly without copying; anything else, with the subgraph it needs,
	// by the interpreter.
	cache, keys := fl.l.folds, structKeys{}
	known := map[*ir.Node]*blob{}
	req := map[*ir.Node]bool{}
	var require func(n *ir.Node)
	require = func(n *ir.Node) {
		if req[n] || known[n] != nil {
			return
		}
		req[n] = true
		for _, a := range n.Args {
			require(a.Node)
		}
	}
	for _, n := range f.Nodes {
		if fl.live[n] && fl.folds(n) && n.Op != ir.Const {
			if v, ok := cache.get(keys.key(n)); ok {
				fl.values[n], known[n] = v, v
				continue
			}
			require(n)
		}
	}
	interpNodes := map[*ir.Node]bool{}
	var toInterp func(n *ir.Node)
	toInterp = func(n *ir.Node) {
		if interpNodes[n] {
			return
		}
		interpNodes[n] = true
		for _, a := range n.Args {
			toInterp(a.Node)
		}
	}
	for _, n := range f.Nodes {
		if !req[n] {
			continue
		}
		switch {
		case n.Op == ir.Param:
			if w := fl.l.m.Weights[n.Name]; w != nil {
				known[n] = blobOf(w)
				continue
			}
		case n.Op == ir.Const:
			known[n] = blobOf(n.Value)
			continue
		}
		args := make([]*blob, len(n.Args))
		ok := n.Op.Info().Kind != ir.KindSource
		for i, a := range n.Args {
			args[i] = known[a.Node]
			ok = ok && args[i] != nil && a.Out == 0
		}
		if ok {
			if v, done := foldNative(n, args); done {
				known[n] = v
				continue
			}
		}
		toInterp(n)
	}
	if len(interpNodes) > 0 {
		sub := &ir.Function{Name: f.Name + ":fold"}
		for _, n := range f.Nodes {
			if interpNodes[n] {
				sub.Nodes = append(sub.Nodes, n)
			}
		}
		vals, err := interp.EvalContext(fl.l.ctx(), sub, interp.Env{Params: fl.l.m.Weights})
		if err != nil {
			return fmt.Errorf("function %s: folding constant subgraphs: %w", f.Name, err)
		}
		for n, v := range vals {
			if known[n] == nil {
				known[n] = blobOf(v[0])
			}
		}
	}
	for _, n := range f.Nodes {
		if fl.live[n] && fl.folds(n) && fl.values[n] == nil {
			if n.Op == ir.Const {
				fl.values[n] = blobOf(n.Value)
				continue
			}
			v := known[n]
			if v == nil {
				return fmt.Errorf("function %s: %s: folding left no value (a bug in lower)", f.Name, fl.where(n))
			}
			// Named by what computes it (structKeys), not by a hash of its bytes: the same
			// subgraph folded by two functions is one weight, and naming costs no pass over
			// the data (a SHA-256 of SmolLM2's merged projections took 0.2 s).
			k := keys.key(n)
			v = &blob{t: v.t, pieces: v.pieces, name: fmt.Sprintf("const.%s.%x", strings.ReplaceAll(v.t.String(), ",", "x"), k[:12])}
			fl.values[n] = v
			cache.put(k, v)
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
				fu.Nodes = append(fu.Nodes, kernels.FusedNode{Op: ir.Const, Value: fl.values[a.Node].tensor().Float64(0), DType: a.Type().DType})
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
	var outVals []ir.Value
	for _, o := range g.outputs {
		outVals = append(outVals, o.V())
	}
	if epi == nil {
		p := &kernels.Problem{Op: kernels.FusedElementwise, Args: append([]ir.Type(nil), fu.Inputs...), Outs: outs, Expr: fu}
		p.Rows = fl.problemRows(inputs, outVals, false)
		return p, inputs
	}
	p := &kernels.Problem{Op: epi.Op, Attrs: epi.Attrs, Outs: outs, Expr: fu, NumOpArgs: len(epi.Args)}
	var vals []ir.Value
	for _, a := range epi.Args {
		p.Args = append(p.Args, a.Type())
		vals = append(vals, a)
	}
	p.Args = append(p.Args, fu.Inputs[1:]...)
	vals = append(vals, inputs[1:]...)
	p.Rows = fl.problemRows(vals, outVals, ir.NeedsLength(epi, fl.rows))
	return p, vals
}
