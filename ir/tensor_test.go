package ir_test

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/vkc-project/vkc/ir"
)

// randomBytes returns a tensor of t with random bytes (for a block-quantized dtype, random
// scales too: some are infinities or NaNs, which the comparisons below compare by their bits).
func randomBytes(t ir.Type, seed int64) *ir.Tensor {
	x := ir.NewTensor(t)
	rand.New(rand.NewSource(seed)).Read(x.Data)
	return x
}

// TestFloat64sInPieces checks Float64s, which converts a large tensor in pieces on every
// processor, against Float64 element by element, for tensors small (one piece) and large (the
// pieces' edges inside rows, a number of blocks no processor count divides).
func TestFloat64sInPieces(t *testing.T) {
	dtypes := append([]ir.DType{ir.F32, ir.F16, ir.BF16, ir.I32}, ir.QuantizedDTypes()...)
	for _, d := range dtypes {
		for _, shape := range []ir.Shape{{3, 256}, {1031, 768}} {
			x := randomBytes(ir.Type{DType: d, Shape: shape}, int64(d)+int64(shape[0]))
			t.Run(fmt.Sprintf("%s%v", d, shape), func(t *testing.T) {
				got := x.Float64s()
				if len(got) != shape.NumElements() {
					t.Fatalf("%d elements, want %d", len(got), shape.NumElements())
				}
				for i, v := range got {
					if w := x.Float64(i); math.Float64bits(v) != math.Float64bits(w) {
						t.Fatalf("element %d: %v, want %v", i, v, w)
					}
				}
			})
		}
	}
}

// BenchmarkFloat64s converts a 4096×4096 weight as the interpreter's reference does.
func BenchmarkFloat64s(b *testing.B) {
	for _, d := range []ir.DType{ir.F16, ir.Q8_0, ir.Q4_K} {
		x := randomBytes(ir.Type{DType: d, Shape: ir.Shape{4096, 4096}}, 1)
		b.Run(d.String(), func(b *testing.B) {
			b.SetBytes(int64(x.NumElements()))
			for b.Loop() {
				x.Float64s()
			}
		})
	}
}

// TestFloat64sAt converts rows of a weight one at a time, as the interpreter reads a quantized
// weight, and compares them with the whole conversion; a range not of whole blocks panics.
func TestFloat64sAt(t *testing.T) {
	for _, d := range append([]ir.DType{ir.F16, ir.F32}, ir.QuantizedDTypes()...) {
		x := randomBytes(ir.Type{DType: d, Shape: ir.Shape{5, 512}}, int64(d))
		all := x.Float64s()
		for r := range 5 {
			row := make([]float64, 512)
			x.Float64sAt(row, r*512)
			for i, v := range row {
				if w := all[r*512+i]; math.Float64bits(v) != math.Float64bits(w) {
					t.Fatalf("%s row %d element %d: %v, want %v", d, r, i, v, w)
				}
			}
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("Float64sAt of half a Q8_0 block did not panic")
		}
	}()
	randomBytes(ir.Type{DType: ir.Q8_0, Shape: ir.Shape{1, 64}}, 1).Float64sAt(make([]float64, 16), 0)
}
