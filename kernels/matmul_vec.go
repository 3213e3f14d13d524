package kernels

import (
	"fmt"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
)

// MatmulVec computes matmul, linear and rmsnorm_linear with 1 to 8 rows per batch (decode): the
// product is bound by reading B once, so each workgroup computes `cols` output columns for all
// rows and splits the K reduction of each column over kp = wg/cols invocations, then combines
// the partial sums: by a butterfly of subgroup shuffles in registers when a column's kp
// invocations lie in one subgroup (kp divides the subgroup; none at kp = 1), by a subgroup add
// and shared memory when kp is a multiple of the subgroup, else by a shared-memory tree.
// unroll (1, 2, 4) is how many of an invocation's K steps one loop iteration issues before the
// first product waits on a load (vecFrame.forK).
//
// Invocations are laid out along whichever axis of B is contiguous: along K when B is stored
// [N, K] (linear's W, matmul with tb), so that a column's reads are consecutive; along N
// otherwise, so that the columns of one k are. Where A's rows and B's columns are contiguous
// along K and K is a multiple of vec, A and B are read as vectors of vec elements.
//
// rmsnorm_linear multiplies x by gamma as it loads it and reduces Σx² next to the products (each
// column group recomputes it from the same cached x; it costs one multiply-add per element).
//
// The subgroup path assumes subgroups of consecutive local indices whose width divides wg/cols
// (checked against Caps.SubgroupSize); see the same limit in attention.go.
//
// Specialization constants: wg (the workgroup size) and cols. Built per vec and unroll. Grid:
// ceil(N/cols) × batches. See docs/decode.md, "Matrix–vector products".
var MatmulVec = &Template{
	Name: "matmul_vec",
	Accepts: func(p *Problem, caps Caps) error {
		g, err := acceptGemm(p, caps)
		if err != nil {
			return err
		}
		if g.m > maxVecRows {
			return fmt.Errorf("%d rows; the matrix-vector kernel takes at most %d", g.m, maxVecRows)
		}
		if g.batches() > caps.MaxGroups[1] {
			return fmt.Errorf("%d batches exceed the device's %d workgroups in y", g.batches(), caps.MaxGroups[1])
		}
		return nil
	},
	Space: NewSpace(
		Ints("wg", 128, 64, 256, 32),
		Ints("cols", 2, 1, 4, 8, 16, 32),
		Ints("vec", 4, 2, 1),
		Ints("unroll", 1, 2, 4),
		Ints("stage", 0, 1),
	).Where(vecFits).Suggest(func(p *Problem, caps Caps) []Config {
		// rmsnorm_linear: the first two suggestions with x·gamma staged first (the space's
		// Where drops them for the other problems).
		cs := vecSuggest("vec", 4)(p, caps)
		return append(withStage(cs[:min(2, len(cs))]), cs...)
	}),
	Static: vecStatic,
	Build:  buildMatmulVec,
}

// maxVecRows is the most rows MatmulVec takes: each invocation keeps one sum per row.
const maxVecRows = 8

func init() {
	// Cache parts (column parts writing a state) stop at the run's rows.
	MatmulVec.ReadsLength = true
	Register(MatmulVec)
}

// vecGroups checks what the matrix-vector templates share: a workgroup of wg invocations that
// fits the device, holds a subgroup and divides into cols groups, cols not past the columns
// (twice them at most) and even with column parts. It returns the problem's gemm.
func vecGroups(p *Problem, c Config, caps Caps) (*gemm, error) {
	wg, cols := c["wg"], c["cols"]
	if wg > caps.MaxInvocations || wg > caps.MaxWorkgroupSize[0] {
		return nil, fmt.Errorf("wg=%d exceeds the device's %d invocations", wg, caps.MaxInvocations)
	}
	if wg < max(caps.SubgroupSize, 1) {
		return nil, fmt.Errorf("wg=%d is smaller than a subgroup (%d)", wg, caps.SubgroupSize)
	}
	if cols > wg || wg%cols != 0 {
		return nil, fmt.Errorf("cols=%d does not divide wg=%d", cols, wg)
	}
	g, err := readGemm(p)
	if err != nil {
		return nil, err
	}
	// A workgroup computes cols·rows columns (rows: MatmulVecQ's columns an invocation computes).
	if per := max(c["rows"], 1); cols*per > 1 && cols*per >= 2*g.n {
		return nil, fmt.Errorf("cols=%d×rows=%d is more than twice the %d columns", cols, per, g.n)
	}
	if per := max(c["rows"], 1); len(p.Parts) > 0 && per > 1 && per%2 != 0 {
		return nil, fmt.Errorf("rows=%d: column parts are stored in pairs of columns", per)
	}
	if len(p.Parts) > 0 && cols%2 != 0 && max(c["rows"], 1)%2 != 0 {
		return nil, fmt.Errorf("cols=%d: column parts are stored in pairs of columns", cols)
	}
	return g, nil
}

// vecFits: the workgroup fits the device, divides into cols groups of a power-of-two size, and
// the vector width divides K on contiguous operands.
func vecFits(p *Problem, c Config, caps Caps) error {
	vec := c["vec"]
	g, err := vecGroups(p, c, caps)
	if err != nil {
		return err
	}
	if vec > 1 && !g.vectorizable(vec) {
		return fmt.Errorf("vec=%d needs rows of A and columns of B contiguous along K and K (%d) a multiple of it", vec, g.k)
	}
	if c["stage"] > 0 {
		if vec != 4 {
			return fmt.Errorf("stage=1 stages x·gamma as vectors of 4: vec=%d", vec)
		}
		return stageFits(g, c, caps)
	}
	return nil
}

// stageFits checks a matrix-vector point with stage = 1 (rmsnorm_linear's x·gamma staged in
// shared memory, vecFrame.stageNorm): the problem has a gamma, one batch, and the rows of x fit
// in at most vecStageMost bytes and half the device's shared memory, beside the frame's
// reductions (wg floats a partial sum: rows of them for each of a group's columns, and a row's
// staged Σx²) and column pairs (cols a row).
func stageFits(g *gemm, c Config, caps Caps) error {
	switch {
	case g.gammaArg < 0:
		return fmt.Errorf("stage=1: only rmsnorm_linear has an x·gamma to stage")
	case g.batches() != 1:
		return fmt.Errorf("stage=1: %d batches (staging is per workgroup of one batch, not written for several)", g.batches())
	case g.k%4 != 0:
		return fmt.Errorf("stage=1: K=%d is not a multiple of 4", g.k)
	}
	if n, most := vecStageBytes(g), min(vecStageMost, caps.MaxSharedBytes/2); n > most {
		return fmt.Errorf("stage=1: %d rows of %d need %d bytes of shared memory, more than %d", g.m, g.k, n, most)
	}
	if n := vecStageBytes(g) + 4*c["wg"]*g.m*(max(c["rows"], 1)+1) + 4*c["cols"]*g.m; n > caps.MaxSharedBytes {
		return fmt.Errorf("stage=1: %d bytes of shared memory with the reductions, the device has %d", n, caps.MaxSharedBytes)
	}
	return nil
}

// vecStageBytes is the shared memory a point with stage = 1 holds: x·gamma of every row, f32.
func vecStageBytes(g *gemm) int { return 4 * g.m * g.k }

// vecStageMost bounds vecStageBytes: 32 KiB (Llama-3.1-8B's 4096 features of one row take 16),
// so that a workgroup of 128 invocations still leaves an SM room for several.
const vecStageMost = 32 << 10

// vectorizable reports whether A's rows and B's columns are contiguous along K in whole vectors.
func (g *gemm) vectorizable(vec int) bool {
	return g.sak == 1 && g.sbk == 1 && g.k%vec == 0 && g.k > 1
}

func buildMatmulVec(p *Problem, c Config, caps Caps) (*Launch, error) {
	g, err := acceptGemm(p, caps)
	if err != nil {
		return nil, err
	}
	wgN, colsN, vec, unroll := c["wg"], c["cols"], c["vec"], max(c["unroll"], 1)
	if vec > 1 && !g.vectorizable(vec) {
		return nil, fmt.Errorf("vec=%d: operands are not contiguous along K in vectors", vec)
	}
	name := fmt.Sprintf("matmul_vec_r%d_v%d%s", g.m, vec, unrollSuffix(unroll))
	if c["stage"] > 0 {
		name += "_staged"
	}
	b := newBuilder(name, caps)
	bufs, binds := declareGemm(b, p, g, vec, vec)
	v := newVecFrame(b, p, g, caps, wgN, colsN, g.sbk == 1 && g.k > 1)
	R, rms := g.m, g.gammaArg >= 0
	var staged *codegen.Array // x·gamma of every row (stage = 1)
	if rms && c["stage"] > 0 {
		staged = v.stageNorm(bufs)
	}
	u := v.u
	vt := codegen.Vec(codegen.F32, vec)
	if vec == 1 {
		vt = codegen.F32
	}
	load := func(buf *codegen.Buffer, i codegen.Value) codegen.Value {
		v := b.Load(buf, i)
		if v.Type() != vt {
			v = b.Convert(v, vt)
		}
		return v
	}
	dot := func(x, y codegen.Value) codegen.Value {
		if vec == 1 {
			return b.Mul(x, y)
		}
		return b.Dot(x, y)
	}
	b.If(b.Lt(v.col, u(g.n)), func() {
		// In vector units when vec > 1: A's rows and B's columns then start at multiples of vec.
		kv := g.k / vec
		v.forK(u(kv), unroll, func(k codegen.Value) {
			var w codegen.Value
			switch {
			case vec > 1 && g.bT == ir.BF16:
				w = bf16Words(b, b.Load(bufs.b, b.Add(b.Div(v.bBase, u(vec)), b.Add(b.Mul(v.col, u(g.k/vec)), k))))
			case vec > 1:
				w = load(bufs.b, b.Add(b.Div(v.bBase, u(vec)), b.Add(b.Mul(v.col, u(g.k/vec)), k)))
			case g.bT == ir.BF16:
				w = bf16Word(b, bufs.b, b.Add(v.bBase, b.Add(b.Mul(k, u(g.sbk)), b.Mul(v.col, u(g.sbn)))))
			default:
				w = LoadAs(b, bufs.b, b.Add(v.bBase, b.Add(b.Mul(k, u(g.sbk)), b.Mul(v.col, u(g.sbn)))), g.bT)
			}
			var gm codegen.Value
			if rms && staged == nil {
				gm = load(bufs.gamma, k)
			}
			for r := 0; r < R; r++ {
				var x codegen.Value
				switch {
				case staged != nil:
					x = b.Load(staged, b.Add(u(r*g.k/4), k)) // vec = 4: k counts vec4s
				case vec > 1:
					x = load(bufs.a, b.Add(b.Div(v.aBase, u(vec)), b.Add(u(r*g.k/vec), k)))
				default:
					x = LoadAs(b, bufs.a, b.Add(v.aBase, b.Add(u(r*g.sam), b.Mul(k, u(g.sak)))), g.aT)
				}
				if rms && staged == nil {
					v.add(R+r, dot(x, x))
					x = b.Mul(x, gm)
				}
				v.add(r, dot(x, w))
			}
		})
	})
	l, err := v.finish(bufs, binds, caps, map[string]int{"wg": wgN, "cols": colsN})
	if err != nil {
		return nil, err
	}
	g.cost(p, l)
	return l, nil
}

// unrollSuffix names an unrolled kernel ("" at unroll 1, so that the kernels of the points that
// existed before the parameter keep their names).
func unrollSuffix(unroll int) string {
	if unroll <= 1 {
		return ""
	}
	return fmt.Sprintf("_u%d", unroll)
}

// forK runs body(k) for k = ki, ki+kp, … < n: the invocation's share of a column's K loop.
// With unroll > 1 the loop takes unroll steps an iteration, unroll copies of body in straight-line
// code with no test between them, so that their loads are all issued before the first product
// waits on one (more bytes in flight per invocation); the last, partial iteration runs the
// steps one at a time.
func (v *vecFrame) forK(n codegen.Value, unroll int, body func(k codegen.Value)) {
	b := v.b
	if unroll <= 1 {
		b.For(v.ki, n, v.kp, body)
		return
	}
	k := b.Var("k", v.ki)
	last := b.Mul(v.kp, v.u(unroll-1)) // the offset of an iteration's last step
	b.While(func() codegen.Value { return b.Lt(b.Add(b.Get(k), last), n) }, func() {
		k0 := b.Get(k)
		for j := 0; j < unroll; j++ {
			if j == 0 {
				body(k0)
			} else {
				body(b.Add(k0, b.Mul(v.kp, v.u(j))))
			}
		}
		b.Set(k, b.Add(k0, b.Mul(v.kp, v.u(unroll))))
	})
	b.While(func() codegen.Value { return b.Lt(b.Get(k), n) }, func() {
		k0 := b.Get(k)
		body(k0)
		b.Set(k, b.Add(k0, v.kp))
	})
}

// vecFrame is the frame of a matrix-vector kernel that MatmulVec and the block-quantized
// MatmulVecQ share: cols output columns per workgroup, each column's K reduction split over
// kp = wg/cols invocations that accumulate per-row partial sums (and, for rmsnorm_linear, Σx²),
// then combined by a subgroup add and shared memory (or a shared-memory tree) and stored
// through the epilogue. A template builds its K loop between newVecFrame and finish.
type vecFrame struct {
	b      *codegen.Builder
	p      *Problem
	g      *gemm
	kFast  bool // invocations of a column are consecutive (K is B's contiguous axis)
	wgN    int
	colsN  int
	wg     codegen.Value
	cols   codegen.Value
	kp     codegen.Value // invocations per column
	li     codegen.Value
	ci, ki codegen.Value // column within the workgroup, invocation within the column
	col    codegen.Value // the output column (B's column, W's row)
	batch  codegen.Value
	aBase  codegen.Value // element offsets of the batch's A and B matrices
	bBase  codegen.Value
	// per is how many consecutive columns each column group (its kp invocations) computes,
	// from col on: they share every load of x (MatmulVecQ's rows; 1 elsewhere).
	per int
	// sums, column after column (per of them), each: per row the products; then, for
	// rmsnorm_linear, Σx² (the same for every column; only the first column's is summed).
	sums []*codegen.Var
	// ss, when set (stageNorm), is each row's Σx² for rmsnorm_linear, summed before the K loop:
	// the column groups then keep no Σx² of their own.
	ss    []codegen.Value
	useSG bool // subgroup adds, then shared memory across a column's subgroups
	// sgAdd: the device adds over a subgroup (of sgSize invocations, as Caps says).
	sgAdd  bool
	sgSize int
	// useShuffle: a column's invocations lie in one subgroup (or are one invocation): a
	// butterfly of shuffle-xors.
	useShuffle bool
}

func (v *vecFrame) u(x int) codegen.Value { return v.b.U32(uint32(x)) }

// add accumulates x into partial sum i (row i, or Σx² of row i−R) of the first column.
func (v *vecFrame) add(i int, x codegen.Value) { v.addAt(0, i, x) }

// addAt accumulates x into partial sum i of the group's column c (0 ≤ c < per).
func (v *vecFrame) addAt(c, i int, x codegen.Value) {
	s := v.sums[c*v.nred()+i]
	v.b.Set(s, v.b.Add(v.b.Get(s), x))
}

// nred is the number of partial sums a column keeps: one per row, and Σx² per row for
// rmsnorm_linear.
func (v *vecFrame) nred() int {
	if v.g.gammaArg >= 0 && v.ss == nil {
		return 2 * v.g.m
	}
	return v.g.m
}

// loadF4 is element i of a buffer of four-element vectors, as an f32 vec4 (f16 and bf16 ones
// converted).
func loadF4(b *codegen.Builder, buf *codegen.Buffer, i codegen.Value) codegen.Value {
	f4 := codegen.Vec(codegen.F32, 4)
	x := b.Load(buf, i)
	if x.Type() != f4 {
		x = b.Convert(x, f4)
	}
	return x
}

// stageNorm writes rmsnorm_linear's h = x·gamma of every row of x into shared memory (vec4s, row
// after row) and sums each row's Σx² over the workgroup into v.ss, before the K loop, which then
// reads h from the returned array instead of x and gamma. It must run in uniform control flow
// (it ends at a barrier) and replaces the frame's partial sums with ones that keep no Σx².
func (v *vecFrame) stageNorm(bufs gemmBufs) *codegen.Array {
	b, g, u := v.b, v.g, v.u
	R, K4 := g.m, g.k/4
	h := b.Shared("h", codegen.Vec(codegen.F32, 4), u(R*K4))
	part := make([]codegen.Value, R)
	for r := range part {
		acc := b.Var("ssq", b.F32(0))
		b.For(v.li, u(K4), v.wg, func(i codegen.Value) {
			x := loadF4(b, bufs.a, b.Add(b.Shr(v.aBase, u(2)), b.Add(u(r*K4), i)))
			b.Set(acc, b.Add(b.Get(acc), b.Dot(x, x)))
			b.Store(h, b.Add(u(r*K4), i), b.Mul(x, loadF4(b, bufs.gamma, i)))
		})
		part[r] = b.Get(acc)
	}
	// Σ over the workgroup: subgroup adds, one value a subgroup in shared memory, each
	// invocation adding those; else a shared-memory tree (wg is a power of two).
	red := b.Shared("ssq_red", codegen.F32, b.Mul(v.wg, u(R)))
	v.ss = make([]codegen.Value, R)
	if v.sgAdd && v.wgN%max(v.sgSize, 1) == 0 {
		sg := b.SubgroupSize()
		sgID := b.Div(v.li, sg)
		lane0 := b.Eq(b.SubgroupInvocation(), u(0))
		for r := range part {
			t := b.SubgroupAdd(part[r])
			b.If(lane0, func() { b.Store(red, b.Add(b.Mul(u(r), v.wg), sgID), t) })
		}
		b.Barrier()
		for r := range part {
			t := b.Var("ss", b.F32(0))
			b.For(u(0), b.Div(v.wg, sg), u(1), func(j codegen.Value) {
				b.Set(t, b.Add(b.Get(t), b.Load(red, b.Add(b.Mul(u(r), v.wg), j))))
			})
			v.ss[r] = b.Get(t)
		}
	} else {
		for r := range part {
			b.Store(red, b.Add(b.Mul(u(r), v.wg), v.li), part[r])
		}
		b.Barrier()
		half := b.Var("half", b.Div(v.wg, u(2)))
		b.While(func() codegen.Value { return b.Gt(b.Get(half), u(0)) }, func() {
			hv := b.Get(half)
			b.If(b.Lt(v.li, hv), func() {
				for r := range part {
					i := b.Add(b.Mul(u(r), v.wg), v.li)
					b.Store(red, i, b.Add(b.Load(red, i), b.Load(red, b.Add(i, hv))))
				}
			})
			b.Barrier()
			b.Set(half, b.Div(hv, u(2)))
		})
		for r := range part {
			v.ss[r] = b.Load(red, b.Mul(u(r), v.wg))
		}
	}
	v.sums = make([]*codegen.Var, v.per*v.nred())
	for r := range v.sums {
		v.sums[r] = b.Var(fmt.Sprintf("s%d", r), b.F32(0))
	}
	return h
}

// colAt is the column the group's c-th column reads: col + c, clamped to the last column so that
// a group past the last column reads in bounds (its results are not stored).
func (v *vecFrame) colAt(c int) codegen.Value {
	if c == 0 {
		return v.col
	}
	return v.b.Min(v.b.Add(v.col, v.u(c)), v.u(v.g.n-1))
}

// newVecFrame declares the workgroup size, the layout of invocations and the partial sums.
// Invocations are laid out along K within a column when kFast (a column's reads are then
// consecutive), else along N (the columns of one k are).
func newVecFrame(b *codegen.Builder, p *Problem, g *gemm, caps Caps, wgN, colsN int, kFast bool) *vecFrame {
	return newVecFrameN(b, p, g, caps, wgN, colsN, 1, kFast)
}

// newVecFrameN is newVecFrame whose column groups compute per consecutive columns each (col is
// the first; colAt the others).
func newVecFrameN(b *codegen.Builder, p *Problem, g *gemm, caps Caps, wgN, colsN, per int, kFast bool) *vecFrame {
	v := &vecFrame{b: b, p: p, g: g, kFast: kFast, wgN: wgN, colsN: colsN, per: per}
	v.wg = b.Spec("wg", codegen.U32, int64(wgN))
	v.cols = b.Spec("cols", codegen.U32, int64(colsN))
	b.WorkgroupSize(v.wg, b.U32(1), b.U32(1))
	v.kp = b.Div(v.wg, v.cols)
	sgSize := max(caps.SubgroupSize, 1)
	kpN := wgN / colsN
	// A column's kp invocations within one subgroup (or a single one): a butterfly of shuffles
	// sums them in registers, no shared memory or barrier; several columns share a subgroup.
	v.useShuffle = kpN == 1 || kFast && caps.SubgroupShuffle && caps.SubgroupSize > 0 && kpN <= sgSize && sgSize%kpN == 0
	v.useSG = !v.useShuffle && kFast && caps.SubgroupArithmetic && caps.SubgroupSize > 0 && kpN%sgSize == 0
	v.sgAdd, v.sgSize = caps.SubgroupArithmetic && caps.SubgroupSize > 0, caps.SubgroupSize
	v.li = b.LocalIndex()
	if kFast {
		v.ci, v.ki = b.Div(v.li, v.kp), b.Rem(v.li, v.kp)
	} else {
		v.ci, v.ki = b.Rem(v.li, v.cols), b.Div(v.li, v.cols)
	}
	wid := b.WorkgroupID()
	v.col = b.Add(b.Mul(b.X(wid), v.cols), v.ci)
	if per > 1 {
		v.col = b.Mul(v.col, v.u(per))
	}
	v.batch = b.Y(wid)
	v.aBase = b.Mul(BroadcastIndex(b, v.batch, g.batch, g.aBatch), v.u(g.aMat))
	v.bBase = b.Mul(BroadcastIndex(b, v.batch, g.batch, g.bBatch), v.u(g.bMat))
	v.sums = make([]*codegen.Var, per*v.nred())
	for r := range v.sums {
		v.sums[r] = b.Var(fmt.Sprintf("s%d", r), b.F32(0))
	}
	return v
}

// finish combines the kp partial sums of each column, applies rmsnorm's scale, the bias and the
// epilogue, stores the results, and returns the one-step Launch (its cost left to the caller).
// binds are the operands of the buffers declared so far (the op's arguments); the epilogue's
// buffers are declared here, after them.
func (v *vecFrame) finish(bufs gemmBufs, binds []Operand, caps Caps, vals map[string]int) (*Launch, error) {
	b, g, p, u := v.b, v.g, v.p, v.u
	epi, eb := declareEpilogue(b, p, g.opType)
	binds = append(binds, eb...)
	R, rms := g.m, g.gammaArg >= 0
	wg, cols, kp, li, ci, ki := v.wg, v.cols, v.kp, v.li, v.ci, v.ki
	zero := b.F32(0)
	total := make([]codegen.Value, len(v.sums))
	lead := b.Eq(ki, u(0))
	var red *codegen.Array
	if !v.useShuffle {
		red = b.Shared("red", codegen.F32, b.Mul(wg, u(len(v.sums))))
	}
	if v.useShuffle {
		// kp is a power of two dividing the subgroup, and a column's invocations are
		// consecutive from a multiple of kp: masks below kp stay within the column.
		for r := range v.sums {
			s := b.Get(v.sums[r])
			for m := v.wgN / v.colsN / 2; m >= 1; m /= 2 {
				s = b.Add(s, b.SubgroupShuffleXor(s, u(m)))
			}
			total[r] = s
		}
	} else if v.useSG {
		sg := b.SubgroupSize()
		sgID := b.Div(li, sg)
		nsg := b.Div(kp, sg) // subgroups per column
		lane0 := b.Eq(b.SubgroupInvocation(), u(0))
		for r := range v.sums {
			s := b.SubgroupAdd(b.Get(v.sums[r]))
			b.If(lane0, func() { b.Store(red, b.Add(b.Mul(u(r), wg), sgID), s) })
		}
		b.Barrier()
		for r := range v.sums {
			t := b.Var("t", zero)
			b.If(lead, func() {
				first := b.Mul(ci, nsg)
				b.For(u(0), nsg, u(1), func(s codegen.Value) {
					b.Set(t, b.Add(b.Get(t), b.Load(red, b.Add(b.Mul(u(r), wg), b.Add(first, s)))))
				})
			})
			total[r] = b.Get(t)
		}
	} else {
		for r := range v.sums {
			b.Store(red, b.Add(b.Mul(u(r), wg), li), b.Get(v.sums[r]))
		}
		b.Barrier()
		// Tree over the kp parts of each column: part ki adds part ki+s; kp is a power of two.
		stride := cols // distance in li between consecutive parts of one column
		if v.kFast {
			stride = u(1)
		}
		s := b.Var("half", b.Div(kp, u(2)))
		b.While(func() codegen.Value { return b.Gt(b.Get(s), u(0)) }, func() {
			h := b.Get(s)
			b.If(b.Lt(ki, h), func() {
				for r := range v.sums {
					i := b.Add(b.Mul(u(r), wg), li)
					j := b.Add(i, b.Mul(h, stride))
					b.Store(red, i, b.Add(b.Load(red, i), b.Load(red, j)))
				}
			})
			b.Barrier()
			b.Set(s, b.Div(h, u(2)))
		})
		for r := range v.sums {
			total[r] = b.Load(red, b.Add(b.Mul(u(r), wg), li))
		}
	}
	nred := v.nred()
	colN := func(c int) codegen.Value { // column c of the group, unclamped
		if c == 0 {
			return v.col
		}
		return b.Add(v.col, u(c))
	}
	finishAt := func(c, r int) codegen.Value {
		var ss codegen.Value
		switch {
		case v.ss != nil:
			ss = v.ss[r]
		case rms:
			ss = total[R+r] // the first column's Σx², the same x for every column
		}
		return g.finish(b, p, bufs, total[c*nred+r], ss, colN(c))
	}
	finish := func(r int) codegen.Value { return finishAt(0, r) }
	switch {
	case v.per > 1 && epi.paired():
		// per is even: a pair of columns is two of the group's own.
		for c := 0; c < v.per; c += 2 {
			b.If(b.And(lead, b.Lt(colN(c), u(g.n))), func() {
				for r := 0; r < R; r++ {
					epi.storePair(b, u(r), colN(c), finishAt(c, r), finishAt(c+1, r))
				}
			})
		}
	case v.per > 1:
		outBase := b.Mul(v.batch, u(g.m*g.n))
		for c := 0; c < v.per; c++ {
			b.If(b.And(lead, b.Lt(colN(c), u(g.n))), func() {
				for r := 0; r < R; r++ {
					epi.store(b, b.Add(outBase, b.Add(u(r*g.n), colN(c))), finishAt(c, r))
				}
			})
		}
	case epi.paired():
		// Column parts take pairs of columns: each column's lead puts its values in shared
		// memory, the lead of the even column of a pair (cols is even) stores both.
		pv := b.Shared("pair", codegen.F32, b.Mul(cols, u(R)))
		b.If(b.And(lead, b.Lt(v.col, u(g.n))), func() {
			for r := 0; r < R; r++ {
				b.Store(pv, b.Add(b.Mul(u(r), cols), ci), finish(r))
			}
		})
		b.Barrier()
		even := b.Eq(b.Rem(ci, u(2)), u(0))
		b.If(b.And(b.And(lead, even), b.Lt(v.col, u(g.n))), func() {
			for r := 0; r < R; r++ {
				at := b.Add(b.Mul(u(r), cols), ci)
				epi.storePair(b, u(r), v.col, b.Load(pv, at), b.Load(pv, b.Add(at, u(1))))
			}
		})
	default:
		b.If(b.And(lead, b.Lt(v.col, u(g.n))), func() {
			outBase := b.Mul(v.batch, u(g.m*g.n))
			for r := 0; r < R; r++ {
				epi.store(b, b.Add(outBase, b.Add(u(r*g.n), v.col)), finish(r))
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
	sp, err := specFor(k, vals)
	if err != nil {
		return nil, err
	}
	grid := [3]uint32{uint32(ceilDiv(g.n, v.colsN*v.per)), uint32(g.batches()), 1}
	if int(grid[0]) > caps.MaxGroups[0] {
		return nil, fmt.Errorf("grid %v exceeds the device's limits %v", grid, caps.MaxGroups)
	}
	// Batches are the grid's y; a run-time length along M (few rows, all in one workgroup)
	// keeps the grid.
	return &Launch{Steps: []Step{{Kernel: k, Spec: sp, Grid: grid, Bindings: binds, Scale: g.scale(p, -1, 0, 1)}}}, nil
}

// vecStatic is MatmulVec's static choice. On a GPU the space's order stands (wg=128, cols=2:
// the point the H200's tuner kept for SmolLM2's decode). On a CPU implementation (lavapipe) a
// workgroup runs as a loop over its subgroups, each workgroup costs its scheduling, and a
// barrier splits a workgroup into resumable parts, so a column reduced across subgroups (shared
// memory and a barrier, in each of thousands of small workgroups) is slow: there many columns
// share a workgroup and a column's invocations lie in one subgroup (a shuffle reduction, no
// barrier). On lavapipe (BenchmarkMatvecPoints, CPU time a run) SmolLM2's LM head, 49152×576
// f16 with its rmsnorm, took 276 ms at the space's first point, 102 ms at wg=128, cols=16 (a
// column a subgroup) and 95 ms at wg=64, cols=32 (two invocations a column), the point the
// static selection's own sweep found for the 128k LM head (docs/tuning.md, "Static choices");
// the SwiGLU and down projections were 1.09× faster at it than at wg=128, cols=16 too.
//
// rmsnorm_linear takes each with x·gamma staged first (stage = 1, where it fits; Build takes the
// first valid point): on lavapipe (BenchmarkMatvecPoints, CPU time) the f16 LM head 49152×576
// took 41.0–41.5 against 66.6–69.4 ms (1.62–1.70×), the SwiGLU projection 3072×576 2.4–2.7
// against 4.3–4.7 ms. On a GPU the space's first point stands (stage = 0, not measured there);
// the staged points come first among the suggestions a measured compile times.
func vecStatic(p *Problem, caps Caps) []Config {
	pts := cpuVecPoints(caps, "vec", []int{4, 2, 1}, [][2]int{{64, 32}, {32, 16}})
	return append(withStage(pts), pts...)
}

// cpuVecPoints are the static candidates of the matrix-vector templates on a CPU implementation
// (see vecStatic), for each value of the template's width parameter (vec or span) in turn: the
// (wg, cols) points of first, then a column a subgroup at 128, 64 and 32 invocations a workgroup
// (fewer columns, for problems with few); none on a GPU.
func cpuVecPoints(caps Caps, width string, widths []int, first [][2]int) []Config {
	if !caps.CPU || caps.SubgroupSize < 1 {
		return nil
	}
	var out []Config
	for _, w := range widths {
		for _, wc := range first {
			out = append(out, Config{"wg": wc[0], "cols": wc[1], width: w, "unroll": 1, "stage": 0})
		}
		for _, wg := range []int{128, 64, 32} {
			if wg >= caps.SubgroupSize {
				out = append(out, Config{"wg": wg, "cols": wg / caps.SubgroupSize, width: w, "unroll": 1, "stage": 0})
			}
		}
	}
	return out
}

// vecQStatic is MatmulVecQ's static choice (see vecStatic): on lavapipe 16 columns (its most)
// of two invocations each. Lowering's static selection breaks a roofline tie on a CPU device in
// favour of the launch of fewer invocations, and on one row matmul_tiled's 64×64 tile of 256
// invocations ties with the estimate of this template: at four invocations a column (the same
// count) the tie kept matmul_tiled, which on lavapipe took 21–30× this template's CPU time
// (SmolLM2-shaped Q5_0 3072×576, Q4_K 576×1536, Q8_0 49152×576 products) and made a Q4_K_M
// file's decode 8 s a token. At two a column, SmolLM2-shaped products (BenchmarkMatvecPoints)
// ran 0.81× (the Q6_K LM head, 49152×768) and 1.02× (Q4_K SwiGLU, 3072×768) as fast as at four,
// and 1.6–2.5× as fast as at the space's first point.
//
// A one-row product (decode) first takes 8 groups of 4 columns (rows = 4: each x load serves four
// columns) of 4 invocations each, then 16 groups of 2 columns: on lavapipe (BenchmarkMatvecPoints,
// CPU time) the Q6_K LM head ran 1.46× and 1.28× as fast as at rows = 1, the Q4_K SwiGLU
// projection 2.17× and 1.63×. Products of several rows keep rows = 1: their kernels' code
// grows with rows × x's rows, and lavapipe's compile of an 8-row kernel already takes 20 s and
// more (IQ4_XS: 80 s without a shader cache).
//
// rmsnorm_linear takes each of these with x·gamma staged in shared memory first (stage = 1;
// 1.41× as fast at the first point on lavapipe, the LM head and the SwiGLU projection alike).
//
// On a GPU see vecQGPUStatic.
func vecQStatic(p *Problem, caps Caps) []Config {
	if !caps.CPU {
		return vecQGPUStatic(p, caps)
	}
	base := dropUnroll(cpuVecPoints(caps, "span", []int{1, 2, 4}, [][2]int{{32, 16}}))
	if len(base) == 0 {
		return nil
	}
	var first []Config
	if g, err := readGemm(p); err == nil && g.m == 1 {
		first = []Config{{"wg": 32, "cols": 8, "span": 1, "rows": 4}, {"wg": 32, "cols": 16, "span": 1, "rows": 2}}
	}
	out := append(first, withRows(base, 1)...)
	for _, c := range out {
		c["split"], c["stage"] = 0, 0
	}
	// rmsnorm_linear with x·gamma staged first where it fits (Build takes the first valid
	// point): on lavapipe (BenchmarkMatvecPoints, CPU time) the Q6_K LM head 49152×768 took 46.5
	// against 66.2 ms at the first point, the Q4_K SwiGLU projection 3072×768 1.61 against 2.25.
	return append(withStage(out), out...)
}

// vecQGPUStatic is MatmulVecQ's static choice on a GPU. Every invocation of a column group
// should have a unit of its column's K to read (units = K's blocks × units a block at span), and
// the product enough invocations to fill the device; the space's first point (a subgroup of 32
// a column group, span 4: 128 elements a unit, two columns an invocation) has neither at K =
// 2048 or N = 512, Llama-3.2-1B's shapes: K = 2048 of a K-quant is 16 units at span 4, so half
// of each column's 32 invocations read nothing, and its K/V projection (512 columns) ran 64
// workgroups, 24 µs for 1.7 MB of Q6_K (docs/bench/h200-2026-12-05, call 8).
//
// So: a column group of a subgroup (kp = 32 on NVIDIA), span 2 where K has a unit for each of
// them (at K ≥ 4096 of the K-quants span 2 measured fastest of the suggested points at every 8B
// shape but one on the H200, call 8), else span 1; a format of a byte a quant (Q8_0) span 4
// where K has the units (on the H100, docs/bench/h100-2026-12-06 call 3, span 4 was in the best
// point of Q8_0 at every shape of 2048 columns or more, and span 2 took 15.8 µs at 4096² where
// span 4 took 13.4); two columns an invocation while that leaves
// vecQMinInvocations invocations, else one; below that the column groups grow (64, 128
// invocations) as far as K has units for them; a K of fewer units than a subgroup shrinks them.
// 128 invocations a workgroup. A format of a byte a quant at span 4 takes four columns an
// invocation or larger column groups instead (vecQByteRows).
func vecQGPUStatic(p *Problem, caps Caps) []Config {
	g, err := readGemm(p)
	if err != nil {
		return nil
	}
	f := g.bT.Format()
	if f == nil || f.Layout == nil || caps.SubgroupSize < 1 {
		return nil
	}
	words := f.Layout.Low.Radix[0] / 4
	units := func(span int) int {
		if words%span != 0 {
			return 0
		}
		return g.k / f.BlockElems * (words / span)
	}
	const wg = 128
	kp := min(caps.SubgroupSize, wg)
	span := 2
	if f.BlockElems/words <= 4 && units(4) >= kp {
		span = 4 // a byte a quant (Q8_0): a unit of 16 bytes
	}
	for span > 1 && units(span) < kp {
		span /= 2
	}
	for kp > 1 && units(1) < kp {
		kp /= 2 // a short K: smaller column groups, more of them a workgroup
	}
	rows := 2
	switch {
	case span == 4:
		// A byte a quant: four columns an invocation where that leaves vecQMinInvocations
		// invocations, else two, with column groups of 64 or 128 invocations while the product
		// has no more than vecQMinInvocations (vecQByteRows).
		if g.n/vecQByteRows*kp >= vecQMinInvocations {
			rows = vecQByteRows
		}
		for rows == 2 && g.n/rows*kp <= vecQMinInvocations && 2*kp <= wg && units(4) >= 2*kp {
			kp *= 2
		}
	default:
		if g.n/rows*kp < vecQMinInvocations {
			rows = 1
		}
		for g.n*kp < vecQMinInvocations && 2*kp <= wg && units(1) >= 2*kp {
			kp *= 2
			span = 1
		}
	}
	split := 0
	if sp := splitOf(f); rows == 2 && span == 2 && g.gammaArg < 0 && sp.groups > 1 && units(4)*sp.groups >= kp &&
		(f.BlockBytes%4 != 0 || g.n/rows*kp < vecQSplitInvocations) {
		span, split = 4, 1
	}
	// stage = 0: x·gamma staged (stage = 1) is not measured on a GPU yet; it is among the
	// suggestions, so a measured compile times it (docs/decode.md).
	return []Config{{"wg": wg, "cols": wg / kp, "span": span, "rows": rows, "split": split, "stage": 0}}
}

// vecQSplitInvocations: below it a GPU static choice of MatmulVecQ at two columns an invocation
// spreads a block's runs over its invocations (split = 1, at span 4). On the H100
// (docs/bench/h100-2026-12-06, session 10) split at span 4 read Q4_K faster where a product has
// few invocations (4096×4096: 10.7 against 11.3 µs; the down projection, 4096×14336: 28.2
// against 33.2) and slower where it fills the device (28672×4096: 47.9 against 44.2, the LM
// head 128256×4096: 192 against 171); Q6_K (210-byte blocks, not word-aligned: at split = 0
// each word costs a load of two and a funnel shift) faster at every shape of 4096 columns or
// more (4096×14336: 38.3 against 49.3; 28672×4096: 60.3 against 63.5), so a format whose blocks
// are not word-aligned splits at any size. Not rmsnorm_linear: in the 8B Q4_K_M decode plan
// (same call) its products split ran slower than unsplit (the Q6_K LM head 335 against 276 µs,
// the Q4_K QKV projection with its cache writes 21.7 against 18.4 µs a layer) where linear's
// ran faster (the down projections 41.7 against 53.3 µs in Q6_K, 31.3 against 36.7 in Q4_K; the
// output projection 12.7 against 13.6): the norm's gamma and Σx² beside each load of x.
const vecQSplitInvocations = 1 << 17

// vecQByteRows is Q8_0's static columns an invocation where the product keeps
// vecQMinInvocations invocations with them (vecQGPUStatic). On the H100
// (docs/bench/h100-2026-12-06, session 14, s14call1 and s13call5) at two columns an invocation
// and groups of 32 the 8B decode plan's gate and up projections (rmsnorm_linear, 14336×4096)
// took 44.6 µs, at four columns 33.6 (as a linear 31.1 and 29.7):
// each invocation's loads of x, gamma and its Σx² serve four columns. Where four would leave too
// few invocations, groups of 64 read faster: the down projection (4096×14336) 30.8 against
// 37.8 µs, 4096² 11.7 against 13.5 (rmsnorm_linear 15.2 against 16.2), and the K/V projection
// (1024×4096, rmsnorm_linear) 7.9 against 9.6 µs at span 1, one column an invocation (the
// former choice); four columns at 4096² took 17.2–19.7 µs.
const vecQByteRows = 4

// vecQMinInvocations is the invocations a GPU static choice of MatmulVecQ wants a product to
// have: a quarter of what an H100's 132 SMs hold at once (2048 each).
const vecQMinInvocations = 1 << 16

// vecQSuggest proposes the points a budgeted search of MatmulVecQ measures first. On a CPU
// implementation: vecSuggest's (a column a subgroup or two invocations a column, span 1), at one
// and two columns an invocation. On a GPU, around the default (wg=128, cols=4, span=4, rows=2):
// one and four columns an invocation, span 2, two subgroups a column group, 256 invocations of
// 8 groups, 64 of 2, one column group of 256 (few long columns), the former default
// (wg=128, cols=2, span=1, rows=1: the figures of docs/bench/h200-2026-12-05) for reference,
// four columns an invocation at span 2, column groups of 128 at span 4, then for rmsnorm_linear
// the default and three of those with x·gamma staged (stage = 1), and four points with a block's
// runs over the invocations (split).
func vecQSuggest(p *Problem, caps Caps) []Config {
	if caps.CPU {
		cs := dropUnroll(vecSuggest("span", 1)(p, caps))
		out := append(withRows(cs, 1), withRows(cs, 2)...)
		for _, c := range out {
			c["split"], c["stage"] = 0, 0
		}
		return append(out, withStage(out[:min(2, len(out))])...)
	}
	pt := func(wg, cols, span, rows, split int) Config {
		return Config{"wg": wg, "cols": cols, "span": span, "rows": rows, "split": split, "stage": 0}
	}
	// rmsnorm_linear: the default and the first suggestions with x·gamma staged too (the
	// space's Where drops them for the other problems). On the H100 staged lost at the 8B
	// shapes (14336×4096 Q8_0: 50.0 against 44.6 µs; s14call1) and won at 1024×4096, so they
	// follow the unstaged points.
	staged := withStage([]Config{pt(128, 4, 4, 2, 0), pt(128, 4, 4, 1, 0), pt(128, 4, 2, 2, 0), pt(128, 2, 4, 2, 0)})
	out := []Config{pt(128, 4, 4, 1, 0), pt(128, 4, 4, 4, 0), pt(128, 4, 2, 4, 0), pt(128, 4, 2, 2, 0), pt(128, 2, 4, 2, 0),
		pt(128, 1, 4, 2, 0), pt(256, 8, 4, 2, 0), pt(64, 2, 4, 2, 0), pt(256, 1, 4, 1, 0), pt(256, 1, 4, 2, 0), pt(128, 2, 1, 1, 0)}
	return append(append(out, staged...),
		// A block's runs over consecutive invocations (split): span 2 and 4 at the default's
		// groups, and a column group of 64 or 128 invocations at span 2 (the best Q6_K points of
		// the H100's down projection and 1B shapes). Split at span 1, at one column an invocation
		// and at four were the best point at no shape measured (docs/bench/h100-2026-12-06,
		// session 10: span 1 the slowest everywhere).
		pt(128, 4, 2, 2, 1), pt(128, 4, 4, 2, 1), pt(64, 1, 2, 2, 1), pt(128, 1, 2, 2, 1))
}

// withStage is cs with stage set to 1 (copies).
func withStage(cs []Config) []Config {
	out := make([]Config, len(cs))
	for i, c := range cs {
		d := c.clone()
		d["stage"] = 1
		out[i] = d
	}
	return out
}

// withRows is cs with rows set to n (copies).
func withRows(cs []Config, n int) []Config {
	out := make([]Config, len(cs))
	for i, c := range cs {
		d := c.clone()
		d["rows"] = n
		out[i] = d
	}
	return out
}

// dropUnroll removes the unroll parameter, and the points that unroll, from cs.
func dropUnroll(cs []Config) []Config {
	var out []Config
	for _, c := range cs {
		if c["unroll"] > 1 {
			continue
		}
		d := c.clone()
		delete(d, "unroll")
		out = append(out, d)
	}
	return out
}

// vecSuggest proposes the points a budgeted search of a matrix-vector template measures first,
// after the static choice and the default: on a GPU the default unrolled by 2 and by 4 (more
// loads in flight), 256 invocations unrolled by 2, a column a subgroup (shuffle reductions,
// several columns a workgroup) plain and unrolled, and one column a workgroup of 256 (the
// most invocations a column, for few long columns); on a CPU implementation the static
// candidates. width names the template's load-width parameter (vec or span) and w its default.
func vecSuggest(width string, w int) func(p *Problem, caps Caps) []Config {
	return func(p *Problem, caps Caps) []Config {
		if caps.CPU {
			return cpuVecPoints(caps, width, []int{w}, [][2]int{{64, 32}, {64, 16}, {32, 16}})
		}
		pt := func(wg, cols, unroll int) Config {
			return Config{"wg": wg, "cols": cols, width: w, "unroll": unroll, "stage": 0}
		}
		out := []Config{pt(128, 2, 2), pt(128, 2, 4), pt(256, 2, 2)}
		if sg := caps.SubgroupSize; sg > 0 && 128%sg == 0 {
			out = append(out, pt(128, 128/sg, 1), pt(128, 128/sg, 2))
		}
		return append(out, pt(256, 1, 1), pt(256, 1, 2))
	}
}
