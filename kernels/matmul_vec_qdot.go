package kernels

import (
	"fmt"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir/quant"
)

// Int8Mode is a compile policy: whether matmul templates may quantize activations to 8 bits per
// block of 32 (as llama.cpp's q8_1) so that block-quantized weights meet them in integer dot
// products (SPV_KHR_integer_dot_product: four int8 products summed in one instruction). It changes
// results — the activations are rounded to 8 bits, so a model's logits move by about 3e-2 to 5e-2
// row-relative (the llama.cpp oracle's README, tolerances (1) and (2)) — so it is chosen by the
// user, never by a device: Caps.IntegerDot is the device fact.
type Int8Mode uint8

const (
	// Int8Off keeps every product exact (dequantized weights, f32 arithmetic): the default.
	Int8Off Int8Mode = iota
	// Int8Auto offers both the float and the integer-dot kernels; a tuned compile measures them
	// and keeps the faster (the static path keeps the estimate's choice).
	Int8Auto
	// Int8Only uses the integer-dot kernel wherever it applies (the float kernel refuses those
	// problems), for tests of that path and for comparisons with llama.cpp's.
	Int8Only
)

var int8Names = [...]string{Int8Off: "off", Int8Auto: "auto", Int8Only: "on"}

func (m Int8Mode) String() string {
	if int(m) < len(int8Names) {
		return int8Names[m]
	}
	return fmt.Sprintf("int8mode(%d)", uint8(m))
}

// ParseInt8Mode reads "off", "auto" or "on".
func ParseInt8Mode(s string) (Int8Mode, error) {
	for i, n := range int8Names {
		if n == s {
			return Int8Mode(i), nil
		}
	}
	return Int8Off, fmt.Errorf("int8 %q: want off, auto or on", s)
}

// Int8KernelTolerance is the error a launch with 8-bit activations may have against the
// interpreter, relative to its row scale, when the tuner checks it (Launch.Tolerance). Rounding
// each activation to the nearest of 255 levels of its block's range moves it by at most
// amax/254; for normal activations and weights that is about 0.5% of a product's spread, and the
// largest error over a row of a few hundred outputs is within 1.5e-2 of the row's largest
// magnitude (TestMatmulVecQDot measures 3e-3 to 1e-2 on the test shapes and checks every element
// against the rigorous bound Σ|w|·amax/254 instead).
const Int8KernelTolerance = 2e-2

// MatmulVecQDot is MatmulVecQ with integer dot products: for the same problems (1 to 8 rows,
// a block-quantized W with blocks along K, no batches, no run-time length), it runs two steps.
// The first quantizes each row of x (for rmsnorm_linear x·gamma/rms, the row's Σx² summed first)
// to int8 in blocks of 32 with one f32 scale d = amax/127 per block, into scratch buffers; the
// second is the matrix-vector kernel of MatmulVecQ (the same frame, unit layout and word plan,
// quantWords) with each word's four weight quants packed as four signed bytes — shifts and
// masks on the word, the bias subtracted byte-wise — and multiplied with the four activation
// bytes by SDotAccSat into an i32 sum per scale group, then scaled by d_w·sc·d_x (and the min
// term, dmin·m·d_x·Σq_x, for the formats with one; Σq_x is an SDot with 0x01010101).
//
// Words whose weight scale and activation block are the same in every unit (of a block, and of
// a group at split) are summed in one i32 before their scales multiply the sum.
//
// rows and split are MatmulVecQ's. rows is how many consecutive columns (rows of W) a column
// group computes: each load of the int8 activation words, of their block scales d_x and, for
// the formats with a min, each Σq_x serves rows columns (llama.cpp's NUM_ROWS); the weight's
// words, scales and sub-block scales are each column's own. split spreads a block's runs of low
// bits over consecutive invocations (laneSplit), each unit finding its sub-block and its
// activation block at run time (unitOffsets).
//
// The static choice on a GPU (vecQDotGPUStatic) at K ≥ 4096 is a subgroup a column group of
// two columns, four words a run, rows 2, split where the format has runs to spread (wg=128,
// cols=4, span=4, rows=2, split=1), else wg=128, cols=2, span=4, rows=2; elsewhere the space's
// first point (wg=128, cols=2, span=2, rows=1, split=0), the kernel as it was before either
// parameter. On the H100 (docs/bench/h100-2026-12-06, session 11 call 2, chained products)
// that point took Q4_K at 28672×4096 from 54.2 to 39.4 µs (matmul_vec_q's static: 44.4), at
// 4096×14336 from 37.3 to 31.4, at 4096² from 14.0 to 12.5; Q6_K from 70.1 to 56.3, 47.0 to
// 50.2 and 18.0 to 17.7; Q8_0 (unsplit) from 54.2 to 53.0, 39.6 to 38.7 and 14.2 to 14.5. Points
// of rows 2 and 4 and of split are among the suggestions (vecQDotSuggest) that a tuned compile
// and BenchmarkDecodeGEMV measure first.
//
// It is offered only where the device has integer dot products (Caps.IntegerDot) and the
// compile allows 8-bit activations (Caps.Int8 is Int8Auto or Int8Only); its Launch.Tolerance is
// Int8KernelTolerance.
//
// Specialization constants: wg, cols (the second step); the first step runs qwg invocations per
// row. Built per span, rows and split. Grids: rows of x × 1, then ceil(N/(cols·rows)) × 1.
var MatmulVecQDot = &Template{
	Name:      "matmul_vec_qdot",
	Quantized: QuantizedDTypes(),
	Accepts: func(p *Problem, caps Caps) error {
		_, err := acceptVecQDot(p, caps)
		return err
	},
	Space: NewSpace(
		Ints("wg", 128, 64, 256, 32),
		Ints("cols", 2, 1, 4, 8),
		Ints("span", 2, 1, 4),
		Ints("rows", 1, 2, 4),
		Ints("split", 0, 1),
		Ints("unroll", 1, 2),
	).Where(vecQFits).Suggest(func(p *Problem, caps Caps) []Config {
		return withUnroll(vecQDotGPUStatic(p, caps), vecQDotSuggest(p, caps), caps)
	}),
	Static: func(p *Problem, caps Caps) []Config { return unrollOnce(vecQDotGPUStatic(p, caps)) },
	Build:  buildMatmulVecQDot,
}

func init() { Register(MatmulVecQDot) }

// qdotApplies reports whether MatmulVecQDot takes the problems MatmulVecQ is accepting: the
// device and the compile policy allow it, and g has no batches and no run-time length.
func qdotApplies(p *Problem, g *gemm, caps Caps) error {
	switch {
	case caps.Int8 == Int8Off:
		return fmt.Errorf("8-bit activations are off (Int8Off)")
	case !caps.IntegerDot:
		return fmt.Errorf("the device has no integer dot products (shaderIntegerDotProduct)")
	case g.batches() != 1:
		return fmt.Errorf("%d batches", g.batches())
	case p.Rows != nil:
		return fmt.Errorf("a run-time length")
	case g.k%32 != 0:
		return fmt.Errorf("K=%d is not a multiple of the 32-element activation blocks", g.k)
	}
	return nil
}

func acceptVecQDot(p *Problem, caps Caps) (*gemm, error) {
	g, err := acceptVecQ(p, caps)
	if err != nil {
		return nil, err
	}
	if err := qdotApplies(p, g, caps); err != nil {
		return nil, err
	}
	return g, nil
}

// qActBlock is the block of the activations' quantization (llama.cpp's q8_1).
const qActBlock = 32

// buildQuantizeRows is the first step of MatmulVecQDot: workgroup r quantizes row r of A (times
// gamma over the row's rms for rmsnorm_linear) into qs (K/4 words of four int8) and d (K/32 f32
// scales) of that row.
func buildQuantizeRows(p *Problem, g *gemm, caps Caps) (*Step, error) {
	const wgN = 64
	b := newBuilder("quantize_q8_rows", caps)
	bufs, binds := declareGemm(b, p, g, 4, 1)
	qs := b.Buffer("qs", codegen.U32, codegen.WriteOnly)
	ds := b.Buffer("d", codegen.F32, codegen.WriteOnly)
	binds = append(binds, Operand{Scratch, 0}, Operand{Scratch, 1})
	// B (and the bias) are declared in the op's operand order too; this step reads only A (and
	// gamma).
	b.WorkgroupSize(b.U32(wgN), b.U32(1), b.U32(1))
	u := func(x int) codegen.Value { return b.U32(uint32(x)) }
	li := b.LocalIndex()
	row := b.X(b.WorkgroupID())
	K := g.k
	rowBase := b.Mul(row, u(K/4)) // in vec4s
	scale := b.F32(1)
	if g.gammaArg >= 0 {
		red := b.Shared("ss", codegen.F32, u(wgN))
		ss := b.Var("ss", b.F32(0))
		b.For(li, u(K/4), u(wgN), func(i codegen.Value) {
			x := loadF4(b, bufs.a, b.Add(rowBase, i))
			b.Set(ss, b.Add(b.Get(ss), b.Dot(x, x)))
		})
		b.Store(red, li, b.Get(ss))
		b.Barrier()
		for h := wgN / 2; h > 0; h /= 2 {
			b.If(b.Lt(li, u(h)), func() {
				b.Store(red, li, b.Add(b.Load(red, li), b.Load(red, b.Add(li, u(h)))))
			})
			b.Barrier()
		}
		scale = b.InverseSqrt(b.Add(b.Mul(b.Load(red, u(0)), b.F32(float32(1/float64(K)))), b.F32(float32(g.eps))))
	}
	nb := K / qActBlock
	b.For(li, u(nb), u(wgN), func(blk codegen.Value) {
		xs := make([]codegen.Value, qActBlock/4)
		amax := b.F32(0)
		for w := range xs {
			i := b.Add(b.Mul(blk, u(qActBlock/4)), u(w))
			x := loadF4(b, bufs.a, b.Add(rowBase, i))
			if g.gammaArg >= 0 {
				x = b.Mul(b.Mul(x, loadF4(b, bufs.gamma, i)), b.Splat(scale, 4))
			}
			xs[w] = x
			a := b.Abs(x)
			amax = b.Max(amax, b.Max(b.Max(b.X(a), b.Y(a)), b.Max(b.Z(a), b.Extract(a, 3))))
		}
		d := b.Div(amax, b.F32(127))
		id := b.Select(b.Gt(amax, b.F32(0)), b.Div(b.F32(127), amax), b.F32(0))
		for w, x := range xs {
			var word codegen.Value
			for e := 0; e < 4; e++ {
				v := b.Mul(b.Extract(x, e), id)
				// round half away from zero, as llama.cpp's roundf
				r := b.Floor(b.Add(b.Abs(v), b.F32(0.5)))
				q := b.Convert(b.Select(b.Lt(v, b.F32(0)), b.Neg(r), r), codegen.I32)
				byteV := b.Shl(b.And(b.Bitcast(q, codegen.U32), u(0xff)), u(8*e))
				if e == 0 {
					word = byteV
				} else {
					word = b.Or(word, byteV)
				}
			}
			b.Store(qs, b.Add(b.Mul(row, u(K/4)), b.Add(b.Mul(blk, u(qActBlock/4)), u(w))), word)
		}
		b.Store(ds, b.Add(b.Mul(row, u(nb)), blk), d)
	})
	k, err := b.Finish()
	if err != nil {
		return nil, err
	}
	if err := caps.Supports(k); err != nil {
		return nil, err
	}
	return &Step{Kernel: k, Grid: [3]uint32{uint32(g.m), 1, 1}, Bindings: binds}, nil
}

// packedQuants is the four quants of word w of the unit at dyn (see quantWords, unitOffsets)
// as four signed bytes of a u32, the bias subtracted: what SDot multiplies.
func packedQuants(b *codegen.Builder, rd *blockReader, l *quant.Layout, w quantWord, dyn unitOffsets) codegen.Value {
	u := func(x uint32) codegen.Value { return b.U32(x) }
	rep := func(x uint32) uint32 { return x * 0x01010101 }
	low := b.And(b.Shr(rd.word(w.lowOff, dyn.low), u(uint32(w.lowShift))), u(rep(1<<l.Low.Width-1)))
	if l.High != nil {
		hm := uint32(1<<l.High.Width - 1)
		var hv codegen.Value
		if w.high == highWord {
			hw := rd.word(w.highOff, dyn.high)
			if dyn.highShift.Valid() {
				hw = b.Shr(hw, dyn.highShift) // the group's high bits where group 0's are
			}
			hv = b.And(b.Shr(hw, u(uint32(w.highSh))), u(rep(hm)))
		} else {
			for e := 0; e < 4; e++ {
				off, sh := locate(b, l.High, b.Add(b.U32(uint32(w.j0+e)), dyn.elem))
				var src codegen.Value
				if w.high == highWindow {
					src = b.Shr(rd.word(w.highOff, codegen.Value{}), b.Add(b.Shl(b.Sub(off, b.U32(uint32(w.highOff))), u(3)), sh))
				} else {
					src = b.Shr(rd.byteAt(0, off), sh)
				}
				e8 := b.Shl(b.And(src, u(hm)), u(uint32(8*e)))
				if e == 0 {
					hv = e8
				} else {
					hv = b.Or(hv, e8)
				}
			}
		}
		low = b.Or(low, b.Shl(hv, u(uint32(l.Low.Width))))
	}
	if l.Values != nil {
		// A codebook (IQ4_NL, IQ4_XS, MXFP4: entries in [−127, 127]): each byte's index is
		// looked up and the four entries packed again as signed bytes.
		idx := b.And(b.Shr(b.Splat(low, 4), b.Vec(u(0), u(8), u(16), u(24))), b.Splat(u(0xff), 4))
		vals := b.Bitcast(codebook(b, l.Values, idx), codegen.Vec(codegen.U32, 4))
		bytesV := b.Shl(b.And(vals, b.Splat(u(0xff), 4)), b.Vec(u(0), u(8), u(16), u(24)))
		return b.Or(b.Or(b.X(bytesV), b.Y(bytesV)), b.Or(b.Z(bytesV), b.Extract(bytesV, 3)))
	}
	if l.Bias != 0 {
		// Byte-wise x − bias for x < 128, bias ≤ 128, with no borrow between bytes: bit 7 of each
		// byte is set first, so the subtraction stays in the byte, and flipped back after.
		h := u(0x80808080)
		low = b.Xor(b.Sub(b.Or(low, h), u(rep(uint32(l.Bias)))), h)
	}
	// Signed formats (Q8_0, Q8_K) are bytes in two's complement already.
	return low
}

func buildMatmulVecQDot(p *Problem, c Config, caps Caps) (*Launch, error) {
	g, err := acceptVecQDot(p, caps)
	if err != nil {
		return nil, err
	}
	wgN, colsN, span, per := c["wg"], c["cols"], c["span"], max(c["rows"], 1)
	f := g.bT.Format()
	l := f.Layout
	if (l.Low.Radix[0]/4)%span != 0 {
		return nil, fmt.Errorf("span=%d does not divide a %s block's words", span, f.Name)
	}
	sp := laneSplit{groups: 1}
	if c["split"] > 0 {
		sp = splitOf(f)
	}
	quantize, err := buildQuantizeRows(p, g, caps)
	if err != nil {
		return nil, err
	}
	// The product step reads the quantized rows, already normalised: it is the plain product
	// of the quantized x and W (gamma and rms are the first step's).
	pg := *g
	pg.gammaArg = -1
	b := newBuilder(vecQName("matmul_vec_qdot", f.Name, g.m, span, per, sp)+unrollSuffix(c["unroll"]), caps)
	var bufs gemmBufs
	var binds []Operand
	bufs.b = b.Buffer("b", codegen.U32, codegen.ReadOnly)
	binds = append(binds, Operand{Arg, g.bArg})
	if g.biasArg >= 0 {
		bufs.bias = b.Buffer("bias", StorageType(p.Args[g.biasArg].DType), codegen.ReadOnly)
		binds = append(binds, Operand{Arg, g.biasArg})
	}
	qs := b.Buffer("qs", codegen.U32, codegen.ReadOnly)
	ds := b.Buffer("d", codegen.F32, codegen.ReadOnly)
	binds = append(binds, Operand{Scratch, 0}, Operand{Scratch, 1})
	v := newVecFrameN(b, p, &pg, caps, wgN, colsN, per, true)
	R := g.m
	u := v.u
	words := quantWords(f, span, sp)
	upb := l.Low.Radix[0] / 4 / span // units per block and group
	G := sp.groups
	goffs := sp.elemOffsets()
	nb := g.k / f.BlockElems
	nact := g.k / qActBlock
	ones := u(0x01010101)
	withMin := l.Combine == quant.ScaledPlusMin || l.Combine == quant.SubScaledMinusMin
	// together reports whether elements a and c of group 0's unit at p0 = 0 lie in the same
	// span of n elements (a sub-block, an activation block) in every unit of a block and group.
	together := func(a, c, n int) bool {
		for p0 := 0; p0 < upb; p0++ {
			for _, eg := range goffs {
				if (a+4*p0*span+eg)/n != (c+4*p0*span+eg)/n {
					return false
				}
			}
		}
		return true
	}
	// fixedIn is the span of n elements that element j of group 0's unit at p0 = 0 lies in, and
	// whether every unit of a block and group puts it there.
	fixedIn := func(j, n int) (int, bool) {
		for p0 := 0; p0 < upb; p0++ {
			for _, eg := range goffs {
				if (j+4*p0*span+eg)/n != j/n {
					return 0, false
				}
			}
		}
		return j / n, true
	}
	// Words that share the weight's scale and the activations' block in every unit are summed
	// in i32: a group of them. The first word of a group is its representative, whose
	// sub-block and activation block are the group's.
	var wgroups [][]int
	for i, w := range words {
		placed := false
		for gi, ws := range wgroups {
			if r := words[ws[0]]; together(r.j0, w.j0, l.Sub) && together(r.j0, w.j0, qActBlock) {
				wgroups[gi] = append(wgroups[gi], i)
				placed = true
				break
			}
		}
		if !placed {
			wgroups = append(wgroups, []int{i})
		}
	}
	b.If(b.Lt(v.col, u(g.n)), func() {
		v.forK(u(nb*upb*G), max(c["unroll"], 1), func(unit codegen.Value) {
			blk, k0, dyn := sp.unitAt(b, unit, f, upb, span)
			// Each column's block: its reader and scales, read once a unit.
			rds := make([]*blockReader, per)
			ds0 := make([]codegen.Value, per)
			dmins := make([]codegen.Value, per)
			for cc := 0; cc < per; cc++ {
				base := b.Mul(b.Add(b.Mul(v.colAt(cc), u(nb)), blk), u(f.BlockBytes))
				rds[cc] = newBlockReader(b, bufs.b, f, base)
				ds0[cc] = rds[cc].scalar(l.D)
				if l.M.Type != 0 {
					dmins[cc] = rds[cc].scalar(l.M)
				}
			}
			for _, ws := range wgroups {
				rep := words[ws[0]]
				dots := make([][]codegen.Value, per) // per column, per row
				for cc := range dots {
					dots[cc] = make([]codegen.Value, R)
				}
				sq := make([]codegen.Value, R) // Σq_x per row, the same for every column
				for _, wi := range ws {
					w := words[wi]
					kx := b.Add(k0, u(w.j0))
					// x, once for all the group's columns.
					xq := make([]codegen.Value, R)
					for r := range xq {
						xq[r] = b.Load(qs, b.Add(u(r*g.k/4), b.Shr(kx, u(2))))
						if withMin {
							acc := sq[r]
							if !acc.Valid() {
								acc = b.I32(0)
							}
							sq[r] = b.SDotAccSat(ones, xq[r], acc)
						}
					}
					for cc := 0; cc < per; cc++ {
						pw := packedQuants(b, rds[cc], l, w, dyn)
						for r := 0; r < R; r++ {
							acc := dots[cc][r]
							if !acc.Valid() {
								acc = b.I32(0)
							}
							dots[cc][r] = b.SDotAccSat(pw, xq[r], acc)
						}
					}
				}
				// The group's activation block: a constant one of the unit's block when every
				// unit and group gives its words the same, else found from the representative.
				var act codegen.Value
				if a0, ok := fixedIn(rep.j0, qActBlock); ok && f.BlockElems%qActBlock == 0 {
					act = b.Add(b.Mul(blk, u(f.BlockElems/qActBlock)), u(a0))
				} else {
					act = b.Div(b.Add(k0, u(rep.j0)), u(qActBlock))
				}
				var subDyn codegen.Value
				if rep.sub < 0 {
					subDyn = b.Div(b.Add(u(rep.j0), dyn.elem), u(l.Sub))
				}
				dx := make([]codegen.Value, R)
				sqx := make([]codegen.Value, R) // d_x·Σq_x, for the min term
				for r := range dx {
					dx[r] = b.Load(ds, b.Add(u(r*nact), act))
					if withMin {
						sqx[r] = b.Mul(dx[r], b.Convert(sq[r], codegen.F32))
					}
				}
				for cc := 0; cc < per; cc++ {
					scale, mn := rds[cc].groupScale(l, ds0[cc], dmins[cc], rep.sub, subDyn)
					for r := 0; r < R; r++ {
						t := b.Mul(b.Mul(scale, dx[r]), b.Convert(dots[cc][r], codegen.F32))
						v.addAt(cc, r, addMinTerm(b, l, t, mn, sqx[r]))
					}
				}
			}
		})
	})
	prod, err := v.finish(bufs, binds, caps, map[string]int{"wg": wgN, "cols": colsN})
	if err != nil {
		return nil, err
	}
	l2 := &Launch{
		Steps:     []Step{*quantize, prod.Steps[0]},
		Scratch:   []int{g.m * g.k, 4 * g.m * nact},
		Tolerance: Int8KernelTolerance,
	}
	g.cost(p, l2)
	return l2, nil
}

// vecQDotGPUStatic is MatmulVecQDot's static choice (see the template's comment): on a GPU at
// K ≥ 4096 (the shapes it was measured at), split where valid, else unsplit; the space's first
// point elsewhere.
func vecQDotGPUStatic(p *Problem, caps Caps) []Config {
	if caps.CPU {
		return nil
	}
	if g, err := readGemm(p); err != nil || g.k < 4096 {
		return nil
	}
	return []Config{{"wg": 128, "cols": 4, "span": 4, "rows": 2, "split": 1}, {"wg": 128, "cols": 2, "span": 4, "rows": 2, "split": 0}}
}

// vecQDotSuggest proposes the points a budgeted search of MatmulVecQDot measures first (the
// space's first point, wg=128, cols=2, span=2, rows=1, comes before them). On a GPU: the
// default's groups at two and four columns a group (rows), a subgroup a column group (cols=4,
// MatmulVecQ's GPU static layout) at rows 1, 2 and 4 and span 2 and 4, two subgroups a group,
// 256 invocations of 8 groups, and a block's runs over the invocations (split) at the points
// where MatmulVecQ's split measured best (vecQSuggest). On a CPU implementation: MatmulVecQ's
// lavapipe layouts within this space (8 column groups of 4 invocations, 4 of 8, 16 of 8), at
// one, two and four columns a group.
func vecQDotSuggest(p *Problem, caps Caps) []Config {
	pt := func(wg, cols, span, rows, split int) Config {
		return Config{"wg": wg, "cols": cols, "span": span, "rows": rows, "split": split}
	}
	if caps.CPU {
		var out []Config
		for _, rows := range []int{4, 2, 1} {
			out = append(out, pt(32, 8, 1, rows, 0), pt(32, 4, 1, rows, 0), pt(128, 8, 1, rows, 0))
		}
		return out
	}
	return []Config{pt(128, 2, 2, 2, 0), pt(128, 2, 2, 4, 0),
		pt(128, 4, 2, 1, 0), pt(128, 4, 2, 2, 0), pt(128, 4, 4, 2, 0), pt(128, 4, 2, 4, 0), pt(128, 4, 1, 2, 0),
		pt(128, 2, 4, 2, 0), pt(256, 8, 2, 2, 0),
		pt(128, 4, 2, 2, 1), pt(128, 4, 4, 2, 1), pt(128, 1, 2, 2, 1), pt(128, 2, 2, 2, 1)}
}
