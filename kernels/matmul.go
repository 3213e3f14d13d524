package kernels

import (
	"fmt"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
)

// This file holds what the matmul templates (matmul_tiled.go, matmul_vec.go) share: the reading
// of matmul, linear and rmsnorm_linear problems as one batched product C = A·B, and the epilogue
// writer that every template of this package's matmul and attention families stores through.

// gemm is a matmul-family problem read as C[b] = A[b]·B[b] (+ bias) for b over the output's
// batch dims, with A [M, K] and B [K, N] addressed through element strides so that transposed
// operands (ta, tb, linear's W [N, K]) need no copy.
type gemm struct {
	op      ir.Op
	batch   ir.Shape // the result's batch dims
	aBatch  ir.Shape // A's batch dims (broadcast to batch)
	bBatch  ir.Shape
	m, n, k int
	// A(m, k) is element aBase + m·sam + k·sak of argument aArg; B(k, n) likewise.
	sam, sak, sbk, sbn int
	aMat, bMat         int // elements per matrix of A and B (batch strides)
	aArg, bArg         int
	aT, bT             ir.DType
	biasArg            int // linear's bias (broadcast over N), or -1
	gammaArg           int // rmsnorm_linear's weight, or -1: rows of A are normalised
	eps                float64
	opType             ir.Type // the op's result, before any epilogue
}

// opArgs is the number of p.Args that belong to the op (the rest feed the epilogue).
func opArgs(p *Problem) int {
	if p.NumOpArgs == 0 && p.Expr == nil {
		return len(p.Args)
	}
	return p.NumOpArgs
}

// readGemm reads a matmul, linear or rmsnorm_linear problem; other ops give ErrOtherOp.
func readGemm(p *Problem) (*gemm, error) {
	switch p.Op {
	case ir.Matmul, ir.Linear, ir.RMSNormLinear:
	default:
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
	g := &gemm{op: p.Op, biasArg: -1, gammaArg: -1, opType: outs[0], bArg: 1}
	switch p.Op {
	case ir.Matmul:
		x, y := args[0].Shape, args[1].Shape
		rx := x.Rank()
		ta, tb := attrs.Bool("ta", false), attrs.Bool("tb", false)
		g.aBatch, g.bBatch = x[:rx-2], y[:len(y)-2]
		out := outs[0].Shape
		g.batch = out[:len(out)-2]
		g.m, g.n = out[len(out)-2], out[len(out)-1]
		g.k = x[rx-1]
		g.sam, g.sak = g.k, 1
		if ta {
			g.k = x[rx-2]
			g.sam, g.sak = 1, g.m
		}
		g.sbk, g.sbn = g.n, 1
		if tb {
			g.sbk, g.sbn = 1, g.k
		}
		g.aMat, g.bMat = g.m*g.k, g.k*g.n
	case ir.Linear, ir.RMSNormLinear:
		w := 1
		if p.Op == ir.RMSNormLinear {
			w = 2
			g.gammaArg = 1
			g.eps = attrs.Float("eps", 1e-5)
		} else if nop == 3 {
			g.biasArg = 2
		}
		g.bArg = w
		x := args[0].Shape
		g.k = x[len(x)-1]
		g.m = x.NumElements() / max(g.k, 1)
		g.n = args[w].Shape[0]
		g.sam, g.sak = g.k, 1
		g.sbk, g.sbn = 1, g.k // W [N, K]
		g.aMat, g.bMat = g.m*g.k, g.k*g.n
	}
	g.aT, g.bT = args[g.aArg].DType, args[g.bArg].DType
	return g, nil
}

// scale is the grid scale of a gemm kernel whose grid walks the rows of A along rowAxis (-1:
// none) in tiles of tileM and its batches along batchAxis: a run-time length is the leading axis
// of A, which is a batch axis when the result has batches and otherwise the row axis M
// (ir.LengthRows admits no bounded B and no transposed bounded A).
func (g *gemm) scale(p *Problem, rowAxis, tileM, batchAxis int) *GridScale {
	if !p.Rows.Arg(g.aArg) {
		return nil
	}
	if g.batch.Rank() > 0 {
		return scaleItems(p, true, batchAxis, g.batches(), 1)
	}
	if rowAxis < 0 {
		return nil
	}
	return scaleItems(p, true, rowAxis, g.m, tileM)
}

// batches is the number of matrices in the result.
func (g *gemm) batches() int { return g.batch.NumElements() }

// checkEpilogue checks p's epilogue: one result, extra inputs that broadcast to the result.
func checkEpilogue(p *Problem, opType ir.Type) error {
	if p.Expr == nil {
		if len(p.Outs) != 1 || !p.Outs[0].Equal(opType) {
			return fmt.Errorf("result %v, the op gives %s", p.Outs, opType)
		}
		return nil
	}
	if err := p.Expr.Check(); err != nil {
		return err
	}
	if len(p.Expr.Outputs) != 1 || len(p.Outs) != 1 {
		return fmt.Errorf("an epilogue has one result")
	}
	if !p.Outs[0].Shape.Equal(opType.Shape) {
		return fmt.Errorf("epilogue result %s differs in shape from the op's %s", p.Outs[0], opType)
	}
	nop := opArgs(p)
	if len(p.Expr.Inputs) != 1+len(p.Args)-nop {
		return fmt.Errorf("epilogue takes %d inputs, the problem gives %d", len(p.Expr.Inputs), 1+len(p.Args)-nop)
	}
	for _, t := range p.Args[nop:] {
		if s, err := ir.Broadcast(t.Shape, opType.Shape); err != nil || !s.Equal(opType.Shape) {
			return fmt.Errorf("epilogue input %s does not broadcast to %s", t, opType.Shape)
		}
	}
	return nil
}

// epilogue stores a template's result: the op's value for one output element, passed through the
// problem's fused epilogue (if any), converted to the result's dtype. For a problem with column
// parts (parts.go) it is their writer instead, and templates store pairs of columns
// (storePair).
type epilogue struct {
	p      *Problem
	opType ir.Type
	extra  []*codegen.Buffer // Args[NumOpArgs:]
	out    *codegen.Buffer
	parts  *partWriter
}

// declareEpilogue declares the epilogue's extra inputs and the result buffer, in that order, and
// returns the writer; bindings lists the operands to bind to them. (With column parts: the
// position, the parts' results and the run-time length, see declareParts.)
func declareEpilogue(b *codegen.Builder, p *Problem, opType ir.Type) (*epilogue, []Operand) {
	e := &epilogue{p: p, opType: opType}
	if len(p.Parts) > 0 {
		pw, ops := declareParts(b, p, opType)
		e.parts = pw
		return e, ops
	}
	var ops []Operand
	for i := opArgs(p); i < len(p.Args); i++ {
		e.extra = append(e.extra, b.Buffer(fmt.Sprintf("epi%d", i), StorageType(p.Args[i].DType), codegen.ReadOnly))
		ops = append(ops, Operand{Arg, i})
	}
	e.out = b.Buffer("out", StorageType(p.Outs[0].DType), codegen.WriteOnly)
	ops = append(ops, Operand{Out, 0})
	return e, ops
}

// paired reports whether the template must store pairs of columns (storePair) rather than
// elements.
func (e *epilogue) paired() bool { return e.parts != nil }

// storePair writes the op's f32 values of columns col (even) and col + 1 of row row (a problem
// without batch dims): through the column parts, or as two elements.
func (e *epilogue) storePair(b *codegen.Builder, row, col, v0, v1 codegen.Value) {
	if e.parts != nil {
		e.parts.storePair(b, row, col, v0, v1)
		return
	}
	n := b.U32(uint32(e.opType.Shape[e.opType.Shape.Rank()-1]))
	i := b.Add(b.Mul(row, n), col)
	e.store(b, i, v0)
	e.store(b, b.Add(i, b.U32(1)), v1)
}

// store writes v (the op's f32 value of output element idx) through the epilogue.
func (e *epilogue) store(b *codegen.Builder, idx, v codegen.Value) {
	if e.parts != nil {
		panic("kernels: a template stored an element of a problem with column parts")
	}
	out := e.p.Outs[0]
	if e.p.Expr == nil {
		StoreAs(b, e.out, idx, v, out.DType)
		return
	}
	if st := StorageType(e.opType.DType); st != codegen.F32 {
		v = b.Convert(b.Convert(v, st), codegen.F32) // the value the unfused op would have stored
	}
	in := []codegen.Value{v}
	nop := opArgs(e.p)
	for i, buf := range e.extra {
		t := e.p.Args[nop+i]
		in = append(in, LoadAs(b, buf, BroadcastIndex(b, idx, out.Shape, t.Shape), t.DType))
	}
	StoreAs(b, e.out, idx, e.p.Expr.Emit(b, in)[0], out.DType)
}

// epilogueFlops is the arithmetic of the epilogue per output element.
func epilogueFlops(p *Problem) int {
	if p.Expr == nil {
		return 0
	}
	return p.Expr.Ops()
}

// problemBytes is the sum of the problem's operand and result sizes: the least traffic.
func problemBytes(p *Problem) float64 {
	var n float64
	for _, t := range p.Args {
		n += float64(t.Bytes())
	}
	for _, t := range p.Outs {
		n += float64(t.Bytes())
	}
	return n
}

// acceptGemm is the part of Accepts the matmul templates share.
func acceptGemm(p *Problem, caps Caps) (*gemm, error) { return acceptGemmOf(p, caps, false) }

// acceptGemmQuant is acceptGemm for the templates that also read a block-quantized B (linear's
// W, matmul's b with tb): one stored with its blocks along K, as GGUF stores every weight.
func acceptGemmQuant(p *Problem, caps Caps) (*gemm, error) { return acceptGemmOf(p, caps, true) }

func acceptGemmOf(p *Problem, caps Caps, quantB bool) (*gemm, error) {
	g, err := readGemm(p)
	if err != nil {
		return nil, err
	}
	skip := -1
	if g.bT == ir.BF16 && g.aT != ir.BF16 {
		// bf16 weights with activations of another dtype: read as words (bf16Word), on any
		// device. (All-bf16 products are the cooperative-matrix templates', with the device's
		// bfloat16 type.)
		skip = g.bArg
	}
	if g.bT.Quantized() {
		switch {
		case !quantB || !readsBlocks(g.bT):
			return nil, fmt.Errorf("B is block-quantized (%s)", g.bT)
		case g.sbk != 1 || g.bBatch.Rank() > 0:
			return nil, fmt.Errorf("B (%s) is block-quantized along N, not K (a matmul without tb)", g.bT)
		}
		skip = g.bArg
	}
	if err := checkDTypesExcept(p, caps, skip); err != nil {
		return nil, err
	}
	if len(p.Parts) > 0 {
		if err := checkParts(p, g); err != nil {
			return nil, err
		}
	} else if err := checkEpilogue(p, g.opType); err != nil {
		return nil, err
	}
	if readsLength(p) && !partsReadLength(p) {
		return nil, fmt.Errorf("a product's meaning does not depend on the run-time length; only cache parts read it")
	}
	if g.m == 0 || g.n == 0 || g.k == 0 {
		return nil, fmt.Errorf("empty product %dx%dx%d", g.m, g.n, g.k)
	}
	if n := g.batch.NumElements() * g.m * g.n; n >= 1<<31 {
		return nil, fmt.Errorf("%d results overflow 32-bit indexing", n)
	}
	return g, nil
}

// specFor returns the specialization data of k for configuration c (parameters k does not
// declare are left out).
func specFor(k *codegen.Kernel, vals map[string]int) ([]uint32, error) {
	m := map[string]int64{}
	for _, s := range k.Specs {
		if v, ok := vals[s.Name]; ok {
			m[s.Name] = int64(v)
		}
	}
	return k.SpecValues(m)
}

// gemmBufs are the buffers of a matmul-family kernel's op arguments.
type gemmBufs struct {
	a, b, gamma, bias *codegen.Buffer
}

// declareGemm declares the A, B (and gamma, bias) buffers of g in the order of its op arguments
// (A and gamma as vectors of vecA, B of vecB elements) and returns them with the operands to bind.
func declareGemm(b *codegen.Builder, p *Problem, g *gemm, vecA, vecB int) (gemmBufs, []Operand) {
	var bufs gemmBufs
	var ops []Operand
	elem := func(d ir.DType, vec int) codegen.Type {
		if d.Quantized() {
			return codegen.U32 // ggml's blocks, as words (see quant.go)
		}
		if d == ir.BF16 {
			// two bf16 per word (bf16Word); a vector of vec elements is vec/2 words
			if vec == 4 {
				return codegen.Vec(codegen.U32, 2)
			}
			return codegen.U32
		}
		if vec > 1 {
			return codegen.Vec(StorageType(d), vec)
		}
		return StorageType(d)
	}
	for i := 0; i < opArgs(p); i++ {
		t := p.Args[i]
		switch i {
		case g.aArg:
			bufs.a = b.Buffer("a", elem(t.DType, vecA), codegen.ReadOnly)
		case g.bArg:
			bufs.b = b.Buffer("b", elem(t.DType, vecB), codegen.ReadOnly)
		case g.gammaArg:
			bufs.gamma = b.Buffer("gamma", elem(t.DType, vecA), codegen.ReadOnly)
		case g.biasArg:
			bufs.bias = b.Buffer("bias", StorageType(t.DType), codegen.ReadOnly)
		}
		ops = append(ops, Operand{Arg, i})
	}
	return bufs, ops
}

// finish applies rmsnorm's scale and the bias to an accumulated value of column col.
func (g *gemm) finish(b *codegen.Builder, p *Problem, bufs gemmBufs, v, ss, col codegen.Value) codegen.Value {
	if g.gammaArg >= 0 {
		v = b.Mul(v, b.InverseSqrt(b.Add(b.Mul(ss, b.F32(float32(1/float64(g.k)))), b.F32(float32(g.eps)))))
	}
	if g.biasArg >= 0 {
		v = b.Add(v, LoadAs(b, bufs.bias, col, p.Args[g.biasArg].DType))
	}
	return v
}

// cost fills a Launch's roofline figures.
func (g *gemm) cost(p *Problem, l *Launch) {
	extra := epilogueFlops(p)
	if g.biasArg >= 0 {
		extra++ // linear's bias add
	}
	l.Flops = 2*float64(g.batches())*float64(g.m)*float64(g.n)*float64(g.k) +
		float64(g.batches()*g.m*g.n*extra)
	l.Bytes = problemBytes(p)
	if len(p.Parts) > 0 {
		l.Flops += float64(g.m * partsFlops(p))
		l.Bytes = partsBytes(p, g)
		l.InPlace = inPlaceParts(p)
	}
}

// stageTile moves a tile of total elements into shared memory with wg invocations, element
// e = li + q·wg for q < ceil(total/wg), issuing all of an invocation's loads before its stores:
// a loop of load-then-store waits out the memory latency once per element, which on the H200
// made every key tile of attention cost several microseconds. fetch must be branch-free (load
// from a clamped index and select the value to keep); put stores it.
func stageTile(b *codegen.Builder, li codegen.Value, wg, total int, fetch func(e codegen.Value) codegen.Value, put func(e, v codegen.Value)) {
	fetchTile(b, li, wg, total, fetch).put(b, put)
}

// staged is a tile's elements loaded into an invocation's registers, not yet stored: loaded
// before the previous tile's computation, they arrive while it runs.
type staged struct {
	li        codegen.Value
	wg, total int
	es, vs    []codegen.Value
}

// fetchTile issues the loads of stageTile and returns them.
func fetchTile(b *codegen.Builder, li codegen.Value, wg, total int, fetch func(e codegen.Value) codegen.Value) *staged {
	n := ceilDiv(total, wg)
	s := &staged{li: li, wg: wg, total: total, es: make([]codegen.Value, n), vs: make([]codegen.Value, n)}
	for q := 0; q < n; q++ {
		e := b.Add(li, b.U32(uint32(q*wg)))
		if (q+1)*wg > total {
			e = b.Min(e, b.U32(uint32(total-1))) // stored only when in range
		}
		s.es[q], s.vs[q] = e, fetch(e)
	}
	return s
}

// put stores the fetched elements.
func (s *staged) put(b *codegen.Builder, put func(e, v codegen.Value)) {
	for q := range s.es {
		if (q+1)*s.wg > s.total {
			b.If(b.Lt(b.Add(s.li, b.U32(uint32(q*s.wg))), b.U32(uint32(s.total))), func() { put(s.es[q], s.vs[q]) })
		} else {
			put(s.es[q], s.vs[q])
		}
	}
}
