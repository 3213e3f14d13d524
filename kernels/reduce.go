package kernels

import (
	"fmt"

	"vkc/codegen"
	"vkc/ir"
)

// Reduce computes sum, mean, max, min and argmax over one axis of any rank (keepdims changes
// only the result's shape), seen as [outer, n, inner]: each of the outer·inner fibres of n
// elements gives one result. Contiguous fibres (inner = 1) can be walked cooperatively, one
// workgroup per fibre with subgroup or shared-memory combining (coop=1); any fibre can be walked
// by one invocation (coop=0).
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
	Space: RowSpace(func(p *Problem) int {
		_, _, inner := reduceDims(p)
		return inner
	}, 2),
	Build: buildReduce,
}

func init() { Register(Reduce) }

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

func buildReduce(p *Problem, c Config, caps Caps) (*Launch, error) {
	if err := acceptReduce(p, caps); err != nil {
		return nil, err
	}
	outer, n, inner := reduceDims(p)
	rows := outer * inner
	xd, od := p.Args[0].DType, p.Outs[0].DType
	ct := ComputeType(xd)
	b := codegen.NewBuilder("reduce_" + p.Op.String())
	x := b.Buffer("x", StorageType(xd), codegen.ReadOnly)
	y := b.Buffer("y", StorageType(od), codegen.WriteOnly)

	// key maps an element to the u32 whose order argmax/max/min use.
	key := func(v codegen.Value, nan uint32) codegen.Value {
		switch ct {
		case codegen.F32:
			return OrderedKey(b, v, nan)
		case codegen.I32:
			return b.Xor(b.Bitcast(v, codegen.U32), b.U32(0x80000000))
		}
		return v
	}
	unkey := func(k codegen.Value) codegen.Value {
		switch ct {
		case codegen.F32:
			return FromOrderedKey(b, k)
		case codegen.I32:
			return b.Bitcast(b.Xor(k, b.U32(0x80000000)), codegen.I32)
		}
		return k
	}

	WalkRows(b, c, rows, func(w *RowWalk) {
		base := b.Add(b.Mul(b.Div(w.Row, b.U32(uint32(inner))), b.U32(uint32(n*inner))), b.Rem(w.Row, b.U32(uint32(inner))))
		at := func(k codegen.Value) codegen.Value {
			return LoadAs(b, x, b.Add(base, b.Mul(k, b.U32(uint32(inner)))), xd)
		}
		var res codegen.Value
		switch p.Op {
		case ir.Sum, ir.Mean:
			s := w.Sum(n, b.Const(ct, 0), at)
			if p.Op == ir.Mean {
				s = b.Div(s, b.Const(ct, float64(n)))
			}
			res = s
		case ir.Max, ir.Min:
			op, nan, init := ReduceMax, uint32(0xffffffff), uint32(0)
			if p.Op == ir.Min {
				op, nan, init = ReduceMin, 0, 0xffffffff
			}
			acc := b.Var("acc", b.U32(init))
			w.Each(n, func(k codegen.Value) { b.Set(acc, op.apply(b, b.Get(acc), key(at(k), nan))) })
			res = unkey(w.Reduce(b.Get(acc), op))
		case ir.Argmax:
			bk := b.Var("best_key", b.U32(0))
			bi := b.Var("best_idx", b.U32(0xffffffff))
			w.Each(n, func(k codegen.Value) {
				kv := key(at(k), 0xffffffff)
				// Strictly greater (or the first element seen): each invocation scans its
				// elements in increasing order, so ties keep the first index.
				take := b.Or(b.Gt(kv, b.Get(bk)), b.Eq(b.Get(bi), b.U32(0xffffffff)))
				b.Set(bk, b.Select(take, kv, b.Get(bk)))
				b.Set(bi, b.Select(take, k, b.Get(bi)))
			})
			_, idx := w.ArgMax(b.Get(bk), b.Get(bi))
			res = b.Bitcast(idx, codegen.I32)
		}
		b.If(w.Leader(), func() { StoreAs(b, y, w.Row, res, od) })
	})
	k, spec, err := finish(b, caps, c, "wg", "rows")
	if err != nil {
		return nil, err
	}
	st := Step{Kernel: k, Spec: spec, Grid: RowGrid(rows, c, caps),
		Bindings: []Operand{{Arg, 0}, {Out, 0}}}
	return &Launch{Steps: []Step{st}, Flops: float64(outer * n * inner), Bytes: tensorBytes(p.Args, p.Outs)}, nil
}
