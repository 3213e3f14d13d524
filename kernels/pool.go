package kernels

import (
	"fmt"
	"math"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
)

// Pool2d computes max_pool2d, avg_pool2d and global_avg_pool (a window of the whole plane): one
// invocation per output element (per_thread consecutive ones), looping over the window's taps
// with the out-of-input taps masked, so every window shape, stride, dilation and pad is the same
// code. max takes the interpreter's NaN rule (a NaN tap wins); avg divides by the taps inside
// the input, or with count_include_pad by those inside the padded input. Arithmetic is f32.
var Pool2d = &Template{
	Name:    "pool2d",
	Accepts: acceptPool2d,
	Space:   flatSpace(),
	Build:   buildPool2d,
}

// BatchNorm is batch_norm in inference form as one elementwise pass: y = (x − mean[c])·scale[c]
// / √(var[c] + eps) + bias[c] for the element's channel c, with an optional epilogue (bn +
// relu). Where a convolution precedes it, the fold-batchnorm rule removes it instead.
var BatchNorm = &Template{
	Name:    "batch_norm",
	Accepts: acceptBatchNorm,
	Space:   flatSpace(),
	Build:   buildBatchNorm,
}

func init() {
	Register(Pool2d)
	Register(BatchNorm)
}

func acceptPool2d(p *Problem, caps Caps) error {
	switch p.Op {
	case ir.MaxPool2d, ir.AvgPool2d, ir.GlobalAvgPool:
	default:
		return otherOp(p)
	}
	if err := acceptPlain(p.Op)(p, caps); err != nil {
		return err
	}
	if n := p.Args[0].Shape.NumElements(); n >= 1<<31 {
		return fmt.Errorf("tensors of 2^31 elements or more are not supported (u32 indexing)")
	}
	return nil
}

func poolGeom(p *Problem) (*ir.Window2d, error) {
	if p.Op == ir.GlobalAvgPool {
		return ir.GlobalPoolWindow(p.Attrs, p.Args[0])
	}
	return ir.PoolWindow(p.Attrs, p.Args[0])
}

func buildPool2d(p *Problem, c Config, caps Caps) (*Launch, error) {
	if err := acceptPool2d(p, caps); err != nil {
		return nil, err
	}
	g, err := poolGeom(p)
	if err != nil {
		return nil, err
	}
	xt, ot := p.Args[0], p.Outs[0]
	n := ot.Shape.NumElements()
	isMax := p.Op == ir.MaxPool2d
	incl := p.Attrs.Bool("count_include_pad", false)
	b := newBuilder("pool2d_"+p.Op.String(), caps)
	xb := b.Buffer("x", StorageType(xt.DType), codegen.ReadOnly)
	yb := b.Buffer("y", StorageType(ot.DType), codegen.WriteOnly)
	u := func(v int) codegen.Value { return b.U32(uint32(v)) }
	i32 := func(v int) codegen.Value { return b.I32(int32(v)) }
	eachFlat(b, c, n, func(q codegen.Value) {
		var ch, ox, oy, bi codegen.Value
		if g.NHWC {
			ch = b.Rem(q, u(g.C))
			r := b.Div(q, u(g.C))
			ox, r = b.Rem(r, u(g.OW)), b.Div(r, u(g.OW))
			oy, bi = b.Rem(r, u(g.OH)), b.Div(r, u(g.OH))
		} else {
			ox = b.Rem(q, u(g.OW))
			r := b.Div(q, u(g.OW))
			oy, r = b.Rem(r, u(g.OH)), b.Div(r, u(g.OH))
			ch, bi = b.Rem(r, u(g.C)), b.Div(r, u(g.C))
		}
		init := b.F32(0)
		if isMax {
			init = b.F32(float32(math.Inf(-1)))
		}
		acc := b.Var("acc", init)
		cnt := b.Var("cnt", b.F32(0))
		iy0 := b.Sub(b.Bitcast(b.Mul(oy, u(g.SH)), codegen.I32), i32(g.PT))
		ix0 := b.Sub(b.Bitcast(b.Mul(ox, u(g.SW)), codegen.I32), i32(g.PL))
		b.For(u(0), u(g.KH), u(1), func(ki codegen.Value) {
			iy := b.Add(iy0, b.Bitcast(b.Mul(ki, u(g.DH)), codegen.I32))
			rowIn := b.And(b.Ge(iy, i32(0)), b.Lt(iy, i32(g.H)))
			rowPad := b.And(b.Ge(iy, i32(-g.PT)), b.Lt(iy, i32(g.H+g.PB)))
			iyc := b.Bitcast(b.Clamp(iy, i32(0), i32(g.H-1)), codegen.U32)
			b.For(u(0), u(g.KW), u(1), func(kj codegen.Value) {
				ix := b.Add(ix0, b.Bitcast(b.Mul(kj, u(g.DW)), codegen.I32))
				in := b.And(rowIn, b.And(b.Ge(ix, i32(0)), b.Lt(ix, i32(g.W))))
				ixc := b.Bitcast(b.Clamp(ix, i32(0), i32(g.W-1)), codegen.U32)
				v := LoadAs(b, xb, actIndex(b, g.NHWC, bi, ch, iyc, ixc, g.C, g.H, g.W), xt.DType)
				a := b.Get(acc)
				if isMax {
					// The interpreter's rule: v wins when larger or NaN; a NaN already held stays.
					take := b.And(in, b.Or(b.Gt(v, a), b.IsNaN(v)))
					b.Set(acc, b.Select(take, v, a))
				} else {
					b.Set(acc, b.Add(a, b.Select(in, v, b.F32(0))))
					counted := in
					if incl {
						counted = b.And(rowPad, b.And(b.Ge(ix, i32(-g.PL)), b.Lt(ix, i32(g.W+g.PR))))
					}
					b.Set(cnt, b.Add(b.Get(cnt), b.Select(counted, b.F32(1), b.F32(0))))
				}
			})
		})
		res := b.Get(acc)
		if !isMax {
			res = b.Div(res, b.Get(cnt))
		}
		StoreAs(b, yb, q, res, ot.DType)
	})
	k, spec, err := finish(b, caps, c, "wg", "per_thread")
	if err != nil {
		return nil, err
	}
	st := Step{Kernel: k, Spec: spec, Grid: flatGrid(n, c, caps), Bindings: []Operand{{Arg, 0}, {Out, 0}}}
	return &Launch{Steps: []Step{st}, Flops: float64(n * g.KH * g.KW), Bytes: tensorBytes(p.Args, p.Outs)}, nil
}

func acceptBatchNorm(p *Problem, caps Caps) error {
	if p.Op != ir.BatchNorm {
		return otherOp(p)
	}
	nop := numOpArgs(p)
	if nop != 5 || len(p.Args) < 5 {
		return fmt.Errorf("batch_norm takes 5 operands, the problem has %d", nop)
	}
	_, outs, err := ir.Infer(p.Op, p.Attrs, p.Args[:5])
	if err != nil {
		return err
	}
	if len(p.Outs) != 1 || p.Expr == nil && !p.Outs[0].Equal(outs[0]) {
		return fmt.Errorf("results %v, the op gives %v", p.Outs, outs)
	}
	if err := checkEpilogueOf(p, outs[0]); err != nil {
		return err
	}
	return checkDTypes(p, caps)
}

func buildBatchNorm(p *Problem, c Config, caps Caps) (*Launch, error) {
	if err := acceptBatchNorm(p, caps); err != nil {
		return nil, err
	}
	xt, ot := p.Args[0], p.Outs[0]
	ax := ir.BatchNormChannelAxis(p.Attrs, xt)
	_, channels, inner := splitAxis(xt.Shape, ax)
	n := xt.Shape.NumElements()
	eps := p.Attrs.Float("eps", 1e-5)
	b := newBuilder("batch_norm", caps)
	xb := b.Buffer("x", StorageType(xt.DType), codegen.ReadOnly)
	var pb [4]*codegen.Buffer
	ops := []Operand{{Arg, 0}}
	for i, name := range []string{"scale", "bias", "mean", "var"} {
		pb[i] = b.Buffer(name, StorageType(p.Args[i+1].DType), codegen.ReadOnly)
		ops = append(ops, Operand{Arg, i + 1})
	}
	yb := b.Buffer("y", StorageType(ot.DType), codegen.WriteOnly)
	ops = append(ops, Operand{Out, 0})
	epi, epiOps := EpilogueBuffers(b, p)
	ops = append(ops, epiOps...)
	eachFlat(b, c, n, func(q codegen.Value) {
		ch := b.Rem(b.Div(q, b.U32(uint32(inner))), b.U32(uint32(channels)))
		ld := func(i int) codegen.Value { return LoadAs(b, pb[i], ch, p.Args[i+1].DType) }
		inv := b.Div(ld(0), b.Sqrt(b.Add(ld(3), b.F32(float32(eps)))))
		v := b.Add(b.Mul(b.Sub(LoadAs(b, xb, q, xt.DType), ld(2)), inv), ld(1))
		StoreAs(b, yb, q, Epilogue(b, p, epi, q, v, xt.DType), ot.DType)
	})
	k, spec, err := finish(b, caps, c, "wg", "per_thread")
	if err != nil {
		return nil, err
	}
	st := Step{Kernel: k, Spec: spec, Grid: flatGrid(n, c, caps), Bindings: ops}
	return &Launch{Steps: []Step{st}, Flops: float64(5 * n), Bytes: tensorBytes(p.Args, p.Outs)}, nil
}
