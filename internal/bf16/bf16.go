// Package bf16 converts between float32 and bfloat16 bits (the high half of binary32), for the
// packages that store or fold bf16 values (ir's tensors, codegen's constants).
package bf16

import "math"

// FromFloat32 converts x to bfloat16 bits, rounding to nearest even; NaN stays NaN (quiet).
func FromFloat32(x float32) uint16 {
	u := math.Float32bits(x)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// ToFloat32 converts bfloat16 bits to float32 exactly.
func ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }
