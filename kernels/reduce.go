package kernels

import (
	"fmt"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
)

// Reduce computes sum, mean, max, min and argmax over one axis of any rank (keepdims changes
// only the result's shape), seen as [outer, n, inner]: each of the outer·inner fibres of n
// elements gives one result. Contiguous fibres (inner = 1) can be walked cooperatively (coop=1):
// a workgroup per fibre with subgroup or shared-memory combining, several fibres per workgroup
// (rows), or, for a few long fibres, split workgroups per fibre whose partials a second dispatch
// combines (split); any fibre can be walked by one invocation (coop=0).
//
// Semantics, as the interpreter's: floats accumulate in f32 (f16 is storage only); max and min
// propagate NaN; argmax gives the first index of the largest value, a NaN counting as larger than
// everything. Max, min and argmax of floats compare through an order-preserving u32 key, so NaN
// and ties behave exactly and no float max of the device (undefined on NaN) is involved. Integer
// sums wrap at 32 bits; an integer mean truncates toward zero (the interpreter divides the exact
// sum, so they differ only when the sum itself overflows).
var Reduce = &Template{
	Name:    "reduce",
	Accepts: acceptReduce,
	Space:   reduceSpace(),
	Build:   buildReduce,
}

func init() { Register(Reduce) }

// reduceSpace is RowSpace plus split: a row's elements are spread over split workgroups whose
// partial results a second step combines, so that a single long row (greedy decoding's argmax
// over the vocabulary) occupies more than one workgroup of the device.
func reduceSpace() Space {
	s := RowSpace(func(p *Problem) int {
		_, _, inner := reduceDims(p)
		return inner
	}, 2)
	// Largest first: where a split is valid at all (few, long rows) it is the better default.
	s.Params = append(s.Params, Ints("split", 32, 8, 1))
	return s.Where(func(p *Problem, c Config, caps Caps) error {
		sp := c["split"]
		if sp == 1 {
			return nil
		}
		if c["coop"] != 1 || c["rows"] != 1 {
			return fmt.Errorf("split=%d needs coop=1 and rows=1 (whole workgroups per part of a row)", sp)
		}
		outer, n, inner := reduceDims(p)
		if rows := outer * inner; rows >= sp {
			// Pruning, not correctness: with as many rows as parts the rows alone spread over
			// the device, and the second step only adds a dispatch and a barrier.
			return fmt.Errorf("split=%d is for fewer rows than parts; %d rows already give %d workgroups", sp, rows, rows)
		}
		if chunk := (n + sp - 1) / sp; chunk < c["wg"] {
			return fmt.Errorf("split=%d leaves %d elements per workgroup, fewer than wg=%d", sp, chunk, c["wg"])
		}
		return nil
	})
}

func reduceDims(p *Problem) (outer, n, inner int) {
	x := p.Args[0]
	ax, err := ir.NormAxis(p.Attrs.Int("axis", -1), x.Shape.Rank())
	if err != nil {
		return 1, 1, 1
	}
	return splitAxis(x.Shape, ax)
}

func acceptReduce(p *Problem, caps Caps) error {
	switch p.Op {
	case ir.Sum, ir.Mean, ir.Max, ir.Min, ir.Argmax:
	default:
		return otherOp(p)
	}
	if p.Expr != nil {
		return fmt.Errorf("reduce takes no epilogue (fuse it as a separate elementwise kernel)")
	}
	if len(p.Args) != 1 || len(p.Outs) != 1 {
		return fmt.Errorf("want one argument and one result, got %d and %d", len(p.Args), len(p.Outs))
	}
	if p.Args[0].Shape.Rank() == 0 {
		return fmt.Errorf("cannot reduce a scalar %s", p.Args[0])
	}
	if _, err := ir.NormAxis(p.Attrs.Int("axis", -1), p.Args[0].Shape.Rank()); err != nil {
		return err
	}
	if d := p.Args[0].DType; d == ir.Bool {
		return fmt.Errorf("cannot reduce a bool tensor")
	}
	return checkDTypes(p, caps)
}

// reduceCodec holds the per-dtype pieces of a reduction: the order-preserving u32 key of an
// element (argmax, max, min) and its inverse.
type reduceCodec struct {
	b  *codegen.Builder
	ct codegen.Type
}

func (r reduceCodec) key(v codegen.Value, nan uint32) codegen.Value {
	b := r.b
	switch r.ct {
	case codegen.F32:
		return OrderedKey(b, v, nan)
	case codegen.I32:
		return b.Xor(b.Bitcast(v, codegen.U32), b.U32(0x80000000))
	}
	return v
}

func (r reduceCodec) unkey(k codegen.Value) codegen.Value {
	b := r.b
	switch r.ct {
	case codegen.F32:
		return FromOrderedKey(b, k)
	case codegen.I32:
		return b.Bitcast(b.Xor(k, b.U32(0x80000000)), codegen.I32)
	}
	return k
}

// minMax gives max or min's combining op, the key of NaN and the identity key.
func minMax(op ir.Op) (ReduceOp, uint32, uint32) {
	if op == ir.Min {
		return ReduceMin, 0, 0xffffffff
	}
	return ReduceMax, 0xffffffff, 0
}

// better reports whether the argmax candidate (k1, i1) beats (k0, i0): a larger key, or an equal
// key at a smaller index (an empty candidate has index 0xffffffff).
func better(b *codegen.Builder, k1, i1, k0, i0 codegen.Value) codegen.Value {
	return b.Or(b.Gt(k1, k0), b.And(b.Eq(k1, k0), b.Lt(i1, i0)))
}

// reducePartial is what one walk over (part of) a row produces before finishing: the sum, the
// key of the max or min, or the argmax's (key, index).
type reducePartial struct{ v, idx codegen.Value }

// walkReduce reduces the elements k in [lo, lo+cnt) ∩ [0, n) of the walker's row, read by at(k),
// over the row's invocations.
func walkReduce(b *codegen.Builder, op ir.Op, rc reduceCodec, w *RowWalk, n int, lo codegen.Value, cnt int, at func(k codegen.Value) codegen.Value) reducePartial {
	each := func(body func(k codegen.Value)) {
		w.Each(cnt, func(j codegen.Value) {
			k := b.Add(lo, j)
			b.If(b.Lt(k, b.U32(uint32(n))), func() { body(k) })
		})
	}
	switch op {
	case ir.Sum, ir.Mean:
		acc := b.Var("acc", b.Const(rc.ct, 0))
		each(func(k codegen.Value) { b.Set(acc, b.Add(b.Get(acc), at(k))) })
		return reducePartial{v: w.Reduce(b.Get(acc), ReduceAdd)}
	case ir.Max, ir.Min:
		red, nan, init := minMax(op)
		acc := b.Var("acc", b.U32(init))
		each(func(k codegen.Value) { b.Set(acc, red.apply(b, b.Get(acc), rc.key(at(k), nan))) })
		return reducePartial{v: w.Reduce(b.Get(acc), red)}
	case ir.Argmax:
		bk := b.Var("best_key", b.U32(0))
		bi := b.Var("best_idx", b.U32(0xffffffff))
		each(func(k codegen.Value) {
			kv := rc.key(at(k), 0xffffffff)
			// Each invocation scans its elements in increasing order, so a strictly larger
			// key (or the first element) is the only reason to move: ties keep the first index.
			take := b.Or(b.Gt(kv, b.Get(bk)), b.Eq(b.Get(bi), b.U32(0xffffffff)))
			b.Set(bk, b.Select(take, kv, b.Get(bk)))
			b.Set(bi, b.Select(take, k, b.Get(bi)))
		})
		k, i := w.ArgMax(b.Get(bk), b.Get(bi))
		return reducePartial{v: k, idx: i}
	}
	panic("kernels: reduce of " + op.String())
}

// finishReduce turns a row's partial into the result's value (compute type of the result).
func finishReduce(b *codegen.Builder, op ir.Op, rc reduceCodec, r reducePartial, n int) codegen.Value {
	switch op {
	case ir.Sum:
		return r.v
	case ir.Mean:
		return b.Div(r.v, b.Const(rc.ct, float64(n)))
	case ir.Max, ir.Min:
		return rc.unkey(r.v)
	}
	return b.Bitcast(r.idx, codegen.I32)
}

func buildReduce(p *Problem, c Config, caps Caps) (*Launch, error) {
	if err := acceptReduce(p, caps); err != nil {
		return nil, err
	}
	outer, n, inner := reduceDims(p)
	rows := outer * inner
	xd, od := p.Args[0].DType, p.Outs[0].DType
	ct := ComputeType(xd)
	split := max(c["split"], 1)
	chunk := (n + split - 1) / split

	// Step 1 (the only step when split = 1): virtual row v = row·split + s reduces elements
	// s·chunk .. of its row.
	b := newBuilder("reduce_"+p.Op.String(), caps)
	rc := reduceCodec{b, ct}
	x := b.Buffer("x", StorageType(xd), codegen.ReadOnly)
	partType := codegen.U32
	if p.Op == ir.Sum || p.Op == ir.Mean {
		partType = ct
	}
	var y *codegen.Buffer
	if split == 1 {
		y = b.Buffer("y", StorageType(od), codegen.WriteOnly)
	} else {
		y = b.Buffer("partial", partType, codegen.WriteOnly)
	}
	WalkRows(b, c, rows*split, func(w *RowWalk) {
		row, s := b.Div(w.Row, b.U32(uint32(split))), b.Rem(w.Row, b.U32(uint32(split)))
		base := b.Add(b.Mul(b.Div(row, b.U32(uint32(inner))), b.U32(uint32(n*inner))), b.Rem(row, b.U32(uint32(inner))))
		at := func(k codegen.Value) codegen.Value {
			return LoadAs(b, x, b.Add(base, b.Mul(k, b.U32(uint32(inner)))), xd)
		}
		r := walkReduce(b, p.Op, rc, w, n, b.Mul(s, b.U32(uint32(chunk))), chunk, at)
		b.If(w.Leader(), func() {
			switch {
			case split == 1:
				StoreAs(b, y, w.Row, finishReduce(b, p.Op, rc, r, n), od)
			case p.Op == ir.Argmax:
				b.Store(y, b.Mul(w.Row, b.U32(2)), r.v)
				b.Store(y, b.Add(b.Mul(w.Row, b.U32(2)), b.U32(1)), r.idx)
			default:
				b.Store(y, w.Row, r.v)
			}
		})
	})
	k, spec, err := finish(b, caps, c, "wg", "rows")
	if err != nil {
		return nil, err
	}
	l := &Launch{Flops: float64(outer * n * inner), Bytes: tensorBytes(p.Args, p.Outs)}
	if split == 1 {
		l.Steps = []Step{{Kernel: k, Spec: spec, Grid: RowGrid(rows, c, caps), Bindings: []Operand{{Arg, 0}, {Out, 0}},
			Scale: rowScale(p, p.Rows.Out(0), rows, c)}}
		return l, nil
	}
	l.Steps = []Step{{Kernel: k, Spec: spec, Grid: RowGrid(rows*split, c, caps), Bindings: []Operand{{Arg, 0}, {Scratch, 0}},
		Scale: rowScale(p, p.Rows.Out(0), rows*split, c)}}
	per := 1
	if p.Op == ir.Argmax {
		per = 2
	}
	l.Scratch = []int{4 * per * rows * split}

	// Step 2: one walk per row over its split partials.
	b = newBuilder("reduce_"+p.Op.String()+"_combine", caps)
	rc = reduceCodec{b, ct}
	part := b.Buffer("partial", partType, codegen.ReadOnly)
	y = b.Buffer("y", StorageType(od), codegen.WriteOnly)
	WalkRows(b, c, rows, func(w *RowWalk) {
		base := b.Mul(w.Row, b.U32(uint32(split)))
		var r reducePartial
		switch p.Op {
		case ir.Sum, ir.Mean:
			r.v = w.Sum(split, b.Const(ct, 0), func(s codegen.Value) codegen.Value { return b.Load(part, b.Add(base, s)) })
		case ir.Max, ir.Min:
			red, _, init := minMax(p.Op)
			acc := b.Var("acc", b.U32(init))
			w.Each(split, func(s codegen.Value) { b.Set(acc, red.apply(b, b.Get(acc), b.Load(part, b.Add(base, s)))) })
			r.v = w.Reduce(b.Get(acc), red)
		case ir.Argmax:
			bk := b.Var("best_key", b.U32(0))
			bi := b.Var("best_idx", b.U32(0xffffffff))
			w.Each(split, func(s codegen.Value) {
				at := b.Mul(b.Add(base, s), b.U32(2))
				k, i := b.Load(part, at), b.Load(part, b.Add(at, b.U32(1)))
				take := better(b, k, i, b.Get(bk), b.Get(bi))
				b.Set(bk, b.Select(take, k, b.Get(bk)))
				b.Set(bi, b.Select(take, i, b.Get(bi)))
			})
			r.v, r.idx = w.ArgMax(b.Get(bk), b.Get(bi))
		}
		b.If(w.Leader(), func() { StoreAs(b, y, w.Row, finishReduce(b, p.Op, rc, r, n), od) })
	})
	k2, spec2, err := finish(b, caps, c, "wg", "rows")
	if err != nil {
		return nil, err
	}
	l.Steps = append(l.Steps, Step{Kernel: k2, Spec: spec2, Grid: RowGrid(rows, c, caps), Bindings: []Operand{{Scratch, 0}, {Out, 0}},
		Scale: rowScale(p, p.Rows.Out(0), rows, c)})
	return l, nil
}
