package kernels

import (
	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
)

// Conv1d is a direct 1-D convolution (stride, padding, dilation, groups, optional bias) of x
// [cin, L] or [n, cin, L] by w [cout, cin/groups, k], with an optional epilogue on the result
// (Whisper's conv + gelu is one kernel). Each invocation computes per_thread consecutive outputs
// of one output channel, so each weight it loads serves per_thread outputs; arithmetic is f32.
// Both parameters are specialization constants.
//
// For many channels conv1d_tiled (an implicit GEMM through shared memory) is faster: on the H200,
// Whisper-base's conv1 takes 104 µs here and 53 µs there, conv2 406 µs and 280 µs (f32
// arithmetic on f16 data; no tensor cores yet). The tuner chooses between them by measurement.
var Conv1d = &Template{
	Name:    "conv1d",
	Accepts: acceptConv1d,
	Space:   NewSpace(Ints("wg", 64, 128, 256, 32), Ints("per_thread", 2, 1, 4, 8)).Where(fitsInvocations("wg")),
	Build:   buildConv1d,
}

func init() { Register(Conv1d) }

func acceptConv1d(p *Problem, caps Caps) error {
	_, err := acceptConvOp(p, caps, ir.Conv1d)
	return err
}

func buildConv1d(p *Problem, c Config, caps Caps) (*Launch, error) {
	if err := acceptConv1d(p, caps); err != nil {
		return nil, err
	}
	nop := numOpArgs(p)
	xt, wt, ot := p.Args[0], p.Args[1], p.Outs[0]
	g := conv1dGeom(p)
	batch, cin, L, cout, cpg, kw, lout := g.batch, g.cin, g.L, g.cout, g.cpg, g.kw, g.lout
	st, pad, dil, opg := g.stride, g.pad, g.dil, g.opg
	chunks := (lout + c["per_thread"] - 1) / c["per_thread"]
	items := batch * cout * chunks
	opType := convOpType(p)

	b := newBuilder("conv1d", caps)
	xb, wb, bb, yb, epi, ops := convBuffers(b, p, nop)
	wg := b.Spec("wg", codegen.U32, int64(c["wg"]))
	per := b.Spec("per_thread", codegen.U32, int64(c["per_thread"]))
	b.WorkgroupSize(wg, b.U32(1), b.U32(1))
	u := func(v int) codegen.Value { return b.U32(uint32(v)) }
	// per_thread is a specialization constant: the accumulators are a local array indexed by
	// loops of constant trip count, which the driver unrolls into registers.
	chunksV := b.Div(b.Add(u(lout), b.Sub(per, u(1))), per)
	q := b.Add(b.Mul(LinearGroup(b), wg), b.LocalIndex())
	b.If(b.Lt(q, b.Mul(u(batch*cout), chunksV)), func() {
		chunk := b.Rem(q, chunksV)
		bo := b.Div(q, chunksV) // batch·cout + o
		o := b.Rem(bo, u(cout))
		bi := b.Div(bo, u(cout))
		g := b.Div(o, u(opg))
		t0 := b.Mul(chunk, per)
		acc := b.LocalArray("acc", codegen.F32, per)
		init := b.F32(0)
		if bb != nil {
			init = LoadAs(b, bb, o, p.Args[2].DType)
		}
		b.For(u(0), per, u(1), func(j codegen.Value) { b.Store(acc, j, init) })
		// First input position of output t0 (may be negative: padding).
		p0 := b.Sub(b.Bitcast(b.Mul(t0, u(st)), codegen.I32), b.I32(int32(pad)))
		b.For(b.U32(0), u(cpg), b.U32(1), func(ci codegen.Value) {
			xrow := b.Mul(b.Add(b.Mul(bi, u(cin)), b.Add(b.Mul(g, u(cpg)), ci)), u(L))
			wrow := b.Mul(b.Add(b.Mul(o, u(cpg)), ci), u(kw))
			b.For(b.U32(0), u(kw), b.U32(1), func(k codegen.Value) {
				wv := LoadAs(b, wb, b.Add(wrow, k), wt.DType)
				pk := b.Add(p0, b.Bitcast(b.Mul(k, u(dil)), codegen.I32))
				b.For(u(0), per, u(1), func(j codegen.Value) {
					// Padding reads a clamped element and multiplies it by zero: straight-line
					// code, no branch per tap.
					idx := b.Add(pk, b.Bitcast(b.Mul(j, u(st)), codegen.I32))
					in := b.And(b.Ge(idx, b.I32(0)), b.Lt(idx, b.I32(int32(L))))
					xi := b.Bitcast(b.Clamp(idx, b.I32(0), b.I32(int32(L-1))), codegen.U32)
					xv := b.Select(in, LoadAs(b, xb, b.Add(xrow, xi), xt.DType), b.F32(0))
					b.Store(acc, j, b.Fma(wv, xv, b.Load(acc, j)))
				})
			})
		})
		b.For(u(0), per, u(1), func(j codegen.Value) {
			t := b.Add(t0, j)
			b.If(b.Lt(t, u(lout)), func() {
				idx := b.Add(b.Mul(bo, u(lout)), t)
				StoreAs(b, yb, idx, Epilogue(b, p, epi, idx, b.Load(acc, j), opType), ot.DType)
			})
		})
	})
	k, spec, err := finish(b, caps, c, "wg", "per_thread")
	if err != nil {
		return nil, err
	}
	s := Step{Kernel: k, Spec: spec, Grid: Grid1D((items+c["wg"]-1)/c["wg"], caps), Bindings: ops}
	return &Launch{Steps: []Step{s}, Flops: float64(2 * batch * cout * lout * cpg * kw), Bytes: tensorBytes(p.Args, p.Outs)}, nil
}

// convBuffers declares a conv1d kernel's bindings in the order both conv templates use — x, w,
// the bias when the op has one (nop == 3), y, then the epilogue's inputs — and returns them with
// the operand of each binding.
func convBuffers(b *codegen.Builder, p *Problem, nop int) (xb, wb, bb, yb *codegen.Buffer, epi []*codegen.Buffer, ops []Operand) {
	xb = b.Buffer("x", StorageType(p.Args[0].DType), codegen.ReadOnly)
	wb = b.Buffer("w", StorageType(p.Args[1].DType), codegen.ReadOnly)
	ops = []Operand{{Arg, 0}, {Arg, 1}}
	if nop == 3 {
		bb = b.Buffer("bias", StorageType(p.Args[2].DType), codegen.ReadOnly)
		ops = append(ops, Operand{Arg, 2})
	}
	yb = b.Buffer("y", StorageType(p.Outs[0].DType), codegen.WriteOnly)
	ops = append(ops, Operand{Out, 0})
	epi, epiOps := EpilogueBuffers(b, p)
	return xb, wb, bb, yb, epi, append(ops, epiOps...)
}
