package interp

import (
	"fmt"
	"math"
	"runtime"
	"sort"
	"sync"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/quant"
)

// impl evaluates one node from its evaluated arguments. The node has passed type inference, so
// impls may rely on argument ranks and dtypes; they check only what depends on run-time values.
type impl func(c *ctx, n *ir.Node, a []*val) (*val, error)

// impls holds the reference implementation of every single-output op, multiImpls that of ops
// with several outputs (fused ops that also yield an intermediate, such as a residual sum next
// to its normalisation; the base set has none yet). TestEveryOpImplemented fails for an op of
// the table that is in neither.
var (
	impls      = map[ir.Op]impl{}
	multiImpls = map[ir.Op]func(c *ctx, n *ir.Node, a []*val) ([]*val, error){}
)

func init() {
	impls[ir.Input] = func(c *ctx, n *ir.Node, _ []*val) (*val, error) {
		if c.fn.IsLength(n) && c.env.Inputs[n.Name] == nil {
			// The capacity graph of a run-time-bounded function, evaluated as written: n = Max.
			return fromTensor(ir.TensorFromFloat64s(n.Type(), []float64{float64(c.fn.Length.Max)})), nil
		}
		return source(n, "input", c.env.Inputs)
	}
	impls[ir.Param] = func(c *ctx, n *ir.Node, _ []*val) (*val, error) {
		if c.env.Cache == nil {
			return source(n, "parameter", c.env.Params)
		}
		t, err := sourceTensor(n, "parameter", c.env.Params)
		if err != nil {
			return nil, err
		}
		return c.env.Cache.get(t), nil
	}
	impls[ir.State] = func(c *ctx, n *ir.Node, _ []*val) (*val, error) { return source(n, "state", c.env.State) }
	impls[ir.Const] = func(c *ctx, n *ir.Node, _ []*val) (*val, error) {
		if n.Value == nil || !n.Value.Type.Equal(n.Type()) || len(n.Value.Data) != n.Type().Bytes() {
			return nil, fmt.Errorf("constant does not match its type %s", n.Type())
		}
		return fromTensor(n.Value), nil
	}

	// Float unary ops.
	for op, f := range map[ir.Op]func(float64) float64{
		ir.Exp:   math.Exp,
		ir.Log:   math.Log,
		ir.Sqrt:  math.Sqrt,
		ir.Rsqrt: func(x float64) float64 { return 1 / math.Sqrt(x) },
		ir.Recip: func(x float64) float64 { return 1 / x },
		ir.Sin:   math.Sin,
		ir.Cos:   math.Cos,
		ir.Tanh:  math.Tanh,
		ir.Erf:   math.Erf,
		ir.Sigmoid: func(x float64) float64 {
			return 1 / (1 + math.Exp(-x))
		},
		ir.Silu: func(x float64) float64 { return x / (1 + math.Exp(-x)) },
		// gelu, erf form: x·Φ(x) = 0.5·x·(1 + erf(x/√2)) (torch's gelu, approximate="none").
		ir.Gelu: func(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) },
		// gelu, tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) (torch's
		// approximate="tanh", HF's gelu_new / gelu_pytorch_tanh).
		ir.GeluTanh: func(x float64) float64 {
			return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
		},
	} {
		impls[op] = unary(f, nil)
	}
	// Ops that also take i32 (wrapping like two's complement 32-bit integers).
	impls[ir.Neg] = unary(func(x float64) float64 { return -x }, func(x int64) int64 { return -x })
	impls[ir.Abs] = unary(math.Abs, func(x int64) int64 {
		if x < 0 {
			return -x
		}
		return x
	})
	impls[ir.Relu] = unary(func(x float64) float64 {
		if x > 0 {
			return x
		}
		if math.IsNaN(x) {
			return x
		}
		return 0
	}, func(x int64) int64 { return max(x, 0) })
	// cast: float → int truncates toward zero and saturates (NaN → 0); int → int reinterprets
	// the 32 bits (i32 -1 → u32 4294967295, as numpy, torch and SPIR-V do); → float rounds to
	// nearest even; → bool is x ≠ 0; bool → anything is 0 or 1.
	impls[ir.Cast] = func(c *ctx, n *ir.Node, a []*val) (*val, error) {
		t := n.Type()
		d := append([]float64(nil), a[0].d...)
		if a[0].t.DType.IsInt() && t.DType.IsInt() {
			for i, x := range d {
				d[i] = wrapInt(t.DType, int64(x))
			}
		}
		return newVal(t, d), nil
	}

	impls[ir.Add] = binary(func(x, y float64) float64 { return x + y }, func(x, y int64) (int64, error) { return x + y, nil })
	impls[ir.Sub] = binary(func(x, y float64) float64 { return x - y }, func(x, y int64) (int64, error) { return x - y, nil })
	impls[ir.Mul] = binary(func(x, y float64) float64 { return x * y }, func(x, y int64) (int64, error) { return x * y, nil })
	impls[ir.Div] = binary(func(x, y float64) float64 { return x / y }, func(x, y int64) (int64, error) {
		if y == 0 {
			return 0, fmt.Errorf("integer division by zero")
		}
		return x / y, nil // truncates toward zero
	})
	impls[ir.Maximum] = binary(math.Max, func(x, y int64) (int64, error) { return max(x, y), nil })
	impls[ir.Minimum] = binary(math.Min, func(x, y int64) (int64, error) { return min(x, y), nil })
	impls[ir.Pow] = binary(math.Pow, intPow)

	for op, f := range map[ir.Op]func(x, y float64) bool{
		ir.Eq: func(x, y float64) bool { return x == y },
		ir.Ne: func(x, y float64) bool { return x != y },
		ir.Lt: func(x, y float64) bool { return x < y },
		ir.Le: func(x, y float64) bool { return x <= y },
		ir.Gt: func(x, y float64) bool { return x > y },
		ir.Ge: func(x, y float64) bool { return x >= y },
	} {
		impls[op] = compare(f)
	}
	impls[ir.Where] = func(c *ctx, n *ir.Node, a []*val) (*val, error) {
		t := n.Type()
		ic, ix, iy := bcastIndex(t.Shape, a[0].t.Shape), bcastIndex(t.Shape, a[1].t.Shape), bcastIndex(t.Shape, a[2].t.Shape)
		d := make([]float64, t.Shape.NumElements())
		for i := range d {
			if a[0].d[ic[i]] != 0 {
				d[i] = a[1].d[ix[i]]
			} else {
				d[i] = a[2].d[iy[i]]
			}
		}
		return newVal(t, d), nil
	}

	impls[ir.Sum] = reduce(func(x []float64) float64 {
		s := 0.0
		for _, v := range x {
			s += v
		}
		return s
	})
	impls[ir.Mean] = reduce(func(x []float64) float64 {
		s := 0.0
		for _, v := range x {
			s += v
		}
		return s / float64(len(x))
	})
	// max and min propagate NaN (as torch.max does).
	impls[ir.Max] = reduce(func(x []float64) float64 {
		m := x[0]
		for _, v := range x[1:] {
			if v > m || math.IsNaN(v) && !math.IsNaN(m) {
				m = v
			}
		}
		return m
	})
	impls[ir.Min] = reduce(func(x []float64) float64 {
		m := x[0]
		for _, v := range x[1:] {
			if v < m || math.IsNaN(v) && !math.IsNaN(m) {
				m = v
			}
		}
		return m
	})
	// argmax: the first index of the largest value; a NaN counts as larger than everything
	// (the first NaN wins), as in torch.argmax.
	impls[ir.Argmax] = reduce(func(x []float64) float64 {
		best := 0
		for i, v := range x {
			if math.IsNaN(x[best]) {
				break
			}
			if v > x[best] || math.IsNaN(v) {
				best = i
			}
		}
		return float64(best)
	})

	impls[ir.Softmax] = evalSoftmax
	impls[ir.RMSNorm] = evalRMSNorm
	impls[ir.LayerNorm] = evalLayerNorm
	impls[ir.Matmul] = evalMatmul
	impls[ir.Linear] = evalLinear
	impls[ir.Reshape] = func(c *ctx, n *ir.Node, a []*val) (*val, error) {
		return &val{t: n.Type(), d: a[0].d}, nil
	}
	impls[ir.Transpose] = evalTranspose
	impls[ir.Slice] = evalSlice
	impls[ir.Concat] = evalConcat
	impls[ir.Reverse] = func(c *ctx, n *ir.Node, a []*val) (*val, error) {
		x := a[0]
		ax, err := ir.NormAxis(n.Attrs.Int("axis", 0), x.t.Shape.Rank())
		if err != nil {
			return nil, err
		}
		outer, m, inner := split(x.t.Shape, ax)
		d := make([]float64, len(x.d))
		for o := 0; o < outer; o++ {
			for k := 0; k < m; k++ {
				copy(d[(o*m+k)*inner:(o*m+k+1)*inner], x.d[(o*m+m-1-k)*inner:(o*m+m-k)*inner])
			}
		}
		return &val{t: n.Type(), d: d}, nil
	}
	impls[ir.Expand] = func(c *ctx, n *ir.Node, a []*val) (*val, error) {
		t := n.Type()
		idx := bcastIndex(t.Shape, a[0].t.Shape)
		d := make([]float64, len(idx))
		for i, j := range idx {
			d[i] = a[0].d[j]
		}
		return &val{t: t, d: d}, nil
	}
	impls[ir.Embedding] = evalEmbedding
	impls[ir.ArgTopK] = evalArgTopK
	impls[ir.TakeAlongAxis] = evalTakeAlongAxis
	impls[ir.Rope] = evalRope
	impls[ir.CacheWrite] = evalCacheWrite
	impls[ir.Attention] = evalAttention
	impls[ir.Conv1d] = evalConv1d
}

func source(n *ir.Node, kind string, m map[string]*ir.Tensor) (*val, error) {
	t, err := sourceTensor(n, kind, m)
	if err != nil {
		return nil, err
	}
	return fromTensor(t), nil
}

// sourceTensor is source node n's tensor from m, checked against n's type.
func sourceTensor(n *ir.Node, kind string, m map[string]*ir.Tensor) (*ir.Tensor, error) {
	t, ok := m[n.Name]
	if !ok || t == nil {
		return nil, fmt.Errorf("%s %q (%s) is not provided", kind, n.Name, n.Type())
	}
	if !t.Type.Equal(n.Type()) || len(t.Data) != t.Type.Bytes() {
		return nil, fmt.Errorf("%s %q is %s, want %s", kind, n.Name, t.Type, n.Type())
	}
	return t, nil
}

// wrapInt wraps an exact integer result to the 32-bit dtype d (two's complement for i32,
// modulo 2³² for u32).
func wrapInt(d ir.DType, x int64) float64 {
	if d == ir.U32 {
		return float64(uint32(x))
	}
	return float64(int32(x))
}

func unary(f func(float64) float64, fi func(int64) int64) impl {
	return func(c *ctx, n *ir.Node, a []*val) (*val, error) {
		t := n.Type()
		d := make([]float64, len(a[0].d))
		if t.DType.IsInt() {
			if fi == nil {
				return nil, fmt.Errorf("%s is not defined on %s", n.Op, t)
			}
			for i, x := range a[0].d {
				d[i] = wrapInt(t.DType, fi(int64(x)))
			}
			return &val{t: t, d: d}, nil
		}
		for i, x := range a[0].d {
			d[i] = f(x)
		}
		return newVal(t, d), nil
	}
}

func binary(f func(x, y float64) float64, fi func(x, y int64) (int64, error)) impl {
	return func(c *ctx, n *ir.Node, a []*val) (*val, error) {
		t := n.Type()
		ix, iy := bcastIndex(t.Shape, a[0].t.Shape), bcastIndex(t.Shape, a[1].t.Shape)
		d := make([]float64, len(ix))
		if t.DType.IsInt() {
			for i := range d {
				r, err := fi(int64(a[0].d[ix[i]]), int64(a[1].d[iy[i]]))
				if err != nil {
					return nil, fmt.Errorf("element %d: %w", i, err)
				}
				d[i] = wrapInt(t.DType, r)
			}
			return &val{t: t, d: d}, nil
		}
		for i := range d {
			d[i] = f(a[0].d[ix[i]], a[1].d[iy[i]])
		}
		return newVal(t, d), nil
	}
}

// intPow is x**y on integers, wrapping on overflow; a negative exponent gives the truncated
// reciprocal (1 for x = 1, ±1 for x = -1, 0 otherwise; an error for x = 0).
func intPow(x, y int64) (int64, error) {
	if y < 0 {
		switch x {
		case 0:
			return 0, fmt.Errorf("integer division by zero (0 to the power %d)", y)
		case 1:
			return 1, nil
		case -1:
			if y%2 == 0 {
				return 1, nil
			}
			return -1, nil
		}
		return 0, nil
	}
	r := int64(1)
	for ; y > 0; y >>= 1 {
		if y&1 == 1 {
			r = int64(int32(r * x))
		}
		x = int64(int32(x * x))
	}
	return r, nil
}

func compare(f func(x, y float64) bool) impl {
	return func(c *ctx, n *ir.Node, a []*val) (*val, error) {
		t := n.Type()
		ix, iy := bcastIndex(t.Shape, a[0].t.Shape), bcastIndex(t.Shape, a[1].t.Shape)
		d := make([]float64, len(ix))
		for i := range d {
			if f(a[0].d[ix[i]], a[1].d[iy[i]]) {
				d[i] = 1
			}
		}
		return &val{t: t, d: d}, nil
	}
}

// reduce applies f to every fibre along the node's axis. Integer sums wrap to 32 bits; an
// integer mean truncates toward zero.
func reduce(f func([]float64) float64) impl {
	return func(c *ctx, n *ir.Node, a []*val) (*val, error) {
		x := a[0]
		ax, err := ir.NormAxis(n.Attrs.Int("axis", -1), x.t.Shape.Rank())
		if err != nil {
			return nil, err
		}
		outer, m, inner := split(x.t.Shape, ax)
		t := n.Type()
		d := make([]float64, outer*inner)
		buf := make([]float64, m)
		for o := 0; o < outer; o++ {
			for i := 0; i < inner; i++ {
				for k := 0; k < m; k++ {
					buf[k] = x.d[(o*m+k)*inner+i]
				}
				r := f(buf)
				if t.DType.IsInt() && n.Op != ir.Argmax {
					r = wrapInt(t.DType, int64(r))
				}
				d[o*inner+i] = r
			}
		}
		return newVal(t, d), nil
	}
}

// evalSoftmax: exp(x - max) / Σ exp(x - max) along the axis.
func evalSoftmax(c *ctx, n *ir.Node, a []*val) (*val, error) {
	x := a[0]
	ax, err := ir.NormAxis(n.Attrs.Int("axis", -1), x.t.Shape.Rank())
	if err != nil {
		return nil, err
	}
	outer, m, inner := split(x.t.Shape, ax)
	d := make([]float64, len(x.d))
	for o := 0; o < outer; o++ {
		for i := 0; i < inner; i++ {
			at := func(k int) int { return (o*m+k)*inner + i }
			mx := math.Inf(-1)
			for k := 0; k < m; k++ {
				mx = math.Max(mx, x.d[at(k)])
			}
			s := 0.0
			for k := 0; k < m; k++ {
				e := math.Exp(x.d[at(k)] - mx)
				d[at(k)] = e
				s += e
			}
			for k := 0; k < m; k++ {
				d[at(k)] /= s
			}
		}
	}
	return newVal(n.Type(), d), nil
}

// evalRMSNorm: x / sqrt(mean(x²) + eps) · w over the last axis.
func evalRMSNorm(c *ctx, n *ir.Node, a []*val) (*val, error) {
	x, w := a[0], a[1]
	eps := n.Attrs.Float("eps", 1e-5)
	dim := x.t.Shape[x.t.Shape.Rank()-1]
	d := make([]float64, len(x.d))
	for r := 0; r < len(x.d)/dim; r++ {
		row := x.d[r*dim : (r+1)*dim]
		ss := 0.0
		for _, v := range row {
			ss += v * v
		}
		inv := 1 / math.Sqrt(ss/float64(dim)+eps)
		for i, v := range row {
			d[r*dim+i] = v * inv * w.d[i]
		}
	}
	return newVal(n.Type(), d), nil
}

// evalLayerNorm: (x - mean) / sqrt(var + eps) · w + b over the last axis, var the biased
// (population) variance, as torch.nn.LayerNorm.
func evalLayerNorm(c *ctx, n *ir.Node, a []*val) (*val, error) {
	x, w, b := a[0], a[1], a[2]
	eps := n.Attrs.Float("eps", 1e-5)
	dim := x.t.Shape[x.t.Shape.Rank()-1]
	d := make([]float64, len(x.d))
	for r := 0; r < len(x.d)/dim; r++ {
		row := x.d[r*dim : (r+1)*dim]
		mu := 0.0
		for _, v := range row {
			mu += v
		}
		mu /= float64(dim)
		vr := 0.0
		for _, v := range row {
			vr += (v - mu) * (v - mu)
		}
		vr /= float64(dim)
		inv := 1 / math.Sqrt(vr+eps)
		for i, v := range row {
			d[r*dim+i] = (v-mu)*inv*w.d[i] + b.d[i]
		}
	}
	return newVal(n.Type(), d), nil
}

// matmulInto computes the batched product of x [..., m, k] and y [..., k, n] (after the optional
// transposes of their last two axes) with broadcast batch dims into a new slice.
func matmulInto(out ir.Shape, x, y *val, ta, tb bool) []float64 {
	rx, ry, r := x.t.Shape.Rank(), y.t.Shape.Rank(), len(out)
	m, nn := out[r-2], out[r-1]
	k := x.t.Shape[rx-1]
	if ta {
		k = x.t.Shape[rx-2]
	}
	batch := out[:r-2]
	// Map each output batch index to the batch index of x and y by broadcasting a
	// one-element-per-matrix shape.
	bx := bcastIndex(batch, x.t.Shape[:rx-2])
	by := bcastIndex(batch, y.t.Shape[:ry-2])
	xs, ys := x.t.Shape[rx-2]*x.t.Shape[rx-1], y.t.Shape[ry-2]*y.t.Shape[ry-1]
	xr, yr := x.t.Shape[rx-1], y.t.Shape[ry-1] // row lengths as stored
	d := make([]float64, out.NumElements())
	parallelFor(len(bx)*m, len(bx)*m*nn*k, func(lo, hi int) {
		for bi := lo; bi < hi; bi++ {
			b, i := bi/m, bi%m
			xo, yo, oo := bx[b]*xs, by[b]*ys, b*m*nn
			for j := 0; j < nn; j++ {
				s := 0.0
				for l := 0; l < k; l++ {
					var xv, yv float64
					if ta {
						xv = x.d[xo+l*xr+i]
					} else {
						xv = x.d[xo+i*xr+l]
					}
					if tb {
						yv = y.d[yo+j*yr+l]
					} else {
						yv = y.d[yo+l*yr+j]
					}
					s += xv * yv
				}
				d[oo+i*nn+j] = s
			}
		}
	})
	return d
}

// parallelFor runs f over [0, n) split into contiguous chunks, one per CPU, when the work
// (a rough count of multiply-adds) is large enough to be worth it. Each output element is still
// computed by one goroutine in a fixed order, so results do not depend on the split.
func parallelFor(n, work int, f func(lo, hi int)) {
	p := runtime.GOMAXPROCS(0)
	if p <= 1 || work < 1<<20 || n < 2 {
		f(0, n)
		return
	}
	p = min(p, n)
	var wg sync.WaitGroup
	for c := 0; c < p; c++ {
		lo, hi := n*c/p, n*(c+1)/p
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(lo, hi)
		}()
	}
	wg.Wait()
}

func evalMatmul(c *ctx, n *ir.Node, a []*val) (*val, error) {
	t := n.Type()
	return newVal(t, matmulInto(t.Shape, a[0], a[1], n.Attrs.Bool("ta", false), n.Attrs.Bool("tb", false))), nil
}

// evalLinear: x·Wᵀ + b with W [out, in]. A block-quantized W is read from its blocks four rows
// at a time (val.lazy), each row dequantized once for all rows of x.
func evalLinear(c *ctx, n *ir.Node, a []*val) (*val, error) {
	x, w := a[0], a[1]
	t := n.Type()
	in, out := w.t.Shape[1], w.t.Shape[0]
	rows := len(x.d) / in
	d := make([]float64, rows*out)
	parallelFor(out, rows*out*in, func(lo, hi int) {
		var buf []float64
		if w.lazy() {
			buf = make([]float64, 4*in)
		}
		for o := lo; o < hi; o += 4 {
			k := min(4, hi-o)
			var wr []float64
			if buf != nil {
				wr = buf[:k*in]
				w.raw.Float64sAt(wr, o*in)
			} else {
				wr = w.d[o*in : (o+k)*in]
			}
			for r := 0; r < rows; r++ {
				xr, dr := x.d[r*in:(r+1)*in], d[r*out+o:r*out+o+k]
				if k == 4 {
					// Four independent sums share each x load, so the loop is not bound by
					// one chain of dependent adds. Each sum still runs in input order.
					w0, w1, w2, w3 := wr[:in], wr[in:2*in], wr[2*in:3*in], wr[3*in:]
					var s0, s1, s2, s3 float64
					for i, xv := range xr {
						s0 += xv * w0[i]
						s1 += xv * w1[i]
						s2 += xv * w2[i]
						s3 += xv * w3[i]
					}
					dr[0], dr[1], dr[2], dr[3] = s0, s1, s2, s3
				} else {
					for j := range k {
						wj, s := wr[j*in:(j+1)*in], 0.0
						for i, xv := range xr {
							s += xv * wj[i]
						}
						dr[j] = s
					}
				}
				if len(a) == 3 {
					for j := range k {
						dr[j] += a[2].d[o+j]
					}
				}
			}
		}
	})
	return newVal(t, d), nil
}

func evalTranspose(c *ctx, n *ir.Node, a []*val) (*val, error) {
	x, perm, t := a[0], n.Attrs.Ints("perm"), n.Type()
	inStr := x.t.Shape.Strides()
	r := len(perm)
	d := make([]float64, len(x.d))
	coord := make([]int, r)
	for i := range d {
		// coord is the output coordinate of element i; output axis k reads input axis perm[k].
		p := 0
		for k := 0; k < r; k++ {
			p += coord[k] * inStr[perm[k]]
		}
		d[i] = x.d[p]
		for k := r - 1; k >= 0; k-- {
			coord[k]++
			if coord[k] < t.Shape[k] {
				break
			}
			coord[k] = 0
		}
	}
	return &val{t: t, d: d}, nil
}

// evalSlice: start:end:step along one axis, negative bounds counting from the end and bounds
// clamped to the dimension (Python semantics).
func evalSlice(c *ctx, n *ir.Node, a []*val) (*val, error) {
	x, t := a[0], n.Type()
	ax, err := ir.NormAxis(n.Attrs.Int("axis", 0), x.t.Shape.Rank())
	if err != nil {
		return nil, err
	}
	outer, m, inner := split(x.t.Shape, ax)
	start, _ := ir.ClampSlice(m, n.Attrs.Int("start", 0), n.Attrs.Int("end", 0))
	step := n.Attrs.Int("step", 1)
	cnt := t.Shape[ax]
	d := make([]float64, 0, t.Shape.NumElements())
	for o := 0; o < outer; o++ {
		for k := 0; k < cnt; k++ {
			src := (o*m + start + k*step) * inner
			d = append(d, x.d[src:src+inner]...)
		}
	}
	return &val{t: t, d: d}, nil
}

func evalConcat(c *ctx, n *ir.Node, a []*val) (*val, error) {
	t := n.Type()
	ax, err := ir.NormAxis(n.Attrs.Int("axis", 0), t.Shape.Rank())
	if err != nil {
		return nil, err
	}
	outer, _, _ := split(t.Shape, ax)
	if f := t.DType.Format(); t.DType.Quantized() {
		// The blocks themselves, joined alike: each chunk of m·inner elements is a whole number
		// of blocks (blocks tile the last axis of every part), so the result is ggml's blocks of
		// the joined tensor and can be stored as a weight. Its elements are converted when an op
		// needs them (val.lazy).
		raw := make([]byte, 0, t.Bytes())
		for o := 0; o < outer; o++ {
			for _, x := range a {
				_, m, inner := split(x.t.Shape, ax)
				nb := m * inner / f.BlockElems * f.BlockBytes
				raw = append(raw, x.raw.Data[o*nb:(o+1)*nb]...)
			}
		}
		return &val{t: t, raw: &ir.Tensor{Type: t, Data: raw}}, nil
	}
	d := make([]float64, 0, t.Shape.NumElements())
	for o := 0; o < outer; o++ {
		for _, x := range a {
			_, m, inner := split(x.t.Shape, ax)
			d = append(d, x.d[o*m*inner:(o+1)*m*inner]...)
		}
	}
	return &val{t: t, d: d}, nil
}

// evalEmbedding gathers rows of the table; an id outside 0..rows-1 is an error.
func evalEmbedding(c *ctx, n *ir.Node, a []*val) (*val, error) {
	tab, ids := a[0], a[1]
	rows, dim := tab.t.Shape[0], tab.t.Shape[1]
	d := make([]float64, 0, len(ids.d)*dim)
	for i, id := range ids.d {
		if id < 0 || id >= float64(rows) {
			return nil, fmt.Errorf("id %d at index %d is outside the table of %d rows", int64(id), i, rows)
		}
		r := int(id)
		if tab.lazy() {
			d = d[:len(d)+dim]
			tab.raw.Float64sAt(d[len(d)-dim:], r*dim)
			continue
		}
		d = append(d, tab.d[r*dim:(r+1)*dim]...)
	}
	return newVal(n.Type(), d), nil
}

// evalArgTopK ranks each row of the last axis: the indices of its k largest elements, largest
// first, equal values in increasing index order, NaN above every number (the first NaN first, as
// argmax picks it). A stable sort of the indices by value is that order.
func evalArgTopK(c *ctx, n *ir.Node, a []*val) (*val, error) {
	x := a[0]
	row := x.t.Shape[x.t.Shape.Rank()-1]
	k := n.Attrs.Int("k", 0)
	d := make([]float64, 0, len(x.d)/row*k)
	idx := make([]int, row)
	for r := 0; r < len(x.d)/row; r++ {
		v := x.d[r*row : (r+1)*row]
		for i := range idx {
			idx[i] = i
		}
		sort.SliceStable(idx, func(i, j int) bool {
			a, b := v[idx[i]], v[idx[j]]
			if math.IsNaN(a) || math.IsNaN(b) {
				return math.IsNaN(a) && !math.IsNaN(b)
			}
			return a > b
		})
		for _, i := range idx[:k] {
			d = append(d, float64(i))
		}
	}
	return newVal(n.Type(), d), nil
}

// evalTakeAlongAxis gathers out[..., j] = x[..., idx[..., j]]; an index outside the row is an
// error naming it.
func evalTakeAlongAxis(c *ctx, n *ir.Node, a []*val) (*val, error) {
	x, idx := a[0], a[1]
	row := x.t.Shape[x.t.Shape.Rank()-1]
	k := idx.t.Shape[idx.t.Shape.Rank()-1]
	d := make([]float64, len(idx.d))
	for i, id := range idx.d {
		if id < 0 || id >= float64(row) {
			return nil, fmt.Errorf("index %d at %d is outside the axis of %d", int64(id), i, row)
		}
		d[i] = x.d[(i/k)*row+int(id)]
	}
	return &val{t: n.Type(), d: d}, nil
}

// evalRope rotates pairs of the last axis (size d) of x by angle p·theta^(-2i/d), i = 0..d/2-1,
// where p = pos + s and s is the element's index along seq_axis.
//   - mode "half" (rotate-half, Llama/HF): pair i is (i, i + d/2);
//     out[i] = x[i]·cos − x[i+d/2]·sin, out[i+d/2] = x[i+d/2]·cos + x[i]·sin.
//   - mode "interleaved" (GPT-J, Meta's original Llama): pair i is (2i, 2i+1), same formulas.
//
// A negative pos is an error. Angles are computed in float64; transformers computes them in
// f32, so at position p the two differ by about p·2⁻²⁴ radians (1e-6 at p = 24, 1e-4 at 2048).
func evalRope(c *ctx, n *ir.Node, a []*val) (*val, error) {
	x, pos := a[0], scalarInt(a[1])
	if pos < 0 {
		return nil, fmt.Errorf("pos %d is negative", pos)
	}
	theta := n.Attrs.Float("theta", 10000)
	half := n.Attrs.String("mode", "half") == "half"
	sh := x.t.Shape
	ax, err := ir.NormAxis(n.Attrs.Int("seq_axis", 0), sh.Rank())
	if err != nil {
		return nil, err
	}
	dim := sh[sh.Rank()-1]
	h := dim / 2
	invFreq := make([]float64, h)
	for i := range invFreq {
		invFreq[i] = ropeScaled(n.Attrs, math.Pow(theta, -2*float64(i)/float64(dim)))
	}
	strides := sh.Strides()
	d := make([]float64, len(x.d))
	for r := 0; r < len(x.d)/dim; r++ {
		base := r * dim
		s := (base / strides[ax]) % sh[ax]
		p := float64(pos + s)
		for i := 0; i < h; i++ {
			i0, i1 := base+i, base+i+h
			if !half {
				i0, i1 = base+2*i, base+2*i+1
			}
			sin, cos := math.Sincos(p * invFreq[i])
			x0, x1 := x.d[i0], x.d[i1]
			d[i0] = x0*cos - x1*sin
			d[i1] = x1*cos + x0*sin
		}
	}
	return newVal(n.Type(), d), nil
}

// ropeScaled applies rope's frequency scaling (attribute scaling) to one inverse frequency inv,
// as transformers does: linear divides every frequency by factor; llama3 keeps the frequencies
// whose wavelength 2π/inv is below original_ctx/high_freq_factor, divides those above
// original_ctx/low_freq_factor by factor, and blends the two in between with the smooth factor
// (original_ctx/wavelength − low_freq_factor)/(high_freq_factor − low_freq_factor). The
// attributes were checked when the graph was built.
func ropeScaled(a ir.Attrs, inv float64) float64 {
	factor := a.Float("factor", 1)
	switch a.String("scaling", "none") {
	case "linear":
		return inv / factor
	case "llama3":
		ctx := float64(a.Int("original_ctx", 8192))
		lo, hi := a.Float("low_freq_factor", 1), a.Float("high_freq_factor", 4)
		wavelen := 2 * math.Pi / inv
		if wavelen < ctx/hi {
			return inv
		}
		if wavelen > ctx/lo {
			return inv / factor
		}
		smooth := (ctx/wavelen - lo) / (hi - lo)
		return (1-smooth)*inv/factor + smooth*inv
	}
	return inv
}

// evalCacheWrite returns the state with rows pos..pos+len(x)-1 of axis 0 replaced by x; rows
// outside the cache are an error. The rows are converted to the state's dtype: rounded to
// nearest even for a float state, and for a block-quantized one (q8_0, q4_0) quantized block by
// block from their float32 values by ggml's reference quantizer (quant.Format.QuantizeBlock),
// the state then holding what ggml's dequantizer gives for those blocks.
func evalCacheWrite(c *ctx, n *ir.Node, a []*val) (*val, error) {
	st, x, pos := a[0], a[1], scalarInt(a[2])
	rows, k := st.t.Shape[0], x.t.Shape[0]
	if pos < 0 || pos+k > rows {
		return nil, fmt.Errorf("pos %d: rows %d..%d do not fit a cache of %d rows", pos, pos, pos+k-1, rows)
	}
	d := append([]float64(nil), st.d...)
	row := len(st.d) / rows
	if f := st.t.DType.Format(); st.t.DType.Quantized() {
		return quantizeRows(n, st, x, pos*row, f)
	}
	r := rounder(st.t.DType)
	for i, v := range x.d {
		d[pos*row+i] = r(v)
	}
	return &val{t: n.Type(), d: d}, nil
}

// quantizeRows writes x's values into a copy of the block-quantized state st from element off
// on (a whole number of blocks: rows of the state are whole blocks).
func quantizeRows(n *ir.Node, st, x *val, off int, f *quant.Format) (*val, error) {
	raw := st.tensor()
	out := &ir.Tensor{Type: n.Type(), Data: append([]byte(nil), raw.Data...)}
	be, bb := f.BlockElems, f.BlockBytes
	blk := make([]float32, be)
	for i := 0; i < len(x.d); i += be {
		for j := range blk {
			blk[j] = float32(x.d[i+j])
		}
		at := (off + i) / be * bb
		if err := f.QuantizeBlock(blk, out.Data[at:at+bb]); err != nil {
			return nil, err
		}
	}
	return fromTensor(out), nil
}

// evalAttention is scaled dot-product attention with grouped-query heads: query head h reads
// key/value head h / (hq/hkv). Query i has the absolute position p = kv_len - sq + i; key j is
// attended iff j < kv_len, and (causal) j ≤ p, and (window w > 0) p - w < j ≤ p. scale defaults
// to 1/√d. kv_len defaults to skv; it must lie in 1..skv and, when causal or windowed, be at
// least sq (otherwise a query would have no key to attend).
func evalAttention(c *ctx, n *ir.Node, a []*val) (*val, error) {
	q, k, v := a[0], a[1], a[2]
	lay := ir.AttentionLayouts(n.Attrs)
	// Each operand in its own layout: (seq, head, feature) sizes and element indices.
	sq, hq, dh := ir.LayoutDims(lay.Q, q.t.Shape)
	skv, hkv, _ := ir.LayoutDims(lay.K, k.t.Shape)
	_, _, dv := ir.LayoutDims(lay.V, v.t.Shape)
	// at returns the index of (seq, head, feature) in a tensor of layout l and ns × nh × nf,
	// as strides (the same as ir.LayoutIndex, without a switch per element).
	at := func(l string) func(s, h, f, ns, nh, nf int) int {
		switch l {
		case "hsd":
			return func(s, h, f, ns, nh, nf int) int { return (h*ns+s)*nf + f }
		case "hds":
			return func(s, h, f, ns, nh, nf int) int { return (h*nf+f)*ns + s }
		}
		return func(s, h, f, ns, nh, nf int) int { return (s*nh+h)*nf + f }
	}
	atQ, atK, atV := at(lay.Q), at(lay.K), at(lay.V)
	kvLen := skv
	if len(a) == 4 {
		kvLen = scalarInt(a[3])
	}
	causal, window := n.Attrs.Bool("causal", false), n.Attrs.Int("window", 0)
	if kvLen < 1 || kvLen > skv {
		return nil, fmt.Errorf("kv_len %d is outside 1..%d (the number of keys)", kvLen, skv)
	}
	if (causal || window > 0) && kvLen < sq {
		return nil, fmt.Errorf("kv_len %d is less than the %d queries of a causal or windowed attention", kvLen, sq)
	}
	scale := n.Attrs.Float("scale", 1/math.Sqrt(float64(dh)))
	group := hq / hkv
	out := make([]float64, sq*hq*dv)
	// Rows (head, query) are independent: they are split across CPUs, each row still summed in
	// key order, so the result does not depend on the split. Keys at or past kv_len never count.
	parallelFor(hq*sq, hq*sq*kvLen*(dh+dv), func(lo, hi int) {
		scores := make([]float64, kvLen)
		valid := make([]bool, kvLen)
		for hi2 := lo; hi2 < hi; hi2++ {
			h, i := hi2/sq, hi2%sq
			kh := h / group
			p := kvLen - sq + i
			mx := math.Inf(-1)
			for j := 0; j < kvLen; j++ {
				valid[j] = (!causal || j <= p) && (window <= 0 || j > p-window && j <= p)
				if !valid[j] {
					continue
				}
				s := 0.0
				for f := 0; f < dh; f++ {
					s += q.d[atQ(i, h, f, sq, hq, dh)] * k.d[atK(j, kh, f, skv, hkv, dh)]
				}
				scores[j] = s * scale
				mx = math.Max(mx, scores[j])
			}
			sum := 0.0
			for j := range scores {
				if valid[j] {
					scores[j] = math.Exp(scores[j] - mx)
					sum += scores[j]
				}
			}
			for f := 0; f < dv; f++ {
				o := 0.0
				for j := 0; j < kvLen; j++ {
					if valid[j] {
						o += scores[j] * v.d[atV(j, kh, f, skv, hkv, dv)]
					}
				}
				out[atQ(i, h, f, sq, hq, dv)] = o / sum
			}
		}
	})
	return newVal(n.Type(), out), nil
}

// evalConv1d: out[b, o, t] = bias[o] + Σ_{c, r} w[o, c, r] · x[b, g·cpg + c, t·stride + r·dilation − padding]
// with g = o / (cout/groups), cpg = cin/groups, and x zero outside 0..L-1.
func evalConv1d(c *ctx, n *ir.Node, a []*val) (*val, error) {
	x, w, t := a[0], a[1], n.Type()
	r := x.t.Shape.Rank()
	batch := 1
	if r == 3 {
		batch = x.t.Shape[0]
	}
	cin, l := x.t.Shape[r-2], x.t.Shape[r-1]
	cout, cpg, kw := w.t.Shape[0], w.t.Shape[1], w.t.Shape[2]
	lout := t.Shape[r-1]
	groups := n.Attrs.Int("groups", 1)
	st, pad, dil := n.Attrs.Int("stride", 1), n.Attrs.Int("padding", 0), n.Attrs.Int("dilation", 1)
	opg := cout / groups
	d := make([]float64, batch*cout*lout)
	for b := 0; b < batch; b++ {
		for o := 0; o < cout; o++ {
			g := o / opg
			for tt := 0; tt < lout; tt++ {
				s := 0.0
				if len(a) == 3 {
					s = a[2].d[o]
				}
				for ci := 0; ci < cpg; ci++ {
					ch := g*cpg + ci
					for rr := 0; rr < kw; rr++ {
						// Zero padding is a zero operand, not a skipped tap: a weight of
						// ±Inf or NaN against it gives NaN, as with torch's padded input.
						xv := 0.0
						if idx := tt*st + rr*dil - pad; idx >= 0 && idx < l {
							xv = x.d[(b*cin+ch)*l+idx]
						}
						s += w.d[(o*cpg+ci)*kw+rr] * xv
					}
				}
				d[(b*cout+o)*lout+tt] = s
			}
		}
	}
	return newVal(t, d), nil
}
