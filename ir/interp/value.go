package interp

import (
	"math"
	"sync"

	"github.com/vkc-project/vkc/ir"
)

// val is an evaluated tensor: its type and its elements as float64, already rounded to the
// dtype (so every element is exactly representable in it and the conversion to ir.Tensor is
// lossless).
//
// A block-quantized value (a parameter, a concat of them, a quantized state) is held as its
// blocks in raw, and d is nil until an op needs its elements: then materialize sets d to the
// values ggml's dequantizer gives (exact in float32). The products and the embedding read the
// rows of a quantized weight from raw as they go (ReadsRaw), so that a reference of a 1B Q8_0
// model no longer holds 10 GB of float64 weights (8B: 64 GB), nor spends most of its time
// writing them: a Llama-3.2-1B-shaped file's one-row reference takes 1.2 s and 1.5 GB on this
// project's 2-core CI machine, where converting every weight took 8.9 s and 11 GB.
type val struct {
	t   ir.Type
	d   []float64
	raw *ir.Tensor
}

func fromTensor(t *ir.Tensor) *val {
	if t.Type.DType.Quantized() {
		return &val{t: t.Type, raw: t}
	}
	return &val{t: t.Type, d: t.Float64s()}
}

// lazy reports whether v is a block-quantized value held as its blocks (d is set only once an op
// needs it converted, by materialize): an op that reads it from raw must not read d, which
// another evaluation sharing the value through a ParamCache may be setting.
func (v *val) lazy() bool { return v.raw != nil && v.t.DType.Quantized() }

// materializing guards the conversion of lazy values shared between evaluations.
var materializing sync.Mutex

// materialize converts a lazy value's blocks to d, once.
func (v *val) materialize() {
	if !v.lazy() {
		return
	}
	materializing.Lock()
	defer materializing.Unlock()
	if v.d == nil {
		v.d = v.raw.Float64s()
	}
}

func (v *val) tensor() *ir.Tensor {
	if v.raw != nil {
		return v.raw
	}
	return ir.TensorFromFloat64s(v.t, v.d)
}

// newVal returns a value of type t with the elements of d rounded to t's dtype (d is reused).
func newVal(t ir.Type, d []float64) *val {
	r := rounder(t.DType)
	// In parallel for large values (a state's cache written back: SmolLM2's decode rounds 24M
	// elements of its caches, most of its reference's time when done on one core).
	parallelFor(len(d), 32*len(d), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			d[i] = r(d[i])
		}
	})
	return &val{t: t, d: d}
}

// rounder returns the function that maps a float64 to the nearest value of dtype d:
//   - f32, f16, bf16: round to nearest, ties to even, computed from the float64 directly (no
//     double rounding through f32); overflow gives ±Inf; NaN stays NaN.
//   - i32, u32: truncate toward zero and saturate at the type's bounds; NaN gives 0. (This is
//     cast's float→int rule; integer arithmetic wraps before it gets here.)
//   - bool: 1 for any non-zero value (NaN included), else 0.
func rounder(d ir.DType) func(float64) float64 {
	switch d {
	case ir.F32:
		return func(x float64) float64 { return float64(float32(x)) }
	case ir.F16:
		return func(x float64) float64 { return float64(ir.F16ToF32(ir.F16Bits(roundToOdd32(x)))) }
	case ir.BF16:
		return func(x float64) float64 { return float64(ir.BF16ToF32(ir.BF16Bits(roundToOdd32(x)))) }
	case ir.I32:
		return func(x float64) float64 { return satTrunc(x, math.MinInt32, math.MaxInt32) }
	case ir.U32:
		return func(x float64) float64 { return satTrunc(x, 0, math.MaxUint32) }
	case ir.Bool:
		return func(x float64) float64 {
			if x != 0 {
				return 1
			}
			return 0
		}
	}
	panic("interp: no rounding for dtype " + d.String())
}

func satTrunc(x, lo, hi float64) float64 {
	if math.IsNaN(x) {
		return 0
	}
	return math.Max(lo, math.Min(hi, math.Trunc(x)))
}

// roundToOdd32 rounds x to float32 with round-to-odd: truncate, and set the lowest mantissa bit
// if anything was lost. A second rounding of the result to a format with at least two fewer
// significand bits (f16: 11, bf16: 8, against f32's 24) is then the correctly rounded result of
// x, which plain float32(x) followed by a second round-to-nearest is not (double rounding).
func roundToOdd32(x float64) float32 {
	f := float32(x)
	if float64(f) == x || math.IsNaN(x) || math.IsInf(float64(f), 0) {
		return f
	}
	if math.Abs(float64(f)) > math.Abs(x) {
		f = math.Nextafter32(f, 0)
	}
	return math.Float32frombits(math.Float32bits(f) | 1)
}

// bcastIndex maps each element (row-major) of shape out to the element of shape in that NumPy
// broadcasting reads for it. in must broadcast to out.
func bcastIndex(out, in ir.Shape) []int {
	n := out.NumElements()
	idx := make([]int, n)
	if in.Equal(out) {
		for i := range idx {
			idx[i] = i
		}
		return idx
	}
	r := len(out)
	off := r - len(in)
	inStr := in.Strides()
	str := make([]int, r) // stride in the input per output axis; 0 where broadcast
	for i := range in {
		if in[i] != 1 {
			str[off+i] = inStr[i]
		}
	}
	coord := make([]int, r)
	pos := 0
	for i := 0; i < n; i++ {
		idx[i] = pos
		for ax := r - 1; ax >= 0; ax-- {
			coord[ax]++
			pos += str[ax]
			if coord[ax] < out[ax] {
				break
			}
			pos -= str[ax] * coord[ax]
			coord[ax] = 0
		}
	}
	return idx
}

// scalarInt reads a run-time integer scalar (pos, kv_len).
func scalarInt(v *val) int { return int(v.d[0]) }

// split returns the sizes before, along and after axis ax.
func split(s ir.Shape, ax int) (outer, n, inner int) {
	outer, inner = 1, 1
	for i := 0; i < ax; i++ {
		outer *= s[i]
	}
	for i := ax + 1; i < len(s); i++ {
		inner *= s[i]
	}
	return outer, s[ax], inner
}
