package kernels

import (
	"fmt"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/quant"
)

// Block-quantized weights in kernels: how a kernel reads ggml's blocks. The blocks stay in device
// memory byte for byte as the GGUF file has them, bound as u32 words (a block's fields sit at
// even, not always word-aligned, byte offsets); everything a kernel needs to unpack an element
// comes from the format's row of ir/quant's table (quant.Layout: where the low and high bits of
// each quant live, the bias or sign, the block scale and min, the sub-block scales, the combine
// rule), so one generator serves the legacy formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) and the
// K-quants (Q4_K, Q5_K, Q6_K, Q8_K) alike: they differ only in that data.
//
// Two readers follow the table:
//   - decodeElement computes one element at a run-time index exactly as ggml's dequantizer does
//     (quant.Format.Element step by step: the same f32 roundings), for kernels that dequantize
//     a tile into shared memory (the prefill GEMM) or gather rows (embedding);
//   - the matrix-vector kernel (matmul_vec_q.go) unpacks four quants of a word at a time and
//     applies the scales to partial dot products (Σ x·(d·q) = d·Σ x·q), as llama.cpp's shaders do;
//     that is f32 arithmetic on the exact quants, equal to the exact dequantization up to f32
//     rounding of the sums.

// quantDTypes are the block formats the kernels read: every format of the table whose layout
// the generators handle (see checkLayout).
var quantDTypes = func() []ir.DType {
	var out []ir.DType
	for _, d := range ir.QuantizedDTypes() {
		if checkLayout(d.Format()) == nil {
			out = append(out, d)
		}
	}
	return out
}()

// QuantizedDTypes lists the block-quantized weight dtypes that kernel templates read (the
// formats of ir/quant whose layouts the generators handle); the others are dequantized at
// compile time by lowering's fallback.
func QuantizedDTypes() []ir.DType { return append([]ir.DType(nil), quantDTypes...) }

// checkLayout reports whether the generators handle f's layout: the low bits of four
// consecutive elements are four consecutive bytes at one shift (the first digit of Low's
// radix runs over bytes, in whole words), quants have at most 8 bits, a codebook has an entry
// for each of at most 16 quants, sub-blocks are whole words of elements, the scales are of a
// kind subScale knows, and f16/f32 scales sit at even offsets (blocks of an odd number of bytes,
// MXFP4's 17, have byte scales only).
func checkLayout(f *quant.Format) error {
	l := f.Layout
	if l == nil {
		return fmt.Errorf("%s is not a block format", f.Name)
	}
	lo := l.Low
	if len(lo.Radix) == 0 || lo.Radix[0]%4 != 0 || lo.ByteStride[0] != 1 || lo.ShiftStride[0] != 0 {
		return fmt.Errorf("%s: the low bits of consecutive elements are not consecutive bytes", f.Name)
	}
	w := lo.Width
	if l.High != nil {
		w += l.High.Width
	}
	if w > 8 {
		return fmt.Errorf("%s: %d-bit quants", f.Name, w)
	}
	if l.Values != nil && (len(l.Values) != 1<<w || w > 4) {
		return fmt.Errorf("%s: a codebook of %d entries for %d-bit quants (at most 16)", f.Name, len(l.Values), w)
	}
	if l.Sub%4 != 0 || f.BlockElems%l.Sub != 0 {
		return fmt.Errorf("%s: sub-blocks of %d elements", f.Name, l.Sub)
	}
	switch l.SubScales {
	case quant.NoSubScales, quant.KScales6, quant.Int8Scales:
	case quant.PackedScales:
		if l.SubScale == nil {
			return fmt.Errorf("%s: packed sub-block scales without SubScale", f.Name)
		}
	default:
		return fmt.Errorf("%s: sub-block scales of kind %d", f.Name, l.SubScales)
	}
	switch l.Combine {
	case quant.Scaled, quant.ScaledPlusMin, quant.SubScaledMinusMin, quant.SubScaled:
	default:
		return fmt.Errorf("%s: combine rule %s", f.Name, l.Combine)
	}
	for _, s := range []quant.Scalar{l.D, l.M} {
		switch s.Type {
		case 0:
		case quant.F16, quant.F32:
			if f.BlockBytes%2 != 0 || s.Offset%2 != 0 {
				return fmt.Errorf("%s: a %s scale at byte %d of %d-byte blocks is not 16-bit aligned", f.Name, s.Type, s.Offset, f.BlockBytes)
			}
		case quant.E8M0:
		default:
			return fmt.Errorf("%s: scale of type %s", f.Name, s.Type)
		}
	}
	if l.D.Type == 0 {
		return fmt.Errorf("%s: no block scale", f.Name)
	}
	return nil
}

// readsBlocks reports whether kernels read dtype d's blocks.
func readsBlocks(d ir.DType) bool {
	for _, q := range quantDTypes {
		if q == d {
			return true
		}
	}
	return false
}

// blockReader reads the fields of one block of a quantized weight bound as u32 words. Offsets
// are bytes from the block's start (off) plus, optionally, a run-time multiple of four (dyn).
// A block starts at any byte: at a multiple of 4 when BlockBytes is one, else at an even byte
// (18-, 22-, 34-, 110-, 210-byte blocks) or at any byte (MXFP4's 17).
type blockReader struct {
	b    *codegen.Builder
	buf  *codegen.Buffer // the weight, as u32 words
	base codegen.Value   // the block's byte offset in buf
	// aligned: base is a multiple of 4 (BlockBytes is, and the weight starts at a word), so a
	// word at a multiple of 4 is one load; otherwise base is even and a word may straddle two.
	aligned bool
	words   map[int]codegen.Value // aligned words at constant offsets, loaded once
}

func newBlockReader(b *codegen.Builder, buf *codegen.Buffer, f *quant.Format, base codegen.Value) *blockReader {
	return &blockReader{b: b, buf: buf, base: base, aligned: f.BlockBytes%4 == 0, words: map[int]codegen.Value{}}
}

func (r *blockReader) u(x int) codegen.Value { return r.b.U32(uint32(x)) }

// addr is the byte address base + off + dyn.
func (r *blockReader) addr(off int, dyn codegen.Value) codegen.Value {
	a := r.b.Add(r.base, r.u(off))
	if dyn.Valid() {
		a = r.b.Add(a, dyn)
	}
	return a
}

// word is the little-endian u32 of the four bytes at off + dyn (dyn a multiple of 4, or the
// zero Value), at any byte address.
func (r *blockReader) word(off int, dyn codegen.Value) codegen.Value {
	b := r.b
	if r.aligned && off%4 == 0 {
		if !dyn.Valid() {
			if w, ok := r.words[off]; ok {
				return w
			}
		}
		w := b.Load(r.buf, b.Shr(r.addr(off, dyn), r.u(2)))
		if !dyn.Valid() {
			r.words[off] = w
		}
		return w
	}
	return r.wordAt(r.addr(off, dyn))
}

// wordAt is the u32 of the four bytes at byte address a: one word, or the parts of two (the
// second is loaded only when the first does not hold all four bytes, so no load passes the
// weight's last word).
func (r *blockReader) wordAt(a codegen.Value) codegen.Value {
	b := r.b
	i := b.Shr(a, r.u(2))
	sh := b.Shl(b.And(a, r.u(3)), r.u(3))
	straddles := b.Ne(sh, r.u(0))
	lo := b.Load(r.buf, i)
	hi := b.Load(r.buf, b.Select(straddles, b.Add(i, r.u(1)), i))
	joined := b.Or(b.Shr(lo, sh), b.Shl(hi, b.And(b.Sub(r.u(32), sh), r.u(31))))
	return b.Select(straddles, joined, lo)
}

// run is the n consecutive words at off + dyn, off + dyn + 4, … (dyn a multiple of 4, or the
// zero Value): n loads when the block's words are aligned; otherwise the n+1 aligned words around
// them, each word shifted out of a neighbouring pair (a funnel shift at the run-time byte
// position, 0 to 24 bits), so that a run of n words costs n+1 loads rather than 2n and no
// select. The last of the n+1 words is clamped to lastWord (the weight's last word): it is
// needed only when the run does not start on a word, and then it lies in the block.
func (r *blockReader) run(off int, dyn codegen.Value, n, lastWord int) []codegen.Value {
	b := r.b
	out := make([]codegen.Value, n)
	if r.aligned && off%4 == 0 {
		i0 := b.Shr(r.addr(off, dyn), r.u(2))
		for i := range out {
			out[i] = b.Load(r.buf, b.Add(i0, r.u(i)))
		}
		return out
	}
	a := r.addr(off, dyn)
	i0 := b.Shr(a, r.u(2))
	sh := b.Shl(b.And(a, r.u(3)), r.u(3))
	inv := b.Sub(r.u(31), sh)
	ws := make([]codegen.Value, n+1)
	for i := 0; i < n; i++ {
		ws[i] = b.Load(r.buf, b.Add(i0, r.u(i)))
	}
	ws[n] = b.Load(r.buf, b.Min(b.Add(i0, r.u(n)), r.u(lastWord)))
	for i := range out {
		// w_i >> sh | w_{i+1} << (32 − sh), as two shifts so that sh = 0 leaves nothing of w_{i+1}.
		out[i] = b.Or(b.Shr(ws[i], sh), b.Shl(b.Shl(ws[i+1], r.u(1)), inv))
	}
	return out
}

// byteAt is the byte at off + dyn (dyn any run-time offset, or the zero Value), as a u32.
func (r *blockReader) byteAt(off int, dyn codegen.Value) codegen.Value {
	b := r.b
	if r.aligned && !dyn.Valid() {
		return b.And(b.Shr(r.word(off&^3, codegen.Value{}), r.u(8*(off&3))), r.u(0xff))
	}
	a := r.addr(off, dyn)
	w := b.Load(r.buf, b.Shr(a, r.u(2)))
	return b.And(b.Shr(w, b.Shl(b.And(a, r.u(3)), r.u(3))), r.u(0xff))
}

// half is the f16 at the even offset off, as f32.
func (r *blockReader) half(off int) codegen.Value {
	b := r.b
	if r.aligned {
		v := b.UnpackHalf2x16(r.word(off&^3, codegen.Value{}))
		if off%4 == 0 {
			return b.X(v)
		}
		return b.Y(v)
	}
	a := r.addr(off, codegen.Value{})
	v := b.UnpackHalf2x16(b.Load(r.buf, b.Shr(a, r.u(2))))
	return b.Select(b.Ne(b.And(a, r.u(2)), r.u(0)), b.Y(v), b.X(v))
}

// scalar reads a block scale field (f16, f32 or e8m0) as f32.
func (r *blockReader) scalar(s quant.Scalar) codegen.Value {
	b := r.b
	switch s.Type {
	case quant.F32:
		// f32 fields are word-aligned in every format that has one (Q8_K: 292-byte blocks).
		return b.Bitcast(r.word(s.Offset, codegen.Value{}), codegen.F32)
	case quant.E8M0:
		// quant.E8M0Half: the bits (e−1)<<23 for e ≥ 2, the subnormals 0x200000<<e below. A
		// device that flushes f32 subnormals gives 0 for e < 2 (scales of 2^−127 and less, which
		// no trained weight has).
		e := r.byteAt(s.Offset, codegen.Value{})
		bits := b.Select(b.Lt(e, r.u(2)), b.Shl(r.u(0x00200000), e), b.Shl(b.Sub(e, r.u(1)), r.u(23)))
		return b.Bitcast(bits, codegen.F32)
	}
	return r.half(s.Offset)
}

// locate is the byte offset and shift of element j's bits in f's block (quant.Bits.Locate at a
// run-time index; radices are constants, so the digits are shifts and masks for the powers of
// two every format uses).
func locate(b *codegen.Builder, bits *quant.Bits, j codegen.Value) (off, shift codegen.Value) {
	off, shift = b.U32(uint32(bits.Offset)), b.U32(uint32(bits.Shift))
	for k, radix := range bits.Radix {
		d := b.Rem(j, b.U32(uint32(radix)))
		if k < len(bits.Radix)-1 {
			j = b.Div(j, b.U32(uint32(radix)))
		}
		if s := bits.ByteStride[k]; s != 0 {
			off = b.Add(off, b.Mul(d, b.U32(uint32(s))))
		}
		if s := bits.ShiftStride[k]; s != 0 {
			shift = b.Add(shift, b.Mul(d, b.U32(uint32(s))))
		}
	}
	return off, shift
}

// kScaleMin is ggml's get_scale_min_k4 at a run-time sub-block index sub (0..7) of the 12 scale
// bytes at offset at: the 6-bit scale and min, as u32 (quant.KScaleMin).
func (r *blockReader) kScaleMin(at int, sub codegen.Value) (sc, mn codegen.Value) {
	b := r.b
	low := b.Lt(sub, r.u(4))
	sj := r.byteAt(at, sub)
	sj4 := r.byteAt(at+4, sub)
	sjm4 := r.byteAt(at, b.Select(low, sub, b.Sub(sub, r.u(4))))
	six := func(v codegen.Value) codegen.Value { return b.Shl(b.Shr(v, r.u(6)), r.u(4)) }
	sc = b.Select(low, b.And(sj, r.u(63)), b.Or(b.And(sj4, r.u(15)), six(sjm4)))
	mn = b.Select(low, b.And(sj4, r.u(63)), b.Or(b.Shr(sj4, r.u(4)), six(sj)))
	return sc, mn
}

// kScaleMinConst is kScaleMin for a sub-block index known when the kernel is built.
func (r *blockReader) kScaleMinConst(at, sub int) (sc, mn codegen.Value) {
	b := r.b
	if sub < 4 {
		return b.And(r.byteAt(at+sub, codegen.Value{}), r.u(63)), b.And(r.byteAt(at+sub+4, codegen.Value{}), r.u(63))
	}
	sj4 := r.byteAt(at+sub+4, codegen.Value{})
	sc = b.Or(b.And(sj4, r.u(15)), b.Shl(b.Shr(r.byteAt(at+sub-4, codegen.Value{}), r.u(6)), r.u(4)))
	mn = b.Or(b.Shr(sj4, r.u(4)), b.Shl(b.Shr(r.byteAt(at+sub, codegen.Value{}), r.u(6)), r.u(4)))
	return sc, mn
}

// subScale is the (d·sc, dmin·m) pair of sub-block sub (a constant when subConst ≥ 0, else the
// run-time subDyn) of a sub-scaled format, each rounded to f32 as ggml does; the min is the
// zero Value for formats without one.
func (r *blockReader) subScale(l *quant.Layout, d, dmin codegen.Value, subConst int, subDyn codegen.Value) (scale, min codegen.Value) {
	b := r.b
	switch l.SubScales {
	case quant.KScales6:
		var sc, mn codegen.Value
		if subConst >= 0 {
			sc, mn = r.kScaleMinConst(l.SubOffset, subConst)
		} else {
			sc, mn = r.kScaleMin(l.SubOffset, subDyn)
		}
		return b.Mul(d, smallF32(b, sc, 0)), b.Mul(dmin, smallF32(b, mn, 0))
	case quant.Int8Scales:
		var v codegen.Value
		if subConst >= 0 {
			v = r.byteAt(l.SubOffset+subConst, codegen.Value{})
		} else {
			v = r.byteAt(l.SubOffset, subDyn)
		}
		// The signed byte v as v ^ 0x80 (its value plus 128, unsigned) less 128.
		return b.Mul(d, smallF32(b, b.Xor(v, r.u(0x80)), 128)), codegen.Value{}
	case quant.PackedScales:
		scale = b.Mul(d, smallF32(b, r.packedBits(l.SubScale, subConst, subDyn), l.SubScale.Bias))
		if l.SubMin != nil {
			min = b.Mul(dmin, smallF32(b, r.packedBits(l.SubMin, subConst, subDyn), l.SubMin.Bias))
		}
		return scale, min
	}
	return d, codegen.Value{}
}

// bitsOf is index i's bits of a quant.Bits (i a constant when iConst ≥ 0, else the run-time
// iDyn), as a u32.
func (r *blockReader) bitsOf(bits *quant.Bits, iConst int, iDyn codegen.Value) codegen.Value {
	b := r.b
	var v codegen.Value
	if iConst >= 0 {
		off, sh := bits.Locate(iConst)
		v = b.Shr(r.byteAt(off, codegen.Value{}), r.u(sh))
	} else {
		off, sh := locate(b, bits, iDyn)
		v = b.Shr(r.byteAt(0, off), sh)
	}
	return b.And(v, r.u(1<<bits.Width-1))
}

// smallF32 is the f32 v − bias of a u32 v below 2²³: v or-ed into the mantissa of 2²³ (the
// float 2²³ + v) less 2²³ + bias, exact. A sub-block scale's conversion costs an or and a
// subtraction at the rate of an add, where an int-to-float conversion issues at a quarter of
// it or less (NVIDIA: 16 a clock an SM); a K-quant unit converts a scale and a min for each of
// its eight sub-blocks.
func smallF32(b *codegen.Builder, v codegen.Value, bias int) codegen.Value {
	f := b.Bitcast(b.Or(v, b.U32(0x4b000000)), codegen.F32)
	return b.Sub(f, b.F32(float32(1<<23+bias)))
}

// packedBits is index i's unsigned bits of a quant.Packed (Packed.Extract before its bias), as
// a u32.
func (r *blockReader) packedBits(p *quant.Packed, iConst int, iDyn codegen.Value) codegen.Value {
	b := r.b
	v := r.bitsOf(&p.Low, iConst, iDyn)
	if p.High != nil {
		v = b.Or(v, b.Shl(r.bitsOf(p.High, iConst, iDyn), r.u(p.Low.Width)))
	}
	return v
}

// codebook maps unsigned quants u (a u32, or a vector of them, each below len(values) ≤ 16) to
// their codebook entries as i32: the 16 signed bytes are four constant words, the word is chosen
// by two compares and the byte shifted out and sign-extended, so no table lives in memory.
func codebook(b *codegen.Builder, values []int8, u codegen.Value) codegen.Value {
	var words [4]uint32
	for i, v := range values {
		words[i/4] |= uint32(uint8(v)) << (8 * (i % 4))
	}
	n := 1
	if t := u.Type(); t.IsVector() {
		n = t.Len()
	}
	c := func(x uint32) codegen.Value {
		if n == 1 {
			return b.U32(x)
		}
		return b.Splat(b.U32(x), n)
	}
	w := b.Select(b.Lt(u, c(8)), b.Select(b.Lt(u, c(4)), c(words[0]), c(words[1])), b.Select(b.Lt(u, c(12)), c(words[2]), c(words[3])))
	byteV := b.Shl(b.Shr(w, b.Shl(b.And(u, c(3)), c(3))), c(24))
	it := codegen.I32
	if n > 1 {
		it = codegen.Vec(codegen.I32, n)
	}
	sh := c(24)
	return b.Shr(b.Bitcast(byteV, it), sh)
}

// signedQuant is the integer quant (i32, or a vector) of the unsigned quants u of width bits: the
// codebook entry, the two's-complement value or u less the bias, as the layout says.
func signedQuant(b *codegen.Builder, l *quant.Layout, u codegen.Value, width int) codegen.Value {
	n := 1
	if t := u.Type(); t.IsVector() {
		n = t.Len()
	}
	if l.Values != nil {
		return codebook(b, l.Values, u)
	}
	it := codegen.I32
	if n > 1 {
		it = codegen.Vec(codegen.I32, n)
	}
	splat := func(x codegen.Value) codegen.Value {
		if n == 1 {
			return x
		}
		return b.Splat(x, n)
	}
	q := b.Bitcast(u, it)
	switch {
	case l.Signed:
		s := splat(b.U32(uint32(32 - width)))
		q = b.Shr(b.Shl(q, s), s)
	case l.Bias != 0:
		q = b.Sub(q, splat(b.I32(int32(l.Bias))))
	}
	return q
}

// quantOf is element j's integer quant (i32): its low bits with its high bits above, biased,
// sign-extended or mapped through the codebook, as the layout says.
func (r *blockReader) quantOf(l *quant.Layout, j codegen.Value) codegen.Value {
	b := r.b
	off, sh := locate(b, &l.Low, j)
	u := b.And(b.Shr(r.byteAt(0, off), sh), r.u(1<<l.Low.Width-1))
	w := l.Low.Width
	if l.High != nil {
		hoff, hsh := locate(b, l.High, j)
		h := b.And(b.Shr(r.byteAt(0, hoff), hsh), r.u(1<<l.High.Width-1))
		u = b.Or(u, b.Shl(h, r.u(w)))
		w += l.High.Width
	}
	return signedQuant(b, l, u, w)
}

// decodeElement is element j (a run-time u32 below BlockElems) of the block read by r, as f32,
// computed as quant.Format.Element does (so as ggml's dequantizer: the same products and
// differences, each rounded to f32).
func decodeElement(r *blockReader, f *quant.Format, j codegen.Value) codegen.Value {
	b, l := r.b, f.Layout
	q := b.Convert(r.quantOf(l, j), codegen.F32)
	d := r.scalar(l.D)
	switch l.Combine {
	case quant.Scaled:
		return b.Mul(d, q)
	case quant.ScaledPlusMin:
		return b.Add(b.Mul(d, q), r.scalar(l.M))
	case quant.SubScaledMinusMin:
		sc, mn := r.subScale(l, d, r.scalar(l.M), -1, b.Div(j, r.u(l.Sub)))
		return b.Sub(b.Mul(sc, q), mn)
	case quant.SubScaled:
		sc, _ := r.subScale(l, d, codegen.Value{}, -1, b.Div(j, r.u(l.Sub)))
		return b.Mul(sc, q)
	}
	panic("kernels: no combine rule for " + f.Name)
}

// quantRows describes a block-quantized matrix of rows × cols (cols a whole number of blocks):
// element (row, k) is element k mod BlockElems of block row·cols/BlockElems + k/BlockElems.
type quantRows struct {
	f        *quant.Format
	blocksPR int // blocks per row
}

func newQuantRows(d ir.DType, cols int) quantRows {
	f := d.Format()
	return quantRows{f: f, blocksPR: cols / f.BlockElems}
}

// element decodes element (row, k) of the matrix in buf (u32 words).
func (q quantRows) element(b *codegen.Builder, buf *codegen.Buffer, row, k codegen.Value) codegen.Value {
	f := q.f
	blk := b.Add(b.Mul(row, b.U32(uint32(q.blocksPR))), b.Div(k, b.U32(uint32(f.BlockElems))))
	r := newBlockReader(b, buf, f, b.Mul(blk, b.U32(uint32(f.BlockBytes))))
	return decodeElement(r, f, b.Rem(k, b.U32(uint32(f.BlockElems))))
}

// quadOf is elements j..j+3 of the block read by r (j a run-time multiple of 4), as a vec4 of
// f32, each computed as decodeElement computes it: the four quants come from one word of low
// bits (and one of high bits where the layout puts them in consecutive bytes too), and the block
// and sub-block scales are read once for the four (a sub-block is a whole number of words).
func quadOf(r *blockReader, f *quant.Format, j codegen.Value) codegen.Value {
	b, l := r.b, f.Layout
	u := func(x int) codegen.Value { return b.U32(uint32(x)) }
	word := func(bits *quant.Bits) (codegen.Value, codegen.Value) {
		off, sh := locate(b, bits, j)
		return r.wordAt(b.Add(r.base, off)), sh
	}
	lw, lsh := word(&l.Low)
	var hw, hsh codegen.Value
	hWords := l.High != nil && l.High.ByteStride[0] == 1 && l.High.ShiftStride[0] == 0 && l.High.Radix[0]%4 == 0
	if hWords {
		hw, hsh = word(l.High)
	}
	qs := make([]codegen.Value, 4)
	width := l.Low.Width
	for e := range qs {
		v := b.And(b.Shr(lw, b.Add(lsh, u(8*e))), u(1<<l.Low.Width-1))
		w := l.Low.Width
		if l.High != nil {
			var h codegen.Value
			if hWords {
				h = b.Shr(hw, b.Add(hsh, u(8*e)))
			} else {
				off, sh := locate(b, l.High, b.Add(j, u(e)))
				h = b.Shr(r.byteAt(0, off), sh)
			}
			v = b.Or(v, b.Shl(b.And(h, u(1<<l.High.Width-1)), u(w)))
			w += l.High.Width
		}
		qs[e] = v
		width = w
	}
	q := b.Convert(signedQuant(b, l, b.Vec(qs...), width), codegen.Vec(codegen.F32, 4))
	d := r.scalar(l.D)
	splat := func(x codegen.Value) codegen.Value { return b.Splat(x, 4) }
	switch l.Combine {
	case quant.Scaled:
		return b.Mul(splat(d), q)
	case quant.ScaledPlusMin:
		return b.Add(b.Mul(splat(d), q), splat(r.scalar(l.M)))
	case quant.SubScaledMinusMin:
		sc, mn := r.subScale(l, d, r.scalar(l.M), -1, b.Div(j, u(l.Sub)))
		return b.Sub(b.Mul(splat(sc), q), splat(mn))
	case quant.SubScaled:
		sc, _ := r.subScale(l, d, codegen.Value{}, -1, b.Div(j, u(l.Sub)))
		return b.Mul(splat(sc), q)
	}
	panic("kernels: no combine rule for " + f.Name)
}

// quad decodes elements (row, k..k+3) of the matrix in buf (k a multiple of 4).
func (q quantRows) quad(b *codegen.Builder, buf *codegen.Buffer, row, k codegen.Value) codegen.Value {
	f := q.f
	blk := b.Add(b.Mul(row, b.U32(uint32(q.blocksPR))), b.Div(k, b.U32(uint32(f.BlockElems))))
	r := newBlockReader(b, buf, f, b.Mul(blk, b.U32(uint32(f.BlockBytes))))
	return quadOf(r, f, b.Rem(k, b.U32(uint32(f.BlockElems))))
}
