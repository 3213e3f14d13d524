// Package ir is vkc's op IR: tensor types, the op set with shape and dtype inference, graphs
// (models with parameters, persistent state and several functions), the model.yaml format and
// weight files. The reference interpreter lives in ir/interp.
package ir

import (
	"fmt"
	"strings"

	"github.com/vkc-project/vkc/internal/bf16"
	"github.com/vkc-project/vkc/ir/quant"
	"github.com/x448/float16"
)

// DType is an element type.
//
// Bool is the result of comparisons; it is one byte per element in host tensors.
//
// The block-quantized dtypes (Q4_0 … Q8_K, Q2_K, Q3_K, IQ4_NL, IQ4_XS, MXFP4) are ggml's weight formats (package ir/quant has
// their layouts and reference dequantizers). They are valid for parameters only, as the
// weight operand of linear, matmul (b) and rmsnorm_linear, the table of embedding, and the
// operands of concat (weights merged row-wise); every other op rejects them (Infer). A tensor
// of such a dtype holds ggml's blocks byte for byte; its innermost (last) dimension is a
// whole number of blocks, and its elements are the values ggml's dequantizer gives.
type DType uint8

const (
	InvalidDType DType = iota
	F32
	F16
	BF16
	I32
	U32
	Bool
	Q4_0
	Q4_1
	Q5_0
	Q5_1
	Q8_0
	Q4_K
	Q5_K
	Q6_K
	Q8_K
	Q2_K
	Q3_K
	IQ4_NL
	IQ4_XS
	MXFP4
)

var dtypeNames = [...]string{InvalidDType: "invalid", F32: "f32", F16: "f16", BF16: "bf16", I32: "i32", U32: "u32", Bool: "bool",
	Q4_0: "q4_0", Q4_1: "q4_1", Q5_0: "q5_0", Q5_1: "q5_1", Q8_0: "q8_0", Q4_K: "q4_k", Q5_K: "q5_k", Q6_K: "q6_k", Q8_K: "q8_k",
	Q2_K: "q2_k", Q3_K: "q3_k", IQ4_NL: "iq4_nl", IQ4_XS: "iq4_xs", MXFP4: "mxfp4"}

// quantFormats maps the block-quantized dtypes to their formats.
var quantFormats = map[DType]*quant.Format{Q4_0: quant.Q4_0, Q4_1: quant.Q4_1, Q5_0: quant.Q5_0, Q5_1: quant.Q5_1,
	Q8_0: quant.Q8_0, Q4_K: quant.Q4_K, Q5_K: quant.Q5_K, Q6_K: quant.Q6_K, Q8_K: quant.Q8_K,
	Q2_K: quant.Q2_K, Q3_K: quant.Q3_K, IQ4_NL: quant.IQ4_NL, IQ4_XS: quant.IQ4_XS, MXFP4: quant.MXFP4}

// Format is d's storage format in quant's table: the block layout and reference dequantizer of a
// block-quantized dtype, the plain format of f32, f16 and bf16, or nil (integers and bool).
func (d DType) Format() *quant.Format {
	switch d {
	case F32:
		return quant.FormatF32
	case F16:
		return quant.FormatF16
	case BF16:
		return quant.FormatBF16
	}
	return quantFormats[d]
}

// Quantized reports whether d is a block-quantized weight format.
func (d DType) Quantized() bool { return quantFormats[d] != nil }

// CacheFormat reports whether d is a dtype a KV cache (state written by cache_write, read by
// attention) may have: f32, f16, bf16, or a block format vkc quantizes itself (q8_0, q4_0:
// quant.Format.Quantizes).
func (d DType) CacheFormat() bool {
	if d.IsFloat() {
		return true
	}
	f := quantFormats[d]
	return f != nil && f.Quantizes()
}

// QuantizedDTypes lists the block-quantized dtypes in order.
func QuantizedDTypes() []DType {
	return []DType{Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL, IQ4_XS, MXFP4}
}

// DTypeOfFormat returns the dtype stored in format f (f32, f16, bf16 or a block format).
func DTypeOfFormat(f *quant.Format) (DType, bool) {
	for d := F32; int(d) < len(dtypeNames); d++ {
		if d.Format() == f && f != nil {
			return d, true
		}
	}
	return InvalidDType, false
}

func (d DType) String() string {
	if int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	return fmt.Sprintf("dtype(%d)", d)
}

// Size is the number of bytes of one element; 0 for the block-quantized dtypes, whose elements
// share blocks (Type.Bytes gives their storage).
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

// ParseDType parses "f32", "f16", "bf16", "i32", "u32", "bool" or a block-quantized weight
// format ("q8_0", "q4_k", …; valid for parameters only).
func ParseDType(s string) (DType, error) {
	for i, n := range dtypeNames {
		if i != 0 && n == s {
			return DType(i), nil
		}
	}
	var q []string
	for _, d := range QuantizedDTypes() {
		q = append(q, d.String())
	}
	return InvalidDType, fmt.Errorf("unknown dtype %q (want f32, f16, bf16, i32, u32 or bool, or for a parameter one of %s)", s, strings.Join(q, ", "))
}

// F16Bits converts f to IEEE half precision, rounding to nearest even (x448/float16; checked
// against the conversion vkc had before for every non-NaN float32).
func F16Bits(f float32) uint16 { return float16.Fromfloat32(f).Bits() }

// F16ToF32 converts IEEE half-precision bits to float32 exactly.
func F16ToF32(h uint16) float32 { return float16.Frombits(h).Float32() }

// BF16Bits converts f to bfloat16, rounding to nearest even.
func BF16Bits(f float32) uint16 { return bf16.FromFloat32(f) }

// BF16ToF32 converts bfloat16 bits to float32.
func BF16ToF32(h uint16) float32 { return bf16.ToFloat32(h) }
