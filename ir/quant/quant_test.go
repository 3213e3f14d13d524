package quant

import (
	"encoding/binary"
	"math"
	"math/rand"
	"testing"
)

// Hand-written blocks with values worked out by hand from ggml's documented layouts, so a
// mistake in the table or the reference loops cannot hide behind an interpreter that shares it.

func put16(b []byte, off int, h uint16) { binary.LittleEndian.PutUint16(b[off:], h) }

// f16 bits of a few exact values.
const (
	h0_125 = 0x3000
	h0_25  = 0x3400
	h0_5   = 0x3800
	h1     = 0x3C00
	h2     = 0x4000
	hm1    = 0xBC00
)

func deq(t *testing.T, f *Format, b []byte) []float32 {
	t.Helper()
	if len(b) != f.BlockBytes {
		t.Fatalf("%s: test block has %d bytes, the format %d", f.Name, len(b), f.BlockBytes)
	}
	y := make([]float32, f.BlockElems)
	f.DequantizeBlock(b, y)
	return y
}

func expect(t *testing.T, f *Format, y []float32, want map[int]float32) {
	t.Helper()
	for j, w := range want {
		if y[j] != w {
			t.Errorf("%s: element %d = %v, want %v", f.Name, j, y[j], w)
		}
	}
}

func TestSizes(t *testing.T) {
	// ggml-common.h's static_asserts.
	want := map[*Format][2]int{Q4_0: {32, 18}, Q4_1: {32, 20}, Q5_0: {32, 22}, Q5_1: {32, 24}, Q8_0: {32, 34},
		Q2_K: {256, 84}, Q3_K: {256, 110}, Q4_K: {256, 144}, Q5_K: {256, 176}, Q6_K: {256, 210}, Q8_K: {256, 292},
		IQ4_NL: {32, 18}, IQ4_XS: {256, 136}, MXFP4: {32, 17},
		FormatF32: {1, 4}, FormatF16: {1, 2}, FormatBF16: {1, 2}}
	if len(want) != len(Formats) {
		t.Fatalf("the table has %d formats, the test knows %d", len(Formats), len(want))
	}
	ggml := map[string]uint32{"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8,
		"q2_k": 10, "q3_k": 11, "q4_k": 12, "q5_k": 13, "q6_k": 14, "q8_k": 15, "iq4_nl": 20, "iq4_xs": 23,
		"bf16": 30, "mxfp4": 39}
	for _, f := range Formats {
		w := want[f]
		if f.BlockElems != w[0] || f.BlockBytes != w[1] {
			t.Errorf("%s: %d elements in %d bytes, want %d in %d", f.Name, f.BlockElems, f.BlockBytes, w[0], w[1])
		}
		if f.GGML != ggml[f.Name] {
			t.Errorf("%s: ggml type %d, want %d", f.Name, f.GGML, ggml[f.Name])
		}
		if f.BlockElems > MaxBlockElems {
			t.Errorf("%s: %d elements per block, more than MaxBlockElems", f.Name, f.BlockElems)
		}
		if ByName(f.Name) != f || ByGGML(f.GGML) != f {
			t.Errorf("%s: lookups do not find it", f.Name)
		}
		// The fields tile the block exactly, in order.
		off := 0
		for _, fd := range f.Fields {
			if fd.Offset != off {
				t.Errorf("%s: field %s at %d, want %d", f.Name, fd.Name, fd.Offset, off)
			}
			off += fd.Bytes()
		}
		if f.Quantized() && off != f.BlockBytes {
			t.Errorf("%s: fields cover %d of %d bytes", f.Name, off, f.BlockBytes)
		}
	}
	if ByGGML(16) != nil || GGMLName(16) != "iq2_xxs" || GGMLName(99) != "type 99" {
		t.Errorf("unknown ggml types: ByGGML(16)=%v, names %q %q", ByGGML(16), GGMLName(16), GGMLName(99))
	}
}

func TestQ8_0Hand(t *testing.T) {
	b := make([]byte, 34)
	put16(b, 0, h0_5)
	for j, q := range []int8{-128, -1, 0, 1, 127, 64} {
		b[2+j] = byte(q)
	}
	b[2+31] = 0xF9 // int8 −7
	expect(t, Q8_0, deq(t, Q8_0, b), map[int]float32{0: -64, 1: -0.5, 2: 0, 3: 0.5, 4: 63.5, 5: 32, 6: 0, 31: -3.5})
}

func TestQ4_0Hand(t *testing.T) {
	b := make([]byte, 18)
	put16(b, 0, h2)
	b[2+0] = 0x1F  // element 0: 15−8 = 7 → 14; element 16: 1−8 → −14
	b[2+5] = 0x80  // element 5: 0−8 → −16; element 21: 8−8 → 0
	b[2+15] = 0xA9 // element 15: 9−8 → 2; element 31: 10−8 → 4
	y := deq(t, Q4_0, b)
	expect(t, Q4_0, y, map[int]float32{0: 14, 16: -14, 5: -16, 21: 0, 15: 2, 31: 4, 1: -16, 17: -16})
}

func TestQ4_1Hand(t *testing.T) {
	b := make([]byte, 20)
	put16(b, 0, h0_25)
	put16(b, 2, hm1)
	b[4+3] = 0xA5 // element 3: 5·0.25 − 1 = 0.25; element 19: 10·0.25 − 1 = 1.5
	b[4+15] = 0xF0
	expect(t, Q4_1, deq(t, Q4_1, b), map[int]float32{3: 0.25, 19: 1.5, 0: -1, 16: -1, 15: -1, 31: 2.75})
}

func TestQ5_0Hand(t *testing.T) {
	b := make([]byte, 22)
	put16(b, 0, h1)
	// qh: bits 0, 17 and 31 set (element j's fifth bit is bit j).
	binary.LittleEndian.PutUint32(b[2:], 1<<0|1<<17|1<<31)
	b[6+0] = 0x00  // element 0: 0|16 − 16 = 0; element 16: 0 − 16 = −16
	b[6+1] = 0x3F  // element 1: 15 − 16 = −1; element 17: 3|16 − 16 = 3
	b[6+15] = 0xF0 // element 15: 0 − 16 = −16; element 31: 15|16 − 16 = 15
	expect(t, Q5_0, deq(t, Q5_0, b), map[int]float32{0: 0, 16: -16, 1: -1, 17: 3, 15: -16, 31: 15, 2: -16})
}

func TestQ5_1Hand(t *testing.T) {
	b := make([]byte, 24)
	put16(b, 0, h0_5)
	put16(b, 2, h2)
	binary.LittleEndian.PutUint32(b[4:], 1<<3|1<<20)
	b[8+3] = 0x21 // element 3: 1|16 = 17 → 8.5 + 2 = 10.5; element 19: 2 → 1 + 2 = 3
	b[8+4] = 0x7E // element 4: 14 → 7 + 2 = 9; element 20: 7|16 = 23 → 11.5 + 2 = 13.5
	expect(t, Q5_1, deq(t, Q5_1, b), map[int]float32{3: 10.5, 19: 3, 4: 9, 20: 13.5, 0: 2})
}

// kScales are the sub-block scales and mins of the K-quant test blocks, and kPacked the 12 bytes
// they pack to, worked out by hand: bytes 0–3 hold sc[j] | (sc[j+4]>>4)<<6, bytes 4–7
// m[j] | (m[j+4]>>4)<<6, bytes 8–11 (sc[j+4]&15) | (m[j+4]&15)<<4.
var (
	kSc     = [8]uint8{1, 2, 3, 4, 33, 40, 63, 17}
	kMin    = [8]uint8{0, 5, 10, 63, 1, 2, 48, 20}
	kPacked = [12]byte{0x81, 0x82, 0xC3, 0x44, 0x00, 0x05, 0xCA, 0x7F, 0x11, 0x28, 0x0F, 0x41}
)

func TestKScaleMinHand(t *testing.T) {
	for j := 0; j < 8; j++ {
		sc, m := KScaleMin(kPacked[:], j)
		if sc != kSc[j] || m != kMin[j] {
			t.Errorf("sub-block %d: scale %d min %d, want %d and %d", j, sc, m, kSc[j], kMin[j])
		}
	}
}

func TestQ4_KHand(t *testing.T) {
	b := make([]byte, 144)
	put16(b, 0, h1)   // d = 1
	put16(b, 2, h0_5) // dmin = 0.5
	copy(b[4:], kPacked[:])
	for i := 0; i < 128; i++ {
		b[16+i] = byte(i) // qs[i] = i: its low nibble is i%16, its high nibble i/16
	}
	y := deq(t, Q4_K, b)
	// Element j = 64g + 32h + l reads qs[32g + l]: the low nibble (l%16) for h = 0, the high
	// nibble (2g + l/16) for h = 1; sub-block s = j/32; y = sc[s]·q − 0.5·m[s].
	for j := 0; j < 256; j++ {
		g, h, l, s := j/64, j/32%2, j%32, j/32
		q := l % 16
		if h == 1 {
			q = 2*g + l/16
		}
		want := float32(kSc[s])*float32(q) - 0.5*float32(kMin[s])
		if y[j] != want {
			t.Fatalf("q4_k element %d = %v, want %v", j, y[j], want)
		}
	}
	// Spot values written out: element 0 (s 0, q 0) = 0; 33 (s 1, q 2·0+1/16 = 0 → high nibble
	// of qs[1] = 0) = 2·0 − 2.5; 255 (s 7, high nibble of qs[127] = 7) = 17·7 − 10 = 109;
	// 200 (s 6, low nibble of qs[104] = 8) = 63·8 − 24 = 480.
	expect(t, Q4_K, y, map[int]float32{0: 0, 33: -2.5, 255: 109, 200: 480})
}

func TestQ5_KHand(t *testing.T) {
	b := make([]byte, 176)
	put16(b, 0, h1)
	put16(b, 2, h0_5)
	copy(b[4:], kPacked[:])
	// qh[l] = l·7 mod 256: element 64g + 32h + l has its fifth bit at bit 2g + h of qh[l].
	for l := 0; l < 32; l++ {
		b[16+l] = byte(l * 7)
	}
	for i := 0; i < 128; i++ {
		b[48+i] = byte(i)
	}
	y := deq(t, Q5_K, b)
	for j := 0; j < 256; j++ {
		g, h, l, s := j/64, j/32%2, j%32, j/32
		q := l % 16
		if h == 1 {
			q = 2*g + l/16
		}
		if (l*7)&0xFF>>(2*g+h)&1 == 1 {
			q += 16
		}
		want := float32(kSc[s])*float32(q) - 0.5*float32(kMin[s])
		if y[j] != want {
			t.Fatalf("q5_k element %d = %v, want %v", j, y[j], want)
		}
	}
	// element 1: qh[1] = 7 has bit 0 → q = 1 + 16 = 17, s 0: 1·17 − 0 = 17.
	// element 33: qh[1] bit 1 set → q = 0 + 16, s 1: 2·16 − 2.5 = 29.5.
	expect(t, Q5_K, y, map[int]float32{1: 17, 33: 29.5})
}

func TestQ6_KHand(t *testing.T) {
	b := make([]byte, 210)
	scales := [16]int8{1, -2, 3, -4, 5, -6, 7, -8, 127, -128, 10, 20, 30, 40, 50, 60}
	for i, s := range scales {
		b[192+i] = byte(s)
	}
	put16(b, 208, h0_25)
	for i := 0; i < 128; i++ {
		b[i] = byte(i * 3) // ql
	}
	for i := 0; i < 64; i++ {
		b[128+i] = byte(i * 5) // qh
	}
	y := deq(t, Q6_K, b)
	// Element j = 128n + 32k + l: low 4 bits from ql[64n + 32(k%2) + l] (low nibble for k < 2,
	// high for k ≥ 2), top 2 bits from bits 2k..2k+1 of qh[32n + l]; q − 32; sub-block j/16.
	for j := 0; j < 256; j++ {
		n, k, l := j/128, j/32%4, j%32
		lo := (64*n + 32*(k%2) + l) * 3 & 0xFF
		if k >= 2 {
			lo >>= 4
		}
		lo &= 0xF
		hi := ((32*n + l) * 5 & 0xFF) >> (2 * k) & 3
		q := lo | hi<<4 - 32
		want := 0.25 * float32(scales[j/16]) * float32(q)
		if y[j] != want {
			t.Fatalf("q6_k element %d = %v, want %v", j, y[j], want)
		}
	}
	// element 0: ql[0] = 0, qh[0] = 0 → q = −32, scale 1: 0.25·1·−32 = −8.
	// element 1: ql[1] = 3 → 3, qh[1] = 5 → bits 0–1 = 1 → q = 3 + 16 − 32 = −13: −3.25.
	// element 130 (n 1, k 0, l 2): ql[66] = 198 → low nibble 6, qh[34] = 170 → bits 0–1 = 2,
	// q = 6 + 32 − 32 = 6, scale scales[8] = 127: 0.25·127·6 = 190.5.
	expect(t, Q6_K, y, map[int]float32{0: -8, 1: -3.25, 130: 190.5})
}

func TestQ8_KHand(t *testing.T) {
	b := make([]byte, 292)
	binary.LittleEndian.PutUint32(b, math.Float32bits(0.125))
	b[4+0] = 0x80 // int8 −128
	b[4+255] = 100
	expect(t, Q8_K, deq(t, Q8_K, b), map[int]float32{0: -16, 255: 12.5, 1: 0})
}

func TestPlainHand(t *testing.T) {
	b := []byte{0x00, 0x3C, 0x00, 0xC0} // f16 1, -2
	expect(t, FormatF16, func() []float32 { y := make([]float32, 2); FormatF16.Dequantize(b, y); return y }(), map[int]float32{0: 1, 1: -2})
	bb := []byte{0x80, 0x3F, 0x40, 0xC0} // bf16 1, -3
	y := make([]float32, 2)
	if err := FormatBF16.Dequantize(bb, y); err != nil || y[0] != 1 || y[1] != -3 {
		t.Errorf("bf16: %v %v", y, err)
	}
}

func TestQ2_KHand(t *testing.T) {
	b := make([]byte, 84)
	for s := 0; s < 16; s++ {
		b[s] = byte(s%16) | byte(15-s)<<4 // sub-block s: scale s, min 15−s
	}
	for i := 0; i < 64; i++ {
		b[16+i] = 0xE4 // bits 2k of every byte hold k: 0, 1, 2, 3
	}
	put16(b, 80, h0_5) // d
	put16(b, 82, h0_25)
	y := deq(t, Q2_K, b)
	// Element j = 128n + 32k + 16h + l has q = k (bits 2k of the byte), sub-block s = j/16;
	// y = 0.5·s·k − 0.25·(15−s).
	for j := 0; j < 256; j++ {
		k, s := j/32%4, j/16
		want := 0.5*float32(s)*float32(k) - 0.25*float32(15-s)
		if y[j] != want {
			t.Fatalf("q2_k element %d = %v, want %v", j, y[j], want)
		}
	}
	// One byte of qs moves exactly its four elements: qs[32+16+3] (n 1, h 1, l 3) = 0x1B holds
	// q = 3, 2, 1, 0 for k = 0..3: elements 128+16+3 = 147, 179, 211, 243.
	b[16+32+16+3] = 0x1B
	y = deq(t, Q2_K, b)
	expect(t, Q2_K, y, map[int]float32{147: 0.5*9*3 - 0.25*6, 179: 0.5*11*2 - 0.25*4, 211: 0.5*13*1 - 0.25*2, 243: 0 - 0.25*0, 146: 0.5*9*0 - 0.25*6})
}

func TestQ3_KHand(t *testing.T) {
	b := make([]byte, 110)
	// Scales: sub-block s has the 6-bit value s + 20 (stored, so the scale is s − 12): low
	// nibble at bits 4·(s/8) of scales[s%8], top two bits at bits 2·(s/4) of scales[8 + s%4].
	for s := 0; s < 16; s++ {
		v := s + 20
		b[96+s%8] |= byte(v&0xF) << (4 * (s / 8))
		b[96+8+s%4] |= byte(v>>4) << (2 * (s / 4))
	}
	put16(b, 108, h1)
	for i := 0; i < 64; i++ {
		b[32+i] = 0xE4 // low bits of element 128n+32k+16h+l: k
	}
	for i := 0; i < 32; i++ {
		b[i] = 0x0F // third bit set for k = 0..3 of the first half (bits 0..3), clear for the second
	}
	y := deq(t, Q3_K, b)
	// q = k + 4·h3 − 4: the first half (n = 0) has its third bit, q = k; the second q = k − 4.
	for j := 0; j < 256; j++ {
		k, s, n := j/32%4, j/16, j/128
		q := k - 4*n
		want := float32(s-12) * float32(q)
		if y[j] != want {
			t.Fatalf("q3_k element %d = %v, want %v", j, y[j], want)
		}
	}
	// Sub-block 13's stored value 33 → scale 1: low nibble 1 in the high nibble of scales[5],
	// top bits 2 at bits 6 of scales[9]. Element 13·16 + 5 = 213 (n 1, k 2, h 1, l 5): q = 2 − 4.
	expect(t, Q3_K, y, map[int]float32{213: -2, 0: 0, 16: -11 * 0, 255: 3 * -1})
}

func TestIQ4_NLHand(t *testing.T) {
	b := make([]byte, 18)
	put16(b, 0, h0_5)
	b[2+0] = 0xF0  // element 0: index 0 → −127; element 16: index 15 → 113
	b[2+7] = 0x78  // element 7: index 8 → 1; element 23: index 7 → −10
	b[2+15] = 0x3C // element 15: index 12 → 53; element 31: index 3 → −65
	expect(t, IQ4_NL, deq(t, IQ4_NL, b), map[int]float32{0: -63.5, 16: 56.5, 7: 0.5, 23: -5, 15: 26.5, 31: -32.5, 1: -63.5})
}

func TestIQ4_XSHand(t *testing.T) {
	b := make([]byte, 136)
	put16(b, 0, h0_25)
	// Sub-block s's scale: low nibble at bits 4·(s%2) of scales_l[s/2], top bits at bits 2s of
	// scales_h; stored 32 + s (scale s) for s < 7, and 0 for s = 7 (scale −32).
	var hi uint16
	for s := 0; s < 7; s++ {
		v := 32 + s
		b[4+s/2] |= byte(v&0xF) << (4 * (s % 2))
		hi |= uint16(v>>4) << (2 * s)
	}
	put16(b, 2, hi)
	for s := 0; s < 8; s++ {
		for l := 0; l < 16; l++ {
			b[8+16*s+l] = byte(l) | byte(15-l)<<4 // element 32s+l: index l; 32s+16+l: 15−l
		}
	}
	y := deq(t, IQ4_XS, b)
	for j := 0; j < 256; j++ {
		s, l := j/32, j%32
		idx := l
		if l >= 16 {
			idx = 15 - (l - 16)
		}
		sc := s
		if s == 7 {
			sc = -32
		}
		want := float32(0.25*float32(sc)) * float32(IQ4NLValues[idx])
		if y[j] != want {
			t.Fatalf("iq4_xs element %d = %v, want %v", j, y[j], want)
		}
	}
	expect(t, IQ4_XS, y, map[int]float32{32*3 + 4: 0.75 * -49, 32*7 + 16: -8 * 113, 0: 0})
}

func TestMXFP4Hand(t *testing.T) {
	b := make([]byte, 17)
	b[0] = 128     // 2^(128−128) = 1: values are twice e2m1
	b[1+0] = 0xF7  // element 0: code 7 → 12 (e2m1 6); element 16: code 15 → −12
	b[1+3] = 0x19  // element 3: code 9 → −1; element 19: code 1 → 1
	b[1+15] = 0x85 // element 15: code 5 → 6; element 31: code 8 (−0) → 0
	y := deq(t, MXFP4, b)
	expect(t, MXFP4, y, map[int]float32{0: 12, 16: -12, 3: -1, 19: 1, 15: 6, 31: 0, 1: 0})
	b[0] = 125 // 2^−3
	expect(t, MXFP4, deq(t, MXFP4, b), map[int]float32{0: 1.5, 16: -1.5, 3: -0.125})
	// ggml's subnormal and extreme exponents.
	for e, want := range map[uint8]float32{0: float32(math.Ldexp(1, -128)), 1: float32(math.Ldexp(1, -127)), 2: float32(math.Ldexp(1, -126)), 255: float32(math.Ldexp(1, 127))} {
		if got := E8M0Half(e); got != want {
			t.Errorf("E8M0Half(%d) = %g, want %g", e, got, want)
		}
	}
}

// TestLayoutMatchesReference checks the table's Layout (what kernels are generated from)
// against the reference loops, bit for bit, on random blocks of every format.
func TestLayoutMatchesReference(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for _, f := range Formats {
		if !f.Quantized() {
			continue
		}
		if f.Layout.Sub <= 0 || f.BlockElems%f.Layout.Sub != 0 {
			t.Errorf("%s: sub-block of %d", f.Name, f.Layout.Sub)
		}
		y := make([]float32, f.BlockElems)
		for trial := 0; trial < 200; trial++ {
			b := f.RandomBlocks(r, 1)
			f.DequantizeBlock(b, y)
			for j := range y {
				if e := f.Element(b, j); math.Float32bits(e) != math.Float32bits(y[j]) {
					t.Fatalf("%s trial %d element %d: layout gives %v, reference %v", f.Name, trial, j, e, y[j])
				}
			}
		}
	}
}

func TestBytesAndErrors(t *testing.T) {
	if n, err := Q4_K.Bytes([]int{3, 512}); err != nil || n != 3*2*144 {
		t.Errorf("q4_k [3,512]: %d %v", n, err)
	}
	if _, err := Q4_K.Bytes([]int{3, 100}); err == nil {
		t.Error("q4_k [3,100]: no error")
	}
	if _, err := Q8_0.Bytes(nil); err == nil {
		t.Error("q8_0 scalar: no error")
	}
	if n, err := FormatF16.Bytes([]int{3, 5}); err != nil || n != 30 {
		t.Errorf("f16 [3,5]: %d %v", n, err)
	}
	y := make([]float32, 64)
	if err := Q8_0.Dequantize(make([]byte, 67), y); err == nil {
		t.Error("short data: no error")
	}
	if err := Q8_0.Dequantize(make([]byte, 68), y[:40]); err == nil {
		t.Error("partial block: no error")
	}
}

// BenchmarkDequantize measures the reference dequantizers (the interpreter's and the compile-time
// fallback's cost), per format, over a 4096×256 tensor.
func BenchmarkDequantize(b *testing.B) {
	r := rand.New(rand.NewSource(1))
	for _, f := range Formats {
		n := 4096 * 256
		data := f.RandomBlocks(r, n/f.BlockElems)
		y := make([]float32, n)
		b.Run(f.Name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for i := 0; i < b.N; i++ {
				if err := f.Dequantize(data, y); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
