package quant

import (
	"encoding/binary"
	"math"
)

// The reference dequantizers: one block each, plain loops in ggml's order (ggml-quants.c,
// dequantize_row_*). Every product and difference is rounded to float32 before the next one
// (an explicit float32 conversion stops Go from fusing a multiply and an add), because ggml's
// scalar code rounds each of them: y = d·q; y = d·q + m; y = (d·sc)·q − (dmin·m).

func dequantF32(b []byte, y []float32) {
	for i := range y {
		y[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
}

func dequantF16(b []byte, y []float32) {
	for i := range y {
		y[i] = f16(b[2*i:])
	}
}

func dequantBF16(b []byte, y []float32) {
	for i := range y {
		y[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
	}
}

// dequantQ4_0: d at 0, qs[16] at 2.
func dequantQ4_0(b []byte, y []float32) {
	d := f16(b[0:])
	qs := b[2:18]
	for j := 0; j < 16; j++ {
		x0 := int(qs[j]&0x0F) - 8
		x1 := int(qs[j]>>4) - 8
		y[j] = float32(x0) * d
		y[j+16] = float32(x1) * d
	}
}

// dequantQ4_1: d at 0, m at 2, qs[16] at 4.
func dequantQ4_1(b []byte, y []float32) {
	d, m := f16(b[0:]), f16(b[2:])
	qs := b[4:20]
	for j := 0; j < 16; j++ {
		x0 := int(qs[j] & 0x0F)
		x1 := int(qs[j] >> 4)
		y[j] = float32(float32(x0)*d) + m
		y[j+16] = float32(float32(x1)*d) + m
	}
}

// dequantQ5_0: d at 0, qh (u32) at 2, qs[16] at 6.
func dequantQ5_0(b []byte, y []float32) {
	d := f16(b[0:])
	qh := binary.LittleEndian.Uint32(b[2:])
	qs := b[6:22]
	for j := 0; j < 16; j++ {
		xh0 := uint8((qh>>j)<<4) & 0x10
		xh1 := uint8(qh>>(j+12)) & 0x10
		x0 := int(qs[j]&0x0F|xh0) - 16
		x1 := int(qs[j]>>4|xh1) - 16
		y[j] = float32(x0) * d
		y[j+16] = float32(x1) * d
	}
}

// dequantQ5_1: d at 0, m at 2, qh (u32) at 4, qs[16] at 8.
func dequantQ5_1(b []byte, y []float32) {
	d, m := f16(b[0:]), f16(b[2:])
	qh := binary.LittleEndian.Uint32(b[4:])
	qs := b[8:24]
	for j := 0; j < 16; j++ {
		xh0 := uint8((qh>>j)<<4) & 0x10
		xh1 := uint8(qh>>(j+12)) & 0x10
		x0 := int(qs[j]&0x0F | xh0)
		x1 := int(qs[j]>>4 | xh1)
		y[j] = float32(float32(x0)*d) + m
		y[j+16] = float32(float32(x1)*d) + m
	}
}

// dequantQ8_0: d at 0, qs[32] (int8) at 2.
func dequantQ8_0(b []byte, y []float32) {
	d := f16(b[0:])
	for j := 0; j < 32; j++ {
		y[j] = float32(int8(b[2+j])) * d
	}
}

// dequantQ4_K: d at 0, dmin at 2, scales[12] at 4, qs[128] at 16.
func dequantQ4_K(b []byte, y []float32) {
	d, dmin := f16(b[0:]), f16(b[2:])
	scales := b[4:16]
	q := b[16:144]
	is := 0
	for j := 0; j < 256; j += 64 {
		sc, m := KScaleMin(scales, is)
		d1, m1 := d*float32(sc), dmin*float32(m)
		sc, m = KScaleMin(scales, is+1)
		d2, m2 := d*float32(sc), dmin*float32(m)
		for l := 0; l < 32; l++ {
			y[j+l] = float32(d1*float32(q[l]&0xF)) - m1
		}
		for l := 0; l < 32; l++ {
			y[j+32+l] = float32(d2*float32(q[l]>>4)) - m2
		}
		q = q[32:]
		is += 2
	}
}

// dequantQ5_K: d at 0, dmin at 2, scales[12] at 4, qh[32] at 16, qs[128] at 48.
func dequantQ5_K(b []byte, y []float32) {
	d, dmin := f16(b[0:]), f16(b[2:])
	scales := b[4:16]
	qh := b[16:48]
	ql := b[48:176]
	is := 0
	var u1, u2 uint8 = 1, 2
	for j := 0; j < 256; j += 64 {
		sc, m := KScaleMin(scales, is)
		d1, m1 := d*float32(sc), dmin*float32(m)
		sc, m = KScaleMin(scales, is+1)
		d2, m2 := d*float32(sc), dmin*float32(m)
		for l := 0; l < 32; l++ {
			h := 0
			if qh[l]&u1 != 0 {
				h = 16
			}
			y[j+l] = float32(d1*float32(int(ql[l]&0xF)+h)) - m1
		}
		for l := 0; l < 32; l++ {
			h := 0
			if qh[l]&u2 != 0 {
				h = 16
			}
			y[j+32+l] = float32(d2*float32(int(ql[l]>>4)+h)) - m2
		}
		ql = ql[32:]
		is += 2
		u1 <<= 2
		u2 <<= 2
	}
}

// dequantQ6_K: ql[128] at 0, qh[64] at 128, scales[16] (int8) at 192, d at 208.
func dequantQ6_K(b []byte, y []float32) {
	d := f16(b[208:])
	ql, qh, sc := b[0:128], b[128:192], b[192:208]
	for n := 0; n < 256; n += 128 {
		for l := 0; l < 32; l++ {
			is := l / 16
			q1 := int(ql[l]&0xF|((qh[l]>>0)&3)<<4) - 32
			q2 := int(ql[l+32]&0xF|((qh[l]>>2)&3)<<4) - 32
			q3 := int(ql[l]>>4|((qh[l]>>4)&3)<<4) - 32
			q4 := int(ql[l+32]>>4|((qh[l]>>6)&3)<<4) - 32
			y[n+l] = float32(d*float32(int8(sc[is]))) * float32(q1)
			y[n+l+32] = float32(d*float32(int8(sc[is+2]))) * float32(q2)
			y[n+l+64] = float32(d*float32(int8(sc[is+4]))) * float32(q3)
			y[n+l+96] = float32(d*float32(int8(sc[is+6]))) * float32(q4)
		}
		ql, qh, sc = ql[64:], qh[32:], sc[8:]
	}
}

// dequantQ8_K: d (float32) at 0, qs[256] (int8) at 4; bsums at 260 are not needed.
func dequantQ8_K(b []byte, y []float32) {
	d := math.Float32frombits(binary.LittleEndian.Uint32(b[0:]))
	for j := 0; j < 256; j++ {
		y[j] = d * float32(int8(b[4+j]))
	}
}

// dequantQ2_K: scales[16] at 0, qs[64] at 16, d at 80, dmin at 82.
func dequantQ2_K(b []byte, y []float32) {
	d, dmin := f16(b[80:]), f16(b[82:])
	scales := b[0:16]
	q := b[16:80]
	is, i := 0, 0
	for n := 0; n < 256; n += 128 {
		shift := uint(0)
		for j := 0; j < 4; j++ {
			for h := 0; h < 2; h++ {
				sc := scales[is]
				is++
				dl, ml := d*float32(sc&0xF), dmin*float32(sc>>4)
				for l := 0; l < 16; l++ {
					y[i] = float32(dl*float32((q[16*h+l]>>shift)&3)) - ml
					i++
				}
			}
			shift += 2
		}
		q = q[32:]
	}
}

// q3Scales unpacks Q3_K's 16 scales from its 12 scale bytes, less 32: scale s has its low nibble
// at bits 4·(s/8) of byte s%8 and its top two bits at bits 2·(s/4) of byte 8 + s%4 (what
// ggml's kmask shuffle of the bytes as four u32 computes).
func q3Scales(b []byte) (sc [16]int) {
	for s := range sc {
		lo := int(b[s%8]>>(4*(s/8))) & 0xF
		hi := int(b[8+s%4]>>(2*(s/4))) & 3
		sc[s] = lo | hi<<4 - 32
	}
	return sc
}

// dequantQ3_K: hmask[32] at 0, qs[64] at 32, scales[12] at 96, d at 108.
func dequantQ3_K(b []byte, y []float32) {
	dAll := f16(b[108:])
	hm := b[0:32]
	q := b[32:96]
	scales := q3Scales(b[96:108])
	var m uint8 = 1
	is, i := 0, 0
	for n := 0; n < 256; n += 128 {
		shift := uint(0)
		for j := 0; j < 4; j++ {
			for h := 0; h < 2; h++ {
				dl := dAll * float32(scales[is])
				is++
				for l := 0; l < 16; l++ {
					v := int((q[16*h+l] >> shift) & 3)
					if hm[16*h+l]&m == 0 {
						v -= 4
					}
					y[i] = dl * float32(v)
					i++
				}
			}
			shift += 2
			m <<= 1
		}
		q = q[32:]
	}
}

// dequantIQ4_NL: d at 0, qs[16] at 2.
func dequantIQ4_NL(b []byte, y []float32) {
	d := f16(b[0:])
	qs := b[2:18]
	for j := 0; j < 16; j++ {
		y[j] = d * float32(IQ4NLValues[qs[j]&0xF])
		y[j+16] = d * float32(IQ4NLValues[qs[j]>>4])
	}
}

// dequantIQ4_XS: d at 0, scales_h (u16) at 2, scales_l[4] at 4, qs[128] at 8.
func dequantIQ4_XS(b []byte, y []float32) {
	d := f16(b[0:])
	scalesH := binary.LittleEndian.Uint16(b[2:])
	scalesL := b[4:8]
	qs := b[8:136]
	for ib := 0; ib < 8; ib++ {
		ls := int(scalesL[ib/2]>>(4*(ib%2)))&0xF | int(scalesH>>(2*ib))&3<<4
		dl := d * float32(ls-32)
		for j := 0; j < 16; j++ {
			y[32*ib+j] = dl * float32(IQ4NLValues[qs[j]&0xF])
			y[32*ib+j+16] = dl * float32(IQ4NLValues[qs[j]>>4])
		}
		qs = qs[16:]
	}
}

// dequantMXFP4: e at 0, qs[16] at 1.
func dequantMXFP4(b []byte, y []float32) {
	d := E8M0Half(b[0])
	qs := b[1:17]
	for j := 0; j < 16; j++ {
		y[j] = float32(MXFP4Values[qs[j]&0xF]) * d
		y[j+16] = float32(MXFP4Values[qs[j]>>4]) * d
	}
}
