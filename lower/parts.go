package lower

import (
	"fmt"
	"hash/fnv"
	"sort"

	"github.com/vkc-project/vkc/internal/hostmem"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
)

// ─── Merged projections with column parts ──────────────────────────────────────────────────
//
// After merge-linears, a layer's Q, K and V (or gate and up) are one linear over concatenated
// weights followed by slices of its columns, and each slice by a rope, a cache write, a
// rope_cache_write or the SwiGLU product: a kernel and a barrier level each, plus slice copies
// wherever a slice is not a contiguous view (prefill). chooseParts gives such a linear column
// parts (kernels.Part): its kernel writes every slice's final value where it belongs (q rotated,
// k rotated into its cache row, v into its cache row, silu(gate)·up) and the slices and their
// consumers are no units of their own.
//
// The kernels store pairs of adjacent columns, so the weight's rows (and the bias) are laid out
// here, at compile time, so that each pair is adjacent: rope in mode half pairs features j and
// j + D/2 of a head, a gated product pairs gate row i with up row i (row-interleaved). The
// reordered weight is a folded value like the concatenation it is made from (named after it,
// shared by every function that reorders it alike), so quantized weights and the dequantization
// fallback see it as any other compile-time weight.
//
// A batched step over several sequences (rope_rows and cache_scatter at per-row positions and
// slots) gets the same parts: kernels.Problem.RowPos.
//
// What a part absorbs must be read by nothing else: a slice whose value other units read is
// stored as it is (a plain part), which still saves its copy. Parts need the position operands
// of every rope and cache write to be one value, compile-time weights (no reordering of an
// external weight file: ropes and pairs are then plain parts) and a template that takes the
// problem; otherwise the linear stays as it was.

// partsPlan is the lowering of one merged projection with column parts.
type partsPlan struct {
	gemm   *ir.Node
	parts  []plannedPart
	nodes  []*ir.Node // the absorbed nodes, in graph order
	pos    ir.Value
	hasPos bool
	// rowPos: the position is one per row (a batched step's rope_rows and cache_scatter,
	// kernels.Problem.RowPos), and slot the rows' slots when a cache part writes a state.
	rowPos  bool
	slot    ir.Value
	hasSlot bool
	reads   bool // a cache part of a function with a run-time length writes the run's rows
	prob    *kernels.Problem
	vals    []ir.Value // bound to prob.Args
	outs    []ir.Value // bound to prob.Outs
}

// plannedPart is one part with the graph values it reads and computes.
type plannedPart struct {
	part   kernels.Part
	src    []int // starts of the source columns in the linear's result (two for a pair)
	out    ir.Value
	state  ir.Value
	absorb []*ir.Node
}

// chooseParts finds the merged projections to lower with column parts.
func (fl *fnLowerer) chooseParts() {
	for _, n := range fl.f.Nodes {
		if (n.Op != ir.Linear && n.Op != ir.RMSNormLinear) || !fl.live[n] || fl.folds(n) || fl.isResult[n] {
			continue
		}
		if _, in := fl.absorb[n]; in {
			continue
		}
		pp := fl.planParts(n)
		if pp == nil {
			continue
		}
		if fl.parts == nil {
			fl.parts, fl.partOf = map[*ir.Node]*partsPlan{}, map[*ir.Node]*partsPlan{}
		}
		fl.parts[n] = pp
		for _, a := range pp.nodes {
			fl.partOf[a] = pp
		}
	}
}

// planParts returns the parts plan of linear n, or nil when it does not qualify.
func (fl *fnLowerer) planParts(n *ir.Node) *partsPlan {
	t := n.Type()
	if t.Shape.Rank() < 1 {
		return nil
	}
	N := t.Shape[t.Shape.Rank()-1]
	M := t.Shape.NumElements() / max(N, 1)
	wArg := 1
	if n.Op == ir.RMSNormLinear {
		wArg = 2
	}
	if lim := fl.l.pieceLimit(); lim > 0 && deviceBytes(n.Args[wArg].Type()) > lim {
		return nil // a weight cut into row pieces (split.go) has no kernel reading it whole
	}
	// Reordering needs the weight (and bias) at compile time, in the plan.
	reorder := fl.l.external == nil && fl.compileTime(n.Args[wArg])
	if len(n.Args) > wArg+1 {
		reorder = reorder && fl.compileTime(n.Args[wArg+1])
	}
	type span struct {
		start, end int
		s          *ir.Node
	}
	var spans []span
	// A linear read whole by one consumer (through reshapes) is one part: a projection of its
	// own whose rope or cache write is its epilogue (a merged projection's parts, unmerged).
	if cs := fl.consumers[n]; len(cs) == 1 && cs[0].Op != ir.Slice && N%2 == 0 {
		spans = append(spans, span{0, N, n})
	}
	for _, c := range fl.consumers[n] {
		if len(spans) == 1 && spans[0].s == n {
			break
		}
		if c.Op != ir.Slice || c.Args[0].Node != n || c.Attrs.Int("step", 1) != 1 {
			return nil
		}
		ax, err := ir.NormAxis(c.Attrs.Int("axis", 0), t.Shape.Rank())
		if err != nil || ax != t.Shape.Rank()-1 {
			return nil
		}
		s, e := ir.ClampSlice(N, c.Attrs.Int("start", 0), c.Attrs.Int("end", 0))
		if e <= s || (e-s)%2 != 0 {
			return nil
		}
		spans = append(spans, span{s, e, c})
	}
	sort.Slice(spans, func(a, b int) bool { return spans[a].start < spans[b].start })
	at := 0
	for _, sp := range spans {
		if sp.start != at {
			return nil // columns left out or read twice
		}
		at = sp.end
	}
	if at != N || (len(spans) < 2 && spans[0].s != n) {
		return nil
	}
	pp := &partsPlan{gemm: n}
	posOK := func(v ir.Value) bool {
		if !pp.hasPos {
			pp.pos, pp.hasPos = v, true
		}
		return pp.pos == v
	}
	// rowsOK takes a batched step's per-row position (and slot, for a cache_scatter): one
	// position value for every part, and one slot value.
	rowsOK := func(pos ir.Value, slot *ir.Value) bool {
		if pp.hasPos && !pp.rowPos || !posOK(pos) {
			return false
		}
		pp.rowPos = true
		if slot == nil {
			return true
		}
		if !pp.hasSlot {
			pp.slot, pp.hasSlot = *slot, true
		}
		return pp.slot == *slot
	}
	scalarPosOK := func(v ir.Value) bool { return !pp.rowPos && posOK(v) }
	// scatterOf is the cache_scatter that alone reads v (of node x), or nil.
	scatterOf := func(x *ir.Node) *ir.Node {
		if cs := fl.consumers[x]; len(cs) == 1 && !fl.isResult[x] && cs[0].Op == ir.CacheScatter && cs[0].Args[1].Node == x {
			return cs[0]
		}
		return nil
	}
	used := map[*ir.Node]bool{}
	gain := false
	for _, sp := range spans {
		s := sp.s
		if used[s] {
			continue
		}
		width := sp.end - sp.start
		plain := plannedPart{part: kernels.Part{Kind: kernels.PartStore, Cols: width}, src: []int{sp.start}, out: s.V(), absorb: []*ir.Node{s}}
		chain0 := []*ir.Node{s}
		if s == n {
			// The linear itself: its value is the part's (a plain part is the unfused linear).
			plain.absorb, chain0 = nil, nil
		}
		if fl.isResult[s] {
			pp.parts = append(pp.parts, plain)
			continue
		}
		// A pair: s and another slice of n are the only inputs of one pointwise group.
		if reorder {
			if q, a, b := fl.pairPart(s, M); q != nil {
				used[a], used[b] = true, true
				q.src = []int{startOf(a, N), startOf(b, N)}
				pp.parts = append(pp.parts, *q)
				gain = true
				continue
			}
		}
		// A chain of single-consumer reshapes to [M, ..., D], then a rope or a cache write.
		x, chain := s, chain0
		for len(fl.consumers[x]) == 1 && fl.consumers[x][0].Op == ir.Reshape && !fl.isResult[x] {
			x = fl.consumers[x][0]
			chain = append(chain, x)
		}
		xs := x.Type().Shape
		if len(fl.consumers[x]) != 1 || fl.isResult[x] || xs.Rank() < 2 || xs[0] != M {
			if s != n && !fl.sliceIsView(s) {
				gain = true // its copy goes
			}
			pp.parts = append(pp.parts, plain)
			continue
		}
		c := fl.consumers[x][0]
		d := xs[xs.Rank()-1]
		half := c.Attrs.String("mode", "half") == "half"
		scaling, _ := ir.RopeScalingOf(c.Attrs) // checked when the graph was built
		switch {
		case c.Op == ir.RopeRows && c.Args[0].Node == x && reorder && d%2 == 0:
			// A batched step's rope_rows, with the cache_scatter that alone reads it: the
			// rotated rows go to their slots' cells.
			rope := kernels.Part{Kind: kernels.PartRope, Cols: width, Head: d, Theta: c.Attrs.Float("theta", 10000), Half: half, Scaling: scaling}
			if sc := scatterOf(c); sc != nil && sc.Args[3] == c.Args[1] && !sc.Args[0].Type().DType.Quantized() && rowsOK(sc.Args[3], &sc.Args[2]) {
				rope.Cache = true
				pp.parts = append(pp.parts, plannedPart{part: rope, src: []int{sp.start}, out: sc.V(), state: sc.Args[0], absorb: append(chain, c, sc)})
				pp.reads = pp.reads || ir.NeedsLength(sc, fl.rows)
				gain = true
				continue
			}
			if rowsOK(c.Args[1], nil) {
				pp.parts = append(pp.parts, plannedPart{part: rope, src: []int{sp.start}, out: c.V(), absorb: append(chain, c)})
				gain = true
				continue
			}
		// A block-quantized cache (q8_0, q4_0) is not a part (see rope_cache_write's case below).
		case c.Op == ir.CacheScatter && c.Args[1].Node == x && !c.Args[0].Type().DType.Quantized() && rowsOK(c.Args[3], &c.Args[2]):
			pp.parts = append(pp.parts, plannedPart{part: kernels.Part{Kind: kernels.PartStore, Cols: width, Cache: true},
				src: []int{sp.start}, out: c.V(), state: c.Args[0], absorb: append(chain, c)})
			pp.reads = pp.reads || ir.NeedsLength(c, fl.rows)
			gain = true
			continue
		case c.Op == ir.Rope && c.Args[0].Node == x && reorder && d%2 == 0 && fl.ropeSeqAxis0(c) && scalarPosOK(c.Args[1]):
			pp.parts = append(pp.parts, plannedPart{part: kernels.Part{Kind: kernels.PartRope, Cols: width, Head: d,
				Theta: c.Attrs.Float("theta", 10000), Half: half, Scaling: scaling}, src: []int{sp.start}, out: c.V(), absorb: append(chain, c)})
			gain = true
			continue
		// A block-quantized cache (q8_0, q4_0) is not a part: a block needs its 32 values at
		// once, which a pair of columns does not have; its cache write stays a kernel.
		case c.Op == ir.RopeCacheWrite && c.Args[1].Node == x && reorder && d%2 == 0 && !c.Args[0].Type().DType.Quantized() && scalarPosOK(c.Args[2]):
			pp.parts = append(pp.parts, plannedPart{part: kernels.Part{Kind: kernels.PartRope, Cols: width, Head: d,
				Theta: c.Attrs.Float("theta", 10000), Half: half, Scaling: scaling, Cache: true}, src: []int{sp.start}, out: c.V(), state: c.Args[0],
				absorb: append(chain, c)})
			pp.reads = pp.reads || ir.NeedsLength(c, fl.rows)
			gain = true
			continue
		case c.Op == ir.CacheWrite && c.Args[1].Node == x && !c.Args[0].Type().DType.Quantized() && scalarPosOK(c.Args[2]):
			pp.parts = append(pp.parts, plannedPart{part: kernels.Part{Kind: kernels.PartStore, Cols: width, Cache: true},
				src: []int{sp.start}, out: c.V(), state: c.Args[0], absorb: append(chain, c)})
			pp.reads = pp.reads || ir.NeedsLength(c, fl.rows)
			gain = true
			continue
		}
		if s != n && !fl.sliceIsView(s) {
			gain = true
		}
		pp.parts = append(pp.parts, plain)
	}
	if !gain {
		return nil // every part would be a view that costs nothing already
	}
	if err := fl.buildParts(pp, wArg, N); err != nil {
		return nil
	}
	return pp
}

// startOf is the first column of slice s of a result of n columns.
func startOf(s *ir.Node, n int) int {
	st, _ := ir.ClampSlice(n, s.Attrs.Int("start", 0), s.Attrs.Int("end", 0))
	return st
}

// pairPart reports whether slice s and one other slice of the same linear are the two inputs of
// a pointwise group (of one result of their shape, reading nothing else) and returns the pair
// part with the slices that are the expression's inputs 0 and 1 (the even and odd columns).
func (fl *fnLowerer) pairPart(s *ir.Node, m int) (*plannedPart, *ir.Node, *ir.Node) {
	gi := -1
	for _, c := range fl.consumers[s] {
		g, in := fl.group[c]
		if !in || !fl.pointwise(c) || (gi >= 0 && g != gi) {
			return nil, nil, nil
		}
		gi = g
	}
	if gi < 0 {
		return nil, nil, nil
	}
	g := fl.groups[gi]
	if g.epilogue != nil || len(g.outputs) != 1 || len(g.inputs) != 2 || g.prob == nil || g.prob.Expr == nil {
		return nil, nil, nil
	}
	a, b := g.inputs[0], g.inputs[1]
	if (a.Node != s && b.Node != s) || a.Node == b.Node || a.Out != 0 || b.Out != 0 {
		return nil, nil, nil
	}
	for _, x := range []*ir.Node{a.Node, b.Node} {
		if x.Op != ir.Slice || x.Args[0].Node != s.Args[0].Node || fl.isResult[x] {
			return nil, nil, nil
		}
		for _, c := range fl.consumers[x] {
			if fl.group[c] != gi || !fl.pointwise(c) {
				return nil, nil, nil
			}
		}
	}
	out := g.outputs[0]
	if !a.Type().Equal(b.Type()) || !out.Type().Shape.Equal(a.Type().Shape) {
		return nil, nil, nil
	}
	f := a.Type().Shape[a.Type().Shape.Rank()-1]
	if out.Type().Shape.NumElements() != m*f {
		return nil, nil, nil
	}
	q := &plannedPart{part: kernels.Part{Kind: kernels.PartPair, Cols: 2 * f, Expr: g.prob.Expr}, out: out.V(),
		absorb: append([]*ir.Node{a.Node, b.Node}, g.members...)}
	return q, a.Node, b.Node
}

// ropeSeqAxis0 reports whether rope c counts positions along axis 0 (the rows of the linear).
func (fl *fnLowerer) ropeSeqAxis0(c *ir.Node) bool {
	ax, err := ir.NormAxis(c.Attrs.Int("seq_axis", 0), c.Type().Shape.Rank())
	return err == nil && ax == 0
}

// compileTime reports whether v is a parameter or a folded value, whose bytes lowering has.
func (fl *fnLowerer) compileTime(v ir.Value) bool {
	n := v.Node
	if n.Op == ir.Param {
		return fl.l.m.Weights[n.Name] != nil
	}
	return fl.folds(n) && fl.values[n] != nil && n.Op != ir.Const
}

// sliceIsView reports whether lowering would make slice s a view (sliceView's conditions,
// without its alignment check, which only makes more copies).
func (fl *fnLowerer) sliceIsView(s *ir.Node) bool {
	x := s.Args[0].Type()
	ax, err := ir.NormAxis(s.Attrs.Int("axis", 0), x.Shape.Rank())
	if err != nil || s.Attrs.Int("step", 1) != 1 {
		return false
	}
	for _, d := range x.Shape[:ax] {
		if d != 1 {
			return false
		}
	}
	return true
}

// buildParts orders the parts' columns, reorders the weight and bias rows to match, builds the
// problem and checks that a template takes it.
func (fl *fnLowerer) buildParts(pp *partsPlan, wArg, n int) error {
	g := pp.gemm
	var perm []int // kernel column → the linear's column
	for i := range pp.parts {
		q := &pp.parts[i]
		p := &q.part
		switch {
		case p.Kind == kernels.PartPair:
			for k := 0; k < p.Cols/2; k++ {
				perm = append(perm, q.src[0]+k, q.src[1]+k)
			}
		case p.Kind == kernels.PartRope && p.Half:
			h := p.Head / 2
			for head := 0; head < p.Cols/p.Head; head++ {
				for k := 0; k < h; k++ {
					perm = append(perm, q.src[0]+head*p.Head+k, q.src[0]+head*p.Head+h+k)
				}
			}
		default:
			for k := 0; k < p.Cols; k++ {
				perm = append(perm, q.src[0]+k)
			}
		}
	}
	if len(perm) != n {
		return fmt.Errorf("parts cover %d of %d columns", len(perm), n)
	}
	identity := true
	for i, c := range perm {
		identity = identity && i == c
	}
	pp.vals = append([]ir.Value(nil), g.Args...)
	if !identity {
		for _, a := range []int{wArg, wArg + 1} {
			if a >= len(g.Args) {
				continue
			}
			v, err := fl.reorderRows(g.Args[a], perm)
			if err != nil {
				return err
			}
			pp.vals[a] = v
		}
	}
	p := &kernels.Problem{Op: g.Op, Attrs: g.Attrs, NumOpArgs: len(g.Args), Pos: -1}
	for _, v := range pp.vals {
		p.Args = append(p.Args, v.Type())
	}
	if pp.hasPos {
		p.Pos = len(pp.vals)
		pp.vals = append(pp.vals, pp.pos)
		p.Args = append(p.Args, pp.pos.Type())
	}
	if pp.hasSlot {
		p.Slot, p.RowPos = len(pp.vals), true
		pp.vals = append(pp.vals, pp.slot)
		p.Args = append(p.Args, pp.slot.Type())
	}
	p.RowPos = pp.rowPos
	for i := range pp.parts {
		q := &pp.parts[i]
		q.part.Out = i
		if q.part.Cache {
			q.part.State = len(pp.vals)
			pp.vals = append(pp.vals, q.state)
			p.Args = append(p.Args, q.state.Type())
		}
		p.Parts = append(p.Parts, q.part)
		p.Outs = append(p.Outs, q.out.Type())
		pp.outs = append(pp.outs, q.out)
		pp.nodes = append(pp.nodes, q.absorb...)
	}
	sort.Slice(pp.nodes, func(a, b int) bool { return fl.pos[pp.nodes[a]] < fl.pos[pp.nodes[b]] })
	p.Rows = fl.problemRows(pp.vals, pp.outs, pp.reads)
	q, _, err := fl.dequantFallback(p, pp.vals)
	if err != nil {
		return err
	}
	if ch := fl.l.choose(q); ch.err != nil {
		return ch.err
	}
	pp.prob = p
	return nil
}

// maxRowPieces bounds the pieces of a reordered weight (a rope-interleaved Q/K projection has a
// piece per row: SmolLM2's are 768 rows; a gate/up pair interleaved for PartPair has one per row
// of both, 28672 in Llama 3.1 8B). Each piece is a slice header here and a file range in the
// plan (about 90 bytes in all); a weight of more rows than this is copied instead. The bound
// once was 1<<14, which copied every 8B layer's gate/up pair: 2.1 GiB of heap per function,
// the peak RSS of a static 8B compile at 2.1x the file (issue 22 asks at most 0.5x).
const maxRowPieces = 1 << 17

// reorderRows is v (a compile-time tensor whose leading axis has one row per column of a
// linear's result: a weight [N, K] or a bias [N]) with its rows in the order perm gives, as a
// folded value of its own.
func (fl *fnLowerer) reorderRows(v ir.Value, perm []int) (ir.Value, error) {
	src := v.Node
	var x *blob
	name := src.Name
	if src.Op == ir.Param {
		x = blobOf(fl.l.m.Weights[src.Name])
	} else {
		x = fl.values[src]
		name = x.name
		if name == "" {
			name = fl.l.constName(x)
		}
	}
	t := x.t
	rows := t.Shape[0]
	size := x.size()
	if rows != len(perm) || size%rows != 0 {
		return ir.Value{}, fmt.Errorf("%s: %d rows of %d bytes do not reorder as %d columns", name, rows, size, len(perm))
	}
	// The reordered rows are pieces of the source's bytes (rows that stay together are one
	// piece), copied only when the plan is written: a merged projection reordered for its parts
	// costs no memory of its own. Past maxRowPieces pieces it is copied into one buffer.
	row := size / rows
	var pieces [][]byte
	for _, r := range perm {
		pieces = x.slice(r*row, row, pieces)
	}
	if len(pieces) > maxRowPieces {
		if err := hostmem.Check("lower: "+name+" with its rows reordered for column parts", uint64(size)); err != nil {
			return ir.Value{}, err
		}
		pieces = [][]byte{(&blob{pieces: pieces}).bytes()}
	}
	h := fnv.New64a()
	for _, r := range perm {
		fmt.Fprintf(h, "%d,", r)
	}
	nb := &blob{t: t, pieces: pieces, name: fmt.Sprintf("%s.rows%012x", name, h.Sum64()&(1<<48-1))}
	// A node of its own, not in the graph: a folded value (static, live) that locOf and the
	// dequantization fallback read like the concatenation it is made from.
	n := &ir.Node{ID: -1, Op: ir.Concat, Args: []ir.Value{v}, Attrs: ir.Attrs{"axis": 0}, Outs: []ir.Type{t}, Name: nb.name, Rule: "column-parts"}
	fl.static[n], fl.live[n] = true, true
	fl.values[n] = nb
	return n.V(), nil
}

// replacedByParts reports whether every reader of compile-time node n is a linear with column
// parts that reads a reordered copy of it instead (so n itself is no weight of the plan).
func (fl *fnLowerer) replacedByParts(n *ir.Node) bool {
	if len(fl.parts) == 0 || fl.isResult[n] || len(fl.consumers[n]) == 0 {
		return false
	}
	for _, c := range fl.consumers[n] {
		pp, ok := fl.parts[c]
		if !ok {
			return false
		}
		for _, v := range pp.vals {
			if v.Node == n {
				return false
			}
		}
	}
	return true
}

// lowerParts adds the unit of a merged projection with column parts: its results are the values
// the absorbed nodes computed.
func (fl *fnLowerer) lowerParts(pp *partsPlan) error {
	nodes := append(append([]*ir.Node(nil), pp.nodes...), pp.gemm)
	return fl.addUnit(nodes, pp.prob, pp.vals, pp.outs)
}
