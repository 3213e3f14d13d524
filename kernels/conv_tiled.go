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
	Build: buildConv1dTiled,
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
	nop := numOpArgs(p)
	xt, wt, ot := p.Args[0], p.Args[1], p.Outs[0]
	r := xt.Shape.Rank()
	batch := 1
	if r == 3 {
		batch = xt.Shape[0]
	}
	cin, L := xt.Shape[r-2], xt.Shape[r-1]
	cout, cpg, kw := wt.Shape[0], wt.Shape[1], wt.Shape[2]
	lout := ot.Shape[r-1]
	groups := p.Attrs.Int("groups", 1)
	st, pad, dil := p.Attrs.Int("stride", 1), p.Attrs.Int("padding", 0), p.Attrs.Int("dilation", 1)
	opg := cout / groups
	K := cpg * kw
	tm, tn := c["tile_m"], c["tile_n"]
	mTiles := (opg + tm - 1) / tm
	grid := [3]uint32{uint32((lout + tn - 1) / tn), uint32(mTiles * groups), uint32(batch)}
	if int(grid[0]) > caps.MaxGroups[0] || int(grid[1]) > caps.MaxGroups[1] {
		return nil, fmt.Errorf("tile_m=%d, tile_n=%d: %v workgroups exceed the device's limits", tm, tn, grid)
	}
	opType := xt.DType
	if p.Expr != nil {
		opType = p.Expr.Inputs[0].DType
	}

	b := codegen.NewBuilder("conv1d_tiled")
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
	g := b.Div(b.Y(wid), u(mTiles))
	m0 := b.Mul(b.Rem(b.Y(wid), u(mTiles)), TM) // within the group
	bi := b.Z(wid)
	xbase := b.Mul(b.Add(b.Mul(bi, u(cin)), b.Mul(g, u(cpg))), u(L))
	obase := b.Add(b.Mul(g, u(opg)), m0) // first output channel of the tile

	acc := make([]*codegen.Var, 16)
	for i := range acc {
		acc[i] = b.Var(fmt.Sprintf("acc%d", i), b.F32(0))
	}
	b.For(b.U32(0), u(K), TK, func(k0 codegen.Value) {
		// Channel-fastest: neighbouring invocations store neighbouring shared words (the
		// weights' global rows are K apart, but they are few and stay in cache).
		b.For(li, b.Mul(TM, TK), threads, func(e codegen.Value) {
			m, kk := b.Rem(e, TM), b.Div(e, TM)
			gk := b.Add(k0, kk)
			in := b.And(b.Lt(b.Add(m0, m), u(opg)), b.Lt(gk, u(K)))
			wi := b.Select(in, b.Add(b.Mul(b.Add(obase, m), u(K)), gk), b.U32(0))
			b.Store(ws, b.Add(b.Mul(kk, TM), m), b.Select(in, LoadAs(b, wb, wi, wt.DType), b.F32(0)))
		})
		b.For(li, b.Mul(TK, TN), threads, func(e codegen.Value) {
			kk, n := b.Div(e, TN), b.Rem(e, TN)
			gk, t := b.Add(k0, kk), b.Add(n0, n)
			ci, rr := b.Div(gk, u(kw)), b.Rem(gk, u(kw))
			idx := b.Sub(b.Bitcast(b.Add(b.Mul(t, u(st)), b.Mul(rr, u(dil))), codegen.I32), b.I32(int32(pad)))
			in := b.And(b.And(b.Lt(gk, u(K)), b.Lt(t, u(lout))), b.And(b.Ge(idx, b.I32(0)), b.Lt(idx, b.I32(int32(L)))))
			xi := b.Select(in, b.Add(xbase, b.Add(b.Mul(ci, u(L)), b.Bitcast(idx, codegen.U32))), b.U32(0))
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
			o := b.Add(b.Mul(g, u(opg)), m)
			bias := b.F32(0)
			if bb != nil {
				bias = LoadAs(b, bb, o, p.Args[2].DType)
			}
			for j := 0; j < 4; j++ {
				t := b.Add(n0, b.Add(tx, b.Mul(u(j), wx)))
				b.If(b.Lt(t, u(lout)), func() {
					idx := b.Add(b.Mul(b.Add(b.Mul(bi, u(cout)), o), u(lout)), t)
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
		return nil, fmt.Errorf("conv1d_tiled: shared memory %d bytes (device %d): %v", n, caps.MaxSharedBytes, err)
	}
	s := Step{Kernel: k, Spec: spec, Grid: grid, Bindings: ops}
	return &Launch{Steps: []Step{s}, Flops: float64(2 * batch * cout * lout * K), Bytes: tensorBytes(p.Args, p.Outs)}, nil
}
