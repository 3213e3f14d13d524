package kernels

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
)

// Column parts: a matmul-family result that is never stored whole.
//
// A merged projection (Q, K and V, or gate and up, as one linear over concatenated weights) is
// followed in the graph by slices of its columns, and each slice by a rope, a cache write or a
// gated activation: each of those a kernel and a barrier level of its own. With Problem.Parts
// the linear's kernel writes each range of columns to its own result through its own epilogue
// (what ir would compute for that slice and its consumer), so the slices, rotations, cache
// writes and the SwiGLU product cost no dispatch at all: "an epilogue that writes more than one
// place".
//
// Kernels deliver the result in pairs of adjacent columns (2i, 2i+1): the two elements a rope
// rotates together, or the gate and up values a gated activation multiplies. The lowering stage
// lays the weight's rows out at compile time so that the pairs are adjacent (a rope in "half"
// mode pairs features j and j + D/2; a gated activation pairs gate row i with up row i), and
// the part says how to put each pair back where ir's order has it. Rows of the result are the
// rows of x (the sequence positions: a rope's seq_axis is 0, a cache write writes row s at
// pos + s).
//
// With Problem.RowPos (a batched step over several sequences) each row has a position of its own,
// pos[r], and a cache part writes row r into the slot slot[r] of a [slots, ctx, ...] state: the
// rope_rows and cache_scatter of such a step become epilogues the same way.
//
// Limits: linear and rmsnorm_linear only (the weight [N, K] is what is reordered), no batch
// dims, even part widths, no Expr (Problem.Expr) besides the parts' own.

// PartKind says how a part stores its columns.
type PartKind uint8

const (
	// PartStore writes the columns as they are (a slice of the result, materialised).
	PartStore PartKind = iota + 1
	// PartRope rotates each pair of a head by (pos + row)·theta^(-2i/D) (ir's rope with
	// seq_axis 0) and writes the head in ir's feature order: features (i, i + D/2) in mode
	// half (Half), (2i, 2i+1) in mode interleaved.
	PartRope
	// PartPair writes Expr(column 2i, column 2i+1) at column i of its result: a gated
	// activation (silu(gate)·up) over interleaved gate and up rows.
	PartPair
)

// Part is one range of consecutive columns of a problem with Parts (see Problem.Parts).
type Part struct {
	Kind PartKind
	Cols int // columns of the op's result in the range (even)
	Out  int // the result it writes (Problem.Outs index); parts write distinct results
	// PartRope: features per head (a multiple of 2 dividing Cols), theta, and whether pairs
	// are (i, i + D/2) (mode half) rather than (2i, 2i+1).
	Head  int
	Theta float64
	Half  bool
	// Scaling is the rope's frequency scaling (ir.RopeScaling; the zero value is none).
	Scaling ir.RopeScaling
	// Cache: Out is a state of rows [Rows, Cols] (any shape with that leading axis and
	// Cols elements per row), updated in place (Launch.InPlace: Out shares Args[State]'s
	// buffer): row s of the part is written at row pos + s, rows outside the state are not
	// written, nor with a run-time length the rows past the run's n (Problem.Rows.Reads).
	// With Problem.RowPos the state is [slots, ctx, ...] (Cols elements per cell) and row s
	// is written at cell (slot[s], pos[s]), both clamped into the state as cache_scatter's
	// kernel clamps them (the runtime's range checks refuse such values before a run).
	Cache bool
	State int
	// PartPair: the expression, inputs 0 and 1 the pair's values (in the op's result dtype).
	Expr *Fused
}

// width is the number of columns a part writes per row.
func (pt Part) width() int {
	if pt.Kind == PartPair {
		return pt.Cols / 2
	}
	return pt.Cols
}

func (pt Part) key() string {
	var b strings.Builder
	switch pt.Kind {
	case PartStore:
		b.WriteString("store")
	case PartRope:
		mode := "interleaved"
		if pt.Half {
			mode = "half"
		}
		fmt.Fprintf(&b, "rope[d=%d,theta=%s,mode=%s", pt.Head, strconv.FormatFloat(pt.Theta, 'g', -1, 64), mode)
		if sc := pt.Scaling; sc.Type != "" && sc.Type != ir.RopeScalingNone {
			fmt.Fprintf(&b, ",scaling=%s,factor=%g,low=%g,high=%g,ctx=%d", sc.Type, sc.Factor, sc.LowFreqFactor, sc.HighFreqFactor, sc.OriginalCtx)
		}
		b.WriteString("]")
	case PartPair:
		b.WriteString("pair{" + pt.Expr.Key() + "}")
	default:
		b.WriteString("?")
	}
	fmt.Fprintf(&b, ":%d>o%d", pt.Cols, pt.Out)
	if pt.Cache {
		fmt.Fprintf(&b, "@a%d", pt.State)
	}
	return b.String()
}

// partsKey is the part of Problem.Key that Parts add.
func partsKey(p *Problem) string {
	if len(p.Parts) == 0 {
		return ""
	}
	var s []string
	for _, pt := range p.Parts {
		s = append(s, pt.key())
	}
	pos := ""
	if i := p.PartsPos(); i >= 0 {
		pos = "pos=a" + strconv.Itoa(i) + ";"
		if p.RowPos {
			pos = "pos=a" + strconv.Itoa(i) + "[rows];"
		}
	}
	if i := p.PartsSlot(); i >= 0 {
		pos += "slot=a" + strconv.Itoa(i) + ";"
	}
	return "|parts(" + pos + strings.Join(s, ";") + ")"
}

// PartsPos is the argument holding the position that p's column parts read (Problem.Pos), or
// -1 when no part reads one.
func (p *Problem) PartsPos() int {
	if !partsNeedPos(p) {
		return -1
	}
	return p.Pos
}

// PartsSlot is the argument holding the per-row slots that p's cache parts write to
// (Problem.Slot, with RowPos), or -1 when none does.
func (p *Problem) PartsSlot() int {
	if !p.RowPos || !partsWriteCache(p) {
		return -1
	}
	return p.Slot
}

// partsWriteCache reports whether some part writes a state.
func partsWriteCache(p *Problem) bool {
	for _, pt := range p.Parts {
		if pt.Cache {
			return true
		}
	}
	return false
}

// partsNeedPos reports whether some part reads the position.
func partsNeedPos(p *Problem) bool {
	for _, pt := range p.Parts {
		if pt.Kind == PartRope || pt.Cache {
			return true
		}
	}
	return false
}

// partsReadLength reports whether a part writes a state at a run-time length: it must stop at
// the run's rows.
func partsReadLength(p *Problem) bool {
	if p.Rows == nil || !p.Rows.Reads {
		return false
	}
	for _, pt := range p.Parts {
		if pt.Cache {
			return true
		}
	}
	return false
}

// checkParts checks a problem with Parts against its gemm: ranges that tile the result's
// columns, results of the right types, a position where one is read.
func checkParts(p *Problem, g *gemm) error {
	if p.Op != ir.Linear && p.Op != ir.RMSNormLinear {
		return fmt.Errorf("column parts need linear or rmsnorm_linear, not %s", p.Op)
	}
	if p.Expr != nil {
		return fmt.Errorf("a problem with column parts has no other epilogue")
	}
	if g.batch.Rank() > 0 {
		return fmt.Errorf("column parts need a result without batch dims")
	}
	dt := g.opType.DType
	seen := map[int]bool{}
	cols := 0
	for i, pt := range p.Parts {
		if pt.Cols <= 0 || pt.Cols%2 != 0 {
			return fmt.Errorf("part %d: %d columns; parts have an even number", i, pt.Cols)
		}
		cols += pt.Cols
		if pt.Out < 0 || pt.Out >= len(p.Outs) || seen[pt.Out] {
			return fmt.Errorf("part %d: result %d is not a result of its own", i, pt.Out)
		}
		seen[pt.Out] = true
		out := p.Outs[pt.Out]
		switch pt.Kind {
		case PartStore:
		case PartRope:
			if pt.Head <= 0 || pt.Head%2 != 0 || pt.Cols%pt.Head != 0 {
				return fmt.Errorf("part %d: heads of %d features do not tile %d columns in pairs", i, pt.Head, pt.Cols)
			}
		case PartPair:
			if pt.Expr == nil || pt.Cache {
				return fmt.Errorf("part %d: a pair part needs an expression and writes no state", i)
			}
			if err := pt.Expr.Check(); err != nil {
				return fmt.Errorf("part %d: %w", i, err)
			}
			if len(pt.Expr.Inputs) != 2 || len(pt.Expr.Outputs) != 1 {
				return fmt.Errorf("part %d: a pair expression takes 2 inputs and gives 1 result", i)
			}
			if d := pt.Expr.Nodes[pt.Expr.Outputs[0]].DType; d != out.DType {
				return fmt.Errorf("part %d: the expression gives %s, the result is %s", i, d, out)
			}
		default:
			return fmt.Errorf("part %d: unknown kind %d", i, pt.Kind)
		}
		// A cache part may write a float cache of another dtype (f32 rows into an f16 cache:
		// rounded as they are stored, as cache_write converts them).
		if pt.Kind != PartPair && out.DType != dt && !(pt.Cache && out.DType.IsFloat()) {
			return fmt.Errorf("part %d: result %s; the op gives %s", i, out, dt)
		}
		if pt.Cache {
			if pt.State < opArgs(p) || pt.State >= len(p.Args) || !p.Args[pt.State].Equal(out) {
				return fmt.Errorf("part %d: the state argument %d is not of the result's type %s", i, pt.State, out)
			}
			if p.RowPos {
				if out.Shape.Rank() < 2 || out.Shape.NumElements() != out.Shape[0]*out.Shape[1]*pt.Cols {
					return fmt.Errorf("part %d: state %s does not hold [slots, ctx] cells of %d", i, out, pt.Cols)
				}
				continue
			}
			if out.Shape.Rank() == 0 || out.Shape.NumElements() != out.Shape[0]*pt.Cols {
				return fmt.Errorf("part %d: state %s does not hold rows of %d", i, out, pt.Cols)
			}
			continue
		}
		if out.Shape.NumElements() != g.m*pt.width() {
			return fmt.Errorf("part %d: result %s does not hold %d rows of %d", i, out, g.m, pt.width())
		}
	}
	if cols != g.n {
		return fmt.Errorf("parts cover %d of the op's %d columns", cols, g.n)
	}
	if len(seen) != len(p.Outs) {
		return fmt.Errorf("%d results, %d parts", len(p.Outs), len(p.Parts))
	}
	// rowInts reports whether argument i is one integer per row (RowPos) or a scalar.
	rowInts := func(i, n int) bool {
		return i >= opArgs(p) && i < len(p.Args) && p.Args[i].DType.IsInt() && p.Args[i].Shape.NumElements() == n
	}
	switch {
	case !partsNeedPos(p):
	case p.RowPos && !rowInts(p.Pos, g.m):
		return fmt.Errorf("parts read a position per row, argument %d is not %d integers", p.Pos, g.m)
	case p.RowPos && partsWriteCache(p) && !rowInts(p.Slot, g.m):
		return fmt.Errorf("cache parts write each row to its slot, argument %d is not %d integers", p.Slot, g.m)
	case !p.RowPos && !rowInts(p.Pos, 1):
		return fmt.Errorf("parts read a position, argument %d is not an integer scalar", p.Pos)
	}
	return nil
}

// InPlaceParts is the Launch.InPlace of a problem with Parts: each cache part's result shares its
// state's buffer.
func inPlaceParts(p *Problem) map[int]int {
	var m map[int]int
	for _, pt := range p.Parts {
		if pt.Cache {
			if m == nil {
				m = map[int]int{}
			}
			m[pt.Out] = pt.State
		}
	}
	return m
}

// partsBytes is the least traffic of a problem with Parts: its arguments other than the states,
// and the elements each part writes (a cache part its rows, not the whole state).
func partsBytes(p *Problem, g *gemm) float64 {
	states := map[int]bool{}
	for _, pt := range p.Parts {
		if pt.Cache {
			states[pt.State] = true
		}
	}
	var n float64
	for i, t := range p.Args {
		if !states[i] {
			n += float64(t.Bytes())
		}
	}
	for _, pt := range p.Parts {
		t := p.Outs[pt.Out]
		n += float64(g.m*pt.width()) * float64(t.Bytes()) / float64(max(t.Shape.NumElements(), 1))
	}
	return n
}

// partsFlops is the arithmetic the parts add per row: 6 per rotated pair (the angle's sine and
// cosine not counted), the expression per gated pair.
func partsFlops(p *Problem) int {
	n := 0
	for _, pt := range p.Parts {
		switch pt.Kind {
		case PartRope:
			n += 3 * pt.Cols
		case PartPair:
			n += pt.Cols / 2 * pt.Expr.Ops()
		}
	}
	return n
}

// partWriter stores a problem's columns through its parts; templates call storePair.
type partWriter struct {
	p      *Problem
	opType ir.Type
	outs   []*codegen.Buffer // by result index
	pos    *codegen.Buffer
	slot   *codegen.Buffer // RowPos with cache parts: each row's slot
	n      *codegen.Buffer // the run-time length, for cache parts of a bounded problem
}

// declareParts declares the position, the slots (RowPos), each result (a cache part's is its
// state, in place) and the run-time length, in that order, and returns the writer and the
// operands to bind.
func declareParts(b *codegen.Builder, p *Problem, opType ir.Type) (*partWriter, []Operand) {
	w := &partWriter{p: p, opType: opType, outs: make([]*codegen.Buffer, len(p.Outs))}
	var ops []Operand
	if partsNeedPos(p) {
		w.pos = b.Buffer("pos", StorageType(p.Args[p.Pos].DType), codegen.ReadOnly)
		ops = append(ops, Operand{Arg, p.Pos})
	}
	if i := p.PartsSlot(); i >= 0 {
		w.slot = b.Buffer("slot", StorageType(p.Args[i].DType), codegen.ReadOnly)
		ops = append(ops, Operand{Arg, i})
	}
	for i, t := range p.Outs {
		w.outs[i] = b.Buffer("out"+strconv.Itoa(i), StorageType(t.DType), codegen.WriteOnly)
		ops = append(ops, Operand{Out, i})
	}
	if partsReadLength(p) {
		w.n = b.Buffer("n", codegen.U32, codegen.ReadOnly)
		ops = append(ops, Operand{Len, 0})
	}
	return w, ops
}

// storePair writes the op's values v0, v1 (f32, bias and norm applied) of columns col and col+1
// (col even, below N) of row row.
func (w *partWriter) storePair(b *codegen.Builder, row, col, v0, v1 codegen.Value) {
	u := func(x int) codegen.Value { return b.U32(uint32(x)) }
	// The values the unfused graph would have stored for the op's result.
	if st := StorageType(w.opType.DType); st != codegen.F32 {
		v0 = b.Convert(b.Convert(v0, st), codegen.F32)
		v1 = b.Convert(b.Convert(v1, st), codegen.F32)
	}
	c0 := 0
	var chain func(i int)
	chain = func(i int) {
		pt, lo := w.p.Parts[i], c0
		c0 += pt.Cols
		inPart := func() { w.storePart(b, pt, row, b.Sub(col, u(lo)), v0, v1) }
		if i == len(w.p.Parts)-1 {
			inPart()
			return
		}
		b.IfElse(b.Lt(col, u(c0)), inPart, func() { chain(i + 1) })
	}
	chain(0)
}

// storePart writes a pair at column c (even) of part pt.
func (w *partWriter) storePart(b *codegen.Builder, pt Part, row, c, v0, v1 codegen.Value) {
	u := func(x int) codegen.Value { return b.U32(uint32(x)) }
	out, dt := w.outs[pt.Out], w.p.Outs[pt.Out].DType
	var pos codegen.Value
	ropeRow := row // the rope's angle is (pos + ropeRow)·θ^(-2i/D)
	if w.pos != nil && w.p.RowPos {
		pos, ropeRow = b.Bitcast(b.Load(w.pos, row), codegen.I32), u(0)
	} else if w.pos != nil {
		pos = loadPos(b, w.pos)
	}
	// where writes the pair's elements (one for a pair part) at element offsets e0, e1 of the
	// part's row.
	one := pt.Kind == PartPair
	where := func(e0, e1 codegen.Value, y0, y1 codegen.Value) {
		if !pt.Cache {
			base := b.Mul(row, u(pt.width()))
			StoreAs(b, out, b.Add(base, e0), y0, dt)
			if !one {
				StoreAs(b, out, b.Add(base, e1), y1, dt)
			}
			return
		}
		st := w.p.Outs[pt.Out].Shape
		var cell, in codegen.Value
		if w.p.RowPos {
			// cell (slot[row], pos[row]) of the [slots, ctx, ...] state, clamped as
			// cache_scatter's kernel clamps them
			s, ps := clampIndex(b, w.slot, row, st[0]), clampIndex(b, w.pos, row, st[1])
			cell, in = b.Add(b.Mul(s, u(st[1])), ps), b.Bool(true)
		} else {
			t := b.Add(pos, b.Bitcast(row, codegen.I32))
			cell, in = b.Bitcast(t, codegen.U32), b.And(b.Ge(t, b.I32(0)), b.Lt(t, b.I32(int32(st[0]))))
		}
		if w.n != nil {
			in = b.And(in, b.Lt(row, b.Load(w.n, u(0))))
		}
		b.If(in, func() {
			base := b.Mul(cell, u(pt.Cols))
			StoreAs(b, out, b.Add(base, e0), y0, dt)
			StoreAs(b, out, b.Add(base, e1), y1, dt)
		})
	}
	switch pt.Kind {
	case PartStore:
		where(c, b.Add(c, u(1)), v0, v1)
	case PartRope:
		h := pt.Head / 2
		q := b.Div(c, u(2))
		head, i := b.Div(q, u(h)), b.Rem(q, u(h))
		g := ropeGeom{d: pt.Head, h: h, log2Theta: math.Log2(pt.Theta), scale: pt.Scaling}
		y0, y1 := g.rotate(b, pos, ropeRow, i, v0, v1)
		hb := b.Mul(head, u(pt.Head))
		if pt.Half {
			where(b.Add(hb, i), b.Add(hb, b.Add(i, u(h))), y0, y1)
		} else {
			where(c, b.Add(c, u(1)), y0, y1)
		}
	case PartPair:
		y := pt.Expr.Emit(b, []codegen.Value{v0, v1})[0]
		where(b.Div(c, u(2)), c, y, y)
	}
}

// partsReference adds the parts of y (the op's result, [.., N]) to a reference function.
func partsReference(b *ir.Builder, p *Problem, args []ir.Value, y ir.Value) ([]ir.Value, error) {
	t := y.Type()
	n := t.Shape[t.Shape.Rank()-1]
	m := t.Shape.NumElements() / max(n, 1)
	y2, err := b.Op(ir.Reshape, ir.Attrs{"shape": []int{m, n}}, y)
	if err != nil {
		return nil, err
	}
	outs := make([]ir.Value, len(p.Outs))
	c0 := 0
	for _, pt := range p.Parts {
		s, err := b.Op(ir.Slice, ir.Attrs{"axis": 1, "start": c0, "end": c0 + pt.Cols, "step": 1}, y2)
		if err != nil {
			return nil, err
		}
		c0 += pt.Cols
		var v ir.Value
		switch pt.Kind {
		case PartStore:
			v = s
		case PartRope:
			h := pt.Cols / pt.Head
			r, err := b.Op(ir.Reshape, ir.Attrs{"shape": []int{m, h, pt.Head}}, s)
			if err != nil {
				return nil, err
			}
			// The pairs are adjacent: rope in mode interleaved, then (mode half) features
			// (2i, 2i+1) go back to (i, i + D/2).
			at := ir.Attrs{"theta": pt.Theta, "mode": "interleaved"}
			if pt.Scaling.Type != "" {
				for k, v := range pt.Scaling.Attrs() {
					at[k] = v
				}
			}
			op := ir.RopeRows
			if !p.RowPos {
				op, at["seq_axis"] = ir.Rope, 0
			}
			if v, err = b.Op(op, at, r, args[p.Pos]); err != nil {
				return nil, err
			}
			if pt.Half {
				if v, err = b.Op(ir.Reshape, ir.Attrs{"shape": []int{m, h, pt.Head / 2, 2}}, v); err != nil {
					return nil, err
				}
				if v, err = b.Op(ir.Transpose, ir.Attrs{"perm": []int{0, 1, 3, 2}}, v); err != nil {
					return nil, err
				}
			}
		case PartPair:
			g, err := b.Op(ir.Slice, ir.Attrs{"axis": 1, "start": 0, "end": pt.Cols, "step": 2}, s)
			if err != nil {
				return nil, err
			}
			up, err := b.Op(ir.Slice, ir.Attrs{"axis": 1, "start": 1, "end": pt.Cols, "step": 2}, s)
			if err != nil {
				return nil, err
			}
			vs, err := pt.Expr.Build(b, []ir.Value{g, up})
			if err != nil {
				return nil, err
			}
			v = vs[0]
		}
		ot := p.Outs[pt.Out]
		if pt.Cache {
			st := args[pt.State]
			cell := ot.Shape[1:] // a row of the state: [ctx, ...] cells with RowPos
			if p.RowPos {
				cell = ot.Shape[2:]
			}
			x, err := b.Op(ir.Reshape, ir.Attrs{"shape": []int(append(ir.Shape{m}, cell...))}, v)
			if err != nil {
				return nil, err
			}
			if p.RowPos {
				v, err = b.Op(ir.CacheScatter, nil, st, x, args[p.Slot], args[p.Pos])
			} else {
				v, err = b.Op(ir.CacheWrite, nil, st, x, args[p.Pos])
			}
			if err != nil {
				return nil, err
			}
		} else if v, err = b.Op(ir.Reshape, ir.Attrs{"shape": []int(ot.Shape)}, v); err != nil {
			return nil, err
		}
		outs[pt.Out] = v
	}
	return outs, nil
}
