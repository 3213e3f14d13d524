package kernels

import (
	"fmt"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
)

// Conv2d is a direct 2-D convolution (strides, pads, dilations, groups incl. depthwise, optional
// bias, nchw or nhwc activations, OIHW weights) with an optional epilogue on the result (conv +
// relu, conv + residual add in one kernel). Each invocation computes per_thread consecutive
// output columns of one output row of one output channel, so each weight it loads serves
// per_thread outputs; padding reads a clamped element and multiplies it by zero. In nchw
// neighbouring invocations take neighbouring column chunks, in nhwc neighbouring channels, so
// stores are contiguous across a workgroup either way. Arithmetic is f32; both parameters are
// specialization constants.
//
// This is the template for depthwise and small convolutions; conv2d_gemm (an implicit GEMM
// through shared memory) is for many channels. The tuner chooses between them by measurement.
var Conv2d = &Template{
	Name:    "conv2d",
	Accepts: acceptConv2d,
	Space:   NewSpace(Ints("wg", 64, 128, 256, 32), Ints("per_thread", 2, 1, 4, 8)).Where(fitsInvocations("wg")),
	Build:   buildConv2d,
}

func init() { Register(Conv2d) }

func acceptConv2d(p *Problem, caps Caps) error {
	out, err := acceptConvOp(p, caps, ir.Conv2d)
	if err != nil {
		return err
	}
	if n := out.Shape.NumElements(); n >= 1<<31 || p.Args[0].Shape.NumElements() >= 1<<31 {
		return fmt.Errorf("tensors of 2^31 elements or more are not supported (u32 indexing)")
	}
	return nil
}

// conv2dGeom reads a conv2d problem.
func conv2dGeom(p *Problem) (*ir.Window2d, int, int, int, error) {
	g, err := ir.Conv2dWindow(p.Attrs, p.Args[0], p.Args[1])
	if err != nil {
		return nil, 0, 0, 0, err
	}
	w := p.Args[1].Shape
	cout, cpg := w[0], w[1]
	return g, cout, cpg, cout / p.Attrs.Int("groups", 1), nil
}

func buildConv2d(p *Problem, c Config, caps Caps) (*Launch, error) {
	if err := acceptConv2d(p, caps); err != nil {
		return nil, err
	}
	g, cout, cpg, opg, err := conv2dGeom(p)
	if err != nil {
		return nil, err
	}
	nop := numOpArgs(p)
	xt, wt, ot := p.Args[0], p.Args[1], p.Outs[0]
	per := c["per_thread"]
	chunks := (g.OW + per - 1) / per
	items := g.N * cout * g.OH * chunks
	opType := convOpType(p)

	b := newBuilder("conv2d", caps)
	xb, wb, bb, yb, epi, ops := convBuffers(b, p, nop)
	wg := b.Spec("wg", codegen.U32, int64(c["wg"]))
	perV := b.Spec("per_thread", codegen.U32, int64(per))
	b.WorkgroupSize(wg, b.U32(1), b.U32(1))
	u := func(v int) codegen.Value { return b.U32(uint32(v)) }
	i32 := func(v int) codegen.Value { return b.I32(int32(v)) }
	chunksV := b.Div(b.Add(u(g.OW), b.Sub(perV, u(1))), perV)
	q := b.Add(b.Mul(LinearGroup(b), wg), b.LocalIndex())
	b.If(b.Lt(q, b.Mul(u(g.N*cout*g.OH), chunksV)), func() {
		// Item order: nchw (n, o, oy, chunk), chunk fastest; nhwc (n, oy, chunk, o), o fastest.
		var o, chunk, oy, bi codegen.Value
		if g.NHWC {
			o = b.Rem(q, u(cout))
			r := b.Div(q, u(cout))
			chunk = b.Rem(r, chunksV)
			r = b.Div(r, chunksV)
			oy, bi = b.Rem(r, u(g.OH)), b.Div(r, u(g.OH))
		} else {
			chunk = b.Rem(q, chunksV)
			r := b.Div(q, chunksV)
			oy = b.Rem(r, u(g.OH))
			r = b.Div(r, u(g.OH))
			o, bi = b.Rem(r, u(cout)), b.Div(r, u(cout))
		}
		grp := b.Div(o, u(opg))
		ox0 := b.Mul(chunk, perV)
		acc := b.LocalArray("acc", codegen.F32, perV)
		init := b.F32(0)
		if bb != nil {
			init = LoadAs(b, bb, o, p.Args[2].DType)
		}
		b.For(u(0), perV, u(1), func(j codegen.Value) { b.Store(acc, j, init) })
		iy0 := b.Sub(b.Bitcast(b.Mul(oy, u(g.SH)), codegen.I32), i32(g.PT))
		ix0 := b.Sub(b.Bitcast(b.Mul(ox0, u(g.SW)), codegen.I32), i32(g.PL))
		b.For(u(0), u(cpg), u(1), func(ci codegen.Value) {
			ch := b.Add(b.Mul(grp, u(cpg)), ci)
			b.For(u(0), u(g.KH), u(1), func(ki codegen.Value) {
				iy := b.Add(iy0, b.Bitcast(b.Mul(ki, u(g.DH)), codegen.I32))
				rowIn := b.And(b.Ge(iy, i32(0)), b.Lt(iy, i32(g.H)))
				iyc := b.Bitcast(b.Clamp(iy, i32(0), i32(g.H-1)), codegen.U32)
				b.For(u(0), u(g.KW), u(1), func(kj codegen.Value) {
					wi := b.Add(b.Mul(b.Add(b.Mul(b.Add(b.Mul(o, u(cpg)), ci), u(g.KH)), ki), u(g.KW)), kj)
					wv := LoadAs(b, wb, wi, wt.DType)
					ixk := b.Add(ix0, b.Bitcast(b.Mul(kj, u(g.DW)), codegen.I32))
					b.For(u(0), perV, u(1), func(jj codegen.Value) {
						ix := b.Add(ixk, b.Bitcast(b.Mul(jj, u(g.SW)), codegen.I32))
						in := b.And(rowIn, b.And(b.Ge(ix, i32(0)), b.Lt(ix, i32(g.W))))
						ixc := b.Bitcast(b.Clamp(ix, i32(0), i32(g.W-1)), codegen.U32)
						xi := actIndex(b, g.NHWC, bi, ch, iyc, ixc, g.C, g.H, g.W)
						xv := b.Select(in, LoadAs(b, xb, xi, xt.DType), b.F32(0))
						b.Store(acc, jj, b.Fma(wv, xv, b.Load(acc, jj)))
					})
				})
			})
		})
		b.For(u(0), perV, u(1), func(jj codegen.Value) {
			ox := b.Add(ox0, jj)
			b.If(b.Lt(ox, u(g.OW)), func() {
				idx := actIndex(b, g.NHWC, bi, o, oy, ox, cout, g.OH, g.OW)
				StoreAs(b, yb, idx, Epilogue(b, p, epi, idx, b.Load(acc, jj), opType), ot.DType)
			})
		})
	})
	k, spec, err := finish(b, caps, c, "wg", "per_thread")
	if err != nil {
		return nil, err
	}
	s := Step{Kernel: k, Spec: spec, Grid: Grid1D((items+c["wg"]-1)/c["wg"], caps), Bindings: ops}
	flops := float64(2*ot.Shape.NumElements()*cpg*g.KH*g.KW) + float64(epilogueFlops(p)*ot.Shape.NumElements())
	return &Launch{Steps: []Step{s}, Flops: flops, Bytes: tensorBytes(p.Args, p.Outs)}, nil
}

// actIndex is the element index of (n, c, y, x) in an activation of channels × h × w in layout
// nchw or nhwc (u32 values).
func actIndex(b *codegen.Builder, nhwc bool, n, c, y, x codegen.Value, channels, h, w int) codegen.Value {
	u := func(v int) codegen.Value { return b.U32(uint32(v)) }
	if nhwc {
		return b.Add(b.Mul(b.Add(b.Mul(b.Add(b.Mul(n, u(h)), y), u(w)), x), u(channels)), c)
	}
	return b.Add(b.Mul(b.Add(b.Mul(b.Add(b.Mul(n, u(channels)), c), u(h)), y), u(w)), x)
}
