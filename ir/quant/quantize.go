package quant

import (
	"fmt"
	"math"

	"github.com/x448/float16"
)

// Quantizers: the formats vkc writes itself, for a quantized KV cache (cache_write into a q8_0
// or q4_0 state). Each is ggml's reference quantizer (ggml-quants.c, quantize_row_*_ref) in
// ggml's float32 order of operations, so a block written here is the block ggml writes for the
// same float32 row:
//
//   - q8_0: d = amax/127, id = 1/d (0 when d is 0), q = roundf(x·id) (half away from zero);
//   - q4_0: max = the element of largest magnitude (the first of equals), d = max/−8,
//     id = 1/d (0 when d is 0), q = min(15, trunc(x·id + 8.5)).
//
// d is stored as f16 (round to nearest even) after the quants are computed with the f32 d.
// A NaN or Inf element gives what ggml's C gives only where C defines it; vkc's caches hold
// finite values.

// Quantizes reports whether vkc has a quantizer for f (q8_0, q4_0).
func (f *Format) Quantizes() bool { return f.quantize != nil }

// QuantizeBlock writes one block of f from BlockElems float32s x into b (BlockBytes).
func (f *Format) QuantizeBlock(x []float32, b []byte) error {
	if f.quantize == nil {
		return fmt.Errorf("quant: vkc has no quantizer for %s (it quantizes %s)", f.Name, quantizerNames())
	}
	if len(x) != f.BlockElems || len(b) != f.BlockBytes {
		return fmt.Errorf("quant: %s block of %d values into %d bytes; want %d and %d", f.Name, len(x), len(b), f.BlockElems, f.BlockBytes)
	}
	f.quantize(x, b)
	return nil
}

// Quantize writes whole blocks of f for x (a multiple of BlockElems values).
func (f *Format) Quantize(x []float32) ([]byte, error) {
	if len(x)%f.BlockElems != 0 {
		return nil, fmt.Errorf("quant: %d values are not whole %s blocks of %d", len(x), f.Name, f.BlockElems)
	}
	out := make([]byte, len(x)/f.BlockElems*f.BlockBytes)
	for i := 0; i < len(x)/f.BlockElems; i++ {
		if err := f.QuantizeBlock(x[i*f.BlockElems:(i+1)*f.BlockElems], out[i*f.BlockBytes:(i+1)*f.BlockBytes]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func quantizerNames() string {
	s := ""
	for _, f := range Formats {
		if f.quantize != nil {
			if s != "" {
				s += ", "
			}
			s += f.Name
		}
	}
	return s
}

func putF16(b []byte, x float32) {
	h := float16.Fromfloat32(x).Bits()
	b[0], b[1] = byte(h), byte(h>>8)
}

// quantizeQ8_0 is ggml's quantize_row_q8_0_ref for one block.
func quantizeQ8_0(x []float32, b []byte) {
	var amax float32
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	d := amax / 127
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putF16(b, d)
	for j, v := range x {
		b[2+j] = byte(int8(roundAway(v * id)))
	}
}

// quantizeQ4_0 is ggml's quantize_row_q4_0_ref for one block: element j and j+16 share byte j
// (low and high nibble).
func quantizeQ4_0(x []float32, b []byte) {
	var amax, mx float32
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); amax < a {
			amax, mx = a, v
		}
	}
	d := mx / -8
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putF16(b, d)
	for j := 0; j < 16; j++ {
		x0, x1 := x[j]*id, x[16+j]*id
		q0 := min(15, int8(truncF32(x0+8.5)))
		q1 := min(15, int8(truncF32(x1+8.5)))
		b[2+j] = byte(q0) | byte(q1)<<4
	}
}

// roundAway is C's roundf: to nearest, halves away from zero (|x| < 2^23 here: |x·id| ≤ 127.5).
func roundAway(x float32) float32 { return float32(math.Round(float64(x))) }

// truncF32 is C's conversion to an integer type: toward zero.
func truncF32(x float32) float32 { return float32(math.Trunc(float64(x))) }

func init() {
	Q8_0.quantize = quantizeQ8_0
	Q4_0.quantize = quantizeQ4_0
}
