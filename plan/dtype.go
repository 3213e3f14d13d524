package plan

import (
	"fmt"
	"math/bits"
)

// DType is the element type of a tensor in a plan. It is the plan's own enum, not ir's, so that the
// file format does not change when ir renumbers its types; lower maps one to the other.
//
// The numeric values are part of the file format: never renumber, only add.
type DType uint8

const (
	InvalidDType DType = 0
	F32          DType = 1
	F16          DType = 2
	BF16         DType = 3
	I32          DType = 4
	U32          DType = 5

	// Block-quantized weight formats: ggml's blocks, byte for byte (package ir/quant has the
	// layouts; lower checks this table against it). Values 16.. are reserved for them.
	Q8_0   DType = 16 // blocks of 32 elements: f16 scale + 32 × i8 = 34 bytes
	Q4_K   DType = 17 // super-blocks of 256 elements: 144 bytes
	Q4_0   DType = 18 // 32 elements: f16 scale + 16 bytes of nibbles = 18 bytes
	Q4_1   DType = 19 // 32 elements: f16 scale and min + 16 bytes = 20 bytes
	Q5_0   DType = 20 // 32 elements: f16 scale + 4 bytes of fifth bits + 16 = 22 bytes
	Q5_1   DType = 21 // 32 elements: f16 scale and min + 4 + 16 = 24 bytes
	Q5_K   DType = 22 // 256 elements: 176 bytes
	Q6_K   DType = 23 // 256 elements: 210 bytes
	Q8_K   DType = 24 // 256 elements: f32 scale + 256 × i8 + 16 × i16 sums = 292 bytes
	Q2_K   DType = 25 // 256 elements: 16 bytes of 4-bit scales and mins + 64 of 2-bit quants + f16 d, dmin = 84 bytes
	Q3_K   DType = 26 // 256 elements: 32 bytes of third bits + 64 of 2-bit quants + 12 of scales + f16 d = 110 bytes
	IQ4_NL DType = 27 // 32 elements: f16 scale + 16 bytes of codebook nibbles = 18 bytes
	IQ4_XS DType = 28 // 256 elements: f16 scale + 6 bytes of scales + 128 of codebook nibbles = 136 bytes
	MXFP4  DType = 29 // 32 elements: an e8m0 exponent + 16 bytes of e2m1 nibbles = 17 bytes
)

var dtypeInfo = map[DType]struct {
	name       string
	blockElems int64 // elements per block (1 for plain types)
	blockBytes int64 // bytes per block
}{
	F32:    {"f32", 1, 4},
	F16:    {"f16", 1, 2},
	BF16:   {"bf16", 1, 2},
	I32:    {"i32", 1, 4},
	U32:    {"u32", 1, 4},
	Q8_0:   {"q8_0", 32, 34},
	Q4_K:   {"q4_k", 256, 144},
	Q4_0:   {"q4_0", 32, 18},
	Q4_1:   {"q4_1", 32, 20},
	Q5_0:   {"q5_0", 32, 22},
	Q5_1:   {"q5_1", 32, 24},
	Q5_K:   {"q5_k", 256, 176},
	Q6_K:   {"q6_k", 256, 210},
	Q8_K:   {"q8_k", 256, 292},
	Q2_K:   {"q2_k", 256, 84},
	Q3_K:   {"q3_k", 256, 110},
	IQ4_NL: {"iq4_nl", 32, 18},
	IQ4_XS: {"iq4_xs", 256, 136},
	MXFP4:  {"mxfp4", 32, 17},
}

// BlockSize returns the elements and bytes of one block (1 and the element size for plain
// dtypes); 0, 0 for an unknown dtype.
func (t DType) BlockSize() (elems, bytes int64) {
	i := dtypeInfo[t]
	return i.blockElems, i.blockBytes
}

// Valid reports whether t is a known dtype.
func (t DType) Valid() bool { _, ok := dtypeInfo[t]; return ok }

// String returns the dtype's name as model.yaml spells it ("f32", "q8_0"), or "dtype(N)" if unknown.
func (t DType) String() string {
	if i, ok := dtypeInfo[t]; ok {
		return i.name
	}
	return fmt.Sprintf("dtype(%d)", uint8(t))
}

// ParseDType is the inverse of String for known dtypes.
func ParseDType(s string) (DType, bool) {
	for t, i := range dtypeInfo {
		if i.name == s {
			return t, true
		}
	}
	return InvalidDType, false
}

// Quantized reports whether t is a block-quantized format.
func (t DType) Quantized() bool { return dtypeInfo[t].blockElems > 1 }

// Elements returns the number of elements of shape (1 for a scalar, shape []), or an error if a
// dimension is negative or the product overflows int64.
func Elements(shape []int64) (int64, error) {
	n := int64(1)
	for i, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("dimension %d is negative (%d)", i, d)
		}
		hi, lo := bits.Mul64(uint64(n), uint64(d))
		if hi != 0 || lo > 1<<60 {
			return 0, fmt.Errorf("shape %v has too many elements", shape)
		}
		n = int64(lo)
	}
	return n, nil
}

// Bytes returns the storage size of a tensor of dtype t and the given shape. For block-quantized
// formats the element count must be a multiple of the block size.
//
//	F16.Bytes([]int64{2, 3}) // 12
func (t DType) Bytes(shape []int64) (int64, error) {
	i, ok := dtypeInfo[t]
	if !ok {
		return 0, fmt.Errorf("unknown dtype %d", uint8(t))
	}
	n, err := Elements(shape)
	if err != nil {
		return 0, err
	}
	if n%i.blockElems != 0 {
		return 0, fmt.Errorf("%s needs a multiple of %d elements, shape %v has %d", i.name, i.blockElems, shape, n)
	}
	if i.blockElems > 1 && (len(shape) == 0 || shape[len(shape)-1]%i.blockElems != 0) {
		// ggml's blocks never cross a row: the last axis is a whole number of blocks.
		return 0, fmt.Errorf("%s stores its last axis in blocks of %d elements, shape %v does not", i.name, i.blockElems, shape)
	}
	// n <= 2^60 and blockBytes/blockElems <= 4 (q4_0's 18/32 … q8_k's 292/256 are below 2),
	// so this cannot overflow.
	return n / i.blockElems * i.blockBytes, nil
}
