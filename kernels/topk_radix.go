package kernels

import (
	"math/bits"

	"github.com/vkc-project/vkc/codegen"
)

// The radix path of argtopk (coop=2): a workgroup per row, or per part of a row (split), finds
// its k best candidates by a radix select instead of k rounds of a workgroup argmax.
//
// A candidate's place in the order is a composite key: the order-preserving 32-bit key of its
// value (the rounds' key, NaN above every number), then a low field that is larger for a
// smaller index (ties in index order). Composite keys are distinct, so "the k largest" is one
// exact set, ties and NaNs included. The select fixes that set digit by digit from the top, 8
// bits a pass: a histogram in shared memory of the current digit of the candidates that match
// the digits fixed so far, a suffix sum over its 256 bins, and the bin where the running count
// crosses the number still wanted becomes the next fixed digit (the candidates in the bins above
// it are taken whole). When that bin holds exactly the number still wanted the set is known and
// the remaining passes are skipped: with distinct values that is after the four passes of the
// value key, and only ties reach the passes over the index field. Then each invocation appends
// its selected candidates to a shared list (an atomic counter; at most k) and each entry's rank
// is the number of entries ahead of it in the order (k comparisons each), which is where it is
// stored. A pass costs 11 barriers (4 with subgroup shuffles, subgroup=1) whatever k is; the
// rounds cost k workgroup reductions.

const (
	radixBins = 256 // 8 bits a pass
	// radixCopies is the number of interleaved copies of the histogram (invocation i counts
	// into copy i mod radixCopies): the top digit of a row of logits falls in very few bins
	// (sign and exponent), so one copy would serialise the shared-memory atomics of a
	// subgroup on one address.
	radixCopies = 8
)

// radixSharedBytes is the shared memory of a radix select of k candidates.
func radixSharedBytes(k int) int {
	return 4 * (radixBins*radixCopies + 2*radixBins + 4 + 2*k)
}

// radixCands describes the candidates [0, cnt) of one workgroup's selection; cnt is uniform.
type radixCands struct {
	cnt   codegen.Value
	ibits int                                 // bits of low
	key   func(c codegen.Value) codegen.Value // order key (u32)
	low   func(c codegen.Value) codegen.Value // < 1<<ibits, larger for a smaller index
	index func(c codegen.Value) codegen.Value // the index emitted (u32)
	valid func(c codegen.Value) codegen.Value // nil: every candidate is one
}

// radixTopK selects the m best of the candidates and calls emit(rank, key, index) for each, ranks
// 0..m-1, from one invocation each. m (uniform) must not exceed k nor the number of valid
// candidates; all (uniform) says that m is the number of valid candidates, so that no select is
// needed. lid is the local invocation index, wg the workgroup size (a constant or specialization
// constant); sub takes the suffix sums by subgroup shuffles, which needs wg = 256 (radixBins)
// and subgroups of consecutive invocations of a power-of-two size up to 256, as
// WorkgroupReducer assumes. Every invocation of the workgroup calls it (barriers).
func radixTopK(b *codegen.Builder, lid, wg codegen.Value, sub bool, k int, m, all codegen.Value, cs radixCands, emit func(rank, key, idx codegen.Value)) {
	u := b.U32
	hist := b.Shared("topk_hist", codegen.U32, u(radixBins*radixCopies))
	scan := b.Shared("topk_scan", codegen.U32, u(2*radixBins))
	// state: 0 the chosen digit, 1 the number still wanted in its bin, 2 its bin's count,
	// 3 the length of the candidate list
	st := b.Shared("topk_state", codegen.U32, u(4))
	lk := b.Shared("topk_list_key", codegen.U32, u(uint32(k)))
	li := b.Shared("topk_list_idx", codegen.U32, u(uint32(k)))
	valid := func(c codegen.Value, body func()) {
		if cs.valid == nil {
			body()
			return
		}
		b.If(cs.valid(c), body)
	}
	each := func(n codegen.Value, body func(i codegen.Value)) { b.For(lid, n, wg, body) }

	b.If(b.Eq(lid, u(0)), func() { b.Store(st, u(3), u(0)) })
	each(u(radixBins*radixCopies), func(i codegen.Value) { b.Store(hist, i, u(0)) })
	b.Barrier() // before the first pass's counts and the list's first append
	km, pk := b.Var("sel_kmask", u(0)), b.Var("sel_kprefix", u(0))
	lm, pl := b.Var("sel_lmask", u(0)), b.Var("sel_lprefix", u(0))
	rem := b.Var("sel_rem", m)
	done := b.Var("sel_done", b.Select(all, u(1), u(0)))

	// The passes, scan steps and histogram copies are loops in the kernel, not unrolled here:
	// unrolled, lavapipe's compiler took seconds a kernel.
	lowBits := (cs.ibits + 7) / 8 * 8
	slot := b.And(lid, u(radixCopies-1))
	b.For(u(0), u(uint32(4+lowBits/8)), u(1), func(d codegen.Value) {
		b.If(b.Eq(b.Get(done), u(0)), func() {
			// Digit d: bits 24-8d of the key (d < 4), then lowBits-8(d-3) of the low field.
			onKey := b.Lt(d, u(4))
			shift := b.Select(onKey, b.Sub(u(24), b.Mul(b.Min(d, u(3)), u(8))), b.Sub(u(uint32(lowBits+24)), b.Mul(b.Max(d, u(4)), u(8))))
			each(cs.cnt, func(c codegen.Value) {
				valid(c, func() {
					kv, lv := cs.key(c), cs.low(c)
					match := b.And(b.Eq(b.And(kv, b.Get(km)), b.Get(pk)), b.Eq(b.And(lv, b.Get(lm)), b.Get(pl)))
					b.If(match, func() {
						dig := b.And(b.Shr(b.Select(onKey, kv, lv), shift), u(radixBins-1))
						b.AtomicAdd(hist, b.Add(b.Mul(dig, u(radixCopies)), slot), u(1))
					})
				})
			})
			b.Barrier()
			// binTotal sums bin i's copies, clearing them for the next pass (which counts after
			// this pass's later barriers).
			binTotal := func(i codegen.Value) codegen.Value {
				sum := b.Var("sel_bin", u(0))
				b.For(u(0), u(radixCopies), u(1), func(r codegen.Value) {
					at := b.Add(b.Mul(i, u(radixCopies)), r)
					b.Set(sum, b.Add(b.Get(sum), b.Load(hist, at)))
					b.Store(hist, at, u(0))
				})
				return b.Get(sum)
			}
			// Suffix sums into the first half of scan: bin i becomes the count of the matching
			// candidates whose digit is i or more.
			if sub {
				// Invocation i holds bin i (wg = 256): suffix sums within each subgroup by
				// shuffles, then each adds the totals of the subgroups after its own (the second
				// half of scan): two barriers.
				v := b.Var("sel_suffix", binTotal(lid))
				sg, lane := b.SubgroupSize(), b.SubgroupInvocation()
				off := b.Var("sel_off", u(1))
				b.While(func() codegen.Value { return b.Lt(b.Get(off), sg) }, func() {
					j := b.Add(lane, b.Get(off))
					up := b.SubgroupShuffle(b.Get(v), b.Min(j, b.Sub(sg, u(1))))
					b.Set(v, b.Add(b.Get(v), b.Select(b.Lt(j, sg), up, u(0))))
					b.Set(off, b.Mul(b.Get(off), u(2)))
				})
				g := b.Div(lid, sg)
				b.If(b.Eq(lane, u(0)), func() { b.Store(scan, b.Add(u(radixBins), g), b.Get(v)) })
				b.Barrier()
				after := b.Var("sel_after", u(0))
				b.For(b.Add(g, u(1)), b.Div(u(radixBins), sg), u(1), func(h codegen.Value) {
					b.Set(after, b.Add(b.Get(after), b.Load(scan, b.Add(u(radixBins), h))))
				})
				b.Store(scan, lid, b.Add(b.Get(v), b.Get(after)))
				b.Barrier()
			} else {
				each(u(radixBins), func(i codegen.Value) { b.Store(scan, i, binTotal(i)) })
				b.Barrier()
				// Hillis–Steele, the two halves of scan in turn, 8 steps, ending in the first.
				step := b.Var("sel_step", u(1))
				from := b.Var("sel_from", u(0))
				b.While(func() codegen.Value { return b.Lt(b.Get(step), u(radixBins)) }, func() {
					f, t := b.Get(from), b.Sub(u(radixBins), b.Get(from))
					each(u(radixBins), func(i codegen.Value) {
						j := b.Add(i, b.Get(step))
						up := b.Load(scan, b.Add(f, b.Min(j, u(radixBins-1))))
						v := b.Add(b.Load(scan, b.Add(f, i)), b.Select(b.Lt(j, u(radixBins)), up, u(0)))
						b.Store(scan, b.Add(t, i), v)
					})
					b.Barrier()
					b.Set(from, t)
					b.Set(step, b.Mul(b.Get(step), u(2)))
				})
			}
			r := b.Get(rem)
			each(u(radixBins), func(i codegen.Value) {
				at := b.Load(scan, i)
				j := b.Add(i, u(1))
				above := b.Select(b.Lt(j, u(radixBins)), b.Load(scan, b.Min(j, u(radixBins-1))), u(0))
				b.If(b.And(b.Ge(at, r), b.Lt(above, r)), func() {
					b.Store(st, u(0), i)
					b.Store(st, u(1), b.Sub(r, above))
					b.Store(st, u(2), b.Sub(at, above))
				})
			})
			b.Barrier()
			dig, want, inBin := b.Load(st, u(0)), b.Load(st, u(1)), b.Load(st, u(2))
			bits, mask := b.Shl(dig, shift), b.Shl(u(radixBins-1), shift)
			b.Set(pk, b.Select(onKey, b.Or(b.Get(pk), bits), b.Get(pk)))
			b.Set(km, b.Select(onKey, b.Or(b.Get(km), mask), b.Get(km)))
			b.Set(pl, b.Select(onKey, b.Get(pl), b.Or(b.Get(pl), bits)))
			b.Set(lm, b.Select(onKey, b.Get(lm), b.Or(b.Get(lm), mask)))
			b.Set(rem, want)
			b.Set(done, b.Select(b.Eq(inBin, want), u(1), u(0)))
			// st is written again only after the next pass's first barriers, which every
			// invocation reaches after these loads.
		})
	})

	// The selected: composite key above the fixed prefix, or matching it (m in all).
	each(cs.cnt, func(c codegen.Value) {
		valid(c, func() {
			kv, lv := cs.key(c), cs.low(c)
			mk, ml := b.And(kv, b.Get(km)), b.And(lv, b.Get(lm))
			sel := b.Or(b.Gt(mk, b.Get(pk)), b.And(b.Eq(mk, b.Get(pk)), b.Ge(ml, b.Get(pl))))
			b.If(sel, func() {
				// exactly m are selected; the bound keeps a mistake inside the list
				at := b.AtomicAdd(st, u(3), u(1))
				b.If(b.Lt(at, u(uint32(k))), func() {
					b.Store(lk, at, kv)
					b.Store(li, at, cs.index(c))
				})
			})
		})
	})
	b.Barrier()
	each(m, func(t codegen.Value) {
		kt, it := b.Load(lk, t), b.Load(li, t)
		rank := b.Var("sel_rank", u(0))
		b.For(u(0), m, u(1), func(j codegen.Value) {
			ahead := better(b, b.Load(lk, j), b.Load(li, j), kt, it)
			b.Set(rank, b.Add(b.Get(rank), b.Select(ahead, u(1), u(0))))
		})
		emit(b.Get(rank), kt, it)
	})
}

// buildTopKRadix is buildTopK for coop=2: a workgroup of wg invocations per row (split=1) or per
// part of a row, whose candidates a second step selects from as the rounds' merge does, by radix
// select again.
func buildTopKRadix(p *Problem, c Config, caps Caps) (*Launch, error) {
	rows, n, k := topkDims(p)
	xd := p.Args[0].DType
	split := max(c["split"], 1)
	chunk := (n + split - 1) / split
	walk := Config{"wg": c["wg"], "coop": 1, "rows": 1} // one workgroup per (virtual) row
	none := uint32(0xffffffff)

	b := newBuilder("argtopk_radix", caps)
	u := b.U32
	rc := reduceCodec{b: b, ct: ComputeType(xd)}
	x := b.Buffer("x", StorageType(xd), codegen.ReadOnly)
	var y *codegen.Buffer
	if split == 1 {
		y = b.Buffer("y", codegen.I32, codegen.WriteOnly)
	} else {
		y = b.Buffer("partial", codegen.U32, codegen.WriteOnly) // (key, index) pairs
	}
	wg := b.Spec("wg", codegen.U32, int64(c["wg"]))
	b.WorkgroupSize(wg, u(1), u(1))
	lid := b.LocalIndex()
	v := LinearGroup(b)
	b.If(b.Lt(v, u(uint32(rows*split))), func() {
		row, s := b.Div(v, u(uint32(split))), b.Rem(v, u(uint32(split)))
		lo := b.Mul(s, u(uint32(chunk)))
		// the part's elements: chunk, fewer in the row's last part, none past its end
		cnt := b.Min(b.Sub(u(uint32(n)), b.Min(lo, u(uint32(n)))), u(uint32(chunk)))
		m := b.Min(cnt, u(uint32(k)))
		cs := radixCands{
			cnt:   cnt,
			ibits: bits.Len(uint(chunk - 1)),
			key: func(j codegen.Value) codegen.Value {
				return rc.key(LoadAs(b, x, b.Add(b.Mul(row, u(uint32(n))), b.Add(lo, j)), xd), none)
			},
			low:   func(j codegen.Value) codegen.Value { return b.Sub(u(uint32(chunk-1)), j) },
			index: func(j codegen.Value) codegen.Value { return b.Add(lo, j) },
		}
		radixTopK(b, lid, wg, c["subgroup"] == 1, k, m, b.Le(cnt, u(uint32(k))), cs, func(rank, key, idx codegen.Value) {
			if split == 1 {
				b.Store(y, b.Add(b.Mul(v, u(uint32(k))), rank), b.Bitcast(idx, codegen.I32))
				return
			}
			at := b.Mul(b.Add(b.Mul(v, u(uint32(k))), rank), u(2))
			b.Store(y, at, key)
			b.Store(y, b.Add(at, u(1)), idx)
		})
		if split > 1 {
			// A short part's missing candidates: no index, never selected by the merge.
			b.For(b.Add(m, lid), u(uint32(k)), wg, func(t codegen.Value) {
				at := b.Mul(b.Add(b.Mul(v, u(uint32(k))), t), u(2))
				b.Store(y, at, u(0))
				b.Store(y, b.Add(at, u(1)), u(none))
			})
		}
	})
	kern, spec, err := finish(b, caps, c, "wg")
	if err != nil {
		return nil, err
	}
	l := &Launch{Flops: float64(rows * n * 4), Bytes: tensorBytes(p.Args, p.Outs)}
	if l.Steps, l.Scratch = topkFirstStep(p, kern, spec, walk, caps, rows, split, k); split == 1 {
		return l, nil
	}

	// Step 2: each row selects its k among its parts' split·k candidates (at least k of them
	// valid: k ≤ n, and each part gave min(k, its length)).
	b = newBuilder("argtopk_radix_merge", caps)
	u = b.U32
	part := b.Buffer("partial", codegen.U32, codegen.ReadOnly)
	y = b.Buffer("y", codegen.I32, codegen.WriteOnly)
	wg = b.Spec("wg", codegen.U32, int64(c["wg"]))
	b.WorkgroupSize(wg, u(1), u(1))
	lid = b.LocalIndex()
	row := LinearGroup(b)
	b.If(b.Lt(row, u(uint32(rows))), func() {
		at := func(j codegen.Value) codegen.Value { return b.Mul(b.Add(b.Mul(row, u(uint32(split*k))), j), u(2)) }
		index := func(j codegen.Value) codegen.Value { return b.Load(part, b.Add(at(j), u(1))) }
		cs := radixCands{
			cnt:   u(uint32(split * k)),
			ibits: bits.Len(uint(n - 1)),
			key:   func(j codegen.Value) codegen.Value { return b.Load(part, at(j)) },
			low:   func(j codegen.Value) codegen.Value { return b.Sub(u(uint32(n-1)), index(j)) },
			index: index,
			valid: func(j codegen.Value) codegen.Value { return b.Ne(index(j), u(none)) },
		}
		radixTopK(b, lid, wg, c["subgroup"] == 1, k, u(uint32(k)), b.Bool(false), cs, func(rank, _, idx codegen.Value) {
			b.Store(y, b.Add(b.Mul(row, u(uint32(k))), rank), b.Bitcast(idx, codegen.I32))
		})
	})
	kern2, spec2, err := finish(b, caps, c, "wg")
	if err != nil {
		return nil, err
	}
	l.Steps = append(l.Steps, Step{Kernel: kern2, Spec: spec2, Grid: RowGrid(rows, walk, caps), Bindings: []Operand{{Scratch, 0}, {Out, 0}},
		Scale: rowScale(p, p.Rows.Out(0), rows, walk)})
	return l, nil
}
