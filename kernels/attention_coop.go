package kernels

import (
	"fmt"
	"math"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
)

// AttentionCoop is flash attention for prefill with both products on cooperative matrices: rows
// are AttentionFlash's (query, grouped query head) pairs of one key/value head, and each subgroup
// of a workgroup of `warps` takes M of them (16 on the H200). Per key tile of block_k keys, staged
// in shared memory for the whole workgroup (16-byte units, the next tile's loads issued before
// the current tile's products):
//
//  1. S = Q·Kᵀ on matrices (Q's matrices loaded once, K's tile read as column-major Kᵀ), scaled on
//     the accumulators, stored to the subgroup's scratch;
//  2. the online softmax on the scratch, (subgroup size)/M invocations per row (their maximum and
//     sum meet by shuffles; with subgroups smaller than M, each invocation takes M/(subgroup size)
//     rows), masks applied (kv_len, causal, window as in AttentionFlash), the probabilities
//     written as f16 (bf16) P;
//  3. P·V on matrices into fresh accumulators, stored to the scratch, and added to the output rows,
//     which the softmax's invocations hold in registers (rescaled by the softmax's alpha).
//
// The subgroup's three phases meet at subgroup barriers; the workgroup meets only to swap key
// tiles. The result o/l goes through the problem's epilogue. Limits: f16 or bf16 q, k, v (one
// type), head dims d and dv multiples of the product's K and N (16); like AttentionFlash, the grid covers every row and the key range of each block is
// what its rows may see. Specialization constants: none (the tiles are unrolled at build time).
// Grid: ceil(rows/(warps·M)) × hkv.
var AttentionCoop = &Template{
	Name: "attention_coop",
	Accepts: func(p *Problem, caps Caps) error {
		_, _, err := acceptAttnCoop(p, caps)
		return err
	},
	Space: NewSpace(Ints("warps", 2, 4, 1, 8), Ints("block_k", 32, 64, 16)).Where(attnCoopFits),
	Build: buildAttnCoop,
}

func init() {
	// It places its queries at kv_len − n + i with a run-time length n.
	AttentionCoop.ReadsLength = true
	Register(AttentionCoop)
}

func acceptAttnCoop(p *Problem, caps Caps) (*attn, CoopShape, error) {
	a, err := readAttn(p)
	if err != nil {
		return nil, CoopShape{}, err
	}
	if len(caps.CoopShapes) == 0 || !caps.VulkanMemoryModel {
		return nil, CoopShape{}, fmt.Errorf("the device has no cooperative matrices (or no Vulkan memory model)")
	}
	if err := coopDTypes(p, caps, -1); err != nil {
		return nil, CoopShape{}, err
	}
	if err := checkEpilogue(p, a.opType); err != nil {
		return nil, CoopShape{}, err
	}
	var elem codegen.Type
	switch a.dt {
	case ir.F16:
		elem = codegen.F16
		if !caps.Float16 {
			return nil, CoopShape{}, fmt.Errorf("f16 matrices need shaderFloat16")
		}
	case ir.BF16:
		elem = codegen.BF16
		if !caps.BFloat16Matrix {
			return nil, CoopShape{}, fmt.Errorf("bf16 matrices need bfloat16 cooperative matrices, which the device lacks")
		}
	default:
		return nil, CoopShape{}, fmt.Errorf("q, k, v are %s; cooperative matrices take f16 or bf16", a.dt)
	}
	for i := 1; i < 3; i++ {
		if p.Args[i].DType != a.dt {
			return nil, CoopShape{}, fmt.Errorf("q is %s, argument %d %s: one 16-bit type for all three", a.dt, i, p.Args[i].DType)
		}
	}
	s, ok := caps.CoopShape(elem, elem, codegen.F32)
	if !ok {
		return nil, CoopShape{}, fmt.Errorf("the device multiplies no %s matrices into f32", elem)
	}
	switch {
	case a.d%s.K != 0 || a.dv%s.N != 0 || a.d%8 != 0:
		return nil, CoopShape{}, fmt.Errorf("head dims %d and %d are not multiples of the %dx%dx%d product", a.d, a.dv, s.M, s.N, s.K)
	case s.N%s.K != 0 && s.K%s.N != 0:
		return nil, CoopShape{}, fmt.Errorf("product %dx%dx%d: key tiles serve as N of one product and K of the other", s.M, s.N, s.K)
	case caps.SubgroupSize <= 0 || (caps.SubgroupSize%s.M != 0 && s.M%caps.SubgroupSize != 0):
		return nil, CoopShape{}, fmt.Errorf("subgroup size %d does not split into %d rows", caps.SubgroupSize, s.M)
	case a.dv%(4*max(1, caps.SubgroupSize/s.M)) != 0:
		return nil, CoopShape{}, fmt.Errorf("dv %d does not split into vec4s over %d invocations per row", a.dv, caps.SubgroupSize/s.M)
	case caps.MinStorageOffsetAlign%16 != 0:
		return nil, CoopShape{}, fmt.Errorf("operands aligned to %d bytes; 16-byte units need 16", caps.MinStorageOffsetAlign)
	case a.hkv > caps.MaxGroups[1]:
		return nil, CoopShape{}, fmt.Errorf("%d key/value heads exceed the device's %d workgroups in y", a.hkv, caps.MaxGroups[1])
	case a.sq < 2:
		return nil, CoopShape{}, fmt.Errorf("one query: the decode templates serve it")
	case a.lay.K == "hds":
		// Its K tiles are rows of d features in 16-byte units; K transposed would need a
		// row-major Kᵀ load of the tile instead, not written.
		return nil, CoopShape{}, fmt.Errorf("k_layout hds (K transposed): cooperative attention reads K in shd or hsd only")
	}
	return a, s, nil
}

// attnCoopGeom is one configuration's shared-memory layout, in bytes.
func attnCoopShared(a *attn, s CoopShape, warps, bk int) int {
	br := warps * s.M
	q := 16 * br * (a.d/8 + 1)
	kt := 16 * bk * (a.d/8 + 1)
	vt := 16 * bk * (a.dv/8 + 1)
	scratch := 4 * warps * s.M * max(bk, a.dv)
	pt := 2 * warps * s.M * (bk + 8)
	return q + kt + vt + scratch + pt
}

func attnCoopFits(p *Problem, c Config, caps Caps) error {
	a, s, err := acceptAttnCoop(p, caps)
	if err != nil {
		return err
	}
	w, bk := c["warps"], c["block_k"]
	if bk%s.N != 0 || bk%s.K != 0 {
		return fmt.Errorf("block_k=%d is not a multiple of the %dx%dx%d product", bk, s.M, s.N, s.K)
	}
	if n := w * caps.SubgroupSize; n > caps.MaxInvocations || n > caps.MaxWorkgroupSize[0] {
		return fmt.Errorf("%d subgroups of %d exceed the device's %d invocations", w, caps.SubgroupSize, caps.MaxInvocations)
	}
	if n := attnCoopShared(a, s, w, bk); n > caps.MaxSharedBytes {
		return fmt.Errorf("warps=%d block_k=%d needs %d bytes of shared memory, the device has %d", w, bk, n, caps.MaxSharedBytes)
	}
	return nil
}

func buildAttnCoop(p *Problem, c Config, caps Caps) (*Launch, error) {
	a, s, err := acceptAttnCoop(p, caps)
	if err != nil {
		return nil, err
	}
	W, BK := c["warps"], c["block_k"]
	SG := caps.SubgroupSize
	BR := W * s.M
	lpr := max(1, SG/s.M) // invocations per row in the softmax
	rpl := max(1, s.M/SG) // rows per invocation
	fpl := a.dv / lpr     // output features per invocation and row
	elem := codegen.F16
	if a.dt == ir.BF16 {
		elem = codegen.BF16
	}
	b := newBuilder(fmt.Sprintf("attention_coop_w%d_k%d", W, BK), caps)
	b.EmulateMatrices(caps.EmulateMatrices)
	u := func(x int) codegen.Value { return b.U32(uint32(x)) }
	u4 := codegen.Vec(codegen.U32, 4)
	qb := b.Buffer("q", u4, codegen.ReadOnly)
	kb := b.Buffer("k", u4, codegen.ReadOnly)
	vb := b.Buffer("v", u4, codegen.ReadOnly)
	lenBuf, nBuf, binds := a.lengthBuffers(b, p, []Operand{{Arg, 0}, {Arg, 1}, {Arg, 2}})
	epi, eb := declareEpilogue(b, p, a.opType)
	binds = append(binds, eb...)
	b.WorkgroupSize(u(W*SG), u(1), u(1))

	dU, dvU := a.d/8, a.dv/8 // units per row
	qs := b.Shared("q_tile", u4, u(BR*(dU+1)))
	ks := b.Shared("k_tile", u4, u(BK*(dU+1)))
	vs := b.Shared("v_tile", u4, u(BK*(dvU+1)))
	sw := max(BK, a.dv) // scratch row width
	scr := b.Shared("scratch", codegen.F32, u(W*s.M*sw))
	pw := BK + 8 // P row width in elements, rows 16-byte aligned
	ps := b.Shared("p_tile", elem, u(W*s.M*pw))

	li := b.LocalIndex()
	sg := b.SubgroupID()
	lane := b.SubgroupInvocation()
	wid := b.WorkgroupID()
	T := a.rows()
	t0 := b.Mul(b.X(wid), u(BR))
	kh := b.Y(wid)
	kvlen := u(a.skv)
	if a.kvLen {
		kvlen = b.Convert(b.Min(b.Max(b.Convert(b.Load(lenBuf, u(0)), codegen.I32), b.I32(0)), b.I32(int32(a.skv))), codegen.U32)
	}
	i32 := func(x codegen.Value) codegen.Value { return b.Convert(x, codegen.I32) }
	qlen := queries(b, p, a, nBuf) // sq, or the run-time length's queries
	pos := func(i codegen.Value) codegen.Value { return b.Add(b.Sub(i32(kvlen), qlen), i32(i)) }
	tLast := b.Sub(b.Min(b.Add(t0, u(BR)), u(T)), u(1))
	hi := i32(kvlen)
	if a.causal || a.window > 0 {
		hi = b.Min(hi, b.Add(pos(b.Div(tLast, u(a.group))), b.I32(1)))
	}
	lo := b.I32(0)
	if a.window > 0 {
		lo = b.Max(lo, b.Add(b.Sub(pos(b.Div(t0, u(a.group))), b.I32(int32(a.window))), b.I32(1)))
	}
	loU := b.Convert(lo, codegen.U32)
	hiU := b.Convert(b.Max(hi, lo), codegen.U32)
	negInf := b.F32(float32(math.Inf(-1)))
	zero := b.F32(0)
	zero4 := b.Splat(b.U32(0), 4)
	threads := W * SG

	// Q block: unit (row r, unit f) of (query, head) t0+r, zero past the rows.
	stageTile(b, li, threads, BR*dU, func(e codegen.Value) codegen.Value {
		r, f := b.Div(e, u(dU)), b.Rem(e, u(dU))
		t := b.Add(t0, r)
		ok := b.Lt(t, u(T))
		t = b.Select(ok, t, u(0))
		i, h := b.Div(t, u(a.group)), b.Add(b.Mul(kh, u(a.group)), b.Rem(t, u(a.group)))
		x := b.Load(qb, b.Add(b.Div(a.at(b, a.lay.Q, i, h, u(0), a.sq, a.hq, a.d), u(8)), f))
		return b.Select(ok, x, zero4)
	}, func(e, v codegen.Value) {
		b.Store(qs, b.Add(b.Mul(b.Div(e, u(dU)), u(dU+1)), b.Rem(e, u(dU))), v)
	})
	// K and V tiles at key kt, fetched into registers (zero past the range).
	fetchKV := func(kt codegen.Value) (*staged, *staged) {
		tile := func(buf *codegen.Buffer, lay string, nU, width int) *staged {
			return fetchTile(b, li, threads, BK*nU, func(e codegen.Value) codegen.Value {
				jj := b.Add(kt, b.Div(e, u(nU)))
				ok := b.Lt(jj, hiU)
				jj = b.Select(ok, jj, u(0))
				x := b.Load(buf, b.Add(b.Div(a.at(b, lay, jj, kh, u(0), a.skv, a.hkv, width), u(8)), b.Rem(e, u(nU))))
				return b.Select(ok, x, zero4)
			})
		}
		return tile(kb, a.lay.K, dU, a.d), tile(vb, a.lay.V, dvU, a.dv)
	}
	putKV := func(kst, vst *staged) {
		kst.put(b, func(e, v codegen.Value) { b.Store(ks, b.Add(b.Mul(b.Div(e, u(dU)), u(dU+1)), b.Rem(e, u(dU))), v) })
		vst.put(b, func(e, v codegen.Value) { b.Store(vs, b.Add(b.Mul(b.Div(e, u(dvU)), u(dvU+1)), b.Rem(e, u(dvU))), v) })
	}
	putKV(fetchKV(loU))
	b.Barrier()

	aT := codegen.Matrix(elem, codegen.ScopeSubgroup, s.M, s.K, codegen.MatrixA)
	bT := codegen.Matrix(elem, codegen.ScopeSubgroup, s.K, s.N, codegen.MatrixB)
	accT := codegen.Matrix(codegen.F32, codegen.ScopeSubgroup, s.M, s.N, codegen.MatrixAcc)
	// The subgroup's Q matrices, for the whole key range.
	qm := make([]codegen.Value, a.d/s.K)
	for f := range qm {
		qm[f] = b.MatrixLoad(aT, qs, b.Add(b.Mul(sg, u(s.M*(dU+1))), u(f*s.K/8)), u(dU+1), codegen.RowMajor)
	}
	scrBase := b.Mul(sg, u(s.M*sw))
	pBase := b.Mul(sg, u(s.M*pw))
	// The softmax's invocation: rows r + ri·(SG/lpr) of the subgroup's rows for ri < rpl, part hh
	// of each row's keys and output features.
	r0, hh := b.Div(lane, u(lpr)), b.Rem(lane, u(lpr))
	type rowState struct {
		r, row, ok, pos codegen.Value
		m, l            *codegen.Var
		o               []*codegen.Var
		alpha           codegen.Value
	}
	rows := make([]*rowState, rpl)
	for ri := range rows {
		rs := &rowState{r: b.Add(r0, u(ri*(SG/lpr)))}
		rs.row = b.Add(t0, b.Add(b.Mul(sg, u(s.M)), rs.r))
		rs.ok = b.Lt(rs.row, u(T))
		rs.pos = pos(b.Div(rs.row, u(a.group)))
		rs.m, rs.l = b.Var(fmt.Sprintf("m%d", ri), negInf), b.Var(fmt.Sprintf("l%d", ri), zero)
		for i := 0; i < fpl/4; i++ {
			rs.o = append(rs.o, b.Var(fmt.Sprintf("o%d_%d", ri, i), b.Splat(zero, 4)))
		}
		rows[ri] = rs
	}
	kpl := BK / lpr // keys per invocation
	subBarrier := func() { b.ControlBarrier(codegen.ScopeSubgroup, codegen.ScopeSubgroup, codegen.SemWorkgroup) }
	scale := b.F32(float32(a.scale))

	b.For(loU, hiU, u(BK), func(kt codegen.Value) {
		nk, nv := fetchKV(b.Add(kt, u(BK)))
		// 1. Scores.
		for j := 0; j < BK/s.N; j++ {
			acc := b.Const(accT, 0)
			for f := range qm {
				km := b.MatrixLoad(bT, ks, b.Add(u(j*s.N*(dU+1)), u(f*s.K/8)), u(dU+1), codegen.ColumnMajor)
				acc = b.MatrixMulAdd(qm[f], km, acc, 0)
			}
			b.MatrixStore(scr, b.Add(scrBase, u(j*s.N)), b.Mul(acc, scale), u(sw), codegen.RowMajor)
		}
		subBarrier()
		// 2. Online softmax of each of the invocation's rows over keys hh·kpl.. of the tile.
		for _, rs := range rows {
			sv := make([]codegen.Value, kpl)
			mx := negInf
			for c := range sv {
				j := b.Add(b.Mul(hh, u(kpl)), u(c))
				jj := b.Add(kt, j)
				ok := b.And(rs.ok, b.Lt(jj, hiU))
				if a.causal || a.window > 0 {
					ok = b.And(ok, b.Le(i32(jj), rs.pos))
					if a.window > 0 {
						ok = b.And(ok, b.Gt(i32(jj), b.Sub(rs.pos, b.I32(int32(a.window)))))
					}
				}
				sv[c] = b.Select(ok, b.Load(scr, b.Add(scrBase, b.Add(b.Mul(rs.r, u(sw)), j))), negInf)
				mx = b.Max(mx, sv[c])
			}
			for off := lpr / 2; off >= 1; off /= 2 {
				mx = b.Max(mx, b.SubgroupShuffleXor(mx, u(off)))
			}
			mOld := b.Get(rs.m)
			mNew := b.Max(mOld, mx)
			mSafe := b.Select(b.Eq(mNew, negInf), zero, mNew)
			sum := zero
			for c := range sv {
				pc := b.Exp(b.Sub(sv[c], mSafe))
				b.Store(ps, b.Add(pBase, b.Add(b.Mul(rs.r, u(pw)), b.Add(b.Mul(hh, u(kpl)), u(c)))), b.Convert(pc, elem))
				sum = b.Add(sum, pc)
			}
			for off := lpr / 2; off >= 1; off /= 2 {
				sum = b.Add(sum, b.SubgroupShuffleXor(sum, u(off)))
			}
			rs.alpha = b.Exp(b.Sub(mOld, mSafe))
			b.Set(rs.l, b.Add(b.Mul(b.Get(rs.l), rs.alpha), sum))
			b.Set(rs.m, mNew)
		}
		subBarrier()
		// 3. P·V, into the scratch, then into the invocation's output features.
		pm := make([]codegen.Value, BK/s.K)
		for j := range pm {
			pm[j] = b.MatrixLoad(aT, ps, b.Add(pBase, u(j*s.K)), u(pw), codegen.RowMajor)
		}
		for f := 0; f < a.dv/s.N; f++ {
			acc := b.Const(accT, 0)
			for j := range pm {
				vm := b.MatrixLoad(bT, vs, u(j*s.K*(dvU+1)+f*s.N/8), u(dvU+1), codegen.RowMajor)
				acc = b.MatrixMulAdd(pm[j], vm, acc, 0)
			}
			b.MatrixStore(scr, b.Add(scrBase, u(f*s.N)), acc, u(sw), codegen.RowMajor)
		}
		subBarrier()
		for _, rs := range rows {
			a4 := b.Splat(rs.alpha, 4)
			for i, o := range rs.o {
				f := b.Add(b.Mul(hh, u(fpl)), u(4*i))
				at := b.Add(scrBase, b.Add(b.Mul(rs.r, u(sw)), f))
				pv := b.Vec(b.Load(scr, at), b.Load(scr, b.Add(at, u(1))), b.Load(scr, b.Add(at, u(2))), b.Load(scr, b.Add(at, u(3))))
				b.Set(o, b.Fma(b.Get(o), a4, pv))
			}
		}
		b.Barrier() // the K/V tiles and the scratch are read
		putKV(nk, nv)
		b.Barrier()
	})
	for _, rs := range rows {
		b.If(rs.ok, func() {
			i, h := b.Div(rs.row, u(a.group)), b.Add(b.Mul(kh, u(a.group)), b.Rem(rs.row, u(a.group)))
			l := b.Get(rs.l)
			for k, o := range rs.o {
				ovv := b.Get(o)
				for c := 0; c < 4; c++ {
					f := b.Add(b.Mul(hh, u(fpl)), u(4*k+c))
					epi.store(b, a.at(b, a.lay.Q, i, h, f, a.sq, a.hq, a.dv), b.Div(b.Extract(ovv, c), l))
				}
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
	grid := [3]uint32{uint32(ceilDiv(T, BR)), uint32(a.hkv), 1}
	if int(grid[0]) > caps.MaxGroups[0] {
		return nil, fmt.Errorf("grid %v exceeds the device's limits %v", grid, caps.MaxGroups)
	}
	// Row blocks walk (query, head) rows query-major: with a run-time length only the blocks of
	// the run's queries are launched.
	l := &Launch{Steps: []Step{{Kernel: k, Grid: grid, Bindings: binds, Scale: scaleItems(p, p.Rows.Arg(0), 0, T, BR)}}, Matrix: true}
	a.cost(p, l)
	return l, nil
}
