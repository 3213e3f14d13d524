package rules

import (
	"errors"
	"math"
	"slices"
	"strconv"

	"github.com/vkc-project/vkc/egraph"
	"github.com/vkc-project/vkc/ir"
)

// Go right-hand sides (`=> @name` in the rule files), for rewrites whose result needs computed
// attributes (an eps or a theta read from a constant, a composed permutation, the sizes of merged
// weights) or whose left side has too many optional parts to list as patterns (the attention and
// rope compositions). Each checks what it needs, adds the right side with addNode (types
// inferred first) and unions it with the match's root; anything that does not fit leaves the
// graph alone.

func (a *adapter) appliers() map[string]egraph.Applier {
	return map[string]egraph.Applier{
		"compose_transposes": egraph.ApplyFunc(a.composeTransposes),
		"transpose_split":    egraph.ApplyFunc(a.transposeSplit),
		"compose_slices":     egraph.ApplyFunc(a.composeSlices),
		"rmsnorm":            egraph.ApplyFunc(a.recogniseRMSNorm),
		"merge_linears":      egraph.ApplyFunc(a.mergeLinears),
		"attention":          egraph.ApplyFunc(a.recogniseAttention),
		"rope":               egraph.ApplyFunc(a.recogniseRope),
		"fold_batchnorm":     egraph.ApplyFunc(a.foldBatchNorm),
	}
}

// union adds the node built by add (unless it was ill-typed) and unions it with root.
func (a *adapter) union(root egraph.Id, rule string, id egraph.Id, err error) (bool, error) {
	if errors.Is(err, errIllTyped) {
		if a.skipped == nil {
			a.skipped = map[string]int{}
		}
		a.skipped[rule]++
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return a.g.Union(root, id, rule)
}

// find returns the first node of class id with operator op that accept takes (nil: any), with
// its decoded attributes.
func (a *adapter) find(id egraph.Id, op ir.Op, accept func(n egraph.Node, at ir.Attrs) bool) (egraph.Node, ir.Attrs, bool) {
	for _, n := range a.g.Nodes(id) {
		if n.Op != egraph.Op(op) {
			continue
		}
		at, err := a.decodeAttrs(op, n.Attr)
		if err != nil {
			continue
		}
		if accept == nil || accept(n, at) {
			return n, at, true
		}
	}
	return egraph.Node{}, nil, false
}

func (a *adapter) typeOf(id egraph.Id) ir.Type { return info(a.g, id).Type() }

// constOf returns the known constant value of a class.
func (a *adapter) constOf(id egraph.Id) *ir.Tensor { return info(a.g, id).Value }

// isArange reports whether class id is the constant [off, off+1, …] of dtype d and shape shape.
func (a *adapter) isArange(id egraph.Id, d ir.DType, off float64, shape ...int) bool {
	v := a.constOf(id)
	if v == nil || v.Type.DType != d || !v.Type.Shape.Equal(ir.Shape(shape)) {
		return false
	}
	for i := 0; i < v.NumElements(); i++ {
		if v.Float64(i) != float64(i)+off {
			return false
		}
	}
	return true
}

// isAxis reports whether attribute axis names the given (non-negative) axis of a rank-r tensor.
func isAxis(at ir.Attrs, name string, want, r int) bool {
	ax, err := ir.NormAxis(at.Int(name, 0), r)
	return err == nil && ax == want
}

// shortFloat returns the shortest decimal that rounds to v in dtype d, read back as float64: a
// constant stored as f32 or f16 1e-5 gives the attribute 1e-05, as a model writes it.
func shortFloat(v float64, d ir.DType) float64 {
	if !d.IsFloat() {
		return v
	}
	for p := 1; p <= 17; p++ {
		x, err := strconv.ParseFloat(strconv.FormatFloat(v, 'g', p, 64), 64)
		if err == nil && roundTo(d, x) == v {
			return x
		}
	}
	return v
}

// composeTransposes: transpose(transpose(x, q), p) is one transpose with perm q∘p, or x.
func (a *adapter) composeTransposes(g *egraph.EGraph, m egraph.Match, rule string) (bool, error) {
	ps, _ := m.Subst.Attr("?p")
	qs, _ := m.Subst.Attr("?q")
	x, _ := m.Subst.Class("?x")
	p, err1 := parseInts(ps)
	q, err2 := parseInts(qs)
	if err1 != nil || err2 != nil || len(p) != len(q) {
		return false, nil
	}
	r := make([]int, len(p))
	ident := true
	for i := range p {
		if p[i] < 0 || p[i] >= len(q) {
			return false, nil
		}
		r[i] = q[p[i]]
		ident = ident && r[i] == i
	}
	if ident {
		return g.Union(m.Roots[0], x, rule)
	}
	id, err := a.addNode(ir.Transpose, ir.Attrs{"perm": r}, x)
	return a.union(m.Roots[0], rule, id, err)
}

// transposeSplit: transpose[1,2,0] of x [a, m] reshaped to [a, q, r] (its last axis split, q·r =
// m) is xᵀ [m, a] reshaped to [q, r, a]: element (i, j, k) of both is x[k, i·r + j]. A
// projection's rows split into heads and moved to heads-first, features-first (K transposed)
// become the transpose of the projection, which matmul-transpose-out computes as the product
// with its operands swapped. The types alone decide: the root is [q, r, p] with p = a and
// q·r = m exactly when the reshape is that split.
func (a *adapter) transposeSplit(g *egraph.EGraph, m egraph.Match, rule string) (bool, error) {
	x, _ := m.Subst.Class("?x")
	xt, rt := a.typeOf(x).Shape, a.typeOf(m.Roots[0]).Shape
	if xt.Rank() != 2 || rt.Rank() != 3 || rt[2] != xt[0] || rt[0]*rt[1] != xt[1] {
		return false, nil
	}
	t, err := a.addNode(ir.Transpose, ir.Attrs{"perm": []int{1, 0}}, x)
	if err != nil {
		return a.union(m.Roots[0], rule, t, err)
	}
	id, err := a.addNode(ir.Reshape, ir.Attrs{"shape": []int{rt[0], rt[1], rt[2]}}, t)
	return a.union(m.Roots[0], rule, id, err)
}

// composeSlices: a step-1 slice of a step-1 slice along the same axis is one slice (the merged
// q/k/v linear is sliced into QK then Q when QKV grew from QK).
func (a *adapter) composeSlices(g *egraph.EGraph, m egraph.Match, rule string) (bool, error) {
	x, _ := m.Subst.Class("?x")
	attr := func(v egraph.Var) (int, bool) {
		s, ok := m.Subst.Attr(v)
		if !ok {
			return 0, false
		}
		n, err := strconv.Atoi(s)
		return n, err == nil
	}
	ao, ok1 := attr("?a")
	ai, ok6 := attr("?b")
	s1, ok2 := attr("?s1")
	e1, ok3 := attr("?e1")
	s2, ok4 := attr("?s2")
	e2, ok5 := attr("?e2")
	xt := a.typeOf(x)
	ax, err := ir.NormAxis(ai, xt.Shape.Rank())
	ax2, err2 := ir.NormAxis(ao, xt.Shape.Rank())
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || err != nil || err2 != nil || ax != ax2 {
		return false, nil
	}
	if s1 < 0 || s2 < 0 || e1 < 0 || e2 < 0 {
		// Bounds counted from the end stay as written: along a run-time length the end is
		// the run's (ir.LastRows), which the capacity's shape does not know.
		return false, nil
	}
	is, ie := ir.ClampSlice(xt.Shape[ax], s2, e2)
	os, oe := ir.ClampSlice(ie-is, s1, e1)
	if oe <= os {
		return false, nil
	}
	av, _ := m.Subst.Attr("?a")
	axis, _ := strconv.Atoi(av)
	id, err := a.addNode(ir.Slice, ir.Attrs{"axis": axis, "start": is + os, "end": is + oe}, x)
	return a.union(m.Roots[0], rule, id, err)
}

// recogniseRMSNorm: (x · rsqrt(mean(x·x) + eps)) · w with a constant eps and w of the row's width
// is rmsnorm[eps](x, w); eps is read from the constant in its dtype's shortest spelling.
func (a *adapter) recogniseRMSNorm(g *egraph.EGraph, m egraph.Match, rule string) (bool, error) {
	x, _ := m.Subst.Class("?x")
	w, _ := m.Subst.Class("?w")
	e, _ := m.Subst.Class("?eps")
	v, d, ok := scalarValue(g, e)
	if !ok {
		return false, nil
	}
	id, err := a.addNode(ir.RMSNorm, ir.Attrs{"eps": shortFloat(v, d)}, x, w)
	return a.union(m.Roots[0], rule, id, err)
}

// weightParts returns the parameter classes a linear's weight (rank 2) or bias (rank 1)
// concatenates along axis 0: the class itself when it is a parameter, or the parts of a
// concat[axis=0] of parameters.
func (a *adapter) weightParts(w egraph.Id, rank int) []egraph.Id {
	w = a.g.Find(w)
	for _, n := range a.g.Nodes(w) {
		if n.Op == egraph.Op(ir.Param) {
			return []egraph.Id{w}
		}
	}
	if n, _, ok := a.find(w, ir.Concat, func(n egraph.Node, at ir.Attrs) bool { return isAxis(at, "axis", 0, rank) }); ok {
		var parts []egraph.Id
		for _, c := range n.Children {
			p := a.weightParts(c, rank)
			if len(p) != 1 {
				return nil
			}
			parts = append(parts, p[0])
		}
		return parts
	}
	return nil
}

// mergeLinears: two linears of one input, linear(x, W1[, b1]) and linear(x, W2[, b2]), are
// slices of linear(x, concat(W1, W2)[, concat(b1, b2)]) along the output axis. Weights and biases
// are parameters (or concatenations of them from an earlier merge), so the lowering stage
// concatenates them once at compile time. To keep the number of merged forms linear rather than
// exponential, W2 must be one parameter added after every part of W1: Q,K,V gives QK, QV, KV and
// QKV, never KQ.
func (a *adapter) mergeLinears(g *egraph.EGraph, m egraph.Match, rule string) (bool, error) {
	x, _ := m.Subst.Class("?x")
	w1, _ := m.Subst.Class("?w1")
	w2, _ := m.Subst.Class("?w2")
	p1, p2 := a.weightParts(w1, 2), a.weightParts(w2, 2)
	if len(p1) == 0 || len(p2) != 1 || slices.Contains(p1, p2[0]) {
		return false, nil
	}
	for _, p := range p1 {
		if p >= p2[0] {
			return false, nil
		}
	}
	t1, t2 := a.typeOf(w1), a.typeOf(w2)
	if t1.Shape.Rank() != 2 || t2.Shape.Rank() != 2 || t1.DType != t2.DType || t1.Shape[1] != t2.Shape[1] {
		return false, nil
	}
	cat, err := a.addNode(ir.Concat, ir.Attrs{"axis": 0}, append(slices.Clone(p1), p2[0])...)
	if err != nil {
		return a.union(m.Roots[0], rule, 0, err)
	}
	args := []egraph.Id{x, cat}
	if b1, ok := m.Subst.Class("?b1"); ok {
		b2, _ := m.Subst.Class("?b2")
		q1, q2 := a.weightParts(b1, 1), a.weightParts(b2, 1)
		if len(q1) != len(p1) || len(q2) != 1 {
			return false, nil
		}
		bcat, err := a.addNode(ir.Concat, ir.Attrs{"axis": 0}, append(slices.Clone(q1), q2[0])...)
		if err != nil {
			return a.union(m.Roots[0], rule, 0, err)
		}
		args = append(args, bcat)
	}
	lin, err := a.addNode(ir.Linear, nil, args...)
	if err != nil {
		return a.union(m.Roots[0], rule, 0, err)
	}
	n1, n2 := t1.Shape[0], t2.Shape[0]
	s1, err := a.addNode(ir.Slice, ir.Attrs{"axis": -1, "start": 0, "end": n1}, lin)
	c1, err := a.union(m.Roots[0], rule, s1, err)
	if err != nil {
		return c1, err
	}
	s2, err := a.addNode(ir.Slice, ir.Attrs{"axis": -1, "start": n1, "end": n1 + n2}, lin)
	c2, err := a.union(m.Roots[1], rule, s2, err)
	return c1 || c2, err
}

// unrepeat undoes the grouped-query expansion Decompose writes for k and v:
// reshape[hq,s,d](expand[hkv,g,s,d](reshape[hkv,1,s,d](x))) is x repeated g times per head. It
// returns x and g, or the class itself and 1.
func (a *adapter) unrepeat(id egraph.Id) []struct {
	x egraph.Id
	g int
} {
	type rep = struct {
		x egraph.Id
		g int
	}
	out := []rep{{a.g.Find(id), 1}}
	t := a.typeOf(id)
	if t.Shape.Rank() != 3 {
		return out
	}
	for _, r1 := range a.g.Nodes(id) {
		if r1.Op != egraph.Op(ir.Reshape) {
			continue
		}
		for _, e := range a.g.Nodes(r1.Children[0]) {
			if e.Op != egraph.Op(ir.Expand) {
				continue
			}
			es := a.typeOf(r1.Children[0]).Shape
			if es.Rank() != 4 || es[0]*es[1] != t.Shape[0] || es[2] != t.Shape[1] || es[3] != t.Shape[2] {
				continue
			}
			for _, r0 := range a.g.Nodes(e.Children[0]) {
				if r0.Op != egraph.Op(ir.Reshape) {
					continue
				}
				src := r0.Children[0]
				ss := a.typeOf(src).Shape
				rs := a.typeOf(e.Children[0]).Shape
				if ss.Rank() == 3 && ss[0] == es[0] && ss[1] == es[2] && ss[2] == es[3] && rs.Rank() == 4 && rs[1] == 1 {
					out = append([]rep{{a.g.Find(src), es[1]}}, out...)
				}
			}
		}
	}
	return out
}

// attnScores is what peeling the masks off an attention's scores finds.
type attnScores struct {
	q, k           egraph.Id
	kT             bool // k is K transposed, [heads, dim, seq] (the scores' matmul has tb=false)
	scale          float64
	kvLen          egraph.Id
	hasLen, causal bool
	window         int
	qpos           egraph.Id // the query positions the causal and window masks compare with
	hasQpos        bool
}

// peelScores finds, under where(mask, ·, −Inf) layers, the scaled scores matmul(q, k, tb)·scale,
// or matmul(q, kᵀ)·scale with K given transposed (tb=false: k_layout hds).
func (a *adapter) peelScores(id egraph.Id, acc attnScores, depth int) (attnScores, bool) {
	if depth > 4 {
		return acc, false
	}
	for _, n := range a.g.Nodes(id) {
		switch n.Op {
		case egraph.Op(ir.Mul):
			v, d, ok := scalarValue(a.g, n.Children[1])
			if !ok {
				continue
			}
			mm, mat, ok := a.find(n.Children[0], ir.Matmul, func(_ egraph.Node, at ir.Attrs) bool {
				return !at.Bool("ta", false)
			})
			if !ok || a.typeOf(mm.Children[0]).Shape.Rank() != 3 {
				continue
			}
			acc.q, acc.k, acc.scale = a.g.Find(mm.Children[0]), mm.Children[1], shortFloat(v, d)
			acc.kT = !mat.Bool("tb", false)
			return acc, true
		case egraph.Op(ir.Where):
			v, _, ok := scalarValue(a.g, n.Children[2])
			if !ok || !math.IsInf(v, -1) {
				continue
			}
			next, ok := a.classifyMask(n.Children[0], acc)
			if !ok {
				continue
			}
			if r, ok := a.peelScores(n.Children[1], next, depth+1); ok {
				return r, true
			}
		}
	}
	return acc, false
}

// classifyMask recognises one of Decompose's masks: key j < kv_len, j ≤ p (causal), or
// j > p − window, with j a constant arange over the keys.
func (a *adapter) classifyMask(cond egraph.Id, acc attnScores) (attnScores, bool) {
	keyRange := func(id egraph.Id) bool {
		t := a.typeOf(id)
		return t.Shape.Rank() == 1 && a.isArange(id, ir.I32, 0, t.Shape[0])
	}
	for _, n := range a.g.Nodes(cond) {
		if len(n.Children) != 2 || !keyRange(n.Children[0]) {
			continue
		}
		switch n.Op {
		case egraph.Op(ir.Lt):
			if !acc.hasLen && a.typeOf(n.Children[1]).Shape.NumElements() == 1 {
				acc.hasLen, acc.kvLen = true, a.g.Find(n.Children[1])
				return acc, true
			}
		case egraph.Op(ir.Le):
			if !acc.causal && (!acc.hasQpos || a.g.Find(n.Children[1]) == acc.qpos) {
				acc.causal, acc.qpos, acc.hasQpos = true, a.g.Find(n.Children[1]), true
				return acc, true
			}
		case egraph.Op(ir.Gt):
			sub, _, ok := a.find(n.Children[1], ir.Sub, nil)
			if !ok {
				continue
			}
			w, _, ok := scalarValue(a.g, sub.Children[1])
			if !ok || w <= 0 || acc.window != 0 || (acc.hasQpos && a.g.Find(sub.Children[0]) != acc.qpos) {
				continue
			}
			acc.window, acc.qpos, acc.hasQpos = int(w), a.g.Find(sub.Children[0]), true
			return acc, true
		}
	}
	return acc, false
}

// checkQpos verifies the query positions of the causal/window masks: arange(sq) + (kv_len − sq)
// with a kv_len, else the constant skv − sq + i.
func (a *adapter) checkQpos(s attnScores, sq, skv int) bool {
	if !s.hasQpos {
		return true
	}
	if !s.hasLen {
		return a.isArange(s.qpos, ir.I32, float64(skv-sq), sq, 1)
	}
	for _, n := range a.g.Nodes(s.qpos) {
		if n.Op != egraph.Op(ir.Add) || !a.isArange(n.Children[0], ir.I32, 0, sq, 1) {
			continue
		}
		for _, sub := range a.g.Nodes(n.Children[1]) {
			if sub.Op != egraph.Op(ir.Sub) || a.g.Find(sub.Children[0]) != s.kvLen {
				continue
			}
			if v, _, ok := scalarValue(a.g, sub.Children[1]); ok && v == float64(sq) {
				return true
			}
		}
	}
	return false
}

// recogniseAttention: matmul(softmax(masked scores), v) with the scores, masks and grouped-query
// expansion that Decompose writes is attention over heads-first tensors (layout hsd); the
// layout rules then fold the transposes of an shd model into the op.
func (a *adapter) recogniseAttention(g *egraph.EGraph, m egraph.Match, rule string) (bool, error) {
	sc, _ := m.Subst.Class("?s")
	vr, _ := m.Subst.Class("?vr")
	s, ok := a.peelScores(sc, attnScores{}, 0)
	if !ok {
		return false, nil
	}
	qt := a.typeOf(s.q)
	if qt.Shape.Rank() != 3 {
		return false, nil
	}
	hq, sq := qt.Shape[0], qt.Shape[1]
	for _, k := range a.unrepeat(s.k) {
		for _, v := range a.unrepeat(vr) {
			kt, vt := a.typeOf(k.x), a.typeOf(v.x)
			if k.g != v.g || kt.Shape.Rank() != 3 || vt.Shape.Rank() != 3 || kt.Shape[0]*k.g != hq || vt.Shape[0] != kt.Shape[0] {
				continue
			}
			kl, skv := "hsd", kt.Shape[1]
			if s.kT {
				kl, skv = "hds", kt.Shape[2]
			}
			if !a.checkQpos(s, sq, skv) {
				return false, nil
			}
			at := ir.Attrs{"scale": s.scale, "causal": s.causal, "window": s.window, "layout": "hsd", "k_layout": kl}
			args := []egraph.Id{s.q, k.x, v.x}
			if s.hasLen {
				args = append(args, s.kvLen)
			}
			id, err := a.addNode(ir.Attention, at, args...)
			return a.union(m.Roots[0], rule, id, err)
		}
	}
	return false, nil
}

// ropeTable is what the cos/sin side of a rope composition gives: the run-time position, the
// sequence length and axis, and theta.
type ropeTable struct {
	pos   egraph.Id
	theta float64
	scale ir.RopeScaling
	axis  int
}

// recogniseRope: x·cos + rotate(x)·sin with Decompose's rotate (half or interleaved) and its
// cos/sin tables of (arange(s) + pos) ⊗ inv_freq, inv_freq the table of some theta, is
// rope[theta, mode, seq_axis](x, pos).
func (a *adapter) recogniseRope(g *egraph.EGraph, m egraph.Match, rule string) (bool, error) {
	x, _ := m.Subst.Class("?x")
	rot, _ := m.Subst.Class("?rot")
	cs, _ := m.Subst.Class("?cs")
	sn, _ := m.Subst.Class("?sn")
	xt := a.typeOf(x)
	r := xt.Shape.Rank()
	if r < 2 || !xt.DType.IsFloat() || xt.Shape[r-1]%2 != 0 {
		return false, nil
	}
	mode := ""
	switch {
	case a.isRotateHalf(rot, x, xt):
		mode = "half"
	case a.isRotateInterleaved(rot, x, xt):
		mode = "interleaved"
	default:
		return false, nil
	}
	t, ok := a.ropeTables(cs, sn, xt, mode == "half")
	if !ok {
		return false, nil
	}
	at := t.scale.Attrs()
	at["theta"], at["mode"], at["seq_axis"] = t.theta, mode, t.axis
	id, err := a.addNode(ir.Rope, at, x, t.pos)
	return a.union(m.Roots[0], rule, id, err)
}

// sliceOf reports whether class id holds slice[axis=-1, start, end, step](x).
func (a *adapter) sliceOf(id, x egraph.Id, r, start, end, step int) bool {
	_, _, ok := a.find(id, ir.Slice, func(n egraph.Node, at ir.Attrs) bool {
		return a.g.Find(n.Children[0]) == a.g.Find(x) && isAxis(at, "axis", r-1, r) &&
			at.Int("start", 0) == start && at.Int("end", 0) == end && at.Int("step", 1) == step
	})
	return ok
}

// isRotateHalf: concat[axis=-1](neg(x[..., h:]), x[..., :h]).
func (a *adapter) isRotateHalf(rot, x egraph.Id, xt ir.Type) bool {
	r := xt.Shape.Rank()
	d := xt.Shape[r-1]
	h := d / 2
	_, _, ok := a.find(rot, ir.Concat, func(n egraph.Node, at ir.Attrs) bool {
		if len(n.Children) != 2 || !isAxis(at, "axis", r-1, r) || !a.sliceOf(n.Children[1], x, r, 0, h, 1) {
			return false
		}
		neg, _, ok := a.find(n.Children[0], ir.Neg, nil)
		return ok && a.sliceOf(neg.Children[0], x, r, h, d, 1)
	})
	return ok
}

// isRotateInterleaved: reshape[x.shape](concat[axis=-1](neg(odd), even)) with even and odd the
// step-2 slices of x reshaped to [..., h, 1].
func (a *adapter) isRotateInterleaved(rot, x egraph.Id, xt ir.Type) bool {
	r := xt.Shape.Rank()
	d := xt.Shape[r-1]
	pairSlice := func(id egraph.Id, start int) bool {
		_, _, ok := a.find(id, ir.Reshape, func(n egraph.Node, _ ir.Attrs) bool {
			return a.sliceOf(n.Children[0], x, r, start, d, 2)
		})
		return ok
	}
	_, _, ok := a.find(rot, ir.Reshape, func(n egraph.Node, _ ir.Attrs) bool {
		ct := a.typeOf(n.Children[0])
		if ct.Shape.Rank() != r+1 {
			return false
		}
		_, _, ok := a.find(n.Children[0], ir.Concat, func(c egraph.Node, at ir.Attrs) bool {
			if len(c.Children) != 2 || !isAxis(at, "axis", r, r+1) || !pairSlice(c.Children[1], 0) {
				return false
			}
			neg, _, ok := a.find(c.Children[0], ir.Neg, nil)
			return ok && pairSlice(neg.Children[0], 1)
		})
		return ok
	})
	return ok
}

// ropeTables checks cs = reshape(cos(emb)) and sn = reshape(sin(emb)) (each possibly cast to
// x's dtype) over one emb, and reads the position and theta from emb.
func (a *adapter) ropeTables(cs, sn egraph.Id, xt ir.Type, half bool) (ropeTable, bool) {
	r := xt.Shape.Rank()
	d := xt.Shape[r-1]
	h := d / 2
	trig := func(id egraph.Id, op ir.Op) []egraph.Id { // the emb classes under reshape(cast?(op(emb)))
		var out []egraph.Id
		for _, rs := range a.g.Nodes(id) {
			if rs.Op != egraph.Op(ir.Reshape) {
				continue
			}
			inner := []egraph.Id{rs.Children[0]}
			if c, _, ok := a.find(rs.Children[0], ir.Cast, nil); ok {
				inner = append(inner, c.Children[0])
			}
			for _, in := range inner {
				for _, n := range a.g.Nodes(in) {
					if n.Op == egraph.Op(op) {
						out = append(out, a.g.Find(n.Children[0]))
					}
				}
			}
		}
		return out
	}
	bshape := a.typeOf(cs).Shape
	if bshape.Rank() != r || bshape[r-1] != d || !a.typeOf(sn).Shape.Equal(bshape) {
		return ropeTable{}, false
	}
	for _, emb := range trig(cs, ir.Cos) {
		if !slices.Contains(trig(sn, ir.Sin), emb) {
			continue
		}
		et := a.typeOf(emb).Shape
		if et.Rank() != 2 || et[1] != d {
			continue
		}
		s := et[0]
		axis := -1
		for i := 0; i < r-1; i++ {
			if bshape[i] == s && xt.Shape[i] == s {
				axis = i
				break
			}
		}
		if axis < 0 {
			continue
		}
		for i := 0; i < r-1; i++ {
			if i != axis && bshape[i] != 1 {
				axis = -1
			}
		}
		if axis < 0 {
			continue
		}
		for _, ang := range a.embAngles(emb, s, h, half) {
			if t, ok := a.angles(ang, s, h, d); ok {
				t.axis = axis
				return t, true
			}
		}
	}
	return ropeTable{}, false
}

// embAngles returns the [s, h] angle classes emb duplicates: concat[axis=1](ang, ang) for half,
// reshape[s,d](concat[axis=2](a3, a3)) with a3 = reshape[s,h,1](ang) for interleaved.
func (a *adapter) embAngles(emb egraph.Id, s, h int, half bool) []egraph.Id {
	var out []egraph.Id
	if half {
		for _, n := range a.g.Nodes(emb) {
			if n.Op == egraph.Op(ir.Concat) && len(n.Children) == 2 && a.g.Find(n.Children[0]) == a.g.Find(n.Children[1]) {
				if at, err := a.decodeAttrs(ir.Concat, n.Attr); err == nil && isAxis(at, "axis", 1, 2) {
					out = append(out, a.g.Find(n.Children[0]))
				}
			}
		}
		return out
	}
	for _, rs := range a.g.Nodes(emb) {
		if rs.Op != egraph.Op(ir.Reshape) {
			continue
		}
		for _, c := range a.g.Nodes(rs.Children[0]) {
			if c.Op != egraph.Op(ir.Concat) || len(c.Children) != 2 || a.g.Find(c.Children[0]) != a.g.Find(c.Children[1]) {
				continue
			}
			if at, err := a.decodeAttrs(ir.Concat, c.Attr); err != nil || !isAxis(at, "axis", 2, 3) {
				continue
			}
			for _, r3 := range a.g.Nodes(c.Children[0]) {
				if r3.Op == egraph.Op(ir.Reshape) && a.typeOf(r3.Children[0]).Shape.Equal(ir.Shape{s, h}) {
					out = append(out, a.g.Find(r3.Children[0]))
				}
			}
		}
	}
	return out
}

// angles checks ang = reshape[s,1](arange_f32(s) + cast_f32(pos)) · inv_freq and recovers theta
// from inv_freq = theta^(-2i/d) (every entry must match in f32).
func (a *adapter) angles(ang egraph.Id, s, h, d int) (ropeTable, bool) {
	for _, mul := range a.g.Nodes(ang) {
		if mul.Op != egraph.Op(ir.Mul) {
			continue
		}
		inv := a.constOf(mul.Children[1])
		if inv == nil || inv.Type.DType != ir.F32 || !inv.Type.Shape.Equal(ir.Shape{h}) {
			continue
		}
		theta, scale, ok := ropeFreqsOf(inv, d)
		if !ok {
			continue
		}
		for _, rs := range a.g.Nodes(mul.Children[0]) {
			if rs.Op != egraph.Op(ir.Reshape) || !a.typeOf(rs.Children[0]).Shape.Equal(ir.Shape{s}) {
				continue
			}
			for _, add := range a.g.Nodes(rs.Children[0]) {
				if add.Op != egraph.Op(ir.Add) || !a.isArange(add.Children[0], ir.F32, 0, s) {
					continue
				}
				if c, _, ok := a.find(add.Children[1], ir.Cast, nil); ok {
					pt := a.typeOf(c.Children[0])
					if pt.DType.IsInt() && pt.Shape.NumElements() == 1 {
						return ropeTable{pos: a.g.Find(c.Children[0]), theta: theta, scale: scale}, true
					}
				}
			}
		}
	}
	return ropeTable{}, false
}

// ropeFreqsOf recovers theta and the frequency scaling from an f32 inv_freq table of a rotary
// dimension d: unscaled (thetaOf), or linear or llama3 (ir.FitRopeScaling, every entry equal in
// f32) with theta read from the ratio of the first two entries, which neither scaling changes
// (linear divides both by factor; llama3 keeps the highest frequencies). A llama3 table with
// fewer than two blended frequencies is not recognised: the composition then stays as written.
func ropeFreqsOf(inv *ir.Tensor, d int) (float64, ir.RopeScaling, bool) {
	if theta, ok := thetaOf(inv, d); ok {
		return theta, ir.RopeScaling{Type: ir.RopeScalingNone, Factor: 1}, true
	}
	h := inv.NumElements()
	table := make([]float64, h)
	for i := range table {
		if table[i] = inv.Float64(i); !(table[i] > 0) {
			return 0, ir.RopeScaling{}, false
		}
	}
	if h == 1 {
		// One frequency, theta^0 = 1 for every theta: the default theta and a linear factor.
		sc, ok := ir.FitRopeScaling(table, 10000, d, 0)
		return 10000, sc, ok
	}
	// theta from two entries that one scaling treats alike: the ratio of entries i < j is
	// theta^(-2(j-i)/d) when both are kept or both divided by factor (linear scales all alike;
	// llama3 keeps the first and divides the last). Far-apart entries give theta best.
	seen := map[float64]bool{}
	for _, pr := range ropePairs(h) {
		raw := math.Pow(table[pr[1]]/table[pr[0]], -float64(d)/float64(2*(pr[1]-pr[0])))
		for _, theta := range []float64{math.Round(raw), shortFloat(raw, ir.F32)} {
			if !(theta > 0) || math.IsInf(theta, 0) || seen[theta] {
				continue
			}
			seen[theta] = true
			if sc, ok := ir.FitRopeScaling(table, theta, d, 0); ok && sc.Type != ir.RopeScalingNone {
				return theta, sc, true
			}
		}
	}
	return 0, ir.RopeScaling{}, false
}

// ropePairs are the entry pairs (0, j) and (i, h−1) of an h-entry frequency table, farthest
// apart first.
func ropePairs(h int) [][2]int {
	var out [][2]int
	for k := h - 1; k >= 1; k-- {
		out = append(out, [2]int{0, k})
		if k < h-1 {
			out = append(out, [2]int{h - 1 - k, h - 1})
		}
	}
	return out
}

// thetaOf recovers theta from an f32 inv_freq table of a rotary dimension d: theta =
// inv[1]^(-d/2), rounded to an integer when the integer reproduces the table. A one-entry
// table fits every theta; the default 10000 is returned.
func thetaOf(inv *ir.Tensor, d int) (float64, bool) {
	h := inv.NumElements()
	if inv.Float64(0) != 1 {
		return 0, false
	}
	if h == 1 {
		return 10000, true
	}
	raw := math.Pow(inv.Float64(1), -float64(d)/2)
	for _, theta := range []float64{math.Round(raw), shortFloat(raw, ir.F32), raw} {
		if theta <= 0 {
			continue
		}
		ok := true
		for i := 0; i < h && ok; i++ {
			ok = inv.Float64(i) == roundTo(ir.F32, 1/math.Pow(theta, float64(2*i)/float64(d)))
		}
		if ok {
			return theta, true
		}
	}
	return 0, false
}

// foldBatchNorm: batch_norm(conv2d(x, w[, b]), scale, beta, mean, var) in one layout is
// conv2d(x, w·k, (b − mean)·k + beta) with k = scale·rsqrt(var + eps) per output channel, w·k
// scaling each output channel's filter (k reshaped to [cout, 1, 1, 1]). When the weights and
// statistics are parameters the new weights and bias are computed once at compile time.
func (a *adapter) foldBatchNorm(g *egraph.EGraph, m egraph.Match, rule string) (bool, error) {
	x, _ := m.Subst.Class("?x")
	w, _ := m.Subst.Class("?w")
	sc, _ := m.Subst.Class("?sc")
	beta, _ := m.Subst.Class("?bi")
	mean, _ := m.Subst.Class("?m")
	vr, _ := m.Subst.Class("?v")
	get := func(v egraph.Var) string { s, _ := m.Subst.Attr(v); return s }
	if get("?l1") != get("?l2") {
		return false, nil // the norm's channels are not the convolution's
	}
	eps, err := strconv.ParseFloat(get("?e"), 64)
	strides, err1 := parseInts(get("?s"))
	pads, err2 := parseInts(get("?p"))
	dil, err3 := parseInts(get("?d"))
	groups, err4 := strconv.Atoi(get("?g"))
	if err != nil || err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		return false, nil
	}
	wt := a.typeOf(w)
	dt, cout := wt.DType, wt.Shape[0]
	cast := func(id egraph.Id) (egraph.Id, error) {
		if a.typeOf(id).DType == dt {
			return id, nil
		}
		return a.addNode(ir.Cast, ir.Attrs{"to": dt.String()}, id)
	}
	var ids [4]egraph.Id
	for i, id := range []egraph.Id{sc, beta, mean, vr} {
		if ids[i], err = cast(id); err != nil {
			return a.union(m.Roots[0], rule, 0, err)
		}
	}
	epsID, err := a.addConst(ir.TensorFromFloat64s(ir.T(dt), []float64{eps}))
	if err != nil {
		return false, err
	}
	step := func(op ir.Op, at ir.Attrs, args ...egraph.Id) egraph.Id {
		if err != nil {
			return 0
		}
		var id egraph.Id
		id, err = a.addNode(op, at, args...)
		return id
	}
	k := step(ir.Mul, nil, ids[0], step(ir.Rsqrt, nil, step(ir.Add, nil, ids[3], epsID)))
	w2 := step(ir.Mul, nil, w, step(ir.Reshape, ir.Attrs{"shape": []int{cout, 1, 1, 1}}, k))
	var b2 egraph.Id
	if b, ok := m.Subst.Class("?b"); ok {
		bc, cerr := cast(b)
		if cerr != nil {
			return a.union(m.Roots[0], rule, 0, cerr)
		}
		b2 = step(ir.Add, nil, step(ir.Mul, nil, step(ir.Sub, nil, bc, ids[2]), k), ids[1])
	} else {
		b2 = step(ir.Sub, nil, ids[1], step(ir.Mul, nil, ids[2], k))
	}
	conv := step(ir.Conv2d, ir.Attrs{"strides": strides, "pads": pads, "dilations": dil, "groups": groups, "layout": get("?l2")}, x, w2, b2)
	return a.union(m.Roots[0], rule, conv, err)
}
