package codegen

import (
	"math"

	"github.com/x448/float16"
)

// Float32ToHalf converts x to IEEE 754 binary16 bits, rounding to nearest even; values beyond the
// f16 range become infinities, NaN stays NaN.
func Float32ToHalf(x float32) uint16 { return float16.Fromfloat32(x).Bits() }

// HalfToFloat32 converts binary16 bits to a float32 exactly.
func HalfToFloat32(h uint16) float32 { return float16.Frombits(h).Float32() }

// Float32ToBF16 converts x to bfloat16 bits (the high half of binary32), rounding to nearest even;
// NaN stays NaN (quiet).
func Float32ToBF16(x float32) uint16 {
	u := math.Float32bits(x)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// BF16ToFloat32 converts bfloat16 bits to a float32 exactly.
func BF16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }
