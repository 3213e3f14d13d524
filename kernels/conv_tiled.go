package kernels

import (
	"fmt"

	"github.com/vkc-project/vkc/codegen"
)

// Conv1dTiled computes conv1d as an implicit GEMM per group: out[o, t] = Σ_kk W[o, kk]·X[kk, t]
// with kk = (ci, r) running over cin/groups · k, W the weights as stored and X gathered from the
// input on the fly (t·stride + r·dilation − padding, zero outside). A workgroup computes a
// tile_m × tile_n block of (output channel, position), staging tile_k-deep slices of W and X in
// shared memory; each invocation accumulates a 4 × 4 block in registers (rows and columns
// interleaved tile/4 apart, so shared reads and global stores are contiguous across invocations).
// Groups and batches are the grid's y and z. Same operands, bias and epilogue as Conv1d.
var Conv1dTiled = &Template{
	Name:    "conv1d_tiled",
	Accepts: acceptConv1dTiled,
	Space:   tiledConvSpace(),
	Build:   buildConv1dTiled,
}

func init() { Register(Conv1dTiled) }

func acceptConv1dTiled(p *Problem, caps Caps) error {
	if err := acceptConv1d(p, caps); err != nil {
		return err
	}
	x := p.Args[0].Shape
	if x.Rank() == 3 && x[0] > caps.MaxGroups[2] {
		return fmt.Errorf("batch %d exceeds the device's %d workgroups in z", x[0], caps.MaxGroups[2])
	}
	return nil
}

func buildConv1dTiled(p *Problem, c Config, caps Caps) (*Launch, error) {
	if err := acceptConv1dTiled(p, caps); err != nil {
		return nil, err
	}
	g := conv1dGeom(p)
	K := g.cpg * g.kw
	gemm := &implicitConvGemm{name: "conv1d_tiled", groups: g.groups, opg: g.opg, cout: g.cout, K: K, P: g.lout, batch: g.batch,
		flops: float64(2 * g.batch * g.cout * g.lout * K),
		// X[kk = (ci, r), t] = x[bi, grp·cpg + ci, t·stride + r·dilation − padding].
		gather: func(b *codegen.Builder, grp, bi codegen.Value) func(gk, pos codegen.Value) (codegen.Value, codegen.Value) {
			u := func(v int) codegen.Value { return b.U32(uint32(v)) }
			xbase := b.Mul(b.Add(b.Mul(bi, u(g.cin)), b.Mul(grp, u(g.cpg))), u(g.L))
			return func(gk, t codegen.Value) (codegen.Value, codegen.Value) {
				ci, rr := b.Div(gk, u(g.kw)), b.Rem(gk, u(g.kw))
				idx := b.Sub(b.Bitcast(b.Add(b.Mul(t, u(g.stride)), b.Mul(rr, u(g.dil))), codegen.I32), b.I32(int32(g.pad)))
				in := b.And(b.Ge(idx, b.I32(0)), b.Lt(idx, b.I32(int32(g.L))))
				return b.Add(xbase, b.Add(b.Mul(ci, u(g.L)), b.Bitcast(idx, codegen.U32))), in
			}
		},
		out: func(b *codegen.Builder, bi, o, t codegen.Value) codegen.Value {
			u := func(v int) codegen.Value { return b.U32(uint32(v)) }
			return b.Add(b.Mul(b.Add(b.Mul(bi, u(g.cout)), o), u(g.lout)), t)
		},
	}
	return gemm.build(p, c, caps)
}
