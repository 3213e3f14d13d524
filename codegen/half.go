package codegen

import "github.com/x448/float16"

// Float32ToHalf converts x to IEEE 754 binary16 bits, rounding to nearest even; values beyond the
// f16 range become infinities, NaN stays NaN.
func Float32ToHalf(x float32) uint16 { return float16.Fromfloat32(x).Bits() }

// HalfToFloat32 converts binary16 bits to a float32 exactly.
func HalfToFloat32(h uint16) float32 { return float16.Frombits(h).Float32() }
