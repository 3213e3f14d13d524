package lower

import (
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
)

// ─── One layout of each weight for every function ───────────────────────────────────────────
//
// Functions are extracted one at a time, so they may merge a layer's projections differently:
// SmolLM2's 512-token prefill keeps Q, K, V and gate, up as linears of their own while decode
// merges each group (merge-linears) and lowers it with column parts, whose weight rows are
// reordered for the kernel (rope's pairs, gate/up interleaved; parts.go). Lowered as they come,
// the plan would hold each projection twice, in both layouts (1.52× SmolLM2's weights).
//
// adoptMerges makes every function read one layout: where one function of the plan merged a
// set of linears of one input over parameters, another that has the same linears unmerged
// (same op, input, norm weight and epsilon; biases alike) gets them merged the same way, as
// merge-linears writes it (one linear over the parameters' concatenation in parameter order,
// its columns sliced back). The function computes the same values (the rule's equivalence), and
// lowering then gives the merged linear the same column parts and the same reordered weight as
// the other function's, which the plan stores once. A merge with column parts is one kernel
// where the unmerged linears were several, so the adopting function does no more work.
//
// Merges that differ in their sets (one function merged K and V, another Q, K and V) are left as
// they are; the weight region stores a merged weight that is a contiguous part of another as a
// view of it when their bytes allow (finishWeights).

// mergeSet is one merge some function made: the parameters of its weight concatenation and of
// its bias concatenation (none for a linear without bias), in concatenation order.
type mergeSet struct {
	weights, biases []string
}

func (s mergeSet) key() string {
	return strings.Join(s.weights, ",") + "|" + strings.Join(s.biases, ",")
}

// paramConcat returns the parameter names of v when it is an axis-0 concatenation of
// parameters (as merge-linears builds), else nil.
func paramConcat(v ir.Value) []string {
	n := v.Node
	if n.Op != ir.Concat || n.Attrs.Int("axis", 0) != 0 || len(n.Args) < 2 {
		return nil
	}
	var names []string
	for _, a := range n.Args {
		if a.Node.Op != ir.Param {
			return nil
		}
		names = append(names, a.Node.Name)
	}
	return names
}

// weightArg is the index of the weight of a linear (1) or rmsnorm_linear (2), or -1.
func weightArg(n *ir.Node) int {
	switch n.Op {
	case ir.Linear:
		return 1
	case ir.RMSNormLinear:
		return 2
	}
	return -1
}

// mergeOf returns the merge n is a product over: a linear or rmsnorm_linear whose weight (and
// bias, if any) concatenates parameters.
func mergeOf(n *ir.Node) (mergeSet, bool) {
	w := weightArg(n)
	if w < 0 {
		return mergeSet{}, false
	}
	s := mergeSet{weights: paramConcat(n.Args[w])}
	if s.weights == nil {
		return mergeSet{}, false
	}
	if n.Op == ir.Linear && len(n.Args) == 3 {
		if s.biases = paramConcat(n.Args[2]); len(s.biases) != len(s.weights) {
			return mergeSet{}, false
		}
	}
	return s, true
}

// merges lists the merges of fns, largest first (then by key, for determinism).
func merges(fns []*ir.Function) []mergeSet {
	seen := map[string]bool{}
	var out []mergeSet
	for _, f := range fns {
		for _, n := range f.Nodes {
			s, ok := mergeOf(n)
			if !ok {
				continue
			}
			if k := s.key(); !seen[k] {
				seen[k] = true
				out = append(out, s)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if len(out[i].weights) != len(out[j].weights) {
			return len(out[i].weights) > len(out[j].weights)
		}
		return out[i].key() < out[j].key()
	})
	return out
}

// adoptMerges returns fns with each function's unmerged linears merged as another function of
// the plan merged them (see the comment above); functions with nothing to adopt are returned as
// they are.
func adoptMerges(fns []*ir.Function, est estimator) []*ir.Function {
	ms := merges(fns)
	if len(ms) == 0 {
		return fns
	}
	out := slices.Clone(fns)
	var adopt []mergeSet
	for _, s := range ms {
		if est != nil && unmergeAll(out, s, est) {
			continue
		}
		adopt = append(adopt, s)
	}
	for i, f := range out {
		out[i] = adoptIn(f, adopt)
	}
	return out
}

// unmergeAll gives merge s up in every function of fns that made it (in place) when that is
// estimated cheaper than the others adopting it, and every such function can; it reports
// whether it did.
func unmergeAll(fns []*ir.Function, s mergeSet, est estimator) bool {
	var adopt, unmerge time.Duration
	adopters := false
	for _, f := range fns {
		if d, ok := adoptCost(f, s, est); ok {
			adopt, adopters = adopt+d, true
		}
		if hasMerge(f, s) {
			d, ok := unmergeCost(f, s, est)
			if !ok {
				return false
			}
			unmerge += d
		}
	}
	if !adopters || unmerge >= adopt {
		return false
	}
	next := slices.Clone(fns)
	for i, f := range fns {
		if !hasMerge(f, s) {
			continue
		}
		g, ok := unmergeIn(f, s)
		if !ok {
			return false
		}
		next[i] = g
	}
	copy(fns, next)
	return true
}

// sibling identifies linears that a merge may join: the op, its input, and for rmsnorm_linear
// the norm's weight and attributes.
type sibling struct {
	op    ir.Op
	x     ir.Value
	gamma ir.Value
	attrs string
	bias  bool
}

func adoptIn(f *ir.Function, ms []mergeSet) *ir.Function {
	pos := map[*ir.Node]int{}
	for i, n := range f.Nodes {
		pos[n] = i
	}
	// Unmerged linears over a parameter, by sibling group and weight name.
	groups := map[sibling]map[string]*ir.Node{}
	for _, n := range f.Nodes {
		w := weightArg(n)
		if w < 0 || n.Args[w].Node.Op != ir.Param || len(n.Outs) != 1 {
			continue
		}
		k := sibling{op: n.Op, x: n.Args[0], attrs: n.Attrs.Key()}
		if n.Op == ir.RMSNormLinear {
			k.gamma = n.Args[1]
		}
		if n.Op == ir.Linear && len(n.Args) == 3 {
			if n.Args[2].Node.Op != ir.Param {
				continue
			}
			k.bias = true
		}
		if groups[k] == nil {
			groups[k] = map[string]*ir.Node{}
		}
		groups[k][n.Args[w].Node.Name] = n
	}
	type plannedMerge struct {
		k     sibling
		nodes []*ir.Node // in the merge's order
	}
	var plans []plannedMerge
	used := map[*ir.Node]bool{}
	keys := make([]sibling, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	// Groups in graph order (of their first linear), for a deterministic result.
	first := func(k sibling) int {
		best := len(f.Nodes)
		for _, n := range groups[k] {
			best = min(best, pos[n])
		}
		return best
	}
	sort.Slice(keys, func(i, j int) bool { return first(keys[i]) < first(keys[j]) })
	for _, k := range keys {
		g := groups[k]
		for _, s := range ms {
			if k.bias != (len(s.biases) > 0) {
				continue
			}
			var nodes []*ir.Node
			for i, w := range s.weights {
				n := g[w]
				if n == nil || used[n] || (k.bias && n.Args[2].Node.Name != s.biases[i]) {
					nodes = nil
					break
				}
				nodes = append(nodes, n)
			}
			if nodes == nil {
				continue
			}
			for _, n := range nodes {
				used[n] = true
			}
			plans = append(plans, plannedMerge{k, nodes})
		}
	}
	if len(plans) == 0 {
		return f
	}
	// Rebuild the node list: each merge's concatenations, merged linear and slices where its
	// first linear was; its linears gone; every use of a linear's value now its slice's.
	nextID := 0
	for _, n := range f.Nodes {
		nextID = max(nextID, n.ID+1)
	}
	add := func(n *ir.Node) *ir.Node {
		n.ID = nextID
		nextID++
		return n
	}
	replace := map[ir.Value]ir.Value{}
	insertAt := map[*ir.Node][]*ir.Node{} // new nodes before an old one
	for _, pm := range plans {
		at := pm.nodes[0]
		for _, n := range pm.nodes[1:] {
			if pos[n] < pos[at] {
				at = n
			}
		}
		w := weightArg(at)
		var ws, bs []ir.Value
		var wt, bt []ir.Type
		for _, n := range pm.nodes {
			ws = append(ws, n.Args[w])
			wt = append(wt, n.Args[w].Type())
			if pm.k.bias {
				bs = append(bs, n.Args[2])
				bt = append(bt, n.Args[2].Type())
			}
		}
		var made []*ir.Node
		concat := func(vs []ir.Value, ts []ir.Type) (ir.Value, bool) {
			attrs := ir.Attrs{"axis": 0}
			_, outs, err := ir.Infer(ir.Concat, attrs, ts)
			if err != nil {
				return ir.Value{}, false
			}
			c := add(&ir.Node{Op: ir.Concat, Args: vs, Attrs: attrs, Outs: outs, Rule: "merge-linears"})
			made = append(made, c)
			return c.V(), true
		}
		wc, ok := concat(ws, wt)
		if !ok {
			continue
		}
		args := append([]ir.Value(nil), at.Args...)
		args[w] = wc
		if pm.k.bias {
			bc, ok := concat(bs, bt)
			if !ok {
				continue
			}
			args[2] = bc
		}
		var argT []ir.Type
		for _, a := range args {
			argT = append(argT, a.Type())
		}
		attrs, outs, err := ir.Infer(at.Op, at.Attrs, argT)
		if err != nil {
			continue
		}
		merged := add(&ir.Node{Op: at.Op, Args: args, Attrs: attrs, Outs: outs, Rule: "merge-linears", Pos: at.Pos})
		made = append(made, merged)
		start := 0
		for _, n := range pm.nodes {
			t := n.Type()
			cols := t.Shape[t.Shape.Rank()-1]
			sa := ir.Attrs{"axis": -1, "start": start, "end": start + cols}
			s := add(&ir.Node{Op: ir.Slice, Args: []ir.Value{merged.V()}, Attrs: sa, Outs: []ir.Type{t}, Name: n.Name, Rule: "merge-linears", Pos: n.Pos})
			made = append(made, s)
			replace[n.V()] = s.V()
			start += cols
		}
		insertAt[at] = append(insertAt[at], made...)
	}
	if len(replace) == 0 {
		return f
	}
	g := *f
	g.Nodes = nil
	hoisted := map[*ir.Node]bool{}
	for _, n := range f.Nodes {
		if hoisted[n] {
			continue
		}
		for _, m := range insertAt[n] {
			// A merged linear's input may be a node rebuilt above (its own input changed), and
			// the parameters of a concatenation may come later in the graph (each before its
			// own linear): they move up, which their having no arguments allows.
			for i, a := range m.Args {
				m.Args[i] = subst(replace, a)
				if a.Node.Op == ir.Param && pos[a.Node] > pos[n] && !hoisted[a.Node] {
					hoisted[a.Node] = true
					g.Nodes = append(g.Nodes, a.Node)
				}
			}
			g.Nodes = append(g.Nodes, m)
		}
		if _, gone := replace[n.V()]; gone && len(n.Outs) == 1 {
			continue
		}
		g.Nodes = append(g.Nodes, rewired(n, replace))
	}
	rewireExports(&g, f, replace)
	return &g
}

// rewired returns n with the arguments replace names substituted: a copy, recorded in replace
// as n's replacement, or n itself where none is.
func rewired(n *ir.Node, replace map[ir.Value]ir.Value) *ir.Node {
	if !slices.ContainsFunc(n.Args, func(a ir.Value) bool { _, ok := replace[a]; return ok }) {
		return n
	}
	c := *n
	c.Args = make([]ir.Value, len(n.Args))
	for i, a := range n.Args {
		c.Args[i] = subst(replace, a)
	}
	replaceNode(replace, n, &c)
	return &c
}

// rewireExports gives g f's outputs and state updates, with the values replace names substituted.
func rewireExports(g, f *ir.Function, replace map[ir.Value]ir.Value) {
	g.Outputs = append([]ir.Output(nil), f.Outputs...)
	for i := range g.Outputs {
		g.Outputs[i].Value = subst(replace, g.Outputs[i].Value)
	}
	g.Updates = append([]ir.StateUpdate(nil), f.Updates...)
	for i := range g.Updates {
		g.Updates[i].Value = subst(replace, g.Updates[i].Value)
	}
}

// subst is v, or what replace says replaces it.
func subst(replace map[ir.Value]ir.Value, v ir.Value) ir.Value {
	if r, ok := replace[v]; ok {
		return r
	}
	return v
}

// replaceNode records that node c replaces n: every value of n is now c's.
func replaceNode(replace map[ir.Value]ir.Value, n, c *ir.Node) {
	for i := range n.Outs {
		replace[ir.Value{Node: n, Out: i}] = ir.Value{Node: c, Out: i}
	}
}

// ─── Or the other way: the merging functions give the merge up ──────────────────────────────
//
// Adopting a merge is not always free: on a GPU with cooperative matrices a prefill's product of
// Llama-3.1-8B's merged gate and up projections (28672×4096 in Q4_K) is too large for
// matmul_coop_dq's f16 copy and ran on matmul_coop at 19 TFLOP/s, where the two products apart
// run on matmul_coop_dq at 80-100 (H100), while decode, which merged them, saves one launch of
// a few microseconds by the merge. adoptMerges weighs the two ways by the static estimates of the
// products (the launches' roofline times, lower.Estimate) and takes the cheaper: the functions
// without the merge adopt it, or the functions with it give it up (unmergeIn). Either way every
// function reads one layout of each weight.

// estimator gives a product's static estimate (its static choice's roofline time).
type estimator func(op ir.Op, attrs ir.Attrs, args []ir.Type) (time.Duration, bool)

// staticEstimator estimates products as lowering's static choice would build them on caps and
// dev, memoised by problem.
func staticEstimator(caps kernels.Caps, dev DeviceModel) estimator {
	memo := map[string]time.Duration{}
	return func(op ir.Op, attrs ir.Attrs, args []ir.Type) (time.Duration, bool) {
		attrs, outs, err := ir.Infer(op, attrs, args)
		if err != nil {
			return 0, false
		}
		p := &kernels.Problem{Op: op, Attrs: attrs, Args: args, Outs: outs, NumOpArgs: len(args)}
		k := p.Key()
		if e, ok := memo[k]; ok {
			return e, e > 0
		}
		_, _, _, e, err := staticChoice(p, caps, dev)
		if err != nil {
			e = 0
		}
		memo[k] = e
		return e, e > 0
	}
}

// partValues are the arguments of a merged product's part i: its weight (and bias) the i-th
// parameter of the concatenations.
func partValues(n *ir.Node, s mergeSet, i int) []ir.Value {
	args := slices.Clone(n.Args)
	w := weightArg(n)
	args[w] = n.Args[w].Node.Args[i]
	if len(s.biases) > 0 {
		args[2] = n.Args[2].Node.Args[i]
	}
	return args
}

// adoptCost is what adopting merge s costs f (negative: it gains), from its unmerged products;
// ok false when f has none to adopt or an estimate is missing.
func adoptCost(f *ir.Function, s mergeSet, est estimator) (time.Duration, bool) {
	byWeight := map[string]*ir.Node{}
	for _, n := range f.Nodes {
		if w := weightArg(n); w >= 0 && n.Args[w].Node.Op == ir.Param {
			byWeight[n.Args[w].Node.Name] = n
		}
	}
	var parts time.Duration
	var first *ir.Node
	var wts, bts []ir.Type
	for i, w := range s.weights {
		n := byWeight[w]
		if n == nil || first != nil && (n.Op != first.Op || n.Args[0] != first.Args[0]) {
			return 0, false
		}
		if first == nil {
			first = n
		}
		e, ok := est(n.Op, n.Attrs, types(n.Args))
		if !ok {
			return 0, false
		}
		parts += e
		wts = append(wts, n.Args[weightArg(n)].Type())
		if len(s.biases) > 0 {
			if n.Op != ir.Linear || len(n.Args) != 3 || n.Args[2].Node.Name != s.biases[i] {
				return 0, false
			}
			bts = append(bts, n.Args[2].Type())
		}
	}
	args := types(first.Args)
	var err error
	if args[weightArg(first)], err = concatType(wts); err != nil {
		return 0, false
	}
	if len(bts) > 0 {
		if args[2], err = concatType(bts); err != nil {
			return 0, false
		}
	}
	merged, ok := est(first.Op, first.Attrs, args)
	if !ok {
		return 0, false
	}
	return merged - parts, true
}

// unmergeCost is what giving up merge s costs f (negative: it gains), from its merged products;
// ok false when f has none or an estimate is missing.
func unmergeCost(f *ir.Function, s mergeSet, est estimator) (time.Duration, bool) {
	var d time.Duration
	found := false
	for _, n := range f.Nodes {
		if !isMerge(n, s) {
			continue
		}
		merged, ok := est(n.Op, n.Attrs, types(n.Args))
		if !ok {
			return 0, false
		}
		d -= merged
		for i := range s.weights {
			e, ok := est(n.Op, n.Attrs, types(partValues(n, s, i)))
			if !ok {
				return 0, false
			}
			d += e
		}
		found = true
	}
	return d, found
}

// hasMerge reports whether f has a product over merge s's concatenations.
func hasMerge(f *ir.Function, s mergeSet) bool {
	return slices.ContainsFunc(f.Nodes, func(n *ir.Node) bool { return isMerge(n, s) })
}

// isMerge reports whether n is a product over merge s's concatenations.
func isMerge(n *ir.Node, s mergeSet) bool {
	m, ok := mergeOf(n)
	return ok && len(n.Outs) == 1 && m.key() == s.key()
}

// types are the values' types.
func types(vs []ir.Value) []ir.Type {
	ts := make([]ir.Type, len(vs))
	for i, v := range vs {
		ts[i] = v.Type()
	}
	return ts
}

func concatType(ts []ir.Type) (ir.Type, error) {
	_, outs, err := ir.Infer(ir.Concat, ir.Attrs{"axis": 0}, ts)
	if err != nil {
		return ir.Type{}, err
	}
	return outs[0], nil
}

// unmergeIn returns f with every product over merge s's concatenations replaced by one product
// per parameter, each taking the place of the slice of the merged result that was its part; ok
// false (f unchanged) where a merged result has another use than such slices.
func unmergeIn(f *ir.Function, s mergeSet) (*ir.Function, bool) {
	users := map[*ir.Node][]*ir.Node{}
	for _, n := range f.Nodes {
		for _, a := range n.Args {
			users[a.Node] = append(users[a.Node], n)
		}
	}
	exported := map[*ir.Node]bool{}
	for _, o := range f.Outputs {
		exported[o.Value.Node] = true
	}
	for _, u := range f.Updates {
		exported[u.Value.Node] = true
	}
	nextID := 0
	for _, n := range f.Nodes {
		nextID = max(nextID, n.ID+1)
	}
	replace := map[ir.Value]ir.Value{}
	insert := map[*ir.Node][]*ir.Node{}
	drop := map[*ir.Node]bool{}
	for _, m := range f.Nodes {
		if !isMerge(m, s) {
			continue
		}
		if exported[m] {
			return f, false
		}
		var parts []*ir.Node
		starts := map[[2]int]int{}
		col := 0
		for i := range s.weights {
			args := partValues(m, s, i)
			attrs, outs, err := ir.Infer(m.Op, m.Attrs, types(args))
			if err != nil {
				return f, false
			}
			p := &ir.Node{ID: nextID, Op: m.Op, Args: args, Attrs: attrs, Outs: outs, Pos: m.Pos}
			nextID++
			cols := outs[0].Shape[outs[0].Shape.Rank()-1]
			starts[[2]int{col, col + cols}] = i
			col += cols
			parts = append(parts, p)
		}
		rank := m.Outs[0].Shape.Rank()
		for _, u := range users[m] {
			ax := u.Attrs.Int("axis", 0)
			if ax < 0 {
				ax += rank
			}
			i, ok := starts[[2]int{u.Attrs.Int("start", 0), u.Attrs.Int("end", 0)}]
			if u.Op != ir.Slice || ax != rank-1 || u.Attrs.Int("step", 1) != 1 || !ok || exported[u] && u.Name == "" {
				return f, false
			}
			parts[i].Name = u.Name
			replace[u.V()] = parts[i].V()
			drop[u] = true
		}
		drop[m] = true
		insert[m] = parts
		for _, a := range m.Args {
			if a.Node.Op == ir.Concat {
				drop[a.Node] = true // dropped below unless another node reads it
			}
		}
	}
	if len(insert) == 0 {
		return f, false
	}
	for c := range drop {
		if c.Op != ir.Concat {
			continue
		}
		for _, u := range users[c] {
			if !drop[u] {
				delete(drop, c)
				break
			}
		}
	}
	g := *f
	g.Nodes = nil
	for _, n := range f.Nodes {
		if ps, ok := insert[n]; ok {
			g.Nodes = append(g.Nodes, ps...)
		}
		if drop[n] {
			continue
		}
		g.Nodes = append(g.Nodes, rewired(n, replace))
	}
	rewireExports(&g, f, replace)
	return &g, true
}
