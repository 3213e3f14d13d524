package codegen

import (
	"github.com/vkc-project/vkc/internal/bf16"
	"github.com/x448/float16"
)

// Float32ToHalf converts x to IEEE 754 binary16 bits, rounding to nearest even; values beyond the
// f16 range become infinities, NaN stays NaN.
func Float32ToHalf(x float32) uint16 { return float16.Fromfloat32(x).Bits() }

// HalfToFloat32 converts binary16 bits to a float32 exactly.
func HalfToFloat32(h uint16) float32 { return float16.Frombits(h).Float32() }

// Float32ToBF16 converts x to bfloat16 bits (the high half of binary32), rounding to nearest even;
// NaN stays NaN (quiet).
func Float32ToBF16(x float32) uint16 { return bf16.FromFloat32(x) }

// BF16ToFloat32 converts bfloat16 bits to a float32 exactly.
func BF16ToFloat32(h uint16) float32 { return bf16.ToFloat32(h) }
