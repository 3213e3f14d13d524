package ir

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
)

func one(t Type) []Type { return []Type{t} }

func init() {
	src := func(a Attrs, args []Type) ([]Type, error) {
		return nil, errors.New("a source op has no arguments to infer from; build it with the source constructors")
	}
	name := []AttrSpec{{Name: "name", Kind: AttrString, Required: true}}
	def(Input, OpInfo{Name: "input", Kind: KindSource, Attrs: name, infer: src})
	def(Param, OpInfo{Name: "param", Kind: KindSource, Attrs: name, infer: src})
	def(State, OpInfo{Name: "state", Kind: KindSource, Attrs: name, infer: src})
	def(Const, OpInfo{Name: "const", Kind: KindSource, infer: src})

	unaryFloat := func(a Attrs, args []Type) ([]Type, error) {
		if !args[0].DType.IsFloat() {
			return nil, fmt.Errorf("needs a float tensor, got %s", args[0])
		}
		return one(args[0]), nil
	}
	unarySigned := func(a Attrs, args []Type) ([]Type, error) {
		if args[0].DType == Bool || args[0].DType == U32 {
			return nil, fmt.Errorf("needs a float or i32 tensor, got %s", args[0])
		}
		return one(args[0]), nil
	}
	for _, u := range []struct {
		op   Op
		name string
		comp bool
	}{
		{Exp, "exp", false}, {Log, "log", false}, {Sqrt, "sqrt", false}, {Rsqrt, "rsqrt", false},
		{Recip, "recip", false}, {Sin, "sin", false}, {Cos, "cos", false}, {Tanh, "tanh", false}, {Erf, "erf", false},
		{Sigmoid, "sigmoid", false}, {Silu, "silu", true}, {Gelu, "gelu", true}, {GeluTanh, "gelu_tanh", true},
	} {
		def(u.op, OpInfo{Name: u.name, Kind: KindUnary, MinArgs: 1, MaxArgs: 1, Composite: u.comp, infer: unaryFloat})
	}
	def(Neg, OpInfo{Name: "neg", Kind: KindUnary, MinArgs: 1, MaxArgs: 1, infer: unarySigned})
	def(Abs, OpInfo{Name: "abs", Kind: KindUnary, MinArgs: 1, MaxArgs: 1, infer: unarySigned})
	def(Relu, OpInfo{Name: "relu", Kind: KindUnary, MinArgs: 1, MaxArgs: 1, infer: unarySigned})
	// cast of a block-quantized weight dequantizes it (exactly, then rounds to the target);
	// nothing casts to a block format (vkc has no quantizer).
	def(Cast, OpInfo{Name: "cast", Kind: KindUnary, MinArgs: 1, MaxArgs: 1, WeightArgs: []int{0},
		Attrs: []AttrSpec{{Name: "to", Kind: AttrString, Required: true}},
		infer: func(a Attrs, args []Type) ([]Type, error) {
			d, err := ParseDType(a.String("to", ""))
			if err != nil {
				return nil, err
			}
			if d.Quantized() {
				return nil, fmt.Errorf("cannot cast to %s: block-quantized dtypes come only from weight files", d)
			}
			return one(Type{d, args[0].Shape.Clone()}), nil
		}})

	binary := func(cmp bool) func(a Attrs, args []Type) ([]Type, error) {
		return func(a Attrs, args []Type) ([]Type, error) {
			if args[0].DType != args[1].DType {
				return nil, fmt.Errorf("operand dtypes differ: %s and %s (insert a cast)", args[0], args[1])
			}
			if args[0].DType == Bool && !cmp {
				return nil, fmt.Errorf("arithmetic on bool tensors: %s", args[0])
			}
			s, err := Broadcast(args[0].Shape, args[1].Shape)
			if err != nil {
				return nil, err
			}
			d := args[0].DType
			if cmp {
				d = Bool
			}
			return one(Type{d, s}), nil
		}
	}
	for _, b := range []struct {
		op   Op
		name string
	}{{Add, "add"}, {Sub, "sub"}, {Mul, "mul"}, {Div, "div"}, {Maximum, "maximum"}, {Minimum, "minimum"}, {Pow, "pow"}} {
		def(b.op, OpInfo{Name: b.name, Kind: KindBinary, MinArgs: 2, MaxArgs: 2, infer: binary(false)})
	}
	for _, b := range []struct {
		op   Op
		name string
	}{{Eq, "eq"}, {Ne, "ne"}, {Lt, "lt"}, {Le, "le"}, {Gt, "gt"}, {Ge, "ge"}} {
		def(b.op, OpInfo{Name: b.name, Kind: KindCompare, MinArgs: 2, MaxArgs: 2, infer: binary(true)})
	}
	def(Where, OpInfo{Name: "where", Kind: KindSelect, MinArgs: 3, MaxArgs: 3,
		infer: func(a Attrs, args []Type) ([]Type, error) {
			if args[0].DType != Bool {
				return nil, fmt.Errorf("condition must be bool, got %s", args[0])
			}
			if args[1].DType != args[2].DType {
				return nil, fmt.Errorf("branch dtypes differ: %s and %s", args[1], args[2])
			}
			s, err := Broadcast(args[0].Shape, args[1].Shape, args[2].Shape)
			if err != nil {
				return nil, err
			}
			return one(Type{args[1].DType, s}), nil
		}})

	reduceAttrs := []AttrSpec{{Name: "axis", Kind: AttrInt, Default: -1}, {Name: "keepdims", Kind: AttrBool, Default: false}}
	reduce := func(arg bool) func(a Attrs, args []Type) ([]Type, error) {
		return func(a Attrs, args []Type) ([]Type, error) {
			x := args[0]
			ax, err := NormAxis(a.Int("axis", -1), x.Shape.Rank())
			if err != nil {
				return nil, err
			}
			if x.DType == Bool {
				return nil, fmt.Errorf("cannot reduce a bool tensor %s", x)
			}
			var s Shape
			for i, d := range x.Shape {
				if i == ax {
					if a.Bool("keepdims", false) {
						s = append(s, 1)
					}
					continue
				}
				s = append(s, d)
			}
			if s == nil {
				s = Shape{}
			}
			d := x.DType
			if arg {
				d = I32
			}
			return one(Type{d, s}), nil
		}
	}
	def(Sum, OpInfo{Name: "sum", Kind: KindReduce, MinArgs: 1, MaxArgs: 1, Attrs: reduceAttrs, infer: reduce(false)})
	def(Mean, OpInfo{Name: "mean", Kind: KindReduce, MinArgs: 1, MaxArgs: 1, Attrs: reduceAttrs, infer: reduce(false)})
	def(Max, OpInfo{Name: "max", Kind: KindReduce, MinArgs: 1, MaxArgs: 1, Attrs: reduceAttrs, infer: reduce(false)})
	def(Min, OpInfo{Name: "min", Kind: KindReduce, MinArgs: 1, MaxArgs: 1, Attrs: reduceAttrs, infer: reduce(false)})
	def(Argmax, OpInfo{Name: "argmax", Kind: KindReduce, MinArgs: 1, MaxArgs: 1, Attrs: reduceAttrs, infer: reduce(true)})
	def(ArgTopK, OpInfo{Name: "argtopk", Kind: KindOther, MinArgs: 1, MaxArgs: 1, Attrs: []AttrSpec{{Name: "k", Kind: AttrInt, Required: true}},
		infer: func(a Attrs, args []Type) ([]Type, error) {
			x := args[0]
			if !x.DType.IsFloat() && !x.DType.IsInt() || x.DType.Quantized() {
				return nil, fmt.Errorf("x must be a float or integer tensor, got %s", x)
			}
			if x.Shape.Rank() == 0 {
				return nil, fmt.Errorf("x must have a last axis to rank, got the scalar %s", x)
			}
			n, k := x.Shape[x.Shape.Rank()-1], a.Int("k", 0)
			if k < 1 || k > n {
				return nil, fmt.Errorf("k must be in 1..%d (the last axis of %s), got %d", n, x, k)
			}
			s := x.Shape.Clone()
			s[len(s)-1] = k
			return one(Type{I32, s}), nil
		}})
	def(TakeAlongAxis, OpInfo{Name: "take_along_axis", Kind: KindOther, MinArgs: 2, MaxArgs: 2,
		infer: func(a Attrs, args []Type) ([]Type, error) {
			x, idx := args[0], args[1]
			if x.DType.Quantized() {
				return nil, fmt.Errorf("x cannot be block-quantized, got %s", x)
			}
			if idx.DType != I32 && idx.DType != U32 {
				return nil, fmt.Errorf("indices must be i32 or u32, got %s", idx)
			}
			r := x.Shape.Rank()
			if r == 0 || idx.Shape.Rank() != r || !x.Shape[:r-1].Equal(idx.Shape[:r-1]) {
				return nil, fmt.Errorf("x %s and indices %s must have the same leading axes and rank", x, idx)
			}
			return one(Type{x.DType, idx.Shape.Clone()}), nil
		}})

	def(Softmax, OpInfo{Name: "softmax", Kind: KindNorm, MinArgs: 1, MaxArgs: 1, Composite: true,
		Attrs: []AttrSpec{{Name: "axis", Kind: AttrInt, Default: -1}},
		infer: func(a Attrs, args []Type) ([]Type, error) {
			if _, err := NormAxis(a.Int("axis", -1), args[0].Shape.Rank()); err != nil {
				return nil, err
			}
			return unaryFloat(a, args)
		}})
	eps := []AttrSpec{{Name: "eps", Kind: AttrFloat, Default: 1e-5}}
	def(RMSNorm, OpInfo{Name: "rmsnorm", Kind: KindNorm, MinArgs: 2, MaxArgs: 2, Composite: true, Attrs: eps,
		infer: func(a Attrs, args []Type) ([]Type, error) { return normInfer(args) }})
	def(LayerNorm, OpInfo{Name: "layernorm", Kind: KindNorm, MinArgs: 3, MaxArgs: 3, Composite: true, Attrs: eps,
		infer: func(a Attrs, args []Type) ([]Type, error) { return normInfer(args) }})

	def(Matmul, OpInfo{Name: "matmul", Kind: KindMatmul, MinArgs: 2, MaxArgs: 2, WeightArgs: []int{1},
		Attrs: []AttrSpec{{Name: "ta", Kind: AttrBool, Default: false}, {Name: "tb", Kind: AttrBool, Default: false}},
		infer: matmulInfer})
	def(Linear, OpInfo{Name: "linear", Kind: KindMatmul, MinArgs: 2, MaxArgs: 3, Composite: true, WeightArgs: []int{1}, infer: linearInfer})

	def(Reshape, OpInfo{Name: "reshape", Kind: KindLayout, MinArgs: 1, MaxArgs: 1,
		Attrs: []AttrSpec{{Name: "shape", Kind: AttrInts, Required: true}},
		infer: func(a Attrs, args []Type) ([]Type, error) {
			s, err := ResolveReshape(args[0].Shape, a.Ints("shape"))
			if err != nil {
				return nil, err
			}
			return one(Type{args[0].DType, s}), nil
		}})
	def(Transpose, OpInfo{Name: "transpose", Kind: KindLayout, MinArgs: 1, MaxArgs: 1,
		Attrs: []AttrSpec{{Name: "perm", Kind: AttrInts, Required: true}},
		infer: func(a Attrs, args []Type) ([]Type, error) {
			x, perm := args[0], a.Ints("perm")
			if err := checkPerm(perm, x.Shape.Rank()); err != nil {
				return nil, err
			}
			s := make(Shape, len(perm))
			for i, p := range perm {
				s[i] = x.Shape[p]
			}
			return one(Type{x.DType, s}), nil
		}})
	def(Slice, OpInfo{Name: "slice", Kind: KindLayout, MinArgs: 1, MaxArgs: 1,
		Attrs: []AttrSpec{{Name: "axis", Kind: AttrInt, Default: 0}, {Name: "start", Kind: AttrInt, Default: 0},
			{Name: "end", Kind: AttrInt, Required: true}, {Name: "step", Kind: AttrInt, Default: 1}},
		infer: func(a Attrs, args []Type) ([]Type, error) {
			x := args[0]
			ax, err := NormAxis(a.Int("axis", 0), x.Shape.Rank())
			if err != nil {
				return nil, err
			}
			n, err := SliceLen(x.Shape[ax], a.Int("start", 0), a.Int("end", 0), a.Int("step", 1))
			if err != nil {
				return nil, err
			}
			s := x.Shape.Clone()
			s[ax] = n
			return one(Type{x.DType, s}), nil
		}})
	def(Reverse, OpInfo{Name: "reverse", Kind: KindLayout, MinArgs: 1, MaxArgs: 1,
		Attrs: []AttrSpec{{Name: "axis", Kind: AttrInt, Default: 0}},
		infer: func(a Attrs, args []Type) ([]Type, error) {
			if _, err := NormAxis(a.Int("axis", 0), args[0].Shape.Rank()); err != nil {
				return nil, err
			}
			return one(args[0]), nil
		}})
	// concat takes block-quantized weights (merge-linears joins W1 and W2 row-wise): blocks tile
	// the last axis of every part, so joining whole rows or whole row segments keeps them whole.
	def(Concat, OpInfo{Name: "concat", Kind: KindLayout, MinArgs: 1, MaxArgs: 1 << 20, AllWeightArgs: true,
		Attrs: []AttrSpec{{Name: "axis", Kind: AttrInt, Default: 0}},
		infer: func(a Attrs, args []Type) ([]Type, error) {
			first := args[0]
			ax, err := NormAxis(a.Int("axis", 0), first.Shape.Rank())
			if err != nil {
				return nil, err
			}
			s := first.Shape.Clone()
			for _, t := range args[1:] {
				if t.DType != first.DType || t.Shape.Rank() != first.Shape.Rank() {
					return nil, fmt.Errorf("cannot concatenate %s and %s", first, t)
				}
				for i := range s {
					if i != ax && t.Shape[i] != first.Shape[i] {
						return nil, fmt.Errorf("cannot concatenate %s and %s along axis %d", first, t, ax)
					}
				}
				s[ax] += t.Shape[ax]
			}
			return one(Type{first.DType, s}), nil
		}})
	def(Expand, OpInfo{Name: "expand", Kind: KindLayout, MinArgs: 1, MaxArgs: 1,
		Attrs: []AttrSpec{{Name: "shape", Kind: AttrInts, Required: true}},
		infer: func(a Attrs, args []Type) ([]Type, error) {
			want := Shape(a.Ints("shape"))
			if _, ok := want.CheckedElements(); !ok {
				return nil, fmt.Errorf("expand to %s: the shape's element count overflows (or a dimension is negative)", want)
			}
			s, err := Broadcast(args[0].Shape, want)
			if err != nil || !s.Equal(want) {
				return nil, fmt.Errorf("cannot expand %s to %s", args[0].Shape, want)
			}
			return one(Type{args[0].DType, want.Clone()}), nil
		}})

	// embedding of a block-quantized table gives f32 rows (ggml's get_rows dequantizes to f32).
	def(Embedding, OpInfo{Name: "embedding", Kind: KindOther, MinArgs: 2, MaxArgs: 2, WeightArgs: []int{0},
		infer: func(a Attrs, args []Type) ([]Type, error) {
			tab, ids := args[0], args[1]
			if tab.Shape.Rank() != 2 {
				return nil, fmt.Errorf("table must be [rows, dim], got %s", tab)
			}
			if !ids.DType.IsInt() {
				return nil, fmt.Errorf("ids must be i32 or u32, got %s", ids)
			}
			s := append(ids.Shape.Clone(), tab.Shape[1])
			d := tab.DType
			if d.Quantized() {
				d = F32
			}
			return one(Type{d, s}), nil
		}})
	def(Rope, OpInfo{Name: "rope", Kind: KindOther, MinArgs: 2, MaxArgs: 2, Composite: true,
		Attrs: append([]AttrSpec{{Name: "theta", Kind: AttrFloat, Default: 10000.0}, {Name: "mode", Kind: AttrString, Default: "half"},
			{Name: "seq_axis", Kind: AttrInt, Default: 0}}, ropeScalingAttrs...),
		infer: func(a Attrs, args []Type) ([]Type, error) {
			x, pos := args[0], args[1]
			if !x.DType.IsFloat() {
				return nil, fmt.Errorf("x must be float, got %s", x)
			}
			if err := checkScalarInt("pos", pos); err != nil {
				return nil, err
			}
			if x.Shape.Rank() < 2 {
				return nil, fmt.Errorf("x must have a sequence axis and a feature axis, got %s", x)
			}
			if x.Shape[x.Shape.Rank()-1]%2 != 0 {
				return nil, fmt.Errorf("the last axis of %s must be even", x)
			}
			if m := a.String("mode", "half"); m != "half" && m != "interleaved" {
				return nil, fmt.Errorf("mode must be half or interleaved, got %q", m)
			}
			if th := a.Float("theta", 10000); !(th > 0) || math.IsInf(th, 0) {
				return nil, fmt.Errorf("theta must be positive, got %v", th)
			}
			if _, err := RopeScalingOf(a); err != nil {
				return nil, err
			}
			ax, err := NormAxis(a.Int("seq_axis", 0), x.Shape.Rank())
			if err != nil {
				return nil, err
			}
			if ax == x.Shape.Rank()-1 {
				return nil, fmt.Errorf("seq_axis cannot be the rotated (last) axis")
			}
			return one(x), nil
		}})
	def(CacheWrite, OpInfo{Name: "cache_write", Kind: KindOther, MinArgs: 3, MaxArgs: 3, CacheArgs: []int{0},
		infer: func(a Attrs, args []Type) ([]Type, error) {
			st, x, pos := args[0], args[1], args[2]
			// The rows are converted to the cache's dtype as they are written: rounded to a
			// 16-bit cache, quantized block by block to a q8_0 or q4_0 one.
			if !x.DType.IsFloat() && st.DType != x.DType {
				return nil, fmt.Errorf("cache %s and rows %s differ in dtype (rows of another dtype must be float)", st, x)
			}
			if st.DType != x.DType && !st.DType.CacheFormat() {
				return nil, fmt.Errorf("float rows %s cannot be written to a %s cache", x, st.DType)
			}
			if st.Shape.Rank() != x.Shape.Rank() || st.Shape.Rank() == 0 || !st.Shape[1:].Equal(x.Shape[1:]) || x.Shape[0] > st.Shape[0] {
				return nil, fmt.Errorf("rows %s do not fit cache %s (same trailing dims, at most as many rows)", x, st)
			}
			if err := checkScalarInt("pos", pos); err != nil {
				return nil, err
			}
			return one(st), nil
		}})
	def(Attention, OpInfo{Name: "attention", Kind: KindOther, MinArgs: 3, MaxArgs: 4, Composite: true, CacheArgs: []int{1, 2},
		Attrs: []AttrSpec{{Name: "scale", Kind: AttrFloat}, {Name: "causal", Kind: AttrBool, Default: false},
			{Name: "window", Kind: AttrInt, Default: 0}, {Name: "layout", Kind: AttrString, Default: "shd"},
			{Name: "k_layout", Kind: AttrString, Like: "layout"}, {Name: "v_layout", Kind: AttrString, Like: "layout"}},
		infer: attentionInfer})
	def(Conv1d, OpInfo{Name: "conv1d", Kind: KindOther, MinArgs: 2, MaxArgs: 3,
		Attrs: []AttrSpec{{Name: "stride", Kind: AttrInt, Default: 1}, {Name: "padding", Kind: AttrInt, Default: 0},
			{Name: "dilation", Kind: AttrInt, Default: 1}, {Name: "groups", Kind: AttrInt, Default: 1}},
		infer: conv1dInfer})
}

func checkScalarInt(name string, t Type) error {
	if !t.DType.IsInt() || t.Shape.NumElements() != 1 {
		return fmt.Errorf("%s must be an i32 scalar, got %s", name, t)
	}
	return nil
}

// NormAxis maps a possibly negative axis to 0..rank-1.
func NormAxis(axis, rank int) (int, error) {
	if axis < 0 {
		axis += rank
	}
	if axis < 0 || axis >= rank {
		return 0, fmt.Errorf("axis %d out of range for rank %d", axis, rank)
	}
	return axis, nil
}

// SliceLen is the number of elements that start:end:step selects from n (Python semantics
// for negative start and end; step must be positive).
func SliceLen(n, start, end, step int) (int, error) {
	if step <= 0 {
		return 0, fmt.Errorf("step must be positive, got %d", step)
	}
	s, e := ClampSlice(n, start, end)
	if e <= s {
		return 0, fmt.Errorf("slice %d:%d of a dimension of %d is empty", start, end, n)
	}
	return (e - s + step - 1) / step, nil
}

// ClampSlice resolves negative and out-of-range bounds as Python does.
func ClampSlice(n, start, end int) (int, int) {
	if start < 0 {
		start += n
	}
	if end < 0 {
		end += n
	}
	return min(max(start, 0), n), min(max(end, 0), n)
}

// ResolveReshape fills one -1 and checks the element count.
func ResolveReshape(from Shape, to []int) (Shape, error) {
	s := Shape(append([]int(nil), to...))
	infer := -1
	n := 1
	for i, d := range s {
		switch {
		case d == -1 && infer < 0:
			infer = i
		case d <= 0:
			return nil, fmt.Errorf("bad dimension %d in reshape to %s", d, Shape(to))
		default:
			hi, lo := bits.Mul64(uint64(n), uint64(d))
			if hi != 0 || lo > 1<<62 {
				return nil, fmt.Errorf("reshape to %s: the shape's element count overflows", Shape(to))
			}
			n = int(lo)
		}
	}
	total := from.NumElements()
	if infer >= 0 {
		if n == 0 || total%n != 0 {
			return nil, fmt.Errorf("cannot reshape %s to %s", from, Shape(to))
		}
		s[infer] = total / n
		n = total
	}
	if n != total {
		return nil, fmt.Errorf("cannot reshape %s (%d elements) to %s (%d elements)", from, total, Shape(to), n)
	}
	return s, nil
}

func checkPerm(perm []int, rank int) error {
	if len(perm) != rank {
		return fmt.Errorf("perm %v has %d entries for rank %d", perm, len(perm), rank)
	}
	seen := make([]bool, rank)
	for _, p := range perm {
		if p < 0 || p >= rank || seen[p] {
			return fmt.Errorf("perm %v is not a permutation of 0..%d", perm, rank-1)
		}
		seen[p] = true
	}
	return nil
}

func normInfer(args []Type) ([]Type, error) {
	x := args[0]
	if !x.DType.IsFloat() || x.Shape.Rank() == 0 {
		return nil, fmt.Errorf("x must be a float tensor of rank ≥ 1, got %s", x)
	}
	d := x.Shape[x.Shape.Rank()-1]
	for i, p := range args[1:] {
		if p.Shape.Rank() != 1 || p.Shape[0] != d {
			return nil, fmt.Errorf("parameter %d must be [%d] to match %s, got %s", i+2, d, x, p)
		}
		if !p.DType.IsFloat() {
			return nil, fmt.Errorf("parameter %d must be float, got %s", i+2, p)
		}
	}
	return one(x), nil
}

// matmulInfer: a [..., m, k] · b [..., k, n] (after the optional transposes), batch dims broadcast.
func matmulInfer(a Attrs, args []Type) ([]Type, error) {
	x, y := args[0], args[1]
	if x.Shape.Rank() < 2 || y.Shape.Rank() < 2 {
		return nil, fmt.Errorf("operands must have rank ≥ 2, got %s and %s", x, y)
	}
	if !x.DType.IsFloat() || !y.DType.IsFloat() && !y.DType.Quantized() {
		return nil, fmt.Errorf("operands must be float, got %s and %s", x, y)
	}
	if y.DType.Quantized() && y.Shape.Rank() != 2 {
		return nil, fmt.Errorf("a block-quantized b must be a matrix, got %s", y)
	}
	rx, ry := x.Shape.Rank(), y.Shape.Rank()
	m, k := x.Shape[rx-2], x.Shape[rx-1]
	if a.Bool("ta", false) {
		m, k = k, m
	}
	k2, n := y.Shape[ry-2], y.Shape[ry-1]
	if a.Bool("tb", false) {
		k2, n = n, k2
	}
	if k != k2 {
		return nil, fmt.Errorf("inner dimensions differ: %s and %s (ta=%v, tb=%v)", x, y, a.Bool("ta", false), a.Bool("tb", false))
	}
	batch, err := Broadcast(x.Shape[:rx-2], y.Shape[:ry-2])
	if err != nil {
		return nil, fmt.Errorf("batch dimensions: %w", err)
	}
	return one(Type{x.DType, append(batch, m, n)}), nil
}

func linearInfer(a Attrs, args []Type) ([]Type, error) {
	x, w := args[0], args[1]
	if x.Shape.Rank() < 1 || w.Shape.Rank() != 2 {
		return nil, fmt.Errorf("want x [..., in] and W [out, in], got %s and %s", x, w)
	}
	in := x.Shape[x.Shape.Rank()-1]
	if w.Shape[1] != in {
		return nil, fmt.Errorf("W %s does not take inputs of width %d from %s", w, in, x)
	}
	if !x.DType.IsFloat() || !w.DType.IsFloat() && !w.DType.Quantized() {
		return nil, fmt.Errorf("operands must be float, got %s and %s", x, w)
	}
	if len(args) == 3 {
		if b := args[2]; b.Shape.Rank() != 1 || b.Shape[0] != w.Shape[0] {
			return nil, fmt.Errorf("bias must be [%d], got %s", w.Shape[0], b)
		}
	}
	s := x.Shape.Clone()
	s[len(s)-1] = w.Shape[0]
	return one(Type{x.DType, s}), nil
}

func attentionInfer(a Attrs, args []Type) ([]Type, error) {
	q, k, v := args[0], args[1], args[2]
	if q.Shape.Rank() != 3 || k.Shape.Rank() != 3 || v.Shape.Rank() != 3 {
		return nil, fmt.Errorf("q, k, v must have rank 3, got %s, %s, %s", q, k, v)
	}
	// k and v share a dtype (a KV cache's: float, or a block format such as q8_0); q may
	// differ (f32 queries over an f16 cache); the result has q's dtype.
	if !q.DType.IsFloat() || k.DType != v.DType || !k.DType.IsFloat() && !k.DType.CacheFormat() {
		return nil, fmt.Errorf("q must be float and k, v share a float or KV-cache dtype, got %s, %s, %s", q, k, v)
	}
	lay := AttentionLayouts(a)
	if err := checkAttnLayouts(lay); err != nil {
		return nil, err
	}
	sq, hq, d := LayoutDims(lay.Q, q.Shape)
	skv, hk, dk := LayoutDims(lay.K, k.Shape)
	sv, hv, dv := LayoutDims(lay.V, v.Shape)
	if dk != d || sv != skv || hv != hk {
		return nil, fmt.Errorf("q %s, k %s, v %s do not agree (layout %s)", q, k, v, lay)
	}
	if hk == 0 || hq%hk != 0 {
		return nil, fmt.Errorf("%d query heads are not a multiple of %d key/value heads", hq, hk)
	}
	if a.Int("window", 0) < 0 {
		return nil, fmt.Errorf("window must be ≥ 0")
	}
	if len(args) == 4 {
		if err := checkScalarInt("kv_len", args[3]); err != nil {
			return nil, err
		}
	}
	return one(Type{q.DType, LayoutShape(lay.Q, sq, hq, dv)}), nil
}

func conv1dInfer(a Attrs, args []Type) ([]Type, error) {
	x, w := args[0], args[1]
	r := x.Shape.Rank()
	if r != 2 && r != 3 || w.Shape.Rank() != 3 {
		return nil, fmt.Errorf("want x [cin, L] or [n, cin, L] and w [cout, cin/groups, k], got %s and %s", x, w)
	}
	if !x.DType.IsFloat() || x.DType != w.DType {
		return nil, fmt.Errorf("x and w must share a float dtype, got %s and %s", x, w)
	}
	cin, l := x.Shape[r-2], x.Shape[r-1]
	cout, cpg, kw := w.Shape[0], w.Shape[1], w.Shape[2]
	g := a.Int("groups", 1)
	st, pad, dil := a.Int("stride", 1), a.Int("padding", 0), a.Int("dilation", 1)
	if g <= 0 || st <= 0 || dil <= 0 || pad < 0 {
		return nil, fmt.Errorf("stride, dilation and groups must be positive and padding ≥ 0")
	}
	if cin%g != 0 || cout%g != 0 || cpg != cin/g {
		return nil, fmt.Errorf("w %s does not fit %d input channels in %d groups", w, cin, g)
	}
	if len(args) == 3 {
		if b := args[2]; b.Shape.Rank() != 1 || b.Shape[0] != cout {
			return nil, fmt.Errorf("bias must be [%d], got %s", cout, b)
		}
	}
	lout := (l+2*pad-dil*(kw-1)-1)/st + 1
	if lout <= 0 {
		return nil, fmt.Errorf("input length %d is too short for kernel %d", l, kw)
	}
	s := x.Shape.Clone()
	s[r-2], s[r-1] = cout, lout
	return one(Type{x.DType, s}), nil
}
