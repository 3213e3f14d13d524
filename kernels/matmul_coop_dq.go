package kernels

import (
	"fmt"
	"slices"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
)

// MatmulCoopDQ computes a product with a block-quantized B in two steps: the whole of B
// dequantized to f16 (exactly matmul_coop's values: ggml's dequantization rounded to f16) into
// a scratch of N×K halves, then matmul_coop's f16 product reading it. matmul_coop dequantizes
// each B unit as it stages a tile, once per row block of A, and its staging then bounds the
// tensor cores: on the H100, Llama-3.1-8B's gate projection at 512 rows ran at 48.5 TFLOP/s
// from Q4_K and at 122 from f16 (docs/bench/h100-2026-12-06, BenchmarkCoopQuantPrefill). Here
// every weight is decoded once and the product is an f16 one, at the price of writing and
// reading 2·N·K bytes more and a second dispatch: for prompts of hundreds of rows, not for
// decode. rmsnorm_linear's gamma is folded into the copy (W⊙gamma, rounded to f16 once), so the
// product stages its slices as they are where matmul_coop multiplies every staged unit by
// gamma. The space is matmul_coop's, split-K included where the copy is made whole (a product
// of few column blocks, such as the 8B's down and o projections at 512 rows: 128 blocks of
// 128×128 for 132 SMs, leaves most of the device idle unsplit); the split's partials are
// scratch buffers after the copy's. The scratch is at most coopDQScratch bytes: a larger B is
// copied in parts of whole column blocks, each part's product reading it before the next is
// copied (coopDQPartition), and those products are not split. At 512 rows on the H100 it ran
// the 8B merged gate/up from Q4_K at 108 TFLOP/s where matmul_coop ran it at 47, and its
// rmsnorm_linear forms at 79–85 where matmul_coop's ran at 34–46 (docs/bench/h100-2026-12-06,
// s8 call 1); the roofline prices matmul_coop's staging (coopQuantRate), so a static compile
// takes it.
var MatmulCoopDQ = &Template{
	Name: "matmul_coop_dq",
	Accepts: func(p *Problem, caps Caps) error {
		_, _, _, err := acceptCoopDQ(p, caps)
		return err
	},
	Space: NewSpace(append(coopBlock(),
		Ints("stages", 1, 2),
		Ints("split_k", 1, 2, 3, 4, 6, 8),
	)...).Where(coopDQFits),
	Build: buildMatmulCoopDQ,
}

func init() {
	MatmulCoopDQ.ReadsLength = true
	MatmulCoopDQ.Quantized = QuantizedDTypes()
	Register(MatmulCoopDQ)
}

// coopDQScratch bounds the f16 copy of B, which lives in the plan's arena while the product
// runs. 128 MiB takes Llama-3.1-8B's gate, up and down projections (14336×4096, 112 MiB) whole
// and its merged gate/up (224 MiB) in two parts: the 8B Q4_K_M plan then needs about 5.5 GiB of
// device memory, in the memory issue's bound (file + KV cache + 10%: 5.59 GiB), where a whole
// merged copy would take it past it.
var coopDQScratch = 128 << 20

// coopDQParts bounds the parts a copy larger than coopDQScratch is made in (coopDQPartition):
// each part is a dispatch of the copy and one of the product, and the copy of B is written and
// read in whole however it is cut. 8 parts take a 128k vocabulary's LM head of 4096 features.
const coopDQParts = 8

// coopDQMinRows are the fewest rows (the capacity, for a run-time length) matmul_coop_dq takes:
// writing and reading the copy costs what about 4·N·K/bandwidth of tensor work does, which at
// the H100's rates is the work of some 100 rows; fewer leave the problem to matmul_coop, and a
// measured compile does not spend its budget on the template there.
const coopDQMinRows = 128

// acceptCoopDQ checks p for MatmulCoopDQ and returns the f16 problem its product step solves,
// with p's gemm.
func acceptCoopDQ(p *Problem, caps Caps) (*Problem, *gemm, *coopGemm, error) {
	g, cg, err := acceptCoopGemm(p, caps)
	if err != nil {
		return nil, nil, nil, err
	}
	if !cg.quantB {
		return nil, nil, nil, fmt.Errorf("B is %s, not block-quantized: matmul_coop reads it as it is", g.bT)
	}
	if g.m < coopDQMinRows {
		return nil, nil, nil, fmt.Errorf("%d rows: the copy of B pays for itself only over %d rows or more", g.m, coopDQMinRows)
	}
	bt := p.Args[g.bArg]
	if bt.Shape.Rank() != 2 || g.bBatch.Rank() > 0 {
		return nil, nil, nil, fmt.Errorf("B %s is not one matrix", bt)
	}
	if n := g.n * g.k * 2; n > coopDQParts*coopDQScratch {
		return nil, nil, nil, fmt.Errorf("an f16 copy of B %s takes %d bytes, more than %d parts of %d", bt, n, coopDQParts, coopDQScratch)
	}
	q := *p
	q.Args = slices.Clone(p.Args)
	q.Args[g.bArg] = ir.Type{DType: ir.F16, Shape: bt.Shape}
	if _, _, err := acceptCoopGemm(&q, caps); err != nil {
		return nil, nil, nil, fmt.Errorf("the f16 product: %w", err)
	}
	return &q, g, cg, nil
}

// coopDQFits is coopFits of the f16 product, split-K only where the copy is made whole.
func coopDQFits(p *Problem, c Config, caps Caps) error {
	if err := coopFits(p, c, caps); err != nil {
		return err
	}
	if c["split_k"] <= 1 {
		return nil
	}
	q, g, _, err := acceptCoopDQ(p, caps)
	if err != nil {
		return err
	}
	parts, err := coopDQPartition(q, c, caps, g)
	if err != nil {
		return err
	}
	if len(parts) > 1 {
		return fmt.Errorf("split_k=%d: B's copy is made in %d parts, whose products are not split", c["split_k"], len(parts))
	}
	return nil
}

func buildMatmulCoopDQ(p *Problem, c Config, caps Caps) (*Launch, error) {
	q, g, cg, err := acceptCoopDQ(p, caps)
	if err != nil {
		return nil, err
	}
	parts, err := coopDQPartition(q, c, caps, g)
	if err != nil {
		return nil, err
	}
	// Each part: its rows of B copied into the scratch, then the product's column blocks that
	// read them there (the next part's copy waits for that product: it writes the same scratch).
	from, to := Operand{Arg, g.bArg}, Operand{Scratch, 0}
	copyBinds := []Operand{from, to}
	gammaDT := ir.DType(0) // rmsnorm_linear's gamma, folded into the copy
	if g.gammaArg >= 0 {
		gammaDT = p.Args[g.gammaArg].DType
		copyBinds = append(copyBinds, Operand{Arg, g.gammaArg})
	}
	l := &Launch{Scratch: []int{parts[0].rows * g.k * 2}, Matrix: true}
	for _, w := range parts {
		w.window.gammaInB = g.gammaArg >= 0
		prod, err := buildCoopWindow(q, c, caps, w.window)
		if err != nil {
			return nil, err
		}
		dq, grid, err := buildDequantF16(g.bT, w.row0, w.rows, g.k, gammaDT, caps)
		if err != nil {
			return nil, err
		}
		if len(parts) > 1 && (len(prod.Steps) != 1 || len(prod.Scratch) > 0) {
			return nil, fmt.Errorf("the f16 product of a part is not one dispatch without scratch")
		}
		l.Steps = append(l.Steps, Step{Kernel: dq, Grid: grid, Bindings: copyBinds})
		// The product reads the copy where it read B; its own scratch (split-K's partials)
		// follows the copy's.
		for _, st := range prod.Steps {
			st.Bindings = slices.Clone(st.Bindings)
			for j, op := range st.Bindings {
				switch {
				case op == from:
					st.Bindings[j] = to
				case op.Kind == Scratch:
					st.Bindings[j].Index++
				}
			}
			l.Steps = append(l.Steps, st)
			// The products' invocations are the occupancy: the dequantization's (one per 8
			// weights) would make a product of few workgroups look as busy as the copy.
			l.Occupancy = max(l.Occupancy, st.Invocations())
		}
		l.Scratch = append(l.Scratch, prod.Scratch...)
		l.Sync, l.InPlace = prod.Sync, prod.InPlace
	}
	// The weights are rounded to f16 as matmul_coop rounds them (coopRoundings counts it):
	// rmsnorm's W⊙gamma, once, as the copy is written.
	l.Tolerance = coopRoundingTolerance(coopRoundings(g, cg))
	g.cost(p, l)
	l.Bytes += float64(2 * 2 * g.n * g.k) // the copy written, then read
	return l, nil
}

// coopDQPart is one part of matmul_coop_dq's copy: rows [row0, row0+rows) of B, read by the
// product's column blocks of window.
type coopDQPart struct {
	row0, rows int
	window     coopWindow
}

// coopDQPartition cuts B into the fewest parts of whole column blocks whose f16 copies each fit
// coopDQScratch and the device's binding range: one part where the whole copy fits, else (the
// 8B's merged gate/up, 224 MiB) parts of equal blocks, so that the copy stays in the arena's
// bound and a product over a merged weight keeps this template.
func coopDQPartition(q *Problem, c Config, caps Caps, g *gemm) ([]coopDQPart, error) {
	_, cg, err := acceptCoopGemm(q, caps)
	if err != nil {
		return nil, err
	}
	return dqPartition(g, coopGeometry(c, caps, cg.shape, g).bn, caps)
}

// dqPartition is coopDQPartition for column blocks of bn rows of B.
func dqPartition(g *gemm, bn int, caps Caps) ([]coopDQPart, error) {
	limit := uint64(coopDQScratch)
	if caps.MaxBindingRange > 0 {
		limit = min(limit, caps.MaxBindingRange)
	}
	blocks := ceilDiv(g.n, bn)
	per := int(limit / uint64(bn*g.k*2)) // column blocks a part may hold
	if per < 1 {
		return nil, fmt.Errorf("an f16 copy of one block of %d rows of B takes %d bytes, more than %d", bn, bn*g.k*2, limit)
	}
	n := ceilDiv(blocks, per)
	if n > coopDQParts {
		return nil, fmt.Errorf("an f16 copy of B takes %d parts of %d bytes, more than %d", n, limit, coopDQParts)
	}
	per = ceilDiv(blocks, n) // equal parts
	var parts []coopDQPart
	for first := 0; first < blocks; first += per {
		count := min(per, blocks-first)
		row0 := first * bn
		parts = append(parts, coopDQPart{row0: row0, rows: min(g.n, row0+count*bn) - row0, window: coopWindow{first: first, count: count}})
	}
	if len(parts) == 1 {
		parts[0].window = coopWindow{} // the whole product, as matmul_coop builds it
	}
	return parts, nil
}

// buildDequantF16 is the kernel that writes rows [row0, row0+n) of the matrix of dtype dt
// (blocks along its k columns) as an n×k f16 matrix, eight elements (16 bytes) an invocation,
// decoded as matmul_coop's staging decodes them. With a gamma (gammaDT non-zero: rmsnorm_linear's,
// a third binding) each column's weights are multiplied by gamma[k] before the rounding, so
// that the product stages W⊙gamma as it is, rounded once (matmul_coop folds gamma into each
// unit it stages: once per row block of x, after the copy's rounding).
func buildDequantF16(dt ir.DType, row0, n, k int, gammaDT ir.DType, caps Caps) (*codegen.Kernel, [3]uint32, error) {
	if k%8 != 0 {
		return nil, [3]uint32{}, fmt.Errorf("dequantize %s: %d columns, not a multiple of 8", dt, k)
	}
	name := "dequant_f16_" + dt.String()
	if row0 > 0 {
		name += fmt.Sprintf("_from%d", row0)
	}
	if gammaDT != 0 {
		name += "_gamma_" + gammaDT.String()
	}
	b := newBuilder(name, caps)
	qr := newQuantRows(dt, k)
	in := b.Buffer("w", codegen.U32, codegen.ReadOnly)
	out := b.Buffer("w16", codegen.Vec(codegen.U32, 4), codegen.WriteOnly)
	var gamma *codegen.Buffer
	if gammaDT != 0 {
		gt := codegen.Vec(codegen.U32, 4)
		if gammaDT == ir.F32 {
			gt = codegen.Vec(codegen.F32, 4)
		}
		gamma = b.Buffer("gamma", gt, codegen.ReadOnly)
	}
	const wg = 256
	b.WorkgroupSize(b.U32(wg), b.U32(1), b.U32(1))
	units := n * k / 8
	e := b.Add(b.Mul(LinearGroup(b), b.U32(wg)), b.LocalIndex())
	b.If(b.Lt(e, b.U32(uint32(units))), func() {
		row := b.Add(b.Div(e, b.U32(uint32(k/8))), b.U32(uint32(row0)))
		kk := b.Mul(b.Rem(e, b.U32(uint32(k/8))), b.U32(8))
		q0, q1 := qr.quad(b, in, row, kk), qr.quad(b, in, row, b.Add(kk, b.U32(4)))
		w := [4]codegen.Value{b.Vec(b.X(q0), b.Y(q0)), b.Vec(b.Z(q0), b.Extract(q0, 3)), b.Vec(b.X(q1), b.Y(q1)), b.Vec(b.Z(q1), b.Extract(q1, 3))}
		if gamma != nil {
			gm := floats(b, gamma, gammaDT, kk)
			for j := range w {
				w[j] = b.Mul(w[j], gm[j])
			}
		}
		b.Store(out, e, pack(b, w, codegen.F16))
	})
	kern, err := b.Finish()
	if err != nil {
		return nil, [3]uint32{}, err
	}
	if err := caps.Supports(kern); err != nil {
		return nil, [3]uint32{}, err
	}
	return kern, Grid1D(ceilDiv(units, wg), caps), nil
}
