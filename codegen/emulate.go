package codegen

import "fmt"

// Emulated cooperative matrices (Builder.EmulateMatrices): the same kernel, written with the
// matrix operations, runs on a device without VK_KHR_cooperative_matrix — lavapipe in the tests —
// so that a cooperative-matrix kernel's indexing, staging, layouts and epilogues are checked
// against the interpreter where the real thing cannot run. It is for tests: slow, and it says
// nothing about a driver's matrices.
//
// A matrix value becomes an array of its rows·cols elements held by every invocation (row-major:
// element (r, c) is component r·cols + c, which is what MatrixComponent and Extract see; the
// matrix's length is rows·cols). Loads read every element in every invocation, stores write every
// element from every invocation (the same values to the same addresses), MatrixMulAdd is a loop
// over the product in each invocation, element-wise operations and conversions loop over the
// components. A matrix value is a function variable written once (see emuElementwise).
//
// Lavapipe indexes function arrays slowly (about 1.5 µs per step of a product loop), so the
// accumulators of a product are shared out: invocation i of a subgroup of size s computes, and
// stores, only the accumulator elements i, i+s, i+2s, ...; the rest of its copy is left undefined,
// and element-wise operations on it are harmless. Loads and the A and B operands stay whole. The emitted module declares no cooperative-matrix capability; it keeps the memory
// model the real kernel would use (Vulkan).
//
// Limits: a load's memory may hold the matrix's element type, vectors of it, or 32-bit words
// (u32, i32 or their vectors) that pack 16- or 32-bit elements; a store's memory must hold the
// element type or vectors of it; saturating integer accumulation is refused (the builder says so).

// EmulateMatrices makes the builder emulate cooperative matrices (see emulate.go) instead of
// emitting SPV_KHR_cooperative_matrix. Set it before building the kernel.
func (b *Builder) EmulateMatrices(on bool) { b.emulate = on }

// emuArray is the array type an emulated matrix type becomes.
func (e *emitter) emuArray(t Type) uint32 {
	if t.kind == F16Kind {
		e.feats |= FeatureFloat16 // f16 arrays in function memory
	}
	el := e.typ(t.Elem())
	n := e.constant(U32, uint32(t.rows)*uint32(t.cols))
	return e.derived(fmt.Sprintf("emuarray %d %d", el, n), func(id uint32) {
		inst(&e.globals, opTypeArray, id, el, n)
	})
}

// op emits an instruction with a result and returns the result's id.
func (e *emitter) op(o opcode, typ uint32, args ...uint32) uint32 {
	r := e.id()
	inst(&e.fn, o, append([]uint32{typ, r}, args...)...)
	return r
}

// tempVar declares a function variable of type typ (hoisted to the entry block) and returns it.
func (e *emitter) tempVar(typ uint32) uint32 {
	id := e.id()
	inst(&e.extraVars, opVariable, e.ptr(scFunction, typ), id, scFunction)
	return id
}

// elemPtrOf is a pointer to component i of the array variable p holding elements of type el.
func (e *emitter) elemPtrOf(p uint32, el Type, i uint32) uint32 {
	return e.op(opAccessChain, e.ptr(scFunction, e.typ(el)), p, i)
}

// loop emits a structured loop for i in [0, n) (n an id of a u32) around body, marked DontUnroll:
// Mesa unrolls constant-trip loops, and a product of 16x16x16 unrolled took lavapipe minutes.
func (e *emitter) loop(n uint32, body func(i uint32)) {
	u := e.typ(U32)
	iv := e.tempVar(u)
	inst(&e.fn, opStore, iv, e.constant(U32, 0))
	header, bodyL, cont, merge := e.id(), e.id(), e.id(), e.id()
	inst(&e.fn, opBranch, header)
	inst(&e.fn, opLabel, header)
	i := e.op(opLoad, u, iv)
	c := e.op(opULessThan, e.typ(Bool), i, n)
	inst(&e.fn, opLoopMerge, merge, cont, loopDontUnroll)
	inst(&e.fn, opBranchConditional, c, bodyL, merge)
	inst(&e.fn, opLabel, bodyL)
	body(i)
	inst(&e.fn, opBranch, cont)
	inst(&e.fn, opLabel, cont)
	inst(&e.fn, opStore, iv, e.op(opIAdd, u, i, e.constant(U32, 1)))
	inst(&e.fn, opBranch, header)
	inst(&e.fn, opLabel, merge)
}

// laneLoop runs body(i) for the elements i < n of the invocation's share: i = lane, lane + s, ...
func (e *emitter) laneLoop(n uint32, body func(i uint32)) {
	u := e.typ(U32)
	lane := e.vals[e.b.builtins[builtInSubgroupLocalInvocationId]]
	size := e.vals[e.b.builtins[builtInSubgroupSize]]
	count := e.op(opUDiv, u, e.op(opISub, u, e.op(opIAdd, u, e.constant(U32, n), size), e.op(opIAdd, u, lane, e.constant(U32, 1))), size)
	e.loop(count, func(j uint32) {
		i := e.op(opIAdd, u, lane, e.op(opIMul, u, j, size))
		body(i)
	})
}

// An emulated matrix value is a function variable holding its array, written once when the value
// is made and only read afterwards (whole-array loads and stores cost lavapipe about half a second
// of compile time each, so values are never loaded as arrays).

// emuElementwise makes the matrix value of type t whose component i is f(i).
func (e *emitter) emuElementwise(t Type, f func(i uint32) uint32) uint32 {
	out := e.tempVar(e.emuArray(t))
	e.loop(e.constant(U32, uint32(t.rows)*uint32(t.cols)), func(i uint32) {
		inst(&e.fn, opStore, e.elemPtrOf(out, t.Elem(), i), f(i))
	})
	return out
}

// emuGet reads component i of the emulated matrix value (or Var storage) p of type t.
func (e *emitter) emuGet(p uint32, t Type, i uint32) uint32 {
	return e.op(opLoad, e.typ(t.Elem()), e.elemPtrOf(p, t.Elem(), i))
}

// emuCopy copies the emulated matrix value src of type t into the variable dst.
func (e *emitter) emuCopy(dst, src uint32, t Type) {
	e.loop(e.constant(U32, uint32(t.rows)*uint32(t.cols)), func(i uint32) {
		inst(&e.fn, opStore, e.elemPtrOf(dst, t.Elem(), i), e.emuGet(src, t, i))
	})
}

// emuInst emulates an instruction whose result or operand is a matrix.
func (e *emitter) emuInst(n *node) uint32 {
	u := e.typ(U32)
	if n.op == opCooperativeMatrixLengthKHR {
		return e.constant(U32, uint32(n.aux.rows)*uint32(n.aux.cols))
	}
	t := n.t
	el := t.Elem()
	operand := func(k int) (uint32, Type) {
		return e.val(n.ops[k].id), e.b.nodes[n.ops[k].id].t
	}
	if n.op == opCompositeExtract { // component of a matrix
		m, mt := operand(0)
		return e.emuGet(m, mt, e.constant(U32, n.ops[1].lit))
	}
	switch n.op {
	case opCompositeConstruct: // MatrixFill
		x, _ := operand(0)
		return e.emuElementwise(t, func(uint32) uint32 { return x })
	case opMatrixTimesScalar:
		m, mt := operand(0)
		s, _ := operand(1)
		return e.emuElementwise(t, func(i uint32) uint32 { return e.op(opFMul, e.typ(el), e.emuGet(m, mt, i), s) })
	case opCooperativeMatrixMulAddKHR:
		pa, at := operand(0)
		pb, bt := operand(1)
		pc, _ := operand(2)
		d := e.tempVar(e.emuArray(t))
		M, N, K := uint32(t.rows), uint32(t.cols), uint32(at.cols)
		acc := e.typ(el)
		widen := func(x uint32, from Type) uint32 {
			switch {
			case from.kind == el.kind:
				return x
			case el.IsFloat():
				return e.op(opFConvert, acc, x)
			default: // integers of one width and another signedness
				return e.op(opBitcast, acc, x)
			}
		}
		mul, add := opFMul, opFAdd
		if el.IsInt() {
			mul, add = opIMul, opIAdd
		}
		e.laneLoop(M*N, func(rc uint32) {
			r := e.op(opUDiv, u, rc, e.constant(U32, N))
			c := e.op(opUMod, u, rc, e.constant(U32, N))
			sum := e.tempVar(acc)
			inst(&e.fn, opStore, sum, e.emuGet(pc, t, rc))
			e.loop(e.constant(U32, K), func(k uint32) {
				ai := e.op(opIAdd, u, e.op(opIMul, u, r, e.constant(U32, K)), k)
				bi := e.op(opIAdd, u, e.op(opIMul, u, k, e.constant(U32, N)), c)
				x := widen(e.emuGet(pa, at, ai), at.Elem())
				y := widen(e.emuGet(pb, bt, bi), bt.Elem())
				inst(&e.fn, opStore, sum, e.op(add, acc, e.op(opLoad, acc, sum), e.op(mul, acc, x, y)))
			})
			inst(&e.fn, opStore, e.elemPtrOf(d, el, rc), e.op(opLoad, acc, sum))
		})
		return d
	}
	// Element-wise: unary (negation, conversions) or binary on two matrices of one type.
	x, xt := operand(0)
	if len(n.ops) == 1 {
		return e.emuElementwise(t, func(i uint32) uint32 { return e.op(n.op, e.typ(el), e.emuGet(x, xt, i)) })
	}
	y, yt := operand(1)
	return e.emuElementwise(t, func(i uint32) uint32 { return e.op(n.op, e.typ(el), e.emuGet(x, xt, i), e.emuGet(y, yt, i)) })
}

// emuIndex is the index, in matrix elements from the first element of the memory object, of
// element (r, c) of a matrix at memory element idx with stride (in memory elements) and layout;
// ratio is how many matrix elements one memory element holds.
func (e *emitter) emuIndex(n *node, r, c, ratio uint32, strideID int32) uint32 {
	u := e.typ(U32)
	conv := func(id int32) uint32 {
		v := e.val(id)
		if e.b.nodes[id].t.kind == I32Kind {
			return e.op(opBitcast, u, v)
		}
		return v
	}
	base := e.op(opIMul, u, conv(n.ops[0].id), e.constant(U32, ratio))
	stride := e.op(opIMul, u, conv(strideID), e.constant(U32, ratio))
	major, minor := r, c
	if MatrixLayout(n.lit) == ColumnMajor {
		major, minor = c, r
	}
	return e.op(opIAdd, u, base, e.op(opIAdd, u, e.op(opIMul, u, major, stride), minor))
}

// memPtr is a pointer to memory element i (an id) of memory object mem.
func (e *emitter) memPtr(mem int32, i uint32) uint32 {
	m := e.b.mems[mem]
	sc := map[memKind]uint32{memBuffer: scStorageBuffer, memShared: scWorkgroup, memLocal: scFunction}[m.kind]
	if m.kind == memBuffer {
		return e.op(opAccessChain, e.ptr(sc, e.typ(m.elem)), e.memVars[mem], e.constant(I32, 0), i)
	}
	return e.op(opAccessChain, e.ptr(sc, e.typ(m.elem)), e.memVars[mem], i)
}

// emuRatio is how many elements of type el one element of memory type mt holds (0: unsupported).
func emuRatio(mt, el Type) uint32 {
	es := el.Size()
	if es == 0 || mt.Size()%es != 0 || mt.IsMatrix() {
		return 0
	}
	if mt.Elem() == el || (mt.IsInt() && mt.Elem().Size() == 4) {
		return uint32(mt.Size() / es)
	}
	return 0
}

// emuLoad emulates MatrixLoad.
func (e *emitter) emuLoad(n *node) uint32 {
	t := n.t
	el := t.Elem()
	ratio := emuRatio(e.b.mems[n.mem].elem, el)
	u := e.typ(U32)
	return e.emuElementwise(t, func(rc uint32) uint32 {
		r := e.op(opUDiv, u, rc, e.constant(U32, uint32(t.cols)))
		c := e.op(opUMod, u, rc, e.constant(U32, uint32(t.cols)))
		return e.emuRead(n.mem, el, e.emuIndex(n, r, c, ratio, n.ops[1].id), ratio)
	})
}

// emuRead reads the element of type el at index li, in elements of el, of memory object mem
// whose elements each hold ratio of them.
func (e *emitter) emuRead(mem int32, el Type, li, ratio uint32) uint32 {
	u := e.typ(U32)
	mt := e.b.mems[mem].elem
	word := e.op(opLoad, e.typ(mt), append([]uint32{e.memPtr(mem, e.op(opUDiv, u, li, e.constant(U32, ratio)))}, e.memOperands(mem, false)...)...)
	sub := e.op(opUMod, u, li, e.constant(U32, ratio))
	switch {
	case mt == el:
		return word
	case mt.Elem() == el:
		return e.op(opVectorExtractDynamic, e.typ(el), word, sub)
	}
	// 32-bit words holding 32- or 16-bit elements.
	per := uint32(4 / el.Size()) // elements per word
	w := word
	if mt.IsVector() {
		w = e.op(opVectorExtractDynamic, e.typ(mt.Elem()), word, e.op(opUDiv, u, sub, e.constant(U32, per)))
	}
	if per == 1 {
		return e.op(opBitcast, e.typ(el), w)
	}
	pair := e.op(opBitcast, e.typ(Vec(el, 2)), w)
	return e.op(opVectorExtractDynamic, e.typ(el), pair, e.op(opUMod, u, sub, e.constant(U32, 2)))
}

// emuElemPtr is a pointer to the element of type el at index li, in elements of el, of memory
// object mem (whose elements are el or vectors of it).
func (e *emitter) emuElemPtr(mem int32, el Type, li, ratio uint32) uint32 {
	u := e.typ(U32)
	p := e.memPtr(mem, e.op(opUDiv, u, li, e.constant(U32, ratio)))
	if e.b.mems[mem].elem != el {
		sc := map[memKind]uint32{memBuffer: scStorageBuffer, memShared: scWorkgroup}[e.b.mems[mem].kind]
		p = e.op(opAccessChain, e.ptr(sc, e.typ(el)), p, e.op(opUMod, u, li, e.constant(U32, ratio)))
	}
	return p
}

// emuEach runs body for the elements of a matrix of type t that a store writes from this
// invocation: every element, or an accumulator's share of the invocation (see laneLoop).
func (e *emitter) emuEach(t Type, body func(rc uint32)) {
	n := e.constant(U32, uint32(t.rows)*uint32(t.cols))
	if t.use == MatrixAcc {
		e.laneLoop(uint32(t.rows)*uint32(t.cols), body)
		return
	}
	e.loop(n, body)
}

// emuStore emulates MatrixStore.
func (e *emitter) emuStore(n *node) {
	t := n.aux
	el := t.Elem()
	ratio := emuRatio(e.b.mems[n.mem].elem, el)
	u := e.typ(U32)
	src := e.val(n.ops[1].id)
	ops := e.memOperands(n.mem, true)
	e.emuEach(t, func(rc uint32) {
		r := e.op(opUDiv, u, rc, e.constant(U32, uint32(t.cols)))
		c := e.op(opUMod, u, rc, e.constant(U32, uint32(t.cols)))
		li := e.emuIndex(n, r, c, ratio, n.ops[2].id)
		inst(&e.fn, opStore, append([]uint32{e.emuElemPtr(n.mem, el, li, ratio), e.emuGet(src, t, rc)}, ops...)...)
	})
}
