package kernels

import (
	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
)

// Embedding gathers rows of a table [rows, d] by i32 (or u32) ids of any shape, one invocation
// per output element (per_thread consecutive elements). An id outside 0..rows-1 gives a row of
// zeros: the kernel cannot report an error, and a zero row is visibly wrong downstream where a
// clamped id would be a plausible token. (The interpreter reports such ids as an error.)
var Embedding = &Template{
	Name:    "embedding",
	Accepts: acceptEmbedding,
	Space:   flatSpace(),
	Build:   buildEmbedding,
}

func init() { Register(Embedding) }

var acceptEmbedding = acceptPlain(ir.Embedding)

func buildEmbedding(p *Problem, c Config, caps Caps) (*Launch, error) {
	if err := acceptEmbedding(p, caps); err != nil {
		return nil, err
	}
	tab, ids, out := p.Args[0], p.Args[1], p.Outs[0]
	rows, d := tab.Shape[0], tab.Shape[1]
	n := out.Shape.NumElements()
	b := codegen.NewBuilder("embedding")
	tb := b.Buffer("table", StorageType(tab.DType), codegen.ReadOnly)
	ib := b.Buffer("ids", StorageType(ids.DType), codegen.ReadOnly)
	ob := b.Buffer("y", StorageType(out.DType), codegen.WriteOnly)
	eachFlat(b, c, n, func(q codegen.Value) {
		r, col := b.Div(q, b.U32(uint32(d))), b.Rem(q, b.U32(uint32(d)))
		// Negative i32 ids become large u32s: one unsigned comparison bounds both ends.
		id := b.Bitcast(b.Load(ib, r), codegen.U32)
		v := b.Var("v", b.Const(ComputeType(tab.DType), 0))
		b.If(b.Lt(id, b.U32(uint32(rows))), func() {
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
