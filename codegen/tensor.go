package codegen

import "fmt"

// Tensor-addressed loads and stores of cooperative matrices (SPV_NV_cooperative_matrix2's
// OpCooperativeMatrixLoadTensorNV and OpCooperativeMatrixStoreTensorNV over
// SPV_NV_tensor_addressing's tensor layouts). They are what makes workgroup-scope matrices
// useful: the driver stages a workgroup matrix through shared memory itself (on NVIDIA with
// the copy engines and the matrix loads its own GEMMs use), so a kernel names the slice of a
// tensor it wants instead of writing the staging. A module that uses them, or any
// workgroup-scope matrix, is SPIR-V 1.6 (what the extensions are written against; every
// global variable is then in the entry point's interface) and needs FeatureCooperativeMatrix2.
//
// Emulated (Builder.EmulateMatrices), a tensor load reads every element the slice names,
// with 0 outside the tensor, and a store writes the elements inside it; a workgroup matrix is
// emulated as a subgroup one is (each subgroup holds and computes the whole matrix).

// Tensor is a row-major matrix of Rows × Cols elements in a buffer, row r starting Stride
// elements after row r−1: Rows, Cols and Stride count the loaded matrix's elements, not the
// buffer's (an f16 tensor in a buffer of vec4<u32> counts halves). Base is the buffer element
// (the buffer's own type) where the tensor starts; the device wants it 16-byte aligned.
// Clamp says what happens outside the tensor: with it, loads read 0 and stores are dropped;
// without it the slice must lie inside (the driver skips the checks).
type Tensor struct {
	Mem                Memory
	Base               Value
	Rows, Cols, Stride Value
	Clamp              bool
}

const (
	tensorTranspose = 1 << iota
	tensorClamp
)

// tensorNode checks a tensor access and returns its memory index and operands: the slice
// starts at (row, col) of ts.
func (b *Builder) tensorNode(construct string, ts Tensor, row, col Value) (int32, []operand, bool) {
	idx, ok := b.mem(construct, ts.Mem)
	if !ok || !b.ok(construct, ts.Base, ts.Rows, ts.Cols, ts.Stride, row, col) {
		return 0, nil, false
	}
	if b.mems[idx].kind != memBuffer {
		b.errorf(construct, "%q is not a buffer; tensor addressing reads and writes buffers", b.mems[idx].name)
		return 0, nil, false
	}
	for _, v := range []Value{ts.Base, ts.Rows, ts.Cols, ts.Stride, row, col} {
		if !v.t.IsInt() || v.t.IsVector() || v.t.Size() != 4 {
			b.errorf(construct, "tensor bases, dimensions, strides and offsets are 32-bit integer scalars, got %s", v.t)
			return 0, nil, false
		}
	}
	if b.divergent(ts.Base, ts.Rows, ts.Cols, ts.Stride, row, col) {
		b.errorf(construct, "the tensor and slice of a workgroup matrix in %q differ between the invocations of a workgroup; every invocation must pass the same values", b.mems[idx].name)
		return 0, nil, false
	}
	return idx, ids(ts.Base, ts.Rows, ts.Cols, ts.Stride, row, col), true
}

func tensorFlags(ts Tensor, transpose bool) uint32 {
	var f uint32
	if transpose {
		f |= tensorTranspose
	}
	if ts.Clamp {
		f |= tensorClamp
	}
	return f
}

// MatrixLoadTensor loads the workgroup matrix of type t (Matrix with ScopeWorkgroup) from the
// slice of ts at (row, col): element (r, c) of the matrix is element (row+r, col+c) of the
// tensor, or, transposed, element (row+c, col+r) (a K-contiguous weight W[n, k] read as the
// K×N operand B of a product).
func (b *Builder) MatrixLoadTensor(t Type, ts Tensor, row, col Value, transpose bool) Value {
	idx, ops, ok := b.tensorNode("MatrixLoadTensor", ts, row, col)
	if !ok {
		return Value{t: t}
	}
	switch {
	case !t.IsMatrix() || !t.Valid():
		b.errorf("MatrixLoadTensor", "type %s is not a cooperative matrix", t)
	case t.MatrixScope() != ScopeWorkgroup:
		b.errorf("MatrixLoadTensor", "type %s: tensor loads here are of workgroup matrices", t)
	case b.mems[idx].access == WriteOnly:
		b.errorf("MatrixLoadTensor", "load from write-only buffer %q", b.mems[idx].name)
	case b.emulate && emuRatio(b.mems[idx].elem, t.Elem()) == 0:
		b.errorf("MatrixLoadTensor", "emulated matrices of %s cannot be loaded from %q's %s elements", t.Elem(), b.mems[idx].name, b.mems[idx].elem)
	default:
		return b.add(node{kind: kMatLoadTensor, t: t, mem: idx, ops: ops, lit: tensorFlags(ts, transpose)}, true)
	}
	return Value{t: t}
}

// MatrixStoreTensor stores the workgroup matrix x to the slice of ts at (row, col), element
// (r, c) to (row+r, col+c), or transposed to (row+c, col+r).
func (b *Builder) MatrixStoreTensor(ts Tensor, row, col, x Value, transpose bool) {
	idx, ops, ok := b.tensorNode("MatrixStoreTensor", ts, row, col)
	if !ok || !b.ok("MatrixStoreTensor", x) {
		return
	}
	switch me := b.mems[idx].elem; {
	case !x.t.IsMatrix():
		b.errorf("MatrixStoreTensor", "value is %s, not a cooperative matrix", x.t)
	case x.t.MatrixScope() != ScopeWorkgroup:
		b.errorf("MatrixStoreTensor", "value is %s: tensor stores here are of workgroup matrices", x.t)
	case b.mems[idx].access == ReadOnly:
		b.errorf("MatrixStoreTensor", "store to read-only buffer %q", b.mems[idx].name)
	case b.emulate && me.Elem() != x.t.Elem():
		b.errorf("MatrixStoreTensor", "emulated matrices of %s cannot be stored to %q's %s elements", x.t.Elem(), b.mems[idx].name, me)
	default:
		b.add(node{kind: kMatStoreTensor, mem: idx, ops: append(ops, ids(x)...), lit: tensorFlags(ts, transpose), aux: x.t}, true)
	}
}

// tensorSpan is the slice's extent in the tensor (rows, cols) for a matrix of type t.
func tensorSpan(t Type, flags uint32) (uint32, uint32) {
	if flags&tensorTranspose != 0 {
		return uint32(t.cols), uint32(t.rows)
	}
	return uint32(t.rows), uint32(t.cols)
}

// tensorLayout emits the tensor layout of a tensor access n of a matrix of type t: the
// tensor's dimensions and stride, sliced at the access's offsets.
func (e *emitter) tensorLayout(n *node, t Type) uint32 {
	e.spv16 = true
	e.feats |= FeatureCooperativeMatrix2
	mode := uint32(0) // Undefined
	if n.lit&tensorClamp != 0 {
		mode = 1 // Constant: loads read the clamp value (0), stores are dropped
	}
	lt := e.derived(fmt.Sprintf("tensorlayout %d", mode), func(id uint32) {
		inst(&e.globals, opTypeTensorLayoutNV, id, e.constant(U32, 2), e.constant(U32, mode))
	})
	op := func(k int) uint32 { return e.val(n.ops[k].id) }
	sr, sc := tensorSpan(t, n.lit)
	l := e.op(opCreateTensorLayoutNV, lt)
	l = e.op(opTensorLayoutSetDimensionNV, lt, l, op(1), op(2))
	l = e.op(opTensorLayoutSetStrideNV, lt, l, op(3), e.constant(U32, 1))
	return e.op(opTensorLayoutSliceNV, lt, l, op(4), e.constant(U32, sr), op(5), e.constant(U32, sc))
}

// tensorAddressing is the Tensor Addressing Operands of an access: a transposing view or none.
func (e *emitter) tensorAddressing(n *node) []uint32 {
	if n.lit&tensorTranspose == 0 {
		return []uint32{0}
	}
	vt := e.derived("tensorview transpose", func(id uint32) {
		inst(&e.globals, opTypeTensorViewNV, id, e.constant(U32, 2), e.constant(Bool, 0), e.constant(U32, 1), e.constant(U32, 0))
	})
	return []uint32{1, e.op(opCreateTensorViewNV, vt)} // TensorView
}

// memOperandMask is a memory access's Memory Operands, starting with the mask (None when empty).
func (e *emitter) memOperandMask(mem int32, store bool) []uint32 {
	if ops := e.memOperands(mem, store); len(ops) > 0 {
		return ops
	}
	return []uint32{0}
}

func (e *emitter) matLoadTensor(n *node) uint32 {
	e.memFeatures(n, e.b.mems[n.mem].elem)
	if e.emu {
		return e.emuLoadTensor(n)
	}
	l := e.tensorLayout(n, n.t)
	p := e.elemPtr(n.mem, n.ops[0].id)
	mt := e.typ(n.t)
	undef := e.id()
	inst(&e.fn, opUndef, mt, undef)
	words := []uint32{mt, 0, p, undef, l}
	words = append(words, e.memOperandMask(n.mem, false)...)
	words = append(words, e.tensorAddressing(n)...)
	r := e.id()
	words[1] = r
	inst(&e.fn, opCooperativeMatrixLoadTensorNV, words...)
	return r
}

func (e *emitter) matStoreTensor(n *node) {
	e.memFeatures(n, e.b.mems[n.mem].elem)
	if e.emu {
		e.emuStoreTensor(n)
		return
	}
	l := e.tensorLayout(n, n.aux)
	p := e.elemPtr(n.mem, n.ops[0].id)
	words := []uint32{p, e.val(n.ops[6].id), l}
	words = append(words, e.memOperandMask(n.mem, true)...)
	words = append(words, e.tensorAddressing(n)...)
	inst(&e.fn, opCooperativeMatrixStoreTensorNV, words...)
}

// emuTensorIndex is, for element rc of a matrix of type t accessed by n, the element's index in
// matrix elements from the buffer's first element (0 outside the tensor) and whether it lies
// inside the tensor.
func (e *emitter) emuTensorIndex(n *node, t Type, rc, ratio uint32) (uint32, uint32) {
	u, bl := e.typ(U32), e.typ(Bool)
	op := func(k int) uint32 {
		v := e.val(n.ops[k].id)
		if e.b.nodes[n.ops[k].id].t.kind == I32Kind {
			return e.op(opBitcast, u, v)
		}
		return v
	}
	r := e.op(opUDiv, u, rc, e.constant(U32, uint32(t.cols)))
	c := e.op(opUMod, u, rc, e.constant(U32, uint32(t.cols)))
	if n.lit&tensorTranspose != 0 {
		r, c = c, r
	}
	tr, tc := e.op(opIAdd, u, op(4), r), e.op(opIAdd, u, op(5), c)
	in := e.op(opLogicalAnd, bl, e.op(opULessThan, bl, tr, op(1)), e.op(opULessThan, bl, tc, op(2)))
	li := e.op(opIAdd, u, e.op(opIMul, u, op(0), e.constant(U32, ratio)), e.op(opIAdd, u, e.op(opIMul, u, tr, op(3)), tc))
	return e.op(opSelect, u, in, li, e.constant(U32, 0)), in
}

// emuLoadTensor emulates MatrixLoadTensor.
func (e *emitter) emuLoadTensor(n *node) uint32 {
	t := n.t
	ratio := emuRatio(e.b.mems[n.mem].elem, t.Elem())
	zero := e.constant(t.Elem(), 0)
	return e.emuElementwise(t, func(rc uint32) uint32 {
		li, in := e.emuTensorIndex(n, t, rc, ratio)
		return e.op(opSelect, e.typ(t.Elem()), in, e.emuRead(n.mem, t.Elem(), li, ratio), zero)
	})
}

// emuStoreTensor emulates MatrixStoreTensor.
func (e *emitter) emuStoreTensor(n *node) {
	t := n.aux
	el := t.Elem()
	ratio := emuRatio(e.b.mems[n.mem].elem, el)
	src := e.val(n.ops[6].id)
	e.emuEach(t, func(rc uint32) {
		li, in := e.emuTensorIndex(n, t, rc, ratio)
		then, merge := e.id(), e.id()
		inst(&e.fn, opSelectionMerge, merge, selectionNone)
		inst(&e.fn, opBranchConditional, in, then, merge)
		inst(&e.fn, opLabel, then)
		inst(&e.fn, opStore, append([]uint32{e.emuElemPtr(n.mem, el, li, ratio), e.emuGet(src, t, rc)}, e.memOperands(n.mem, true)...)...)
		inst(&e.fn, opBranch, merge)
		inst(&e.fn, opLabel, merge)
	})
}

// globalVariables are the ids of the module-scope variables in the instruction stream globals
// that are not in have: what a SPIR-V 1.4+ entry point's interface lists besides its inputs.
func globalVariables(globals, have []uint32) []uint32 {
	seen := map[uint32]bool{}
	for _, id := range have {
		seen[id] = true
	}
	var out []uint32
	for i := 0; i < len(globals); {
		n := int(globals[i] >> 16)
		if n == 0 {
			break
		}
		if opcode(globals[i]&0xffff) == opVariable && n >= 4 && !seen[globals[i+2]] {
			seen[globals[i+2]] = true
			out = append(out, globals[i+2])
		}
		i += n
	}
	return out
}
