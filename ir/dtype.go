// Package ir is vkc's op IR: tensor types, the op set with shape and dtype inference, graphs
// (models with parameters, persistent state and several functions), the model.yaml format and
// weight files. The reference interpreter lives in ir/interp.
package ir

import (
	"fmt"
	"math"

	"github.com/x448/float16"
)

// DType is an element type.
//
// Bool is the result of comparisons; it is one byte per element in host tensors. Block-quantized
// weight formats (Q8_0, Q4_K) will be added as further DTypes whose Size is per block.
type DType uint8

const (
	InvalidDType DType = iota
	F32
	F16
	BF16
	I32
	U32
	Bool
)

var dtypeNames = [...]string{InvalidDType: "invalid", F32: "f32", F16: "f16", BF16: "bf16", I32: "i32", U32: "u32", Bool: "bool"}

func (d DType) String() string {
	if int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	return fmt.Sprintf("dtype(%d)", d)
}

// Size is the number of bytes of one element.
func (d DType) Size() int {
	switch d {
	case F32, I32, U32:
		return 4
	case F16, BF16:
		return 2
	case Bool:
		return 1
	}
	return 0
}

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool { return d == F32 || d == F16 || d == BF16 }

// IsInt reports whether d is an integer type.
func (d DType) IsInt() bool { return d == I32 || d == U32 }

// ParseDType parses "f32", "f16", "bf16", "i32", "u32" or "bool".
func ParseDType(s string) (DType, error) {
	for i, n := range dtypeNames {
		if i != 0 && n == s {
			return DType(i), nil
		}
	}
	return InvalidDType, fmt.Errorf("unknown dtype %q (want f32, f16, bf16, i32, u32 or bool)", s)
}

// F16Bits converts f to IEEE half precision, rounding to nearest even (x448/float16; checked
// against the conversion vkc had before for every non-NaN float32).
func F16Bits(f float32) uint16 { return float16.Fromfloat32(f).Bits() }

// F16ToF32 converts IEEE half-precision bits to float32 exactly.
func F16ToF32(h uint16) float32 { return float16.Frombits(h).Float32() }

// BF16Bits converts f to bfloat16, rounding to nearest even.
func BF16Bits(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// BF16ToF32 converts bfloat16 bits to float32.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }
