package interp

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/vkc-project/vkc/ir"
)

// tn builds a tensor of type t from values.
func tn(t ir.Type, vals ...float64) *ir.Tensor { return ir.TensorFromFloat64s(t, vals) }

// f32 builds an f32 tensor of the given shape.
func f32(shape []int, vals ...float64) *ir.Tensor {
	return tn(ir.Type{DType: ir.F32, Shape: shape}, vals...)
}

// i32 builds an i32 tensor of the given shape.
func i32(shape []int, vals ...float64) *ir.Tensor {
	return tn(ir.Type{DType: ir.I32, Shape: shape}, vals...)
}

func sh(d ...int) []int { return d }

// evalOp evaluates op on the given tensors, passed as function inputs a0, a1, ….
func evalOp(op ir.Op, attrs ir.Attrs, args ...*ir.Tensor) (*ir.Tensor, error) {
	b := ir.NewBuilder("t")
	in := map[string]*ir.Tensor{}
	vs := make([]ir.Value, len(args))
	for i, a := range args {
		name := fmt.Sprintf("a%d", i)
		v, err := b.Input(name, a.Type)
		if err != nil {
			return nil, err
		}
		vs[i] = v
		in[name] = a
	}
	y, err := b.Op(op, attrs, vs...)
	if err != nil {
		return nil, err
	}
	out, err := EvalValues(b.Function(), Env{Inputs: in}, y)
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

func mustEval(t *testing.T, op ir.Op, attrs ir.Attrs, args ...*ir.Tensor) *ir.Tensor {
	t.Helper()
	y, err := evalOp(op, attrs, args...)
	if err != nil {
		t.Fatalf("%s: %v", op, err)
	}
	return y
}

// closeTo reports the first element where got and want differ by more than tol·max(1, |want|);
// an empty string when they agree (NaNs agree with NaNs, infinities must be equal).
func closeTo(got, want *ir.Tensor, tol float64) string {
	if !got.Type.Equal(want.Type) {
		return fmt.Sprintf("type %s, want %s", got.Type, want.Type)
	}
	for i := 0; i < want.NumElements(); i++ {
		g, w := got.Float64(i), want.Float64(i)
		if math.IsNaN(w) && math.IsNaN(g) || g == w {
			continue
		}
		if math.IsNaN(g) || math.IsNaN(w) || math.IsInf(w, 0) || math.Abs(g-w) > tol*math.Max(1, math.Abs(w)) {
			return fmt.Sprintf("element %d is %v, want %v (tol %g)\n got  %v\n want %v", i, g, w, tol, abbrev(got), abbrev(want))
		}
	}
	return ""
}

func abbrev(x *ir.Tensor) []float64 {
	v := x.Float64s()
	if len(v) > 16 {
		v = v[:16]
	}
	return v
}

// maxRelErr is max |a-b| / max(1, max |b|) over all elements.
func maxRelErr(a, b *ir.Tensor) float64 {
	m, scale := 0.0, 1.0
	for i := 0; i < b.NumElements(); i++ {
		scale = math.Max(scale, math.Abs(b.Float64(i)))
	}
	for i := 0; i < b.NumElements(); i++ {
		m = math.Max(m, math.Abs(a.Float64(i)-b.Float64(i)))
	}
	return m / scale
}

// randT returns a tensor of type t with values uniform in [-r, r) (rounded to the dtype).
func randT(rng *rand.Rand, t ir.Type, r float64) *ir.Tensor {
	v := make([]float64, t.Shape.NumElements())
	for i := range v {
		v[i] = (rng.Float64()*2 - 1) * r
	}
	return ir.TensorFromFloat64s(t, v)
}

// ramp is an f32 tensor whose elements are 0, 1, 2, … in row-major order.
func ramp(shape []int) *ir.Tensor {
	v := make([]float64, ir.Shape(shape).NumElements())
	for i := range v {
		v[i] = float64(i)
	}
	return ir.TensorFromFloat64s(ir.T(ir.F32, shape...), v)
}
