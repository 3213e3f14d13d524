package kernels

import (
	"fmt"
	"math"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
)

// The row-normalising templates: softmax (any axis), rmsnorm, layernorm (biased variance, as
// torch) and add_rmsnorm (both the sum and its normalisation). One builder serves all four; they
// differ only in the statistics they reduce before the write pass. Statistics are two-pass
// (softmax: max, then the sum of exponentials; layernorm: mean, then the centred sum of squares),
// which re-reads the row from cache instead of carrying an online correction. Softmax, rmsnorm
// and layernorm take an epilogue on their result; add_rmsnorm does not (two results).
var (
	Softmax    = normTemplate("softmax", ir.Softmax)
	RMSNorm    = normTemplate("rmsnorm", ir.RMSNorm)
	LayerNorm  = normTemplate("layernorm", ir.LayerNorm)
	AddRMSNorm = normTemplate("add_rmsnorm", ir.AddRMSNorm)
)

func init() {
	for _, t := range []*Template{Softmax, RMSNorm, LayerNorm, AddRMSNorm} {
		Register(t)
	}
}

func normTemplate(name string, op ir.Op) *Template {
	return &Template{
		Name:    name,
		Accepts: func(p *Problem, caps Caps) error { return acceptNorm(op, p, caps) },
		Space: RowSpace(func(p *Problem) int {
			_, _, inner := normDims(p)
			return inner
		}, 1),
		Static: rowStatic(func(p *Problem) (int, int, int) {
			outer, n, inner := normDims(p)
			return outer * inner, n, inner
		}),
		Build: func(p *Problem, c Config, caps Caps) (*Launch, error) {
			if err := acceptNorm(op, p, caps); err != nil {
				return nil, err
			}
			return buildNorm(p, c, caps)
		},
	}
}

// normDims is the [outer, n, inner] view of the normalised axis (the last, except for softmax).
func normDims(p *Problem) (outer, n, inner int) {
	x := p.Args[0].Shape
	ax := x.Rank() - 1
	if p.Op == ir.Softmax {
		a, err := ir.NormAxis(p.Attrs.Int("axis", -1), x.Rank())
		if err != nil {
			return 1, 1, 1
		}
		ax = a
	}
	return splitAxis(x, ax)
}

func acceptNorm(op ir.Op, p *Problem, caps Caps) error {
	if p.Op != op {
		return otherOp(p)
	}
	nop := numOpArgs(p)
	if nop > len(p.Args) {
		return fmt.Errorf("problem has %d op arguments of %d", nop, len(p.Args))
	}
	_, outs, err := ir.Infer(op, p.Attrs, p.Args[:nop])
	if err != nil {
		return err
	}
	if op == ir.AddRMSNorm {
		if p.Expr != nil {
			return fmt.Errorf("add_rmsnorm takes no epilogue (it has two results)")
		}
		if len(p.Outs) != 2 || !p.Outs[0].Equal(outs[0]) || !p.Outs[1].Equal(outs[1]) {
			return fmt.Errorf("results %v, the op gives %v", p.Outs, outs)
		}
	} else {
		if len(p.Outs) != 1 {
			return fmt.Errorf("want one result, got %d", len(p.Outs))
		}
		if p.Expr == nil && !p.Outs[0].Equal(outs[0]) {
			return fmt.Errorf("result %s, the op gives %s", p.Outs[0], outs[0])
		}
		if err := checkEpilogueOf(p, outs[0]); err != nil {
			return err
		}
	}
	return checkDTypes(p, caps)
}

func buildNorm(p *Problem, c Config, caps Caps) (*Launch, error) {
	outer, n, inner := normDims(p)
	rows := outer * inner
	nop := numOpArgs(p)
	xd := p.Args[0].DType
	opType := xd
	if p.Expr != nil {
		opType = p.Expr.Inputs[0].DType
	}
	eps := p.Attrs.Float("eps", 1e-5)

	b := newBuilder(p.OpName(), caps)
	var ops []Operand
	in := make([]*codegen.Buffer, nop)
	for i := 0; i < nop; i++ {
		in[i] = b.Buffer(fmt.Sprintf("in%d", i), StorageType(p.Args[i].DType), codegen.ReadOnly)
		ops = append(ops, Operand{Arg, i})
	}
	out := make([]*codegen.Buffer, len(p.Outs))
	for i, t := range p.Outs {
		out[i] = b.Buffer(fmt.Sprintf("out%d", i), StorageType(t.DType), codegen.WriteOnly)
		ops = append(ops, Operand{Out, i})
	}
	epi, epiOps := EpilogueBuffers(b, p)
	ops = append(ops, epiOps...)
	f32 := func(v float64) codegen.Value { return b.F32(float32(v)) }
	load := func(i int, idx codegen.Value) codegen.Value { return LoadAs(b, in[i], idx, p.Args[i].DType) }

	WalkRows(b, c, rows, func(w *RowWalk) {
		base := b.Add(b.Mul(b.Div(w.Row, b.U32(uint32(inner))), b.U32(uint32(n*inner))), b.Rem(w.Row, b.U32(uint32(inner))))
		at := func(k codegen.Value) codegen.Value { return b.Add(base, b.Mul(k, b.U32(uint32(inner)))) }
		x := func(k codegen.Value) codegen.Value { return load(0, at(k)) }
		store := func(k, v codegen.Value) {
			idx := at(k)
			StoreAs(b, out[0], idx, Epilogue(b, p, epi, idx, v, opType), p.Outs[0].DType)
		}
		switch p.Op {
		case ir.Softmax:
			m := b.Var("row_max", f32(math.Inf(-1)))
			w.Each(n, func(k codegen.Value) { b.Set(m, b.Max(b.Get(m), x(k))) })
			mx := w.Reduce(b.Get(m), ReduceMax)
			s := w.Sum(n, f32(0), func(k codegen.Value) codegen.Value { return b.Exp(b.Sub(x(k), mx)) })
			inv := b.Div(f32(1), s)
			w.Each(n, func(k codegen.Value) { store(k, b.Mul(b.Exp(b.Sub(x(k), mx)), inv)) })
		case ir.RMSNorm:
			ss := w.Sum(n, f32(0), func(k codegen.Value) codegen.Value { v := x(k); return b.Mul(v, v) })
			inv := b.InverseSqrt(b.Add(b.Div(ss, f32(float64(n))), f32(eps)))
			w.Each(n, func(k codegen.Value) { store(k, b.Mul(b.Mul(x(k), inv), load(1, k))) })
		case ir.LayerNorm:
			mu := b.Div(w.Sum(n, f32(0), x), f32(float64(n)))
			vr := w.Sum(n, f32(0), func(k codegen.Value) codegen.Value { d := b.Sub(x(k), mu); return b.Mul(d, d) })
			inv := b.InverseSqrt(b.Add(b.Div(vr, f32(float64(n))), f32(eps)))
			w.Each(n, func(k codegen.Value) {
				store(k, b.Add(b.Mul(b.Mul(b.Sub(x(k), mu), inv), load(1, k)), load(2, k)))
			})
		case ir.AddRMSNorm:
			// The sum is rounded to its dtype before it is normalised, as the unfused graph
			// stores it.
			sum := func(k codegen.Value) codegen.Value {
				s := b.Add(x(k), load(1, at(k)))
				if st := StorageType(xd); st != codegen.F32 {
					s = b.Convert(b.Convert(s, st), codegen.F32)
				}
				return s
			}
			ss := w.Sum(n, f32(0), func(k codegen.Value) codegen.Value { v := sum(k); return b.Mul(v, v) })
			inv := b.InverseSqrt(b.Add(b.Div(ss, f32(float64(n))), f32(eps)))
			w.Each(n, func(k codegen.Value) {
				s := sum(k)
				StoreAs(b, out[0], at(k), s, p.Outs[0].DType)
				StoreAs(b, out[1], at(k), b.Mul(b.Mul(s, inv), load(2, k)), p.Outs[1].DType)
			})
		default:
			panic("kernels: norm template for " + p.OpName())
		}
	})
	k, spec, err := finish(b, caps, c, "wg", "rows")
	if err != nil {
		return nil, err
	}
	st := Step{Kernel: k, Spec: spec, Grid: RowGrid(rows, c, caps), Bindings: ops, Scale: rowScale(p, p.Rows.Out(0), rows, c)}
	return &Launch{Steps: []Step{st}, Flops: float64(5 * outer * n * inner), Bytes: tensorBytes(p.Args, p.Outs)}, nil
}
