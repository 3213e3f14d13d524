package kernels

import (
	"fmt"
	"math"

	"github.com/vkc-project/vkc/codegen"
)

// attnShared is the shared memory of a pass: Q and K tiles (d wide), the V tile, scores, the
// unnormalised output rows, and three per-row values.
func attnShared(a *attn, cfg attnPass) int {
	n := 4 * (cfg.br*a.d + cfg.bk*(a.d+4) + cfg.bk*a.dv + cfg.br*cfg.bk + 3*cfg.br)
	if !cfg.regOutput(a) {
		n += 4 * cfg.br * a.dv
	}
	return n
}

// attnPass is one configuration of the generator.
type attnPass struct {
	br, bk, wg int
	splits     int  // key ranges (1: the whole range)
	split      bool // write (m, l, o) to scratch instead of o/l to the result
	// inPass (with split): the last workgroup of each key/value head to finish combines the
	// ranges and writes the result (counted at a Sync word), so there is no combining step.
	inPass bool
}

// regOutput reports whether the output block can live in registers as a micro tile per
// invocation: dv a multiple of 4, the dv/4 vectors of a row dividing the workgroup, whose
// wg/(dv/4) rows divide the block. Otherwise the block's output stays in shared memory.
func (c attnPass) regOutput(a *attn) bool {
	if a.dv%4 != 0 || c.wg%(a.dv/4) != 0 {
		return false
	}
	return c.br%(c.wg/(a.dv/4)) == 0
}

// splitRows is the row block of the split pass: every row of a key/value head, rounded up to a
// multiple of the rows one register pass covers (wg/(dv/4)) when the output fits that layout.
func splitRows(a *attn, wg int) int {
	br := a.rows()
	if a.dv%4 == 0 && wg%(a.dv/4) == 0 {
		ty := wg / (a.dv / 4)
		br = ceilDiv(br, ty) * ty
	}
	return br
}

// attnGen is a pass kernel under construction: what every stage of buildAttnPass reads — the
// problem's geometry and configuration, the bindings, the shared tiles, the workgroup's rows and
// key range, and the per-invocation registers. The stages are methods called in program order
// (the builder emits in call order, so their order is the kernel's).
type attnGen struct {
	b    *codegen.Builder
	p    *Problem
	a    *attn
	cfg  attnPass
	caps Caps

	dvec     int          // Q and K elements per load: 4 when d allows, else 1
	vt       codegen.Type // the type of one such load, in f32
	reg      bool         // the output block is a register micro tile (attnPass.regOutput)
	sgSoft   bool         // the softmax statistics are subgroup butterflies in registers
	tx4, ty4 int          // with reg: invocations per row (dv/4) and rows per pass (wg/tx4)
	d4, d4p  int          // Q/K row length in loads, and the padded K row

	qb, kb, vb      *codegen.Buffer
	kq, vq          *quantRows      // a block-quantized K and V (bound as u32 words), else nil
	lenBuf, scratch *codegen.Buffer // kv_len (when an operand), the split pass's partials
	sync            *codegen.Buffer // inPass: one arrival counter per key/value head
	lastFlag        *codegen.Array  // inPass: this workgroup arrived last
	nonEmpty        codegen.Value   // inPass: the workgroup's key range holds a key
	nBuf            *codegen.Buffer // the run-time length n (Problem.Rows.Reads): the queries
	epi             *epilogue       // the result and its epilogue (not split)
	binds           []Operand
	vals            map[string]int // specialization constants' values

	BR, BK, WG codegen.Value // block_r, block_k, wg as specialization constants

	qs, ks, vs, ss *codegen.Array // Q, K, V tiles and the tile's scores
	ms, ls, as     *codegen.Array // per-row m, l and the last tile's rescale alpha
	oacc           *codegen.Array // unnormalised output rows (not reg)

	li, t0, kh, zsplit codegen.Value // local index, first row, key/value head, key range
	kvlen              codegen.Value // keys seen, u32
	qlen               codegen.Value // queries: sq, or the run-time length n (i32)
	T, chunk           int           // rows per key/value head; keys per range
	lo, hi             codegen.Value // the workgroup's key range [lo, hi), i32
	loU, hiU           codegen.Value // the same, u32, hi ≥ lo
	negInf, zero       codegen.Value
	scale, zv          codegen.Value // the score scale; a zero load of vt

	oreg, mreg, lreg, areg []*codegen.Var // reg: output micro tile; sgSoft: m, l, alpha
	fx, ty                 codegen.Value  // reg: the invocation's feature vector and row
}

// buildAttnPass builds the pass kernel. Bindings: q, k, v, [kv_len], then for a split pass the
// scratch buffer, else the epilogue's inputs and the result.
func buildAttnPass(p *Problem, a *attn, cfg attnPass, caps Caps) (*codegen.Kernel, []uint32, []Operand, error) {
	name := "attention_flash"
	if cfg.split {
		name = "attention_split"
	}
	g := &attnGen{b: newBuilder(fmt.Sprintf("%s_r%d", name, cfg.br), caps), p: p, a: a, cfg: cfg, caps: caps}
	g.declare()
	g.keyRange()
	if cfg.inPass {
		// Every workgroup arrives, an empty range's too (its partials are never read).
		g.b.If(g.nonEmpty, func() {
			g.initBlock()
			g.keyLoop()
			g.writeOutput()
		})
		g.arriveAndCombine()
	} else {
		g.initBlock()
		g.keyLoop()
		g.writeOutput()
	}
	k, err := g.b.Finish()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := caps.Supports(k); err != nil {
		return nil, nil, nil, err
	}
	sp, err := specFor(k, g.vals)
	if err != nil {
		return nil, nil, nil, err
	}
	return k, sp, g.binds, nil
}

func (g *attnGen) u(x int) codegen.Value { return g.b.U32(uint32(x)) }

func (g *attnGen) i32(x codegen.Value) codegen.Value { return g.b.Convert(x, codegen.I32) }

// pos is the absolute position of query i (i32: kv_len < sq is legal without masks).
func (g *attnGen) pos(i codegen.Value) codegen.Value {
	b := g.b
	return b.Add(b.Sub(g.i32(g.kvlen), g.qlen), g.i32(i))
}

// declare declares the bindings, the specialization constants and the shared tiles.
func (g *attnGen) declare() {
	b, a, p, cfg, u := g.b, g.a, g.p, g.cfg, g.u
	g.dvec = 1
	if a.d%4 == 0 {
		g.dvec = 4
	}
	// q and k, v may differ in dtype (f32 queries over an f16 cache).
	elem, kelem := StorageType(a.dt), codegen.U32 // a block-quantized K and V are u32 words
	if !a.kvt.Quantized() {
		kelem = StorageType(a.kvt)
	}
	velem, kvelem := elem, kelem
	g.vt = codegen.F32
	if g.dvec > 1 {
		velem, kvelem, g.vt = codegen.Vec(elem, g.dvec), codegen.Vec(kelem, g.dvec), codegen.Vec(codegen.F32, g.dvec)
	}
	// reg: each invocation keeps a micro tile of the output in registers — rows ty + i·TY of
	// the block (i < br/TY) and features 4·fx..4·fx+3 — and reads V as vectors.
	g.reg = cfg.regOutput(a)
	g.tx4 = a.dv / 4
	vElem := kelem
	if g.reg {
		vElem = codegen.Vec(kelem, 4)
	}
	g.qb = b.Buffer("q", velem, codegen.ReadOnly)
	if a.kvt.Quantized() {
		// ggml's blocks as u32 words: rows of d (and dv) features are whole blocks.
		kq, vq := newQuantRows(a.kvt, a.d), newQuantRows(a.kvt, a.dv)
		g.kq, g.vq = &kq, &vq
		kvelem, vElem = codegen.U32, codegen.U32
	}
	if a.lay.K == "hds" {
		// K transposed ([hkv, d, skv]): a key's features lie skv apart, so they are read one
		// by one (fetchKV) and K is bound as scalars.
		kvelem = kelem
	}
	g.kb = b.Buffer("k", kvelem, codegen.ReadOnly)
	g.vb = b.Buffer("v", vElem, codegen.ReadOnly)
	g.lenBuf, g.nBuf, g.binds = a.lengthBuffers(b, p, []Operand{{Arg, 0}, {Arg, 1}, {Arg, 2}})
	switch {
	case cfg.split && cfg.inPass:
		// The partials are read back by another workgroup: coherent, and the counters too.
		g.scratch = b.Buffer("partial", codegen.F32, codegen.ReadWrite, codegen.Coherent)
		g.sync = b.Buffer("sync", codegen.U32, codegen.ReadWrite, codegen.Coherent)
		g.binds = append(g.binds, Operand{Scratch, 0}, Operand{Sync, 0})
		var eb []Operand
		g.epi, eb = declareEpilogue(b, p, a.opType)
		g.binds = append(g.binds, eb...)
	case cfg.split:
		g.scratch = b.Buffer("partial", codegen.F32, codegen.WriteOnly)
		g.binds = append(g.binds, Operand{Scratch, 0})
	default:
		var eb []Operand
		g.epi, eb = declareEpilogue(b, p, a.opType)
		g.binds = append(g.binds, eb...)
	}
	g.vals = map[string]int{"block_r": cfg.br, "block_k": cfg.bk, "wg": cfg.wg}
	spec := func(n string) codegen.Value { return b.Spec(n, codegen.U32, int64(g.vals[n])) }
	g.BR, g.BK, g.WG = spec("block_r"), spec("block_k"), spec("wg")
	b.WorkgroupSize(g.WG, b.U32(1), b.U32(1))
	g.d4 = a.d / g.dvec
	g.qs = b.Shared("q_tile", g.vt, b.Mul(g.BR, u(g.d4)))
	// K rows are padded by one element: invocations reading different keys at one feature
	// then hit different banks.
	g.d4p = g.d4 + 1
	g.ks = b.Shared("k_tile", g.vt, b.Mul(g.BK, u(g.d4p)))
	// One V tile (declaring both forms left an unused array in shared memory: 8 KiB at
	// block_k 32, dv 64, past lavapipe's 32 KiB).
	if g.reg {
		g.vs = b.Shared("v_tile", codegen.Vec(codegen.F32, 4), b.Mul(g.BK, u(g.tx4)))
	} else {
		g.vs = b.Shared("v_tile", codegen.F32, b.Mul(g.BK, u(a.dv)))
	}
	g.ss = b.Shared("scores", codegen.F32, b.Mul(g.BR, g.BK))
	g.ms = b.Shared("m", codegen.F32, g.BR)
	g.ls = b.Shared("l", codegen.F32, g.BR)
	g.as = b.Shared("alpha", codegen.F32, g.BR)
	if !g.reg {
		g.oacc = b.Shared("o", codegen.F32, b.Mul(g.BR, u(a.dv))) // unnormalised output rows
	}
	if cfg.inPass {
		g.lastFlag = b.Shared("last", codegen.U32, u(1))
	}
}

// keyRange finds the workgroup's rows and the range of keys they may see: its split's range,
// cut to kv_len and, with masks, to what the block's first and last rows see. A split pass
// whose range holds no key for any row returns at once.
func (g *attnGen) keyRange() {
	b, a, cfg, u := g.b, g.a, g.cfg, g.u
	g.li = b.LocalIndex()
	wid := b.WorkgroupID()
	g.T = a.rows()
	g.t0 = b.Mul(b.X(wid), g.BR)
	g.kh = b.Y(wid)
	g.zsplit = b.Z(wid)
	g.kvlen = u(a.skv)
	if a.kvLen {
		g.kvlen = b.Convert(b.Min(b.Max(b.Convert(b.Load(g.lenBuf, u(0)), codegen.I32), b.I32(0)), b.I32(int32(a.skv))), codegen.U32)
	}
	g.qlen = queries(b, g.p, a, g.nBuf)
	g.chunk = ceilDiv(a.skv, cfg.splits) // at most: the ranges cut kv_len where it is an operand
	chunk := splitChunk(b, a, cfg.splits, g.kvlen)
	// The workgroup's key range [lo, hi), as i32.
	tLast := b.Sub(b.Min(b.Add(g.t0, g.BR), u(g.T)), u(1))
	lo := b.Mul(g.i32(g.zsplit), chunk)
	hi := b.Min(b.Add(lo, chunk), g.i32(g.kvlen))
	if a.causal || a.window > 0 {
		hi = b.Min(hi, b.Add(g.pos(b.Div(tLast, u(a.group))), b.I32(1)))
	}
	if a.window > 0 {
		lo = b.Max(lo, b.Add(b.Sub(g.pos(b.Div(g.t0, u(a.group))), b.I32(int32(a.window))), b.I32(1)))
	}
	lo = b.Max(lo, b.I32(0))
	switch {
	case cfg.split && cfg.inPass:
		g.nonEmpty = b.Lt(lo, hi)
	case cfg.split:
		// A range with no key for any of the block's rows: the combine step will not read it.
		b.If(b.Ge(lo, hi), b.Return)
	}
	g.lo, g.hi = lo, hi
	g.negInf = b.F32(float32(math.Inf(-1)))
	g.zero = b.F32(0)
	g.scale = b.F32(float32(a.scale))
}

// initBlock stages the block's Q rows, scaled, and clears the running statistics and the
// output (in registers or shared memory).
func (g *attnGen) initBlock() {
	b, a, cfg, u := g.b, g.a, g.cfg, g.u
	d4, dvec, zero := g.d4, g.dvec, g.zero
	// Q block, scaled, and the running statistics.
	g.zv = b.Splat(zero, dvec)
	stageTile(b, g.li, cfg.wg, cfg.br*d4, func(e codegen.Value) codegen.Value {
		r, f := b.Div(e, u(d4)), b.Rem(e, u(d4))
		t := b.Add(g.t0, r)
		ok := b.Lt(t, u(g.T))
		t = b.Select(ok, t, u(0))
		i, h := b.Div(t, u(a.group)), b.Add(b.Mul(g.kh, u(a.group)), b.Rem(t, u(a.group)))
		x := b.Load(g.qb, b.Add(b.Div(a.at(b, a.lay.Q, i, h, u(0), a.sq, a.hq, a.d), u(dvec)), f))
		return b.Select(ok, b.Mul(b.Convert(x, g.vt), b.Splat(g.scale, dvec)), g.zv)
	}, func(e, v codegen.Value) { b.Store(g.qs, e, v) })
	b.For(g.li, g.BR, g.WG, func(r codegen.Value) {
		b.Store(g.ms, r, g.negInf)
		b.Store(g.ls, r, zero)
	})
	tx4 := g.tx4
	g.ty4 = cfg.wg / max(tx4, 1)
	// sgSoft: the dv/4 invocations of a row sit in one subgroup, so the row's maximum and sum
	// are shuffle butterflies and m, l, alpha stay in registers (no per-row phase, no barrier).
	// Limit: this assumes subgroups of Caps.SubgroupSize consecutive local indices, as on
	// NVIDIA, AMD and lavapipe; a driver free to pick a narrower width per pipeline (Intel)
	// would need VK_EXT_subgroup_size_control's required size, which codegen does not emit yet.
	caps := g.caps
	g.sgSoft = g.reg && cfg.bk%tx4 == 0 && caps.SubgroupShuffle && caps.SubgroupSize >= tx4 &&
		caps.SubgroupSize%tx4 == 0 && tx4&(tx4-1) == 0
	if g.reg {
		g.fx, g.ty = b.Rem(g.li, u(tx4)), b.Div(g.li, u(tx4))
		for i := 0; i < cfg.br/g.ty4; i++ {
			g.oreg = append(g.oreg, b.Var(fmt.Sprintf("o%d", i), b.Splat(zero, 4)))
			if g.sgSoft {
				g.mreg = append(g.mreg, b.Var(fmt.Sprintf("m%d", i), g.negInf))
				g.lreg = append(g.lreg, b.Var(fmt.Sprintf("l%d", i), zero))
				g.areg = append(g.areg, b.Var(fmt.Sprintf("alpha%d", i), b.F32(1)))
			}
		}
	} else {
		b.For(g.li, b.Mul(g.BR, u(a.dv)), g.WG, func(e codegen.Value) { b.Store(g.oacc, e, zero) })
	}
}

// fetchKV issues the loads of the K and V tiles at key kt into registers; putKV stores them to
// shared memory later.
func (g *attnGen) fetchKV(kt codegen.Value) (*staged, *staged) {
	b, a, cfg, u := g.b, g.a, g.cfg, g.u
	d4, dvec, tx4 := g.d4, g.dvec, g.tx4
	// key row kt+j, or row 0 (a valid address) with ok false past the range
	key := func(j codegen.Value) (codegen.Value, codegen.Value) {
		jj := b.Add(kt, j)
		ok := b.Lt(jj, g.hiU)
		return b.Select(ok, jj, u(0)), ok
	}
	var kst *staged
	if a.lay.K == "hds" {
		// K transposed: keys are contiguous. The tile is walked key-fastest (element e is
		// features dvec·(e / bk).. of key e mod bk), so neighbouring invocations read
		// neighbouring keys; each gathers its dvec features (putKV puts them back key-major).
		kst = fetchTile(b, g.li, cfg.wg, cfg.bk*d4, func(e codegen.Value) codegen.Value {
			jj, ok := key(b.Rem(e, u(cfg.bk)))
			f0 := b.Mul(b.Div(e, u(cfg.bk)), u(dvec))
			xs := make([]codegen.Value, dvec)
			for c := range xs {
				xs[c] = LoadAs(b, g.kb, a.at(b, a.lay.K, jj, g.kh, b.Add(f0, u(c)), a.skv, a.hkv, a.d), a.kvt)
			}
			x := xs[0]
			if dvec > 1 {
				x = b.Vec(xs...)
			}
			return b.Select(ok, x, g.zv)
		})
	} else {
		kst = g.fetchK(kt, key)
	}
	if g.reg {
		v4 := codegen.Vec(codegen.F32, 4)
		return kst, fetchTile(b, g.li, cfg.wg, cfg.bk*tx4, func(e codegen.Value) codegen.Value {
			jj, ok := key(b.Div(e, u(tx4)))
			var x codegen.Value
			if g.vq != nil {
				x = g.vq.quad(b, g.vb, b.Div(a.at(b, a.lay.V, jj, g.kh, u(0), a.skv, a.hkv, a.dv), u(a.dv)), b.Mul(b.Rem(e, u(tx4)), u(4)))
			} else {
				x = b.Convert(b.Load(g.vb, b.Add(b.Div(a.at(b, a.lay.V, jj, g.kh, u(0), a.skv, a.hkv, a.dv), u(4)), b.Rem(e, u(tx4)))), v4)
			}
			return b.Select(ok, x, b.Splat(g.zero, 4))
		})
	}
	return kst, fetchTile(b, g.li, cfg.wg, cfg.bk*a.dv, func(e codegen.Value) codegen.Value {
		jj, ok := key(b.Div(e, u(a.dv)))
		var x codegen.Value
		if g.vq != nil {
			x = g.vq.element(b, g.vb, b.Div(a.at(b, a.lay.V, jj, g.kh, u(0), a.skv, a.hkv, a.dv), u(a.dv)), b.Rem(e, u(a.dv)))
		} else {
			x = LoadAs(b, g.vb, a.at(b, a.lay.V, jj, g.kh, b.Rem(e, u(a.dv)), a.skv, a.hkv, a.dv), a.kvt)
		}
		return b.Select(ok, x, g.zero)
	})
}

// fetchK issues the loads of a K tile in layout shd or hsd (rows of d features contiguous):
// a quantized row (key jj of head kh) is row at(jj, kh, 0)/d of a [rows, d] block matrix;
// its features decode from the blocks (four at a time where the loads are vectors).
func (g *attnGen) fetchK(kt codegen.Value, key func(j codegen.Value) (codegen.Value, codegen.Value)) *staged {
	b, a, cfg, u := g.b, g.a, g.cfg, g.u
	d4, dvec := g.d4, g.dvec
	return fetchTile(b, g.li, cfg.wg, cfg.bk*d4, func(e codegen.Value) codegen.Value {
		jj, ok := key(b.Div(e, u(d4)))
		var x codegen.Value
		switch {
		case g.kq != nil && dvec == 4:
			x = g.kq.quad(b, g.kb, b.Div(a.at(b, a.lay.K, jj, g.kh, u(0), a.skv, a.hkv, a.d), u(a.d)), b.Mul(b.Rem(e, u(d4)), u(4)))
		case g.kq != nil:
			x = g.kq.element(b, g.kb, b.Div(a.at(b, a.lay.K, jj, g.kh, u(0), a.skv, a.hkv, a.d), u(a.d)), b.Rem(e, u(d4)))
		default:
			x = b.Convert(b.Load(g.kb, b.Add(b.Div(a.at(b, a.lay.K, jj, g.kh, u(0), a.skv, a.hkv, a.d), u(dvec)), b.Rem(e, u(d4)))), g.vt)
		}
		return b.Select(ok, x, g.zv)
	})
}

func (g *attnGen) putKV(kst, vst *staged) {
	b, u := g.b, g.u
	kst.put(b, func(e, v codegen.Value) {
		if g.a.lay.K == "hds" { // fetched key-fastest (fetchKV)
			bk := u(g.cfg.bk)
			b.Store(g.ks, b.Add(b.Mul(b.Rem(e, bk), u(g.d4p)), b.Div(e, bk)), v)
			return
		}
		b.Store(g.ks, b.Add(b.Mul(b.Div(e, u(g.d4)), u(g.d4p)), b.Rem(e, u(g.d4))), v)
	})
	vst.put(b, func(e, v codegen.Value) { b.Store(g.vs, e, v) })
}

// keyLoop walks the key range in tiles of block_k: scores, the online softmax, and the output's
// update per tile, the next tile's loads issued while this one is computed.
func (g *attnGen) keyLoop() {
	b := g.b
	g.loU = b.Convert(g.lo, codegen.U32)
	g.hiU = b.Convert(b.Max(g.hi, g.lo), codegen.U32)
	// With a single key tile per workgroup (decode's split ranges) prefetching only adds a
	// barrier (measured 2% slower on the H200), so the tile is staged at the top of the loop. So
	// it is on a CPU implementation, which runs an invocation's loads in order anyway: there the
	// second copy of the loads cost lavapipe a quarter of the kernel's compile (2.0 s against
	// 1.65 s for SmolLM2's prefill attention), and the runs were no slower (27 ms).
	prefetch := ceilDiv(g.chunk, g.cfg.bk) > 1 && !g.caps.CPU
	if prefetch {
		g.putKV(g.fetchKV(g.loU))
		b.Barrier()
	}
	b.For(g.loU, g.hiU, g.BK, func(kt codegen.Value) {
		var nk, nv *staged
		if prefetch {
			// The next tiles' loads are issued now and land while this tile is computed.
			nk, nv = g.fetchKV(b.Add(kt, g.BK))
		} else {
			g.putKV(g.fetchKV(kt))
			b.Barrier()
		}
		g.scores(kt)
		b.Barrier()
		if !g.sgSoft {
			g.softmaxRows()
			b.Barrier()
		}
		g.accumulate()
		b.Barrier()
		if prefetch {
			g.putKV(nk, nv)
			b.Barrier()
		}
	})
}

// masked is score s of row r and key kt+j, or -inf where the row may not see the key.
func (g *attnGen) masked(kt, r, j, s codegen.Value) codegen.Value {
	b, a, u := g.b, g.a, g.u
	t := b.Add(g.t0, r)
	jj := b.Add(kt, j)
	ok := b.And(b.Lt(t, u(g.T)), b.Lt(jj, g.hiU))
	if a.causal || a.window > 0 {
		pr := g.pos(b.Div(t, u(a.group)))
		ok = b.And(ok, b.Le(g.i32(jj), pr))
		if a.window > 0 {
			ok = b.And(ok, b.Gt(g.i32(jj), b.Sub(pr, b.I32(int32(a.window)))))
		}
	}
	return b.Select(ok, s, g.negInf)
}

// dot adds the product of two Q/K loads to acc.
func (g *attnGen) dot(x, y, acc codegen.Value) codegen.Value {
	if g.dvec > 1 {
		return g.b.Add(acc, g.b.Dot(x, y))
	}
	return g.b.Fma(x, y, acc)
}

// scores computes the tile's scores into shared memory: with the register layout a micro tile
// per invocation (and, with sgSoft, the softmax statistics too, so the stored scores are
// already exponentiated); otherwise one score per loop step.
func (g *attnGen) scores(kt codegen.Value) {
	b, cfg, u := g.b, g.cfg, g.u
	tx4, ty4, d4, d4p := g.tx4, g.ty4, g.d4, g.d4p
	zero, negInf := g.zero, g.negInf
	kc := cfg.bk / max(tx4, 1)
	if !g.reg || cfg.bk%tx4 != 0 {
		b.For(g.li, b.Mul(g.BR, g.BK), g.WG, func(e codegen.Value) {
			r, j := b.Div(e, g.BK), b.Rem(e, g.BK)
			acc := b.Var("dot", zero)
			b.For(u(0), u(d4), u(1), func(f codegen.Value) {
				x, y := b.Load(g.qs, b.Add(b.Mul(r, u(d4)), f)), b.Load(g.ks, b.Add(b.Mul(j, u(d4p)), f))
				b.Set(acc, g.dot(x, y, b.Get(acc)))
			})
			b.Store(g.ss, e, g.masked(kt, r, j, b.Get(acc)))
		})
		return
	}
	// The invocation's output rows × keys fx + c·dv/4: a micro tile whose Q and K
	// reads are shared by its products.
	fx, ty := g.fx, g.ty
	rows := cfg.br / ty4
	acc := make([][]*codegen.Var, rows)
	for i := range acc {
		acc[i] = make([]*codegen.Var, kc)
		for c := range acc[i] {
			acc[i][c] = b.Var(fmt.Sprintf("s%d_%d", i, c), zero)
		}
	}
	b.For(u(0), u(d4), u(1), func(f codegen.Value) {
		kv := make([]codegen.Value, kc)
		for c := range kv {
			kv[c] = b.Load(g.ks, b.Add(b.Mul(b.Add(fx, u(c*tx4)), u(d4p)), f))
		}
		for i := range acc {
			qv := b.Load(g.qs, b.Add(b.Mul(b.Add(ty, u(i*ty4)), u(d4)), f))
			for c := range kv {
				b.Set(acc[i][c], g.dot(qv, kv[c], b.Get(acc[i][c])))
			}
		}
	})
	butterfly := func(x codegen.Value, op func(x, y codegen.Value) codegen.Value) codegen.Value {
		for off := tx4 / 2; off >= 1; off /= 2 {
			x = op(x, b.SubgroupShuffleXor(x, u(off)))
		}
		return x
	}
	for i := range acc {
		r := b.Add(ty, u(i*ty4))
		sv := make([]codegen.Value, kc)
		for c := range acc[i] {
			sv[c] = g.masked(kt, r, b.Add(fx, u(c*tx4)), b.Get(acc[i][c]))
		}
		if !g.sgSoft {
			for c := range sv {
				b.Store(g.ss, b.Add(b.Mul(r, g.BK), b.Add(fx, u(c*tx4))), sv[c])
			}
			continue
		}
		lm := sv[0]
		for _, x := range sv[1:] {
			lm = b.Max(lm, x)
		}
		lm = butterfly(lm, b.Max)
		mOld := b.Get(g.mreg[i])
		mNew := b.Max(mOld, lm)
		mSafe := b.Select(b.Eq(mNew, negInf), zero, mNew)
		sum := zero
		for c := range sv {
			pc := b.Exp(b.Sub(sv[c], mSafe))
			b.Store(g.ss, b.Add(b.Mul(r, g.BK), b.Add(fx, u(c*tx4))), pc)
			sum = b.Add(sum, pc)
		}
		sum = butterfly(sum, b.Add)
		alpha := b.Exp(b.Sub(mOld, mSafe))
		b.Set(g.lreg[i], b.Add(b.Mul(b.Get(g.lreg[i]), alpha), sum))
		b.Set(g.mreg[i], mNew)
		b.Set(g.areg[i], alpha)
	}
}

// softmaxRows is the online softmax of the tile, one invocation per row: the row's new maximum,
// the scores exponentiated in place, and l and alpha updated.
func (g *attnGen) softmaxRows() {
	b, u, zero := g.b, g.u, g.zero
	BK := g.BK
	b.For(g.li, g.BR, g.WG, func(r codegen.Value) {
		mOld := b.Load(g.ms, r)
		mx := b.Var("mx", mOld)
		b.For(u(0), BK, u(1), func(j codegen.Value) {
			b.Set(mx, b.Max(b.Get(mx), b.Load(g.ss, b.Add(b.Mul(r, BK), j))))
		})
		mNew := b.Get(mx)
		// A row with no key yet keeps m = -inf; subtracting 0 instead keeps exp finite.
		mSafe := b.Select(b.Eq(mNew, g.negInf), zero, mNew)
		sum := b.Var("sum", zero)
		b.For(u(0), BK, u(1), func(j codegen.Value) {
			i := b.Add(b.Mul(r, BK), j)
			pj := b.Exp(b.Sub(b.Load(g.ss, i), mSafe))
			b.Store(g.ss, i, pj)
			b.Set(sum, b.Add(b.Get(sum), pj))
		})
		alpha := b.Exp(b.Sub(mOld, mSafe))
		b.Store(g.as, r, alpha)
		b.Store(g.ls, r, b.Add(b.Mul(b.Load(g.ls, r), alpha), b.Get(sum)))
		b.Store(g.ms, r, mNew)
	})
}

// accumulate rescales the output by alpha and adds the tile's probabilities times V.
func (g *attnGen) accumulate() {
	b, a, u := g.b, g.a, g.u
	BK := g.BK
	if g.reg {
		rows := make([]codegen.Value, len(g.oreg))
		for i, o := range g.oreg {
			rows[i] = b.Add(g.ty, u(i*g.ty4))
			var alpha codegen.Value
			if g.sgSoft {
				alpha = b.Get(g.areg[i])
			} else {
				alpha = b.Load(g.as, rows[i])
			}
			b.Set(o, b.Mul(b.Get(o), b.Splat(alpha, 4)))
		}
		b.For(u(0), BK, u(1), func(j codegen.Value) {
			v := b.Load(g.vs, b.Add(b.Mul(j, u(g.tx4)), g.fx))
			for i, o := range g.oreg {
				pj := b.Load(g.ss, b.Add(b.Mul(rows[i], BK), j))
				b.Set(o, b.Fma(b.Splat(pj, 4), v, b.Get(o)))
			}
		})
		return
	}
	b.For(g.li, b.Mul(g.BR, u(a.dv)), g.WG, func(e codegen.Value) {
		r, f := b.Div(e, u(a.dv)), b.Rem(e, u(a.dv))
		acc := b.Var("pv", b.Mul(b.Load(g.oacc, e), b.Load(g.as, r)))
		b.For(u(0), BK, u(1), func(j codegen.Value) {
			b.Set(acc, b.Fma(b.Load(g.ss, b.Add(b.Mul(r, BK), j)), b.Load(g.vs, b.Add(b.Mul(j, u(a.dv)), f)), b.Get(acc)))
		})
		b.Store(g.oacc, e, b.Get(acc))
	})
}

// writeOutput writes the block: o/l through the epilogue to the result, or for a split pass
// (m, l, o) of each row to its range's slot of the scratch buffer.
func (g *attnGen) writeOutput() {
	b, a, cfg, u := g.b, g.a, g.cfg, g.u
	b.Barrier() // for an empty key range: the initial o, m, l are visible
	// store writes output element (row r, feature f) of unnormalised value o; m and l are
	// the row's statistics (nil: read from shared memory).
	store := func(r, f, o, m, l codegen.Value) {
		t := b.Add(g.t0, r)
		b.If(b.Lt(t, u(g.T)), func() {
			if !m.Valid() {
				m, l = b.Load(g.ms, r), b.Load(g.ls, r)
			}
			if cfg.split {
				base := b.Mul(b.Add(b.Mul(b.Add(b.Mul(g.zsplit, u(a.hkv)), g.kh), u(g.T)), t), u(a.dv+2))
				b.Store(g.scratch, b.Add(base, b.Add(f, u(2))), o)
				b.If(b.Eq(f, u(0)), func() {
					b.Store(g.scratch, base, m)
					b.Store(g.scratch, b.Add(base, u(1)), l)
				})
				return
			}
			i, h := b.Div(t, u(a.group)), b.Add(b.Mul(g.kh, u(a.group)), b.Rem(t, u(a.group)))
			g.epi.store(b, a.at(b, a.lay.Q, i, h, f, a.sq, a.hq, a.dv), b.Div(o, l))
		})
	}
	if g.reg {
		for i, o := range g.oreg {
			ov := b.Get(o)
			var m, l codegen.Value
			if g.sgSoft {
				m, l = b.Get(g.mreg[i]), b.Get(g.lreg[i])
			}
			for c := 0; c < 4; c++ {
				store(b.Add(g.ty, u(i*g.ty4)), b.Add(b.Mul(g.fx, u(4)), u(c)), b.Extract(ov, c), m, l)
			}
		}
		return
	}
	b.For(g.li, b.Mul(g.BR, u(a.dv)), g.WG, func(e codegen.Value) {
		store(b.Div(e, u(a.dv)), b.Rem(e, u(a.dv)), b.Load(g.oacc, e), codegen.Value{}, codegen.Value{})
	})
}

// arriveAndCombine ends an inPass split pass: the workgroup's partials are released, one
// invocation counts the arrival at its key/value head's Sync word, and the workgroup that
// arrives last (splits − 1 before it) resets the word for the next run and combines every
// range's partials into the result, as the combining step would (combineElem). The partials
// are read through a coherent binding after a device-scope acquire.
func (g *attnGen) arriveAndCombine() {
	b, a, u := g.b, g.a, g.u
	b.MemoryBarrier(codegen.ScopeDevice, codegen.SemStorageBuffer)
	b.ControlBarrier(codegen.ScopeWorkgroup, codegen.ScopeDevice, codegen.SemStorageBuffer|codegen.SemWorkgroup)
	b.If(b.Eq(g.li, u(0)), func() {
		old := b.AtomicAdd(g.sync, g.kh, u(1))
		last := b.Eq(old, u(g.cfg.splits-1))
		b.Store(g.lastFlag, u(0), b.Select(last, u(1), u(0)))
		b.If(last, func() { b.AtomicExchange(g.sync, g.kh, u(0)) })
	})
	b.Barrier()
	b.If(b.Eq(b.Load(g.lastFlag, u(0)), u(1)), func() {
		b.MemoryBarrier(codegen.ScopeDevice, codegen.SemStorageBuffer)
		b.For(g.li, u(g.T*a.dv), g.WG, func(e codegen.Value) {
			combineElem(b, a, g.cfg.splits, g.scratch, g.epi, g.kvlen, g.qlen, g.kh, b.Div(e, u(a.dv)), b.Rem(e, u(a.dv)))
		})
	})
}
