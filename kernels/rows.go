package kernels

import (
	"fmt"
	"math"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
)

// Templates of the batched-step ops (ir/ops_rows.go): rows of several sequences, each with its
// own slot of a [slots, ctx, ...] cache and its own position, read per row from the i32 operands
// slot and pos.
//
//   - rope_rows: rope's rotation with the angle from pos[r] (a flat kernel over the pairs).
//   - cache_scatter: row x[r] into state[slot[r], pos[r]], in place (only the rows are written).
//   - attention_rows: one workgroup per (row, key/value head): the row's grouped query heads
//     walk the keys 0..pos[r] of their slot in tiles of block_k with an online softmax, scores,
//     running maximum, sum and output in shared memory, as attention_flash does for a block of
//     rows of one sequence; an aligned block of block_r rows of one slot (a prompt chunk) is
//     attended by its first workgroup in one pass, each key tile serving all its rows (see
//     buildAttentionRows). The static point is block_r = 1: on the H200 a 64-row chunk at
//     SmolLM2-135M's shape took 203 µs at block_r 1, 671 µs at 4 and 1220 µs at 8 (its
//     workgroups too few to fill the GPU; BenchmarkAttentionRows), on lavapipe the three tie.
//
// With a run-time length the operands' rows past the run's n hold anything: cache_scatter reads
// n (the Len operand) and writes the run's rows only, and every kernel clamps the slot and
// position it reads into the cache, so no value makes it read or write outside its tensors (the
// runtime's range checks refuse such values before a run anyway).
var (
	RopeRows     = &Template{Name: "rope_rows", Accepts: acceptPlain(ir.RopeRows), Space: flatSpace(), Build: buildRopeRows}
	CacheScatter = &Template{Name: "cache_scatter", Accepts: acceptCacheScatter, Space: flatSpace(), Build: buildCacheScatter,
		ReadsLength: true}
	AttentionRows = &Template{Name: "attention_rows", Accepts: acceptAttentionRows,
		Space: NewSpace(Ints("wg", 64, 32, 128), Ints("block_k", 32, 16, 64), Ints("block_r", 1, 4, 8)).Where(fitsInvocations("wg")).Where(attnRowsFit),
		Build: buildAttentionRows}
)

func init() {
	Register(RopeRows)
	Register(CacheScatter)
	Register(AttentionRows)
}

// clampIndex loads element r of an i32 operand and clamps it to 0..n-1 (u32).
func clampIndex(b *codegen.Builder, buf *codegen.Buffer, r codegen.Value, n int) codegen.Value {
	v := b.Bitcast(b.Load(buf, r), codegen.I32)
	return b.Bitcast(b.Min(b.Max(v, b.I32(0)), b.I32(int32(n-1))), codegen.U32)
}

func buildRopeRows(p *Problem, c Config, caps Caps) (*Launch, error) {
	if err := acceptPlain(ir.RopeRows)(p, caps); err != nil {
		return nil, err
	}
	xt, pt, ot := p.Args[0], p.Args[1], p.Outs[0]
	g := ropeGeom{half: p.Attrs.String("mode", "half") == "half", log2Theta: math.Log2(p.Attrs.Float("theta", 10000))}
	g.scale, _ = ir.RopeScalingOf(p.Attrs)
	g.d = xt.Shape[xt.Shape.Rank()-1]
	g.h = g.d / 2
	g.rows = xt.Shape.NumElements() / g.d
	perRow := g.rows / xt.Shape[0] // rows of d features per row of the batch (the heads)
	b := newBuilder("rope_rows", caps)
	x := b.Buffer("x", StorageType(xt.DType), codegen.ReadOnly)
	posBuf := b.Buffer("pos", StorageType(pt.DType), codegen.ReadOnly)
	y := b.Buffer("y", StorageType(ot.DType), codegen.WriteOnly)
	eachFlat(b, c, g.rows*g.h, func(q codegen.Value) {
		row, i := b.Div(q, b.U32(uint32(g.h))), b.Rem(q, b.U32(uint32(g.h)))
		pos := b.Bitcast(b.Load(posBuf, b.Div(row, b.U32(uint32(perRow)))), codegen.I32)
		j0, j1 := g.pair(b, i)
		rb := b.Mul(row, b.U32(uint32(g.d)))
		i0, i1 := b.Add(rb, j0), b.Add(rb, j1)
		y0, y1 := g.rotate(b, pos, b.U32(0), i, LoadAs(b, x, i0, xt.DType), LoadAs(b, x, i1, xt.DType))
		StoreAs(b, y, i0, y0, ot.DType)
		StoreAs(b, y, i1, y1, ot.DType)
	})
	k, spec, err := finish(b, caps, c, "wg", "per_thread")
	if err != nil {
		return nil, err
	}
	st := Step{Kernel: k, Spec: spec, Grid: flatGrid(g.rows*g.h, c, caps),
		Bindings: []Operand{{Arg, 0}, {Arg, 1}, {Out, 0}}, Scale: flatScale(p, p.Rows.Arg(0), g.rows*g.h, c)}
	return &Launch{Steps: []Step{st}, Flops: float64(8 * g.rows * g.h), Bytes: 2 * float64(xt.Bytes())}, nil
}

// acceptCacheScatter takes a float cache (of the rows' dtype or another: rounded as stored) or a
// q8_0/q4_0 one (quantized as cache_write quantizes, buildQuantCacheWrite).
func acceptCacheScatter(p *Problem, caps Caps) error {
	if p.Op == ir.CacheScatter && len(p.Args) == 4 && p.Args[0].DType.Quantized() {
		return acceptQuantCacheWrite(p, caps)
	}
	return acceptPlain(ir.CacheScatter)(p, caps)
}

func buildCacheScatter(p *Problem, c Config, caps Caps) (*Launch, error) {
	if err := acceptCacheScatter(p, caps); err != nil {
		return nil, err
	}
	if p.Args[0].DType.Quantized() {
		return buildQuantCacheWrite(p, c, caps)
	}
	st, xt := p.Args[0], p.Args[1]
	slots, ctxLen := st.Shape[0], st.Shape[1]
	rows := xt.Shape[0]
	rowLen := xt.Shape.NumElements() / rows
	n := xt.Shape.NumElements()
	b := newBuilder("cache_scatter", caps)
	x := b.Buffer("x", StorageType(xt.DType), codegen.ReadOnly)
	slotBuf := b.Buffer("slot", StorageType(p.Args[2].DType), codegen.ReadOnly)
	posBuf := b.Buffer("pos", StorageType(p.Args[3].DType), codegen.ReadOnly)
	y := b.Buffer("state", StorageType(st.DType), codegen.WriteOnly)
	reads := p.Rows.Arg(1) && p.Rows.Reads
	var lenBuf *codegen.Buffer
	if reads {
		lenBuf = b.Buffer("n", codegen.U32, codegen.ReadOnly)
	}
	eachFlat(b, c, n, func(q codegen.Value) {
		r, e := b.Div(q, b.U32(uint32(rowLen))), b.Rem(q, b.U32(uint32(rowLen)))
		write := func() {
			s, ps := clampIndex(b, slotBuf, r, slots), clampIndex(b, posBuf, r, ctxLen)
			cell := b.Add(b.Mul(s, b.U32(uint32(ctxLen))), ps)
			at := b.Add(b.Mul(cell, b.U32(uint32(rowLen))), e)
			if st.DType == xt.DType {
				b.Store(y, at, b.Load(x, q))
			} else { // rounded to the cache's dtype
				StoreAs(b, y, at, LoadAs(b, x, q, xt.DType), st.DType)
			}
		}
		if reads {
			b.If(b.Lt(r, b.Load(lenBuf, b.U32(0))), write) // the run's rows only
		} else {
			write()
		}
	})
	k, spec, err := finish(b, caps, c, "wg", "per_thread")
	if err != nil {
		return nil, err
	}
	s := Step{Kernel: k, Spec: spec, Grid: flatGrid(n, c, caps), Bindings: []Operand{{Arg, 1}, {Arg, 2}, {Arg, 3}, {Out, 0}},
		Scale: flatScale(p, p.Rows.Arg(1), n, c)}
	if reads {
		s.Bindings = append(s.Bindings, Operand{Len, 0})
	}
	return &Launch{Steps: []Step{s}, InPlace: map[int]int{0: 0}, Bytes: float64(xt.Bytes()) + float64(n*st.DType.Size())}, nil
}

// attnRows is an attention_rows problem's geometry.
type attnRows struct {
	rows, hq, d, slots, ctx, hkv, dv, group, window int
	scale                                           float64
	dt                                              ir.DType
	kvt                                             ir.DType // k's and v's: q's, another float, or q8_0/q4_0
}

func readAttnRows(p *Problem) attnRows {
	q, k, v := p.Args[0].Shape, p.Args[1].Shape, p.Args[2].Shape
	a := attnRows{rows: q[0], hq: q[1], d: q[2], slots: k[0], ctx: k[1], hkv: k[2], dv: v[3],
		window: p.Attrs.Int("window", 0), dt: p.Args[0].DType, kvt: p.Args[1].DType}
	a.group = a.hq / a.hkv
	a.scale = p.Attrs.Float("scale", 1/math.Sqrt(float64(a.d)))
	return a
}

func acceptAttentionRows(p *Problem, caps Caps) error {
	if p.Op == ir.AttentionRows && len(p.Args) == 5 && p.Args[1].DType.Quantized() {
		// A block-quantized cache: its blocks are read as they are (quantRows); the other
		// operands as any.
		if p.Expr != nil {
			return fmt.Errorf("attention_rows takes no epilogue")
		}
		_, outs, err := ir.Infer(p.Op, p.Attrs, p.Args)
		if err != nil {
			return err
		}
		if len(p.Outs) != 1 || !p.Outs[0].Equal(outs[0]) {
			return fmt.Errorf("results %v, the op gives %v", p.Outs, outs)
		}
		if !readsBlocks(p.Args[1].DType) {
			return fmt.Errorf("kernels do not read %s blocks", p.Args[1].DType)
		}
		for _, t := range []ir.Type{p.Args[0], p.Args[3], p.Args[4], p.Outs[0]} {
			if err := checkDTypesOf(t, caps); err != nil {
				return err
			}
		}
	} else if err := acceptPlain(ir.AttentionRows)(p, caps); err != nil {
		return err
	}
	a := readAttnRows(p)
	if a.rows > caps.MaxGroups[0] || a.hkv > caps.MaxGroups[1] {
		return fmt.Errorf("%d rows × %d key/value heads exceed the device's workgroup counts", a.rows, a.hkv)
	}
	return nil
}

// attnRowsShared is the shared memory of a configuration, in f32 words: per row of the block
// (block_r rows, see buildAttentionRows) the row's queries, a tile of scores, the output, and per
// head the running maximum, sum and rescale factor.
func attnRowsShared(a attnRows, blockK, blockR int) int {
	return blockR * (a.group*a.d + a.group*blockK + a.group*a.dv + 3*a.group)
}

func attnRowsFit(p *Problem, c Config, caps Caps) error {
	a := readAttnRows(p)
	if need := 4 * attnRowsShared(a, c["block_k"], max(c["block_r"], 1)); need > caps.MaxSharedBytes {
		return fmt.Errorf("block_k=%d block_r=%d need %d bytes of shared memory, the device has %d", c["block_k"], c["block_r"], need, caps.MaxSharedBytes)
	}
	return nil
}

// buildAttentionRows: workgroup (r, kh) attends row r's query heads of key/value head kh. With
// block_r = R > 1, rows are taken in aligned blocks of R: when every row of r's block belongs to
// one slot (a prompt chunk: its rows at consecutive positions of one sequence), the block's first
// workgroup attends all R rows in one pass over the slot's keys, each key tile serving every row
// (causal per row: row i sees keys up to pos[i]), and the block's other workgroups return at
// once; otherwise (decode rows of several slots) each workgroup attends its own row as with
// R = 1. Every workgroup of a block reads the same slots, so they agree on which case it is.
// (The rows past a run-time length hold anything: a block that reaches them is, at worst, not
// one slot, or attends rows whose results nobody reads.)
func buildAttentionRows(p *Problem, c Config, caps Caps) (*Launch, error) {
	if err := acceptAttentionRows(p, caps); err != nil {
		return nil, err
	}
	if err := attnRowsFit(p, c, caps); err != nil {
		return nil, err
	}
	a := readAttnRows(p)
	wg, bk, R := c["wg"], c["block_k"], max(c["block_r"], 1)
	G := a.group
	b := newBuilder("attention_rows", caps)
	qb := b.Buffer("q", StorageType(a.dt), codegen.ReadOnly)
	var kvElem codegen.Type
	var kq, vq quantRows // a block-quantized cache's rows: one head's d (dv) features, whole blocks
	if a.kvt.Quantized() {
		kvElem, kq, vq = codegen.U32, newQuantRows(a.kvt, a.d), newQuantRows(a.kvt, a.dv)
	} else {
		kvElem = StorageType(a.kvt)
	}
	kb := b.Buffer("k", kvElem, codegen.ReadOnly)
	vb := b.Buffer("v", kvElem, codegen.ReadOnly)
	slotBuf := b.Buffer("slot", StorageType(p.Args[3].DType), codegen.ReadOnly)
	posBuf := b.Buffer("pos", StorageType(p.Args[4].DType), codegen.ReadOnly)
	ob := b.Buffer("out", StorageType(p.Outs[0].DType), codegen.WriteOnly)
	wgv := b.Spec("wg", codegen.U32, int64(wg))
	b.WorkgroupSize(wgv, b.U32(1), b.U32(1))
	u := func(x int) codegen.Value { return b.U32(uint32(x)) }
	// Shared state per (row i of the block, head g): index i·G + g.
	qs := b.Shared("qs", codegen.F32, u(R*G*a.d))
	sc := b.Shared("scores", codegen.F32, u(R*G*bk))
	os := b.Shared("o", codegen.F32, u(R*G*a.dv))
	ms := b.Shared("m", codegen.F32, u(R*G))
	ls := b.Shared("l", codegen.F32, u(R*G))
	al := b.Shared("alpha", codegen.F32, u(R*G))
	wid := b.WorkgroupID()
	r, kh := b.X(wid), b.Y(wid)
	tid := b.LocalIndex()
	slot := clampIndex(b, slotBuf, r, a.slots)
	r0, nr := r, u(1) // the block's first row and its rows
	if R > 1 {
		base := b.Sub(r, b.Rem(r, u(R)))
		bs := clampIndex(b, slotBuf, base, a.slots)
		one := b.Bool(true)
		for i := 1; i < R; i++ {
			row := b.Add(base, u(i))
			same := b.Eq(clampIndex(b, slotBuf, b.Min(row, u(a.rows-1)), a.slots), bs)
			one = b.And(one, b.Or(same, b.Ge(row, u(a.rows))))
		}
		b.If(b.And(one, b.Ne(r, base)), func() { b.Return() }) // the block's first workgroup attends it
		r0 = b.Select(one, base, r)
		nr = b.Select(one, b.Min(u(R), b.Sub(u(a.rows), base)), u(1))
		slot = b.Select(one, bs, slot)
	}
	rowPos := func(i codegen.Value) codegen.Value { // pos of row i of the block (i32)
		return b.Bitcast(clampIndex(b, posBuf, b.Add(r0, i), a.ctx), codegen.I32)
	}
	rowFirst := func(pos codegen.Value) codegen.Value { // the first key the row sees
		if a.window > 0 {
			return b.Max(b.I32(0), b.Sub(pos, b.I32(int32(a.window-1))))
		}
		return b.I32(0)
	}
	// The keys the block reads: from its rows' least first key to their largest position.
	first, last := rowFirst(rowPos(u(0))), b.Add(rowPos(u(0)), b.I32(1))
	if R > 1 {
		fv, lv := b.Var("first", first), b.Var("last", last)
		b.For(u(1), nr, u(1), func(i codegen.Value) {
			p := rowPos(i)
			b.Set(fv, b.Min(b.Get(fv), rowFirst(p)))
			b.Set(lv, b.Max(b.Get(lv), b.Add(p, b.I32(1))))
		})
		first, last = b.Get(fv), b.Get(lv)
	}
	// Feature f of head kh of key/value j in the block's slot (f32).
	kvLoad := func(buf *codegen.Buffer, q quantRows, j, f codegen.Value, width int) codegen.Value {
		cell := b.Add(b.Mul(slot, u(a.ctx)), j)
		row := b.Add(b.Mul(cell, u(a.hkv)), kh)
		if a.kvt.Quantized() {
			return q.element(b, buf, row, f)
		}
		return LoadAs(b, buf, b.Add(b.Mul(row, u(width)), f), a.kvt)
	}
	nh := b.Mul(nr, u(G)) // (row, head) pairs of the block
	// Load each row's G query heads (heads kh·G .. kh·G+G-1) and reset the running state.
	b.For(tid, b.Mul(nh, u(a.d)), wgv, func(e codegen.Value) {
		ig, f := b.Div(e, u(a.d)), b.Rem(e, u(a.d))
		i, g := b.Div(ig, u(G)), b.Rem(ig, u(G))
		h := b.Add(b.Mul(kh, u(G)), g)
		b.Store(qs, e, LoadAs(b, qb, b.Add(b.Mul(b.Add(b.Mul(b.Add(r0, i), u(a.hq)), h), u(a.d)), f), a.dt))
	})
	b.For(tid, b.Mul(nh, u(a.dv)), wgv, func(e codegen.Value) { b.Store(os, e, b.F32(0)) })
	b.For(tid, nh, wgv, func(e codegen.Value) {
		b.Store(ms, e, b.F32(float32(math.Inf(-1))))
		b.Store(ls, e, b.F32(0))
	})
	b.Barrier()
	b.For(first, last, b.I32(int32(bk)), func(k0 codegen.Value) {
		// Scores of the tile: (row i, head g, key k0+j) for every triple; -inf for a key the
		// row does not see.
		b.For(tid, b.Mul(nh, u(bk)), wgv, func(e codegen.Value) {
			ig, j := b.Div(e, u(bk)), b.Rem(e, u(bk))
			i := b.Div(ig, u(G))
			key := b.Add(k0, b.Bitcast(j, codegen.I32))
			p := rowPos(i)
			s := b.Var("s", b.F32(float32(math.Inf(-1))))
			b.If(b.And(b.Le(key, p), b.Ge(key, rowFirst(p))), func() {
				acc := b.Var("acc", b.F32(0))
				kj := b.Bitcast(key, codegen.U32)
				b.For(u(0), u(a.d), u(1), func(f codegen.Value) {
					b.Set(acc, b.Fma(b.Load(qs, b.Add(b.Mul(ig, u(a.d)), f)), kvLoad(kb, kq, kj, f, a.d), b.Get(acc)))
				})
				b.Set(s, b.Mul(b.Get(acc), b.F32(float32(a.scale))))
			})
			b.Store(sc, e, b.Get(s))
		})
		b.Barrier()
		// Per (row, head): the tile's maximum, the rescale of what came before, the
		// probabilities. A row none of whose keys came yet keeps m = -inf (its scores so far
		// are all -inf): the reference point is then 0, and every factor 0.
		b.For(tid, nh, wgv, func(ig codegen.Value) {
			base := b.Mul(ig, u(bk))
			mt := b.Var("mt", b.Load(ms, ig))
			b.For(u(0), u(bk), u(1), func(j codegen.Value) { b.Set(mt, b.Max(b.Get(mt), b.Load(sc, b.Add(base, j)))) })
			ref := b.Select(b.Eq(b.Get(mt), b.F32(float32(math.Inf(-1)))), b.F32(0), b.Get(mt))
			alpha := b.Exp(b.Sub(b.Load(ms, ig), ref))
			sum := b.Var("sum", b.F32(0))
			b.For(u(0), u(bk), u(1), func(j codegen.Value) {
				e := b.Exp(b.Sub(b.Load(sc, b.Add(base, j)), ref))
				b.Store(sc, b.Add(base, j), e)
				b.Set(sum, b.Add(b.Get(sum), e))
			})
			b.Store(ls, ig, b.Add(b.Mul(b.Load(ls, ig), alpha), b.Get(sum)))
			b.Store(ms, ig, b.Get(mt))
			b.Store(al, ig, alpha)
		})
		b.Barrier()
		// The output: o = o·alpha + Σ_j p_j·v_j over the tile's keys (p_j = 0 for a key the
		// row does not see).
		n := b.Min(b.Sub(last, k0), b.I32(int32(bk)))
		b.For(tid, b.Mul(nh, u(a.dv)), wgv, func(e codegen.Value) {
			ig, f := b.Div(e, u(a.dv)), b.Rem(e, u(a.dv))
			acc := b.Var("o", b.Mul(b.Load(os, e), b.Load(al, ig)))
			b.For(b.I32(0), n, b.I32(1), func(j codegen.Value) {
				kj := b.Bitcast(b.Add(k0, j), codegen.U32)
				pj := b.Load(sc, b.Add(b.Mul(ig, u(bk)), b.Bitcast(j, codegen.U32)))
				b.Set(acc, b.Fma(pj, kvLoad(vb, vq, kj, f, a.dv), b.Get(acc)))
			})
			b.Store(os, e, b.Get(acc))
		})
		b.Barrier()
	})
	b.For(tid, b.Mul(nh, u(a.dv)), wgv, func(e codegen.Value) {
		ig, f := b.Div(e, u(a.dv)), b.Rem(e, u(a.dv))
		i, g := b.Div(ig, u(G)), b.Rem(ig, u(G))
		h := b.Add(b.Mul(kh, u(G)), g)
		StoreAs(b, ob, b.Add(b.Mul(b.Add(b.Mul(b.Add(r0, i), u(a.hq)), h), u(a.dv)), f), b.Div(b.Load(os, e), b.Load(ls, ig)), p.Outs[0].DType)
	})
	k, spec, err := finish(b, caps, c, "wg")
	if err != nil {
		return nil, err
	}
	grid := [3]uint32{uint32(a.rows), uint32(a.hkv), 1}
	var scale *GridScale
	if p.Rows.Arg(0) && a.rows == p.Rows.Max {
		scale = &GridScale{Axis: 0, Num: 1, Den: 1}
	}
	st := Step{Kernel: k, Spec: spec, Grid: grid, Scale: scale,
		Bindings: []Operand{{Arg, 0}, {Arg, 1}, {Arg, 2}, {Arg, 3}, {Arg, 4}, {Out, 0}}}
	flops := float64(2 * a.rows * a.hq * a.ctx * (a.d + a.dv))
	bytes := float64(p.Args[0].Bytes()+p.Outs[0].Bytes()) + float64(a.rows*a.hkv*a.ctx)*float64(ir.T(a.kvt, a.d+a.dv).Bytes())
	return &Launch{Steps: []Step{st}, Flops: flops, Bytes: bytes}, nil
}
