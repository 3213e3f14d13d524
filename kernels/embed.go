package kernels

import (
	"fmt"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
)

// Embedding gathers rows of a table [rows, d] by i32 (or u32) ids of any shape, one invocation
// per output element (per_thread consecutive elements). An id outside 0..rows-1 gives a row of
// zeros: the kernel cannot report an error, and a zero row is visibly wrong downstream where a
// clamped id would be a plausible token. (The interpreter reports such ids as an error.)
//
// A block-quantized table (token_embd in Q4_K, Q6_K, …: any format of QuantizedDTypes) is read as
// its blocks: each element is decoded exactly as ggml's dequantizer computes it (decodeElement),
// giving f32 rows. A bf16 table is read as words (bf16Word), on any device; its bf16 rows are
// stored only through an epilogue that gives them a dtype kernels store (the cast to f32 after
// the lookup that models with bf16 weights and f32 activations write). Any elementwise
// epilogue applies to the gathered values, which are exact in the table's dtype.
var Embedding = &Template{
	Name:      "embedding",
	Accepts:   acceptEmbedding,
	Space:     flatSpace(),
	Build:     buildEmbedding,
	Quantized: QuantizedDTypes(),
}

func init() { Register(Embedding) }

func acceptEmbedding(p *Problem, caps Caps) error {
	if p.Op != ir.Embedding {
		return otherOp(p)
	}
	nop := opArgs(p)
	if nop != 2 || len(p.Args) < 2 {
		return fmt.Errorf("embedding takes a table and ids, got %d operands", nop)
	}
	tab := p.Args[0]
	if tab.DType.Quantized() && !readsBlocks(tab.DType) {
		return fmt.Errorf("table is %s, which no kernel reads", tab.DType)
	}
	_, outs, err := ir.Infer(p.Op, p.Attrs, p.Args[:2])
	if err != nil {
		return err
	}
	if err := checkEpilogue(p, outs[0]); err != nil {
		return err
	}
	skip := -1
	if tab.DType.Quantized() || tab.DType == ir.BF16 {
		skip = 0 // read as words
	}
	return checkDTypesExcept(p, caps, skip)
}

func buildEmbedding(p *Problem, c Config, caps Caps) (*Launch, error) {
	if err := acceptEmbedding(p, caps); err != nil {
		return nil, err
	}
	tab, ids, out := p.Args[0], p.Args[1], p.Outs[0]
	rows, d := tab.Shape[0], tab.Shape[1]
	n := out.Shape.NumElements()
	b := newBuilder("embedding", caps)
	tt := codegen.U32 // a quantized table's blocks, or bf16 pairs, as words
	if !tab.DType.Quantized() && tab.DType != ir.BF16 {
		tt = StorageType(tab.DType)
	}
	tb := b.Buffer("table", tt, codegen.ReadOnly)
	ib := b.Buffer("ids", StorageType(ids.DType), codegen.ReadOnly)
	var extra []*codegen.Buffer
	binds := []Operand{{Arg, 0}, {Arg, 1}}
	for i := 2; i < len(p.Args); i++ {
		extra = append(extra, b.Buffer(fmt.Sprintf("epi%d", i), StorageType(p.Args[i].DType), codegen.ReadOnly))
		binds = append(binds, Operand{Arg, i})
	}
	ob := b.Buffer("y", StorageType(out.DType), codegen.WriteOnly)
	binds = append(binds, Operand{Out, 0})
	opType := ir.Type{DType: tab.DType, Shape: out.Shape}
	if tab.DType.Quantized() {
		opType.DType = ir.F32
	}
	eachFlat(b, c, n, func(q codegen.Value) {
		r, col := b.Div(q, b.U32(uint32(d))), b.Rem(q, b.U32(uint32(d)))
		// Negative i32 ids become large u32s: one unsigned comparison bounds both ends.
		id := b.Bitcast(b.Load(ib, r), codegen.U32)
		v := b.Var("v", b.Const(ComputeType(opType.DType), 0))
		b.If(b.Lt(id, b.U32(uint32(rows))), func() {
			i := b.Add(b.Mul(id, b.U32(uint32(d))), col)
			switch {
			case tab.DType.Quantized():
				b.Set(v, newQuantRows(tab.DType, d).element(b, tb, id, col))
			case tab.DType == ir.BF16:
				b.Set(v, bf16Word(b, tb, i))
			default:
				b.Set(v, LoadAs(b, tb, i, tab.DType))
			}
		})
		x := b.Get(v)
		if p.Expr != nil {
			// The table's values are exact in its dtype: nothing to round before the epilogue.
			in := []codegen.Value{x}
			for i, t := range p.Args[2:] {
				in = append(in, LoadAs(b, extra[i], BroadcastIndex(b, q, out.Shape, t.Shape), t.DType))
			}
			x = p.Expr.Emit(b, in)[0]
		}
		StoreAs(b, ob, q, x, out.DType)
	})
	k, spec, err := finish(b, caps, c, "wg", "per_thread")
	if err != nil {
		return nil, err
	}
	st := Step{Kernel: k, Spec: spec, Grid: flatGrid(n, c, caps), Bindings: binds,
		Scale: flatScale(p, p.Rows.Out(0), n, c)}
	return &Launch{Steps: []Step{st}, Bytes: 2*float64(out.Bytes()) + float64(ids.Bytes()), Flops: float64(n * epilogueFlops(p))}, nil
}
