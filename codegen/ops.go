package codegen

import "math"

// ---- constants ----

// F32 is an f32 constant.
func (b *Builder) F32(x float32) Value { return b.constant(F32, math.Float32bits(x)) }

// F16 is an f16 constant, rounded to nearest even from x (needs FeatureFloat16).
func (b *Builder) F16(x float32) Value { return b.constant(F16, uint32(Float32ToHalf(x))) }

// I32 is an i32 constant.
func (b *Builder) I32(x int32) Value { return b.constant(I32, uint32(x)) }

// U32 is a u32 constant.
func (b *Builder) U32(x uint32) Value { return b.constant(U32, x) }

// Bool is a bool constant.
func (b *Builder) Bool(x bool) Value {
	if x {
		return b.constant(Bool, 1)
	}
	return b.constant(Bool, 0)
}

// BF16 is a bf16 constant, rounded to nearest even from x (needs FeatureBFloat16).
func (b *Builder) BF16(x float32) Value { return b.constant(BF16, uint32(Float32ToBF16(x))) }

// Const is the constant x converted to the scalar type t (floats rounded, integers truncated); for a
// vector type, every component is x; for a matrix type, every element (MatrixFill).
func (b *Builder) Const(t Type, x float64) Value {
	if t.IsMatrix() {
		return b.MatrixFill(t, b.Const(t.Elem(), x))
	}
	switch t {
	case F32:
		return b.F32(float32(x))
	case F16:
		return b.F16(float32(x))
	case BF16:
		return b.BF16(float32(x))
	case I32:
		return b.I32(int32(x))
	case U32:
		return b.U32(uint32(x))
	case Bool:
		return b.Bool(x != 0)
	}
	if t.IsVector() && t.Elem().Valid() {
		return b.Splat(b.Const(t.Elem(), x), t.Len())
	}
	b.errorf("Const", "invalid type %s", t)
	return Value{t: t}
}

func (b *Builder) constant(t Type, bits uint32) Value {
	if !b.ok("constant") {
		return Value{t: t}
	}
	return b.add(node{kind: kConst, t: t, lit: bits}, false)
}

// specOpAllowed lists the opcodes OpSpecConstantOp accepts in Shader modules; an operation of these
// on constant operands is itself a (specialization) constant, usable as an array length.
var specOpAllowed = map[opcode]bool{
	opSNegate: true, opNot: true, opIAdd: true, opISub: true, opIMul: true, opUDiv: true, opSDiv: true,
	opUMod: true, opSRem: true, opSMod: true, opShiftRightLogical: true, opShiftRightArithmetic: true,
	opShiftLeftLogical: true, opBitwiseOr: true, opBitwiseXor: true, opBitwiseAnd: true,
	opLogicalOr: true, opLogicalAnd: true, opLogicalNot: true, opLogicalEqual: true,
	opLogicalNotEqual: true, opSelect: true, opIEqual: true, opINotEqual: true, opULessThan: true,
	opSLessThan: true, opUGreaterThan: true, opSGreaterThan: true, opULessThanEqual: true,
	opSLessThanEqual: true, opUGreaterThanEqual: true, opSGreaterThanEqual: true,
}

// inst adds an instruction node: module-level when every operand is and the opcode may be a
// specialization-constant operation, otherwise in the current block.
func (b *Builder) inst(op opcode, t Type, args ...Value) Value {
	global := specOpAllowed[op]
	for _, a := range args {
		global = global && b.global(a)
	}
	if global {
		return b.add(node{kind: kSpecOp, t: t, op: op, ops: ids(args...)}, false)
	}
	return b.add(node{kind: kInst, t: t, op: op, ops: ids(args...), divergent: b.divergent(args...), lane: b.lane(args...)}, true)
}

// ---- vectors ----

// Vec builds a vector from two to four scalars of one type.
func (b *Builder) Vec(xs ...Value) Value {
	if !b.ok("Vec", xs...) {
		return Value{t: Vec(xs[0].t, len(xs))}
	}
	if len(xs) < 2 || len(xs) > 4 {
		b.errorf("Vec", "%d components (want 2 to 4)", len(xs))
		return Value{}
	}
	for _, x := range xs {
		if x.t != xs[0].t || x.t.IsVector() || x.t.IsMatrix() {
			b.errorf("Vec", "components must be scalars of one type, got %s and %s", xs[0].t, x.t)
			return Value{t: Vec(xs[0].t.Elem(), len(xs))}
		}
	}
	return b.inst(opCompositeConstruct, Vec(xs[0].t, len(xs)), xs...)
}

// Splat is the vector of n copies of the scalar x (x itself when n is 1).
func (b *Builder) Splat(x Value, n int) Value {
	if !b.ok("Splat", x) {
		return Value{t: Vec(x.t.Elem(), n)}
	}
	if x.t.IsVector() || x.t.IsMatrix() || n < 1 || n > 4 {
		b.errorf("Splat", "cannot splat %s to %d components", x.t, n)
		return Value{}
	}
	if n == 1 {
		return x
	}
	xs := make([]Value, n)
	for i := range xs {
		xs[i] = x
	}
	return b.inst(opCompositeConstruct, Vec(x.t, n), xs...)
}

// Extract is component i of the vector v, or component i of the invocation's part of the
// cooperative matrix v (i < MatrixLength; which element of the matrix that is, the device decides).
func (b *Builder) Extract(v Value, i int) Value {
	if !b.ok("Extract", v) {
		return Value{t: v.t.Elem()}
	}
	if v.t.IsMatrix() && i >= 0 {
		n := node{kind: kInst, t: v.t.Elem(), op: opCompositeExtract, ops: []operand{{id: v.id}, {lit: uint32(i), isLit: true}}, divergent: true, lane: true}
		return b.add(n, true)
	}
	if i < 0 || i >= v.t.Len() || !v.t.IsVector() {
		b.errorf("Extract", "component %d of %s", i, v.t)
		return Value{t: v.t.Elem()}
	}
	n := node{kind: kInst, t: v.t.Elem(), op: opCompositeExtract, ops: []operand{{id: v.id}, {lit: uint32(i), isLit: true}}, divergent: b.divergent(v), lane: b.lane(v)}
	return b.add(n, true)
}

// X, Y and Z are components 0, 1 and 2 of a vector (handy for the vec3 built-ins).
func (b *Builder) X(v Value) Value { return b.Extract(v, 0) }

// Y is component 1 of v.
func (b *Builder) Y(v Value) Value { return b.Extract(v, 1) }

// Z is component 2 of v.
func (b *Builder) Z(v Value) Value { return b.Extract(v, 2) }

// Dot is the dot product of two float vectors of one type.
func (b *Builder) Dot(x, y Value) Value {
	if !b.ok("Dot", x, y) {
		return Value{t: x.t.Elem()}
	}
	if x.t != y.t || !x.t.IsFloat() || !x.t.IsVector() || !x.t.arith() {
		b.errorf("Dot", "needs two float vectors of one type (f32 or f16), got %s and %s", x.t, y.t)
		return Value{t: x.t.Elem()}
	}
	return b.inst(opDot, x.t.Elem(), x, y)
}

// ---- arithmetic, bitwise, comparison ----

// opsByKind picks an opcode by the element kind: float, signed, unsigned, bool (0: not defined).
type opsByKind struct{ f, s, u, b opcode }

func (o opsByKind) pick(t Type) opcode {
	switch t.kind {
	case F32Kind, F16Kind:
		return o.f
	case I32Kind:
		return o.s
	case U32Kind:
		return o.u
	case BoolKind:
		return o.b
	}
	return 0
}

// broadcast makes a scalar operand match a vector one.
func (b *Builder) broadcast(x, y Value) (Value, Value) {
	if x.t.IsVector() && !y.t.IsVector() && y.t == x.t.Elem() {
		y = b.Splat(y, x.t.Len())
	} else if y.t.IsVector() && !x.t.IsVector() && x.t == y.t.Elem() {
		x = b.Splat(x, y.t.Len())
	}
	return x, y
}

func (b *Builder) binary(name string, ops opsByKind, cmp bool, x, y Value) Value {
	rt := x.t
	if cmp {
		rt = Vec(Bool, x.t.Len())
	}
	if !b.ok(name, x, y) {
		return Value{t: rt}
	}
	if x.t.IsMatrix() || y.t.IsMatrix() {
		return b.matrixBinary(name, ops, cmp, x, y)
	}
	x, y = b.broadcast(x, y)
	if x.t != y.t {
		b.errorf(name, "operand types differ: %s and %s", x.t, y.t)
		return Value{t: rt}
	}
	op := ops.pick(x.t)
	if op == 0 {
		b.errorf(name, "not defined for %s", x.t)
		return Value{t: rt}
	}
	rt = x.t // a broadcast scalar operand widens the result
	if cmp {
		rt = Vec(Bool, x.t.Len())
	}
	return b.inst(op, rt, x, y)
}

// Add is x + y (a scalar operand is broadcast to the other's vector width).
func (b *Builder) Add(x, y Value) Value {
	return b.binary("Add", opsByKind{f: opFAdd, s: opIAdd, u: opIAdd}, false, x, y)
}

// Sub is x - y.
func (b *Builder) Sub(x, y Value) Value {
	return b.binary("Sub", opsByKind{f: opFSub, s: opISub, u: opISub}, false, x, y)
}

// Mul is x * y.
func (b *Builder) Mul(x, y Value) Value {
	return b.binary("Mul", opsByKind{f: opFMul, s: opIMul, u: opIMul}, false, x, y)
}

// Div is x / y (integer division truncates).
func (b *Builder) Div(x, y Value) Value {
	return b.binary("Div", opsByKind{f: opFDiv, s: opSDiv, u: opUDiv}, false, x, y)
}

// Rem is the remainder of x / y with the sign of x.
func (b *Builder) Rem(x, y Value) Value {
	return b.binary("Rem", opsByKind{f: opFRem, s: opSRem, u: opUMod}, false, x, y)
}

// And is x & y for integers and x && y for bools.
func (b *Builder) And(x, y Value) Value {
	return b.binary("And", opsByKind{s: opBitwiseAnd, u: opBitwiseAnd, b: opLogicalAnd}, false, x, y)
}

// Or is x | y for integers and x || y for bools.
func (b *Builder) Or(x, y Value) Value {
	return b.binary("Or", opsByKind{s: opBitwiseOr, u: opBitwiseOr, b: opLogicalOr}, false, x, y)
}

// Xor is x ^ y for integers and x != y for bools.
func (b *Builder) Xor(x, y Value) Value {
	return b.binary("Xor", opsByKind{s: opBitwiseXor, u: opBitwiseXor, b: opLogicalNotEqual}, false, x, y)
}

// Shl is x << y.
func (b *Builder) Shl(x, y Value) Value {
	return b.shift("Shl", opShiftLeftLogical, opShiftLeftLogical, x, y)
}

// Shr is x >> y: arithmetic for i32, logical for u32.
func (b *Builder) Shr(x, y Value) Value {
	return b.shift("Shr", opShiftRightArithmetic, opShiftRightLogical, x, y)
}

func (b *Builder) shift(name string, s, u opcode, x, y Value) Value {
	if !b.ok(name, x, y) {
		return Value{t: x.t}
	}
	if !x.t.IsInt() || !y.t.IsInt() || x.t.Len() != y.t.Len() || x.t.IsMatrix() || y.t.IsMatrix() {
		b.errorf(name, "needs integers of one width, got %s and %s", x.t, y.t)
		return Value{t: x.t}
	}
	if x.t.kind == I32Kind {
		return b.inst(s, x.t, x, y)
	}
	return b.inst(u, x.t, x, y)
}

// Eq is x == y.
func (b *Builder) Eq(x, y Value) Value {
	return b.binary("Eq", opsByKind{f: opFOrdEqual, s: opIEqual, u: opIEqual, b: opLogicalEqual}, true, x, y)
}

// Ne is x != y (true when either float operand is NaN).
func (b *Builder) Ne(x, y Value) Value {
	return b.binary("Ne", opsByKind{f: opFUnordNotEqual, s: opINotEqual, u: opINotEqual, b: opLogicalNotEqual}, true, x, y)
}

// Lt is x < y.
func (b *Builder) Lt(x, y Value) Value {
	return b.binary("Lt", opsByKind{f: opFOrdLessThan, s: opSLessThan, u: opULessThan}, true, x, y)
}

// Le is x <= y.
func (b *Builder) Le(x, y Value) Value {
	return b.binary("Le", opsByKind{f: opFOrdLessThanEqual, s: opSLessThanEqual, u: opULessThanEqual}, true, x, y)
}

// Gt is x > y.
func (b *Builder) Gt(x, y Value) Value {
	return b.binary("Gt", opsByKind{f: opFOrdGreaterThan, s: opSGreaterThan, u: opUGreaterThan}, true, x, y)
}

// Ge is x >= y.
func (b *Builder) Ge(x, y Value) Value {
	return b.binary("Ge", opsByKind{f: opFOrdGreaterThanEqual, s: opSGreaterThanEqual, u: opUGreaterThanEqual}, true, x, y)
}

// Neg is -x.
func (b *Builder) Neg(x Value) Value {
	if !b.ok("Neg", x) {
		return Value{t: x.t}
	}
	op := opsByKind{f: opFNegate, s: opSNegate}.pick(x.t)
	if op == 0 {
		b.errorf("Neg", "not defined for %s", x.t)
		return Value{t: x.t}
	}
	return b.inst(op, x.t, x)
}

// Not is ^x for integers and !x for bools.
func (b *Builder) Not(x Value) Value {
	if !b.ok("Not", x) {
		return Value{t: x.t}
	}
	op := opsByKind{s: opNot, u: opNot, b: opLogicalNot}.pick(x.t)
	if op == 0 || x.t.IsMatrix() {
		b.errorf("Not", "not defined for %s", x.t)
		return Value{t: x.t}
	}
	return b.inst(op, x.t, x)
}

// Select is c ? x : y, component-wise when c is a bool vector; a scalar c with vector operands
// selects whole vectors.
func (b *Builder) Select(c, x, y Value) Value {
	if !b.ok("Select", c, x, y) {
		return Value{t: x.t}
	}
	if x.t != y.t {
		b.errorf("Select", "operand types differ: %s and %s", x.t, y.t)
		return Value{t: x.t}
	}
	if x.t.IsMatrix() {
		b.errorf("Select", "cannot select cooperative matrices (%s)", x.t)
		return Value{t: x.t}
	}
	if c.t == Bool && x.t.IsVector() {
		c = b.Splat(c, x.t.Len()) // a scalar condition with vector operands needs SPIR-V 1.4
	}
	if c.t != Vec(Bool, x.t.Len()) {
		b.errorf("Select", "condition is %s, operands %s", c.t, x.t)
		return Value{t: x.t}
	}
	return b.inst(opSelect, x.t, c, x, y)
}

// ---- conversions ----

// Convert converts x to t, which has as many components as x: floats to integers truncate toward
// zero, i32 and u32 convert by reinterpreting the bits, bools become 0 or 1, and numbers become
// bools by comparison with zero.
func (b *Builder) Convert(x Value, t Type) Value {
	if !b.ok("Convert", x) {
		return Value{t: t}
	}
	if !t.Valid() || t.Len() != x.t.Len() || t.IsMatrix() != x.t.IsMatrix() {
		b.errorf("Convert", "cannot convert %s to %s", x.t, t)
		return Value{t: t}
	}
	if x.t == t {
		return x
	}
	if t.IsMatrix() {
		if t.use != x.t.use || t.scope != x.t.scope || t.rows != x.t.rows || t.cols != x.t.cols {
			b.errorf("Convert", "cannot convert %s to %s: a conversion keeps the scope, shape and use", x.t, t)
			return Value{t: t}
		}
	}
	if x.t.kind == BF16Kind && t.IsBool() {
		return b.Convert(b.Convert(x, Vec(F32, x.t.Len())), t)
	}
	switch {
	case x.t.IsBool():
		return b.Select(x, b.Const(t, 1), b.Const(t, 0))
	case t.IsBool():
		return b.Ne(x, b.Const(x.t, 0))
	case x.t.IsFloat() && t.IsFloat():
		return b.inst(opFConvert, t, x)
	case x.t.IsFloat():
		return b.inst(opsByKind{s: opConvertFToS, u: opConvertFToU}.pick(t), t, x)
	case t.IsFloat():
		return b.inst(opsByKind{s: opConvertSToF, u: opConvertUToF}.pick(x.t), t, x)
	default: // i32 <-> u32
		return b.inst(opBitcast, t, x)
	}
}

// Bitcast reinterprets the bits of x as t, which has the same size.
func (b *Builder) Bitcast(x Value, t Type) Value {
	if !b.ok("Bitcast", x) {
		return Value{t: t}
	}
	if !t.Valid() || t.IsBool() || x.t.IsBool() || t.IsMatrix() || x.t.IsMatrix() || t.Size() != x.t.Size() {
		b.errorf("Bitcast", "cannot reinterpret %s as %s", x.t, t)
		return Value{t: t}
	}
	if x.t == t {
		return x
	}
	return b.inst(opBitcast, t, x)
}

// ---- GLSL.std.450 ----

func (b *Builder) ext(name string, inst uint32, ok func(Type) bool, args ...Value) Value {
	if !b.ok(name, args...) {
		return Value{t: args[0].t}
	}
	for i := 1; i < len(args); i++ {
		args[0], args[i] = b.broadcast(args[0], args[i])
	}
	for _, a := range args {
		if a.t != args[0].t {
			b.errorf(name, "operand types differ: %s and %s", args[0].t, a.t)
			return Value{t: args[0].t}
		}
	}
	if !ok(args[0].t) {
		b.errorf(name, "not defined for %s", args[0].t)
		return Value{t: args[0].t}
	}
	if t := args[0].t; t.kind == F16Kind && f16ViaF32[inst] && !b.nativeF16Math {
		wide := make([]Value, len(args))
		for i, a := range args {
			wide[i] = b.Convert(a, Vec(F32, t.Len()))
		}
		return b.Convert(b.ext(name, inst, ok, wide...), t)
	}
	return b.add(node{kind: kExt, t: args[0].t, lit: inst, ops: ids(args...), divergent: b.divergent(args...), lane: b.lane(args...)}, true)
}

// f16ViaF32 lists the GLSL.std.450 functions the builder computes in f32 for f16 operands unless
// UseNativeF16Math is set. Why: lavapipe (Mesa 22.3 with LLVM 15, Debian 12) crashes compiling
// these instructions on 16-bit floats, also in modules from glslc; and GLSL gives f16 versions
// loose precision anyway. Sqrt, InverseSqrt, Floor, Fma, Min, Max, Clamp and Abs run natively.
var f16ViaF32 = map[uint32]bool{glslExp: true, glslExp2: true, glslLog: true, glslSin: true,
	glslCos: true, glslTanh: true, glslPow: true}

// UseNativeF16Math makes Exp, Exp2, Log, Sin, Cos, Tanh and Pow on f16 operands emit the f16
// instructions instead of computing in f32 (see f16ViaF32): for devices known to handle them,
// where the f32 round trip costs measurable time.
func (b *Builder) UseNativeF16Math(on bool) { b.nativeF16Math = on }

func isFloat(t Type) bool   { return t.IsFloat() && t.arith() }
func isNumeric(t Type) bool { return t.arith() }

// Exp is e^x.
func (b *Builder) Exp(x Value) Value { return b.ext("Exp", glslExp, isFloat, x) }

// Exp2 is 2^x.
func (b *Builder) Exp2(x Value) Value { return b.ext("Exp2", glslExp2, isFloat, x) }

// Log is the natural logarithm.
func (b *Builder) Log(x Value) Value { return b.ext("Log", glslLog, isFloat, x) }

// Sqrt is the square root.
func (b *Builder) Sqrt(x Value) Value { return b.ext("Sqrt", glslSqrt, isFloat, x) }

// InverseSqrt is 1/sqrt(x).
func (b *Builder) InverseSqrt(x Value) Value {
	return b.ext("InverseSqrt", glslInverseSqrt, isFloat, x)
}

// Sin is the sine.
func (b *Builder) Sin(x Value) Value { return b.ext("Sin", glslSin, isFloat, x) }

// Cos is the cosine.
func (b *Builder) Cos(x Value) Value { return b.ext("Cos", glslCos, isFloat, x) }

// Tanh is the hyperbolic tangent. GLSL leaves its precision to the implementation; a kernel that
// needs a bound on large inputs should clamp x first.
func (b *Builder) Tanh(x Value) Value { return b.ext("Tanh", glslTanh, isFloat, x) }

// Floor rounds toward negative infinity.
func (b *Builder) Floor(x Value) Value { return b.ext("Floor", glslFloor, isFloat, x) }

// Fma is x*y + z.
func (b *Builder) Fma(x, y, z Value) Value { return b.ext("Fma", glslFma, isFloat, x, y, z) }

// Min is the smaller of x and y; for a NaN operand of a float it may give either operand (SPIR-V's
// FMin). MinOrNaN propagates NaN.
func (b *Builder) Min(x, y Value) Value {
	return b.ext("Min", pickExt(x.t, glslFMin, glslSMin, glslUMin), isNumeric, x, y)
}

// Max is the larger of x and y; for a NaN operand of a float it may give either operand (SPIR-V's
// FMax). MaxOrNaN propagates NaN.
func (b *Builder) Max(x, y Value) Value {
	return b.ext("Max", pickExt(x.t, glslFMax, glslSMax, glslUMax), isNumeric, x, y)
}

// Clamp is min(max(x, lo), hi); undefined for a NaN x (SPIR-V's FClamp).
func (b *Builder) Clamp(x, lo, hi Value) Value {
	return b.ext("Clamp", pickExt(x.t, glslFClamp, glslSClamp, glslUClamp), isNumeric, x, lo, hi)
}

// Abs is |x| (not defined for u32).
func (b *Builder) Abs(x Value) Value {
	return b.ext("Abs", pickExt(x.t, glslFAbs, glslSAbs, 0), func(t Type) bool { return t.arith() && (t.IsFloat() || t.kind == I32Kind) }, x)
}

func pickExt(t Type, f, s, u uint32) uint32 {
	switch t.kind {
	case I32Kind:
		return s
	case U32Kind:
		return u
	}
	return f
}

// ---- subgroup operations ----

// subgroupOp adds a GroupNonUniform instruction at subgroup scope; group is the GroupOperation
// literal, or -1 for instructions without one.
func (b *Builder) subgroupOp(name string, op opcode, group int, x Value, extra ...Value) Value {
	if x.t.IsMatrix() || x.t.kind == BF16Kind {
		b.errorf(name, "not defined for %s", x.t)
		return Value{t: x.t}
	}
	sc := b.U32(scopeSubgroup)
	ops := []operand{{id: sc.id}}
	if group >= 0 {
		ops = append(ops, operand{lit: uint32(group), isLit: true})
	}
	ops = append(ops, operand{id: x.id})
	for _, e := range extra {
		ops = append(ops, operand{id: e.id})
	}
	// A reduction or broadcast is the same in every invocation of the subgroup; a shuffle of a
	// subgroup-uniform value is too.
	lane := b.lane(x)
	switch op {
	case opGroupNonUniformBroadcast, opGroupNonUniformBroadcastFirst:
		lane = false
	default:
		if group == groupOpReduce {
			lane = false
		}
	}
	return b.add(node{kind: kInst, t: x.t, op: op, ops: ops, divergent: b.divergent(append(extra, x)...), lane: lane}, true)
}

func (b *Builder) subgroupReduce(name string, ops opsByKind, x Value) Value {
	if !b.ok(name, x) {
		return Value{t: x.t}
	}
	op := ops.pick(x.t)
	if op == 0 || x.t.IsMatrix() {
		b.errorf(name, "not defined for %s", x.t)
		return Value{t: x.t}
	}
	return b.subgroupOp(name, op, groupOpReduce, x)
}

// SubgroupAdd is the sum of x over the active invocations of the subgroup (needs
// FeatureSubgroupArithmetic).
func (b *Builder) SubgroupAdd(x Value) Value {
	return b.subgroupReduce("SubgroupAdd", opsByKind{f: opGroupNonUniformFAdd, s: opGroupNonUniformIAdd, u: opGroupNonUniformIAdd}, x)
}

// SubgroupMax is the maximum of x over the active invocations of the subgroup.
func (b *Builder) SubgroupMax(x Value) Value {
	return b.subgroupReduce("SubgroupMax", opsByKind{f: opGroupNonUniformFMax, s: opGroupNonUniformSMax, u: opGroupNonUniformUMax}, x)
}

// SubgroupMin is the minimum of x over the active invocations of the subgroup.
func (b *Builder) SubgroupMin(x Value) Value {
	return b.subgroupReduce("SubgroupMin", opsByKind{f: opGroupNonUniformFMin, s: opGroupNonUniformSMin, u: opGroupNonUniformUMin}, x)
}

// SubgroupBroadcast is x of the invocation lane, which must be a constant or specialization constant
// before SPIR-V 1.5 (use SubgroupShuffle for a computed lane). Needs FeatureSubgroupBallot.
func (b *Builder) SubgroupBroadcast(x, lane Value) Value {
	if !b.ok("SubgroupBroadcast", x, lane) {
		return Value{t: x.t}
	}
	if !b.global(lane) || lane.t != U32 {
		b.errorf("SubgroupBroadcast", "lane must be a u32 constant (SPIR-V 1.3); use SubgroupShuffle for a computed lane")
		return Value{t: x.t}
	}
	return b.subgroupOp("SubgroupBroadcast", opGroupNonUniformBroadcast, -1, x, lane)
}

// SubgroupBroadcastFirst is x of the lowest active invocation. Needs FeatureSubgroupBallot.
func (b *Builder) SubgroupBroadcastFirst(x Value) Value {
	if !b.ok("SubgroupBroadcastFirst", x) {
		return Value{t: x.t}
	}
	return b.subgroupOp("SubgroupBroadcastFirst", opGroupNonUniformBroadcastFirst, -1, x)
}

// SubgroupShuffle is x of invocation lane (a u32). Needs FeatureSubgroupShuffle.
func (b *Builder) SubgroupShuffle(x, lane Value) Value {
	if !b.ok("SubgroupShuffle", x, lane) {
		return Value{t: x.t}
	}
	if lane.t != U32 {
		b.errorf("SubgroupShuffle", "lane must be u32, got %s", lane.t)
		return Value{t: x.t}
	}
	return b.subgroupOp("SubgroupShuffle", opGroupNonUniformShuffle, -1, x, lane)
}

// SubgroupShuffleXor is x of invocation (own id ^ mask), mask a u32. Needs FeatureSubgroupShuffle.
func (b *Builder) SubgroupShuffleXor(x, mask Value) Value {
	if !b.ok("SubgroupShuffleXor", x, mask) {
		return Value{t: x.t}
	}
	if mask.t != U32 {
		b.errorf("SubgroupShuffleXor", "mask must be u32, got %s", mask.t)
		return Value{t: x.t}
	}
	return b.subgroupOp("SubgroupShuffleXor", opGroupNonUniformShuffleXor, -1, x, mask)
}

// ---- barriers ----

// Scope is a SPIR-V execution or memory scope.
type Scope uint32

const (
	ScopeDevice    Scope = scopeDevice
	ScopeWorkgroup Scope = scopeWorkgroup
	ScopeSubgroup  Scope = scopeSubgroup
)

// Semantics says which memory a barrier orders. The emitter adds AcquireRelease whenever a storage
// class is named, as Vulkan requires.
type Semantics uint32

const (
	// SemWorkgroup orders workgroup-shared memory.
	SemWorkgroup Semantics = semWorkgroupMemory
	// SemStorageBuffer orders storage-buffer memory (SPIR-V UniformMemory).
	SemStorageBuffer Semantics = semUniformMemory
)

// Barrier is a workgroup execution barrier that also orders workgroup-shared memory (GLSL's
// barrier()). Every invocation of the workgroup must reach it: the builder rejects a barrier under a
// condition it knows to differ between invocations.
func (b *Builder) Barrier() { b.ControlBarrier(ScopeWorkgroup, ScopeWorkgroup, SemWorkgroup) }

// ControlBarrier waits for every invocation in exec, and orders the memory in sem at scope mem.
func (b *Builder) ControlBarrier(exec, mem Scope, sem Semantics) {
	if !b.ok("ControlBarrier") {
		return
	}
	b.add(node{kind: kBarrier, ops: ids(b.U32(uint32(exec)), b.U32(uint32(mem)), b.U32(semantics(sem)))}, true)
}

// MemoryBarrier orders the memory in sem at scope mem, without waiting for other invocations.
func (b *Builder) MemoryBarrier(mem Scope, sem Semantics) {
	if !b.ok("MemoryBarrier") {
		return
	}
	if sem == 0 {
		b.errorf("MemoryBarrier", "no memory named: a memory barrier needs SemWorkgroup and/or SemStorageBuffer")
		return
	}
	b.add(node{kind: kMemBarrier, ops: ids(b.U32(uint32(mem)), b.U32(semantics(sem)))}, true)
}

func semantics(s Semantics) uint32 {
	if s != 0 {
		return uint32(s) | semAcquireRelease
	}
	return 0
}

// ---- atomics ----

// AtomicAdd adds x to element i of a read-write buffer or a shared array atomically and returns the
// element's previous value. Integers only (float atomics need extensions vkc does not use); relaxed
// ordering at device scope for buffers and workgroup scope for shared arrays: order other accesses
// with a barrier.
func (b *Builder) AtomicAdd(m Memory, i, x Value) Value {
	return b.atomic("AtomicAdd", opsByKind{s: opAtomicIAdd, u: opAtomicIAdd}, m, i, x)
}

// AtomicMin stores min(element, x) atomically and returns the previous value.
func (b *Builder) AtomicMin(m Memory, i, x Value) Value {
	return b.atomic("AtomicMin", opsByKind{s: opAtomicSMin, u: opAtomicUMin}, m, i, x)
}

// AtomicMax stores max(element, x) atomically and returns the previous value.
func (b *Builder) AtomicMax(m Memory, i, x Value) Value {
	return b.atomic("AtomicMax", opsByKind{s: opAtomicSMax, u: opAtomicUMax}, m, i, x)
}

// AtomicExchange stores x atomically and returns the previous value.
func (b *Builder) AtomicExchange(m Memory, i, x Value) Value {
	return b.atomic("AtomicExchange", opsByKind{s: opAtomicExchange, u: opAtomicExchange}, m, i, x)
}

func (b *Builder) atomic(name string, ops opsByKind, m Memory, i, x Value) Value {
	idx, ok := b.mem(name, m)
	if !ok {
		return Value{t: x.t}
	}
	mo := &b.mems[idx]
	if !b.ok(name, i, x) || !b.index(name, i) {
		return Value{t: mo.elem}
	}
	if mo.access != ReadWrite {
		b.errorf(name, "%q is %s; atomics need a read-write buffer or a shared array", mo.name, mo.access)
		return Value{t: mo.elem}
	}
	if mo.kind == memLocal {
		b.errorf(name, "%q is a function-local array; atomics act on buffers and shared arrays", mo.name)
		return Value{t: mo.elem}
	}
	if x.t != mo.elem || !mo.elem.IsInt() || mo.elem.IsVector() {
		b.errorf(name, "needs an i32 or u32 element and value, %q holds %s, value is %s", mo.name, mo.elem, x.t)
		return Value{t: mo.elem}
	}
	scope := uint32(scopeDevice)
	if mo.kind == memShared {
		scope = scopeWorkgroup
	}
	return b.add(node{kind: kAtomic, t: mo.elem, op: ops.pick(x.t), mem: idx,
		ops: ids(i, x, b.U32(scope), b.U32(0)), divergent: true, lane: true}, true)
}
