package kernels

import (
	"fmt"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
)

// What the convolution templates share: the checks of a convolution problem, the operand types,
// and the implicit GEMM that conv1d_tiled and conv2d_gemm are two gathers of.

// acceptConvOp checks a conv1d or conv2d problem (op, operands, result, epilogue, dtypes) and
// returns the result type the op gives.
func acceptConvOp(p *Problem, caps Caps, op ir.Op) (ir.Type, error) {
	if p.Op != op {
		return ir.Type{}, otherOp(p)
	}
	nop := numOpArgs(p)
	if nop > len(p.Args) {
		return ir.Type{}, fmt.Errorf("problem has %d op arguments of %d", nop, len(p.Args))
	}
	_, outs, err := ir.Infer(p.Op, p.Attrs, p.Args[:nop])
	if err != nil {
		return ir.Type{}, err
	}
	if len(p.Outs) != 1 {
		return ir.Type{}, fmt.Errorf("want one result, got %d", len(p.Outs))
	}
	if p.Expr == nil && !p.Outs[0].Equal(outs[0]) {
		return ir.Type{}, fmt.Errorf("result %s, the op gives %s", p.Outs[0], outs[0])
	}
	if err := checkEpilogueOf(p, outs[0]); err != nil {
		return ir.Type{}, err
	}
	return outs[0], checkDTypes(p, caps)
}

// convOpType is the type the epilogue sees the convolution's result in: the inputs', or the
// fused expression's first input's.
func convOpType(p *Problem) ir.DType {
	if p.Expr != nil {
		return p.Expr.Inputs[0].DType
	}
	return p.Args[0].DType
}

// conv1dGeometry is a conv1d problem's sizes: x [batch, cin, L] (batch 1 when x is 2-D), w
// [cout, cpg, kw], the output length, and the op's attributes.
type conv1dGeometry struct {
	batch, cin, L, cout, cpg, kw, lout int
	groups, opg, stride, pad, dil      int
}

func conv1dGeom(p *Problem) conv1dGeometry {
	xt, wt, ot := p.Args[0], p.Args[1], p.Outs[0]
	r := xt.Shape.Rank()
	g := conv1dGeometry{batch: 1, cin: xt.Shape[r-2], L: xt.Shape[r-1], cout: wt.Shape[0], cpg: wt.Shape[1], kw: wt.Shape[2],
		lout: ot.Shape[r-1], groups: p.Attrs.Int("groups", 1),
		stride: p.Attrs.Int("stride", 1), pad: p.Attrs.Int("padding", 0), dil: p.Attrs.Int("dilation", 1)}
	if r == 3 {
		g.batch = xt.Shape[0]
	}
	g.opg = g.cout / g.groups
	return g
}

// tiledConvSpace is the tuning space of the implicit-GEMM convolutions: a tile_m × tile_n block
// of (output channel, position) per workgroup, tile_k-deep slices in shared memory.
func tiledConvSpace() Space {
	return NewSpace(Ints("tile_m", 64, 32, 16), Ints("tile_n", 64, 32, 128), Ints("tile_k", 16, 8)).
		Where(func(p *Problem, c Config, caps Caps) error {
			tm, tn, tk := c["tile_m"], c["tile_n"], c["tile_k"]
			if th := (tm / 4) * (tn / 4); th > caps.MaxInvocations || tn/4 > caps.MaxWorkgroupSize[0] || tm/4 > caps.MaxWorkgroupSize[1] {
				return fmt.Errorf("tile_m=%d × tile_n=%d needs %d invocations, more than the device allows", tm, tn, th)
			}
			if n := 4 * tk * (tm + tn); n > caps.MaxSharedBytes {
				return fmt.Errorf("tiles need %d bytes of shared memory, the device has %d", n, caps.MaxSharedBytes)
			}
			return nil
		})
}

// implicitConvGemm is a convolution computed as a GEMM per group and image: out[o, pos] =
// Σ_kk W[o, kk]·X[kk, pos], W the weights as stored (cout × K, K = cin/groups × the kernel's
// taps) and X gathered from the input on the fly. A workgroup computes a tile_m × tile_n block
// of (output channel, position), staging tile_k-deep slices of W and X in shared memory; each
// invocation accumulates a 4 × 4 block in registers, rows and columns interleaved tile/4 apart so
// that shared reads (and, in nchw, global stores) are contiguous across invocations. Groups and
// images are the grid's y and z. The two templates differ in gather and out only.
type implicitConvGemm struct {
	name                 string
	groups, opg, cout, K int
	P, batch             int // output positions per image, images
	flops                float64
	// gather is called once per workgroup with its group and image and returns, for a
	// reduction index gk < K and an output position pos < P, the input element's index and
	// whether it lies inside the input (padding reads zero).
	gather func(b *codegen.Builder, grp, bi codegen.Value) func(gk, pos codegen.Value) (idx, in codegen.Value)
	// out is the index of output channel o at position pos of image bi.
	out func(b *codegen.Builder, bi, o, pos codegen.Value) codegen.Value
}

func (g *implicitConvGemm) build(p *Problem, c Config, caps Caps) (*Launch, error) {
	nop := numOpArgs(p)
	xt, wt, ot := p.Args[0], p.Args[1], p.Outs[0]
	tm, tn := c["tile_m"], c["tile_n"]
	mTiles := (g.opg + tm - 1) / tm
	grid := [3]uint32{uint32((g.P + tn - 1) / tn), uint32(mTiles * g.groups), uint32(g.batch)}
	if int(grid[0]) > caps.MaxGroups[0] || int(grid[1]) > caps.MaxGroups[1] {
		return nil, fmt.Errorf("tile_m=%d, tile_n=%d: %v workgroups exceed the device's limits", tm, tn, grid)
	}
	opType := convOpType(p)

	b := newBuilder(g.name, caps)
	xb, wb, bb, yb, epi, ops := convBuffers(b, p, nop)
	// The workgroup is (tile_n/4) × (tile_m/4) invocations; the tiles are derived from it.
	wx := b.Spec("threads_n", codegen.U32, int64(tn/4))
	wy := b.Spec("threads_m", codegen.U32, int64(tm/4))
	TK := b.Spec("tile_k", codegen.U32, int64(c["tile_k"]))
	b.WorkgroupSize(wx, wy, b.U32(1))
	TM, TN := b.Mul(wy, b.U32(4)), b.Mul(wx, b.U32(4))
	ws := b.Shared("w_tile", codegen.F32, b.Mul(TK, TM)) // [tile_k][tile_m]
	xs := b.Shared("x_tile", codegen.F32, b.Mul(TK, TN)) // [tile_k][tile_n]
	threads := b.Mul(wx, wy)
	u := func(v int) codegen.Value { return b.U32(uint32(v)) }

	lid, wid := b.LocalID(), b.WorkgroupID()
	tx, ty, li := b.X(lid), b.Y(lid), b.LocalIndex()
	n0 := b.Mul(b.X(wid), TN)
	grp := b.Div(b.Y(wid), u(mTiles))
	m0 := b.Mul(b.Rem(b.Y(wid), u(mTiles)), TM) // within the group
	bi := b.Z(wid)
	obase := b.Add(b.Mul(grp, u(g.opg)), m0) // first output channel of the tile
	gather := g.gather(b, grp, bi)

	acc := make([]*codegen.Var, 16)
	for i := range acc {
		acc[i] = b.Var(fmt.Sprintf("acc%d", i), b.F32(0))
	}
	b.For(b.U32(0), u(g.K), TK, func(k0 codegen.Value) {
		// Channel-fastest: neighbouring invocations store neighbouring shared words (the
		// weights' global rows are K apart, but they are few and stay in cache).
		b.For(li, b.Mul(TM, TK), threads, func(e codegen.Value) {
			m, kk := b.Rem(e, TM), b.Div(e, TM)
			gk := b.Add(k0, kk)
			in := b.And(b.Lt(b.Add(m0, m), u(g.opg)), b.Lt(gk, u(g.K)))
			wi := b.Select(in, b.Add(b.Mul(b.Add(obase, m), u(g.K)), gk), b.U32(0))
			b.Store(ws, b.Add(b.Mul(kk, TM), m), b.Select(in, LoadAs(b, wb, wi, wt.DType), b.F32(0)))
		})
		b.For(li, b.Mul(TK, TN), threads, func(e codegen.Value) {
			kk, n := b.Div(e, TN), b.Rem(e, TN)
			gk, pos := b.Add(k0, kk), b.Add(n0, n)
			idx, inside := gather(gk, pos)
			in := b.And(b.And(b.Lt(gk, u(g.K)), b.Lt(pos, u(g.P))), inside)
			xi := b.Select(in, idx, b.U32(0))
			b.Store(xs, b.Add(b.Mul(kk, TN), n), b.Select(in, LoadAs(b, xb, xi, xt.DType), b.F32(0)))
		})
		b.Barrier()
		b.For(b.U32(0), TK, b.U32(1), func(kk codegen.Value) {
			var a, x [4]codegen.Value
			for i := 0; i < 4; i++ {
				a[i] = b.Load(ws, b.Add(b.Mul(kk, TM), b.Add(ty, b.Mul(u(i), wy))))
				x[i] = b.Load(xs, b.Add(b.Mul(kk, TN), b.Add(tx, b.Mul(u(i), wx))))
			}
			for i := 0; i < 4; i++ {
				for j := 0; j < 4; j++ {
					b.Set(acc[4*i+j], b.Fma(a[i], x[j], b.Get(acc[4*i+j])))
				}
			}
		})
		b.Barrier()
	})
	for i := 0; i < 4; i++ {
		m := b.Add(m0, b.Add(ty, b.Mul(u(i), wy)))
		b.If(b.Lt(m, u(g.opg)), func() {
			o := b.Add(b.Mul(grp, u(g.opg)), m)
			bias := b.F32(0)
			if bb != nil {
				bias = LoadAs(b, bb, o, p.Args[2].DType)
			}
			for j := 0; j < 4; j++ {
				pos := b.Add(n0, b.Add(tx, b.Mul(u(j), wx)))
				b.If(b.Lt(pos, u(g.P)), func() {
					idx := g.out(b, bi, o, pos)
					v := b.Add(b.Get(acc[4*i+j]), bias)
					StoreAs(b, yb, idx, Epilogue(b, p, epi, idx, v, opType), ot.DType)
				})
			}
		})
	}
	k, err := b.Finish()
	if err != nil {
		return nil, err
	}
	if err := caps.Supports(k); err != nil {
		return nil, err
	}
	spec, err := k.SpecValues(map[string]int64{"threads_n": int64(tn / 4), "threads_m": int64(tm / 4), "tile_k": int64(c["tile_k"])})
	if err != nil {
		return nil, err
	}
	if n, err := k.SharedBytes(spec); err != nil || n > caps.MaxSharedBytes {
		return nil, fmt.Errorf("%s: shared memory %d bytes (device %d): %v", g.name, n, caps.MaxSharedBytes, err)
	}
	s := Step{Kernel: k, Spec: spec, Grid: grid, Bindings: ops}
	return &Launch{Steps: []Step{s}, Flops: g.flops, Bytes: tensorBytes(p.Args, p.Outs)}, nil
}
