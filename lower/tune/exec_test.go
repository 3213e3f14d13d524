package tune

import (
	"math"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir"
)

// Compare reports the element of the largest error relative to its row's scale (the largest
// magnitude of the reference row, plus 1), a NaN on one side only, and any difference of an
// integer tensor; a row whose reference holds a NaN has no measured error.
func TestCompare(t *testing.T) {
	f32 := func(rows, cols int, vs ...float64) *ir.Tensor {
		x := ir.NewTensor(ir.Type{DType: ir.F32, Shape: ir.Shape{rows, cols}})
		for i, v := range vs {
			x.SetFloat64(i, v)
		}
		return x
	}
	nan := math.NaN()
	want := f32(2, 3, 1, 2, 3, 100, 0, 0)
	for _, tc := range []struct {
		name string
		got  *ir.Tensor
		tol  float64
		msg  string
	}{
		{"equal", f32(2, 3, 1, 2, 3, 100, 0, 0), 0, ""},
		// Row 0: 0.4/(3+1) = 0.1; row 1: 2/(100+1) ≈ 0.0198: row 0's element 1 is the worst.
		{"worst", f32(2, 3, 1, 2.4, 3, 100, 2, 0), 0.05, "element 1: got 2.4"},
		{"within", f32(2, 3, 1, 2.4, 3, 100, 2, 0), 0.2, ""},
		{"nan", f32(2, 3, 1, 2, 3, 100, nan, 0), 1, "element 4: got NaN"},
	} {
		msg := Compare(tc.got, want, tc.tol)
		if tc.msg == "" && msg != "" || tc.msg != "" && !strings.HasPrefix(msg, tc.msg) {
			t.Errorf("%s: %q, want %q", tc.name, msg, tc.msg)
		}
	}
	// The row with a NaN on both sides is not measured; the other row is.
	if msg := Compare(f32(2, 3, nan, 5, 3, 100, 2, 0), f32(2, 3, nan, 2, 3, 100, 0, 0), 0.05); msg != "" {
		t.Errorf("a reference row with a NaN: %q", msg)
	}
	i32 := func(vs ...float64) *ir.Tensor {
		x := ir.NewTensor(ir.Type{DType: ir.I32, Shape: ir.Shape{3}})
		for i, v := range vs {
			x.SetFloat64(i, v)
		}
		return x
	}
	if msg := Compare(i32(1, 2, 4), i32(1, 2, 3), 10); !strings.HasPrefix(msg, "element 2: got 4, want 3") {
		t.Errorf("integers: %q", msg)
	}
}
