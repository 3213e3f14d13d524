// Package quant describes ggml's tensor storage formats as data: the plain ones (F32, F16, BF16)
// and the block-quantized ones llama.cpp writes into GGUF files (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL, IQ4_XS, MXFP4). It is a leaf package: ir (dtypes,
// the interpreter), the GGUF reader and the kernel templates all read the same table.
//
// Each format is one row of Formats: the elements and bytes of one block, the block's fields
// in struct order (as ggml-common.h declares them), a Layout that says where each element's
// quant and scales live (data a kernel generator can follow), and one reference dequantizer
// written as plain loops in ggml's order of operations, so it gives ggml's float32 values bit
// for bit (d·q; d·q + m; (d·sc)·q − (dmin·m) for Q2_K/Q4_K/Q5_K; (d·sc)·q for Q3_K/Q6_K; with a
// codebook entry for q in IQ4_NL, IQ4_XS and MXFP4).
//
// A block never crosses a row: a tensor's innermost dimension (GGUF's ne[0], the last axis of
// an ir shape) must be a multiple of BlockElems, and a row of n elements is n/BlockElems blocks
// one after the other.
//
// Limits: only the formats listed (not the lattice-codebook IQ1_*/IQ2_*/IQ3_* nor TQ*: GGMLName
// names them, and readers refuse them by that name); quantizers for q8_0 and q4_0 only (a KV
// cache in those formats, quantize.go: ggml's reference quantizers; vkc reads quantized weight
// files, it does not write them); big-endian data is not supported (GGUF files are
// little-endian).
package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"

	"github.com/x448/float16"
)

// MaxBlockElems is the most elements a block of any format has (the K-quants' 256), so a caller
// can dequantize one block into a fixed array.
const MaxBlockElems = 256

// Format is one storage format.
type Format struct {
	// Name is how model.yaml, plans and messages spell the format: "q4_k", "f16".
	Name string
	// GGML is the ggml_type number GGUF tensor infos store (GGML_TYPE_Q4_K = 12).
	GGML uint32
	// BlockElems and BlockBytes are the elements and bytes of one block (1 and the element size
	// for the plain formats).
	BlockElems, BlockBytes int
	// Fields are the block's members in struct order (empty for the plain formats).
	Fields []Field
	// Layout says how an element is unpacked (nil for the plain formats).
	Layout *Layout
	// dequant is the reference: one block to BlockElems float32s.
	dequant func(b []byte, y []float32)
	// quantize is ggml's reference quantizer of one block, for the formats a KV cache may
	// take (quantize.go); nil for the others.
	quantize func(x []float32, b []byte)
}

// FieldType is the element type of a block field.
type FieldType uint8

const (
	U8  FieldType = iota + 1 // packed quants or scales
	I8                       // signed 8-bit quants or scales
	I16                      // Q8_K's block sums
	F16                      // IEEE half scales (ggml_half)
	F32                      // float scales (Q8_K's d)
	// E8M0 is a power-of-two scale byte e (MXFP4's): as a Scalar it reads 2^(e−128), ggml's
	// GGML_E8M0_TO_FP32_HALF, half the OCP value 2^(e−127) because ggml's e2m1 codebook is doubled
	// (kvalues_mxfp4 holds 2·v); e < 2 gives the subnormals 2^−128 and 2^−127, e = 255 2^127
	// (no NaN).
	E8M0
)

var fieldTypeNames = [...]string{U8: "u8", I8: "i8", I16: "i16", F16: "f16", F32: "f32", E8M0: "e8m0"}

func (t FieldType) String() string {
	if int(t) < len(fieldTypeNames) && fieldTypeNames[t] != "" {
		return fieldTypeNames[t]
	}
	return fmt.Sprintf("fieldtype(%d)", uint8(t))
}

// Size is the bytes of one element of the field type.
func (t FieldType) Size() int {
	switch t {
	case U8, I8, E8M0:
		return 1
	case I16, F16:
		return 2
	case F32:
		return 4
	}
	return 0
}

// Field is one member of a block struct: Count elements of Type at byte Offset.
type Field struct {
	Name   string
	Offset int
	Type   FieldType
	Count  int
	Doc    string
}

// Bytes is the field's size.
func (f Field) Bytes() int { return f.Count * f.Type.Size() }

// Combine is how an element's integer quant q and its scales make the value (all in float32,
// each product and difference rounded to float32 before the next, as ggml computes them).
type Combine uint8

const (
	// Scaled: y = d·q (Q4_0, Q5_0, Q8_0, Q8_K).
	Scaled Combine = iota + 1
	// ScaledPlusMin: y = d·q + m (Q4_1, Q5_1).
	ScaledPlusMin
	// SubScaledMinusMin: y = (d·sc)·q − (dmin·mn), sc and mn the integer scale and min of the
	// element's sub-block (Q4_K, Q5_K: 6 bits; Q2_K: 4 bits).
	SubScaledMinusMin
	// SubScaled: y = (d·sc)·q, sc the signed integer scale of the element's sub-block (Q6_K: 8
	// bits; Q3_K, IQ4_XS: 6 bits less 32).
	SubScaled
)

var combineNames = [...]string{Scaled: "d·q", ScaledPlusMin: "d·q + m", SubScaledMinusMin: "(d·sc)·q − (dmin·m)", SubScaled: "(d·sc)·q"}

func (c Combine) String() string {
	if int(c) < len(combineNames) && combineNames[c] != "" {
		return combineNames[c]
	}
	return fmt.Sprintf("combine(%d)", uint8(c))
}

// SubScales says how the sub-block scales of a K-quant are stored.
type SubScales uint8

const (
	// NoSubScales: one scale (and min) for the whole block.
	NoSubScales SubScales = iota
	// KScales6 are the 12 bytes of 6-bit scales and mins of 8 sub-blocks of 32 elements (Q4_K,
	// Q5_K), as ggml's get_scale_min_k4 unpacks them; see KScaleMin.
	KScales6
	// Int8Scales are one signed byte per sub-block (Q6_K: 16 sub-blocks of 16).
	Int8Scales
	// PackedScales are integers packed as Layout.SubScale (and Layout.SubMin) describe: Q2_K's
	// nibbles (scale low, min high), Q3_K's and IQ4_XS's 6-bit scales split into a low nibble
	// and two high bits, stored plus 32.
	PackedScales
)

// Bits says where one group of bits of each element's quant lives. Element j of a block
// (0 ≤ j < BlockElems) is written in the mixed radix Radix, least significant digit first:
// j = d₀ + Radix[0]·(d₁ + Radix[1]·(d₂ + …)). Its bits are
//
//	(block[Offset + Σ dₖ·ByteStride[k]] >> (Shift + Σ dₖ·ShiftStride[k])) & (1<<Width − 1)
//
// For example Q4_0's low nibbles: element j < 16 is the low nibble of qs[j], element j ≥ 16 the
// high nibble of qs[j−16]: Radix [16, 2], ByteStride [1, 0], ShiftStride [0, 4].
type Bits struct {
	Offset int
	Width  int
	// Shift is added to every element's shift (Q2_K's mins, the high nibbles of its scale
	// bytes); 0 for the quants of every format.
	Shift       int
	Radix       []int
	ByteStride  []int
	ShiftStride []int
}

// Locate returns the byte (from the block's start) and shift of element j's bits.
func (b *Bits) Locate(j int) (byteIndex, shift int) {
	byteIndex, shift = b.Offset, b.Shift
	for k, r := range b.Radix {
		d := j % r
		j /= r
		byteIndex += d * b.ByteStride[k]
		shift += d * b.ShiftStride[k]
	}
	return byteIndex, shift
}

// Extract returns element j's bits from block.
func (b *Bits) Extract(block []byte, j int) int {
	i, s := b.Locate(j)
	return int(block[i]>>s) & (1<<b.Width - 1)
}

// Packed is a small unsigned integer per index i stored as bits: Low (at index i), with High's
// bits above them when High is set, less Bias. Layout.SubScale and SubMin use it for packed
// sub-block scales: Q3_K's scale s is its low nibble (byte s%8, shift 4·(s/8) of the scales)
// with two high bits (byte 8 + s%4, shift 2·(s/4)), less 32.
type Packed struct {
	Low  Bits
	High *Bits
	Bias int
}

// Extract returns index i's integer from block.
func (p *Packed) Extract(block []byte, i int) int {
	v := p.Low.Extract(block, i)
	if p.High != nil {
		v |= p.High.Extract(block, i) << p.Low.Width
	}
	return v - p.Bias
}

// Layout is how a quantized block is unpacked, as data: an element's unsigned quant is its
// Low bits with its High bits (if any) above them; Signed reinterprets it as two's complement
// (the 8-bit formats); Bias is subtracted, or the codebook Values maps it; the value is Combine
// of that integer q with the block scale D, the block min M, and the scale (and min) of the
// element's sub-block of Sub elements. The legacy, K-quant, IQ4 and MXFP4 formats differ only in
// these fields, so one kernel generator can serve all of them.
type Layout struct {
	Low    Bits
	High   *Bits // nil when the quant has only Low bits
	Signed bool  // the quant is Low.Width-bit two's complement (Q8_0, Q8_K)
	Bias   int   // subtracted from the unsigned quant: 8 (Q4_0), 16 (Q5_0), 32 (Q6_K), 4 (Q3_K), else 0
	// Values, when set, is the format's codebook: q is Values[unsigned quant] (IQ4_NL and IQ4_XS:
	// ggml's kvalues_iq4nl; MXFP4: kvalues_mxfp4, twice the e2m1 values). Signed and Bias are
	// then unused.
	Values []int8
	// D is the byte offset and type of the block scale; M that of the min (Q4_1/Q5_1's m,
	// Q4_K/Q5_K's dmin), or Type 0 when there is none.
	D, M Scalar
	// Sub is the elements per sub-block (BlockElems when the whole block shares one scale),
	// SubScales how the sub-block scales are stored, at byte SubOffset.
	Sub       int
	SubScales SubScales
	SubOffset int
	// SubScale and SubMin are the integer scale and min of sub-block s (PackedScales only; SubMin
	// nil for the formats without mins): SubScale.Extract(block, s).
	SubScale, SubMin *Packed
	Combine          Combine
}

// SubScaleMin returns the integer scale and min of sub-block s of block (min 0 where the format
// has none), as the layout stores them.
func (l *Layout) SubScaleMin(block []byte, s int) (sc, mn int) {
	switch l.SubScales {
	case KScales6:
		a, b := KScaleMin(block[l.SubOffset:], s)
		return int(a), int(b)
	case Int8Scales:
		return int(int8(block[l.SubOffset+s])), 0
	case PackedScales:
		sc = l.SubScale.Extract(block, s)
		if l.SubMin != nil {
			mn = l.SubMin.Extract(block, s)
		}
		return sc, mn
	}
	return 1, 0
}

// Quant returns element j's integer quant (before the scales): the bits, sign-extended, biased
// or mapped through the codebook.
func (l *Layout) Quant(block []byte, j int) int {
	u := l.Low.Extract(block, j)
	w := l.Low.Width
	if l.High != nil {
		u |= l.High.Extract(block, j) << w
		w += l.High.Width
	}
	switch {
	case l.Values != nil:
		return int(l.Values[u])
	case l.Signed && u >= 1<<(w-1):
		return u - 1<<w
	}
	return u - l.Bias
}

// Scalar is one scale field of a block.
type Scalar struct {
	Offset int
	Type   FieldType // F16 or F32; 0: absent
}

func (s Scalar) read(b []byte) float32 {
	switch s.Type {
	case F16:
		return f16(b[s.Offset:])
	case F32:
		return math.Float32frombits(binary.LittleEndian.Uint32(b[s.Offset:]))
	case E8M0:
		return E8M0Half(b[s.Offset])
	}
	return 0
}

// E8M0Half is the scale of an E8M0 byte as ggml's GGML_E8M0_TO_FP32_HALF computes it: the float32
// with bits (e−1)<<23, 2^(e−128), for e ≥ 2; the subnormals 2^−128 and 2^−127 (bits 0x200000 and
// 0x400000) for e = 0 and 1.
func E8M0Half(e uint8) float32 {
	if e < 2 {
		return math.Float32frombits(0x00200000 << e)
	}
	return math.Float32frombits(uint32(e-1) << 23)
}

// Quantized reports whether f is a block format (BlockElems > 1).
func (f *Format) Quantized() bool { return f.BlockElems > 1 }

func (f *Format) String() string { return f.Name }

// RowBytes is the storage of a row of n elements, or an error when n is not a whole number of
// blocks.
func (f *Format) RowBytes(n int) (int, error) {
	if n < 0 || n%f.BlockElems != 0 {
		return 0, fmt.Errorf("%s stores rows in blocks of %d elements; a row of %d is not a whole number of blocks", f.Name, f.BlockElems, n)
	}
	return n / f.BlockElems * f.BlockBytes, nil
}

// Bytes is the storage of a tensor of the given shape (innermost dimension last), or an error
// when its innermost dimension is not a whole number of blocks or the size overflows.
func (f *Format) Bytes(shape []int) (int, error) {
	if len(shape) == 0 {
		if f.Quantized() {
			return 0, fmt.Errorf("%s needs at least one dimension (a row of blocks)", f.Name)
		}
		return f.BlockBytes, nil
	}
	row, err := f.RowBytes(shape[len(shape)-1])
	if err != nil {
		return 0, err
	}
	n := row
	for _, d := range shape[:len(shape)-1] {
		if d < 0 || d != 0 && n > math.MaxInt/2/d {
			return 0, fmt.Errorf("%s tensor of shape %v is too large", f.Name, shape)
		}
		n *= d
	}
	return n, nil
}

// DequantizeBlock writes the BlockElems values of one block (len(block) ≥ BlockBytes) to y,
// exactly as ggml's dequantize_row_* (to_float) does. It is the reference every kernel is
// checked against.
func (f *Format) DequantizeBlock(block []byte, y []float32) {
	f.dequant(block[:f.BlockBytes], y[:f.BlockElems])
}

// Dequantize converts data holding len(y) elements (a whole number of blocks) to float32.
func (f *Format) Dequantize(data []byte, y []float32) error {
	if len(y)%f.BlockElems != 0 {
		return fmt.Errorf("%s: %d elements are not a whole number of blocks of %d", f.Name, len(y), f.BlockElems)
	}
	nb := len(y) / f.BlockElems
	if len(data) != nb*f.BlockBytes {
		return fmt.Errorf("%s: %d elements need %d bytes, got %d", f.Name, len(y), nb*f.BlockBytes, len(data))
	}
	if !f.Quantized() {
		f.dequant(data, y) // the plain formats' loops take any number of elements
		return nil
	}
	for i := 0; i < nb; i++ {
		f.dequant(data[i*f.BlockBytes:(i+1)*f.BlockBytes], y[i*f.BlockElems:(i+1)*f.BlockElems])
	}
	return nil
}

// Element computes element j of a block from the Layout alone (not the reference loops). It
// exists so that the table, which kernels are generated from, is itself checked against the
// reference dequantizers (TestLayoutMatchesReference); kernels should follow the same steps.
func (f *Format) Element(block []byte, j int) float32 {
	l := f.Layout
	if l == nil {
		var y [1]float32
		f.dequant(block[j*f.BlockBytes:], y[:])
		return y[0]
	}
	q := l.Quant(block, j)
	d := l.D.read(block)
	switch l.Combine {
	case Scaled:
		return d * float32(q)
	case ScaledPlusMin:
		return float32(d*float32(q)) + l.M.read(block)
	case SubScaledMinusMin:
		sc, mn := l.SubScaleMin(block, j/l.Sub)
		d1 := d * float32(sc)
		m1 := l.M.read(block) * float32(mn)
		return float32(d1*float32(q)) - m1
	case SubScaled:
		sc, _ := l.SubScaleMin(block, j/l.Sub)
		return float32(d*float32(sc)) * float32(q)
	}
	panic("quant: layout of " + f.Name + " has no combine rule")
}

// RandomBlocks returns n random blocks of f for tests: random quants, packed scales and mins,
// with every f16 or f32 scale field finite and moderate (|d| in [2⁻⁸, 2⁻¹); an E8M0 scale in
// [2⁻¹¹, 2⁻⁴], times MXFP4's codebook of at most 12), so dequantized values are finite and dot
// products stay well inside float32's range.
func (f *Format) RandomBlocks(r *rand.Rand, n int) []byte {
	out := make([]byte, n*f.BlockBytes)
	r.Read(out)
	if !f.Quantized() {
		// plain formats: random values in [-1, 1)
		for i := 0; i < n; i++ {
			v := float32(r.Float64()*2 - 1)
			switch f {
			case FormatF32:
				binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
			case FormatF16:
				binary.LittleEndian.PutUint16(out[2*i:], float16.Fromfloat32(v).Bits())
			case FormatBF16:
				binary.LittleEndian.PutUint16(out[2*i:], uint16(math.Float32bits(v)>>16))
			}
		}
		return out
	}
	for i := 0; i < n; i++ {
		b := out[i*f.BlockBytes : (i+1)*f.BlockBytes]
		for _, fd := range f.Fields {
			switch fd.Type {
			case F16:
				h := uint16(r.Intn(7)+7)<<10 | uint16(r.Intn(1024)) | uint16(r.Intn(2))<<15
				binary.LittleEndian.PutUint16(b[fd.Offset:], h)
			case F32:
				v := float32(math.Ldexp(1+r.Float64(), r.Intn(7)-8))
				if r.Intn(2) == 0 {
					v = -v
				}
				binary.LittleEndian.PutUint32(b[fd.Offset:], math.Float32bits(v))
			case E8M0:
				b[fd.Offset] = uint8(117 + r.Intn(8))
			}
		}
	}
	return out
}

// KScaleMin unpacks the 6-bit scale and min of sub-block j (0..7) from the 12 scale bytes of a
// Q4_K or Q5_K block (ggml's get_scale_min_k4): sub-blocks 0–3 keep theirs in the low 6 bits
// of bytes j (scale) and j+4 (min); sub-blocks 4–7 keep the low 4 bits in byte j+4 (scale in its
// low nibble, min in its high nibble) and the top 2 bits in the top 2 bits of bytes j−4 (scale)
// and j (min).
func KScaleMin(scales []byte, j int) (sc, m uint8) {
	if j < 4 {
		return scales[j] & 63, scales[j+4] & 63
	}
	sc = scales[j+4]&0xF | (scales[j-4]>>6)<<4
	m = scales[j+4]>>4 | (scales[j]>>6)<<4
	return sc, m
}

func f16(b []byte) float32 { return float16.Frombits(binary.LittleEndian.Uint16(b)).Float32() }

// The formats. The numbers are ggml's (ggml.h enum ggml_type); GGUF stores them.
var (
	FormatF32  = &Format{Name: "f32", GGML: 0, BlockElems: 1, BlockBytes: 4, dequant: dequantF32}
	FormatF16  = &Format{Name: "f16", GGML: 1, BlockElems: 1, BlockBytes: 2, dequant: dequantF16}
	FormatBF16 = &Format{Name: "bf16", GGML: 30, BlockElems: 1, BlockBytes: 2, dequant: dequantBF16}

	// Q4_0 (block_q4_0): d, then 16 bytes of nibbles; element j < 16 is qs[j] & 0xF, element
	// j+16 is qs[j] >> 4; y = d·(nibble − 8).
	Q4_0 = &Format{Name: "q4_0", GGML: 2, BlockElems: 32, BlockBytes: 18,
		Fields: []Field{
			{Name: "d", Offset: 0, Type: F16, Count: 1, Doc: "scale"},
			{Name: "qs", Offset: 2, Type: U8, Count: 16, Doc: "nibbles: element j in the low nibble of qs[j], j+16 in the high"},
		},
		Layout: &Layout{Low: Bits{Offset: 2, Width: 4, Radix: []int{16, 2}, ByteStride: []int{1, 0}, ShiftStride: []int{0, 4}},
			Bias: 8, D: Scalar{0, F16}, Sub: 32, Combine: Scaled},
		dequant: dequantQ4_0}
	// Q4_1 (block_q4_1): d, m, 16 bytes of nibbles; y = d·nibble + m.
	Q4_1 = &Format{Name: "q4_1", GGML: 3, BlockElems: 32, BlockBytes: 20,
		Fields: []Field{
			{Name: "d", Offset: 0, Type: F16, Count: 1, Doc: "scale"},
			{Name: "m", Offset: 2, Type: F16, Count: 1, Doc: "min"},
			{Name: "qs", Offset: 4, Type: U8, Count: 16, Doc: "nibbles, as Q4_0"},
		},
		Layout: &Layout{Low: Bits{Offset: 4, Width: 4, Radix: []int{16, 2}, ByteStride: []int{1, 0}, ShiftStride: []int{0, 4}},
			D: Scalar{0, F16}, M: Scalar{2, F16}, Sub: 32, Combine: ScaledPlusMin},
		dequant: dequantQ4_1}
	// Q5_0 (block_q5_0): d, qh (32 fifth bits, bit j for element j, little-endian), 16 bytes
	// of nibbles as Q4_0; y = d·(nibble | fifth bit << 4 − 16).
	Q5_0 = &Format{Name: "q5_0", GGML: 6, BlockElems: 32, BlockBytes: 22,
		Fields: []Field{
			{Name: "d", Offset: 0, Type: F16, Count: 1, Doc: "scale"},
			{Name: "qh", Offset: 2, Type: U8, Count: 4, Doc: "fifth bits: bit j of the little-endian u32 for element j"},
			{Name: "qs", Offset: 6, Type: U8, Count: 16, Doc: "low nibbles, as Q4_0"},
		},
		Layout: &Layout{Low: Bits{Offset: 6, Width: 4, Radix: []int{16, 2}, ByteStride: []int{1, 0}, ShiftStride: []int{0, 4}},
			High: &Bits{Offset: 2, Width: 1, Radix: []int{8, 4}, ByteStride: []int{0, 1}, ShiftStride: []int{1, 0}},
			Bias: 16, D: Scalar{0, F16}, Sub: 32, Combine: Scaled},
		dequant: dequantQ5_0}
	// Q5_1 (block_q5_1): d, m, qh, qs as Q5_0 without the bias; y = d·q + m.
	Q5_1 = &Format{Name: "q5_1", GGML: 7, BlockElems: 32, BlockBytes: 24,
		Fields: []Field{
			{Name: "d", Offset: 0, Type: F16, Count: 1, Doc: "scale"},
			{Name: "m", Offset: 2, Type: F16, Count: 1, Doc: "min"},
			{Name: "qh", Offset: 4, Type: U8, Count: 4, Doc: "fifth bits, as Q5_0"},
			{Name: "qs", Offset: 8, Type: U8, Count: 16, Doc: "low nibbles, as Q4_0"},
		},
		Layout: &Layout{Low: Bits{Offset: 8, Width: 4, Radix: []int{16, 2}, ByteStride: []int{1, 0}, ShiftStride: []int{0, 4}},
			High: &Bits{Offset: 4, Width: 1, Radix: []int{8, 4}, ByteStride: []int{0, 1}, ShiftStride: []int{1, 0}},
			D:    Scalar{0, F16}, M: Scalar{2, F16}, Sub: 32, Combine: ScaledPlusMin},
		dequant: dequantQ5_1}
	// Q8_0 (block_q8_0): d, 32 signed bytes; y = d·q.
	Q8_0 = &Format{Name: "q8_0", GGML: 8, BlockElems: 32, BlockBytes: 34,
		Fields: []Field{
			{Name: "d", Offset: 0, Type: F16, Count: 1, Doc: "scale"},
			{Name: "qs", Offset: 2, Type: I8, Count: 32, Doc: "quants"},
		},
		Layout: &Layout{Low: Bits{Offset: 2, Width: 8, Radix: []int{32}, ByteStride: []int{1}, ShiftStride: []int{0}},
			Signed: true, D: Scalar{0, F16}, Sub: 32, Combine: Scaled},
		dequant: dequantQ8_0}
	// Q2_K (block_q2_K): super-blocks of 256 = 16 sub-blocks of 16, each with a 4-bit scale (low
	// nibble of scales[s]) and min (high nibble); qs holds two halves of 128 in 32 bytes each:
	// element 128n + 32k + 16h + l (k < 4, h < 2, l < 16) is bits 2k of qs[32n + 16h + l];
	// d and dmin come last; y = (d·sc)·q − (dmin·m).
	Q2_K = &Format{Name: "q2_k", GGML: 10, BlockElems: 256, BlockBytes: 84,
		Fields: []Field{
			{Name: "scales", Offset: 0, Type: U8, Count: 16, Doc: "4-bit scale (low nibble) and min (high nibble) of 16 sub-blocks"},
			{Name: "qs", Offset: 16, Type: U8, Count: 64, Doc: "2-bit quants: element 128n+32k+16h+l at bits 2k of qs[32n+16h+l]"},
			{Name: "d", Offset: 80, Type: F16, Count: 1, Doc: "super-block scale of the sub-block scales"},
			{Name: "dmin", Offset: 82, Type: F16, Count: 1, Doc: "super-block scale of the sub-block mins"},
		},
		Layout: &Layout{Low: Bits{Offset: 16, Width: 2, Radix: []int{16, 2, 4, 2}, ByteStride: []int{1, 16, 0, 32}, ShiftStride: []int{0, 0, 2, 0}},
			D: Scalar{80, F16}, M: Scalar{82, F16}, Sub: 16, SubScales: PackedScales,
			SubScale: &Packed{Low: Bits{Offset: 0, Width: 4, Radix: []int{16}, ByteStride: []int{1}, ShiftStride: []int{0}}},
			SubMin:   &Packed{Low: Bits{Offset: 0, Width: 4, Shift: 4, Radix: []int{16}, ByteStride: []int{1}, ShiftStride: []int{0}}},
			Combine:  SubScaledMinusMin},
		dequant: dequantQ2_K}
	// Q3_K (block_q3_K): 16 sub-blocks of 16; element 128n + 32k + 16h + l has its low 2 bits
	// as Q2_K's (qs after the 32 bytes of hmask) and its third bit at bit 4n + k of
	// hmask[16h + l]; the 6-bit scales are packed in 12 bytes (scale s: low nibble at bits
	// 4·(s/8) of byte s%8, top 2 bits at bits 2·(s/4) of byte 8 + s%4), stored plus 32;
	// y = (d·(sc − 32))·(q − 4).
	Q3_K = &Format{Name: "q3_k", GGML: 11, BlockElems: 256, BlockBytes: 110,
		Fields: []Field{
			{Name: "hmask", Offset: 0, Type: U8, Count: 32, Doc: "third bits: element 128n+32k+16h+l at bit 4n+k of hmask[16h+l]"},
			{Name: "qs", Offset: 32, Type: U8, Count: 64, Doc: "low 2 bits, as Q2_K's"},
			{Name: "scales", Offset: 96, Type: U8, Count: 12, Doc: "6-bit scales of 16 sub-blocks, plus 32, packed"},
			{Name: "d", Offset: 108, Type: F16, Count: 1, Doc: "super-block scale"},
		},
		Layout: &Layout{Low: Bits{Offset: 32, Width: 2, Radix: []int{16, 2, 4, 2}, ByteStride: []int{1, 16, 0, 32}, ShiftStride: []int{0, 0, 2, 0}},
			High: &Bits{Offset: 0, Width: 1, Radix: []int{16, 2, 4, 2}, ByteStride: []int{1, 16, 0, 0}, ShiftStride: []int{0, 0, 1, 4}},
			Bias: 4, D: Scalar{108, F16}, Sub: 16, SubScales: PackedScales,
			SubScale: &Packed{Low: Bits{Offset: 96, Width: 4, Radix: []int{8, 2}, ByteStride: []int{1, 0}, ShiftStride: []int{0, 4}},
				High: &Bits{Offset: 104, Width: 2, Radix: []int{4, 4}, ByteStride: []int{1, 0}, ShiftStride: []int{0, 2}}, Bias: 32},
			Combine: SubScaled},
		dequant: dequantQ3_K}
	// Q4_K (block_q4_K): super-blocks of 256 = 8 sub-blocks of 32, each with a 6-bit scale and
	// min (KScaleMin); qs holds 4 groups of 64 elements in 32 bytes each: element 64g + l
	// (l < 32) is the low nibble of qs[32g + l], element 64g + 32 + l its high nibble;
	// y = (d·sc)·nibble − (dmin·m).
	Q4_K = &Format{Name: "q4_k", GGML: 12, BlockElems: 256, BlockBytes: 144,
		Fields: []Field{
			{Name: "d", Offset: 0, Type: F16, Count: 1, Doc: "super-block scale of the sub-block scales"},
			{Name: "dmin", Offset: 2, Type: F16, Count: 1, Doc: "super-block scale of the sub-block mins"},
			{Name: "scales", Offset: 4, Type: U8, Count: 12, Doc: "6-bit scales and mins of 8 sub-blocks (KScaleMin)"},
			{Name: "qs", Offset: 16, Type: U8, Count: 128, Doc: "nibbles: 4 groups of 64 elements, 32 bytes each"},
		},
		Layout: &Layout{Low: Bits{Offset: 16, Width: 4, Radix: []int{32, 2, 4}, ByteStride: []int{1, 0, 32}, ShiftStride: []int{0, 4, 0}},
			D: Scalar{0, F16}, M: Scalar{2, F16}, Sub: 32, SubScales: KScales6, SubOffset: 4, Combine: SubScaledMinusMin},
		dequant: dequantQ4_K}
	// Q5_K (block_q5_K): Q4_K with a fifth bit per element: element 64g + 32h + l has its
	// fifth bit at bit 2g + h of qh[l]; y = (d·sc)·q − (dmin·m).
	Q5_K = &Format{Name: "q5_k", GGML: 13, BlockElems: 256, BlockBytes: 176,
		Fields: []Field{
			{Name: "d", Offset: 0, Type: F16, Count: 1, Doc: "super-block scale of the sub-block scales"},
			{Name: "dmin", Offset: 2, Type: F16, Count: 1, Doc: "super-block scale of the sub-block mins"},
			{Name: "scales", Offset: 4, Type: U8, Count: 12, Doc: "6-bit scales and mins of 8 sub-blocks (KScaleMin)"},
			{Name: "qh", Offset: 16, Type: U8, Count: 32, Doc: "fifth bits: element 64g+32h+l at bit 2g+h of qh[l]"},
			{Name: "qs", Offset: 48, Type: U8, Count: 128, Doc: "low nibbles, as Q4_K"},
		},
		Layout: &Layout{Low: Bits{Offset: 48, Width: 4, Radix: []int{32, 2, 4}, ByteStride: []int{1, 0, 32}, ShiftStride: []int{0, 4, 0}},
			High: &Bits{Offset: 16, Width: 1, Radix: []int{32, 2, 4}, ByteStride: []int{1, 0, 0}, ShiftStride: []int{0, 1, 2}},
			D:    Scalar{0, F16}, M: Scalar{2, F16}, Sub: 32, SubScales: KScales6, SubOffset: 4, Combine: SubScaledMinusMin},
		dequant: dequantQ5_K}
	// Q6_K (block_q6_K): two halves of 128; in half n, element 128n + 32k + l (k < 4, l < 32)
	// has its low 4 bits in ql[64n + 32(k%2) + l] (low nibble for k < 2, high for k ≥ 2) and
	// its top 2 bits at bits 2k of qh[32n + l]; 16 sub-blocks of 16 with signed 8-bit scales;
	// d comes last; y = (d·sc)·(q − 32).
	Q6_K = &Format{Name: "q6_k", GGML: 14, BlockElems: 256, BlockBytes: 210,
		Fields: []Field{
			{Name: "ql", Offset: 0, Type: U8, Count: 128, Doc: "low 4 bits"},
			{Name: "qh", Offset: 128, Type: U8, Count: 64, Doc: "high 2 bits"},
			{Name: "scales", Offset: 192, Type: I8, Count: 16, Doc: "scales of 16 sub-blocks of 16"},
			{Name: "d", Offset: 208, Type: F16, Count: 1, Doc: "super-block scale"},
		},
		Layout: &Layout{Low: Bits{Offset: 0, Width: 4, Radix: []int{32, 2, 2, 2}, ByteStride: []int{1, 32, 0, 64}, ShiftStride: []int{0, 0, 4, 0}},
			High: &Bits{Offset: 128, Width: 2, Radix: []int{32, 2, 2, 2}, ByteStride: []int{1, 0, 0, 32}, ShiftStride: []int{0, 2, 4, 0}},
			Bias: 32, D: Scalar{208, F16}, Sub: 16, SubScales: Int8Scales, SubOffset: 192, Combine: SubScaled},
		dequant: dequantQ6_K}
	// Q8_K (block_q8_K): a float32 scale, 256 signed bytes and 16 sums of 16 quants (used by
	// llama.cpp's dot products, not by dequantization); y = d·q. llama.cpp quantizes
	// activations to it; weights in it are rare.
	Q8_K = &Format{Name: "q8_k", GGML: 15, BlockElems: 256, BlockBytes: 292,
		Fields: []Field{
			{Name: "d", Offset: 0, Type: F32, Count: 1, Doc: "scale"},
			{Name: "qs", Offset: 4, Type: I8, Count: 256, Doc: "quants"},
			{Name: "bsums", Offset: 260, Type: I16, Count: 16, Doc: "sums of each 16 quants"},
		},
		Layout: &Layout{Low: Bits{Offset: 4, Width: 8, Radix: []int{256}, ByteStride: []int{1}, ShiftStride: []int{0}},
			Signed: true, D: Scalar{0, F32}, Sub: 256, Combine: Scaled},
		dequant: dequantQ8_K}
)

// IQ4NLValues is ggml's kvalues_iq4nl: the 16 levels of IQ4_NL and IQ4_XS, a nibble's value.
var IQ4NLValues = []int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// MXFP4Values is ggml's kvalues_mxfp4: twice the e2m1 values of the 16 nibbles (sign bit 3,
// then exponent and mantissa), integers so that E8M0's halved scale gives the value.
var MXFP4Values = []int8{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}

var (
	// IQ4_NL (block_iq4_nl): Q4_0's nibbles as indices into IQ4NLValues; y = d·value.
	IQ4_NL = &Format{Name: "iq4_nl", GGML: 20, BlockElems: 32, BlockBytes: 18,
		Fields: []Field{
			{Name: "d", Offset: 0, Type: F16, Count: 1, Doc: "scale"},
			{Name: "qs", Offset: 2, Type: U8, Count: 16, Doc: "codebook indices, nibbles as Q4_0's"},
		},
		Layout: &Layout{Low: Bits{Offset: 2, Width: 4, Radix: []int{16, 2}, ByteStride: []int{1, 0}, ShiftStride: []int{0, 4}},
			Values: IQ4NLValues, D: Scalar{0, F16}, Sub: 32, Combine: Scaled},
		dequant: dequantIQ4_NL}
	// IQ4_XS (block_iq4_xs): 8 sub-blocks of 32 with 6-bit scales stored plus 32 (sub-block s:
	// low nibble at bits 4·(s%2) of scales_l[s/2], top 2 bits at bits 2s of the little-endian
	// u16 scales_h); sub-block s's 32 elements are IQ4_NL's nibbles in qs[16s : 16s+16];
	// y = (d·(sc − 32))·value.
	IQ4_XS = &Format{Name: "iq4_xs", GGML: 23, BlockElems: 256, BlockBytes: 136,
		Fields: []Field{
			{Name: "d", Offset: 0, Type: F16, Count: 1, Doc: "super-block scale"},
			{Name: "scales_h", Offset: 2, Type: U8, Count: 2, Doc: "top 2 bits of the 8 scales (a little-endian u16)"},
			{Name: "scales_l", Offset: 4, Type: U8, Count: 4, Doc: "low nibbles of the 8 scales"},
			{Name: "qs", Offset: 8, Type: U8, Count: 128, Doc: "codebook indices, 16 bytes per sub-block as IQ4_NL's"},
		},
		Layout: &Layout{Low: Bits{Offset: 8, Width: 4, Radix: []int{16, 2, 8}, ByteStride: []int{1, 0, 16}, ShiftStride: []int{0, 4, 0}},
			Values: IQ4NLValues, D: Scalar{0, F16}, Sub: 32, SubScales: PackedScales,
			SubScale: &Packed{Low: Bits{Offset: 4, Width: 4, Radix: []int{2, 4}, ByteStride: []int{0, 1}, ShiftStride: []int{4, 0}},
				High: &Bits{Offset: 2, Width: 2, Radix: []int{4, 2}, ByteStride: []int{0, 1}, ShiftStride: []int{2, 0}}, Bias: 32},
			Combine: SubScaled},
		dequant: dequantIQ4_XS}
	// MXFP4 (block_mxfp4, OCP microscaling FP4): an E8M0 exponent byte, then Q4_0's nibbles as
	// e2m1 codes (MXFP4Values); 17 bytes, so blocks are not aligned even to 2 bytes;
	// y = value·2^(e−128).
	MXFP4 = &Format{Name: "mxfp4", GGML: 39, BlockElems: 32, BlockBytes: 17,
		Fields: []Field{
			{Name: "e", Offset: 0, Type: E8M0, Count: 1, Doc: "shared exponent"},
			{Name: "qs", Offset: 1, Type: U8, Count: 16, Doc: "e2m1 codes, nibbles as Q4_0's"},
		},
		Layout: &Layout{Low: Bits{Offset: 1, Width: 4, Radix: []int{16, 2}, ByteStride: []int{1, 0}, ShiftStride: []int{0, 4}},
			Values: MXFP4Values, D: Scalar{0, E8M0}, Sub: 32, Combine: Scaled},
		dequant: dequantMXFP4}
)

// Formats is the table, plain formats first, then by ggml number.
var Formats = []*Format{FormatF32, FormatF16, FormatBF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL, IQ4_XS, MXFP4}

// ByName returns the format named name ("q4_k"), or nil.
func ByName(name string) *Format {
	for _, f := range Formats {
		if f.Name == name {
			return f
		}
	}
	return nil
}

// ByGGML returns the format with ggml type number t, or nil when vkc does not read it.
func ByGGML(t uint32) *Format {
	for _, f := range Formats {
		if f.GGML == t {
			return f
		}
	}
	return nil
}

// ggmlNames names the ggml types vkc does not read, for messages ("type 16 (iq2_xxs)").
var ggmlNames = map[uint32]string{
	9: "q8_1", 16: "iq2_xxs", 17: "iq2_xs", 18: "iq3_xxs", 19: "iq1_s", 21: "iq3_s", 22: "iq2_s",
	24: "i8", 25: "i16", 26: "i32", 27: "i64", 28: "f64", 29: "iq1_m", 34: "tq1_0", 35: "tq2_0",
}

// GGMLName names ggml type t: the format's name, ggml's name of a type vkc does not read, or
// "type N".
func GGMLName(t uint32) string {
	if f := ByGGML(t); f != nil {
		return f.Name
	}
	if n, ok := ggmlNames[t]; ok {
		return n
	}
	return fmt.Sprintf("type %d", t)
}
