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
//     rows of one sequence.
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
		Space: NewSpace(Ints("wg", 64, 32, 128), Ints("block_k", 32, 16, 64)).Where(fitsInvocations("wg")).Where(attnRowsFit),
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
	b := codegen.NewBuilder("rope_rows")
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
	b := codegen.NewBuilder("cache_scatter")
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

// attnRowsShared is the shared memory of a configuration, in f32 words: the row's queries, a
// tile of scores, the output, and per head the running maximum, sum and rescale factor.
func attnRowsShared(a attnRows, blockK int) int {
	return a.group*a.d + a.group*blockK + a.group*a.dv + 3*a.group
}

func attnRowsFit(p *Problem, c Config, caps Caps) error {
	a := readAttnRows(p)
	if need := 4 * attnRowsShared(a, c["block_k"]); need > caps.MaxSharedBytes {
		return fmt.Errorf("block_k=%d needs %d bytes of shared memory, the device has %d", c["block_k"], need, caps.MaxSharedBytes)
	}
	return nil
}

func buildAttentionRows(p *Problem, c Config, caps Caps) (*Launch, error) {
	if err := acceptAttentionRows(p, caps); err != nil {
		return nil, err
	}
	if err := attnRowsFit(p, c, caps); err != nil {
		return nil, err
	}
	a := readAttnRows(p)
	wg, bk := c["wg"], c["block_k"]
	G := a.group
	b := codegen.NewBuilder("attention_rows")
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
	qs := b.Shared("qs", codegen.F32, u(G*a.d))
	sc := b.Shared("scores", codegen.F32, u(G*bk))
	os := b.Shared("o", codegen.F32, u(G*a.dv))
	ms := b.Shared("m", codegen.F32, u(G))
	ls := b.Shared("l", codegen.F32, u(G))
	al := b.Shared("alpha", codegen.F32, u(G))
	wid := b.WorkgroupID()
	r, kh := b.X(wid), b.Y(wid)
	tid := b.LocalIndex()
	slot := clampIndex(b, slotBuf, r, a.slots)
	pos := b.Bitcast(clampIndex(b, posBuf, r, a.ctx), codegen.I32)
	first := b.I32(0)
	if a.window > 0 {
		first = b.Max(first, b.Sub(pos, b.I32(int32(a.window-1))))
	}
	// Feature f of head kh of key/value j in the row's slot (f32).
	kvLoad := func(buf *codegen.Buffer, q quantRows, j, f codegen.Value, width int) codegen.Value {
		cell := b.Add(b.Mul(slot, u(a.ctx)), j)
		row := b.Add(b.Mul(cell, u(a.hkv)), kh)
		if a.kvt.Quantized() {
			return q.element(b, buf, row, f)
		}
		return LoadAs(b, buf, b.Add(b.Mul(row, u(width)), f), a.kvt)
	}
	// Load the row's G query heads (heads kh·G .. kh·G+G-1) and reset the running state.
	b.For(tid, u(G*a.d), wgv, func(i codegen.Value) {
		b.Store(qs, i, LoadAs(b, qb, b.Add(b.Mul(b.Add(b.Mul(r, u(a.hq)), b.Mul(kh, u(G))), u(a.d)), i), a.dt))
	})
	b.For(tid, u(G*a.dv), wgv, func(i codegen.Value) { b.Store(os, i, b.F32(0)) })
	b.For(tid, u(G), wgv, func(i codegen.Value) {
		b.Store(ms, i, b.F32(float32(math.Inf(-1))))
		b.Store(ls, i, b.F32(0))
	})
	b.Barrier()
	last := b.Add(pos, b.I32(1)) // keys first..pos
	b.For(first, last, b.I32(int32(bk)), func(k0 codegen.Value) {
		// Scores of the tile: (head g, key k0+j) for every pair; -inf past the last key.
		b.For(tid, u(G*bk), wgv, func(i codegen.Value) {
			g, j := b.Div(i, u(bk)), b.Rem(i, u(bk))
			key := b.Add(k0, b.Bitcast(j, codegen.I32))
			s := b.Var("s", b.F32(float32(math.Inf(-1))))
			b.If(b.Lt(key, last), func() {
				acc := b.Var("acc", b.F32(0))
				kj := b.Bitcast(key, codegen.U32)
				b.For(u(0), u(a.d), u(1), func(f codegen.Value) {
					b.Set(acc, b.Fma(b.Load(qs, b.Add(b.Mul(g, u(a.d)), f)), kvLoad(kb, kq, kj, f, a.d), b.Get(acc)))
				})
				b.Set(s, b.Mul(b.Get(acc), b.F32(float32(a.scale))))
			})
			b.Store(sc, i, b.Get(s))
		})
		b.Barrier()
		// Per head: the tile's maximum, the rescale of what came before, the probabilities.
		b.For(tid, u(G), wgv, func(g codegen.Value) {
			base := b.Mul(g, u(bk))
			mt := b.Var("mt", b.Load(ms, g))
			b.For(u(0), u(bk), u(1), func(j codegen.Value) { b.Set(mt, b.Max(b.Get(mt), b.Load(sc, b.Add(base, j)))) })
			alpha := b.Exp(b.Sub(b.Load(ms, g), b.Get(mt)))
			sum := b.Var("sum", b.F32(0))
			b.For(u(0), u(bk), u(1), func(j codegen.Value) {
				e := b.Exp(b.Sub(b.Load(sc, b.Add(base, j)), b.Get(mt)))
				b.Store(sc, b.Add(base, j), e)
				b.Set(sum, b.Add(b.Get(sum), e))
			})
			b.Store(ls, g, b.Add(b.Mul(b.Load(ls, g), alpha), b.Get(sum)))
			b.Store(ms, g, b.Get(mt))
			b.Store(al, g, alpha)
		})
		b.Barrier()
		// The output: o = o·alpha + Σ_j p_j·v_j over the tile's keys.
		n := b.Min(b.Sub(last, k0), b.I32(int32(bk)))
		b.For(tid, u(G*a.dv), wgv, func(i codegen.Value) {
			g, f := b.Div(i, u(a.dv)), b.Rem(i, u(a.dv))
			acc := b.Var("o", b.Mul(b.Load(os, i), b.Load(al, g)))
			b.For(b.I32(0), n, b.I32(1), func(j codegen.Value) {
				kj := b.Bitcast(b.Add(k0, j), codegen.U32)
				pj := b.Load(sc, b.Add(b.Mul(g, u(bk)), b.Bitcast(j, codegen.U32)))
				b.Set(acc, b.Fma(pj, kvLoad(vb, vq, kj, f, a.dv), b.Get(acc)))
			})
			b.Store(os, i, b.Get(acc))
		})
		b.Barrier()
	})
	b.For(tid, u(G*a.dv), wgv, func(i codegen.Value) {
		g, f := b.Div(i, u(a.dv)), b.Rem(i, u(a.dv))
		h := b.Add(b.Mul(kh, u(G)), g)
		StoreAs(b, ob, b.Add(b.Mul(b.Add(b.Mul(r, u(a.hq)), h), u(a.dv)), f), b.Div(b.Load(os, i), b.Load(ls, g)), p.Outs[0].DType)
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
