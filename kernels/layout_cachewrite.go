package kernels

import (
	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
)

// CacheWrite writes x into rows pos..pos+len(x)-1 (axis 0) of the state, converted to the state's
// dtype (f32 rows into an f16 cache are rounded as they are written), in place: the result
// shares the state's buffer (Launch.InPlace) and only the new rows are written, so a decode step
// costs the size of x, not of the cache. pos is the run-time i32 operand. Rows that fall outside
// the cache (pos < 0, or pos + len(x) past its end) are not written; the interpreter reports
// them as an error. With a run-time length (Problem.Rows) x holds the run's rows only, and only
// those are written (the Len operand).
var CacheWrite = &Template{
	Name:        "cache_write",
	Accepts:     acceptCacheWrite,
	Space:       flatSpace(),
	Build:       buildCacheWrite,
	ReadsLength: true,
}

func init() { Register(CacheWrite) }

var acceptPlainCacheWrite = acceptPlain(ir.CacheWrite)

// acceptCacheWrite takes a float cache (acceptPlain) or a block-quantized one
// (cachewrite_quant.go).
func acceptCacheWrite(p *Problem, caps Caps) error {
	if p.Op == ir.CacheWrite && len(p.Args) == 3 && p.Args[0].DType.Quantized() {
		return acceptQuantCacheWrite(p, caps)
	}
	return acceptPlainCacheWrite(p, caps)
}

func buildCacheWrite(p *Problem, c Config, caps Caps) (*Launch, error) {
	if err := acceptCacheWrite(p, caps); err != nil {
		return nil, err
	}
	if p.Args[0].DType.Quantized() {
		return buildQuantCacheWrite(p, c, caps)
	}
	st, xt, pt := p.Args[0], p.Args[1], p.Args[2]
	rowLen := st.Shape.NumElements() / st.Shape[0]
	n := xt.Shape.NumElements()
	b := newBuilder("cache_write", caps)
	x := b.Buffer("x", StorageType(xt.DType), codegen.ReadOnly)
	posBuf := b.Buffer("pos", StorageType(pt.DType), codegen.ReadOnly)
	y := b.Buffer("state", StorageType(st.DType), codegen.WriteOnly)
	reads := p.Rows.Arg(1) && p.Rows.Reads
	var lenBuf *codegen.Buffer
	if reads {
		lenBuf = b.Buffer("n", codegen.U32, codegen.ReadOnly)
	}
	pos := loadPos(b, posBuf)
	eachFlat(b, c, n, func(q codegen.Value) {
		t := b.Add(pos, b.Bitcast(b.Div(q, b.U32(uint32(rowLen))), codegen.I32))
		in := b.And(b.Ge(t, b.I32(0)), b.Lt(t, b.I32(int32(st.Shape[0]))))
		if reads {
			// The run's n·k rows of x: n·(its elements / Max) elements.
			in = b.And(in, b.Lt(q, b.Mul(b.Load(lenBuf, b.U32(0)), b.U32(uint32(n/p.Rows.Max)))))
		}
		b.If(in, func() {
			off := b.Mul(b.Bitcast(pos, codegen.U32), b.U32(uint32(rowLen)))
			if xt.DType == st.DType {
				b.Store(y, b.Add(off, q), b.Load(x, q))
			} else {
				// Rows of another float dtype are rounded to the cache's as they are written.
				StoreAs(b, y, b.Add(off, q), LoadAs(b, x, q, xt.DType), st.DType)
			}
		})
	})
	k, spec, err := finish(b, caps, c, "wg", "per_thread")
	if err != nil {
		return nil, err
	}
	s := Step{Kernel: k, Spec: spec, Grid: flatGrid(n, c, caps), Bindings: []Operand{{Arg, 1}, {Arg, 2}, {Out, 0}},
		Scale: flatScale(p, p.Rows.Arg(1), n, c)}
	if reads {
		s.Bindings = append(s.Bindings, Operand{Len, 0})
	}
	return &Launch{Steps: []Step{s}, InPlace: map[int]int{0: 0}, Bytes: 2 * float64(xt.Bytes())}, nil
}
