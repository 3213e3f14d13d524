package kernels

import (
	"fmt"
	"math"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
)

// Attention templates. Both are built by one generator (buildAttnPass): a workgroup takes a block
// of "rows" — (query, query head) pairs that share one key/value head, the query head varying
// fastest, so grouped-query heads read each key and value tile once and nothing is repeated in
// memory — and walks a range of keys in tiles of block_k with an online softmax: scores of the
// tile in shared memory, a running maximum m, sum l and unnormalised output o per row, all in
// shared memory. (o lived in registers first, block_r·dv/wg elements unrolled per invocation:
// at dv = 64 lavapipe's JIT took over ten seconds on the kernel, so it moved to shared memory,
// which costs two shared accesses per element and key tile against 2·block_k for the product.)
//
//   - AttentionFlash (prefill): the range is every key the block's rows may see; the pass writes
//     o/l to the result.
//   - AttentionSplit (decode, few rows, long cache): the keys are cut into `splits` ranges, one
//     workgroup per (range, key/value head) writes (m, l, o) of its rows to a scratch buffer, and
//     a second step combines the ranges of each row. A range entirely outside the keys its rows
//     may see (at or past kv_len, before a window, after a causal limit) returns at once.
//
// Where a workgroup walks several key tiles, the next one is loaded into registers while the
// current one is computed.
//
// Masks follow ir: query i sits at position p = kv_len - sq + i; key j is seen iff j < kv_len,
// and j ≤ p when causal, and p - window < j ≤ p when window > 0. kv_len is read from its i32
// operand at run time (clamped to 0..skv, so a bad value cannot read outside the cache); the
// grid is fixed and sized for every key.

// attn is an attention problem's geometry.
type attn struct {
	sq, hq, d, skv, hkv, dv int
	group                   int // query heads per key/value head
	hsd                     bool
	causal                  bool
	window                  int
	scale                   float64
	kvLen                   bool // kv_len is an operand (Args[3])
	dt                      ir.DType
	opType                  ir.Type
}

// rows is the number of (query, head) rows per key/value head.
func (a *attn) rows() int { return a.sq * a.group }

func readAttn(p *Problem) (*attn, error) {
	if p.Op != ir.Attention {
		return nil, ErrOtherOp
	}
	nop := opArgs(p)
	if nop > len(p.Args) {
		return nil, fmt.Errorf("problem has %d op arguments of %d", nop, len(p.Args))
	}
	args := p.Args[:nop]
	attrs, outs, err := ir.Infer(p.Op, p.Attrs, args)
	if err != nil {
		return nil, err
	}
	a := &attn{hsd: attrs.String("layout", "shd") == "hsd", causal: attrs.Bool("causal", false),
		window: attrs.Int("window", 0), kvLen: nop == 4, dt: args[0].DType, opType: outs[0]}
	dims := func(t ir.Type) (s, h, f int) {
		if a.hsd {
			return t.Shape[1], t.Shape[0], t.Shape[2]
		}
		return t.Shape[0], t.Shape[1], t.Shape[2]
	}
	a.sq, a.hq, a.d = dims(args[0])
	a.skv, a.hkv, _ = dims(args[1])
	_, _, a.dv = dims(args[2])
	a.group = a.hq / a.hkv
	a.scale = attrs.Float("scale", 1/math.Sqrt(float64(a.d)))
	return a, nil
}

// at is the element index of (seq s, head h, feature f) in a tensor of ns × nh × nf in a's layout.
func (a *attn) at(b *codegen.Builder, s, h, f codegen.Value, ns, nh, nf int) codegen.Value {
	u := func(x int) codegen.Value { return b.U32(uint32(x)) }
	if a.hsd {
		return b.Add(b.Mul(b.Add(b.Mul(h, u(ns)), s), u(nf)), f)
	}
	return b.Add(b.Mul(b.Add(b.Mul(s, u(nh)), h), u(nf)), f)
}

func acceptAttn(p *Problem, caps Caps) (*attn, error) {
	a, err := readAttn(p)
	if err != nil {
		return nil, err
	}
	if err := checkDTypes(p, caps); err != nil {
		return nil, err
	}
	if err := checkEpilogue(p, a.opType); err != nil {
		return nil, err
	}
	if a.hkv > caps.MaxGroups[1] {
		return nil, fmt.Errorf("%d key/value heads exceed the device's %d workgroups in y", a.hkv, caps.MaxGroups[1])
	}
	return a, nil
}

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

// buildAttnPass builds the pass kernel. Bindings: q, k, v, [kv_len], then for a split pass the
// scratch buffer, else the epilogue's inputs and the result.
func buildAttnPass(p *Problem, a *attn, cfg attnPass, caps Caps) (*codegen.Kernel, []uint32, []Operand, error) {
	name := "attention_flash"
	if cfg.split {
		name = "attention_split"
	}
	b := codegen.NewBuilder(fmt.Sprintf("%s_r%d", name, cfg.br))
	dvec := 1
	if a.d%4 == 0 {
		dvec = 4
	}
	elem := StorageType(a.dt)
	velem := elem
	vt := codegen.F32
	if dvec > 1 {
		velem, vt = codegen.Vec(elem, dvec), codegen.Vec(codegen.F32, dvec)
	}
	// reg: each invocation keeps a micro tile of the output in registers — rows ty + i·TY of
	// the block (i < br/TY) and features 4·fx..4·fx+3 — and reads V as vectors.
	reg := cfg.regOutput(a)
	tx4 := a.dv / 4
	vElem := elem
	if reg {
		vElem = codegen.Vec(elem, 4)
	}
	qb := b.Buffer("q", velem, codegen.ReadOnly)
	kb := b.Buffer("k", velem, codegen.ReadOnly)
	vb := b.Buffer("v", vElem, codegen.ReadOnly)
	binds := []Operand{{Arg, 0}, {Arg, 1}, {Arg, 2}}
	var lenBuf *codegen.Buffer
	if a.kvLen {
		lenBuf = b.Buffer("kv_len", StorageType(p.Args[3].DType), codegen.ReadOnly)
		binds = append(binds, Operand{Arg, 3})
	}
	var scratch *codegen.Buffer
	var epi *epilogue
	if cfg.split {
		scratch = b.Buffer("partial", codegen.F32, codegen.WriteOnly)
		binds = append(binds, Operand{Scratch, 0})
	} else {
		var eb []Operand
		epi, eb = declareEpilogue(b, p, a.opType)
		binds = append(binds, eb...)
	}
	vals := map[string]int{"block_r": cfg.br, "block_k": cfg.bk, "wg": cfg.wg}
	spec := func(n string) codegen.Value { return b.Spec(n, codegen.U32, int64(vals[n])) }
	BR, BK, WG := spec("block_r"), spec("block_k"), spec("wg")
	b.WorkgroupSize(WG, b.U32(1), b.U32(1))
	u := func(x int) codegen.Value { return b.U32(uint32(x)) }
	d4 := a.d / dvec
	qs := b.Shared("q_tile", vt, b.Mul(BR, u(d4)))
	// K rows are padded by one element: invocations reading different keys at one feature
	// then hit different banks.
	d4p := d4 + 1
	ks := b.Shared("k_tile", vt, b.Mul(BK, u(d4p)))
	vs := b.Shared("v_tile", codegen.F32, b.Mul(BK, u(a.dv)))
	if reg {
		vs = b.Shared("v_tile", codegen.Vec(codegen.F32, 4), b.Mul(BK, u(tx4)))
	}
	ss := b.Shared("scores", codegen.F32, b.Mul(BR, BK))
	ms := b.Shared("m", codegen.F32, BR)
	ls := b.Shared("l", codegen.F32, BR)
	as := b.Shared("alpha", codegen.F32, BR)
	var oacc *codegen.Array
	if !reg {
		oacc = b.Shared("o", codegen.F32, b.Mul(BR, u(a.dv))) // unnormalised output rows
	}

	li := b.LocalIndex()
	wid := b.WorkgroupID()
	T := a.rows()
	t0 := b.Mul(b.X(wid), BR)
	kh := b.Y(wid)
	zsplit := b.Z(wid)
	kvlen := u(a.skv)
	if a.kvLen {
		kvlen = b.Convert(b.Min(b.Max(b.Convert(b.Load(lenBuf, u(0)), codegen.I32), b.I32(0)), b.I32(int32(a.skv))), codegen.U32)
	}
	i32 := func(x codegen.Value) codegen.Value { return b.Convert(x, codegen.I32) }
	// pos is the absolute position of query i (i32: kv_len < sq is legal without masks).
	pos := func(i codegen.Value) codegen.Value {
		return b.Add(b.Sub(i32(kvlen), b.I32(int32(a.sq))), i32(i))
	}
	chunk := ceilDiv(a.skv, cfg.splits)
	// The workgroup's key range [lo, hi), as i32.
	tLast := b.Sub(b.Min(b.Add(t0, BR), u(T)), u(1))
	lo := b.Mul(i32(zsplit), b.I32(int32(chunk)))
	hi := b.Min(b.Add(lo, b.I32(int32(chunk))), i32(kvlen))
	if a.causal || a.window > 0 {
		hi = b.Min(hi, b.Add(pos(b.Div(tLast, u(a.group))), b.I32(1)))
	}
	if a.window > 0 {
		lo = b.Max(lo, b.Add(b.Sub(pos(b.Div(t0, u(a.group))), b.I32(int32(a.window))), b.I32(1)))
	}
	lo = b.Max(lo, b.I32(0))
	if cfg.split {
		// A range with no key for any of the block's rows: the combine step will not read it.
		b.If(b.Ge(lo, hi), b.Return)
	}
	negInf := b.F32(float32(math.Inf(-1)))
	zero := b.F32(0)
	scale := b.F32(float32(a.scale))

	// Q block, scaled, and the running statistics.
	zv := b.Splat(zero, dvec)
	stageTile(b, li, cfg.wg, cfg.br*d4, func(e codegen.Value) codegen.Value {
		r, f := b.Div(e, u(d4)), b.Rem(e, u(d4))
		t := b.Add(t0, r)
		ok := b.Lt(t, u(T))
		t = b.Select(ok, t, u(0))
		i, h := b.Div(t, u(a.group)), b.Add(b.Mul(kh, u(a.group)), b.Rem(t, u(a.group)))
		x := b.Load(qb, b.Add(b.Div(a.at(b, i, h, u(0), a.sq, a.hq, a.d), u(dvec)), f))
		return b.Select(ok, b.Mul(b.Convert(x, vt), b.Splat(scale, dvec)), zv)
	}, func(e, v codegen.Value) { b.Store(qs, e, v) })
	b.For(li, BR, WG, func(r codegen.Value) {
		b.Store(ms, r, negInf)
		b.Store(ls, r, zero)
	})
	var oreg []*codegen.Var
	var fx, ty codegen.Value
	ty4 := cfg.wg / max(tx4, 1)
	// sgSoft: the dv/4 invocations of a row sit in one subgroup, so the row's maximum and sum
	// are shuffle butterflies and m, l, alpha stay in registers (no per-row phase, no barrier).
	// Limit: this assumes subgroups of Caps.SubgroupSize consecutive local indices, as on
	// NVIDIA, AMD and lavapipe; a driver free to pick a narrower width per pipeline (Intel)
	// would need VK_EXT_subgroup_size_control's required size, which codegen does not emit yet.
	sgSoft := reg && cfg.bk%tx4 == 0 && caps.SubgroupShuffle && caps.SubgroupSize >= tx4 &&
		caps.SubgroupSize%tx4 == 0 && tx4&(tx4-1) == 0
	var mreg, lreg, areg []*codegen.Var
	if reg {
		fx, ty = b.Rem(li, u(tx4)), b.Div(li, u(tx4))
		for i := 0; i < cfg.br/ty4; i++ {
			oreg = append(oreg, b.Var(fmt.Sprintf("o%d", i), b.Splat(zero, 4)))
			if sgSoft {
				mreg = append(mreg, b.Var(fmt.Sprintf("m%d", i), negInf))
				lreg = append(lreg, b.Var(fmt.Sprintf("l%d", i), zero))
				areg = append(areg, b.Var(fmt.Sprintf("alpha%d", i), b.F32(1)))
			}
		}
	} else {
		b.For(li, b.Mul(BR, u(a.dv)), WG, func(e codegen.Value) { b.Store(oacc, e, zero) })
	}
	loU := b.Convert(lo, codegen.U32)
	hiU := b.Convert(b.Max(hi, lo), codegen.U32)
	// The K and V tiles at key kt: fetched into registers, stored to shared memory later.
	fetchKV := func(kt codegen.Value) (*staged, *staged) {
		// key row kt+j, or row 0 (a valid address) with ok false past the range
		key := func(j codegen.Value) (codegen.Value, codegen.Value) {
			jj := b.Add(kt, j)
			ok := b.Lt(jj, hiU)
			return b.Select(ok, jj, u(0)), ok
		}
		kst := fetchTile(b, li, cfg.wg, cfg.bk*d4, func(e codegen.Value) codegen.Value {
			jj, ok := key(b.Div(e, u(d4)))
			x := b.Load(kb, b.Add(b.Div(a.at(b, jj, kh, u(0), a.skv, a.hkv, a.d), u(dvec)), b.Rem(e, u(d4))))
			return b.Select(ok, b.Convert(x, vt), zv)
		})
		if reg {
			v4 := codegen.Vec(codegen.F32, 4)
			return kst, fetchTile(b, li, cfg.wg, cfg.bk*tx4, func(e codegen.Value) codegen.Value {
				jj, ok := key(b.Div(e, u(tx4)))
				x := b.Load(vb, b.Add(b.Div(a.at(b, jj, kh, u(0), a.skv, a.hkv, a.dv), u(4)), b.Rem(e, u(tx4))))
				return b.Select(ok, b.Convert(x, v4), b.Splat(zero, 4))
			})
		}
		return kst, fetchTile(b, li, cfg.wg, cfg.bk*a.dv, func(e codegen.Value) codegen.Value {
			jj, ok := key(b.Div(e, u(a.dv)))
			x := LoadAs(b, vb, a.at(b, jj, kh, b.Rem(e, u(a.dv)), a.skv, a.hkv, a.dv), a.dt)
			return b.Select(ok, x, zero)
		})
	}
	putKV := func(kst, vst *staged) {
		kst.put(b, func(e, v codegen.Value) {
			b.Store(ks, b.Add(b.Mul(b.Div(e, u(d4)), u(d4p)), b.Rem(e, u(d4))), v)
		})
		vst.put(b, func(e, v codegen.Value) { b.Store(vs, e, v) })
	}
	// With a single key tile per workgroup (decode's split ranges) prefetching only adds a
	// barrier (measured 2% slower on the H200), so the tile is staged at the top of the loop.
	prefetch := ceilDiv(chunk, cfg.bk) > 1
	if prefetch {
		putKV(fetchKV(loU))
		b.Barrier()
	}
	b.For(loU, hiU, BK, func(kt codegen.Value) {
		var nk, nv *staged
		if prefetch {
			// The next tiles' loads are issued now and land while this tile is computed.
			nk, nv = fetchKV(b.Add(kt, BK))
		} else {
			putKV(fetchKV(kt))
			b.Barrier()
		}
		// Scores of the tile, -inf where masked.
		masked := func(r, j, s codegen.Value) codegen.Value {
			t := b.Add(t0, r)
			jj := b.Add(kt, j)
			ok := b.And(b.Lt(t, u(T)), b.Lt(jj, hiU))
			if a.causal || a.window > 0 {
				pr := pos(b.Div(t, u(a.group)))
				ok = b.And(ok, b.Le(i32(jj), pr))
				if a.window > 0 {
					ok = b.And(ok, b.Gt(i32(jj), b.Sub(pr, b.I32(int32(a.window)))))
				}
			}
			return b.Select(ok, s, negInf)
		}
		dot := func(x, y, acc codegen.Value) codegen.Value {
			if dvec > 1 {
				return b.Add(acc, b.Dot(x, y))
			}
			return b.Fma(x, y, acc)
		}
		if kc := cfg.bk / max(tx4, 1); reg && cfg.bk%tx4 == 0 {
			// The invocation's output rows × keys fx + c·dv/4: a micro tile whose Q and K
			// reads are shared by its products.
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
					kv[c] = b.Load(ks, b.Add(b.Mul(b.Add(fx, u(c*tx4)), u(d4p)), f))
				}
				for i := range acc {
					qv := b.Load(qs, b.Add(b.Mul(b.Add(ty, u(i*ty4)), u(d4)), f))
					for c := range kv {
						b.Set(acc[i][c], dot(qv, kv[c], b.Get(acc[i][c])))
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
					sv[c] = masked(r, b.Add(fx, u(c*tx4)), b.Get(acc[i][c]))
				}
				if !sgSoft {
					for c := range sv {
						b.Store(ss, b.Add(b.Mul(r, BK), b.Add(fx, u(c*tx4))), sv[c])
					}
					continue
				}
				lm := sv[0]
				for _, x := range sv[1:] {
					lm = b.Max(lm, x)
				}
				lm = butterfly(lm, b.Max)
				mOld := b.Get(mreg[i])
				mNew := b.Max(mOld, lm)
				mSafe := b.Select(b.Eq(mNew, negInf), zero, mNew)
				sum := zero
				for c := range sv {
					pc := b.Exp(b.Sub(sv[c], mSafe))
					b.Store(ss, b.Add(b.Mul(r, BK), b.Add(fx, u(c*tx4))), pc)
					sum = b.Add(sum, pc)
				}
				sum = butterfly(sum, b.Add)
				alpha := b.Exp(b.Sub(mOld, mSafe))
				b.Set(lreg[i], b.Add(b.Mul(b.Get(lreg[i]), alpha), sum))
				b.Set(mreg[i], mNew)
				b.Set(areg[i], alpha)
			}
		} else {
			b.For(li, b.Mul(BR, BK), WG, func(e codegen.Value) {
				r, j := b.Div(e, BK), b.Rem(e, BK)
				acc := b.Var("dot", zero)
				b.For(u(0), u(d4), u(1), func(f codegen.Value) {
					x, y := b.Load(qs, b.Add(b.Mul(r, u(d4)), f)), b.Load(ks, b.Add(b.Mul(j, u(d4p)), f))
					b.Set(acc, dot(x, y, b.Get(acc)))
				})
				b.Store(ss, e, masked(r, j, b.Get(acc)))
			})
		}
		b.Barrier()
		if !sgSoft {
			// Online softmax, one invocation per row.
			b.For(li, BR, WG, func(r codegen.Value) {
				mOld := b.Load(ms, r)
				mx := b.Var("mx", mOld)
				b.For(u(0), BK, u(1), func(j codegen.Value) {
					b.Set(mx, b.Max(b.Get(mx), b.Load(ss, b.Add(b.Mul(r, BK), j))))
				})
				mNew := b.Get(mx)
				// A row with no key yet keeps m = -inf; subtracting 0 instead keeps exp finite.
				mSafe := b.Select(b.Eq(mNew, negInf), zero, mNew)
				sum := b.Var("sum", zero)
				b.For(u(0), BK, u(1), func(j codegen.Value) {
					i := b.Add(b.Mul(r, BK), j)
					pj := b.Exp(b.Sub(b.Load(ss, i), mSafe))
					b.Store(ss, i, pj)
					b.Set(sum, b.Add(b.Get(sum), pj))
				})
				alpha := b.Exp(b.Sub(mOld, mSafe))
				b.Store(as, r, alpha)
				b.Store(ls, r, b.Add(b.Mul(b.Load(ls, r), alpha), b.Get(sum)))
				b.Store(ms, r, mNew)
			})
			b.Barrier()
		}
		if reg {
			rows := make([]codegen.Value, len(oreg))
			for i, o := range oreg {
				rows[i] = b.Add(ty, u(i*ty4))
				var alpha codegen.Value
				if sgSoft {
					alpha = b.Get(areg[i])
				} else {
					alpha = b.Load(as, rows[i])
				}
				b.Set(o, b.Mul(b.Get(o), b.Splat(alpha, 4)))
			}
			b.For(u(0), BK, u(1), func(j codegen.Value) {
				v := b.Load(vs, b.Add(b.Mul(j, u(tx4)), fx))
				for i, o := range oreg {
					pj := b.Load(ss, b.Add(b.Mul(rows[i], BK), j))
					b.Set(o, b.Fma(b.Splat(pj, 4), v, b.Get(o)))
				}
			})
		} else {
			b.For(li, b.Mul(BR, u(a.dv)), WG, func(e codegen.Value) {
				r, f := b.Div(e, u(a.dv)), b.Rem(e, u(a.dv))
				acc := b.Var("pv", b.Mul(b.Load(oacc, e), b.Load(as, r)))
				b.For(u(0), BK, u(1), func(j codegen.Value) {
					b.Set(acc, b.Fma(b.Load(ss, b.Add(b.Mul(r, BK), j)), b.Load(vs, b.Add(b.Mul(j, u(a.dv)), f)), b.Get(acc)))
				})
				b.Store(oacc, e, b.Get(acc))
			})
		}
		b.Barrier()
		if prefetch {
			putKV(nk, nv)
			b.Barrier()
		}
	})
	b.Barrier() // for an empty key range: the initial o, m, l are visible
	// store writes output element (row r, feature f) of unnormalised value o; m and l are
	// the row's statistics (nil: read from shared memory).
	store := func(r, f, o, m, l codegen.Value) {
		t := b.Add(t0, r)
		b.If(b.Lt(t, u(T)), func() {
			if !m.Valid() {
				m, l = b.Load(ms, r), b.Load(ls, r)
			}
			if cfg.split {
				base := b.Mul(b.Add(b.Mul(b.Add(b.Mul(zsplit, u(a.hkv)), kh), u(T)), t), u(a.dv+2))
				b.Store(scratch, b.Add(base, b.Add(f, u(2))), o)
				b.If(b.Eq(f, u(0)), func() {
					b.Store(scratch, base, m)
					b.Store(scratch, b.Add(base, u(1)), l)
				})
				return
			}
			i, h := b.Div(t, u(a.group)), b.Add(b.Mul(kh, u(a.group)), b.Rem(t, u(a.group)))
			epi.store(b, a.at(b, i, h, f, a.sq, a.hq, a.dv), b.Div(o, l))
		})
	}
	if reg {
		for i, o := range oreg {
			ov := b.Get(o)
			var m, l codegen.Value
			if sgSoft {
				m, l = b.Get(mreg[i]), b.Get(lreg[i])
			}
			for c := 0; c < 4; c++ {
				store(b.Add(ty, u(i*ty4)), b.Add(b.Mul(fx, u(4)), u(c)), b.Extract(ov, c), m, l)
			}
		}
	} else {
		b.For(li, b.Mul(BR, u(a.dv)), WG, func(e codegen.Value) {
			store(b.Div(e, u(a.dv)), b.Rem(e, u(a.dv)), b.Load(oacc, e), codegen.Value{}, codegen.Value{})
		})
	}
	k, err := b.Finish()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := caps.Supports(k); err != nil {
		return nil, nil, nil, err
	}
	sp, err := specFor(k, vals)
	if err != nil {
		return nil, nil, nil, err
	}
	return k, sp, binds, nil
}

// buildAttnCombine builds the split template's second step: for each output element, the
// (m, l, o) of every key range its row sees are merged. Bindings: [kv_len], scratch, the
// epilogue's inputs, the result.
func buildAttnCombine(p *Problem, a *attn, splits, wg int, caps Caps) (*codegen.Kernel, []Operand, int, error) {
	b := codegen.NewBuilder("attention_combine")
	var binds []Operand
	var lenBuf *codegen.Buffer
	if a.kvLen {
		lenBuf = b.Buffer("kv_len", StorageType(p.Args[3].DType), codegen.ReadOnly)
		binds = append(binds, Operand{Arg, 3})
	}
	scratch := b.Buffer("partial", codegen.F32, codegen.ReadOnly)
	binds = append(binds, Operand{Scratch, 0})
	epi, eb := declareEpilogue(b, p, a.opType)
	binds = append(binds, eb...)
	b.WorkgroupSize(b.U32(uint32(wg)), b.U32(1), b.U32(1))
	u := func(x int) codegen.Value { return b.U32(uint32(x)) }
	T := a.rows()
	n := a.hkv * T * a.dv
	e := b.Add(b.Mul(LinearGroup(b), u(wg)), b.X(b.LocalID()))
	b.If(b.Ge(e, u(n)), b.Return)
	f := b.Rem(e, u(a.dv))
	t := b.Rem(b.Div(e, u(a.dv)), u(T))
	kh := b.Div(e, u(a.dv*T))
	i, h := b.Div(t, u(a.group)), b.Add(b.Mul(kh, u(a.group)), b.Rem(t, u(a.group)))
	kvlen := u(a.skv)
	if a.kvLen {
		kvlen = b.Convert(b.Min(b.Max(b.Convert(b.Load(lenBuf, u(0)), codegen.I32), b.I32(0)), b.I32(int32(a.skv))), codegen.U32)
	}
	i32 := func(x codegen.Value) codegen.Value { return b.Convert(x, codegen.I32) }
	p0 := b.Add(b.Sub(i32(kvlen), b.I32(int32(a.sq))), i32(i))
	lo, hi := b.I32(0), i32(kvlen)
	if a.causal || a.window > 0 {
		hi = b.Min(hi, b.Add(p0, b.I32(1)))
	}
	if a.window > 0 {
		lo = b.Max(lo, b.Add(b.Sub(p0, b.I32(int32(a.window))), b.I32(1)))
	}
	chunk := ceilDiv(a.skv, splits)
	negInf := b.F32(float32(math.Inf(-1)))
	// Unrolled over the ranges, every load issued first (from row 0 where a range is not
	// read): a loop waited out the memory latency once per range.
	ms, ls, os := make([]codegen.Value, splits), make([]codegen.Value, splits), make([]codegen.Value, splits)
	on := make([]codegen.Value, splits)
	for z := 0; z < splits; z++ {
		ks := b.I32(int32(z * chunk))
		ke := b.I32(int32(z*chunk + chunk))
		on[z] = b.Lt(b.Max(ks, lo), b.Min(ke, hi))
		base := b.Select(on[z], b.Mul(b.Add(b.Mul(b.Add(u(z*a.hkv), kh), u(T)), t), u(a.dv+2)), u(0))
		ms[z], ls[z], os[z] = b.Load(scratch, base), b.Load(scratch, b.Add(base, u(1))), b.Load(scratch, b.Add(base, b.Add(f, u(2))))
	}
	M := negInf
	for z := range ms {
		M = b.Max(M, b.Select(on[z], ms[z], negInf))
	}
	L, O := b.F32(0), b.F32(0)
	for z := range ms {
		// Selected, not multiplied by 0: an unread range's scratch may hold anything, NaN too.
		c := b.Exp(b.Sub(ms[z], M))
		L = b.Add(L, b.Select(on[z], b.Mul(ls[z], c), b.F32(0)))
		O = b.Add(O, b.Select(on[z], b.Mul(os[z], c), b.F32(0)))
	}
	epi.store(b, a.at(b, i, h, f, a.sq, a.hq, a.dv), b.Div(O, L))
	k, err := b.Finish()
	if err != nil {
		return nil, nil, 0, err
	}
	if err := caps.Supports(k); err != nil {
		return nil, nil, 0, err
	}
	return k, binds, ceilDiv(n, wg), nil
}

// attnFits: the tiles fit in shared memory and the workgroup in the device.
func attnFits(rows func(a *attn, c Config) int) Predicate {
	return func(p *Problem, c Config, caps Caps) error {
		a, err := readAttn(p)
		if err != nil {
			return err
		}
		br, bk, wg := rows(a, c), c["block_k"], c["wg"]
		if wg > caps.MaxInvocations || wg > caps.MaxWorkgroupSize[0] {
			return fmt.Errorf("wg=%d exceeds the device's %d invocations", wg, caps.MaxInvocations)
		}
		if n := attnShared(a, attnPass{br: br, bk: bk, wg: wg}); n > caps.MaxSharedBytes {
			return fmt.Errorf("block %dx%d needs %d bytes of shared memory, the device has %d", br, bk, n, caps.MaxSharedBytes)
		}
		return nil
	}
}

// AttentionFlash is flash attention for prefill: one workgroup per (block of block_r rows, key/
// value head), the rows being (query, grouped query head) pairs; keys in tiles of block_k with an
// online softmax; only the key tiles the block's rows may see (kv_len, causal, window) are read.
// Specialization constants: block_r, block_k, wg. Grid: ceil(sq·group/block_r) × hkv.
var AttentionFlash = &Template{
	Name: "attention_flash",
	Accepts: func(p *Problem, caps Caps) error {
		_, err := acceptAttn(p, caps)
		return err
	},
	Space: NewSpace(Ints("block_r", 32, 16, 64, 8), Ints("block_k", 32, 16, 64, 8), Ints("wg", 128, 64, 256)).
		Where(attnFits(func(a *attn, c Config) int { return c["block_r"] })),
	Build: func(p *Problem, c Config, caps Caps) (*Launch, error) {
		a, err := acceptAttn(p, caps)
		if err != nil {
			return nil, err
		}
		cfg := attnPass{br: c["block_r"], bk: c["block_k"], wg: c["wg"], splits: 1}
		k, sp, binds, err := buildAttnPass(p, a, cfg, caps)
		if err != nil {
			return nil, err
		}
		grid := [3]uint32{uint32(ceilDiv(a.rows(), cfg.br)), uint32(a.hkv), 1}
		l := &Launch{Steps: []Step{{Kernel: k, Spec: sp, Grid: grid, Bindings: binds}}}
		a.cost(p, l)
		return l, nil
	},
}

// AttentionSplit is split-key attention for decode: every row of a key/value head (sq·group of
// them, at most maxSplitRows) in one workgroup, the keys cut into `splits` ranges processed in
// parallel (step 1, partial (m, l, o) into scratch), then merged (step 2). Specialization
// constants of step 1: block_r (= the rows), block_k, wg. Grids: 1 × hkv × splits, then one
// invocation per output element.
var AttentionSplit = &Template{
	Name: "attention_split",
	Accepts: func(p *Problem, caps Caps) error {
		a, err := acceptAttn(p, caps)
		if err != nil {
			return err
		}
		if a.rows() > maxSplitRows {
			return fmt.Errorf("%d rows per key/value head (sq·group); split-key attention takes at most %d", a.rows(), maxSplitRows)
		}
		return nil
	},
	Space: NewSpace(Ints("splits", 16, 8, 32, 4, 64, 2), Ints("block_k", 32, 64, 16, 8), Ints("wg", 64, 128, 256)).
		Where(attnFits(func(a *attn, c Config) int { return splitRows(a, c["wg"]) })).
		Where(func(p *Problem, c Config, caps Caps) error {
			a, err := readAttn(p)
			if err != nil {
				return err
			}
			if c["splits"] > a.skv {
				return fmt.Errorf("splits=%d exceeds the %d keys", c["splits"], a.skv)
			}
			if c["splits"] > caps.MaxGroups[2] {
				return fmt.Errorf("splits=%d exceeds the device's %d workgroups in z", c["splits"], caps.MaxGroups[2])
			}
			return nil
		}),
	Build: func(p *Problem, c Config, caps Caps) (*Launch, error) {
		a, err := acceptAttn(p, caps)
		if err != nil {
			return nil, err
		}
		cfg := attnPass{br: splitRows(a, c["wg"]), bk: c["block_k"], wg: c["wg"], splits: c["splits"], split: true}
		k1, sp, b1, err := buildAttnPass(p, a, cfg, caps)
		if err != nil {
			return nil, err
		}
		k2, b2, groups, err := buildAttnCombine(p, a, cfg.splits, 64, caps)
		if err != nil {
			return nil, err
		}
		l := &Launch{
			Steps: []Step{
				{Kernel: k1, Spec: sp, Grid: [3]uint32{1, uint32(a.hkv), uint32(cfg.splits)}, Bindings: b1},
				{Kernel: k2, Grid: Grid1D(groups, caps), Bindings: b2},
			},
			Scratch: []int{4 * cfg.splits * a.hkv * a.rows() * (a.dv + 2)},
		}
		a.cost(p, l)
		return l, nil
	},
}

// maxSplitRows bounds the rows one split-key workgroup takes; more rows are better served by the
// flash kernel's parallel row blocks.
const maxSplitRows = 32

func init() {
	Register(AttentionFlash)
	Register(AttentionSplit)
}

// cost: two products of sq × skv × d per query head (scores and values), all keys counted.
func (a *attn) cost(p *Problem, l *Launch) {
	l.Flops = 2*float64(a.hq)*float64(a.sq)*float64(a.skv)*float64(a.d+a.dv) +
		float64(a.hq*a.sq*a.dv*epilogueFlops(p))
	l.Bytes = problemBytes(p)
}
