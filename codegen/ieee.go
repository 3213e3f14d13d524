package codegen

import "math"

// Operations whose special values SPIR-V leaves to the implementation, given the meaning Go's
// float64 functions have (the reference interpreter's): FMax and FMin may return either operand
// when one is a NaN, a float-to-integer conversion of a NaN or an out-of-range value is
// undefined, and GLSL's pow is undefined for x < 0 and for x = 0 with y ≤ 0. The plain Max, Min,
// Convert and Clamp keep SPIR-V's meaning (cheaper, and enough where the operands are known to be
// finite: indices, clamped positions, running maxima whose NaN reaches the result anyway).

// IsNaN reports whether x is a NaN, component-wise.
func (b *Builder) IsNaN(x Value) Value {
	rt := Vec(Bool, x.t.Len())
	if !b.ok("IsNaN", x) {
		return Value{t: rt}
	}
	if !x.t.IsFloat() {
		b.errorf("IsNaN", "not defined for %s", x.t)
		return Value{t: rt}
	}
	return b.inst(opIsNan, rt, x)
}

// MaxOrNaN is math.Max: the larger of x and y; +Inf when either is +Inf, else NaN when either is
// a NaN. For integers it is Max.
func (b *Builder) MaxOrNaN(x, y Value) Value {
	return b.goMinMax(b.Max(x, y), x, y, math.Inf(1))
}

// MinOrNaN is math.Min: the smaller of x and y; -Inf when either is -Inf, else NaN when either is
// a NaN. For integers it is Min.
func (b *Builder) MinOrNaN(x, y Value) Value {
	return b.goMinMax(b.Min(x, y), x, y, math.Inf(-1))
}

// goMinMax is r, except NaN where x or y is a NaN, and inf where either is inf (which wins over
// a NaN, as in Go).
func (b *Builder) goMinMax(r, x, y Value, inf float64) Value {
	if !r.t.IsFloat() || !b.ok("MaxOrNaN", r, x, y) {
		return r
	}
	x, y = b.broadcast(x, y)
	i := b.Const(x.t, inf)
	r = b.Select(b.Or(b.IsNaN(x), b.IsNaN(y)), b.Const(x.t, math.NaN()), r)
	return b.Select(b.Or(b.Eq(x, i), b.Eq(y, i)), i, r)
}

// ConvertSat converts x to t like Convert, except that a float converted to an integer type
// saturates at the type's bounds and a NaN becomes 0 (the interpreter's cast; SPIR-V leaves
// both undefined). Other conversions are Convert's.
func (b *Builder) ConvertSat(x Value, t Type) Value {
	if !b.ok("ConvertSat", x) || !x.t.IsFloat() || !t.IsInt() {
		return b.Convert(x, t)
	}
	if x.t.kind == F16Kind {
		x = b.Convert(x, Vec(F32, x.t.Len()))
	}
	f := func(v float64) Value { return b.Const(x.t, v) }
	// The largest f32 values below 2^31 and 2^32; both bounds are exactly representable, so the
	// clamped value converts without overflow.
	lo, hi, top := f(math.MinInt32), f(2147483520), b.Const(t, math.MaxInt32)
	if t.kind == U32Kind {
		lo, hi, top = f(0), f(4294967040), b.Const(t, math.MaxUint32)
	}
	r := b.Convert(b.Clamp(x, lo, hi), t)
	r = b.Select(b.Gt(x, hi), top, r)
	return b.Select(b.IsNaN(x), b.Const(t, 0), r)
}

// Pow is x^y with the special cases of C's pow and Go's math.Pow, from exp2(y·log2|x|):
// pow(x, ±0) = 1 and pow(1, y) = 1 for every x and y (NaN included), pow(-1, ±Inf) = 1, a negative
// x with an odd integer y gives the negated result and with a finite non-integer y a NaN, and a
// zero or infinite |x| or an infinite y gives 0 or Inf by the sign of y·log2|x| (set explicitly:
// exp2 and log2 of zeros, infinities and NaNs differ between devices).
func (b *Builder) Pow(x, y Value) Value {
	if !b.ok("Pow", x, y) {
		return Value{t: x.t}
	}
	x, y = b.broadcast(x, y)
	if !x.t.IsFloat() || x.t != y.t {
		b.errorf("Pow", "needs floats of one type, got %s and %s", x.t, y.t)
		return Value{t: x.t}
	}
	wide := x.t
	if x.t.kind == F16Kind {
		wide = Vec(F32, x.t.Len())
		return b.Convert(b.Pow(b.Convert(x, wide), b.Convert(y, wide)), x.t)
	}
	c := func(v float64) Value { return b.Const(x.t, v) }
	ax := b.Abs(x)
	r := b.ext("Exp2", glslExp2, isFloat, b.Mul(y, b.ext("Log2", glslLog2, isFloat, ax)))
	// Where |x| is 0 or Inf or y is infinite the magnitude is 0 or Inf, by the sign of
	// y·log2|x|; exp2 and log2 of zeros and infinities are not dependable (lavapipe's are not).
	inf := c(math.Inf(1))
	special := b.Or(b.Or(b.Eq(ax, c(0)), b.Eq(ax, inf)), b.Eq(b.Abs(y), inf))
	up := b.Eq(b.Gt(y, c(0)), b.Gt(ax, c(1)))
	r = b.Select(special, b.Select(up, inf, c(0)), r)
	integer := b.Eq(b.Floor(y), y) // false for NaN; true for ±Inf
	half := b.Mul(y, c(0.5))
	odd := b.And(integer, b.Ne(b.Floor(half), half)) // ±Inf: Inf·0.5 = Inf is "even"
	neg := b.Lt(x, c(0))                             // false for -0, which negZero catches
	bits := b.Bitcast(x, Vec(U32, x.t.Len()))
	negZero := b.Eq(bits, b.Const(Vec(U32, x.t.Len()), 0x80000000))
	r = b.Select(b.And(b.Or(neg, negZero), odd), b.Neg(r), r)
	finite := func(v Value) Value { return b.Lt(b.Abs(v), inf) }
	r = b.Select(b.And(b.And(neg, finite(x)), b.And(finite(y), b.Not(integer))), c(math.NaN()), r)
	// exp2 and log2 of a NaN are not dependable on every device (lavapipe's give 0).
	r = b.Select(b.Or(b.IsNaN(x), b.IsNaN(y)), c(math.NaN()), r)
	r = b.Select(b.And(b.Eq(x, c(-1)), b.Eq(b.Abs(y), inf)), c(1), r)
	return b.Select(b.Or(b.Eq(x, c(1)), b.Eq(y, c(0))), c(1), r)
}
