package kernels

import (
	"fmt"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/quant"
)

// A block-quantized KV cache (q8_0, q4_0): cache_write (and rope_cache_write, which rotates the
// keys first) quantizes the rows it writes with ggml's
// reference quantizer (ir/quant's QuantizeBlock: the interpreter's), and the attention passes
// dequantize the tiles they load (quantRows, from the format's layout).
//
// The cache is bound as u32 words like any block-quantized operand, and blocks of 34 (q8_0) or
// 18 (q4_0) bytes share words with their neighbours, so each invocation writes a pair of
// blocks, 68 or 36 bytes: whole words when the pair starts at an even block. A row of the cache
// is kv_heads·hd elements; the template needs an even number of blocks per row (hd a multiple
// of 64, or an even number of heads), so that pairs never straddle a row the write leaves alone.
//
// The arithmetic is ggml's in f32 (quant.quantizeQ8_0, quantizeQ4_0): d = amax/127 or
// max/−8, id = 1/d, q = roundf(x·id) or min(15, trunc(x·id + 8.5)), d stored as f16. A device
// whose division or f16 conversion is not correctly rounded, or which fuses x·id + 8.5 into one
// rounding, may put an element one quant step from ggml's at a tie; the tests allow that.

// cacheQuantizer writes one block's bytes (u32 values 0..255, BlockBytes of them) for 32 f32
// values.
type cacheQuantizer func(b *codegen.Builder, v []codegen.Value) []codegen.Value

// cacheQuantizers are the formats cache_write quantizes on the device (those quant.Format
// quantizes, ir.DType.CacheFormat).
var cacheQuantizers = map[*quant.Format]cacheQuantizer{quant.Q8_0: quantizeQ8_0, quant.Q4_0: quantizeQ4_0}

// halfBytes are the two bytes of d's f16 bits, low first.
func halfBytes(b *codegen.Builder, d codegen.Value) []codegen.Value {
	h := b.PackHalf2x16(b.Vec(d, b.F32(0)))
	return []codegen.Value{b.And(h, b.U32(0xff)), b.And(b.Shr(h, b.U32(8)), b.U32(0xff))}
}

// recipOrZero is 1/d, or 0 when d is 0 (ggml's id).
func recipOrZero(b *codegen.Builder, d codegen.Value) codegen.Value {
	nz := b.Ne(d, b.F32(0))
	return b.Select(nz, b.Div(b.F32(1), b.Select(nz, d, b.F32(1))), b.F32(0))
}

func quantizeQ8_0(b *codegen.Builder, v []codegen.Value) []codegen.Value {
	amax := b.F32(0)
	for _, x := range v {
		amax = b.Max(amax, b.Abs(x))
	}
	d := b.Div(amax, b.F32(127))
	id := recipOrZero(b, d)
	out := halfBytes(b, d)
	for _, x := range v {
		// roundf: to nearest, halves away from zero. t = trunc(y) and y − t are exact.
		y := b.Mul(x, id)
		ti := b.Convert(y, codegen.I32)
		frac := b.Sub(y, b.Convert(ti, codegen.F32))
		up := b.Ge(b.Abs(frac), b.F32(0.5))
		step := b.Select(b.Lt(y, b.F32(0)), b.I32(-1), b.I32(1))
		q := b.Add(ti, b.Select(up, step, b.I32(0)))
		out = append(out, b.And(b.Bitcast(q, codegen.U32), b.U32(0xff)))
	}
	return out
}

func quantizeQ4_0(b *codegen.Builder, v []codegen.Value) []codegen.Value {
	amax, mx := b.F32(0), b.F32(0)
	for _, x := range v {
		a := b.Abs(x)
		gt := b.Lt(amax, a) // the first element of the largest magnitude
		amax, mx = b.Select(gt, a, amax), b.Select(gt, x, mx)
	}
	d := b.Mul(mx, b.F32(-0.125)) // max / -8, exact
	id := recipOrZero(b, d)
	q := make([]codegen.Value, len(v))
	for j, x := range v {
		// (int8_t)(x·id + 8.5): truncation toward zero; the sum is at least 0.5.
		qi := b.Convert(b.Add(b.Mul(x, id), b.F32(8.5)), codegen.I32)
		q[j] = b.Bitcast(b.Min(qi, b.I32(15)), codegen.U32)
	}
	out := halfBytes(b, d)
	for j := 0; j < 16; j++ {
		out = append(out, b.Or(q[j], b.Shl(q[j+16], b.U32(4))))
	}
	return out
}

// acceptQuantCacheWrite checks a cache_write (or a batched step's cache_scatter) into a
// block-quantized state.
func acceptQuantCacheWrite(p *Problem, caps Caps) error {
	if p.Expr != nil {
		return fmt.Errorf("%s takes no epilogue", p.Op)
	}
	_, outs, err := ir.Infer(p.Op, p.Attrs, p.Args)
	if err != nil {
		return err
	}
	if len(p.Outs) != 1 || !p.Outs[0].Equal(outs[0]) {
		return fmt.Errorf("results %v, the op gives %v", p.Outs, outs)
	}
	st, x := p.Args[0], p.Args[1]
	f := st.DType.Format()
	if cacheQuantizers[f] == nil {
		return fmt.Errorf("the device quantizes no %s cache (it does %s)", st.DType, "q8_0, q4_0")
	}
	if f.BlockElems != 32 || (2*f.BlockBytes)%4 != 0 {
		return fmt.Errorf("%s: pairs of %d-byte blocks are not whole words", st.DType, f.BlockBytes)
	}
	rowLen := quantCacheRow(p)
	if rowLen%(2*f.BlockElems) != 0 {
		return fmt.Errorf("rows of %d elements are an odd number of %s blocks; the template writes pairs", rowLen, st.DType)
	}
	for _, t := range append([]ir.Type{x}, p.Args[2:]...) { // the rows, the position(s), the slots
		if err := checkDTypesOf(t, caps); err != nil {
			return err
		}
	}
	return nil
}

// quantCacheRow is the elements of a row of the state that one row of x writes: a cache_write's
// state row, a cache_scatter's cell (state [slots, ctx, ...]).
func quantCacheRow(p *Problem) int {
	st := p.Args[0]
	if p.Op == ir.CacheScatter {
		return st.Shape.NumElements() / (st.Shape[0] * st.Shape[1])
	}
	return st.Shape.NumElements() / st.Shape[0]
}

// buildQuantCacheWrite writes x's rows into the quantized state, a pair of blocks (64 elements)
// per invocation: at rows pos, pos+1, ... (cache_write), or row r into cell (slot[r], pos[r]) of a
// [slots, ctx, ...] state (cache_scatter, both clamped into the state as its float kernel does).
func buildQuantCacheWrite(p *Problem, c Config, caps Caps) (*Launch, error) {
	if err := acceptQuantCacheWrite(p, caps); err != nil {
		return nil, err
	}
	st, xt, pt := p.Args[0], p.Args[1], p.Args[2]
	scatter := p.Op == ir.CacheScatter
	if scatter {
		pt = p.Args[3]
	}
	f := st.DType.Format()
	quantize := cacheQuantizers[f]
	rope := p.Op == ir.RopeCacheWrite
	var g ropeGeom
	if rope {
		g = readRope(p) // rows of x along axis 0, heads of g.d features
	}
	be := f.BlockElems
	rowLen := quantCacheRow(p)
	pairs := xt.Shape.NumElements() / (2 * be)
	pairsPerRow := rowLen / (2 * be)
	pairWords := 2 * f.BlockBytes / 4
	b := newBuilder("cache_write_"+f.Name, caps)
	x := b.Buffer("x", StorageType(xt.DType), codegen.ReadOnly)
	var slotBuf *codegen.Buffer
	if scatter {
		slotBuf = b.Buffer("slot", StorageType(p.Args[2].DType), codegen.ReadOnly)
	}
	posBuf := b.Buffer("pos", StorageType(pt.DType), codegen.ReadOnly)
	y := b.Buffer("state", codegen.U32, codegen.WriteOnly)
	reads := p.Rows.Arg(1) && p.Rows.Reads
	var lenBuf *codegen.Buffer
	if reads {
		lenBuf = b.Buffer("n", codegen.U32, codegen.ReadOnly)
	}
	u := func(v int) codegen.Value { return b.U32(uint32(v)) }
	var pos codegen.Value
	if !scatter {
		pos = loadPos(b, posBuf)
	}
	eachFlat(b, c, pairs, func(q codegen.Value) {
		row := b.Div(q, u(pairsPerRow))
		var t, in codegen.Value // the state's row (a cell) row writes, and whether it does
		if scatter {
			cell := b.Add(b.Mul(clampIndex(b, slotBuf, row, st.Shape[0]), u(st.Shape[1])), clampIndex(b, posBuf, row, st.Shape[1]))
			t, in = b.Bitcast(cell, codegen.I32), b.Bool(true)
		} else {
			t = b.Add(pos, b.Bitcast(row, codegen.I32))
			in = b.And(b.Ge(t, b.I32(0)), b.Lt(t, b.I32(int32(st.Shape[0]))))
		}
		if reads {
			in = b.And(in, b.Lt(row, b.Load(lenBuf, u(0))))
		}
		b.If(in, func() {
			e0 := b.Mul(q, u(2*be))
			// The pair's 64 values: x's, or rotated (each with its partner, which may lie
			// outside the pair in mode half), rounded to x's dtype as the unfused rope stores it.
			value := func(e codegen.Value) codegen.Value {
				if !rope {
					return LoadAs(b, x, e, xt.DType)
				}
				xrow, f := b.Div(e, u(g.d)), b.Rem(e, u(g.d))
				rb := b.Mul(xrow, u(g.d))
				i := b.Rem(f, u(g.h)) // the pair index
				first := b.Lt(f, u(g.h))
				if !g.half {
					i, first = b.Div(f, u(2)), b.Eq(b.Rem(f, u(2)), u(0))
				}
				j0, j1 := g.pair(b, i)
				y0, y1 := g.rotate(b, pos, g.seq(b, xrow), i, LoadAs(b, x, b.Add(rb, j0), xt.DType), LoadAs(b, x, b.Add(rb, j1), xt.DType))
				v := b.Select(first, y0, y1)
				if s := StorageType(xt.DType); s != codegen.F32 {
					v = b.Convert(b.Convert(v, s), codegen.F32)
				}
				return v
			}
			var bytes []codegen.Value
			for h := 0; h < 2; h++ {
				vals := make([]codegen.Value, be)
				for j := range vals {
					vals[j] = value(b.Add(e0, u(h*be+j)))
				}
				bytes = append(bytes, quantize(b, vals)...)
			}
			// The pair's first word: the state's row t, pair q mod pairsPerRow.
			pair := b.Add(b.Mul(b.Bitcast(t, codegen.U32), u(pairsPerRow)), b.Rem(q, u(pairsPerRow)))
			w0 := b.Mul(pair, u(pairWords))
			for w := 0; w < pairWords; w++ {
				word := bytes[4*w]
				for k := 1; k < 4; k++ {
					word = b.Or(word, b.Shl(bytes[4*w+k], u(8*k)))
				}
				b.Store(y, b.Add(w0, u(w)), word)
			}
		})
	})
	k, spec, err := finish(b, caps, c, "wg", "per_thread")
	if err != nil {
		return nil, err
	}
	s := Step{Kernel: k, Spec: spec, Grid: flatGrid(pairs, c, caps), Bindings: []Operand{{Arg, 1}, {Arg, 2}, {Out, 0}},
		Scale: flatScale(p, p.Rows.Arg(1), pairs, c)}
	if scatter {
		s.Bindings = []Operand{{Arg, 1}, {Arg, 2}, {Arg, 3}, {Out, 0}}
	}
	if reads {
		s.Bindings = append(s.Bindings, Operand{Len, 0})
	}
	written := float64(xt.Shape.NumElements()/be) * float64(f.BlockBytes)
	return &Launch{Steps: []Step{s}, InPlace: map[int]int{0: 0}, Bytes: float64(xt.Bytes()) + written,
		Flops: float64(4 * xt.Shape.NumElements())}, nil
}

// CacheDTypes are the block formats a KV cache may have on the device: those the interpreter
// quantizes (ir.DType.CacheFormat) and cache_write quantizes too.
var CacheDTypes = func() []ir.DType {
	var out []ir.DType
	for _, d := range ir.QuantizedDTypes() {
		if d.CacheFormat() && cacheQuantizers[d.Format()] != nil && readsBlocks(d) {
			out = append(out, d)
		}
	}
	return out
}()

func init() {
	// The templates that write and read a quantized cache take its blocks (Template.Quantized:
	// no compile-time dequantization applies to state).
	for _, t := range []*Template{CacheWrite, RopeCacheWrite, AttentionFlash, AttentionSplit, CacheScatter, AttentionRows} {
		t.Quantized = append(t.Quantized, CacheDTypes...)
	}
}
