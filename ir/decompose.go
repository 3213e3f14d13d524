package ir

import (
	"fmt"
	"math"
)

// Decompose adds to b the composition of primitive ops that computes the composite op (rmsnorm,
// layernorm, softmax, silu, gelu, gelu_tanh, rope, linear, attention, batch_norm) on args, and returns its
// result. The composition uses only ops of the table that are not Composite, so the e-graph
// rules that recognise these shapes of graph can be checked against it, and a model written
// either way computes the same function (up to rounding at the extra node boundaries).
//
// The compositions are the ones Hugging Face transformers writes in eager mode:
//
//	silu(x)       = x · sigmoid(x)
//	gelu(x)       = (x · 0.5) · (erf(x · 1/√2) + 1)
//	gelu_tanh(x)  = (x · 0.5) · (tanh((x + 0.044715·(x·(x·x))) · √(2/π)) + 1)
//	softmax(x)    = e / sum(e) with e = exp(x − max(x)), reductions with keepdims
//	rmsnorm(x, w) = (x · rsqrt(mean(x·x) + eps)) · w
//	layernorm     = ((x − μ) · rsqrt(mean((x − μ)²) + eps)) · w + b
//	linear(x, W, b) = matmul(x, W, tb) + b   (x of rank 1 is reshaped to [1, in] and back)
//	rope: angles (arange(S) + f32(pos)) ⊗ inv_freq in f32 (inv_freq = theta^(-2i/d), a constant),
//	      cos and sin of them (duplicated to [S, d] by concat for "half", interleaved for
//	      "interleaved"), cast to x's dtype and reshaped to broadcast along seq_axis; then
//	      x·cos + rotate(x)·sin with rotate(x) = concat(−x2, x1) of the two halves ("half"), or
//	      the pairs (−x[2i+1], x[2i]) ("interleaved").
//	batch_norm(x, s, b, m, v) = (x − m') · (s' · rsqrt(v' + eps)) + b', each parameter reshaped
//	      to [c, 1, …, 1] so it broadcasts along the channel axis (nchw; as it is for nhwc)
//	attention: heads first (transpose for "shd"), k and v repeated per query-head group by
//	      reshape [hkv,1,s,d] → expand [hkv,g,s,d] → reshape [hq,s,d]; scores = matmul(q, k, tb)·scale;
//	      masks from constant aranges: key j < kv_len, j ≤ p (causal), p − window < j ≤ p (window),
//	      with query position p = kv_len − sq + i, applied by where(mask, scores, −Inf); the
//	      softmax composition above; matmul with v; transpose back for "shd".
//
// Unlike the fused ops, the compositions do not check run-time scalars: a kv_len out of range
// gives NaN rows rather than an error.
func Decompose(b *Builder, op Op, attrs Attrs, args ...Value) (Value, error) {
	info, ok := opTable[op]
	if !ok {
		return Value{}, fmt.Errorf("decompose: undefined op %d", op)
	}
	if !info.Composite {
		return Value{}, fmt.Errorf("decompose: %s is not a composite op", op)
	}
	types := make([]Type, len(args))
	for i, a := range args {
		types[i] = a.Type()
	}
	a, _, err := Infer(op, attrs, types)
	if err != nil {
		return Value{}, fmt.Errorf("decompose: %w", err)
	}
	d := &decomposer{b: b}
	var v Value
	switch op {
	case Silu:
		x := args[0]
		v = d.op(Mul, nil, x, d.op(Sigmoid, nil, x))
	case Gelu:
		x := args[0]
		dt := x.Type().DType
		e := d.op(Erf, nil, d.op(Mul, nil, x, b.Scalar(dt, 1/math.Sqrt2)))
		v = d.op(Mul, nil, d.op(Mul, nil, x, b.Scalar(dt, 0.5)), d.op(Add, nil, e, b.Scalar(dt, 1)))
	case GeluTanh:
		x := args[0]
		dt := x.Type().DType
		cube := d.op(Mul, nil, x, d.op(Mul, nil, x, x))
		inner := d.op(Mul, nil, d.op(Add, nil, x, d.op(Mul, nil, cube, b.Scalar(dt, 0.044715))), b.Scalar(dt, math.Sqrt(2/math.Pi)))
		v = d.op(Mul, nil, d.op(Mul, nil, x, b.Scalar(dt, 0.5)), d.op(Add, nil, d.op(Tanh, nil, inner), b.Scalar(dt, 1)))
	case Softmax:
		v = d.softmax(args[0], a.Int("axis", -1))
	case RMSNorm:
		x := args[0]
		dt := x.Type().DType
		ms := d.op(Mean, Attrs{"axis": -1, "keepdims": true}, d.op(Mul, nil, x, x))
		r := d.op(Rsqrt, nil, d.op(Add, nil, ms, b.Scalar(dt, a.Float("eps", 1e-5))))
		v = d.op(Mul, nil, d.op(Mul, nil, x, r), d.castTo(args[1], dt))
	case LayerNorm:
		x := args[0]
		dt := x.Type().DType
		mu := d.op(Mean, Attrs{"axis": -1, "keepdims": true}, x)
		xc := d.op(Sub, nil, x, mu)
		vr := d.op(Mean, Attrs{"axis": -1, "keepdims": true}, d.op(Mul, nil, xc, xc))
		r := d.op(Rsqrt, nil, d.op(Add, nil, vr, b.Scalar(dt, a.Float("eps", 1e-5))))
		y := d.op(Mul, nil, d.op(Mul, nil, xc, r), d.castTo(args[1], dt))
		v = d.op(Add, nil, y, d.castTo(args[2], dt))
	case Linear:
		v = d.linear(args)
	case Rope:
		v = d.rope(a, args[0], args[1])
	case Attention:
		v = d.attention(a, args)
	case BatchNorm:
		v = d.batchNorm(a, args)
	default:
		return Value{}, fmt.Errorf("decompose: no composition for %s", op)
	}
	if d.err != nil {
		return Value{}, fmt.Errorf("decompose %s: %w", op, d.err)
	}
	return v, nil
}

// decomposer adds ops to a Builder, keeping the first error (later calls do nothing).
type decomposer struct {
	b   *Builder
	err error
}

func (d *decomposer) op(op Op, a Attrs, args ...Value) Value {
	if d.err != nil {
		return Value{}
	}
	for _, x := range args {
		if x.Node == nil {
			d.err = fmt.Errorf("%s: missing argument", op)
			return Value{}
		}
	}
	v, err := d.b.Op(op, a, args...)
	if err != nil {
		d.err = err
	}
	return v
}

func (d *decomposer) castTo(x Value, dt DType) Value {
	if x.Node == nil || x.Type().DType == dt {
		return x
	}
	return d.op(Cast, Attrs{"to": dt.String()}, x)
}

// arange adds a constant [0, 1, …, n-1] + off of dtype dt and the given shape (n elements).
func (d *decomposer) arange(dt DType, n int, off float64, shape ...int) Value {
	vals := make([]float64, n)
	for i := range vals {
		vals[i] = float64(i) + off
	}
	return d.b.Const(TensorFromFloat64s(Type{dt, Shape(shape)}, vals))
}

func (d *decomposer) softmax(x Value, axis int) Value {
	red := Attrs{"axis": axis, "keepdims": true}
	e := d.op(Exp, nil, d.op(Sub, nil, x, d.op(Max, red, x)))
	return d.op(Div, nil, e, d.op(Sum, red, e))
}

func (d *decomposer) linear(args []Value) Value {
	x, w := args[0], args[1]
	xt := x.Type()
	out := w.Type().Shape[0]
	var y Value
	if xt.Shape.Rank() == 1 {
		x2 := d.op(Reshape, Attrs{"shape": []int{1, xt.Shape[0]}}, x)
		y = d.op(Reshape, Attrs{"shape": []int{out}}, d.op(Matmul, Attrs{"tb": true}, x2, w))
	} else {
		y = d.op(Matmul, Attrs{"tb": true}, x, w)
	}
	if len(args) == 3 {
		y = d.op(Add, nil, y, d.castTo(args[2], xt.DType))
	}
	return y
}

func (d *decomposer) rope(a Attrs, x, pos Value) Value {
	xt := x.Type()
	r := xt.Shape.Rank()
	ax, err := NormAxis(a.Int("seq_axis", 0), r)
	if err != nil {
		d.err = err
		return Value{}
	}
	s, dim := xt.Shape[ax], xt.Shape[r-1]
	h := dim / 2
	theta := a.Float("theta", 10000)
	half := a.String("mode", "half") == "half"

	// Angles in f32 whatever x's dtype, as transformers computes them: an f16 angle at
	// position 1000 would be off by a whole radian.
	sc, err := RopeScalingOf(a)
	if err != nil {
		d.err = err
		return Value{}
	}
	inv := RopeInvFreq(theta, dim, sc)
	invFreq := d.b.Const(TensorFromFloat64s(T(F32, h), inv))
	p := d.op(Add, nil, d.arange(F32, s, 0, s), d.castTo(pos, F32))
	ang := d.op(Mul, nil, d.op(Reshape, Attrs{"shape": []int{s, 1}}, p), invFreq) // [s, h]
	var emb Value
	if half {
		emb = d.op(Concat, Attrs{"axis": 1}, ang, ang)
	} else {
		a3 := d.op(Reshape, Attrs{"shape": []int{s, h, 1}}, ang)
		emb = d.op(Reshape, Attrs{"shape": []int{s, dim}}, d.op(Concat, Attrs{"axis": 2}, a3, a3))
	}
	bshape := make([]int, r)
	for i := range bshape {
		bshape[i] = 1
	}
	bshape[ax], bshape[r-1] = s, dim
	cs := d.op(Reshape, Attrs{"shape": bshape}, d.castTo(d.op(Cos, nil, emb), xt.DType))
	sn := d.op(Reshape, Attrs{"shape": bshape}, d.castTo(d.op(Sin, nil, emb), xt.DType))

	var rot Value
	if half {
		x1 := d.op(Slice, Attrs{"axis": -1, "start": 0, "end": h}, x)
		x2 := d.op(Slice, Attrs{"axis": -1, "start": h, "end": dim}, x)
		rot = d.op(Concat, Attrs{"axis": -1}, d.op(Neg, nil, x2), x1)
	} else {
		ps := append(xt.Shape[:r-1].Clone(), h, 1)
		xe := d.op(Reshape, Attrs{"shape": []int(ps)}, d.op(Slice, Attrs{"axis": -1, "start": 0, "end": dim, "step": 2}, x))
		xo := d.op(Reshape, Attrs{"shape": []int(ps)}, d.op(Slice, Attrs{"axis": -1, "start": 1, "end": dim, "step": 2}, x))
		rot = d.op(Reshape, Attrs{"shape": []int(xt.Shape.Clone())}, d.op(Concat, Attrs{"axis": -1}, d.op(Neg, nil, xo), xe))
	}
	return d.op(Add, nil, d.op(Mul, nil, x, cs), d.op(Mul, nil, rot, sn))
}

func (d *decomposer) attention(a Attrs, args []Value) Value {
	q, k, v := args[0], args[1], args[2]
	dt := q.Type().DType
	if k.Type().DType.Quantized() {
		// A block-quantized KV cache: its values, in q's dtype (layout ops take no blocks).
		k, v = d.castTo(k, dt), d.castTo(v, dt)
	}
	lay := AttentionLayouts(a)
	// Each operand to heads first: q and v to [heads, seq, feature]; k to [heads, seq,
	// feature] too, except that K transposed (hds, [heads, feature, seq]) stays as it is and
	// the scores' matmul reads it untransposed.
	heads := func(x Value, l string) Value {
		if l == "shd" {
			return d.op(Transpose, Attrs{"perm": []int{1, 0, 2}}, x)
		}
		return x
	}
	kt := lay.K == "hds"
	qh, kh, vh := heads(q, lay.Q), heads(k, lay.K), heads(v, lay.V)
	if d.err != nil {
		return Value{}
	}
	hq, sq, dh := qh.Type().Shape[0], qh.Type().Shape[1], qh.Type().Shape[2]
	hkv, skv := kh.Type().Shape[0], kh.Type().Shape[1]
	if kt {
		skv = kh.Type().Shape[2]
	}
	if g := hq / hkv; g > 1 {
		repeat := func(x Value) Value {
			s := x.Type().Shape
			x4 := d.op(Reshape, Attrs{"shape": []int{hkv, 1, s[1], s[2]}}, x)
			x4 = d.op(Expand, Attrs{"shape": []int{hkv, g, s[1], s[2]}}, x4)
			return d.op(Reshape, Attrs{"shape": []int{hq, s[1], s[2]}}, x4)
		}
		kh, vh = repeat(kh), repeat(vh)
	}
	scale := a.Float("scale", 1/math.Sqrt(float64(dh)))
	scores := d.op(Mul, nil, d.op(Matmul, Attrs{"tb": !kt}, qh, kh), d.b.Scalar(dt, scale)) // [hq, sq, skv]

	causal, window := a.Bool("causal", false), a.Int("window", 0)
	hasLen := len(args) == 4
	if hasLen || causal || window > 0 {
		ninf := d.b.Scalar(dt, math.Inf(-1))
		kpos := d.arange(I32, skv, 0, skv) // [skv]
		var qpos, kvLen Value              // [sq, 1]
		if hasLen {
			kvLen = d.castTo(args[3], I32)
			off := d.op(Sub, nil, kvLen, d.b.Scalar(I32, float64(sq)))
			qpos = d.op(Add, nil, d.arange(I32, sq, 0, sq, 1), off)
		} else {
			qpos = d.arange(I32, sq, float64(skv-sq), sq, 1)
		}
		mask := func(cond Value) { scores = d.op(Where, nil, cond, scores, ninf) }
		if hasLen {
			mask(d.op(Lt, nil, kpos, kvLen))
		}
		if causal || window > 0 {
			mask(d.op(Le, nil, kpos, qpos))
		}
		if window > 0 {
			mask(d.op(Gt, nil, kpos, d.op(Sub, nil, qpos, d.b.Scalar(I32, float64(window)))))
		}
	}
	out := d.op(Matmul, nil, d.softmax(scores, -1), vh) // [hq, sq, dv]
	if lay.Q == "shd" {
		out = d.op(Transpose, Attrs{"perm": []int{1, 0, 2}}, out)
	}
	return out
}

func (d *decomposer) batchNorm(a Attrs, args []Value) Value {
	x := args[0]
	xt := x.Type()
	dt := xt.DType
	c := xt.Shape[BatchNormChannelAxis(a, xt)]
	shape := []int{c}
	if a.String("layout", "nchw") == "nchw" {
		for i := 2; i < xt.Shape.Rank(); i++ {
			shape = append(shape, 1)
		}
	}
	p := func(i int) Value { return d.op(Reshape, Attrs{"shape": shape}, d.castTo(args[i], dt)) }
	scale, bias, mean, vr := p(1), p(2), p(3), p(4)
	inv := d.op(Rsqrt, nil, d.op(Add, nil, vr, d.b.Scalar(dt, a.Float("eps", 1e-5))))
	return d.op(Add, nil, d.op(Mul, nil, d.op(Sub, nil, x, mean), d.op(Mul, nil, scale, inv)), bias)
}

// DecomposeAll returns a copy of f in which every composite node is replaced by its composition
// (Decompose). Inputs keep their signature order; other nodes, outputs and updates are kept with
// their names and source positions. f itself is not changed.
func DecomposeAll(f *Function) (*Function, error) {
	b := NewBuilder(f.Name)
	b.f.Pos = f.Pos
	vals := map[Value]Value{}
	for _, in := range f.Inputs {
		v, err := b.At(in.Pos).Input(in.Name, in.Type())
		if err != nil {
			return nil, fmt.Errorf("function %s: %w", f.Name, err)
		}
		vals[in.V()] = v
	}
	if l := f.Length; l != nil {
		v, err := b.At(l.Node.Pos).CopyLength(l)
		if err != nil {
			return nil, fmt.Errorf("function %s: %w", f.Name, err)
		}
		vals[l.Node.V()] = v
	}
	for _, n := range f.Nodes {
		b.At(n.Pos)
		var v Value
		switch n.Op {
		case Input:
			if _, ok := vals[n.V()]; !ok {
				return nil, fmt.Errorf("function %s: input node %s is not in the signature", f.Name, n)
			}
			continue
		case Param:
			v = b.Param(n.Name, n.Type())
		case State:
			v = b.State(n.Name, n.Type())
		case Const:
			v = b.Const(n.Value)
			v.Node.Name = n.Name
		default:
			if len(n.Outs) != 1 {
				return nil, fmt.Errorf("function %s: node %s: multi-output nodes are not supported", f.Name, n)
			}
			args := make([]Value, len(n.Args))
			for i, a := range n.Args {
				args[i] = vals[a]
			}
			var err error
			if n.Op.Info().Composite {
				v, err = Decompose(b, n.Op, n.Attrs, args...)
			} else {
				v, err = b.Op(n.Op, n.Attrs, args...)
			}
			if err != nil {
				return nil, fmt.Errorf("function %s: node %s: %w", f.Name, n, err)
			}
			if n.Name != "" {
				v.Node.Name = n.Name
			}
		}
		vals[n.V()] = v
	}
	for _, o := range f.Outputs {
		if err := b.Output(o.Name, vals[o.Value]); err != nil {
			return nil, fmt.Errorf("function %s: %w", f.Name, err)
		}
	}
	for _, u := range f.Updates {
		if err := b.Update(u.Name, vals[u.Value]); err != nil {
			return nil, fmt.Errorf("function %s: %w", f.Name, err)
		}
	}
	return b.Function(), nil
}
