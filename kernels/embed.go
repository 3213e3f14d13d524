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
// giving f32 rows.
var Embedding = &Template{
	Name:      "embedding",
	Accepts:   acceptEmbedding,
	Space:     flatSpace(),
	Build:     buildEmbedding,
	Quantized: QuantizedDTypes(),
}

func init() { Register(Embedding) }

func acceptEmbedding(p *Problem, caps Caps) error {
	if p.Op != ir.Embedding || len(p.Args) == 0 || !p.Args[0].DType.Quantized() {
		return acceptPlain(ir.Embedding)(p, caps)
	}
	if !readsBlocks(p.Args[0].DType) {
		return fmt.Errorf("table is %s, which no kernel reads", p.Args[0].DType)
	}
	if p.Expr != nil {
		return fmt.Errorf("embedding takes no epilogue")
	}
	_, outs, err := ir.Infer(p.Op, p.Attrs, p.Args)
	if err != nil {
		return err
	}
	if len(p.Outs) != 1 || !p.Outs[0].Equal(outs[0]) {
		return fmt.Errorf("results %v, the op gives %v", p.Outs, outs)
	}
	return checkDTypesExcept(p, caps, 0)
}

func buildEmbedding(p *Problem, c Config, caps Caps) (*Launch, error) {
	if err := acceptEmbedding(p, caps); err != nil {
		return nil, err
	}
	tab, ids, out := p.Args[0], p.Args[1], p.Outs[0]
	rows, d := tab.Shape[0], tab.Shape[1]
	n := out.Shape.NumElements()
	b := codegen.NewBuilder("embedding")
	tt := codegen.U32 // a quantized table's blocks, as words
	if !tab.DType.Quantized() {
		tt = StorageType(tab.DType)
	}
	tb := b.Buffer("table", tt, codegen.ReadOnly)
	ib := b.Buffer("ids", StorageType(ids.DType), codegen.ReadOnly)
	ob := b.Buffer("y", StorageType(out.DType), codegen.WriteOnly)
	eachFlat(b, c, n, func(q codegen.Value) {
		r, col := b.Div(q, b.U32(uint32(d))), b.Rem(q, b.U32(uint32(d)))
		// Negative i32 ids become large u32s: one unsigned comparison bounds both ends.
		id := b.Bitcast(b.Load(ib, r), codegen.U32)
		v := b.Var("v", b.Const(ComputeType(out.DType), 0))
		b.If(b.Lt(id, b.U32(uint32(rows))), func() {
			if tab.DType.Quantized() {
				b.Set(v, newQuantRows(tab.DType, d).element(b, tb, id, col))
				return
			}
			b.Set(v, LoadAs(b, tb, b.Add(b.Mul(id, b.U32(uint32(d))), col), tab.DType))
		})
		StoreAs(b, ob, q, b.Get(v), out.DType)
	})
	k, spec, err := finish(b, caps, c, "wg", "per_thread")
	if err != nil {
		return nil, err
	}
	st := Step{Kernel: k, Spec: spec, Grid: flatGrid(n, c, caps), Bindings: []Operand{{Arg, 0}, {Arg, 1}, {Out, 0}},
		Scale: flatScale(p, p.Rows.Out(0), n, c)}
	return &Launch{Steps: []Step{st}, Bytes: 2*float64(out.Bytes()) + float64(ids.Bytes())}, nil
}
