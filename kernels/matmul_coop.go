package kernels

import (
	"fmt"
	"math"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
)

// MatmulCoop computes matmul, linear and rmsnorm_linear on cooperative matrices (tensor cores):
// A and B both f16 or both bf16, f32 accumulation, the
// device's M×N×K product shape for that pair (16×16×16 on the H200). A workgroup of
// warps_m × warps_n subgroups computes a block of (warps_m·tiles_m·M) × (warps_n·tiles_n·N) of
// C; each subgroup holds tiles_m × tiles_n accumulators. The block's A and B slices, k_steps·K
// deep, are staged in shared memory as 16-byte units (eight 16-bit elements, loaded from device
// memory as vec4<u32>, one unit per load) in whichever axis is contiguous in memory, rows padded by
// one unit so that the matrix loads of a subgroup hit distinct banks; transposed operands (ta, tb,
// linear's W [N, K]) are read as column-major matrices, never copied. With stages = 2 the slices
// are double-buffered (one barrier per slice: the next slice's loads are issued before the
// products and stored to the other buffer after them); with stages = 1 the next slice waits in
// registers for a second barrier, as in matmul_tiled.
//
// lean = 1 spends fewer registers: a subgroup's B matrices of a step are loaded first and its
// A matrices one at a time, each multiplied by all of them (tn + 1 operand matrices held, not
// tm + tn), and, double-buffered, the next slice is stored to the other buffer as soon as it
// arrives, before the products, instead of waiting in registers through them. On the H100 the
// 128×128 blocks (4×4 matrices of 16×16 f32 accumulators, 128 registers of them) held 255
// registers at lean = 0, the most an invocation has (VKC_PIPELINE_STATS=1,
// BenchmarkCoopShapes, docs/bench/h100-2026-12-06 session 11): lean is for them.
//
// The prologue and epilogues are matmul_tiled's: rmsnorm_linear folds gamma into the B slice as it
// is staged and sums the squares of each row of A from the staged units (every unit of a row is
// staged by the same invocation at every depth, so its partial sums stay in registers and meet in
// shared memory at the end); the accumulators are stored, one matrix at a time, to a shared
// scratch of their subgroup, whose invocations then apply the 1/rms scale, the bias and the
// problem's fused epilogue (residual, activation, SwiGLU, casts) element by element through
// gemm.finish and the epilogue writer, as matmul_tiled does.
//
// Split-K (split_k = S > 1) is for products too small to fill the device, such as a 128-token
// prefill's projections: 18 workgroups of 64×64 for a 128×576 result, each walking K = 576 in 18
// dependent slices, one global-memory round trip each, left the H200 at ~3 TFLOP/s. The k range
// is cut into S runs of whole slices, one per workgroup along z (S times the workgroups, a
// fraction of the chain each); each stores its f32 accumulators with matrix stores into a scratch
// of partials padded to whole blocks (and, for rmsnorm, its rows' partial sums of squares), and a
// second step sums the S partials of each element in a fixed order (deterministic: the same sum
// whichever workgroup finished first) and applies the scale, the bias and the epilogue (column
// parts too) once. The price is a second dispatch behind a barrier (~2 µs on the H200) and S·M·N
// floats of scratch (capped at coopSplitScratch).
//
// A block-quantized B (any format of ir/quant's table the kernels read: QuantizedDTypes) with
// an f16 A: the B slice is dequantized as it is staged, eight elements of a row of W (a unit;
// blocks run along K, so the unit lies in one block) decoded from the format's layout two
// quads at a time (quantRows.quad, exactly ggml's values in f32), rounded to f16 and stored as
// the unit an f16 B would have staged; the products are then f16 matrices. Rounding the
// dequantized weights to f16 is the product's one approximation (relative 2^-11 per weight,
// as llama.cpp's f16 matrix-core paths do); nothing else changes. Only where B's blocks run
// along the product's K (linear's W, matmul with tb). Such roundings of the product's terms
// make the launch declare a tolerance (coopTolerance).
//
// Limits: the contiguous axis of A and of B (K for A and linear's W, M for a transposed A, N for a
// row-major B) must be a multiple of 8, so that a unit never straddles a row; fewer than M rows
// (decode's single row) are left to the matrix-vector templates. Needs cooperative matrices, the
// Vulkan memory model, shaderFloat16 (f16 matrices) or bfloat16 (bf16 ones), and a
// minStorageBufferOffsetAlignment that keeps 16-byte units aligned. Grid: ceil(N/block_n) ×
// ceil(M/block_m) × batches. All tuning parameters are unrolled at build time (the matrix
// tiles are values, not arrays), so every point is a kernel of its own.
var MatmulCoop = &Template{
	Name: "matmul_coop",
	Accepts: func(p *Problem, caps Caps) error {
		_, _, err := acceptCoopGemm(p, caps)
		return err
	},
	Space: NewSpace(append(coopBlock(),
		Ints("stages", 2, 1),
		Ints("split_k", 1, 2, 3, 4, 6, 8, 12, 16),
	)...).Where(coopFits).Suggest(coopSuggest),
	Build: buildMatmulCoop,
}

// coopBlock are the block parameters of matmul_coop's space (and matmul_coop_dq's).
func coopBlock() []Param {
	return []Param{
		Ints("warps_m", 2, 1, 4),
		Ints("warps_n", 2, 1, 4),
		Ints("tiles_m", 2, 1, 4),
		Ints("tiles_n", 2, 4, 1),
		Ints("k_steps", 2, 1, 4, 6, 8),
		Ints("lean", 0, 1),
	}
}

func init() {
	// Cache parts (column parts writing a state) stop at the run's rows.
	MatmulCoop.ReadsLength = true
	MatmulCoop.Quantized = QuantizedDTypes()
	Register(MatmulCoop)
}

// coopGemm is what the cooperative-matrix matmul adds to a gemm: the matrix element type and the
// device's product shape.
type coopGemm struct {
	elem   codegen.Type // of A and B matrices (F16 or BF16)
	shape  CoopShape
	quantB bool // B is block-quantized, dequantized to f16 units as it is staged
	aF32   bool // A is f32, rounded to elem units as it is staged (rmsnorm_linear with act=elem)
}

// acceptCoopGemm checks p and the device for MatmulCoop.
func acceptCoopGemm(p *Problem, caps Caps) (*gemm, *coopGemm, error) {
	g, err := readGemm(p)
	if err != nil {
		return nil, nil, err
	}
	if len(caps.CoopShapes) == 0 || !caps.VulkanMemoryModel {
		return nil, nil, fmt.Errorf("the device has no cooperative matrices (or no Vulkan memory model)")
	}
	if caps.SubgroupSize <= 0 {
		return nil, nil, fmt.Errorf("the device's subgroup size is unknown")
	}
	if caps.MinStorageOffsetAlign%16 != 0 {
		return nil, nil, fmt.Errorf("operands aligned to %d bytes; 16-byte units need 16", caps.MinStorageOffsetAlign)
	}
	if err := coopDTypes(p, caps, g.bArg); err != nil {
		return nil, nil, err
	}
	if len(p.Parts) > 0 {
		if err := checkParts(p, g); err != nil {
			return nil, nil, err
		}
	} else if err := checkEpilogue(p, g.opType); err != nil {
		return nil, nil, err
	}
	if readsLength(p) && !partsReadLength(p) {
		return nil, nil, fmt.Errorf("a product's meaning does not depend on the run-time length; only cache parts read it")
	}
	c := &coopGemm{}
	switch {
	case g.bT == ir.F16:
		c.elem = codegen.F16
	case g.bT == ir.BF16:
		c.elem = codegen.BF16
	case g.bT.Quantized():
		// Dequantized into f16 units as the slice is staged (quantB).
		if !readsBlocks(g.bT) {
			return nil, nil, fmt.Errorf("kernels do not read %s blocks", g.bT)
		}
		if !g.bKContig() {
			return nil, nil, fmt.Errorf("B's %s blocks run along N, not the product's K", g.bT)
		}
		c.elem, c.quantB = codegen.F16, true
	default:
		return nil, nil, fmt.Errorf("B is %s; cooperative matrices take f16 or bf16", g.bT)
	}
	if g.op == ir.RMSNormLinear && g.aT == ir.F32 && g.opType.DType == map[codegen.Type]ir.DType{codegen.F16: ir.F16, codegen.BF16: ir.BF16}[c.elem] {
		// rmsnorm_linear[act=f16]: the f32 rows (the residual stream) are read as the product's
		// 16-bit activations, rounded as they are staged (the prologue of the product).
		c.aF32 = true
	} else if c.quantB && g.aT != ir.F16 {
		return nil, nil, fmt.Errorf("A is %s; a block-quantized B is dequantized to f16 for an f16 A", g.aT)
	} else if g.aT != g.bT && !c.quantB {
		// Rounding an f32 A to 16 bits would lose what the f32 result promises.
		return nil, nil, fmt.Errorf("A is %s and B %s: the matrices take one 16-bit type", g.aT, g.bT)
	}
	if c.elem == codegen.F16 && !caps.Float16 {
		return nil, nil, fmt.Errorf("f16 matrices need shaderFloat16")
	}
	if c.elem == codegen.BF16 && !caps.BFloat16Matrix {
		return nil, nil, fmt.Errorf("bf16 matrices need bfloat16 cooperative matrices, which the device lacks")
	}
	shape, ok := caps.CoopShape(c.elem, c.elem, codegen.F32)
	if !ok {
		return nil, nil, fmt.Errorf("the device multiplies no %s matrices into f32", c.elem)
	}
	c.shape = shape
	if len(p.Parts) > 0 && shape.N%2 != 0 {
		return nil, nil, fmt.Errorf("column parts are stored in pairs of columns; the matrices have %d", shape.N)
	}
	if g.m == 0 || g.n == 0 || g.k == 0 {
		return nil, nil, fmt.Errorf("empty product %dx%dx%d", g.m, g.n, g.k)
	}
	if g.m < shape.M {
		return nil, nil, fmt.Errorf("%d rows, fewer than one %d-row matrix: the matrix-vector templates serve it", g.m, shape.M)
	}
	if n := g.batches() * g.m * g.n; n >= 1<<31 {
		return nil, nil, fmt.Errorf("%d results overflow 32-bit indexing", n)
	}
	if g.batches() > caps.MaxGroups[2] {
		return nil, nil, fmt.Errorf("%d batches exceed the device's %d workgroups in z", g.batches(), caps.MaxGroups[2])
	}
	if d := g.aContig(); d%8 != 0 {
		return nil, nil, fmt.Errorf("A's contiguous axis has %d elements, not a multiple of 8 (one 16-byte unit)", d)
	}
	if d := g.bContig(); d%8 != 0 {
		return nil, nil, fmt.Errorf("B's contiguous axis has %d elements, not a multiple of 8 (one 16-byte unit)", d)
	}
	if g.gammaArg >= 0 && !g.aKContig() {
		return nil, nil, fmt.Errorf("rmsnorm over a transposed A")
	}
	return g, c, nil
}

// coopDTypes: every operand is f32, f16, bf16 (with the device's bfloat16 type), i32, u32 or bool,
// but a block-quantized argument quantArg (-1: none) the template reads itself.
func coopDTypes(p *Problem, caps Caps, quantArg int) error {
	for k, ts := range [][]ir.Type{p.Args, p.Outs} {
		for i, t := range ts {
			switch {
			case k == 0 && i == quantArg && t.DType.Quantized():
			case t.DType == ir.BF16:
				if !caps.BFloat16 || !caps.Storage16 {
					return fmt.Errorf("bf16 tensors need the bfloat16 type and 16-bit storage, which the device lacks")
				}
			case !Supported(t.DType):
				return fmt.Errorf("dtype %s is not supported in device memory", t.DType)
			case t.DType == ir.F16 && !caps.Storage16:
				return fmt.Errorf("f16 tensors need 16-bit storage, which the device lacks")
			}
		}
	}
	return nil
}

// aKContig reports whether A's k axis is contiguous in memory (not ta); bKContig likewise for B
// (tb, and linear's W [N, K]).
func (g *gemm) aKContig() bool { return g.sak == 1 }
func (g *gemm) bKContig() bool { return g.sbk == 1 }

// aContig and bContig are the lengths of A's and B's contiguous axes.
func (g *gemm) aContig() int {
	if g.aKContig() {
		return g.k
	}
	return g.m
}

func (g *gemm) bContig() int {
	if g.bKContig() {
		return g.k
	}
	return g.n
}

// coopGeom is one configuration's geometry.
type coopGeom struct {
	wm, wn, tm, tn, ks, stages int
	sg                         int // subgroup size
	mm, mn, mk                 int // the product shape
	bm, bn, bk                 int // the block
	// A slice: rows × units (+1 pad) of 16-byte units; likewise B.
	aRows, aUnits, bRows, bUnits int
	// Split-K: split runs of per slices each (split = 1: one run of every slice); mp × np is
	// the result padded to whole blocks, the shape of each split's partials.
	split, slices, per int
	mp, np             int
	// sumsqWhole: rmsnorm's Σx² of a row is whole in split 0's slot (matmul_cm2's row step),
	// not in parts, one a split.
	sumsqWhole bool
}

// coopSplitScratch bounds the partials of a split-K configuration (S·batches·M·N f32, padded
// to whole blocks): split-K serves small results; a large one fills the device unsplit.
const coopSplitScratch = 32 << 20

func coopGeometry(c Config, caps Caps, shape CoopShape, g *gemm) coopGeom {
	q := coopGeom{wm: c["warps_m"], wn: c["warps_n"], tm: c["tiles_m"], tn: c["tiles_n"], ks: c["k_steps"], stages: c["stages"],
		sg: caps.SubgroupSize, mm: shape.M, mn: shape.N, mk: shape.K, split: max(c["split_k"], 1)}
	q.bm, q.bn, q.bk = q.wm*q.tm*q.mm, q.wn*q.tn*q.mn, q.ks*q.mk
	q.slices = ceilDiv(g.k, q.bk)
	q.per = ceilDiv(q.slices, q.split)
	q.mp, q.np = ceilDiv(g.m, q.bm)*q.bm, ceilDiv(g.n, q.bn)*q.bn
	if g.aKContig() {
		q.aRows, q.aUnits = q.bm, q.bk/8
	} else {
		q.aRows, q.aUnits = q.bk, q.bm/8
	}
	if g.bKContig() {
		q.bRows, q.bUnits = q.bn, q.bk/8
	} else {
		q.bRows, q.bUnits = q.bk, q.bn/8
	}
	return q
}

func (q coopGeom) threads() int { return q.wm * q.wn * q.sg }

// stageUnits is the number of 16-byte units of one stage of A and of B (rows padded by one unit).
func (q coopGeom) stageUnits() (int, int) {
	return q.aRows * (q.aUnits + 1), q.bRows * (q.bUnits + 1)
}

// sharedBytes is the shared memory of a configuration: the staged slices, the epilogue scratch
// (one accumulator per subgroup; split-K stores its partials without it) and, for rmsnorm, the
// partial sums of squares.
func (q coopGeom) sharedBytes(rms bool) int {
	a, b := q.stageUnits()
	n := 16 * q.stages * (a + b)
	if q.split <= 1 {
		n += 4 * q.wm * q.wn * q.mm * q.mn
	}
	if rms {
		n += 4 * q.aRows * q.aUnits
	}
	return n
}

// coopFits: the workgroup fits the device, the block's dimensions are whole units, the shared
// memory fits.
func coopFits(p *Problem, c Config, caps Caps) error {
	g, cg, err := acceptCoopGemm(p, caps)
	if err != nil {
		return err
	}
	q := coopGeometry(c, caps, cg.shape, g)
	if n := q.threads(); n > caps.MaxInvocations || n > caps.MaxWorkgroupSize[0] {
		return fmt.Errorf("%dx%d subgroups of %d exceed the device's %d invocations", q.wm, q.wn, q.sg, caps.MaxInvocations)
	}
	if q.bk%8 != 0 || q.bm%8 != 0 || q.bn%8 != 0 {
		return fmt.Errorf("block %dx%dx%d is not made of 8-element units", q.bm, q.bn, q.bk)
	}
	if n := q.sharedBytes(g.gammaArg >= 0); n > caps.MaxSharedBytes {
		return fmt.Errorf("block %dx%dx%d with %d stages needs %d bytes of shared memory, the device has %d", q.bm, q.bn, q.bk, q.stages, n, caps.MaxSharedBytes)
	}
	if q.split > 1 {
		if (q.split-1)*q.per >= q.slices {
			return fmt.Errorf("split_k=%d over %d slices of %d leaves a split without work", q.split, q.slices, q.bk)
		}
		n := q.partials(g)
		if n*4 > coopSplitScratch || n >= 1<<31 {
			return fmt.Errorf("split_k=%d needs %d floats of partials (at most %d bytes: split-K is for small results)", q.split, n, coopSplitScratch)
		}
		if caps.MaxBindingRange > 0 && uint64(n*4) > caps.MaxBindingRange {
			return fmt.Errorf("split_k=%d: %d bytes of partials exceed the device's binding range", q.split, n*4)
		}
		if g.batches()*q.split > caps.MaxGroups[2] {
			return fmt.Errorf("split_k=%d: %d batches × splits exceed the device's %d workgroups in z", q.split, g.batches()*q.split, caps.MaxGroups[2])
		}
	}
	return nil
}

// partials is the number of f32 partials of a split-K configuration.
func (q coopGeom) partials(g *gemm) int { return q.split * g.batches() * q.mp * q.np }

// unitSource reads 16-byte units of 8 elements of an f16 or bf16 operand through a vec4<u32> view.
type unitSource struct{ buf *codegen.Buffer }

func declareUnits(b *codegen.Builder, name string) unitSource {
	return unitSource{buf: b.Buffer(name, codegen.Vec(codegen.U32, 4), codegen.ReadOnly)}
}

// packed loads the unit holding elements e..e+7 (e a multiple of 8).
func (s unitSource) packed(b *codegen.Builder, e codegen.Value) codegen.Value {
	return b.Load(s.buf, b.Div(e, b.U32(8)))
}

// unpack splits a packed unit of 16-bit elements of type elem into four vec2<f32>.
func unpack(b *codegen.Builder, u codegen.Value, elem codegen.Type) [4]codegen.Value {
	var out [4]codegen.Value
	for i := range out {
		w := b.Extract(u, i)
		if elem == codegen.BF16 {
			// bf16 is the high half of an f32: no conversion instruction needed.
			lo := b.Bitcast(b.Shl(w, b.U32(16)), codegen.F32)
			hi := b.Bitcast(b.And(w, b.U32(0xffff0000)), codegen.F32)
			out[i] = b.Vec(lo, hi)
		} else {
			out[i] = b.Convert(b.Bitcast(w, codegen.Vec(elem, 2)), codegen.Vec(codegen.F32, 2))
		}
	}
	return out
}

// pack rounds four vec2<f32> to elem and packs them into a unit.
func pack(b *codegen.Builder, v [4]codegen.Value, elem codegen.Type) codegen.Value {
	var w [4]codegen.Value
	for i := range w {
		w[i] = b.Bitcast(b.Convert(v[i], codegen.Vec(elem, 2)), codegen.U32)
	}
	return b.Vec(w[0], w[1], w[2], w[3])
}

// floats loads elements e..e+7 of a (gamma) operand of dtype dt as four vec2<f32>.
func floats(b *codegen.Builder, buf *codegen.Buffer, dt ir.DType, e codegen.Value) [4]codegen.Value {
	if dt == ir.F32 {
		i := b.Div(e, b.U32(4))
		lo, hi := b.Load(buf, i), b.Load(buf, b.Add(i, b.U32(1)))
		return [4]codegen.Value{b.Vec(b.X(lo), b.Y(lo)), b.Vec(b.Z(lo), b.Extract(lo, 3)), b.Vec(b.X(hi), b.Y(hi)), b.Vec(b.Z(hi), b.Extract(hi, 3))}
	}
	elem := codegen.F16
	if dt == ir.BF16 {
		elem = codegen.BF16
	}
	return unpack(b, b.Load(buf, b.Div(e, b.U32(8))), elem)
}

func buildMatmulCoop(p *Problem, c Config, caps Caps) (*Launch, error) {
	return buildCoopWindow(p, c, caps, coopWindow{})
}

// coopWindow restricts matmul_coop to the column blocks [first, first+count) of its result, with
// B holding only their rows (B's row first·bn is the buffer's row 0): matmul_coop_dq's product
// over one part of its copy. The zero window is the whole result. gammaInB says that
// rmsnorm_linear's B already holds W⊙gamma (matmul_coop_dq's copy): the slices are staged as
// they are, gamma not read.
type coopWindow struct {
	first, count int
	gammaInB     bool
}

func buildCoopWindow(p *Problem, c Config, caps Caps, win coopWindow) (*Launch, error) {
	g, cg, err := acceptCoopGemm(p, caps)
	if err != nil {
		return nil, err
	}
	q := coopGeometry(c, caps, cg.shape, g)
	rms := g.gammaArg >= 0
	split := q.split > 1
	lean := c["lean"] == 1
	name := fmt.Sprintf("matmul_coop_%dx%d_%dx%d_k%d_s%d", q.wm, q.wn, q.tm, q.tn, q.ks, q.stages)
	if lean {
		name += "_lean"
	}
	if split {
		name += fmt.Sprintf("_split%d", q.split)
	}
	windowed := win.count > 0
	if windowed {
		if split || cg.quantB || !g.bKContig() || g.bBatch.Rank() > 0 {
			return nil, fmt.Errorf("a column window needs one K-contiguous f16 B without split-K")
		}
		name += fmt.Sprintf("_cols%d_%d", win.first, win.count)
	}
	if win.gammaInB {
		name += "_gamma_in_b"
	}
	b := newBuilder(name, caps)
	b.EmulateMatrices(caps.EmulateMatrices)
	u := func(x int) codegen.Value { return b.U32(uint32(x)) }
	u4 := codegen.Vec(codegen.U32, 4)

	// Bindings in the order of the op's arguments, then the epilogue's (split-K: the bias and
	// the epilogue belong to the second step; the first writes the partials).
	var asrc, bsrc unitSource
	var af32 *codegen.Buffer   // an f32 A (cg.aF32), as vec4<f32>
	var bq *quantRows          // a block-quantized B
	var bwords *codegen.Buffer // its blocks
	var gamma, bias *codegen.Buffer
	var binds []Operand
	for i := 0; i < opArgs(p); i++ {
		t := p.Args[i]
		switch i {
		case g.aArg:
			if cg.aF32 {
				af32 = b.Buffer("a", codegen.Vec(codegen.F32, 4), codegen.ReadOnly)
			} else {
				asrc = declareUnits(b, "a")
			}
		case g.bArg:
			if cg.quantB {
				// ggml's blocks as u32 words; rows of W are whole blocks.
				qb := newQuantRows(g.bT, g.k)
				bq = &qb
				bwords = b.Buffer("b", codegen.U32, codegen.ReadOnly)
			} else {
				bsrc = declareUnits(b, "b")
			}
		case g.gammaArg:
			gt := u4
			if t.DType == ir.F32 {
				gt = codegen.Vec(codegen.F32, 4)
			}
			if g.k%8 != 0 {
				return nil, fmt.Errorf("rmsnorm over %d features, not a multiple of 8", g.k)
			}
			gamma = b.Buffer("gamma", gt, codegen.ReadOnly)
		case g.biasArg:
			if split {
				continue
			}
			bias = b.Buffer("bias", StorageType(t.DType), codegen.ReadOnly)
		}
		binds = append(binds, Operand{Arg, i})
	}
	var epi *epilogue
	var partials, ssOut *codegen.Buffer
	if split {
		partials = b.Buffer("partials", codegen.F32, codegen.WriteOnly)
		binds = append(binds, Operand{Scratch, 0})
		if rms {
			ssOut = b.Buffer("sumsq_partials", codegen.F32, codegen.WriteOnly)
			binds = append(binds, Operand{Scratch, 1})
		}
	} else {
		var eb []Operand
		epi, eb = declareEpilogue(b, p, g.opType)
		binds = append(binds, eb...)
	}
	b.WorkgroupSize(u(q.threads()), u(1), u(1))

	aStage, bStage := q.stageUnits()
	as := b.Shared("a_slices", u4, u(q.stages*aStage))
	bs := b.Shared("b_slices", u4, u(q.stages*bStage))
	var scratch *codegen.Array
	if !split {
		scratch = b.Shared("acc_scratch", codegen.F32, u(q.wm*q.wn*q.mm*q.mn))
	}
	var ssPart *codegen.Array
	if rms {
		ssPart = b.Shared("sumsq", codegen.F32, u(q.aRows*q.aUnits))
	}

	M, N, K := u(g.m), u(g.n), u(g.k)
	li := b.LocalIndex()
	sg := b.SubgroupID()
	lane := b.SubgroupInvocation()
	wid := b.WorkgroupID()
	col0, row0, batch := b.Mul(b.Add(b.X(wid), u(win.first)), u(q.bn)), b.Mul(b.Y(wid), u(q.bm)), b.Z(wid)
	// The split's run of slices, [kBeg, kEnd): loads past kEnd read zeros, so neither the
	// products nor the sums of squares see the next split's k.
	kBeg, kEnd := u(0), K
	var splitID codegen.Value
	if split {
		splitID = b.Rem(b.Z(wid), u(q.split))
		batch = b.Div(b.Z(wid), u(q.split))
		kBeg = b.Mul(splitID, u(q.per*q.bk))
		kEnd = b.Min(K, b.Add(kBeg, u(q.per*q.bk)))
	}
	aBase := b.Mul(BroadcastIndex(b, batch, g.batch, g.aBatch), u(g.aMat))
	bBase := b.Mul(BroadcastIndex(b, batch, g.batch, g.bBatch), u(g.bMat))
	wm, wn := b.Div(sg, u(q.wn)), b.Rem(sg, u(q.wn))
	zero4 := b.Splat(b.U32(0), 4)
	threads := q.threads()

	// A unit (row r, unit c) of the A slice at depth k0, as (global element index, in range).
	aUnit := func(k0, r, cu codegen.Value) (codegen.Value, codegen.Value) {
		var m, k codegen.Value
		if g.aKContig() {
			m, k = b.Add(row0, r), b.Add(k0, b.Mul(cu, u(8)))
		} else {
			k, m = b.Add(k0, r), b.Add(row0, b.Mul(cu, u(8)))
		}
		ok := b.And(b.Lt(m, M), b.Lt(k, kEnd))
		return b.Add(aBase, b.Add(b.Mul(m, u(g.sam)), b.Mul(k, u(g.sak)))), ok
	}
	bUnit := func(k0, r, cu codegen.Value) (codegen.Value, codegen.Value, codegen.Value) {
		var k, n codegen.Value
		if g.bKContig() {
			n, k = b.Add(col0, r), b.Add(k0, b.Mul(cu, u(8)))
		} else {
			k, n = b.Add(k0, r), b.Add(col0, b.Mul(cu, u(8)))
		}
		ok := b.And(b.Lt(k, kEnd), b.Lt(n, N))
		if windowed {
			n = b.Sub(n, u(win.first*q.bn)) // B holds the window's rows only
		}
		return b.Add(bBase, b.Add(b.Mul(k, u(g.sbk)), b.Mul(n, u(g.sbn)))), k, ok
	}

	// Staging: unit e = li + q·threads of a slice; every invocation stages the same units at every
	// depth, so its rows' sums of squares accumulate in registers.
	aPer, bPer := ceilDiv(q.aRows*q.aUnits, threads), ceilDiv(q.bRows*q.bUnits, threads)
	var ss []*codegen.Var
	if rms {
		for i := 0; i < aPer; i++ {
			ss = append(ss, b.Var(fmt.Sprintf("ss%d", i), b.F32(0)))
		}
	}
	unitAt := func(qi, total int) (codegen.Value, codegen.Value) {
		e := b.Add(li, u(qi*threads))
		if (qi+1)*threads > total {
			return b.Min(e, u(total-1)), b.Lt(e, u(total))
		}
		return e, b.Bool(true)
	}
	fetch := func(k0 codegen.Value) (av, bv []codegen.Value) {
		for i := 0; i < aPer; i++ {
			e, live := unitAt(i, q.aRows*q.aUnits)
			r, cu := b.Div(e, u(q.aUnits)), b.Rem(e, u(q.aUnits))
			idx, ok := aUnit(k0, r, cu)
			var v codegen.Value
			var h [4]codegen.Value // the unit's values as f32 pairs
			if cg.aF32 {
				// Eight f32 elements, rounded to the matrices' 16-bit type into a unit; the row's
				// sum of squares from the f32 values.
				i4 := b.Div(b.Select(ok, idx, u(0)), u(4))
				lo, hi := b.Load(af32, i4), b.Load(af32, b.Add(i4, u(1)))
				h = [4]codegen.Value{b.Vec(b.X(lo), b.Y(lo)), b.Vec(b.Z(lo), b.Extract(lo, 3)), b.Vec(b.X(hi), b.Y(hi)), b.Vec(b.Z(hi), b.Extract(hi, 3))}
				v = b.Select(ok, pack(b, h, cg.elem), zero4)
			} else {
				v = b.Select(ok, asrc.packed(b, b.Select(ok, idx, u(0))), zero4)
				if rms {
					h = unpack(b, v, cg.elem)
				}
			}
			if rms {
				s := b.F32(0)
				for _, x := range h {
					s = b.Add(s, b.Dot(x, x))
				}
				b.Set(ss[i], b.Add(b.Get(ss[i]), b.Select(b.And(live, ok), s, b.F32(0))))
			}
			av = append(av, v)
		}
		// rmsnorm's gamma at the units' k: where the workgroup's invocations are a multiple of
		// a row's units, every B unit of an invocation lies at the same k of the slice (unit
		// li + q·threads of a row-major slice is its row's unit li mod bUnits), so gamma is
		// loaded once, not once a unit (8 floats beside a Q4_K unit's 4 bytes of quants).
		foldGamma := rms && !win.gammaInB
		var gmSlice *[4]codegen.Value
		if foldGamma && g.bKContig() && threads%q.bUnits == 0 {
			k := b.Add(k0, b.Mul(b.Rem(li, u(q.bUnits)), u(8)))
			gm := floats(b, gamma, p.Args[g.gammaArg].DType, b.Select(b.Lt(k, kEnd), k, u(0)))
			gmSlice = &gm
		}
		gammaAt := func(ok, k codegen.Value) [4]codegen.Value {
			if gmSlice != nil {
				return *gmSlice
			}
			return floats(b, gamma, p.Args[g.gammaArg].DType, b.Select(ok, k, u(0)))
		}
		for i := 0; i < bPer; i++ {
			e, _ := unitAt(i, q.bRows*q.bUnits)
			r, cu := b.Div(e, u(q.bUnits)), b.Rem(e, u(q.bUnits))
			idx, k, ok := bUnit(k0, r, cu)
			var v codegen.Value
			if bq != nil {
				// Row n of W, elements k..k+7 (blocks run along K: one block), dequantized as
				// ggml does and rounded to f16 into the unit an f16 B would stage.
				n := b.Select(ok, b.Add(col0, r), u(0))
				kk := b.Select(ok, k, u(0))
				q0, q1 := bq.quad(b, bwords, n, kk), bq.quad(b, bwords, n, b.Add(kk, u(4)))
				w := [4]codegen.Value{b.Vec(b.X(q0), b.Y(q0)), b.Vec(b.Z(q0), b.Extract(q0, 3)), b.Vec(b.X(q1), b.Y(q1)), b.Vec(b.Z(q1), b.Extract(q1, 3))}
				if foldGamma {
					gm := gammaAt(ok, k)
					for j := range w {
						w[j] = b.Mul(w[j], gm[j])
					}
				}
				v = b.Select(ok, pack(b, w, codegen.F16), zero4)
				bv = append(bv, v)
				continue
			}
			v = b.Select(ok, bsrc.packed(b, b.Select(ok, idx, u(0))), zero4)
			if foldGamma {
				gm := gammaAt(ok, k)
				w := unpack(b, v, cg.elem)
				for j := range w {
					w[j] = b.Mul(w[j], gm[j])
				}
				v = pack(b, w, cg.elem)
			}
			bv = append(bv, v)
		}
		return av, bv
	}
	put := func(av, bv []codegen.Value, stage codegen.Value) {
		store := func(arr *codegen.Array, vals []codegen.Value, rows, units, stageUnits int) {
			for i, v := range vals {
				e, live := unitAt(i, rows*units)
				at := b.Add(b.Mul(stage, u(stageUnits)), b.Add(b.Mul(b.Div(e, u(units)), u(units+1)), b.Rem(e, u(units))))
				if (i+1)*threads > rows*units {
					b.If(live, func() { b.Store(arr, at, v) })
				} else {
					b.Store(arr, at, v)
				}
			}
		}
		store(as, av, q.aRows, q.aUnits, aStage)
		store(bs, bv, q.bRows, q.bUnits, bStage)
	}

	aT := codegen.Matrix(cg.elem, codegen.ScopeSubgroup, q.mm, q.mk, codegen.MatrixA)
	bT := codegen.Matrix(cg.elem, codegen.ScopeSubgroup, q.mk, q.mn, codegen.MatrixB)
	accT := codegen.Matrix(codegen.F32, codegen.ScopeSubgroup, q.mm, q.mn, codegen.MatrixAcc)
	acc := make([][]*codegen.Var, q.tm)
	for i := range acc {
		acc[i] = make([]*codegen.Var, q.tn)
		for j := range acc[i] {
			acc[i][j] = b.Var(fmt.Sprintf("acc%d_%d", i, j), b.Const(accT, 0))
		}
	}
	// The subgroup's rows and columns within the block.
	wRow, wCol := b.Mul(wm, u(q.tm*q.mm)), b.Mul(wn, u(q.tn*q.mn))
	compute := func(stage codegen.Value) {
		abase, bbase := b.Mul(stage, u(aStage)), b.Mul(stage, u(bStage))
		for s := 0; s < q.ks; s++ {
			kk := s * q.mk
			loadA := func(i int) codegen.Value {
				r := b.Add(wRow, u(i*q.mm))
				if g.aKContig() {
					return b.MatrixLoad(aT, as, b.Add(abase, b.Add(b.Mul(r, u(q.aUnits+1)), u(kk/8))), u(q.aUnits+1), codegen.RowMajor)
				}
				return b.MatrixLoad(aT, as, b.Add(abase, b.Add(u(kk*(q.aUnits+1)), b.Div(r, u(8)))), u(q.aUnits+1), codegen.ColumnMajor)
			}
			am := make([]codegen.Value, q.tm)
			if !lean {
				for i := range am {
					am[i] = loadA(i)
				}
			}
			bm := make([]codegen.Value, q.tn)
			for j := range bm {
				n := b.Add(wCol, u(j*q.mn))
				if g.bKContig() {
					bm[j] = b.MatrixLoad(bT, bs, b.Add(bbase, b.Add(b.Mul(n, u(q.bUnits+1)), u(kk/8))), u(q.bUnits+1), codegen.ColumnMajor)
				} else {
					bm[j] = b.MatrixLoad(bT, bs, b.Add(bbase, b.Add(u(kk*(q.bUnits+1)), b.Div(n, u(8)))), u(q.bUnits+1), codegen.RowMajor)
				}
			}
			for i := range am {
				if lean {
					am[i] = loadA(i)
				}
				for j := range bm {
					b.Set(acc[i][j], b.MatrixMulAdd(am[i], bm[j], b.Get(acc[i][j]), 0))
				}
			}
		}
	}

	av, bv := fetch(kBeg)
	put(av, bv, u(0))
	b.Barrier()
	// step multiplies the slice at k0 from stage `from` while the next slice's loads, issued
	// first, are in flight, then stores them to stage `to`. The loops stop before the last
	// slice, which is multiplied alone: no loads past it (with few slices per split, such a
	// wasted round trip would be a large part of the chain).
	step := func(k0 codegen.Value, from, to int) {
		na, nb := fetch(b.Add(k0, u(q.bk)))
		if lean && from != to {
			// The other buffer was last read before the previous barrier.
			put(na, nb, u(to))
			compute(u(from))
			b.Barrier()
			return
		}
		compute(u(from))
		if from == to {
			b.Barrier()
		}
		put(na, nb, u(to))
		b.Barrier()
	}
	// The run's slices (a constant without split-K) and where the last begins.
	nS := u(q.slices)
	if split {
		nS = b.Div(b.Add(b.Sub(kEnd, kBeg), u(q.bk-1)), u(q.bk))
	}
	kLast := b.Add(kBeg, b.Mul(b.Sub(nS, u(1)), u(q.bk)))
	if q.stages == 2 {
		// Unrolled by two, so that each half reads and writes stages known at build time: with
		// the stage in a variable, the H200 ran the 4096³ GEMM at 52 TFLOP/s against 135 single-
		// buffered. The last slice lies in stage (nS-1) mod 2.
		b.For(kBeg, kLast, u(2*q.bk), func(k0 codegen.Value) {
			step(k0, 0, 1)
			k1 := b.Add(k0, u(q.bk))
			b.If(b.Lt(k1, kLast), func() { step(k1, 1, 0) })
		})
		if split {
			b.IfElse(b.Eq(b.Rem(b.Sub(nS, u(1)), u(2)), u(0)), func() { compute(u(0)) }, func() { compute(u(1)) })
		} else {
			compute(u((q.slices - 1) % 2))
		}
	} else {
		b.For(kBeg, kLast, u(q.bk), func(k0 codegen.Value) { step(k0, 0, 0) })
		compute(u(0))
	}
	if rms {
		// The sums of squares of the staged units (each invocation's, over the run's slices).
		for i := 0; i < aPer; i++ {
			e, live := unitAt(i, q.aRows*q.aUnits)
			b.If(live, func() { b.Store(ssPart, e, b.Get(ss[i])) })
		}
		b.Barrier()
	}

	if split {
		// The split's partials: each accumulator stored whole (the scratch is padded to whole
		// blocks), and the rows' sums of squares over the split's k, once per row block.
		pbase := b.Mul(b.Add(b.Mul(splitID, u(g.batches())), batch), u(q.mp))
		for i := 0; i < q.tm; i++ {
			for j := 0; j < q.tn; j++ {
				r := b.Add(pbase, b.Add(row0, b.Add(wRow, u(i*q.mm))))
				at := b.Add(b.Mul(r, u(q.np)), b.Add(col0, b.Add(wCol, u(j*q.mn))))
				b.MatrixStore(partials, at, b.Get(acc[i][j]), u(q.np), codegen.RowMajor)
			}
		}
		if rms {
			b.If(b.Eq(b.X(wid), u(0)), func() {
				b.For(li, u(q.aRows), u(threads), func(r codegen.Value) {
					s := b.F32(0)
					for cu := 0; cu < q.aUnits; cu++ {
						s = b.Add(s, b.Load(ssPart, b.Add(b.Mul(r, u(q.aUnits)), u(cu))))
					}
					b.Store(ssOut, b.Add(pbase, b.Add(row0, r)), s)
				})
			})
		}
		return finishCoopSplit(b, p, g, cg, q, caps, binds)
	}

	// Epilogue: each accumulator through the subgroup's scratch, element by element.
	outBase := b.Mul(batch, u(g.m*g.n))
	sbase := b.Mul(sg, u(q.mm*q.mn))
	for i := 0; i < q.tm; i++ {
		for j := 0; j < q.tn; j++ {
			b.MatrixStore(scratch, sbase, b.Get(acc[i][j]), u(q.mn), codegen.RowMajor)
			b.ControlBarrier(codegen.ScopeSubgroup, codegen.ScopeSubgroup, codegen.SemWorkgroup)
			if epi.paired() {
				// Column parts store pairs of columns: a lane takes elements e and e + 1 of a
				// scratch row (the matrix's columns are even in number).
				b.For(lane, u(q.mm*q.mn/2), b.SubgroupSize(), func(e2 codegen.Value) {
					e := b.Mul(e2, u(2))
					r, cc := b.Div(e, u(q.mn)), b.Rem(e, u(q.mn))
					br := b.Add(wRow, b.Add(u(i*q.mm), r))
					row := b.Add(row0, br)
					col := b.Add(col0, b.Add(wCol, b.Add(u(j*q.mn), cc)))
					b.If(b.And(b.Lt(row, M), b.Lt(col, N)), func() {
						var s codegen.Value
						if rms {
							s = b.F32(0)
							for cu := 0; cu < q.aUnits; cu++ {
								s = b.Add(s, b.Load(ssPart, b.Add(b.Mul(br, u(q.aUnits)), u(cu))))
							}
						}
						v0 := g.finish(b, p, gemmBufs{bias: bias}, b.Load(scratch, b.Add(sbase, e)), s, col)
						v1 := g.finish(b, p, gemmBufs{bias: bias}, b.Load(scratch, b.Add(sbase, b.Add(e, u(1)))), s, b.Add(col, u(1)))
						epi.storePair(b, row, col, v0, v1)
					})
				})
				b.ControlBarrier(codegen.ScopeSubgroup, codegen.ScopeSubgroup, codegen.SemWorkgroup)
				continue
			}
			b.For(lane, u(q.mm*q.mn), b.SubgroupSize(), func(e codegen.Value) {
				r, cc := b.Div(e, u(q.mn)), b.Rem(e, u(q.mn))
				br := b.Add(wRow, b.Add(u(i*q.mm), r)) // row within the block
				row := b.Add(row0, br)
				col := b.Add(col0, b.Add(wCol, b.Add(u(j*q.mn), cc)))
				b.If(b.And(b.Lt(row, M), b.Lt(col, N)), func() {
					v := b.Load(scratch, b.Add(sbase, e))
					var s codegen.Value
					if rms {
						s = b.F32(0)
						for cu := 0; cu < q.aUnits; cu++ {
							s = b.Add(s, b.Load(ssPart, b.Add(b.Mul(br, u(q.aUnits)), u(cu))))
						}
					}
					v = g.finish(b, p, gemmBufs{bias: bias}, v, s, col)
					epi.store(b, b.Add(outBase, b.Add(b.Mul(row, N), col)), v)
				})
			})
			b.ControlBarrier(codegen.ScopeSubgroup, codegen.ScopeSubgroup, codegen.SemWorkgroup)
		}
	}

	k, err := b.Finish()
	if err != nil {
		return nil, err
	}
	if err := caps.Supports(k); err != nil {
		return nil, err
	}
	grid := [3]uint32{uint32(ceilDiv(g.n, q.bn)), uint32(ceilDiv(g.m, q.bm)), uint32(g.batches())}
	if windowed {
		grid[0] = uint32(win.count)
	}
	if int(grid[0]) > caps.MaxGroups[0] || int(grid[1]) > caps.MaxGroups[1] {
		return nil, fmt.Errorf("grid %v exceeds the device's limits %v", grid, caps.MaxGroups)
	}
	l := &Launch{Steps: []Step{{Kernel: k, Grid: grid, Bindings: binds, Scale: g.scale(p, 1, q.bm, 2)}}, Matrix: true,
		Tolerance: coopTolerance(g, cg), MatrixRate: cg.matrixRate()}
	g.cost(p, l)
	return l, nil
}

// coopQuantRate is the share of the tensor rate matmul_coop reaches from a block-quantized B,
// which it decodes to f16 units as it stages every tile, once per row block of A: on the H100 at
// 512 rows the 8B gate projection ran at 48.5 TFLOP/s from Q4_K and 122 from f16 (0.40), the
// merged gate/up at 47 from Q4_K where the f16 gate ran at 154 (0.31)
// (docs/bench/h100-2026-12-06, BenchmarkCoopQuantPrefill). The roofline needs it to rank
// matmul_coop_dq, which decodes B once, against it.
const coopQuantRate = 0.35

// matrixRate is the launch's Launch.MatrixRate: coopQuantRate for a block-quantized B.
func (c *coopGemm) matrixRate() float64 {
	if c.quantB {
		return coopQuantRate
	}
	return 0
}

// coopRoundings is the number of f16 roundings of each term h_k·w_k of the product that the
// launch and the interpreter's reference make differently (0 unless the matrices and the result
// are f16): the kernel rounds a block-quantized B's dequantized weights, or rmsnorm_linear's
// W⊙gamma (gamma is folded into the staged B), to f16, and rmsnorm_linear[act=f16]'s f32 x; the
// reference rounds rmsnorm_linear's normalised row h = x·gamma/rms to f16 (the unfused graph's
// rmsnorm result), which the kernel never forms (its 1/rms scales the f32 accumulators).
func coopRoundings(g *gemm, cg *coopGemm) int {
	if cg.elem != codegen.F16 || g.opType.DType != ir.F16 {
		return 0
	}
	n := 0
	if cg.quantB || g.gammaArg >= 0 {
		n++ // W (or W⊙gamma) rounded as it is staged
	}
	if cg.aF32 {
		n++ // x rounded as it is staged
	}
	if g.gammaArg >= 0 {
		n++ // the reference's h
	}
	return n
}

// Parameters of coopTolerance's error model.
const (
	// coopRowSpread bounds ‖p‖₂/(s+1), the 2-norm of an element's terms p_k = h_k·w_k over the
	// row's scale s (its largest magnitude, which Compare measures errors against). Random-sign
	// sums have |y| ≈ ‖p‖₂, so the ratio is about 1 for weights whose rows have like norms;
	// the checks' random GGUF blocks, whose scales span 2⁻⁸ to 2⁻¹, give some columns far
	// larger norms than the rest: coopQuantCases' data (q2_k, q4_k, q6_k, q8_0, 100 draws of
	// each case) gave medians of 1.3 to 2.2, 90th percentiles of 1.6 to 3.2 and at worst 7.5
	// (where that column's own |y| was large); the largest difference over those draws was
	// 2.4e-3 of the row's scale.
	coopRowSpread = 4
	// coopSigmas is how many standard deviations of the rounding sum the tolerance allows.
	coopSigmas = 4
	// coopF16Result is the f16 result's own rounding allowance (tune.Tolerance(f16): about one
	// f16 ulp of the row's scale).
	coopF16Result = 2e-3
)

// coopTolerance is the error, relative to the row's scale, that a matmul_coop launch may have
// against the interpreter when the two round the product's terms differently (n =
// coopRoundings; 0 declares nothing: f16 A and B are multiplied exactly, f32 accumulation,
// as the reference does up to the result's rounding). Each rounding multiplies a term p_k by
// (1+δ) with |δ| ≤ u = 2⁻¹¹ and variance at most u²/3 (round to nearest), independently across
// the K terms, so the result moves by Σ p_k·δ_k: zero mean, standard deviation at most
// u·√(n/3)·‖p‖₂ (rigorously at most n·u·Σ|p_k|, far larger at K in the hundreds). At
// coopSigmas deviations and coopRowSpread, plus the result's f16 rounding: 6.5e-3 (n = 1),
// 8.4e-3 (n = 2), 9.8e-3 (n = 3) of the row's scale. The error is of the data, not of K: a
// K = 512 q2_k rmsnorm_linear on the H200 (TestCoopMatmulQuantGPU) was 2.68e-3 off, what the
// f16 roundings give in float64 to the last bit (TestCoopQuantRoundingModel), 2 deviations of an
// element whose ‖p‖₂ was 3.4 times its row's scale.
func coopTolerance(g *gemm, cg *coopGemm) float64 {
	return coopRoundingTolerance(coopRoundings(g, cg))
}

// coopRoundingTolerance is coopTolerance for n f16 roundings of each term.
func coopRoundingTolerance(n int) float64 {
	if n == 0 {
		return 0
	}
	return coopF16Result + coopSigmas*coopRowSpread*math.Ldexp(1, -11)*math.Sqrt(float64(n)/3)
}

// coopReduceThreads is the workgroup of split-K's second step.
const coopReduceThreads = 256

// finishCoopSplit completes a split-K launch: b is the first step's builder (its partials
// stored), binds its bindings; the second step sums the partials and applies the epilogue.
func finishCoopSplit(b *codegen.Builder, p *Problem, g *gemm, cg *coopGemm, q coopGeom, caps Caps, binds []Operand) (*Launch, error) {
	k, err := b.Finish()
	if err != nil {
		return nil, err
	}
	if err := caps.Supports(k); err != nil {
		return nil, err
	}
	grid := [3]uint32{uint32(ceilDiv(g.n, q.bn)), uint32(ceilDiv(g.m, q.bm)), uint32(g.batches() * q.split)}
	if int(grid[0]) > caps.MaxGroups[0] || int(grid[1]) > caps.MaxGroups[1] {
		return nil, fmt.Errorf("grid %v exceeds the device's limits %v", grid, caps.MaxGroups)
	}
	red, err := buildCoopReduce(p, g, q, caps)
	if err != nil {
		return nil, err
	}
	// The product's z holds the splits of every batch, so only its rows follow a run-time
	// length (a bounded batch axis keeps the full grid).
	var sc *GridScale
	if g.batch.Rank() == 0 {
		sc = g.scale(p, 1, q.bm, 2)
	}
	l := &Launch{Steps: []Step{{Kernel: k, Grid: grid, Bindings: binds, Scale: sc}, *red}, Matrix: true,
		Scratch: []int{4 * q.partials(g)}, Tolerance: coopTolerance(g, cg), MatrixRate: cg.matrixRate()}
	if g.gammaArg >= 0 {
		l.Scratch = append(l.Scratch, 4*q.split*g.batches()*q.mp)
	}
	g.cost(p, l)
	return l, nil
}

// buildCoopReduce is split-K's second step: one invocation per element (per pair of columns
// with column parts) sums the element's partials over the splits in split order, and the rows'
// sums of squares likewise, then applies rmsnorm's scale, the bias and the epilogue as the
// unsplit kernel does.
func buildCoopReduce(p *Problem, g *gemm, q coopGeom, caps Caps) (*Step, error) {
	b := newBuilder(fmt.Sprintf("matmul_coop_reduce%d", q.split), caps)
	u := func(x int) codegen.Value { return b.U32(uint32(x)) }
	var bias *codegen.Buffer
	var binds []Operand
	if g.biasArg >= 0 {
		bias = b.Buffer("bias", StorageType(p.Args[g.biasArg].DType), codegen.ReadOnly)
		binds = append(binds, Operand{Arg, g.biasArg})
	}
	parts := b.Buffer("partials", codegen.F32, codegen.ReadOnly)
	binds = append(binds, Operand{Scratch, 0})
	var ssIn *codegen.Buffer
	if g.gammaArg >= 0 {
		ssIn = b.Buffer("sumsq_partials", codegen.F32, codegen.ReadOnly)
		binds = append(binds, Operand{Scratch, 1})
	}
	epi, eb := declareEpilogue(b, p, g.opType)
	binds = append(binds, eb...)
	threads := min(coopReduceThreads, caps.MaxInvocations, caps.MaxWorkgroupSize[0])
	b.WorkgroupSize(u(threads), u(1), u(1))

	cols := g.n // items of a row: elements, or pairs of columns
	if epi.paired() {
		cols = g.n / 2
	}
	items := g.m * cols
	gid := b.Add(b.Mul(LinearGroup(b), u(threads)), b.LocalIndex())
	batch := b.Z(b.WorkgroupID())
	b.If(b.Lt(gid, u(items)), func() {
		row, col := b.Div(gid, u(cols)), b.Rem(gid, u(cols))
		if epi.paired() {
			col = b.Mul(col, u(2))
		}
		var v0, v1, ss codegen.Value
		for s := 0; s < q.split; s++ {
			r := b.Add(b.Mul(b.Add(u(s*g.batches()), batch), u(q.mp)), row)
			at := b.Add(b.Mul(r, u(q.np)), col)
			x0 := b.Load(parts, at)
			var x1, y codegen.Value
			if epi.paired() {
				x1 = b.Load(parts, b.Add(at, u(1)))
			}
			if ssIn != nil && (s == 0 || !q.sumsqWhole) {
				y = b.Load(ssIn, r)
			}
			if s == 0 {
				v0, v1, ss = x0, x1, y
				continue
			}
			v0 = b.Add(v0, x0)
			if epi.paired() {
				v1 = b.Add(v1, x1)
			}
			if ssIn != nil && !q.sumsqWhole {
				ss = b.Add(ss, y)
			}
		}
		bufs := gemmBufs{bias: bias}
		v0 = g.finish(b, p, bufs, v0, ss, col)
		if epi.paired() {
			v1 = g.finish(b, p, bufs, v1, ss, b.Add(col, u(1)))
			epi.storePair(b, row, col, v0, v1)
			return
		}
		epi.store(b, b.Add(b.Mul(batch, u(g.m*g.n)), b.Add(b.Mul(row, u(g.n)), col)), v0)
	})
	k, err := b.Finish()
	if err != nil {
		return nil, err
	}
	if err := caps.Supports(k); err != nil {
		return nil, err
	}
	grid := Grid1D(ceilDiv(items, threads), caps)
	grid[2] = uint32(g.batches())
	// A run-time length is the batch axis (z) when there are batches, else the rows of the
	// linear index over items.
	sc := g.scale(p, -1, 1, 2)
	if g.batch.Rank() == 0 {
		sc = scaleItems(p, p.Rows.Arg(g.aArg), Linear, items, threads)
	}
	return &Step{Kernel: k, Grid: grid, Bindings: binds, Scale: sc}, nil
}

// coopTargetGroups is the grid a suggested split aims for: about one workgroup per
// multiprocessor of a large GPU (the H200 has 132).
const coopTargetGroups = 128

// coopSplits are split_k's values, ascending.
var coopSplits = []int{1, 2, 3, 4, 6, 8, 12, 16}

// coopSuggest proposes the points a budgeted search of matmul_coop measures first (the space
// has thousands): for a product whose unsplit grid leaves a large GPU mostly idle, blocks of
// 32×32 to 64×64 with slices of 32 and 96 k and the two splits nearest coopTargetGroups
// workgroups; for any product, the large blocks that led on the 4096³ GEMM (128×128,
// single-buffered: 186 TFLOP/s on the H200, docs/bench/coopmat-bench-quick.txt) and their
// neighbours, the first three also at lean = 1. Only a search order: each point is measured and
// checked like any other.
func coopSuggest(p *Problem, caps Caps) []Config {
	g, cg, err := acceptCoopGemm(p, caps)
	if err != nil {
		return nil
	}
	pt := func(wm, wn, tm, tn, ks, st, sk int) Config {
		return Config{"warps_m": wm, "warps_n": wn, "tiles_m": tm, "tiles_n": tn, "k_steps": ks, "stages": st, "split_k": sk, "lean": 0}
	}
	big := []Config{pt(2, 2, 4, 4, 2, 1, 1), pt(2, 2, 4, 4, 2, 2, 1), pt(2, 2, 4, 4, 4, 1, 1), pt(2, 4, 4, 4, 2, 1, 1), pt(4, 2, 4, 4, 2, 1, 1)}
	// The 128×128 blocks again at lean = 1 (they held 255 registers on the H100 at lean = 0).
	for _, c := range big[:3] {
		d := c.clone()
		d["lean"] = 1
		big = append(big, d)
	}
	var small []Config
	for _, blk := range [][4]int{{2, 2, 2, 2}, {4, 4, 1, 1}, {1, 1, 2, 2}, {2, 2, 1, 1}} {
		for _, ks := range []int{2, 6} {
			st := 2
			if ks > 2 {
				st = 1
			}
			c := pt(blk[0], blk[1], blk[2], blk[3], ks, st, 1)
			q := coopGeometry(c, caps, cg.shape, g)
			groups := ceilDiv(g.m, q.bm) * ceilDiv(g.n, q.bn) * g.batches()
			if groups >= coopTargetGroups {
				continue
			}
			var fit []int // splits that leave no split without work
			for _, s := range coopSplits[1:] {
				if per := ceilDiv(q.slices, s); (s-1)*per < q.slices {
					fit = append(fit, s)
				}
			}
			if len(fit) == 0 {
				continue
			}
			at := len(fit) - 1
			for i, s := range fit {
				if groups*s >= coopTargetGroups {
					at = i
					break
				}
			}
			for _, i := range []int{at, at - 1} {
				if i >= 0 {
					d := c.clone()
					d["split_k"] = fit[i]
					small = append(small, d)
				}
			}
		}
	}
	return append(small, big...)
}
