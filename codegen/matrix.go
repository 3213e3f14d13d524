package codegen

// Cooperative matrices (SPV_KHR_cooperative_matrix). The types are made with Matrix (types.go);
// this file holds the operations on them. Every operation on a matrix is "tangled": all the
// invocations of the matrix's scope must execute it together, with the same operands. The builder
// rejects a matrix operation under a condition, or in a loop, that it knows to differ between the
// invocations of a subgroup, and a load or store whose address or stride depends on the invocation
// within its subgroup (a value derived from LocalIndex, LocalID, GlobalID or SubgroupInvocation);
// SubgroupID and WorkgroupID are the ids a matrix operation may depend on. Like the barrier check,
// this rejects sure mistakes and proves nothing about data-dependent values.
//
// A module with a cooperative matrix uses the Vulkan memory model (OpMemoryModel Logical Vulkan,
// capability VulkanMemoryModel, extension SPV_KHR_vulkan_memory_model in SPIR-V 1.3), which SPIR-V
// requires of Shader modules that declare CooperativeMatrixKHR (spirv-val checks it since
// v2025.2); see UseVulkanMemoryModel for what that changes in the rest of the module.

// MatrixLayout is how a matrix sits in memory for MatrixLoad and MatrixStore.
type MatrixLayout uint8

const (
	// RowMajor: element (r, c) is at index i + r·stride + c.
	RowMajor MatrixLayout = iota
	// ColumnMajor: element (r, c) is at index i + c·stride + r.
	ColumnMajor
)

func (l MatrixLayout) String() string {
	if l == ColumnMajor {
		return "column-major"
	}
	return "row-major"
}

// MatrixOperands are the optional operands of MatrixMulAdd: which integer matrices are signed,
// and whether the accumulation saturates. Floating-point products take none.
type MatrixOperands uint32

const (
	SignedA      MatrixOperands = matrixOperandMatrixASignedComponentsKHR
	SignedB      MatrixOperands = matrixOperandMatrixBSignedComponentsKHR
	SignedC      MatrixOperands = matrixOperandMatrixCSignedComponentsKHR
	SignedResult MatrixOperands = matrixOperandMatrixResultSignedComponentsKHR
	Saturating   MatrixOperands = matrixOperandSaturatingAccumulationKHR
)

// checkMatrixMem checks the memory, index and stride of a matrix load or store.
func (b *Builder) checkMatrixMem(construct string, m Memory, i, stride Value, layout MatrixLayout) (int32, bool) {
	idx, ok := b.mem(construct, m)
	if !ok || !b.ok(construct, i, stride) || !b.index(construct, i) {
		return 0, false
	}
	mo := &b.mems[idx]
	switch {
	case mo.kind == memLocal:
		b.errorf(construct, "%q is a function-local array; matrices are loaded from and stored to buffers and shared arrays", mo.name)
	case !stride.t.IsInt() || stride.t.IsVector():
		b.errorf(construct, "stride must be an i32 or u32 scalar, got %s", stride.t)
	case b.lane(i, stride):
		b.errorf(construct, "the address and stride of a matrix in %q differ between the invocations of a subgroup (they depend on the invocation's index in its subgroup); every invocation of the subgroup must pass the same values", mo.name)
	case layout != RowMajor && layout != ColumnMajor:
		b.errorf(construct, "invalid layout %d", layout)
	default:
		return idx, true
	}
	return 0, false
}

// MatrixLoad loads the matrix of type t (made by Matrix) whose first element is element i of the
// buffer or shared array m, in layout with stride elements of m between rows (RowMajor) or columns
// (ColumnMajor). m's element type may differ from the matrix's (a shared array of vec4<u32> holding
// f16 pairs, say): i and stride then count m's elements. The device requires an alignment of the
// first element and the stride that depends on it (16 bytes is safe).
func (b *Builder) MatrixLoad(t Type, m Memory, i, stride Value, layout MatrixLayout) Value {
	idx, ok := b.checkMatrixMem("MatrixLoad", m, i, stride, layout)
	if !ok {
		return Value{t: t}
	}
	if !t.IsMatrix() || !t.Valid() {
		b.errorf("MatrixLoad", "type %s is not a cooperative matrix", t)
		return Value{t: t}
	}
	if b.mems[idx].access == WriteOnly {
		b.errorf("MatrixLoad", "load from write-only buffer %q", b.mems[idx].name)
		return Value{t: t}
	}
	if b.emulate && emuRatio(b.mems[idx].elem, t.Elem()) == 0 {
		b.errorf("MatrixLoad", "emulated matrices of %s cannot be loaded from %q's %s elements", t.Elem(), b.mems[idx].name, b.mems[idx].elem)
		return Value{t: t}
	}
	return b.add(node{kind: kMatLoad, t: t, mem: idx, ops: ids(i, stride), lit: uint32(layout), divergent: b.divergent(i, stride)}, true)
}

// MatrixStore stores the matrix x to the buffer or shared array m, its first element at element i,
// in layout with stride elements between rows or columns (see MatrixLoad).
func (b *Builder) MatrixStore(m Memory, i, x, stride Value, layout MatrixLayout) {
	idx, ok := b.checkMatrixMem("MatrixStore", m, i, stride, layout)
	if !ok || !b.ok("MatrixStore", x) {
		return
	}
	if !x.t.IsMatrix() {
		b.errorf("MatrixStore", "value is %s, not a cooperative matrix", x.t)
		return
	}
	if b.mems[idx].access == ReadOnly {
		b.errorf("MatrixStore", "store to read-only buffer %q", b.mems[idx].name)
		return
	}
	if me := b.mems[idx].elem; b.emulate && me.Elem() != x.t.Elem() {
		b.errorf("MatrixStore", "emulated matrices of %s cannot be stored to %q's %s elements", x.t.Elem(), b.mems[idx].name, me)
		return
	}
	b.add(node{kind: kMatStore, mem: idx, ops: ids(i, x, stride), lit: uint32(layout), aux: x.t}, true)
}

// MatrixMulAdd is x·y + acc: x an M×K MatrixA, y a K×N MatrixB, acc an M×N accumulator, all of one
// scope; the result has acc's type. ops says which integer matrices are signed and whether the
// accumulation saturates (integer products only); pass 0 for floats. Which combinations of element
// types and shapes a device multiplies is in its VkCooperativeMatrixPropertiesKHR list.
func (b *Builder) MatrixMulAdd(x, y, acc Value, ops MatrixOperands) Value {
	if !b.ok("MatrixMulAdd", x, y, acc) {
		return Value{t: acc.t}
	}
	a, bt, c := x.t, y.t, acc.t
	switch {
	case a.use != MatrixA || bt.use != MatrixB || c.use != MatrixAcc:
		b.errorf("MatrixMulAdd", "operands must be a MatrixA, a MatrixB and an accumulator, got %s, %s, %s", a, bt, c)
	case a.scope != bt.scope || a.scope != c.scope:
		b.errorf("MatrixMulAdd", "operands have different scopes: %s, %s, %s", a, bt, c)
	case a.rows != c.rows || bt.cols != c.cols || a.cols != bt.rows:
		b.errorf("MatrixMulAdd", "shapes do not make an MxNxK product: A %dx%d, B %dx%d, accumulator %dx%d", a.rows, a.cols, bt.rows, bt.cols, c.rows, c.cols)
	case ops&^(SignedA|SignedB|SignedC|SignedResult|Saturating) != 0:
		b.errorf("MatrixMulAdd", "unknown operand bits %#x", uint32(ops))
	case ops&SignedA != 0 && !a.IsInt(), ops&SignedB != 0 && !bt.IsInt(), ops&(SignedC|SignedResult) != 0 && !c.IsInt():
		b.errorf("MatrixMulAdd", "signedness operands apply to integer matrices only (%s, %s, %s)", a, bt, c)
	case ops&Saturating != 0 && !c.IsInt():
		b.errorf("MatrixMulAdd", "saturating accumulation applies to integer accumulators only, got %s", c)
	case ops&Saturating != 0 && b.emulate:
		b.errorf("MatrixMulAdd", "saturating accumulation is not emulated")
	case (a.IsInt() || bt.IsInt() || c.IsInt()) && !(a.IsInt() && bt.IsInt() && c.IsInt()):
		b.errorf("MatrixMulAdd", "cannot mix integer and floating-point matrices: %s, %s, %s", a, bt, c)
	default:
		n := node{kind: kInst, t: c, op: opCooperativeMatrixMulAddKHR, ops: ids(x, y, acc), divergent: b.divergent(x, y, acc)}
		if ops != 0 {
			n.ops = append(n.ops, operand{lit: uint32(ops), isLit: true})
		}
		return b.add(n, true)
	}
	return Value{t: c}
}

// MatrixFill is the matrix of type t whose every element is x, a scalar of t's element type that
// every invocation of the matrix's scope must give the same value.
func (b *Builder) MatrixFill(t Type, x Value) Value {
	if !b.ok("MatrixFill", x) {
		return Value{t: t}
	}
	if !t.IsMatrix() || !t.Valid() {
		b.errorf("MatrixFill", "type %s is not a cooperative matrix", t)
		return Value{t: t}
	}
	if x.t != t.Elem() {
		b.errorf("MatrixFill", "%s is filled with %s values, got %s", t, t.Elem(), x.t)
		return Value{t: t}
	}
	if b.lane(x) {
		b.errorf("MatrixFill", "the fill value differs between the invocations of a subgroup")
		return Value{t: t}
	}
	return b.add(node{kind: kInst, t: t, op: opCompositeConstruct, ops: ids(x), divergent: b.divergent(x)}, true)
}

// MatrixLength is the number of components of a matrix of type t that the invocation holds (a u32,
// OpCooperativeMatrixLengthKHR): the bound of MatrixComponent's index and of Extract on a matrix.
func (b *Builder) MatrixLength(t Type) Value {
	if !b.ok("MatrixLength") {
		return Value{t: U32}
	}
	if !t.IsMatrix() || !t.Valid() {
		b.errorf("MatrixLength", "type %s is not a cooperative matrix", t)
		return Value{t: U32}
	}
	return b.add(node{kind: kInst, t: U32, op: opCooperativeMatrixLengthKHR, aux: t}, true)
}

// matrixVar checks a Var holding a matrix and a component index.
func (b *Builder) matrixVar(construct string, v *Var, i Value) bool {
	if v == nil || v.b != b {
		b.errorf(construct, "variable from another builder")
		return false
	}
	if !b.ok(construct, i) || !b.index(construct, i) {
		return false
	}
	if !v.T.IsMatrix() {
		b.errorf(construct, "variable %q holds %s, not a cooperative matrix", v.Name, v.T)
		return false
	}
	return true
}

// MatrixComponent reads component i (< MatrixLength) of the invocation's part of the matrix in v.
// Which row and column it is, the device decides: element-wise functions that do not depend on the
// position (an activation, a scale) can be applied this way (see MatrixMap).
func (b *Builder) MatrixComponent(v *Var, i Value) Value {
	if !b.matrixVar("MatrixComponent", v, i) {
		return Value{t: v.T.Elem()}
	}
	return b.add(node{kind: kVarElemGet, t: v.T.Elem(), mem: v.idx, ops: ids(i), divergent: true, lane: true}, true)
}

// SetMatrixComponent writes component i of the invocation's part of the matrix in v.
func (b *Builder) SetMatrixComponent(v *Var, i, x Value) {
	if !b.matrixVar("SetMatrixComponent", v, i) || !b.ok("SetMatrixComponent", x) {
		return
	}
	if x.t != v.T.Elem() {
		b.errorf("SetMatrixComponent", "variable %q holds %s, value is %s", v.Name, v.T, x.t)
		return
	}
	v.divergent, v.lane = true, true
	b.add(node{kind: kVarElemSet, mem: v.idx, ops: ids(i, x)}, true)
}

// MatrixMap applies f to every element of the matrix m (f gets and returns a scalar of m's element
// type) through a loop over the invocation's components.
func (b *Builder) MatrixMap(m Value, f Expr) Value {
	if !b.ok("MatrixMap", m) {
		return Value{t: m.t}
	}
	if !m.t.IsMatrix() {
		b.errorf("MatrixMap", "%s is not a cooperative matrix", m.t)
		return Value{t: m.t}
	}
	v := b.Var("m", m)
	b.For(b.U32(0), b.MatrixLength(m.t), b.U32(1), func(i Value) {
		b.SetMatrixComponent(v, i, f(b, b.MatrixComponent(v, i)))
	})
	return b.Get(v)
}

// matrixBinary is Add, Sub, Mul and Div with a matrix operand: element-wise on two matrices of one
// type, or for Mul a float matrix times a scalar of its element type (OpMatrixTimesScalar).
func (b *Builder) matrixBinary(name string, ops opsByKind, cmp bool, x, y Value) Value {
	if name == "Mul" && x.t.IsMatrix() != y.t.IsMatrix() {
		if y.t.IsMatrix() {
			x, y = y, x
		}
		if !x.t.IsFloat() || y.t != x.t.Elem() {
			b.errorf(name, "a matrix times a scalar needs a float matrix and a scalar of its element type, got %s and %s", x.t, y.t)
			return Value{t: x.t}
		}
		return b.add(node{kind: kInst, t: x.t, op: opMatrixTimesScalar, ops: ids(x, y), divergent: b.divergent(x, y), lane: false}, true)
	}
	mt := x.t
	if !mt.IsMatrix() {
		mt = y.t
	}
	if cmp || (name != "Add" && name != "Sub" && name != "Mul" && name != "Div") {
		b.errorf(name, "not defined for cooperative matrices (%s)", mt)
		return Value{t: mt}
	}
	if x.t != y.t {
		b.errorf(name, "element-wise %s needs two matrices of one type, got %s and %s", name, x.t, y.t)
		return Value{t: mt}
	}
	op := ops.pick(x.t)
	if op == 0 {
		b.errorf(name, "not defined for %s", x.t)
		return Value{t: mt}
	}
	return b.add(node{kind: kInst, t: mt, op: op, ops: ids(x, y), divergent: b.divergent(x, y)}, true)
}
