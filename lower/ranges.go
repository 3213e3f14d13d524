package lower

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/plan"
)

// This file derives the ranges a function's integer inputs must keep (plan.Range) from the ops
// that consume them, so that the runtime rejects a run the interpreter would reject instead of
// letting a kernel read or write outside its tensors:
//
//	embedding(table, ids)              0 ≤ ids ≤ rows(table) - 1
//	cache_write(state, x, pos)         0 ≤ pos, pos + rows(x) ≤ rows(state)
//	rope(x, pos)                       0 ≤ pos
//	attention(q, k, v, kv_len)         1 ≤ kv_len ≤ keys; kv_len ≥ queries when causal or windowed
//	rope_norm, rope_cache_write        as rope and cache_write
//	cache_scatter(state, x, slot, pos)  0 ≤ slot ≤ slots - 1, 0 ≤ pos ≤ ctx - 1 (each row's)
//	attention_rows(q, k, v, slot, pos)  as cache_scatter; rope_rows(x, pos): 0 ≤ pos
//
// An op's integer argument is followed back to the inputs through the ops that keep it an affine
// sum (input + input + constant): add, sub of a constant, reshape, expand and casts between
// integer types. A bound on "pos + 16" becomes a bound on pos; a sum of two inputs becomes a
// range on one with the other in Plus (how a run-time sequence length n will bound pos + n).
// An integer input that reaches a bounded op some other way is not checked, and the plan's notes
// say so: a missing check is written down, never silent.
//
// A function with a run-time length n (ir.Length) has n as one more term (plan.Range.PlusLength;
// the runtime checks n's own bounds): a cache write of the run's rows bounds pos + n by the
// cache's rows, and a causal attention over them asks kv_len − n ≥ 0 (pos ≥ 0 for kv_len = pos + n).

// affine is an integer value as Σ inputs[terms] + off, each term with coefficient 1; ok is false
// for a value not of that form.
type affine struct {
	ok     bool
	terms  []int // input positions, sorted
	length bool  // the run-time length n is a term too
	off    int64
}

// bound is one constraint lo ≤ value ≤ hi from one op, with the reasons.
type bound struct {
	lo, hi       int64
	loWhy, hiWhy string
}

// inputRanges returns f's input ranges and notes about integer inputs that reach a bounded op
// in a way the analysis cannot follow. A function no input value can satisfy (a causal attention
// with more queries than keys) is an error: every run of it would be refused.
func inputRanges(f *ir.Function) ([]plan.Range, []string, error) {
	pos := map[*ir.Node]int{}
	for i, n := range f.Inputs {
		pos[n] = i
	}
	aff := map[ir.Value]affine{}
	reach := map[ir.Value][]int{} // integer inputs an integer value depends on
	rows, err := ir.LengthRows(f)
	if err != nil {
		return nil, nil, fmt.Errorf("function %s: %w", f.Name, err)
	}
	for _, n := range f.Nodes {
		for o, t := range n.Outs {
			if !t.DType.IsInt() {
				continue
			}
			v := ir.Value{Node: n, Out: o}
			if f.IsLength(n) {
				aff[v] = affine{ok: true, length: true}
				continue
			}
			aff[v] = affineOf(n, o, pos, aff)
			var r []int
			if i, ok := pos[n]; ok && n.Op == ir.Input {
				r = []int{i}
			}
			for _, a := range n.Args {
				r = union(r, reach[a])
			}
			reach[v] = r
		}
	}

	type key struct {
		input  int
		plus   string
		length bool
	}
	merged := map[key]*plan.Range{}
	var order []key
	var notes []string
	add := func(n *ir.Node, arg ir.Value, b bound, length int) {
		a := aff[arg]
		// The bound is on arg + length·n: fold the term into arg's form.
		switch {
		case length == 0 || !a.ok:
		case length == 1 && !a.length:
			a.length = true
		case length == -1 && a.length:
			a.length = false
		default:
			notes = append(notes, fmt.Sprintf("%s: %s (node %%%d) bounds its argument with the run-time length in a form the compiler does not check at run time", f.Name, n.Op, n.ID))
			return
		}
		if !a.ok || len(a.terms) == 0 || len(a.terms) > 1+8 {
			if r := reach[arg]; len(r) > 0 && !a.ok {
				names := make([]string, len(r))
				for i, x := range r {
					names[i] = f.Inputs[x].Name
				}
				notes = append(notes, fmt.Sprintf("%s: input %s reaches %s (node %%%d) through ops whose values the compiler does not follow: its range is not checked at run time",
					f.Name, strings.Join(names, ", "), n.Op, n.ID))
			}
			return
		}
		// The checked input is the one tensor term (each of its elements is checked), or the
		// first scalar; the others are run-time scalars in Plus.
		main := -1
		for _, x := range a.terms {
			if f.Inputs[x].Type().Shape.NumElements() != 1 {
				if main >= 0 {
					notes = append(notes, fmt.Sprintf("%s: %s (node %%%d) takes a sum of two tensor inputs: its range is not checked at run time", f.Name, n.Op, n.ID))
					return
				}
				main = x
			}
		}
		if main < 0 {
			main = a.terms[0]
		}
		var plus []uint32
		for _, x := range a.terms {
			if x != main {
				plus = append(plus, uint32(x))
			}
		}
		k := key{main, fmt.Sprint(plus), a.length}
		r := merged[k]
		if r == nil {
			r = &plan.Range{Input: uint32(main), Plus: plus, PlusLength: a.length, Min: plan.NoMin, Max: plan.NoMax}
			merged[k] = r
			order = append(order, k)
		}
		// lo ≤ Σ terms + off ≤ hi  ⇔  lo - off ≤ Σ terms ≤ hi - off.
		if b.lo != plan.NoMin {
			if lo := satSub(b.lo, a.off); lo > r.Min {
				r.Min, r.MinWhy = lo, b.loWhy
			}
		}
		if b.hi != plan.NoMax {
			if hi := satSub(b.hi, a.off); hi < r.Max {
				r.Max, r.MaxWhy = hi, b.hiWhy
			}
		}
	}
	for _, n := range f.Nodes {
		for _, c := range consumerBounds(n, f.Length, rows) {
			add(n, n.Args[c.arg], c.bound, c.length)
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return order[i].input < order[j].input })
	out := make([]plan.Range, 0, len(order))
	for _, k := range order {
		r := merged[k]
		if r.Min > r.Max {
			pf := &plan.Function{Inputs: inputValues(f)}
			if l := f.Length; l != nil {
				pf.Length = &plan.Length{Name: l.Dim}
			}
			return nil, nil, fmt.Errorf("function %s: no value of %s satisfies both %s and %s: the function can never run",
				f.Name, pf.RangeTerm(*r), r.MinWhy, r.MaxWhy)
		}
		out = append(out, *r)
	}
	return out, notes, nil
}

// inputValues names f's inputs as plan values do, for RangeTerm.
func inputValues(f *ir.Function) []plan.Value {
	vs := make([]plan.Value, len(f.Inputs))
	for i, n := range f.Inputs {
		vs[i].Name = n.Name
	}
	return vs
}

// argBound is a bound an op puts on its integer argument arg, or with length ±1 on arg ± n (the
// run-time length).
type argBound struct {
	arg int
	bound
	length int
}

// consumerBounds lists the bounds n puts on its integer arguments; nil for an op that has none.
// l and rows describe the function's run-time length (nil, empty without one): a bounded
// operand's rows are the run's.
func consumerBounds(n *ir.Node, l *ir.Length, bounded map[ir.Value]bool) []argBound {
	rows := func(v ir.Value) int64 { return int64(v.Type().Shape[0]) }
	label := n.Name
	if label == "" {
		label = fmt.Sprintf("%%%d", n.ID)
	}
	cacheWrite := func(st, x, p int) []argBound {
		name := n.Args[st].Node.Name
		if name == "" {
			name = "the cache"
		}
		k, cap := rows(n.Args[x]), rows(n.Args[st])
		lo := bound{0, plan.NoMax, fmt.Sprintf("%s %s: a position is at least 0", n.Op, label), ""}
		if bounded[n.Args[x]] && l != nil {
			if k != int64(l.Max) {
				// k·n rows with k > 1: not a sum the ranges express; checked only at capacity.
				return []argBound{{arg: p, bound: lo}, {arg: p, bound: bound{plan.NoMin, cap - k, "",
					fmt.Sprintf("%s %s writes up to %d rows from the position on into %s, which has %d", n.Op, label, k, name, cap)}}}
			}
			return []argBound{{arg: p, bound: lo}, {arg: p, length: 1, bound: bound{plan.NoMin, cap, "",
				fmt.Sprintf("%s %s writes the run's %s rows from the position on into %s, which has %d", n.Op, label, l.Dim, name, cap)}}}
		}
		return []argBound{{arg: p, bound: bound{0, cap - k,
			fmt.Sprintf("%s %s: a position is at least 0", n.Op, label),
			fmt.Sprintf("%s %s writes %d %s from the position on into %s, which has %d", n.Op, label, k, plural(k, "row"), name, cap)}}}
	}
	ropePos := func(p int) argBound {
		return argBound{arg: p, bound: bound{0, plan.NoMax, fmt.Sprintf("%s %s: a position is at least 0", n.Op, label), ""}}
	}
	// slotPos bounds a per-row slot and position of a [slots, ctx, ...] cache (each element).
	slotPos := func(st, slot, pos int) []argBound {
		sh := n.Args[st].Type().Shape
		name := n.Args[st].Node.Name
		if name == "" {
			name = "the cache"
		}
		return []argBound{
			{arg: slot, bound: bound{0, int64(sh[0]) - 1, fmt.Sprintf("%s %s: a slot is at least 0", n.Op, label),
				fmt.Sprintf("%s %s: %s has %d slots", n.Op, label, name, sh[0])}},
			{arg: pos, bound: bound{0, int64(sh[1]) - 1, fmt.Sprintf("%s %s: a position is at least 0", n.Op, label),
				fmt.Sprintf("%s %s: %s holds %d positions per slot", n.Op, label, name, sh[1])}},
		}
	}
	switch n.Op {
	case ir.RopeRows:
		return []argBound{ropePos(1)}
	case ir.CacheScatter:
		return slotPos(0, 2, 3)
	case ir.AttentionRows:
		return slotPos(1, 3, 4)
	case ir.Embedding:
		name := n.Args[0].Node.Name
		rowsN := rows(n.Args[0])
		return []argBound{{arg: 1, bound: bound{0, rowsN - 1,
			fmt.Sprintf("embedding %s: an index is at least 0", label),
			fmt.Sprintf("embedding %s: the table %s has %d rows", label, name, rowsN)}}}
	case ir.CacheWrite:
		return cacheWrite(0, 1, 2)
	case ir.RopeCacheWrite:
		return append(cacheWrite(0, 1, 2), ropePos(2))
	case ir.Rope:
		return []argBound{ropePos(1)}
	case ir.RopeNorm:
		return []argBound{ropePos(2)}
	case ir.Attention:
		if len(n.Args) < 4 {
			return nil
		}
		lay := ir.AttentionLayouts(n.Attrs)
		seq := func(v ir.Value, l string) int64 {
			s, _, _ := ir.LayoutDims(l, v.Type().Shape)
			return int64(s)
		}
		sq, skv := seq(n.Args[0], lay.Q), seq(n.Args[1], lay.K)
		b := bound{1, skv, fmt.Sprintf("attention %s: kv_len is at least 1", label),
			fmt.Sprintf("attention %s: kv_len is at most the %d keys", label, skv)}
		if n.Attrs.Bool("causal", false) || n.Attrs.Int("window", 0) > 0 {
			if bounded[n.Args[0]] && l != nil && sq == int64(l.Max) {
				// The run's n queries: kv_len − n ≥ 0.
				return []argBound{{arg: 3, bound: b}, {arg: 3, length: -1, bound: bound{0, plan.NoMax,
					fmt.Sprintf("attention %s is causal: kv_len is at least the run's %s queries", label, l.Dim), ""}}}
			}
			b.lo = max(b.lo, sq)
			b.loWhy = fmt.Sprintf("attention %s is causal: kv_len is at least the %d queries", label, sq)
		}
		return []argBound{{arg: 3, bound: b}}
	}
	return nil
}

// affineOf is the affine form of output o of n, given its arguments' forms.
func affineOf(n *ir.Node, o int, pos map[*ir.Node]int, aff map[ir.Value]affine) affine {
	arg := func(i int) affine { return aff[n.Args[i]] }
	switch n.Op {
	case ir.Input:
		return affine{ok: true, terms: []int{pos[n]}}
	case ir.Const:
		x := n.Value
		if x == nil || x.NumElements() == 0 {
			return affine{}
		}
		v := x.Float64(0)
		for i := 1; i < x.NumElements(); i++ {
			if x.Float64(i) != v {
				return affine{}
			}
		}
		if v != math.Trunc(v) || math.Abs(v) > 1<<53 {
			return affine{}
		}
		return affine{ok: true, off: int64(v)}
	case ir.Reshape, ir.Expand:
		return arg(0)
	case ir.Cast:
		if n.Args[0].Type().DType.IsInt() {
			return arg(0)
		}
	case ir.Add:
		a, b := arg(0), arg(1)
		if !a.ok || !b.ok || a.length && b.length {
			return affine{}
		}
		terms := append(append([]int(nil), a.terms...), b.terms...)
		sort.Ints(terms)
		for i := 1; i < len(terms); i++ {
			if terms[i] == terms[i-1] {
				return affine{} // 2·x: not a sum with coefficients 1
			}
		}
		return affine{ok: true, terms: terms, length: a.length || b.length, off: satAdd(a.off, b.off)}
	case ir.Sub:
		a, b := arg(0), arg(1)
		if !a.ok || !b.ok || len(b.terms) > 0 || b.length {
			return affine{}
		}
		return affine{ok: true, terms: a.terms, length: a.length, off: satSub(a.off, b.off)}
	}
	return affine{}
}

func union(a, b []int) []int {
	out := append([]int(nil), a...)
	for _, x := range b {
		found := false
		for _, y := range out {
			found = found || x == y
		}
		if !found {
			out = append(out, x)
		}
	}
	sort.Ints(out)
	return out
}

func satAdd(a, b int64) int64 {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	}
	return s
}

func satSub(a, b int64) int64 {
	if b == math.MinInt64 {
		if a >= 0 {
			return math.MaxInt64
		}
		return a - b
	}
	return satAdd(a, -b)
}

func plural(n int64, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
