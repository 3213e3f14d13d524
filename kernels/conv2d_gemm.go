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
	Space:   tiledConvSpace(),
	Build:   buildConv2dGemm,
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
	ot := p.Outs[0]
	K := cpg * g.KH * g.KW
	gemm := &implicitConvGemm{name: "conv2d_gemm", groups: cout / opg, opg: opg, cout: cout, K: K, P: g.OH * g.OW, batch: g.N,
		flops: float64(2*ot.Shape.NumElements()*K) + float64(epilogueFlops(p)*ot.Shape.NumElements()),
		// X[kk = (ci, i, j), pos = (oy, ox)] = x[bi, grp·cpg + ci, oy·sh + i·dh − pt, ox·sw + j·dw − pl],
		// read at a clamped element when outside (the caller selects zero).
		gather: func(b *codegen.Builder, grp, bi codegen.Value) func(gk, pos codegen.Value) (codegen.Value, codegen.Value) {
			u := func(v int) codegen.Value { return b.U32(uint32(v)) }
			i32 := func(v int) codegen.Value { return b.I32(int32(v)) }
			return func(gk, pos codegen.Value) (codegen.Value, codegen.Value) {
				ci := b.Div(gk, u(g.KH*g.KW))
				ki, kj := b.Rem(b.Div(gk, u(g.KW)), u(g.KH)), b.Rem(gk, u(g.KW))
				oy, ox := b.Div(pos, u(g.OW)), b.Rem(pos, u(g.OW))
				iy := b.Sub(b.Bitcast(b.Add(b.Mul(oy, u(g.SH)), b.Mul(ki, u(g.DH))), codegen.I32), i32(g.PT))
				ix := b.Sub(b.Bitcast(b.Add(b.Mul(ox, u(g.SW)), b.Mul(kj, u(g.DW))), codegen.I32), i32(g.PL))
				in := b.And(b.And(b.Ge(iy, i32(0)), b.Lt(iy, i32(g.H))), b.And(b.Ge(ix, i32(0)), b.Lt(ix, i32(g.W))))
				ch := b.Add(b.Mul(grp, u(cpg)), b.Min(ci, u(cpg-1)))
				iyc := b.Bitcast(b.Clamp(iy, i32(0), i32(g.H-1)), codegen.U32)
				ixc := b.Bitcast(b.Clamp(ix, i32(0), i32(g.W-1)), codegen.U32)
				return actIndex(b, g.NHWC, bi, ch, iyc, ixc, g.C, g.H, g.W), in
			}
		},
		out: func(b *codegen.Builder, bi, o, pos codegen.Value) codegen.Value {
			u := func(v int) codegen.Value { return b.U32(uint32(v)) }
			return actIndex(b, g.NHWC, bi, o, b.Div(pos, u(g.OW)), b.Rem(pos, u(g.OW)), cout, g.OH, g.OW)
		},
	}
	return gemm.build(p, c, caps)
}
