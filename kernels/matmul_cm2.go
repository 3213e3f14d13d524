package kernels

import (
	"fmt"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
)

// MatmulCM2 computes linear, rmsnorm_linear and matmul (x [M, K] times a K-contiguous W [N, K])
// on VK_NV_cooperative_matrix2's workgroup-scope matrices: a workgroup of wg invocations holds
// one bm×bn f32 accumulator and walks K in slices of bk, loading x's bm×bk slice as A and W's
// bn×bk slice, transposed, as B with tensor addressing (codegen.MatrixLoadTensor). The driver
// stages workgroup matrices through shared memory itself, with the loads its own GEMMs use:
// on the H100, llama.cpp's product of this kind ran the 8B's 4096×512×14336 shape at 235.6
// TFLOP/s from f16 where its VK_KHR_cooperative_matrix one ran at 91.9 and vkc's matmul_coop at
// 127–138 (docs/bench/h100-2026-12-06, session 11).
//
// At direct = 1, a product with nothing to apply element by element (cm2Direct: no rmsnorm,
// bias, epilogue or column parts) converts its accumulator to the result's type and stores it
// to the result itself, the edges dropped by the tensor store's clamping (as llama.cpp's
// product of this kind stores its result); the static points take it where it is valid.
// Otherwise the accumulator is stored whole to an f32 scratch padded to whole blocks, and a
// second step, matmul_coop's split-K reduction at one split (buildCoopReduce), applies rmsnorm's 1/rms, the
// bias and the problem's epilogue (residual, activation, SwiGLU, column parts) element by
// element: a workgroup matrix gives no element's row and column, and the per-element function
// call cooperative_matrix2 has for that is not in codegen. rmsnorm_linear first runs a row
// step that writes h = x⊙gamma rounded to f16 (the product's A) and each row's Σx² (from the
// unrounded x, f32 or f16), so the product needs no staging of its own. A block-quantized W is
// copied to f16 first by matmul_coop_dq's dequantization (in parts of whole column blocks where
// the copy would exceed coopDQScratch), each part's product reading its copy.
//
// unroll writes that many slices of bk out in one step of the K loop (the slices K leaves over
// run in a loop of their own), so that the driver sees several slices' loads to put in flight
// before their products: llama.cpp's product of this kind writes 256 of K out a step.
//
// Roundings against the interpreter: W to f16 (a quantized W), x⊙gamma to f16, and the
// reference's own rounding of rmsnorm's h: coopRoundingTolerance of their count.
var MatmulCM2 = &Template{
	Name: "matmul_cm2",
	Accepts: func(p *Problem, caps Caps) error {
		_, _, err := acceptCM2(p, caps)
		return err
	},
	Space: NewSpace(Ints("bm", 128, 64, 256, 32), Ints("bn", 128, 256, 64, 32), Ints("bk", 32, 64, 16),
		Ints("wg", 128, 256, 64), Ints("unroll", 1, 2, 4, 8), Ints("direct", 0, 1), Ints("split_k", 1, 2, 4)).Where(cm2Fits),
	Static: cm2Static,
	Build:  buildMatmulCM2,
}

// cm2Static is the static point on a GPU. A product that may store its result itself (direct
// = 1) takes 128×256 blocks over 256 invocations with slices of 64, two slices a step (unroll
// 2), where they make at least cm2DirectBigGrid workgroups. Otherwise 128×256 blocks with one
// slice a step where they make at least cm2WideGrid; else 128×128 over 128 with slices of 32
// where those do; else 64×64 over 256 with slices of 64, so that a product of few blocks still
// fills the device.
//
// Measured on the H100 (BenchmarkCoopShapes, f16 unless said; session 19 with each point run
// in a process of its own beside the static point, docs/bench/h100-2026-12-07):
//   - direct, 128×256/256 × 64 unroll 2 against the static point before: 4096³ 431–441 µs
//     against 474–476 at unroll 1 (unroll 4: 428–441); 512×14336×4096 (224 blocks) 236–237
//     against 128×128/128's 278–283; 512×6144×4096 (96) 111–113 against 64×64/256's 162–165;
//     512×4096×4096 (64) 107.3–107.5 against 107.3–108.0; 512×4096×14336 (64) 353 against
//     362–372; 512×2048×8192 (32) 201 against 106: there the narrow blocks stay.
//   - the 8B gate/up form (512×28672×4096 over Q4_K, rmsnorm, SwiGLU's column parts; not
//     direct): 128×256 unroll 1 677–680 µs against 128×128/128's 738 (session 18). At unroll 2
//     and 4 it took 659 and 673 in one process and 2223 and 2026 in another: unroll stays 1
//     there.
//   - 64×64/256 × 64 at 512×4096×14336 not direct: 362.7–364.8 µs (session 18).
//
// Where 32 to 127 blocks of 128×256 cover the result, K is split over workgroups (split_k) until
// they number coopTargetGroups or more, unroll 2, the sums added by the reduction step. Measured
// on the H100 in session 21 with a residual epilogue (the 8B's down and output projections; each
// point in a process of its own, after the static point then, 64×64/256 not direct):
//   - 512×4096×14336 (64 blocks): split 2 226.9 µs, split 4 243.4, unsplit 369.8; 64×64 375–381;
//   - 512×4096×4096 (64): split 2 80.5, split 4 91.7, unsplit 115.7; 64×64 119;
//   - 512×2048×8192 (32): split 4 77.8, split 2 121.7, unsplit 204.8; 64×64 111–114;
//   - 512×6144×4096 (96): split 2 147.1, split 4 140.6, unsplit 124.9; 64×64 178. Unsplit was the
//     fastest, but 96 workgroups are priced at the rate of half a device (MatrixRate), and
//     split 2 keeps matmul_cm2 ahead of matmul_coop in the static estimate.
func cm2Static(p *Problem, caps Caps) []Config {
	g, cg, err := acceptCM2(p, caps)
	if err != nil || caps.CPU {
		return nil
	}
	direct := 0
	if cm2Direct(p, g, cg) {
		direct = 1
	}
	big := Config{"bm": 128, "bn": 256, "bk": 64, "wg": 256, "unroll": 1, "direct": direct, "split_k": 1}
	wide := Config{"bm": 128, "bn": 128, "bk": 32, "wg": 128, "unroll": 1, "direct": direct, "split_k": 1}
	narrow := Config{"bm": 64, "bn": 64, "bk": 64, "wg": 256, "unroll": 1, "direct": direct, "split_k": 1}
	bigBlocks := ceilDiv(g.m, 128) * ceilDiv(g.n, 256)
	if bigBlocks >= cm2SplitMinBlocks && bigBlocks < coopTargetGroups {
		// K split until the blocks make coopTargetGroups workgroups, the partial sums added by
		// the reduction step (so not direct).
		split := big.clone()
		split["unroll"], split["direct"], split["split_k"] = 2, 0, 4
		if 2*bigBlocks >= coopTargetGroups {
			split["split_k"] = 2
		}
		if cm2Fits(p, split, caps) == nil {
			return []Config{split, big, wide, narrow}
		}
	}
	switch {
	case direct == 1 && bigBlocks >= cm2DirectBigGrid && 2*big["bk"] <= g.k: // two slices fit K
		unrolled := big.clone()
		unrolled["unroll"] = 2
		return []Config{unrolled, big, wide, narrow}
	case bigBlocks >= cm2WideGrid:
		return []Config{big, wide, narrow}
	case ceilDiv(g.m, 128)*ceilDiv(g.n, 128) >= cm2WideGrid:
		return []Config{wide, narrow}
	}
	return []Config{narrow, wide}
}

// cm2SplitMinBlocks is the fewest 128×256 blocks cm2Static splits K over (split_k) to make
// coopTargetGroups workgroups: 32 blocks, four splits, is the fewest measured (session 21, the
// 1B's down projection: 77.8 µs against 111 unsplit in 64×64 blocks).
const cm2SplitMinBlocks = 32

// cm2WideGrid is the fewest blocks cm2Static gives a block size: about two workgroups for each
// of a large GPU's multiprocessors (the H100 has 132).
const cm2WideGrid = 256

// cm2DirectBigGrid is the fewest 128×256 blocks cm2Static gives a direct product at unroll 2:
// coopTargetGroups, where the roofline's occupancy term (invocations over the lanes a device
// needs in flight) stops charging them. Fewer ran as fast or faster on the H100 (96 blocks: 111
// µs against 64×64's 162; 64: a tie; 32: twice as long), but the static estimate would then
// rank matmul_cm2 under matmul_coop at half occupancy; a measured compile times them.
const cm2DirectBigGrid = coopTargetGroups

func init() {
	MatmulCM2.ReadsLength = true
	MatmulCM2.Quantized = QuantizedDTypes()
	Register(MatmulCM2)
}

// cm2Gemm is what matmul_cm2 adds to a gemm.
type cm2Gemm struct {
	quantB bool // W block-quantized: copied to f16 first
	rms    bool // rmsnorm_linear: the row step writes h and Σx²
}

// cm2MatrixRate is Launch.MatrixRate of matmul_cm2's products: the share of the roofline's
// matrix rate (lower.DiscreteGPU's, what matmul_coop is counted at on KHR matrices) that
// workgroup matrices reach, more than all of it. Measured on the H100 (session 12,
// BenchmarkCoopShapes, each template's static point, whole launches): f16 512×14336×4096 310
// against 542 µs (1.75×), 4096³ 590 against 1119 (1.90×), the 8B's gate/up rmsnorm form from
// Q4_K (512×28672×4096, copy and reduction included) 736 against matmul_coop_dq's 1241 (1.69×).
const cm2MatrixRate = 1.7

// cm2MaxAccumulators bounds a block's f32 accumulators per invocation (bm·bn/wg): on the H100
// 128×256 blocks over 128 invocations (256 each) ran at 8–21 TFLOP/s where 128×128 over 128 ran
// at 160–233 (the registers spill).
const cm2MaxAccumulators = 128

// cm2MaxUnrolledK bounds the K one step of the product's loop covers (unroll slices of bk):
// llama.cpp's product of this kind writes out 256 of K a step (eight slices of 32 from f16).
const cm2MaxUnrolledK = 256

// cm2MaxScratch bounds the f32 accumulators' scratch (padded M·N floats).
const cm2MaxScratch = 256 << 20

// acceptCM2 checks p and the device for MatmulCM2.
func acceptCM2(p *Problem, caps Caps) (*gemm, *cm2Gemm, error) {
	g, err := readGemm(p)
	if err != nil {
		return nil, nil, err
	}
	if caps.Coop2 == nil {
		return nil, nil, fmt.Errorf("the device has no workgroup-scope cooperative matrices with tensor addressing (VK_NV_cooperative_matrix2)")
	}
	if !caps.VulkanMemoryModel || !caps.Float16 || !caps.Storage16 {
		return nil, nil, fmt.Errorf("needs the Vulkan memory model, shaderFloat16 and 16-bit storage")
	}
	if _, ok := cm2Shape(caps, 0); !ok {
		return nil, nil, fmt.Errorf("the device multiplies no workgroup-scope f16 matrices into f32")
	}
	if err := coopDTypes(p, caps, g.bArg); err != nil {
		return nil, nil, err
	}
	if len(p.Parts) > 0 {
		if err := checkParts(p, g); err != nil {
			return nil, nil, err
		}
		if g.n%2 != 0 {
			return nil, nil, fmt.Errorf("column parts are stored in pairs of columns; N = %d", g.n)
		}
	} else if err := checkEpilogue(p, g.opType); err != nil {
		return nil, nil, err
	}
	if readsLength(p) && !partsReadLength(p) {
		return nil, nil, fmt.Errorf("a product's meaning does not depend on the run-time length; only cache parts read it")
	}
	if g.batches() != 1 || g.bBatch.Rank() > 0 {
		return nil, nil, fmt.Errorf("batched products are left to matmul_coop")
	}
	if !g.aKContig() || !g.bKContig() {
		return nil, nil, fmt.Errorf("A and B must both be contiguous along K (x [M, K], W [N, K])")
	}
	if g.k%8 != 0 {
		return nil, nil, fmt.Errorf("K = %d is not a multiple of 8 (16-byte rows)", g.k)
	}
	if g.m < 16 {
		return nil, nil, fmt.Errorf("%d rows: the matrix-vector templates serve it", g.m)
	}
	c := &cm2Gemm{rms: g.gammaArg >= 0}
	switch {
	case g.bT == ir.F16:
	case g.bT.Quantized() && readsBlocks(g.bT):
		c.quantB = true
		if g.m < coopDQMinRows {
			return nil, nil, fmt.Errorf("%d rows: the copy of B pays for itself only over %d rows or more", g.m, coopDQMinRows)
		}
		if n := g.n * g.k * 2; n > coopDQParts*coopDQScratch {
			return nil, nil, fmt.Errorf("an f16 copy of B takes %d bytes, more than %d parts of %d", n, coopDQParts, coopDQScratch)
		}
	default:
		return nil, nil, fmt.Errorf("B is %s; workgroup matrices here take f16 (or a block format copied to f16)", g.bT)
	}
	switch {
	case g.aT == ir.F16:
	case g.aT == ir.F32 && c.rms && g.opType.DType == ir.F16:
		// rmsnorm_linear[act=f16] over the f32 residual stream: the row step rounds x⊙gamma.
	default:
		return nil, nil, fmt.Errorf("A is %s; the product takes f16 rows (f32 ones through rmsnorm_linear[act=f16])", g.aT)
	}
	if (c.rms || c.quantB) && g.opType.DType != ir.F16 {
		return nil, nil, fmt.Errorf("the product rounds W or x⊙gamma to f16; its result must be f16, not %s", g.opType.DType)
	}
	if n := ceilDiv(g.m, 16) * 16 * ceilDiv(g.n, 16) * 16; n >= 1<<31 || 4*n > cm2MaxScratch {
		return nil, nil, fmt.Errorf("%d×%d f32 accumulators exceed the scratch bound", g.m, g.n)
	}
	return g, c, nil
}

// cm2Shape is the device's workgroup-scope f16×f16+f32→f32 entry for a workgroup of wg
// invocations (0: any).
func cm2Shape(caps Caps, wg int) (Coop2Shape, bool) {
	if caps.Coop2 == nil {
		return Coop2Shape{}, false
	}
	for _, s := range caps.Coop2.Shapes {
		if s.A == codegen.F16 && s.B == codegen.F16 && s.C == codegen.F32 && s.Result == codegen.F32 &&
			(wg == 0 || s.Invocations == 0 || s.Invocations == wg) {
			return s, true
		}
	}
	return Coop2Shape{}, false
}

// cm2Fits: the block is made of the device's granularities for a workgroup of wg, and no
// larger than the problem needs.
func cm2Fits(p *Problem, c Config, caps Caps) error {
	g, cg, err := acceptCM2(p, caps)
	if err != nil {
		return err
	}
	bm, bn, bk, wg := c["bm"], c["bn"], c["bk"], c["wg"]
	s, ok := cm2Shape(caps, wg)
	switch {
	case !ok:
		return fmt.Errorf("the device has no workgroup-scope f16 product for %d invocations", wg)
	case wg > caps.Coop2.MaxWorkgroupSize || wg > caps.MaxInvocations || wg > caps.MaxWorkgroupSize[0]:
		return fmt.Errorf("%d invocations exceed the device's workgroup-scope limit %d", wg, caps.Coop2.MaxWorkgroupSize)
	case bm%s.MGran != 0 || bn%s.NGran != 0 || bk%s.KGran != 0:
		return fmt.Errorf("block %dx%dx%d is not made of the device's %dx%dx%d granules", bm, bn, bk, s.MGran, s.NGran, s.KGran)
	case caps.Coop2.MaxDimension > 0 && max(bm, bn, bk) > caps.Coop2.MaxDimension:
		return fmt.Errorf("block %dx%dx%d exceeds the device's largest dimension %d", bm, bn, bk, caps.Coop2.MaxDimension)
	case bm*bn/wg > cm2MaxAccumulators:
		return fmt.Errorf("block %dx%d over %d invocations holds %d accumulators each, more than %d", bm, bn, wg, bm*bn/wg, cm2MaxAccumulators)
	case bm > 32 && bm/2 >= g.m, bn > 32 && bn/2 >= g.n:
		return fmt.Errorf("block %dx%d: half of it covers the %dx%d result", bm, bn, g.m, g.n)
	case c["unroll"] > 1 && c["unroll"]*bk > g.k:
		return fmt.Errorf("unroll=%d: %d slices of %d exceed K = %d", c["unroll"], c["unroll"], bk, g.k)
	case c["unroll"]*bk > cm2MaxUnrolledK:
		return fmt.Errorf("unroll=%d: %d slices of %d exceed %d of K a step", c["unroll"], c["unroll"], bk, cm2MaxUnrolledK)
	case c["direct"] > 0 && !cm2Direct(p, g, cg):
		return fmt.Errorf("direct=1: the product has a bias, rmsnorm, an epilogue or column parts to apply element by element")
	}
	if sk := c["split_k"]; sk > 1 {
		blocks := ceilDiv(g.m, bm) * ceilDiv(g.n, bn)
		switch per := cm2SplitK(g.k, bk, c["unroll"], sk); {
		case c["direct"] > 0:
			return fmt.Errorf("split_k=%d: the splits' partial sums are added by the reduction step, not stored directly", sk)
		case blocks >= cm2WideGrid:
			return fmt.Errorf("split_k=%d: %d blocks already fill the device", sk, blocks)
		case (sk-1)*per >= g.k:
			return fmt.Errorf("split_k=%d: K = %d in runs of %d leaves a split empty", sk, g.k, per)
		case 4*sk*ceilDiv(g.m, bm)*bm*ceilDiv(g.n, bn)*bn > cm2MaxScratch:
			return fmt.Errorf("split_k=%d: the partial sums exceed the scratch bound", sk)
		}
	}
	return nil
}

// cm2SplitK is the K one split of matmul_cm2 covers: whole steps of the product's loop (unroll
// slices of bk), so that only the last split has slices left over.
func cm2SplitK(k, bk, unroll, split int) int {
	step := bk * unroll
	return ceilDiv(k, split*step) * step
}

func buildMatmulCM2(p *Problem, c Config, caps Caps) (*Launch, error) {
	g, cg, err := acceptCM2(p, caps)
	if err != nil {
		return nil, err
	}
	if err := cm2Fits(p, c, caps); err != nil {
		return nil, err
	}
	bm, bn := c["bm"], c["bn"]
	q := coopGeom{split: max(c["split_k"], 1), bm: bm, bn: bn, mp: ceilDiv(g.m, bm) * bm, np: ceilDiv(g.n, bn) * bn}
	// rmsnorm's Σx² comes whole from the row step, not in parts from the splits.
	q.sumsqWhole = true
	// Scratch: 0 the accumulators (buildCoopReduce's partials; none at direct = 1), 1 the rows'
	// Σx² (its sums of squares), then h (rmsnorm), then B's f16 copy (a block format).
	direct := c["direct"] > 0
	l := &Launch{Matrix: true}
	if !direct {
		l.Scratch = []int{4 * q.split * q.mp * q.np}
	}
	aOp, bOp := Operand{Arg, g.aArg}, Operand{Arg, g.bArg}
	if cg.rms {
		st, err := buildCM2Rows(p, g, caps)
		if err != nil {
			return nil, err
		}
		l.Scratch = append(l.Scratch, 4*q.mp, 2*g.m*g.k)
		aOp = Operand{Scratch, 2}
		l.Steps = append(l.Steps, *st)
	}
	parts := []coopDQPart{{rows: g.n}}
	if cg.quantB {
		if parts, err = dqPartition(g, bn, caps); err != nil {
			return nil, err
		}
		bOp = Operand{Scratch, len(l.Scratch)}
		l.Scratch = append(l.Scratch, parts[0].rows*g.k*2)
	}
	for _, w := range parts {
		if cg.quantB {
			dq, grid, err := buildDequantF16(g.bT, w.row0, w.rows, g.k, 0, caps)
			if err != nil {
				return nil, err
			}
			l.Steps = append(l.Steps, Step{Kernel: dq, Grid: grid, Bindings: []Operand{{Arg, g.bArg}, bOp}})
		}
		st, err := buildCM2Product(p, g, c, caps, q, w, aOp, bOp, direct)
		if err != nil {
			return nil, err
		}
		l.Steps = append(l.Steps, *st)
		l.Occupancy = max(l.Occupancy, st.Invocations())
	}
	if !direct {
		red, err := buildCoopReduce(p, g, q, caps)
		if err != nil {
			return nil, err
		}
		l.Steps = append(l.Steps, *red)
	}
	n := 0
	if cg.quantB {
		n++ // W rounded to f16 by the copy
	}
	if cg.rms {
		n += 2 // x⊙gamma rounded by the row step; the reference's h
	}
	l.Tolerance = coopRoundingTolerance(n)
	// The measured advantage only where it was measured: products of at least a workgroup for
	// each multiprocessor. A smaller one (SmolLM2's at 128 rows: 18 blocks, not measured)
	// claims none; the roofline's occupancy and fixed costs rank it, and a measured compile
	// times it against matmul_coop.
	l.MatrixRate = 1
	if l.Occupancy >= float64(coopTargetGroups*c["wg"]) {
		l.MatrixRate = cm2MatrixRate
	}
	g.cost(p, l)
	if !direct {
		l.Bytes += float64(2 * 4 * q.split * q.mp * q.np) // the accumulators written, then read
	}
	if cg.quantB {
		l.Bytes += float64(2 * 2 * g.n * g.k) // the copy written, then read
	}
	if cg.rms {
		l.Bytes += float64(2 * 2 * g.m * g.k) // h written, then read
	}
	return l, nil
}

// cm2Direct reports whether the product may store its result itself (direct = 1), converted to
// the result's type, rather than its f32 accumulators for the reduction step: nothing is
// applied element by element (no rmsnorm, bias, epilogue or column parts) and the result is
// f16 or f32. It saves the accumulators' round trip through memory (at 4096³, 64 MiB written
// and read) and a launch.
func cm2Direct(p *Problem, g *gemm, cg *cm2Gemm) bool {
	return !cg.rms && g.biasArg < 0 && p.Expr == nil && len(p.Parts) == 0 && len(p.Outs) == 1 &&
		(g.opType.DType == ir.F16 || g.opType.DType == ir.F32)
}

// buildCM2Product is the product step over the column blocks of part w (the whole result
// when w.window is zero): A from aOp, B (its rows w.row0.. when windowed) from bOp, the
// accumulators stored to scratch 0, or (direct) the result converted to its type to the output.
func buildCM2Product(p *Problem, g *gemm, c Config, caps Caps, q coopGeom, w coopDQPart, aOp, bOp Operand, direct bool) (*Step, error) {
	bm, bn, bk, wg := c["bm"], c["bn"], c["bk"], c["wg"]
	name := fmt.Sprintf("matmul_cm2_%dx%dx%d_wg%d", bm, bn, bk, wg)
	if c["unroll"] > 1 {
		name += fmt.Sprintf("_u%d", c["unroll"])
	}
	if q.split > 1 {
		name += fmt.Sprintf("_s%d", q.split)
	}
	if w.window.count > 0 {
		name += fmt.Sprintf("_cols%d_%d", w.window.first, w.window.count)
	}
	outT, outOp := codegen.F32, Operand{Scratch, 0}
	if direct {
		name += "_out"
		outT, outOp = StorageType(g.opType.DType), Operand{Out, 0}
	}
	b := newBuilder(name, caps)
	b.EmulateMatrices(caps.EmulateMatrices)
	u := func(x int) codegen.Value { return b.U32(uint32(x)) }
	a := b.Buffer("a", codegen.F16, codegen.ReadOnly)
	wb := b.Buffer("b", codegen.F16, codegen.ReadOnly)
	acc := b.Buffer("acc", outT, codegen.WriteOnly)
	b.WorkgroupSize(u(wg), u(1), u(1))
	wid := b.WorkgroupID()
	row0 := b.Mul(b.Y(wid), u(bm))
	blk := b.X(wid) // the block within the part
	col0 := b.Mul(b.Add(blk, u(w.window.first)), u(bn))
	// Clamped where a slice can reach past the tensor (the driver checks every element then).
	clampA := g.m%bm != 0 || g.k%bk != 0
	clampB := w.rows%bn != 0 || g.k%bk != 0
	at := codegen.Tensor{Mem: a, Base: u(0), Rows: u(g.m), Cols: u(g.k), Stride: u(g.k), Clamp: clampA}
	bt := codegen.Tensor{Mem: wb, Base: u(0), Rows: u(w.rows), Cols: u(g.k), Stride: u(g.k), Clamp: clampB}
	aT := codegen.Matrix(codegen.F16, codegen.ScopeWorkgroup, bm, bk, codegen.MatrixA)
	bT := codegen.Matrix(codegen.F16, codegen.ScopeWorkgroup, bk, bn, codegen.MatrixB)
	accT := codegen.Matrix(codegen.F32, codegen.ScopeWorkgroup, bm, bn, codegen.MatrixAcc)
	sum := b.Var("sum", b.Const(accT, 0))
	brow := b.Mul(blk, u(bn)) // B's rows are the part's
	slice := func(k0 codegen.Value) {
		x := b.MatrixLoadTensor(aT, at, row0, k0, false)
		y := b.MatrixLoadTensor(bT, bt, brow, k0, true)
		b.Set(sum, b.MatrixMulAdd(x, y, b.Get(sum), 0))
	}
	// unroll slices a step, written out; the slices left over (K not a multiple of the step)
	// in a loop of their own.
	step := c["unroll"] * bk
	unrolled := func(k0 codegen.Value) {
		for j := 0; j < c["unroll"]; j++ {
			slice(b.Add(k0, u(j*bk)))
		}
	}
	if q.split == 1 {
		whole := g.k / step * step
		if whole > 0 {
			b.For(u(0), u(whole), u(step), unrolled)
		}
		if whole < g.k {
			b.For(u(whole), u(g.k), u(bk), slice)
		}
	} else {
		// Split-K: workgroup z sums K from z·per to the next split's start (or K), its
		// whole steps unrolled and the rest slice by slice; only the last split has a rest.
		per := cm2SplitK(g.k, bk, c["unroll"], q.split)
		k0 := b.Mul(b.Z(wid), u(per))
		k1 := b.Min(b.Add(k0, u(per)), u(g.k))
		whole := b.Add(k0, b.Mul(b.Div(b.Sub(k1, k0), u(step)), u(step)))
		b.For(k0, whole, u(step), unrolled)
		if g.k%step != 0 {
			b.For(whole, k1, u(bk), slice)
		}
	}
	if direct {
		// The result itself: its edges dropped where no block divides it.
		ct := codegen.Tensor{Mem: acc, Base: u(0), Rows: u(g.m), Cols: u(g.n), Stride: u(g.n), Clamp: g.m%bm != 0 || g.n%bn != 0}
		out := b.Get(sum)
		if outT != codegen.F32 {
			out = b.Convert(out, codegen.Matrix(outT, codegen.ScopeWorkgroup, bm, bn, codegen.MatrixAcc))
		}
		b.MatrixStoreTensor(ct, row0, col0, out, false)
	} else {
		// Split z's partial sums are rows z·mp.. of the scratch (buildCoopReduce adds them).
		ct := codegen.Tensor{Mem: acc, Base: u(0), Rows: u(q.split * q.mp), Cols: u(q.np), Stride: u(q.np)}
		at := row0
		if q.split > 1 {
			at = b.Add(row0, b.Mul(b.Z(wid), u(q.mp)))
		}
		b.MatrixStoreTensor(ct, at, col0, b.Get(sum), false)
	}
	k, err := b.Finish()
	if err != nil {
		return nil, err
	}
	if err := caps.Supports(k); err != nil {
		return nil, err
	}
	grid := [3]uint32{uint32(ceilDiv(w.rows, bn)), uint32(q.mp / bm), uint32(q.split)}
	if int(grid[0]) > caps.MaxGroups[0] || int(grid[1]) > caps.MaxGroups[1] || int(grid[2]) > caps.MaxGroups[2] {
		return nil, fmt.Errorf("grid %v exceeds the device's limits %v", grid, caps.MaxGroups)
	}
	return &Step{Kernel: k, Grid: grid, Bindings: []Operand{aOp, bOp, outOp}, Scale: g.scale(p, 1, bm, 2)}, nil
}

// cm2RowThreads is the workgroup of matmul_cm2's row step (one row a workgroup).
const cm2RowThreads = 256

// buildCM2Rows is rmsnorm_linear's row step: h = x⊙gamma rounded to f16 into scratch 2, and
// Σx² of each row (of x as it is) into scratch 1, one workgroup a row.
func buildCM2Rows(p *Problem, g *gemm, caps Caps) (*Step, error) {
	b := newBuilder("matmul_cm2_rows", caps)
	u := func(x int) codegen.Value { return b.U32(uint32(x)) }
	aDT, gDT := p.Args[g.aArg].DType, p.Args[g.gammaArg].DType
	x := b.Buffer("x", StorageType(aDT), codegen.ReadOnly)
	gamma := b.Buffer("gamma", StorageType(gDT), codegen.ReadOnly)
	ssOut := b.Buffer("sumsq", codegen.F32, codegen.WriteOnly)
	h := b.Buffer("h", codegen.F16, codegen.WriteOnly)
	threads := min(cm2RowThreads, caps.MaxInvocations, caps.MaxWorkgroupSize[0])
	b.WorkgroupSize(u(threads), u(1), u(1))
	row := b.Y(b.WorkgroupID())
	li := b.LocalIndex()
	base := b.Mul(row, u(g.k))
	ss := b.Var("ss", b.F32(0))
	b.For(li, u(g.k), u(threads), func(k codegen.Value) {
		v := LoadAs(b, x, b.Add(base, k), aDT)
		if v.Type() != codegen.F32 {
			v = b.Convert(v, codegen.F32)
		}
		b.Set(ss, b.Add(b.Get(ss), b.Mul(v, v)))
		gm := LoadAs(b, gamma, k, gDT)
		if gm.Type() != codegen.F32 {
			gm = b.Convert(gm, codegen.F32)
		}
		b.Store(h, b.Add(base, k), b.Convert(b.Mul(v, gm), codegen.F16))
	})
	red := NewWorkgroupReducer(b, u(threads), caps.SubgroupArithmetic)
	s := red.Reduce(b.Get(ss), ReduceAdd)
	b.If(b.Eq(li, u(0)), func() { b.Store(ssOut, row, s) })
	k, err := b.Finish()
	if err != nil {
		return nil, err
	}
	if err := caps.Supports(k); err != nil {
		return nil, err
	}
	if g.m > caps.MaxGroups[1] {
		return nil, fmt.Errorf("%d rows exceed the device's %d workgroups in y", g.m, caps.MaxGroups[1])
	}
	return &Step{Kernel: k, Grid: [3]uint32{1, uint32(g.m), 1}, Scale: g.scale(p, 1, 1, 2),
		Bindings: []Operand{{Arg, g.aArg}, {Arg, g.gammaArg}, {Scratch, 1}, {Scratch, 2}}}, nil
}
