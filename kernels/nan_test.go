package kernels_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
)

// specials are the values every op is run on besides ordinary numbers.
var specials = []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0, math.Copysign(0, -1), 1.5, -2.25, 0.5, 3, -1}

// specialTensor fills a float tensor so that every special value and every pair of them occur:
// with phase 0 element i holds specials[i%10], otherwise specials[(i/10+phase)%10], so a binary
// op given a tensor of each phase sees all 100 pairs. Integer tensors get small in-range values from fill.
func specialTensor(t ir.Type, phase int, fill func(i int) float64) *ir.Tensor {
	x := ir.NewTensor(t)
	for i := 0; i < x.NumElements(); i++ {
		switch {
		case !t.DType.IsFloat():
			x.SetFloat64(i, fill(i))
		case phase == 0:
			x.SetFloat64(i, specials[i%len(specials)])
		default:
			x.SetFloat64(i, specials[(i/len(specials)+phase)%len(specials)])
		}
	}
	return x
}

// specialRows fills a float tensor row by row (last axis): row r holds ordinary values and, by
// r mod 6, nothing special, one NaN, one +Inf, one -Inf, +Inf and -Inf, or NaN and +Inf, so that
// a row-wise op (a reduction, a norm, a matmul's dot product) meets each case alone.
func specialRows(t ir.Type, seed int) *ir.Tensor {
	x := ir.NewTensor(t)
	n := x.NumElements()
	cols := 1
	if r := t.Shape.Rank(); r > 0 {
		cols = t.Shape[r-1]
	}
	for i := 0; i < n; i++ {
		x.SetFloat64(i, float64((i*7+seed*3)%11-5)/8)
	}
	for r := 0; r*cols < n; r++ {
		at := func(k int) int { return r*cols + (r+k*3+seed)%cols }
		switch (r + seed) % 6 {
		case 1:
			x.SetFloat64(at(0), math.NaN())
		case 2:
			x.SetFloat64(at(0), math.Inf(1))
		case 3:
			x.SetFloat64(at(0), math.Inf(-1))
		case 4:
			if cols > 1 {
				x.SetFloat64(at(0), math.Inf(1))
				x.SetFloat64(at(1), math.Inf(-1))
			}
		case 5:
			if cols > 1 {
				x.SetFloat64(at(0), math.NaN())
				x.SetFloat64(at(1), math.Inf(1))
			}
		}
	}
	return x
}

// compareSpecial checks got against the interpreter's want element by element: a NaN must be a
// NaN, an infinity the same infinity, a finite value finite and within tol of the row's largest
// finite magnitude (plus tol); integers and bools exactly. The sign of a zero is not compared.
func compareSpecial(got, want *ir.Tensor, tol float64) string {
	if !got.Type.Equal(want.Type) {
		return fmt.Sprintf("type %s, want %s", got.Type, want.Type)
	}
	g, w := got.Float64s(), want.Float64s()
	cols := 1
	if r := want.Type.Shape.Rank(); r > 0 && want.Type.Shape[r-1] > 0 {
		cols = want.Type.Shape[r-1]
	}
	for r := 0; r*cols < len(w); r++ {
		scale := 0.0
		for _, v := range w[r*cols : (r+1)*cols] {
			if !math.IsInf(v, 0) && !math.IsNaN(v) {
				scale = math.Max(scale, math.Abs(v))
			}
		}
		for i := r * cols; i < (r+1)*cols; i++ {
			ok := true
			switch {
			case !want.Type.DType.IsFloat():
				ok = g[i] == w[i]
			case math.IsNaN(w[i]):
				ok = math.IsNaN(g[i])
			case math.IsInf(w[i], 0):
				ok = g[i] == w[i]
			default:
				ok = !math.IsNaN(g[i]) && !math.IsInf(g[i], 0) && math.Abs(g[i]-w[i]) <= tol*(scale+1)
			}
			if !ok {
				return fmt.Sprintf("element %d: got %g, want %g", i, g[i], w[i])
			}
		}
	}
	return ""
}

// specialCase is one problem run on special values.
type specialCase struct {
	name string
	p    *kernels.Problem
	args []*ir.Tensor
}

func elementwiseCase(t *testing.T, op ir.Op, attrs ir.Attrs, in ...ir.Type) specialCase {
	t.Helper()
	a, outs, err := ir.Infer(op, attrs, in)
	if err != nil {
		t.Fatalf("%s: %v", op, err)
	}
	f := &kernels.Fused{Inputs: in}
	var args []int
	for i, typ := range in {
		f.Nodes = append(f.Nodes, kernels.FusedNode{Op: ir.Input, Index: i, DType: typ.DType})
		args = append(args, i)
	}
	f.Nodes = append(f.Nodes, kernels.FusedNode{Op: op, Attrs: a, Args: args, DType: outs[0].DType})
	f.Outputs = []int{len(f.Nodes) - 1}
	p := &kernels.Problem{Op: kernels.FusedElementwise, Args: in, Outs: outs, Expr: f}
	vals := make([]*ir.Tensor, len(in))
	for i, typ := range in {
		vals[i] = specialTensor(typ, i, func(j int) float64 { return float64(j % 2) })
	}
	return specialCase{op.String() + fmt.Sprint(in), p, vals}
}

func opCase(t *testing.T, op ir.Op, attrs ir.Attrs, args ...*ir.Tensor) specialCase {
	t.Helper()
	types := make([]ir.Type, len(args))
	for i, a := range args {
		types[i] = a.Type
	}
	return specialCase{op.String() + fmt.Sprint(types), problem(t, op, attrs, types...), args}
}

// TestSpecialValuesMatchInterpreter runs every op's templates (at their default configuration)
// on NaN, ±Inf and signed zeros and compares with the interpreter exactly where a result is not
// finite: SPIR-V's FMax and FMin return either operand for a NaN, float-to-integer conversion of
// a NaN or an out-of-range value is undefined, and an ordered comparison is false for a NaN, so
// a kernel must say what it means where the interpreter (Go's float64 semantics) decides.
func TestSpecialValuesMatchInterpreter(t *testing.T) {
	f32 := func(s ...int) ir.Type { return ir.T(ir.F32, s...) }
	x := f32(6, 8) // six rows: each special pattern of specialRows once
	i32 := func(v ...float64) *ir.Tensor {
		s := []int{len(v)}
		if len(v) == 1 {
			s = nil
		}
		return ir.TensorFromFloat64s(ir.T(ir.I32, s...), v)
	}
	var cases []specialCase
	unary := []ir.Op{ir.Neg, ir.Abs, ir.Exp, ir.Log, ir.Sqrt, ir.Rsqrt, ir.Recip, ir.Sin, ir.Cos, ir.Tanh, ir.Erf,
		ir.Sigmoid, ir.Silu, ir.Relu, ir.Gelu, ir.GeluTanh}
	for _, op := range unary {
		cases = append(cases, elementwiseCase(t, op, nil, f32(100)))
	}
	for _, to := range []string{"f16", "i32", "u32", "bool"} {
		cases = append(cases, elementwiseCase(t, ir.Cast, ir.Attrs{"to": to}, f32(100)))
	}
	for _, op := range []ir.Op{ir.Add, ir.Sub, ir.Mul, ir.Div, ir.Maximum, ir.Minimum, ir.Pow,
		ir.Eq, ir.Ne, ir.Lt, ir.Le, ir.Gt, ir.Ge} {
		cases = append(cases, elementwiseCase(t, op, nil, f32(100), f32(100)))
	}
	cases = append(cases, elementwiseCase(t, ir.Where, nil, ir.T(ir.Bool, 100), f32(100), f32(100)))

	row := func(seed int, typ ir.Type) *ir.Tensor { return specialRows(typ, seed) }
	for _, op := range []ir.Op{ir.Sum, ir.Mean, ir.Max, ir.Min, ir.Argmax} {
		cases = append(cases, opCase(t, op, ir.Attrs{"axis": -1}, row(0, x)))
	}
	cases = append(cases,
		opCase(t, ir.Softmax, ir.Attrs{"axis": -1}, row(0, x)),
		opCase(t, ir.RMSNorm, nil, row(0, x), row(1, f32(8))),
		opCase(t, ir.LayerNorm, nil, row(0, x), row(1, f32(8)), row(2, f32(8))),
		opCase(t, ir.AddRMSNorm, nil, row(0, x), row(3, x), row(1, f32(8))),
		opCase(t, ir.Matmul, nil, row(0, x), row(1, f32(8, 6))),
		opCase(t, ir.Linear, nil, row(0, x), row(1, f32(5, 8)), row(2, f32(5))),
		opCase(t, ir.Linear, nil, row(1, f32(1, 8)), row(0, f32(6, 8))),
		opCase(t, ir.Matmul, ir.Attrs{"tb": true}, row(0, f32(2, 6, 8)), row(1, f32(2, 6, 8))),
		opCase(t, ir.RMSNormLinear, nil, row(0, x), row(1, f32(8)), row(2, f32(5, 8))),
		opCase(t, ir.Embedding, nil, row(0, x), i32(5, 0, 1, 2, 3, 4, 2)),
		opCase(t, ir.Rope, nil, row(0, f32(6, 2, 8)), i32(3)),
		opCase(t, ir.RopeNorm, nil, row(0, f32(6, 2, 8)), row(1, f32(8)), i32(3)),
		opCase(t, ir.CacheWrite, nil, row(0, f32(9, 8)), row(1, f32(3, 8)), i32(2)),
		opCase(t, ir.RopeCacheWrite, nil, row(0, f32(9, 2, 8)), row(1, f32(3, 2, 8)), i32(2)),
		opCase(t, ir.Attention, ir.Attrs{"causal": true}, row(0, f32(2, 2, 8)), row(1, f32(6, 1, 8)), row(2, f32(6, 1, 8)), i32(5)),
		opCase(t, ir.Attention, nil, row(3, f32(1, 2, 8)), row(4, f32(6, 1, 8)), row(5, f32(6, 1, 8))),
		opCase(t, ir.Conv1d, ir.Attrs{"padding": 1}, row(0, f32(2, 12)), row(1, f32(3, 2, 3)), row(2, f32(3))),
		opCase(t, ir.Transpose, ir.Attrs{"perm": []int{1, 0}}, row(0, x)),
		opCase(t, ir.Slice, ir.Attrs{"axis": 1, "start": 1, "end": 7, "step": 2}, row(0, x)),
		opCase(t, ir.Concat, ir.Attrs{"axis": 0}, row(0, x), row(1, f32(2, 8))),
		opCase(t, ir.Expand, ir.Attrs{"shape": []int{2, 6, 8}}, row(0, x)),
		opCase(t, ir.Reshape, ir.Attrs{"shape": []int{48}}, row(0, x)),
	)

	d := kerneltest.Device(t)
	caps := kerneltest.CapsOf(&d.Info)
	for _, c := range cases {
		tmpls, err := kernels.For(c.p, caps)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		want, err := kerneltest.Expect(c.p, c.args)
		if err != nil {
			t.Fatalf("%s: reference: %v", c.name, err)
		}
		for _, tmpl := range tmpls {
			l, cfg, err := kernels.Build(tmpl, c.p, caps)
			if err != nil {
				t.Errorf("%s: %s: %v", c.name, tmpl.Name, err)
				continue
			}
			got, err := kerneltest.Run(d, c.p, l, c.args)
			if err != nil {
				t.Errorf("%s: %s [%s]: %v", c.name, tmpl.Name, cfg.Key(), err)
				continue
			}
			for i := range want {
				if msg := compareSpecial(got[i], want[i], kerneltest.Tolerance(c.p.Outs[i].DType)); msg != "" {
					t.Errorf("%s: %s [%s]: result %d: %s", c.name, tmpl.Name, cfg.Key(), i, msg)
				}
			}
		}
	}
}
