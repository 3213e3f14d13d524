package codegen

import "math"

// Float32ToHalf converts x to IEEE 754 binary16 bits, rounding to nearest even; values beyond the
// f16 range become infinities, NaN stays NaN.
func Float32ToHalf(x float32) uint16 {
	bits := math.Float32bits(x)
	sign := uint16(bits>>16) & 0x8000
	exp := int(bits>>23) & 0xff
	mant := bits & 0x7fffff
	switch {
	case exp == 0xff: // Inf or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp-127 > 15:
		return sign | 0x7c00
	case exp-127 >= -14: // normal
		e := uint32(exp-127+15) << 10
		m := mant >> 13
		h := e | m
		rest := mant & 0x1fff
		if rest > 0x1000 || (rest == 0x1000 && h&1 != 0) {
			h++ // may carry into the exponent, which is the correct rounding
		}
		return sign | uint16(h)
	case exp-127 >= -25: // subnormal
		m := mant | 0x800000
		shift := uint32(-14-(exp-127)) + 13
		h := m >> shift
		rest := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rest > half || (rest == half && h&1 != 0) {
			h++
		}
		return sign | uint16(h)
	}
	return sign
}

// HalfToFloat32 converts binary16 bits to a float32 exactly.
func HalfToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := int(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		v := float32(mant) / (1 << 24)
		if sign != 0 {
			return -v
		}
		return v
	}
	return math.Float32frombits(sign | uint32(exp-15+127)<<23 | mant<<13)
}
