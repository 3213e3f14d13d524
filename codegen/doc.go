// Package codegen is vkc's kernel IR and SPIR-V emitter: kernels are built as small typed programs
// and written as SPIR-V binary by Go code, so neither compiling a model nor running it needs a shader
// compiler. It imports nothing from the rest of vkc.
//
// # Building a kernel
//
// A Builder collects the kernel's interface and body. Expressions are typed SSA values (Value)
// returned by builder methods; statements (stores, variable updates, control flow, barriers) are
// appended to the current block. Control flow is structured by construction: If, IfElse, For, While
// and Loop take callbacks that build their blocks, Break/Continue/Return end a block.
//
//	b := codegen.NewBuilder("scale")
//	x := b.Buffer("x", codegen.F16, codegen.ReadOnly)   // binding 0
//	y := b.Buffer("y", codegen.F32, codegen.WriteOnly)  // binding 1
//	n := b.Push("n", codegen.U32)                       // push constant at offset 0
//	wg := b.Spec("wg", codegen.U32, 64)                 // SpecId 0
//	b.WorkgroupSize(wg, b.U32(1), b.U32(1))
//	i := b.X(b.GlobalID())
//	b.If(b.Lt(i, n), func() {
//		v := b.Convert(b.Load(x, i), codegen.F32)
//		b.Store(y, i, epilogue(b, b.Mul(v, b.F32(2)))) // epilogue: a fused codegen.Expr
//	})
//	k, err := b.Finish() // k.Words is SPIR-V 1.3; k.Bindings, k.Push, k.Specs, k.Workgroup, k.Needs
//
// Fused elementwise chains are Expr values, func(b *Builder, x Value) Value, that a kernel template
// applies where it loads (prologue) or stores (epilogue) an element.
//
// # Errors
//
// Type errors (an f16 operand of an f32 operation, a store to a read-only buffer, a value used outside
// the branch that defines it, a barrier under a condition that depends on the invocation id, ...) are
// recorded by the builder with the position of the offending call and returned together by Finish as
// a *BuildError naming the kernel; they never reach the emitter. A failed call returns an invalid
// Value that later calls accept silently, so one mistake is one error.
//
// The divergence analysis behind the barrier check is deliberately simple: a value is divergent
// when it depends on an invocation id (local, global, subgroup), on a load at a divergent index, or
// on a variable set from such values or under such a condition. Data-dependent divergence through
// uniform loads is not detected: the check rejects sure mistakes, it does not prove uniformity.
//
// # What is emitted
//
//   - SPIR-V 1.3 (Vulkan 1.1), one GLCompute entry point "main", Logical addressing, GLSL450 memory
//     model — or the Vulkan memory model for a module with cooperative matrices (SPIR-V requires it
//     of them) or on request (Builder.UseVulkanMemoryModel; matrix.go and emitter.memOperands say
//     what it changes). The module declares exactly the capabilities its instructions need (Kernel.Needs lists
//     them as device features): Float16 only for f16 arithmetic, StorageBuffer16BitAccess and
//     StoragePushConstant16 for f16 that is only loaded, stored and converted, GroupNonUniform and
//     its Arithmetic/Ballot/Shuffle variants for subgroup operations. All are core in 1.3, so no
//     extension is declared; a capability newer than the module version brings its extension,
//     looked up in the generated capabilityInfo table.
//   - Storage buffers are Block structs holding one runtime array in the StorageBuffer storage class,
//     decorated NonWritable or NonReadable per Access and optionally Aliased, Restrict or Coherent.
//     A binding can be bound at any byte offset the device allows for storage-buffer descriptors
//     (minStorageBufferOffsetAlignment); kernels that need finer offsets take an element offset as a
//     push constant (see StridedCopy).
//   - Specialization constants are OpSpecConstant(True/False) with SpecId in declaration order;
//     integer and boolean operations whose operands are all constants become OpSpecConstantOp, so a
//     shared array can be sized by tile_m*tile_k. A workgroup size with a specialization constant is
//     emitted as the WorkgroupSize built-in on an OpSpecConstantComposite (valid in every SPIR-V and
//     Vulkan version) plus LocalSize with the defaults; LocalSizeId would need SPIR-V 1.2 and, in
//     Vulkan, the maintenance4 feature.
//   - Variables and local arrays are Function-storage OpVariables hoisted to the entry block; values
//     never flow through OpPhi (a loop counter is a variable), which drivers promote to registers.
//   - erf has no GLSL.std.450 instruction; Builder.Erf emits a rational approximation (see erf.go)
//     with relative error below 1e-6 in float32 (4.2e-7 measured against math.Erf).
//   - f16 operands of Exp, Exp2, Log, Sin, Cos, Tanh, Pow and Erf are computed in f32 and rounded
//     back, because lavapipe crashes on the f16 instructions (see f16ViaF32; UseNativeF16Math opts
//     out). An f16 kernel that only loads, converts and stores thus needs 16-bit storage, not
//     shaderFloat16.
//   - Integer atomics (add, min, max, exchange; relaxed) act on read-write buffers and shared arrays.
//
// # Extending the IR
//
// Every switch over node kinds is exhaustive and panics on an unknown kind, so adding an operation
// means: a builder method that checks operand types and adds a node (ops.go), its features in the
// emitter (emit.go: instFeatures and featureCaps), and, for a new shape of value, the type (types.go).
// Cooperative matrices (SPV_KHR_cooperative_matrix) are a third shape of Type next to scalars and
// vectors (Matrix: element type, scope, rows, columns, use) with their own operations (matrix.go:
// MatrixLoad/MatrixStore with row- or column-major layouts and strides, MatrixMulAdd with
// signedness and saturation operands, MatrixLength, MatrixFill, element-wise arithmetic, scaling
// and conversions), checked like the rest (shapes of a product, roles, element types, operations
// a matrix has, and that every invocation of a subgroup runs each matrix operation with the same
// address and stride). bfloat16 (SPV_KHR_bfloat16) is a scalar kind with storage, conversions and
// matrices but no arithmetic. Integer dot products (SPV_KHR_integer_dot_product;
// FeatureIntegerDot) are SDot and SDotAccSat over packed 4x8-bit words (intdot.go), beside
// UnpackHalf2x16 for the f16 fields of ggml's blocks read as words. The
// opcode tables (spirv_tables.go) are generated from the Khronos grammar committed in
// internal/grammargen/grammar; regenerate them with `go generate ./codegen/` to reach newer instructions.
package codegen
