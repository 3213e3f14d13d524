package kernels

import (
	"fmt"

	"github.com/vkc-project/vkc/codegen"
)

// Conv2dGemm computes conv2d as an implicit GEMM per group and image: out[o, p] = Σ_kk
// W[o, kk]·X[kk, p] with kk = (ci, i, j) running over cin/groups · kh · kw (the weights' own
// OIHW order, so W is read as stored), p = (oy, ox) over the output plane, and X gathered from
// the input on the fly (im2col without the copy: oy·sh + i·dh − pt, ox·sw + j·dw − pl, zero
// outside). It is conv1d_tiled's scheme (and the matmul templates'): a workgroup computes a
// tile_m × tile_n block of (output channel, output position), staging tile_k-deep slices of W
// and X in shared memory, and each invocation accumulates a 4 × 4 block in registers (rows and
// columns interleaved tile/4 apart, so shared reads are contiguous across invocations). Groups
// and images are the grid's y and z. Same operands, bias and epilogue as Conv2d; nchw and nhwc.
//
// (A cooperative-matrix form of this GEMM belongs with the cooperative-matrix matmul template
// once it exists; lavapipe has none.)
var Conv2dGemm = &Template{
	Name:    "conv2d_gemm",
	Accepts: acceptConv2dGemm,
	Space: NewSpace(Ints("tile_m", 64, 32, 16), Ints("tile_n", 64, 32, 128), Ints("tile_k", 16, 8)).
		Where(func(p *Problem, c Config, caps Caps) error {
			tm, tn, tk := c["tile_m"], c["tile_n"], c["tile_k"]
			if th := (tm / 4) * (tn / 4); th > caps.MaxInvocations || tn/4 > caps.MaxWorkgroupSize[0] || tm/4 > caps.MaxWorkgroupSize[1] {
				return fmt.Errorf("tile_m=%d × tile_n=%d needs %d invocations, more than the device allows", tm, tn, th)
			}
			if n := 4 * tk * (tm + tn); n > caps.MaxSharedBytes {
				return fmt.Errorf("tiles need %d bytes of shared memory, the device has %d", n, caps.MaxSharedBytes)
			}
			return nil
		}),
	Build: buildConv2dGemm,
}

func init() { Register(Conv2dGemm) }

func acceptConv2dGemm(p *Problem, caps Caps) error {
	if err := acceptConv2d(p, caps); err != nil {
		return err
	}
	if w := p.Args[1].Shape; w[0]/p.Attrs.Int("groups", 1) < 4 {
		// A tile row per output channel would idle at least 3 of every 4 register rows.
		return fmt.Errorf("%d output channels per group: the direct conv2d serves depthwise convolutions", w[0]/p.Attrs.Int("groups", 1))
	}
	if n := p.Args[0].Shape[0]; n > caps.MaxGroups[2] {
		return fmt.Errorf("batch %d exceeds the device's %d workgroups in z", n, caps.MaxGroups[2])
	}
	return nil
}

func buildConv2dGemm(p *Problem, c Config, caps Caps) (*Launch, error) {
	if err := acceptConv2dGemm(p, caps); err != nil {
		return nil, err
	}
	g, cout, cpg, opg, err := conv2dGeom(p)
	if err != nil {
		return nil, err
	}
	groups := cout / opg
	nop := numOpArgs(p)
	xt, wt, ot := p.Args[0], p.Args[1], p.Outs[0]
	K := cpg * g.KH * g.KW
	P := g.OH * g.OW
	tm, tn := c["tile_m"], c["tile_n"]
	mTiles := (opg + tm - 1) / tm
	grid := [3]uint32{uint32((P + tn - 1) / tn), uint32(mTiles * groups), uint32(g.N)}
	if int(grid[0]) > caps.MaxGroups[0] || int(grid[1]) > caps.MaxGroups[1] {
		return nil, fmt.Errorf("tile_m=%d, tile_n=%d: %v workgroups exceed the device's limits", tm, tn, grid)
	}
	opType := xt.DType
	if p.Expr != nil {
		opType = p.Expr.Inputs[0].DType
	}

	b := codegen.NewBuilder("conv2d_gemm")
	xb, wb, bb, yb, epi, ops := convBuffers(b, p, nop)
	wx := b.Spec("threads_n", codegen.U32, int64(tn/4))
	wy := b.Spec("threads_m", codegen.U32, int64(tm/4))
	TK := b.Spec("tile_k", codegen.U32, int64(c["tile_k"]))
	b.WorkgroupSize(wx, wy, b.U32(1))
	TM, TN := b.Mul(wy, b.U32(4)), b.Mul(wx, b.U32(4))
	ws := b.Shared("w_tile", codegen.F32, b.Mul(TK, TM)) // [tile_k][tile_m]
	xs := b.Shared("x_tile", codegen.F32, b.Mul(TK, TN)) // [tile_k][tile_n]
	threads := b.Mul(wx, wy)
	u := func(v int) codegen.Value { return b.U32(uint32(v)) }
	i32 := func(v int) codegen.Value { return b.I32(int32(v)) }

	lid, wid := b.LocalID(), b.WorkgroupID()
	tx, ty, li := b.X(lid), b.Y(lid), b.LocalIndex()
	n0 := b.Mul(b.X(wid), TN)
	grp := b.Div(b.Y(wid), u(mTiles))
	m0 := b.Mul(b.Rem(b.Y(wid), u(mTiles)), TM) // within the group
	bi := b.Z(wid)
	obase := b.Add(b.Mul(grp, u(opg)), m0) // first output channel of the tile

	acc := make([]*codegen.Var, 16)
	for i := range acc {
		acc[i] = b.Var(fmt.Sprintf("acc%d", i), b.F32(0))
	}
	b.For(b.U32(0), u(K), TK, func(k0 codegen.Value) {
		b.For(li, b.Mul(TM, TK), threads, func(e codegen.Value) {
			m, kk := b.Rem(e, TM), b.Div(e, TM)
			gk := b.Add(k0, kk)
			in := b.And(b.Lt(b.Add(m0, m), u(opg)), b.Lt(gk, u(K)))
			wi := b.Select(in, b.Add(b.Mul(b.Add(obase, m), u(K)), gk), b.U32(0))
			b.Store(ws, b.Add(b.Mul(kk, TM), m), b.Select(in, LoadAs(b, wb, wi, wt.DType), b.F32(0)))
		})
		b.For(li, b.Mul(TK, TN), threads, func(e codegen.Value) {
			kk, n := b.Div(e, TN), b.Rem(e, TN)
			gk, pos := b.Add(k0, kk), b.Add(n0, n)
			ci := b.Div(gk, u(g.KH*g.KW))
			ki, kj := b.Rem(b.Div(gk, u(g.KW)), u(g.KH)), b.Rem(gk, u(g.KW))
			oy, ox := b.Div(pos, u(g.OW)), b.Rem(pos, u(g.OW))
			iy := b.Sub(b.Bitcast(b.Add(b.Mul(oy, u(g.SH)), b.Mul(ki, u(g.DH))), codegen.I32), i32(g.PT))
			ix := b.Sub(b.Bitcast(b.Add(b.Mul(ox, u(g.SW)), b.Mul(kj, u(g.DW))), codegen.I32), i32(g.PL))
			in := b.And(b.And(b.Lt(gk, u(K)), b.Lt(pos, u(P))),
				b.And(b.And(b.Ge(iy, i32(0)), b.Lt(iy, i32(g.H))), b.And(b.Ge(ix, i32(0)), b.Lt(ix, i32(g.W)))))
			ch := b.Add(b.Mul(grp, u(cpg)), b.Min(ci, u(cpg-1)))
			iyc := b.Bitcast(b.Clamp(iy, i32(0), i32(g.H-1)), codegen.U32)
			ixc := b.Bitcast(b.Clamp(ix, i32(0), i32(g.W-1)), codegen.U32)
			xi := b.Select(in, actIndex(b, g.NHWC, bi, ch, iyc, ixc, g.C, g.H, g.W), b.U32(0))
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
		b.If(b.Lt(m, u(opg)), func() {
			o := b.Add(b.Mul(grp, u(opg)), m)
			bias := b.F32(0)
			if bb != nil {
				bias = LoadAs(b, bb, o, p.Args[2].DType)
			}
			for j := 0; j < 4; j++ {
				pos := b.Add(n0, b.Add(tx, b.Mul(u(j), wx)))
				b.If(b.Lt(pos, u(P)), func() {
					idx := actIndex(b, g.NHWC, bi, o, b.Div(pos, u(g.OW)), b.Rem(pos, u(g.OW)), cout, g.OH, g.OW)
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
		return nil, fmt.Errorf("conv2d_gemm: shared memory %d bytes (device %d): %v", n, caps.MaxSharedBytes, err)
	}
	s := Step{Kernel: k, Spec: spec, Grid: grid, Bindings: ops}
	flops := float64(2*ot.Shape.NumElements()*K) + float64(epilogueFlops(p)*ot.Shape.NumElements())
	return &Launch{Steps: []Step{s}, Flops: flops, Bytes: tensorBytes(p.Args, p.Outs)}, nil
}
