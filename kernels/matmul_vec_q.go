package kernels

import (
	"fmt"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir/quant"
)

// MatmulVecQ is MatmulVec (decode: 1 to 8 rows) for a block-quantized weight: linear's and
// rmsnorm_linear's W [N, K], or matmul's b with tb, in any format of QuantizedDTypes. Each
// workgroup computes `cols` output columns (rows of W); a column's K is read as units of `span`
// words of one block, unit after unit over kp = wg/cols invocations, so that neighbouring
// invocations read neighbouring words of a block and neighbouring activations. The weights are
// unpacked in registers, four quants of a word at a time, and never written anywhere: each
// word's four products with each row of x are summed in f32, then scaled by the word's block
// or sub-block scale (and its min subtracted, times Σx, for Q4_1/Q5_1/Q4_K/Q5_K), which is the
// exact dequantization's product rearranged (Σ x·(d·q) = d·Σ x·q). The partial sums of a column
// are combined as in MatmulVec (shuffles within a subgroup, or subgroup adds and shared
// memory), and stored through the epilogue (bias,
// residual, SwiGLU's product, …) as in MatmulVec, whose frame (vecFrame) this template shares;
// rmsnorm_linear scales x by gamma as it loads it and sums x² beside the products.
//
// How a word is unpacked is the format's data (quant.Layout), turned into a plan when the kernel
// is built (quantWords): the low bits of the four quants are the word's four bytes at one shift;
// the high bits (Q5_*, Q6_K) are another word at a matching offset when the layout puts them so
// (Q3_K, Q5_K, Q6_K), else a window of at most four bytes read once per unit with a run-time bit
// position (Q5_0, Q5_1's qh); a codebook (IQ4_NL, IQ4_XS, MXFP4) maps the four quants by
// constant selects; the sub-block of a word is known when the kernel is built or computed from
// the unit's position (Q6_K's sub-blocks of 16), and its scale read as the layout packs it.
//
// span is its load width: a unit reads each of its runs of span consecutive words as one run
// (blockReader.run: span loads, or span+1 and funnel shifts where the block is not word-aligned,
// Q8_0's 34 bytes, Q6_K's 210), and decodes the unit's sub-block scales once for span words.
//
// unroll (1, 2) is how many of an invocation's units one loop iteration reads before the first
// product waits on a load (vecFrame.forK): where a product is one wave of workgroups (the 8B
// model's 14336×4096 Q4_K: 1792 workgroups of 128 on 132 SMs, each invocation reading about 9
// units in turn) the loads of one unit at a time leave the memory idle between them. Only a
// GPU's suggestions unroll (withUnroll): on lavapipe a point unrolled by 2 costs LLVM about
// twice the compile time (Q6_K 64×768: 18 s a point; an earlier Mesa did not finish one in ten
// minutes), and a CPU has no memory latency to hide this way.
//
// rows is how many consecutive columns (rows of W) one column group computes: each x load (and
// rmsnorm's gamma, Σx², the Σx of the formats with a min) serves rows columns, as llama.cpp's
// NUM_ROWS. A quant becomes an f32 without an int-to-float conversion: its bits are shifted into
// the mantissa of 1.0 (quantMant), and each group's sum is corrected by its Σx once; a codebook's
// entries are converted.
//
// Why (issue 27): on the H200 (docs/bench/h200-2026-12-05) the products read 21–38% of the copy
// rate at span 1 and one column a group where f16 read 72–91%: a unit of 16 bytes of Q4_K paid
// its eight sub-block scales, eight f32 vec4 loads of x per column (x's bytes were 8× the
// weight's, through L1) and an int-to-float conversion per quant, about 24 instructions a byte
// of weight, where the bandwidth leaves about 11 (docs/decode.md).
//
// split spreads a block's runs over the invocations (laneSplit): at split = 0 an invocation's
// unit holds span words of every run of low bits of its block (Q4_K: four runs of 32 bytes,
// so a warp's load touches a few words of each of 4 to 16 blocks); at split = 1 the runs whose
// offsets are whole words apart are taken out of the unit and given to consecutive groups of
// invocations, each reading span words of one run, so that a warp sweeps one or two blocks a
// load; each unit then finds its sub-block at run time. On the H100 it read Q6_K (blocks not
// word-aligned) faster at every 8B shape and Q4_K faster where a product has few invocations
// (vecQSplitInvocations).
//
// stage (rmsnorm_linear only) is where x·gamma comes from. At stage = 0 each column group loads
// x and gamma beside its words and sums Σx² with its products: per four elements a gamma load,
// a multiply and a dot of x with itself, once for every column group of the workgroup. At
// stage = 1 the workgroup first writes h = x·gamma of its rows into shared memory and sums each
// row's Σx² over its invocations (vecFrame.stageNorm), and the loop reads h alone, as a linear
// reads x. Where a format costs few instructions a byte (Q8_0) the rmsnorm's share was large: on
// the H100 the 8B Q8_0 decode plan's rmsnorm_linear over 14336×4096 took 46.6 µs where the same
// product as a linear took 31.1 (docs/bench/h100-2026-12-06, session 13). It needs rows × K f32
// of shared memory (vecStageBytes).
//
// Specialization constants: wg, cols. Built per span, rows, split, stage and unroll. Grid:
// ceil(N/(cols·rows)) × batches.
var MatmulVecQ = &Template{
	Name:      "matmul_vec_q",
	Quantized: QuantizedDTypes(),
	Accepts: func(p *Problem, caps Caps) error {
		_, err := acceptVecQFloat(p, caps)
		return err
	},
	Space: NewSpace(
		Ints("wg", 128, 64, 256, 32),
		Ints("cols", 4, 1, 2, 8, 16),
		Ints("span", 4, 2, 1),
		Ints("rows", 2, 1, 4),
		Ints("split", 0, 1),
		Ints("stage", 0, 1),
		Ints("unroll", 1, 2),
	).Where(vecQFits).Suggest(func(p *Problem, caps Caps) []Config {
		return withUnroll(vecQStatic(p, caps), vecQSuggest(p, caps), caps)
	}),
	Static: func(p *Problem, caps Caps) []Config { return unrollOnce(vecQStatic(p, caps)) },
	Build:  buildMatmulVecQ,
}

func init() {
	// Cache parts (column parts writing a state) stop at the run's rows.
	MatmulVecQ.ReadsLength = true
	Register(MatmulVecQ)
}

// acceptVecQ: a matmul-family problem of at most maxVecRows rows whose B is block-quantized
// along K.
func acceptVecQ(p *Problem, caps Caps) (*gemm, error) {
	g, err := acceptGemmQuant(p, caps)
	if err != nil {
		return nil, err
	}
	if !g.bT.Quantized() {
		return nil, fmt.Errorf("B is %s; this template reads block-quantized weights", g.bT)
	}
	if g.m > maxVecRows {
		return nil, fmt.Errorf("%d rows; the matrix-vector kernel takes at most %d", g.m, maxVecRows)
	}
	if g.batches() > caps.MaxGroups[1] {
		return nil, fmt.Errorf("%d batches exceed the device's %d workgroups in y", g.batches(), caps.MaxGroups[1])
	}
	return g, nil
}

// acceptVecQFloat is MatmulVecQ's Accepts: acceptVecQ, less the problems that MatmulVecQDot
// takes when the compile asks for 8-bit activations wherever they apply (Int8Only).
func acceptVecQFloat(p *Problem, caps Caps) (*gemm, error) {
	g, err := acceptVecQ(p, caps)
	if err != nil {
		return nil, err
	}
	if err := int8Claims(p, g, caps); err != nil {
		return nil, err
	}
	return g, nil
}

// int8Claims is the refusal of a float template for a problem that MatmulVecQDot takes when the
// compile asks for 8-bit activations wherever they apply (Int8Only), nil otherwise.
func int8Claims(p *Problem, g *gemm, caps Caps) error {
	if caps.Int8 != Int8Only || !g.bT.Quantized() || g.m > maxVecRows || qdotApplies(p, g, caps) != nil {
		return nil
	}
	return fmt.Errorf("8-bit activations are asked for wherever they apply (Int8Only): %s takes it", MatmulVecQDot.Name)
}

// vecQFits: the workgroup fits the device and splits into cols columns of a power-of-two
// number of invocations; span divides a block's words.
func vecQFits(p *Problem, c Config, caps Caps) error {
	span := c["span"]
	g, err := vecGroups(p, c, caps)
	if err != nil {
		return err
	}
	f := g.bT.Format()
	if f == nil || f.Layout == nil {
		return fmt.Errorf("B is %s, not block-quantized", g.bT)
	}
	if words := f.Layout.Low.Radix[0] / 4; words%span != 0 {
		return fmt.Errorf("span=%d does not divide the %d words of a %s block's low bits", span, words, f.Name)
	}
	if c["split"] > 0 && splitOf(f).groups == 1 {
		return fmt.Errorf("split=1: a %s block's runs of low bits have no place to spread over invocations", f.Name)
	}
	if c["stage"] > 0 {
		return stageFits(g, c, caps)
	}
	return nil
}

// laneSplit is how a unit of MatmulVecQ at split = 1 divides a block over invocations: the
// digits of the low bits' radix (after the first, the run) that move the low bits by whole
// words and shift them by nothing are taken out of the unit, so that a block's runs are read by
// consecutive invocations (groups of units) rather than by each invocation in turn. A warp
// then reads a block's low bits in one contiguous sweep a load (Q4_K: 32 invocations read its
// 128 bytes of quants as consecutive words) where at split = 0 its invocations read a few words
// of each run of 4 to 16 blocks (at Q4_K's span 2: 8 blocks, 9 cache lines a load).
//
// Each digit k moves a unit's elements by elem[k], its low bits by lowB[k] bytes and its high
// bits by highB[k] bytes and highS[k] bits (Q6_K's qh holds four runs' high bits at shifts 0, 2,
// 4, 6 of the same bytes).
type laneSplit struct {
	groups int   // the product of the digits' radices (1: no split)
	digits []int // indices into Low.Radix
	radix  []int
	elem   []int
	lowB   []int
	highB  []int
	highS  []int
}

// splitOf is f's laneSplit: every digit of Low.Radix after the first whose ByteStride is a
// nonzero multiple of 4 and whose ShiftStride is 0 (the high bits, where the format has them,
// laid out by the same radix).
func splitOf(f *quant.Format) laneSplit {
	sp := laneSplit{groups: 1}
	l := f.Layout
	if l == nil {
		return sp
	}
	lo := l.Low
	if l.High != nil && fmt.Sprint(l.High.Radix) != fmt.Sprint(lo.Radix) {
		return sp
	}
	elem := lo.Radix[0]
	for k := 1; k < len(lo.Radix); k++ {
		if bs := lo.ByteStride[k]; bs != 0 && bs%4 == 0 && lo.ShiftStride[k] == 0 &&
			(l.High == nil || l.High.ByteStride[k]%4 == 0) {
			sp.groups *= lo.Radix[k]
			sp.digits = append(sp.digits, k)
			sp.radix = append(sp.radix, lo.Radix[k])
			sp.elem = append(sp.elem, elem)
			sp.lowB = append(sp.lowB, bs)
			hb, hs := 0, 0
			if l.High != nil {
				hb, hs = l.High.ByteStride[k], l.High.ShiftStride[k]
			}
			sp.highB = append(sp.highB, hb)
			sp.highS = append(sp.highS, hs)
		}
		elem *= lo.Radix[k]
	}
	return sp
}

// has reports whether digit k is one of the split's.
func (sp laneSplit) has(k int) bool {
	for _, d := range sp.digits {
		if d == k {
			return true
		}
	}
	return false
}

// elemOffsets is the element offset of each group, in the order of the groups' indices (the
// first digit least significant).
func (sp laneSplit) elemOffsets() []int {
	out := make([]int, sp.groups)
	for g := range out {
		x := g
		for i, r := range sp.radix {
			out[g] += (x % r) * sp.elem[i]
			x /= r
		}
	}
	return out
}

// unitOffsets are a unit's run-time offsets from its block's group 0 at p0 = 0 (quantWords
// plans the words there): 4·p0 bytes and elements, plus its group's (laneSplit) in elements
// (elem), bytes of low bits (low) and of high bits (high), and the high bits' shift (highShift,
// the zero Value where the split moves none).
type unitOffsets struct{ elem, low, high, highShift codegen.Value }

// unitOffsets is the offsets of the unit at r, its index within its block (0 ≤ r <
// upb·groups: p0 = r mod upb, the group r / upb), for units of span words, upb of them a block
// and group.
func (sp laneSplit) unitOffsets(b *codegen.Builder, r codegen.Value, upb, span int) unitOffsets {
	u := func(x int) codegen.Value { return b.U32(uint32(x)) }
	p4 := b.Mul(b.Rem(r, u(upb)), u(4*span))
	o := unitOffsets{elem: p4, low: p4, high: p4}
	if sp.groups == 1 {
		return o
	}
	x := b.Div(r, u(upb))
	for i, rad := range sp.radix {
		d := x
		if i < len(sp.radix)-1 {
			d = b.Rem(x, u(rad))
			x = b.Div(x, u(rad))
		}
		o.elem = b.Add(o.elem, b.Mul(d, u(sp.elem[i])))
		o.low = b.Add(o.low, b.Mul(d, u(sp.lowB[i])))
		if sp.highB[i] != 0 {
			o.high = b.Add(o.high, b.Mul(d, u(sp.highB[i])))
		}
		if sp.highS[i] != 0 {
			t := b.Mul(d, u(sp.highS[i]))
			if o.highShift.Valid() {
				t = b.Add(o.highShift, t)
			}
			o.highShift = t
		}
	}
	return o
}

// High-bit sources of a word's quants (see quantWords).
const (
	highNone   = iota
	highWord   // a word at a fixed offset, moving with the unit like the low bits
	highWindow // bits of a window of four bytes at a fixed offset, at a run-time position
	highBytes  // a byte per element at a run-time offset
)

// quantWord is one word of a unit: four consecutive elements (e = 0..3) whose low bits are the
// four bytes of one word. Offsets are for the unit at p0 = 0 (its first word at the block's
// first word of low bits); a unit at p0 adds 4·p0 to the offsets of the low bits, of highWord
// bits and to the elements.
type quantWord struct {
	j0       int // element index of e = 0
	lowOff   int // byte offset of the low bits' word
	lowShift int
	high     int // highNone, highWord, highWindow or highBytes
	highOff  int // highWord: the word's offset; highWindow: the window's
	highSh   int // highWord: the shift
	sub      int // the sub-block, or -1 when it depends on p0
}

// quantWords plans the words of a unit of span words of format f (see quantWord); at a split
// (laneSplit) only the runs of the unit's group 0, the others' offsets added at run time.
func quantWords(f *quant.Format, span int, sp laneSplit) []quantWord {
	l := f.Layout
	lo := l.Low
	r0 := lo.Radix[0]
	units := r0 / 4 / span // units per block
	rests := f.BlockElems / r0
	goffs := sp.elemOffsets()
	// The high bits' byte range over the whole block, for the window test.
	hmin, hmax := 1<<30, -1
	if l.High != nil {
		for j := 0; j < f.BlockElems; j++ {
			b, _ := l.High.Locate(j)
			hmin, hmax = min(hmin, b), max(hmax, b)
		}
	}
	var out []quantWord
rest:
	for rest := 0; rest < rests; rest++ {
		off, sh, x := lo.Offset, lo.Shift, rest
		for k := 1; k < len(lo.Radix); k++ {
			d := x % lo.Radix[k]
			x /= lo.Radix[k]
			if d != 0 && sp.has(k) {
				continue rest
			}
			off += d * lo.ByteStride[k]
			sh += d * lo.ShiftStride[k]
		}
		for s := 0; s < span; s++ {
			w := quantWord{j0: 4*s + r0*rest, lowOff: off + 4*s, lowShift: sh, sub: -1}
			// The sub-block: fixed when every unit of the block (and group) gives the word the
			// same one.
			sub0 := w.j0 / l.Sub
			fixed := true
			for u := 0; u < units; u++ {
				for _, eg := range goffs {
					fixed = fixed && (w.j0+4*u*span+eg)/l.Sub == sub0
				}
			}
			if fixed {
				w.sub = sub0
			}
			if l.High != nil {
				w.high = highBytes
				hb, hs := l.High.Locate(w.j0)
				word := true
				for u := 0; u < units; u++ {
					for e := 0; e < 4; e++ {
						b, sh := l.High.Locate(w.j0 + e + 4*u*span)
						word = word && b == hb+e+4*u*span && sh == hs
					}
				}
				switch {
				case word:
					w.high, w.highOff, w.highSh = highWord, hb, hs
				case hmax-hmin < 4 && hmin+4 <= f.BlockBytes:
					w.high, w.highOff = highWindow, hmin
				}
			}
			out = append(out, w)
		}
	}
	return out
}

// wordGroups groups the words of a unit (quantWords) that share a sub-block scale in every unit
// of a block: words of a fixed sub-block by it, the others (Q6_K's sub-blocks of 16 at span > 1)
// with the words whose sub-block moves with the unit in step with theirs. Each group's products
// are summed before its scale multiplies them. The first word of a group is its representative.
func wordGroups(words []quantWord, l *quant.Layout, units, span int, sp laneSplit) [][]int {
	goffs := sp.elemOffsets()
	same := func(a, b quantWord) bool {
		for u := 0; u < units; u++ {
			for _, eg := range goffs {
				if (a.j0+4*u*span+eg)/l.Sub != (b.j0+4*u*span+eg)/l.Sub {
					return false
				}
			}
		}
		return true
	}
	var out [][]int
	for i, w := range words {
		placed := false
		for g, ws := range out {
			if same(words[ws[0]], w) {
				out[g] = append(out[g], i)
				placed = true
				break
			}
		}
		if !placed {
			out = append(out, []int{i})
		}
	}
	return out
}

func buildMatmulVecQ(p *Problem, c Config, caps Caps) (*Launch, error) {
	g, err := acceptVecQFloat(p, caps)
	if err != nil {
		return nil, err
	}
	wgN, colsN, span, per := c["wg"], c["cols"], c["span"], max(c["rows"], 1)
	sp := laneSplit{groups: 1}
	if c["split"] > 0 {
		sp = splitOf(g.bT.Format())
	}
	f := g.bT.Format()
	l := f.Layout
	if (l.Low.Radix[0]/4)%span != 0 {
		return nil, fmt.Errorf("span=%d does not divide a %s block's words", span, f.Name)
	}
	name := vecQName("matmul_vec_q", f.Name, g.m, span, per, sp) + unrollSuffix(c["unroll"])
	if c["stage"] > 0 {
		name += "_staged"
	}
	b := newBuilder(name, caps)
	bufs, binds := declareGemm(b, p, g, 4, 1)
	v := newVecFrameN(b, p, g, caps, wgN, colsN, per, true)
	R, rms := g.m, g.gammaArg >= 0
	var staged *codegen.Array // x·gamma of every row (stage = 1)
	if rms && c["stage"] > 0 {
		staged = v.stageNorm(bufs)
	}
	u := v.u
	words := quantWords(f, span, sp)
	upb := l.Low.Radix[0] / 4 / span // units per block and group
	groups := wordGroups(words, l, upb, span, sp)
	G := sp.groups
	nb := g.k / f.BlockElems
	lastWord := (p.Args[g.bArg].Bytes()+3)/4 - 1
	f4 := codegen.Vec(codegen.F32, 4)
	uvec := func(x ...int) codegen.Value {
		vs := make([]codegen.Value, len(x))
		for i, e := range x {
			vs[i] = u(e)
		}
		return b.Vec(vs...)
	}
	ones := b.Splat(b.F32(1), 4)
	withMin := l.Combine == quant.ScaledPlusMin || l.Combine == quant.SubScaledMinusMin
	// mant: the quants are placed in an f32's mantissa (quantMant) where the format has no
	// codebook; a group's sum is then corrected by its Σx.
	mant := l.Values == nil
	width := l.Low.Width
	if l.High != nil {
		width += l.High.Width
	}
	mt := 23 - width // the quant's lowest bit in the mantissa
	b.If(b.Lt(v.col, u(g.n)), func() {
		v.forK(u(nb*upb*G), max(c["unroll"], 1), func(unit codegen.Value) {
			blk, k0, dyn := sp.unitAt(b, unit, f, upb, span)
			dynE, dynL, dynH, dynHS := dyn.elem, dyn.low, dyn.high, dyn.highShift
			// Each column's block: its reader, scales and runs of words, read once a unit.
			rds := make([]*blockReader, per)
			ds := make([]codegen.Value, per)
			dmins := make([]codegen.Value, per)
			runs := make([]map[int][]codegen.Value, per)
			for cc := 0; cc < per; cc++ {
				base := b.Mul(b.Add(b.Mul(v.colAt(cc), u(nb)), blk), u(f.BlockBytes))
				rds[cc] = newBlockReader(b, bufs.b, f, base)
				ds[cc] = rds[cc].scalar(l.D)
				if l.M.Type != 0 {
					dmins[cc] = rds[cc].scalar(l.M)
				}
				runs[cc] = map[int][]codegen.Value{}
			}
			// word is the u32 at off + dyn of column cc's block, s words into a run of span
			// words from off − 4s (read as one run: span words, or span+1 around them); dyn is
			// dynL for low bits, dynH for high bits (which a split moves apart).
			word := func(cc, off, s int, high bool) codegen.Value {
				r0, dyn := off-4*s, dynL
				if high {
					r0, dyn = -1-r0, dynH // the cache's key: high runs apart from low ones
				}
				run, ok := runs[cc][r0]
				if !ok {
					run = rds[cc].run(off-4*s, dyn, span, lastWord)
					runs[cc][r0] = run
				}
				return run[s]
			}
			// highRun: the high bits of the run of word wi (s words into it) are a run of
			// consecutive words too (Q6_K's qh, Q3_K's hmask, Q5_K's qh).
			highRun := func(wi, s int) bool {
				w0 := words[wi-s]
				for t := 0; t < span; t++ {
					if wt := words[wi-s+t]; wt.high != highWord || wt.highOff != w0.highOff+4*t {
						return false
					}
				}
				return true
			}
			for _, ws := range groups {
				rep := words[ws[0]]
				dots := make([][]codegen.Value, per) // per column, per row
				for cc := range dots {
					dots[cc] = make([]codegen.Value, R)
				}
				sx := make([]codegen.Value, R)
				for _, wi := range ws {
					w := words[wi]
					s := (w.j0 % l.Low.Radix[0]) / 4 // the word's place in its run
					kx := b.Add(k0, u(w.j0))         // K index of the word's first element
					// x, once for all the group's columns.
					xs := make([]codegen.Value, R)
					var gm codegen.Value
					if rms && staged == nil {
						gm = loadF4(b, bufs.gamma, b.Shr(kx, u(2)))
					}
					for r := 0; r < R; r++ {
						var x codegen.Value
						if staged != nil {
							x = b.Load(staged, b.Shr(b.Add(u(r*g.k), kx), u(2)))
						} else {
							x = loadF4(b, bufs.a, b.Shr(b.Add(v.aBase, b.Add(u(r*g.k), kx)), u(2)))
							if rms {
								v.add(R+r, b.Dot(x, x))
								x = b.Mul(x, gm)
							}
						}
						xs[r] = x
						if withMin || mant {
							t := b.Dot(x, ones)
							if sx[r].Valid() {
								t = b.Add(sx[r], t)
							}
							sx[r] = t
						}
					}
					for cc := 0; cc < per; cc++ {
						rd := rds[cc]
						var qf codegen.Value
						if mant {
							qf = quantMant(b, l, mantLanes(b, l, w, mt, dynE, rd, word(cc, w.lowOff, s, false), func() codegen.Value {
								var hw codegen.Value
								if highRun(wi, s) {
									hw = word(cc, w.highOff, s, true)
								} else {
									hw = rd.word(w.highOff, dynH)
								}
								if dynHS.Valid() {
									hw = b.Shr(hw, dynHS) // the group's high bits where group 0's are
								}
								return hw
							}))
						} else {
							// A codebook's formats (IQ4_NL, IQ4_XS, MXFP4) have no high bits: the
							// word's four low-bit fields index the table.
							qv := b.And(b.Shr(b.Splat(word(cc, w.lowOff, s, false), 4), uvec(w.lowShift, 8+w.lowShift, 16+w.lowShift, 24+w.lowShift)),
								b.Splat(u(1<<l.Low.Width-1), 4))
							qf = b.Convert(signedQuant(b, l, qv, l.Low.Width), f4)
						}
						for r := 0; r < R; r++ {
							dt := b.Dot(xs[r], qf)
							if dots[cc][r].Valid() {
								dt = b.Add(dots[cc][r], dt)
							}
							dots[cc][r] = dt
						}
					}
				}
				var subDyn codegen.Value
				if rep.sub < 0 {
					subDyn = b.Div(b.Add(u(rep.j0), dynE), u(l.Sub))
				}
				// With mant the dots are Σ x·(1 + u/2^width) for the unsigned quants u, and the
				// quants are u − c: Σ x·(u − c) = 2^width·dot − (2^width + c)·Σx.
				var corr []codegen.Value
				if mant {
					corr = make([]codegen.Value, R)
					for r := range corr {
						corr[r] = b.Mul(sx[r], b.F32(float32(int(1)<<width+mantBias(l, width))))
					}
				}
				for cc := 0; cc < per; cc++ {
					scale, mn := rds[cc].groupScale(l, ds[cc], dmins[cc], rep.sub, subDyn)
					for r := 0; r < R; r++ {
						dot := dots[cc][r]
						if mant {
							dot = b.Sub(b.Mul(dot, b.F32(float32(int(1)<<width))), corr[r])
						}
						v.addAt(cc, r, addMinTerm(b, l, b.Mul(scale, dot), mn, sx[r]))
					}
				}
			}
		})
	})
	l2, err := v.finish(bufs, binds, caps, map[string]int{"wg": wgN, "cols": colsN})
	if err != nil {
		return nil, err
	}
	g.cost(p, l2)
	return l2, nil
}

// quantMant is the f32 1 + u/2^width of the unsigned quants u already placed at bit
// 23 − width (a vector): the exponent of 1.0 or'ed above them, and for a two's complement format
// the sign bit flipped, so that u is the quant plus 2^(width−1) (mantBias). An f32 holds it
// exactly, and x·(1 + u/2^width) summed loses nothing a product of f32 would not: its Σx part
// is taken off once per group (about 2^width ulps of Σ|x|, 1e-6 of a row's scale at 8 bits).
// It costs a shift and an and (one LOP3 with the or) a quant where the former form, the
// quant or'ed into the mantissa of 2²³ and 2²³ + c subtracted, cost a shift, an and-or and a
// subtraction. (An int-to-float conversion, the form before that, issues at a quarter of the
// rate of an add or less on GPUs: NVIDIA 16 a clock an SM.)
func quantMant(b *codegen.Builder, l *quant.Layout, v codegen.Value) codegen.Value {
	n := v.Type().Len()
	if l.Signed {
		// The quant's sign bit (bit width − 1 of u) sits at bit 22.
		v = b.Xor(v, b.Splat(b.U32(1<<22), n))
	}
	return b.Bitcast(b.Or(v, b.Splat(b.U32(0x3f800000), n)), codegen.Vec(codegen.F32, n))
}

// mantBias is c of a quant u − c as quantMant's u: 2^(width−1) for two's complement, else the
// layout's bias.
func mantBias(l *quant.Layout, width int) int {
	if l.Signed {
		return 1 << (width - 1)
	}
	return l.Bias
}

// shiftBy is x >> k for k ≥ 0, x << −k for k < 0.
func shiftBy(b *codegen.Builder, x codegen.Value, k int) codegen.Value {
	switch {
	case k > 0:
		return b.Shr(x, b.U32(uint32(k)))
	case k < 0:
		return b.Shl(x, b.U32(uint32(-k)))
	}
	return x
}

// mantLanes is the four quants of word w of a unit, each shifted straight from its word to
// bit mt = 23 − width with its high bits above it (quantMant's input): the low bits from lw, the
// high bits from the word high() returns (highWord) or read at their run-time position
// (highWindow, highBytes).
func mantLanes(b *codegen.Builder, l *quant.Layout, w quantWord, mt int, dyn codegen.Value, rd *blockReader, lw codegen.Value, high func() codegen.Value) codegen.Value {
	u := func(x int) codegen.Value { return b.U32(uint32(x)) }
	var hw codegen.Value
	if w.high == highWord {
		hw = high()
	}
	lanes := make([]codegen.Value, 4)
	for e := range lanes {
		v := b.And(shiftBy(b, lw, w.lowShift+8*e-mt), u((1<<l.Low.Width-1)<<mt))
		if l.High != nil {
			hmt := mt + l.Low.Width // the high bits' place
			var hv codegen.Value
			switch w.high {
			case highWord:
				hv = b.And(shiftBy(b, hw, w.highSh+8*e-hmt), u((1<<l.High.Width-1)<<hmt))
			default:
				off, sh := locate(b, l.High, b.Add(u(w.j0+e), dyn))
				var src codegen.Value
				if w.high == highWindow {
					src = b.Shr(rd.word(w.highOff, codegen.Value{}), b.Add(b.Shl(b.Sub(off, u(w.highOff)), u(3)), sh))
				} else {
					src = b.Shr(rd.byteAt(0, off), sh)
				}
				hv = b.Shl(b.And(src, u(1<<l.High.Width-1)), u(hmt))
			}
			v = b.Or(v, hv)
		}
		lanes[e] = v
	}
	return b.Vec(lanes...)
}

// vecQName names a kernel of matmul_vec_q or matmul_vec_qdot: the format, x's rows and the span,
// then rows (per) and split's groups where they are not 1.
func vecQName(template, format string, m, span, per int, sp laneSplit) string {
	name := fmt.Sprintf("%s_%s_r%d_s%d", template, format, m, span)
	if per > 1 {
		name += fmt.Sprintf("_n%d", per)
	}
	if sp.groups > 1 {
		name += fmt.Sprintf("_g%d", sp.groups)
	}
	return name
}

// unitAt places unit (an index over K's units, upb a block and sp.groups of them a group of
// invocations) in its block: the block's index, the K index of the unit's element 0 and the
// unit's offsets within the block.
func (sp laneSplit) unitAt(b *codegen.Builder, unit codegen.Value, f *quant.Format, upb, span int) (blk, k0 codegen.Value, dyn unitOffsets) {
	per := uint32(upb * sp.groups)
	blk = b.Div(unit, b.U32(per))
	r := unit
	if sp.groups > 1 {
		r = b.Rem(unit, b.U32(per))
	}
	dyn = sp.unitOffsets(b, r, upb, span)
	return blk, b.Add(b.Mul(blk, b.U32(uint32(f.BlockElems))), dyn.elem), dyn
}

// groupScale is the scale of a group of words (one scale group of a block) and, for the formats
// with a min, its min: d alone, d and dmin, or the sub-block's scale and min (subScale).
func (r *blockReader) groupScale(l *quant.Layout, d, dmin codegen.Value, subConst int, subDyn codegen.Value) (scale, min codegen.Value) {
	switch l.Combine {
	case quant.Scaled:
		scale = d
	case quant.ScaledPlusMin:
		scale, min = d, dmin
	default:
		scale, min = r.subScale(l, d, dmin, subConst, subDyn)
	}
	return scale, min
}

// addMinTerm adds a group's min term to its scaled sum t: min·Σx for the formats whose values are
// scale·q + min, −min·Σx for scale·q − min; t alone otherwise.
func addMinTerm(b *codegen.Builder, l *quant.Layout, t, min, sumX codegen.Value) codegen.Value {
	switch l.Combine {
	case quant.ScaledPlusMin:
		return b.Add(t, b.Mul(min, sumX))
	case quant.SubScaledMinusMin:
		return b.Sub(t, b.Mul(min, sumX))
	}
	return t
}

// unrollOnce is cs (a static choice or suggestions written before the space had unroll) with
// unroll = 1 where a point does not set it (in place).
func unrollOnce(cs []Config) []Config {
	for _, c := range cs {
		if _, ok := c["unroll"]; !ok {
			c["unroll"] = 1
		}
	}
	return cs
}

// withUnroll is the suggestions of a block-quantized matrix-vector template (MatmulVecQ,
// MatmulVecQDot): on a GPU, first the static choice's points unrolled by 2, then the template's
// suggestions as they are (unroll = 1); on a CPU implementation only the latter (see
// MatmulVecQ's unroll).
func withUnroll(static, suggested []Config, caps Caps) []Config {
	suggested = unrollOnce(suggested)
	if caps.CPU {
		return suggested
	}
	var out []Config
	for _, c := range static {
		d := c.clone()
		d["unroll"] = 2
		out = append(out, d)
	}
	return append(out, suggested...)
}
