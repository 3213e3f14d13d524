package interp

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/vkc-project/vkc/ir"
)

func TestSoftmaxRowsSumToOne(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, shape := range [][]int{{7}, {3, 5}, {2, 9, 4}} {
		for axis := -len(shape); axis < len(shape); axis++ {
			x := randT(rng, ir.T(ir.F32, shape...), 30)
			y := mustEval(t, ir.Softmax, ir.Attrs{"axis": axis}, x)
			ax, _ := ir.NormAxis(axis, len(shape))
			outer, m, inner := split(shape, ax)
			for o := 0; o < outer; o++ {
				for i := 0; i < inner; i++ {
					s := 0.0
					for k := 0; k < m; k++ {
						v := y.Float64((o*m+k)*inner + i)
						if v < 0 || v > 1 {
							t.Fatalf("%v axis %d: probability %v", shape, axis, v)
						}
						s += v
					}
					if math.Abs(s-1) > 1e-6 {
						t.Errorf("%v axis %d: fibre (%d,%d) sums to %v", shape, axis, o, i, s)
					}
				}
			}
		}
	}
}

func TestRopePreservesPairNormsAndStartsAtIdentity(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, mode := range []string{"half", "interleaved"} {
		for _, c := range []struct {
			shape []int
			seqAx int
			pos   int
			theta float64
		}{
			{[]int{5, 3, 6}, 0, 0, 10000},
			{[]int{3, 7, 10}, 1, 11, 500000},
			{[]int{4, 2}, 0, 0, 10},
		} {
			x := randT(rng, ir.T(ir.F32, c.shape...), 2)
			y := mustEval(t, ir.Rope, ir.Attrs{"mode": mode, "seq_axis": c.seqAx, "theta": c.theta}, x, i32(sh(), float64(c.pos)))
			d := c.shape[len(c.shape)-1]
			strides := ir.Shape(c.shape).Strides()
			for r := 0; r < x.NumElements()/d; r++ {
				s := (r * d / strides[c.seqAx]) % c.shape[c.seqAx]
				for i := 0; i < d/2; i++ {
					i0, i1 := r*d+i, r*d+i+d/2
					if mode == "interleaved" {
						i0, i1 = r*d+2*i, r*d+2*i+1
					}
					nx := math.Hypot(x.Float64(i0), x.Float64(i1))
					ny := math.Hypot(y.Float64(i0), y.Float64(i1))
					if math.Abs(nx-ny) > 1e-6*math.Max(1, nx) {
						t.Errorf("%s %v: row %d pair %d: norm %v became %v", mode, c.shape, r, i, nx, ny)
					}
					if c.pos == 0 && s == 0 && (y.Float64(i0) != x.Float64(i0) || y.Float64(i1) != x.Float64(i1)) {
						t.Errorf("%s %v: row %d at position 0 changed", mode, c.shape, r)
					}
				}
			}
		}
	}
}

// Rotating by pos and then by a further angle is rotating by the sum: rope(x, p) at sequence
// index s equals rope of the same row placed at index 0 with pos p+s.
func TestRopeShiftInvariance(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	x := randT(rng, ir.T(ir.F32, 6, 2, 8), 1)
	all := mustEval(t, ir.Rope, ir.Attrs{"theta": 333.0}, x, i32(sh(), 4))
	for s := 0; s < 6; s++ {
		row := ir.TensorFromFloat64s(ir.T(ir.F32, 1, 2, 8), x.Float64s()[s*16:(s+1)*16])
		one := mustEval(t, ir.Rope, ir.Attrs{"theta": 333.0}, row, i32(sh(), float64(4+s)))
		for i := 0; i < 16; i++ {
			if one.Float64(i) != all.Float64(s*16+i) {
				t.Fatalf("row %d element %d: %v alone, %v in the batch", s, i, one.Float64(i), all.Float64(s*16+i))
			}
		}
	}
}

func TestAttentionOneKeyIsV(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	q := randT(rng, ir.T(ir.F32, 3, 6, 5), 3)
	k := randT(rng, ir.T(ir.F32, 1, 2, 5), 3)
	v := randT(rng, ir.T(ir.F32, 1, 2, 4), 3)
	y := mustEval(t, ir.Attention, nil, q, k, v)
	for s := 0; s < 3; s++ {
		for h := 0; h < 6; h++ {
			for f := 0; f < 4; f++ {
				if got, want := y.Float64((s*6+h)*4+f), v.Float64((h/3)*4+f); got != want {
					t.Fatalf("query %d head %d feature %d: %v, want v = %v", s, h, f, got, want)
				}
			}
		}
	}
}

// Grouped-query attention equals attention over explicitly repeated kv heads, and a causal
// attention with kv_len equals the same over just the first kv_len keys.
func TestAttentionGQAAndKVLen(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const sq, hq, hkv, skv, d, dv = 3, 6, 2, 7, 5, 3
	q := randT(rng, ir.T(ir.F32, sq, hq, d), 2)
	k := randT(rng, ir.T(ir.F32, skv, hkv, d), 2)
	v := randT(rng, ir.T(ir.F32, skv, hkv, dv), 2)
	rep := func(x *ir.Tensor, f, rows int) *ir.Tensor {
		out := make([]float64, 0, rows*hq*f)
		for s := 0; s < rows; s++ {
			for h := 0; h < hq; h++ {
				kh := h / (hq / hkv)
				for i := 0; i < f; i++ {
					out = append(out, x.Float64((s*hkv+kh)*f+i))
				}
			}
		}
		return ir.TensorFromFloat64s(ir.T(ir.F32, rows, hq, f), out)
	}
	const kvLen = 5
	got := mustEval(t, ir.Attention, ir.Attrs{"causal": true}, q, k, v, i32(sh(), kvLen))
	trim := func(x *ir.Tensor, f int) *ir.Tensor {
		return ir.TensorFromFloat64s(ir.T(ir.F32, kvLen, hkv, f), x.Float64s()[:kvLen*hkv*f])
	}
	want := mustEval(t, ir.Attention, ir.Attrs{"causal": true}, q, rep(trim(k, d), d, kvLen), rep(trim(v, dv), dv, kvLen))
	if msg := closeTo(got, want, 1e-6); msg != "" {
		t.Error(msg)
	}
	// The last query at position kvLen-1 sees every key below kvLen, as a non-causal
	// single query does.
	last := ir.TensorFromFloat64s(ir.T(ir.F32, 1, hq, d), q.Float64s()[(sq-1)*hq*d:])
	one := mustEval(t, ir.Attention, nil, last, trim(k, d), trim(v, dv))
	if msg := closeTo(one, ir.TensorFromFloat64s(one.Type, got.Float64s()[(sq-1)*hq*dv:]), 1e-6); msg != "" {
		t.Error("last query:", msg)
	}
}

// conv1d against the sum formula over an explicitly zero-padded input.
func TestConv1dAgainstPaddedSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, c := range []struct{ n, cin, l, cout, k, stride, pad, dil, groups int }{
		{1, 3, 11, 5, 3, 1, 1, 1, 1},
		{2, 4, 9, 6, 3, 2, 1, 1, 2},
		{1, 6, 13, 3, 2, 3, 2, 2, 3},
		{0, 5, 7, 5, 3, 1, 0, 2, 5}, // depthwise, rank-2 input
	} {
		xs := []int{c.cin, c.l}
		if c.n > 0 {
			xs = append([]int{c.n}, xs...)
		}
		x := randT(rng, ir.T(ir.F32, xs...), 1)
		w := randT(rng, ir.T(ir.F32, c.cout, c.cin/c.groups, c.k), 1)
		b := randT(rng, ir.T(ir.F32, c.cout), 1)
		y := mustEval(t, ir.Conv1d, ir.Attrs{"stride": c.stride, "padding": c.pad, "dilation": c.dil, "groups": c.groups}, x, w, b)
		n := max(c.n, 1)
		lp := c.l + 2*c.pad
		padded := make([]float64, n*c.cin*lp)
		for i := 0; i < n*c.cin; i++ {
			for j := 0; j < c.l; j++ {
				padded[i*lp+c.pad+j] = x.Float64(i*c.l + j)
			}
		}
		lout := (lp-c.dil*(c.k-1)-1)/c.stride + 1
		want := make([]float64, 0, n*c.cout*lout)
		cpg, opg := c.cin/c.groups, c.cout/c.groups
		for bi := 0; bi < n; bi++ {
			for o := 0; o < c.cout; o++ {
				for tt := 0; tt < lout; tt++ {
					s := b.Float64(o)
					for ci := 0; ci < cpg; ci++ {
						for r := 0; r < c.k; r++ {
							s += w.Float64((o*cpg+ci)*c.k+r) * padded[(bi*c.cin+(o/opg)*cpg+ci)*lp+tt*c.stride+r*c.dil]
						}
					}
					want = append(want, s)
				}
			}
		}
		if msg := closeTo(y, ir.TensorFromFloat64s(y.Type, want), 1e-6); msg != "" {
			t.Errorf("%+v: %s", c, msg)
		}
	}
}

// Batched matmul with broadcast batch dims and transposes against a naive per-matrix product of
// explicitly transposed operands.
func TestMatmulBroadcastTransposed(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	const m, k, n = 3, 5, 4
	for _, ta := range []bool{false, true} {
		for _, tb := range []bool{false, true} {
			as := []int{2, 1, m, k}
			if ta {
				as = []int{2, 1, k, m}
			}
			bs := []int{3, k, n}
			if tb {
				bs = []int{3, n, k}
			}
			x := randT(rng, ir.T(ir.F32, as...), 1)
			y := randT(rng, ir.T(ir.F32, bs...), 1)
			got := mustEval(t, ir.Matmul, ir.Attrs{"ta": ta, "tb": tb}, x, y)
			var want []float64
			for b0 := 0; b0 < 2; b0++ {
				for b1 := 0; b1 < 3; b1++ {
					for i := 0; i < m; i++ {
						for j := 0; j < n; j++ {
							s := 0.0
							for l := 0; l < k; l++ {
								xi := b0*m*k + i*k + l
								if ta {
									xi = b0*m*k + l*m + i
								}
								yi := b1*k*n + l*n + j
								if tb {
									yi = b1*k*n + j*k + l
								}
								s += x.Float64(xi) * y.Float64(yi)
							}
							want = append(want, s)
						}
					}
				}
			}
			if msg := closeTo(got, ir.TensorFromFloat64s(ir.T(ir.F32, 2, 3, m, n), want), 1e-6); msg != "" {
				t.Errorf("ta=%v tb=%v: %s", ta, tb, msg)
			}
		}
	}
}

// Each node rounds to its dtype: in f16, (1 + 2⁻¹¹) − 1 is 0 because the sum is rounded to 1
// (a tie, to even) before the subtraction; in f32 it is 2⁻¹¹.
func TestF16RoundsAtEachNode(t *testing.T) {
	for _, c := range []struct {
		d    ir.DType
		eps  float64
		want float64
	}{
		{ir.F16, 1.0 / 2048, 0},
		{ir.F32, 1.0 / 2048, 1.0 / 2048},
		{ir.BF16, 1.0 / 256, 0},
		{ir.F16, 3.0 / 2048, 1.0 / 512}, // 1+3·2⁻¹¹ ties up to 1+2⁻⁹
	} {
		b := ir.NewBuilder("t")
		one, _ := b.Input("one", ir.T(c.d))
		e, _ := b.Input("eps", ir.T(c.d))
		y := b.MustOp(ir.Sub, nil, b.MustOp(ir.Add, nil, one, e), one)
		out, err := EvalValues(b.Function(), Env{Inputs: map[string]*ir.Tensor{"one": tn(ir.T(c.d), 1), "eps": tn(ir.T(c.d), c.eps)}}, y)
		if err != nil {
			t.Fatal(err)
		}
		if got := out[0].Float64(0); got != c.want {
			t.Errorf("%s: (1 + %v) - 1 = %v, want %v", c.d, c.eps, got, c.want)
		}
	}
	// A float64 result just above an f16 tie must round up, which rounding through f32 first
	// (to the tie, then to even) would get wrong.
	x := 1 + 1.0/2048 + 1.0/(1<<40)
	if got := rounder(ir.F16)(x); got != 1+1.0/1024 {
		t.Errorf("f16 rounding of 1+2⁻¹¹+2⁻⁴⁰ gives %v, want 1+2⁻¹⁰", got)
	}
	if got := rounder(ir.BF16)(1 + 1.0/256 + 1.0/(1<<40)); got != 1+1.0/128 {
		t.Errorf("bf16 rounding of 1+2⁻⁸+2⁻⁴⁰ gives %v, want 1+2⁻⁷", got)
	}
	if got := rounder(ir.F16)(-x); got != -(1 + 1.0/1024) {
		t.Errorf("f16 rounding of -(1+2⁻¹¹+2⁻⁴⁰) gives %v", got)
	}
	if got := rounder(ir.F16)(1e-9); got != 0 {
		t.Errorf("f16 rounding of 1e-9 gives %v, want 0", got)
	}
	// An f16 softmax over equal large values is exact, and an f16 exp overflows to +Inf.
	y := mustEval(t, ir.Exp, nil, tn(ir.T(ir.F16, 2), 11, 12))
	if !math.IsInf(y.Float64(1), 1) || y.Float64(0) != 59872 {
		t.Errorf("f16 exp(11), exp(12) = %v, want 59872 and +Inf", y.Float64s())
	}
}

// Products large enough to be split across goroutines give exactly the sequential sums.
func TestParallelProductsAreExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	x := randT(rng, ir.T(ir.F32, 8, 300), 1)
	w := randT(rng, ir.T(ir.F32, 513, 300), 1)
	want := make([]float64, 0, 8*513)
	for r := 0; r < 8; r++ {
		for o := 0; o < 513; o++ {
			s := 0.0
			for i := 0; i < 300; i++ {
				s += x.Float64(r*300+i) * w.Float64(o*300+i)
			}
			want = append(want, s)
		}
	}
	wantT := ir.TensorFromFloat64s(ir.T(ir.F32, 8, 513), want)
	if msg := closeTo(mustEval(t, ir.Linear, nil, x, w), wantT, 0); msg != "" {
		t.Error("linear:", msg)
	}
	if msg := closeTo(mustEval(t, ir.Matmul, ir.Attrs{"tb": true}, x, w), wantT, 0); msg != "" {
		t.Error("matmul:", msg)
	}
}

// conv2d over one row (h = kh = 1) is conv1d with the same stride, padding, dilation and
// groups; conv2d and the pools in nhwc are their nchw forms between transposes.
func TestConv2dAgainstConv1dAndLayouts(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for _, c := range []struct{ n, cin, l, cout, k, stride, pad, dil, groups int }{
		{1, 3, 11, 5, 3, 1, 1, 1, 1},
		{2, 4, 9, 6, 3, 2, 1, 1, 2},
		{1, 6, 13, 6, 2, 3, 2, 2, 6}, // depthwise
	} {
		x := randT(rng, ir.T(ir.F32, c.n, c.cin, c.l), 1)
		w := randT(rng, ir.T(ir.F32, c.cout, c.cin/c.groups, c.k), 1)
		b := randT(rng, ir.T(ir.F32, c.cout), 1)
		want := mustEval(t, ir.Conv1d, ir.Attrs{"stride": c.stride, "padding": c.pad, "dilation": c.dil, "groups": c.groups}, x, w, b)
		x4 := &ir.Tensor{Type: ir.T(ir.F32, c.n, c.cin, 1, c.l), Data: x.Data}
		w4 := &ir.Tensor{Type: ir.T(ir.F32, c.cout, c.cin/c.groups, 1, c.k), Data: w.Data}
		attrs := ir.Attrs{"strides": []int{1, c.stride}, "pads": []int{0, c.pad, 0, c.pad}, "dilations": []int{1, c.dil}, "groups": c.groups}
		got := mustEval(t, ir.Conv2d, attrs, x4, w4, b)
		if msg := closeTo(&ir.Tensor{Type: want.Type, Data: got.Data}, want, 1e-12); msg != "" {
			t.Errorf("conv2d %+v against conv1d: %s", c, msg)
		}
	}
	toNHWC, toNCHW := ir.Attrs{"perm": []int{0, 2, 3, 1}}, ir.Attrs{"perm": []int{0, 3, 1, 2}}
	x := randT(rng, ir.T(ir.F32, 2, 6, 7, 9), 1)
	xh := mustEval(t, ir.Transpose, toNHWC, x)
	w := randT(rng, ir.T(ir.F32, 4, 3, 3, 2), 1)
	for _, c := range []struct {
		op    ir.Op
		attrs ir.Attrs
		args  []*ir.Tensor
	}{
		{ir.Conv2d, ir.Attrs{"groups": 2, "strides": []int{2, 1}, "pads": []int{1, 0, 2, 1}, "dilations": []int{1, 2}}, []*ir.Tensor{w}},
		{ir.MaxPool2d, ir.Attrs{"kernel": []int{3, 2}, "strides": []int{2, 2}, "pads": []int{1, 1, 0, 1}, "ceil_mode": true}, nil},
		{ir.AvgPool2d, ir.Attrs{"kernel": []int{3, 3}, "strides": []int{2, 3}, "pads": []int{1, 2, 1, 0}, "count_include_pad": true}, nil},
		{ir.AvgPool2d, ir.Attrs{"kernel": []int{2, 3}, "dilations": []int{2, 1}, "pads": []int{1, 1, 1, 1}}, nil},
		{ir.GlobalAvgPool, nil, nil},
	} {
		want := mustEval(t, c.op, c.attrs, append([]*ir.Tensor{x}, c.args...)...)
		ha := c.attrs.Clone()
		ha["layout"] = "nhwc"
		got := mustEval(t, ir.Transpose, toNCHW, mustEval(t, c.op, ha, append([]*ir.Tensor{xh}, c.args...)...))
		if msg := closeTo(got, want, 1e-12); msg != "" {
			t.Errorf("%s nhwc against nchw: %s", c.op, msg)
		}
	}
}
