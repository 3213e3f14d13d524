package codegen

import (
	"errors"
	"strings"
	"testing"
)

// Cooperative-matrix kernels: every construct of matrix.go in a module that spirv-val (v2025.2 or
// newer, from ../shared/tools) must accept for Vulkan 1.1 to 1.3. Lavapipe has no cooperative
// matrices, so these run only on a GPU (kernels' coop tests, on the H200); here they are checked
// for validity and for what the module declares.

var (
	f16A   = Matrix(F16, ScopeSubgroup, 16, 16, MatrixA)
	f16B   = Matrix(F16, ScopeSubgroup, 16, 16, MatrixB)
	f32Acc = Matrix(F32, ScopeSubgroup, 16, 16, MatrixAcc)
	f16Acc = Matrix(F16, ScopeSubgroup, 16, 16, MatrixAcc)
)

// matrixKernels build one kernel per group of matrix constructs.
var matrixKernels = []struct {
	name  string
	needs Feature // features Kernel.Needs must include
	build func(b *Builder)
}{
	{"global loads, mul-add, store", FeatureCooperativeMatrix | FeatureVulkanMemoryModel | FeatureFloat16 | FeatureStorageBuffer16, func(b *Builder) {
		a := b.Buffer("a", F16, ReadOnly)
		bb := b.Buffer("b", F16, ReadOnly)
		c := b.Buffer("c", F32, ReadWrite)
		b.WorkgroupSize(b.U32(32), b.U32(1), b.U32(1))
		s := b.U32(16)
		x := b.MatrixLoad(f16A, a, b.U32(0), s, RowMajor)
		y := b.MatrixLoad(f16B, bb, b.U32(0), s, ColumnMajor)
		acc := b.MatrixLoad(f32Acc, c, b.U32(0), s, RowMajor)
		b.MatrixStore(c, b.U32(0), b.MatrixMulAdd(x, y, acc, 0), s, RowMajor)
	}},
	{"staged through shared vec4<u32>, k loop, per-subgroup tiles", FeatureCooperativeMatrix | FeatureSubgroupBasic, func(b *Builder) {
		u4 := Vec(U32, 4)
		a := b.Buffer("a", u4, ReadOnly)
		bb := b.Buffer("b", u4, ReadOnly)
		out := b.Buffer("out", F16, WriteOnly)
		kk := b.Push("k", U32)
		b.WorkgroupSize(b.U32(64), b.U32(1), b.U32(1))
		as := b.Shared("a_tile", u4, b.U32(2*16*3))
		bs := b.Shared("b_tile", u4, b.U32(16*3))
		li := b.LocalIndex()
		sg := b.SubgroupID()
		acc := b.Var("acc", b.MatrixFill(f32Acc, b.F32(0)))
		b.For(b.U32(0), kk, b.U32(16), func(k0 Value) {
			b.If(b.Lt(li, b.U32(32)), func() {
				b.Store(as, b.Add(b.Mul(b.Div(li, b.U32(2)), b.U32(3)), b.Rem(li, b.U32(2))), b.Load(a, b.Add(li, b.Div(k0, b.U32(8)))))
				b.Store(bs, b.Add(b.Mul(b.Div(li, b.U32(2)), b.U32(3)), b.Rem(li, b.U32(2))), b.Load(bb, b.Add(li, b.Div(k0, b.U32(8)))))
			})
			b.Barrier()
			// Each subgroup takes its 16 rows of A: the address depends on SubgroupID only.
			x := b.MatrixLoad(f16A, as, b.Mul(sg, b.U32(16*3)), b.U32(3), RowMajor)
			y := b.MatrixLoad(f16B, bs, b.U32(0), b.U32(3), ColumnMajor)
			b.Set(acc, b.MatrixMulAdd(x, y, b.Get(acc), 0))
			b.Barrier()
		})
		// Element-wise arithmetic on the accumulator, then a conversion to an f16 accumulator.
		m := b.Get(acc)
		m = b.Mul(m, b.F32(0.5))
		m = b.Mul(b.F32(2), m)
		m = b.Add(m, b.MatrixFill(f32Acc, b.F32(1)))
		m = b.Sub(m, b.Const(f32Acc, 1))
		m = b.Div(m, b.Const(f32Acc, 1))
		m = b.Neg(b.Neg(m))
		m = b.Mul(m, m)
		m = b.MatrixMap(m, func(b *Builder, x Value) Value { return b.Max(x, b.F32(0)) })
		h := b.Convert(m, f16Acc)
		b.MatrixStore(out, b.Mul(sg, b.U32(256)), h, b.U32(16), RowMajor)
		b.ControlBarrier(ScopeSubgroup, ScopeSubgroup, SemWorkgroup)
	}},
	{"matrix length and components", FeatureCooperativeMatrix, func(b *Builder) {
		out := b.Buffer("out", F32, WriteOnly)
		b.WorkgroupSize(b.U32(32), b.U32(1), b.U32(1))
		v := b.Var("m", b.Const(f32Acc, 3))
		n := b.MatrixLength(f32Acc)
		b.For(b.U32(0), n, b.U32(1), func(i Value) {
			b.SetMatrixComponent(v, i, b.Add(b.MatrixComponent(v, i), b.Convert(i, F32)))
		})
		first := b.Extract(b.Get(v), 0)
		b.Store(out, b.LocalIndex(), b.Add(first, b.Convert(n, F32)))
	}},
	{"bf16 matrices and scalars", FeatureCooperativeMatrix | FeatureBFloat16 | FeatureBFloat16Matrix | FeatureStorageBuffer16, func(b *Builder) {
		a := b.Buffer("a", BF16, ReadOnly)
		w := b.Buffer("w", Vec(U32, 4), ReadOnly)
		o := b.Buffer("o", BF16, WriteOnly)
		b.WorkgroupSize(b.U32(32), b.U32(1), b.U32(1))
		bt := Matrix(BF16, ScopeSubgroup, 16, 16, MatrixA)
		bb := Matrix(BF16, ScopeSubgroup, 16, 16, MatrixB)
		x := b.MatrixLoad(bt, a, b.U32(0), b.U32(16), RowMajor)
		y := b.MatrixLoad(bb, w, b.U32(0), b.U32(2), ColumnMajor)
		r := b.MatrixMulAdd(x, y, b.Const(f32Acc, 0), 0)
		b.MatrixStore(o, b.U32(0), b.Convert(r, Matrix(BF16, ScopeSubgroup, 16, 16, MatrixAcc)), b.U32(16), RowMajor)
		// Scalar bf16: conversions, selection, bit reinterpretation, constants.
		li := b.LocalIndex()
		v := b.Convert(b.Load(a, li), F32)
		pair := b.Bitcast(b.Extract(b.Load(w, li), 0), Vec(BF16, 2))
		v = b.Add(v, b.Convert(b.Extract(pair, 1), F32))
		s := b.Select(b.Gt(v, b.F32(0)), b.Convert(v, BF16), b.BF16(0.25))
		b.Store(o, b.Add(li, b.U32(256)), s)
		b.Store(o, b.Add(li, b.U32(512)), b.Convert(b.Convert(s, F16), BF16))
	}},
	{"integer matrices with signedness and saturation", FeatureCooperativeMatrix, func(b *Builder) {
		a := b.Buffer("a", I32, ReadOnly)
		c := b.Buffer("c", I32, ReadWrite)
		u := b.Buffer("u", U32, ReadWrite)
		b.WorkgroupSize(b.U32(32), b.U32(1), b.U32(1))
		ia := Matrix(I32, ScopeSubgroup, 16, 16, MatrixA)
		ib := Matrix(I32, ScopeSubgroup, 16, 16, MatrixB)
		ic := Matrix(I32, ScopeSubgroup, 16, 16, MatrixAcc)
		x := b.MatrixLoad(ia, a, b.U32(0), b.U32(16), RowMajor)
		y := b.MatrixLoad(ib, a, b.U32(256), b.U32(16), RowMajor)
		r := b.MatrixMulAdd(x, y, b.MatrixLoad(ic, c, b.U32(0), b.U32(16), RowMajor), SignedA|SignedB|SignedC|SignedResult|Saturating)
		r = b.Add(b.Sub(r, b.Const(ic, 1)), b.Div(r, b.Const(ic, 2)))
		b.MatrixStore(c, b.U32(0), b.Neg(r), b.U32(16), RowMajor)
		uc := Matrix(U32, ScopeSubgroup, 16, 16, MatrixAcc)
		ua, ub := Matrix(U32, ScopeSubgroup, 16, 16, MatrixA), Matrix(U32, ScopeSubgroup, 16, 16, MatrixB)
		ur := b.MatrixMulAdd(b.Convert(x, ua), b.Convert(y, ub), b.Const(uc, 0), 0)
		b.MatrixStore(u, b.U32(0), b.Div(ur, b.Const(uc, 3)), b.I32(16), ColumnMajor)
		b.MatrixStore(c, b.U32(512), b.Convert(b.Convert(ur, Matrix(F32, ScopeSubgroup, 16, 16, MatrixAcc)), ic), b.U32(16), RowMajor)
	}},
	{"16x8x16 shape, workgroup-divergent but subgroup-uniform branch", FeatureCooperativeMatrix, func(b *Builder) {
		a := b.Buffer("a", F16, ReadOnly)
		c := b.Buffer("c", F32, WriteOnly)
		b.WorkgroupSize(b.U32(64), b.U32(1), b.U32(1))
		mb := Matrix(F16, ScopeSubgroup, 16, 8, MatrixB)
		acc := Matrix(F32, ScopeSubgroup, 16, 8, MatrixAcc)
		sg := b.SubgroupID()
		b.If(b.Eq(sg, b.U32(1)), func() {
			x := b.MatrixLoad(f16A, a, b.U32(0), b.U32(16), RowMajor)
			y := b.MatrixLoad(mb, a, b.U32(256), b.U32(8), RowMajor)
			b.MatrixStore(c, b.U32(0), b.MatrixMulAdd(x, y, b.Const(acc, 0), 0), b.U32(8), RowMajor)
			b.ControlBarrier(ScopeSubgroup, ScopeSubgroup, SemWorkgroup)
		})
	}},
	{"Vulkan memory model: shared memory, barriers, atomics, coherent buffer", FeatureCooperativeMatrix | FeatureVulkanMemoryModel, func(b *Builder) {
		flags := b.Buffer("flags", U32, ReadWrite, Coherent)
		out := b.Buffer("out", F32, ReadWrite)
		b.WorkgroupSize(b.U32(64), b.U32(1), b.U32(1))
		sh := b.Shared("sh", F32, b.U32(64))
		cnt := b.Shared("cnt", U32, b.U32(1))
		li := b.LocalIndex()
		b.Store(sh, li, b.Convert(li, F32))
		b.Barrier()
		b.AtomicAdd(cnt, b.U32(0), b.U32(1))
		b.AtomicMax(flags, b.U32(1), li)
		b.ControlBarrier(ScopeWorkgroup, ScopeDevice, SemStorageBuffer|SemWorkgroup)
		b.MemoryBarrier(ScopeDevice, SemStorageBuffer)
		b.Store(flags, li, b.Load(flags, b.Add(li, b.U32(1))))
		v := b.Load(sh, b.Sub(b.U32(63), li))
		b.Store(out, li, v)
		m := b.MatrixLoad(f32Acc, sh, b.U32(0), b.U32(8), RowMajor)
		b.MatrixStore(out, b.U32(64), m, b.U32(16), ColumnMajor)
	}},
}

func TestMatrixKernelsValidate(t *testing.T) {
	for _, c := range matrixKernels {
		t.Run(c.name, func(t *testing.T) {
			b := NewBuilder(strings.ReplaceAll(c.name, " ", "_"))
			c.build(b)
			k, err := b.Finish()
			if err != nil {
				t.Fatal(err)
			}
			if !k.Needs.Has(c.needs) {
				t.Errorf("Needs %v, want at least %v", k.Needs, c.needs)
			}
			if !hasString(k.Capabilities, "CooperativeMatrixKHR") || !hasString(k.Capabilities, "VulkanMemoryModel") {
				t.Errorf("capabilities %v lack CooperativeMatrixKHR or VulkanMemoryModel", k.Capabilities)
			}
			if !hasString(k.Extensions, "SPV_KHR_cooperative_matrix") || !hasString(k.Extensions, "SPV_KHR_vulkan_memory_model") {
				t.Errorf("extensions %v lack SPV_KHR_cooperative_matrix or SPV_KHR_vulkan_memory_model", k.Extensions)
			}
			if k.Needs.Has(FeatureBFloat16) != hasString(k.Extensions, "SPV_KHR_bfloat16") {
				t.Errorf("bfloat16 feature %v but extensions %v", k.Needs.Has(FeatureBFloat16), k.Extensions)
			}
			if !strings.Contains(k.Dump(), "matrix<") {
				t.Errorf("the dump shows no matrix:\n%s", k.Dump())
			}
			for _, env := range []string{"vulkan1.1", "vulkan1.2", "vulkan1.3"} {
				spirvVal(t, k, env)
			}
		})
	}
}

// TestVulkanMemoryModelWords checks the words the model changes in one small module: the memory
// model, the shared-memory access operands, the barrier semantics and scopes, the missing Coherent.
func TestVulkanMemoryModelWords(t *testing.T) {
	build := func(vmm bool) *Kernel {
		b := NewBuilder("vmm")
		flags := b.Buffer("flags", U32, ReadWrite, Coherent)
		b.WorkgroupSize(b.U32(8), b.U32(1), b.U32(1))
		sh := b.Shared("sh", U32, b.U32(8))
		li := b.LocalIndex()
		b.Store(sh, li, li)
		b.ControlBarrier(ScopeWorkgroup, ScopeDevice, SemWorkgroup)
		b.AtomicAdd(flags, b.U32(0), b.Load(sh, b.Sub(b.U32(7), li)))
		b.Store(flags, b.U32(1), b.Load(flags, b.U32(2)))
		b.UseVulkanMemoryModel(vmm)
		k, err := b.Finish()
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	for _, vmm := range []bool{false, true} {
		k := build(vmm)
		spirvVal(t, k, "vulkan1.2")
		insts := instructions(k.Words)
		var model, coherent, barrierSem, barrierScope, atomicScope uint32
		var ops [2][2]uint32 // memory operands of loads and stores of the shared array and the buffer
		val := constants(insts)
		vars := map[uint32]int{} // access chain id → 0 shared, 1 buffer
		for _, in := range insts {
			switch in.op {
			case opMemoryModel:
				model = in.w[1]
			case opDecorate:
				if in.w[1] == decCoherent {
					coherent++
				}
			case opControlBarrier:
				barrierScope, barrierSem = val[in.w[1]], val[in.w[2]]
			case opAtomicIAdd:
				atomicScope = val[in.w[3]]
			case opAccessChain:
				if len(in.w) == 4 { // shared arrays are indexed once, buffers twice
					vars[in.w[1]] = 0
				} else {
					vars[in.w[1]] = 1
				}
			case opLoad:
				if m, ok := vars[in.w[2]]; ok && len(in.w) > 3 {
					ops[0][m] = in.w[3]
				}
			case opStore:
				if m, ok := vars[in.w[0]]; ok && len(in.w) > 2 {
					ops[1][m] = in.w[2]
				}
			}
		}
		want := []uint32{memoryModelGLSL450, 1, semWorkgroupMemory | semAcquireRelease, scopeDevice, scopeDevice, 0, 0, 0, 0}
		if vmm {
			want = []uint32{memoryModelVulkan, 0, semWorkgroupMemory | semAcquireRelease | semMakeAvailable | semMakeVisible,
				scopeQueueFamily, scopeQueueFamily, memAccessNonPrivatePointer, memAccessNonPrivatePointer,
				memAccessNonPrivatePointer | memAccessMakePointerVisible, memAccessNonPrivatePointer | memAccessMakePointerAvailable}
		}
		got := []uint32{model, coherent, barrierSem, barrierScope, atomicScope, ops[0][0], ops[1][0], ops[0][1], ops[1][1]}
		names := []string{"memory model", "Coherent decorations", "barrier semantics", "barrier memory scope", "atomic scope",
			"shared load operands", "shared store operands", "coherent buffer load operands", "coherent buffer store operands"}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("vmm=%v: %s %#x, want %#x", vmm, names[i], got[i], want[i])
			}
		}
		if vmm != k.Needs.Has(FeatureVulkanMemoryModel) {
			t.Errorf("vmm=%v: Needs %v", vmm, k.Needs)
		}
	}
}

type instruction struct {
	op opcode
	w  []uint32 // operand words
}

func instructions(words []uint32) []instruction {
	var out []instruction
	for i := 5; i < len(words); {
		n := int(words[i] >> 16)
		out = append(out, instruction{opcode(words[i] & 0xffff), words[i+1 : i+n]})
		i += n
	}
	return out
}

// constants maps the result ids of OpConstant to their values.
func constants(insts []instruction) map[uint32]uint32 {
	m := map[uint32]uint32{}
	for _, in := range insts {
		if in.op == opConstant {
			m[in.w[1]] = in.w[2]
		}
	}
	return m
}

func hasString(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// TestMatrixTypeChecker: every misuse of a matrix is one error naming the construct.
func TestMatrixTypeChecker(t *testing.T) {
	k8 := Matrix(F16, ScopeSubgroup, 8, 16, MatrixB)
	cases := []struct {
		name, construct, msg string
		build                func(b *Builder, a, c *Buffer)
	}{
		{"K mismatch", "MatrixMulAdd", "MxNxK", func(b *Builder, a, c *Buffer) {
			x := b.MatrixLoad(f16A, a, b.U32(0), b.U32(16), RowMajor)
			y := b.MatrixLoad(k8, a, b.U32(0), b.U32(16), RowMajor)
			b.MatrixMulAdd(x, y, b.Const(f32Acc, 0), 0)
		}},
		{"operands in the wrong roles", "MatrixMulAdd", "a MatrixA, a MatrixB and an accumulator", func(b *Builder, a, c *Buffer) {
			x := b.MatrixLoad(f16A, a, b.U32(0), b.U32(16), RowMajor)
			b.MatrixMulAdd(x, x, b.Const(f32Acc, 0), 0)
		}},
		{"scopes differ", "MatrixMulAdd", "different scopes", func(b *Builder, a, c *Buffer) {
			x := b.MatrixLoad(f16A, a, b.U32(0), b.U32(16), RowMajor)
			y := b.MatrixLoad(f16B, a, b.U32(0), b.U32(16), RowMajor)
			b.MatrixMulAdd(x, y, b.Const(Matrix(F32, ScopeWorkgroup, 16, 16, MatrixAcc), 0), 0)
		}},
		{"signedness on float matrices", "MatrixMulAdd", "integer matrices only", func(b *Builder, a, c *Buffer) {
			x := b.MatrixLoad(f16A, a, b.U32(0), b.U32(16), RowMajor)
			y := b.MatrixLoad(f16B, a, b.U32(0), b.U32(16), RowMajor)
			b.MatrixMulAdd(x, y, b.Const(f32Acc, 0), SignedA)
		}},
		{"saturation on a float accumulator", "MatrixMulAdd", "integer accumulators only", func(b *Builder, a, c *Buffer) {
			x := b.MatrixLoad(f16A, a, b.U32(0), b.U32(16), RowMajor)
			y := b.MatrixLoad(f16B, a, b.U32(0), b.U32(16), RowMajor)
			b.MatrixMulAdd(x, y, b.Const(f32Acc, 0), Saturating)
		}},
		{"integer and float mixed", "MatrixMulAdd", "cannot mix integer and floating-point", func(b *Builder, a, c *Buffer) {
			x := b.MatrixLoad(Matrix(I32, ScopeSubgroup, 16, 16, MatrixA), a, b.U32(0), b.U32(16), RowMajor)
			y := b.MatrixLoad(f16B, a, b.U32(0), b.U32(16), RowMajor)
			b.MatrixMulAdd(x, y, b.Const(f32Acc, 0), 0)
		}},
		{"address from the invocation index", "MatrixLoad", "differ between the invocations of a subgroup", func(b *Builder, a, c *Buffer) {
			b.MatrixLoad(f16A, a, b.Mul(b.LocalIndex(), b.U32(256)), b.U32(16), RowMajor)
		}},
		{"stride from the subgroup invocation", "MatrixStore", "differ between the invocations of a subgroup", func(b *Builder, a, c *Buffer) {
			b.MatrixStore(c, b.U32(0), b.Const(f32Acc, 0), b.Add(b.SubgroupInvocation(), b.U32(16)), RowMajor)
		}},
		{"load under a branch on the invocation", "Matrix", "not every invocation of the subgroup reaches it", func(b *Builder, a, c *Buffer) {
			b.If(b.Lt(b.LocalIndex(), b.U32(7)), func() { b.MatrixLoad(f16A, a, b.U32(0), b.U32(16), RowMajor) })
		}},
		{"mul-add in a loop with a lane-dependent break", "Matrix", "not every invocation of the subgroup reaches it", func(b *Builder, a, c *Buffer) {
			acc := b.Var("acc", b.Const(f32Acc, 0))
			x := b.MatrixLoad(f16A, a, b.U32(0), b.U32(16), RowMajor)
			y := b.MatrixLoad(f16B, a, b.U32(0), b.U32(16), RowMajor)
			b.For(b.U32(0), b.U32(4), b.U32(1), func(i Value) {
				b.Set(acc, b.MatrixMulAdd(x, y, b.Get(acc), 0))
				b.If(b.Eq(i, b.SubgroupInvocation()), b.Break)
			})
		}},
		{"subgroup barrier under a lane-dependent branch", "Barrier", "not every invocation of the subgroup reaches it", func(b *Builder, a, c *Buffer) {
			b.If(b.Eq(b.SubgroupInvocation(), b.U32(0)), func() { b.ControlBarrier(ScopeSubgroup, ScopeSubgroup, SemWorkgroup) })
		}},
		{"workgroup barrier under a subgroup branch", "Barrier", "not every invocation of the workgroup reaches it", func(b *Builder, a, c *Buffer) {
			b.If(b.Eq(b.SubgroupID(), b.U32(0)), b.Barrier)
		}},
		{"fill with a lane-dependent value", "MatrixFill", "differs between the invocations", func(b *Builder, a, c *Buffer) {
			b.MatrixFill(f32Acc, b.Convert(b.LocalIndex(), F32))
		}},
		{"fill with another element type", "MatrixFill", "filled with f32 values", func(b *Builder, a, c *Buffer) {
			b.MatrixFill(f32Acc, b.F16(1))
		}},
		{"store to a read-only buffer", "MatrixStore", "read-only", func(b *Builder, a, c *Buffer) {
			b.MatrixStore(a, b.U32(0), b.Const(f32Acc, 0), b.U32(16), RowMajor)
		}},
		{"load from a write-only buffer", "MatrixLoad", "write-only", func(b *Builder, a, c *Buffer) {
			b.MatrixLoad(f32Acc, c, b.U32(0), b.U32(16), RowMajor)
		}},
		{"load from a function-local array", "MatrixLoad", "function-local", func(b *Builder, a, c *Buffer) {
			l := b.LocalArray("l", F16, b.U32(256))
			b.MatrixLoad(f16A, l, b.U32(0), b.U32(16), RowMajor)
		}},
		{"load of a vector type", "MatrixLoad", "not a cooperative matrix", func(b *Builder, a, c *Buffer) {
			b.MatrixLoad(Vec(F16, 4), a, b.U32(0), b.U32(16), RowMajor)
		}},
		{"a matrix of booleans", "MatrixLoad", "not a cooperative matrix", func(b *Builder, a, c *Buffer) {
			b.MatrixLoad(Matrix(Bool, ScopeSubgroup, 16, 16, MatrixA), a, b.U32(0), b.U32(16), RowMajor)
		}},
		{"a buffer of matrices", "Buffer", "cannot be stored in a buffer", func(b *Builder, a, c *Buffer) {
			b.Buffer("m", f32Acc, ReadOnly)
		}},
		{"a shared array of matrices", "Shared", "invalid element type", func(b *Builder, a, c *Buffer) {
			b.Shared("m", f32Acc, b.U32(4))
		}},
		{"matrix plus scalar", "Add", "two matrices of one type", func(b *Builder, a, c *Buffer) {
			b.Add(b.Const(f32Acc, 0), b.F32(1))
		}},
		{"matrices of different types", "Sub", "two matrices of one type", func(b *Builder, a, c *Buffer) {
			b.Sub(b.Const(f32Acc, 0), b.Const(f16Acc, 0))
		}},
		{"integer matrix times a scalar", "Mul", "float matrix", func(b *Builder, a, c *Buffer) {
			b.Mul(b.Const(Matrix(I32, ScopeSubgroup, 16, 16, MatrixAcc), 0), b.I32(2))
		}},
		{"comparison of matrices", "Lt", "not defined for cooperative matrices", func(b *Builder, a, c *Buffer) {
			m := b.Const(f32Acc, 0)
			b.Lt(m, m)
		}},
		{"remainder of matrices", "Rem", "not defined for cooperative matrices", func(b *Builder, a, c *Buffer) {
			m := b.Const(f32Acc, 0)
			b.Rem(m, m)
		}},
		{"exp of a matrix", "Exp", "not defined", func(b *Builder, a, c *Buffer) {
			b.Exp(b.Const(f32Acc, 0))
		}},
		{"select of matrices", "Select", "cannot select cooperative matrices", func(b *Builder, a, c *Buffer) {
			m := b.Const(f32Acc, 0)
			b.Select(b.Bool(true), m, m)
		}},
		{"conversion that changes the use", "Convert", "keeps the scope, shape and use", func(b *Builder, a, c *Buffer) {
			b.Convert(b.Const(f32Acc, 0), Matrix(F16, ScopeSubgroup, 16, 16, MatrixA))
		}},
		{"conversion of a matrix to a scalar", "Convert", "cannot convert", func(b *Builder, a, c *Buffer) {
			b.Convert(b.Const(f32Acc, 0), F32)
		}},
		{"bitcast of a matrix", "Bitcast", "cannot reinterpret", func(b *Builder, a, c *Buffer) {
			b.Bitcast(b.Const(Matrix(I32, ScopeSubgroup, 16, 16, MatrixAcc), 0), Matrix(U32, ScopeSubgroup, 16, 16, MatrixAcc))
		}},
		{"subgroup sum of a matrix", "SubgroupAdd", "not defined", func(b *Builder, a, c *Buffer) {
			b.SubgroupAdd(b.Const(f32Acc, 0))
		}},
		{"component of a non-matrix variable", "MatrixComponent", "not a cooperative matrix", func(b *Builder, a, c *Buffer) {
			b.MatrixComponent(b.Var("x", b.F32(0)), b.U32(0))
		}},
		{"component of the wrong type", "SetMatrixComponent", "value is f16", func(b *Builder, a, c *Buffer) {
			b.SetMatrixComponent(b.Var("m", b.Const(f32Acc, 0)), b.U32(0), b.F16(1))
		}},
		{"bf16 arithmetic", "Add", "not defined for bf16", func(b *Builder, a, c *Buffer) {
			b.Add(b.BF16(1), b.BF16(2))
		}},
		{"bf16 math", "Exp", "not defined for bf16", func(b *Builder, a, c *Buffer) {
			b.Exp(b.BF16(1))
		}},
		{"bf16 comparison", "Lt", "not defined for bf16", func(b *Builder, a, c *Buffer) {
			b.Lt(b.BF16(1), b.BF16(2))
		}},
		{"bf16 push constant", "Push", "cannot be in a push-constant block", func(b *Builder, a, c *Buffer) {
			b.Push("x", BF16)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := NewBuilder("bad")
			a := b.Buffer("a", F16, ReadOnly)
			out := b.Buffer("c", F32, WriteOnly)
			b.WorkgroupSize(b.U32(32), b.U32(1), b.U32(1))
			c.build(b, a, out)
			_, err := b.Finish()
			var be *BuildError
			if !errors.As(err, &be) {
				t.Fatalf("error %v, want a *BuildError with %s: %s", err, c.construct, c.msg)
			}
			if len(be.Problems) != 1 {
				t.Errorf("%d problems, want one: %v", len(be.Problems), err)
			}
			p := be.Problems[0]
			if p.Construct != c.construct || !strings.Contains(p.Msg, c.msg) {
				t.Errorf("problem %q, want construct %s and message containing %q", p, c.construct, c.msg)
			}
			if !strings.HasPrefix(p.Pos, "matrix_test.go:") {
				t.Errorf("position %q, want the test's own line", p.Pos)
			}
		})
	}
}

func TestMatrixTypes(t *testing.T) {
	if f16A.String() != "matrix<f16, subgroup, 16x16, a>" || !f16A.IsMatrix() || f16A.Rows() != 16 || f16A.Cols() != 16 ||
		f16A.Use() != MatrixA || f16A.MatrixScope() != ScopeSubgroup || f16A.Elem() != F16 || f16A.Size() != 0 {
		t.Errorf("f16 A matrix: %s rows %d cols %d use %v scope %d elem %s size %d", f16A, f16A.Rows(), f16A.Cols(), f16A.Use(), f16A.MatrixScope(), f16A.Elem(), f16A.Size())
	}
	for _, bad := range []Type{
		Matrix(Bool, ScopeSubgroup, 16, 16, MatrixA), Matrix(Vec(F16, 2), ScopeSubgroup, 16, 16, MatrixA),
		Matrix(F16, ScopeDevice, 16, 16, MatrixA), Matrix(F16, ScopeSubgroup, 0, 16, MatrixA),
		Matrix(F16, ScopeSubgroup, 16, 1<<16, MatrixA), Matrix(F16, ScopeSubgroup, 16, 16, 0), Matrix(f32Acc, ScopeSubgroup, 16, 16, MatrixA),
		Vec(f32Acc, 2),
	} {
		if bad.Valid() {
			t.Errorf("%s is valid", bad)
		}
	}
	if f16A == f16B || f16A != Matrix(F16, ScopeSubgroup, 16, 16, MatrixA) {
		t.Error("matrix types do not compare by value")
	}
	if BF16.Size() != 2 || BF16.String() != "bf16" || !BF16.IsFloat() || Vec(BF16, 4).Size() != 8 {
		t.Errorf("bf16: size %d name %s", BF16.Size(), BF16)
	}
	for _, x := range []float32{0, 1, -2.5, 3.14159, 1e30, -1e-30, 65504} {
		h := Float32ToBF16(x)
		if back := BF16ToFloat32(h); back != x && (back-x)/x > 1.0/128 {
			t.Errorf("bf16(%g) = %g", x, back)
		}
	}
	if Float32ToBF16(1+1.0/256) != Float32ToBF16(1) || Float32ToBF16(1+3.0/256) != 0x3f82 {
		t.Errorf("bf16 rounding: %#x %#x", Float32ToBF16(1+1.0/256), Float32ToBF16(1+3.0/256))
	}
}
