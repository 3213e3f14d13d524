package codegen

import "fmt"

// Scalar is the element kind of a Type.
type Scalar uint8

// The scalar kinds. The zero Scalar is not a type: a Type built from it is invalid.
const (
	noScalar Scalar = iota
	BoolKind
	I32Kind
	U32Kind
	F32Kind
	F16Kind
	// BF16Kind is bfloat16 (SPV_KHR_bfloat16): it can be loaded, stored, converted, selected and
	// used in cooperative matrices, but has no arithmetic of its own (convert to f32 first).
	BF16Kind
)

// Type is a scalar, a vector of 2, 3 or 4 scalars, or a cooperative matrix (SPV_KHR_cooperative_matrix,
// see Matrix). Types are plain values and compare with ==.
type Type struct {
	kind Scalar
	n    uint8 // 1 for a scalar or a matrix, 2..4 for a vector
	// A cooperative matrix: its use (0: not a matrix), scope, rows and columns.
	use        MatrixUse
	scope      uint8
	rows, cols uint16
}

// The scalar types.
var (
	Bool = Type{kind: BoolKind, n: 1}
	I32  = Type{kind: I32Kind, n: 1}
	U32  = Type{kind: U32Kind, n: 1}
	F32  = Type{kind: F32Kind, n: 1}
	F16  = Type{kind: F16Kind, n: 1}
	BF16 = Type{kind: BF16Kind, n: 1}
)

// Vec returns the vector of n (2, 3 or 4) elements of the scalar type t; Vec(t, 1) is t.
// Any other n gives an invalid type, which every builder method reports.
func Vec(t Type, n int) Type {
	if t.n != 1 || t.use != 0 || n < 1 || n > 4 {
		return Type{}
	}
	return Type{kind: t.kind, n: uint8(n)}
}

// MatrixUse is the role of a cooperative matrix in a multiply-add: A (M×K), B (K×N) or the
// accumulator (M×N, also the result).
type MatrixUse uint8

const (
	MatrixA MatrixUse = iota + 1
	MatrixB
	MatrixAcc
)

func (u MatrixUse) String() string {
	switch u {
	case MatrixA:
		return "a"
	case MatrixB:
		return "b"
	case MatrixAcc:
		return "acc"
	}
	return "invalid-use"
}

// spirv is the CooperativeMatrixUse enumerant.
func (u MatrixUse) spirv() uint32 {
	switch u {
	case MatrixA:
		return matrixUseMatrixAKHR
	case MatrixB:
		return matrixUseMatrixBKHR
	}
	return matrixUseMatrixAccumulatorKHR
}

// Matrix is the cooperative matrix type of rows × cols elements of the scalar type elem (f32, f16,
// bf16, i32 or u32), held together by the invocations of scope (ScopeSubgroup; ScopeWorkgroup where
// the device allows it), for the given use. Which shapes and element types a device multiplies is
// device data (VkCooperativeMatrixPropertiesKHR): the IR accepts any, spirv-val and the device
// decide. Invalid arguments give an invalid type, which every builder method reports.
//
// A matrix value lives in registers spread over the scope's invocations in an implementation-
// defined way: it can be loaded and stored (MatrixLoad, MatrixStore), multiplied and added
// (MatrixMulAdd), combined element-wise with a matrix of its type (Add, Sub, Mul, Div, Neg),
// scaled (Mul by a scalar of its element type), converted to another element type (Convert), filled
// with one value (MatrixFill), and its invocation-local components read and written through a Var
// (MatrixLength, MatrixComponent, SetMatrixComponent) — without knowing which row or column a
// component is.
func Matrix(elem Type, scope Scope, rows, cols int, use MatrixUse) Type {
	if !elem.Valid() || elem.IsVector() || elem.IsMatrix() || elem.IsBool() ||
		(scope != ScopeSubgroup && scope != ScopeWorkgroup) ||
		rows < 1 || cols < 1 || rows > 0xffff || cols > 0xffff || use < MatrixA || use > MatrixAcc {
		return Type{}
	}
	return Type{kind: elem.kind, n: 1, use: use, scope: uint8(scope), rows: uint16(rows), cols: uint16(cols)}
}

// Elem is the scalar type of t's elements (t itself for a scalar; the component type of a matrix).
func (t Type) Elem() Type { return Type{kind: t.kind, n: 1} }

// Len is the number of elements: 1 for a scalar (and a matrix, whose per-invocation length is only
// known on the device: MatrixLength), 2..4 for a vector.
func (t Type) Len() int { return int(t.n) }

// Kind is the scalar kind of t's elements.
func (t Type) Kind() Scalar { return t.kind }

// Valid reports whether t is a type (the zero Type is not).
func (t Type) Valid() bool {
	if t.use != 0 {
		return t.n == 1 && t.kind != noScalar && t.kind != BoolKind && t.rows > 0 && t.cols > 0
	}
	return t.kind != noScalar && t.n >= 1 && t.n <= 4
}

// IsFloat reports whether t's elements are f32, f16 or bf16.
func (t Type) IsFloat() bool { return t.kind == F32Kind || t.kind == F16Kind || t.kind == BF16Kind }

// IsInt reports whether t's elements are i32 or u32.
func (t Type) IsInt() bool { return t.kind == I32Kind || t.kind == U32Kind }

// IsBool reports whether t's elements are booleans.
func (t Type) IsBool() bool { return t.kind == BoolKind }

// IsVector reports whether t has more than one element.
func (t Type) IsVector() bool { return t.n > 1 }

// IsMatrix reports whether t is a cooperative matrix.
func (t Type) IsMatrix() bool { return t.use != 0 }

// Rows and Cols are a matrix's shape (0 for other types).
func (t Type) Rows() int { return int(t.rows) }

// Cols is the number of columns of a matrix.
func (t Type) Cols() int { return int(t.cols) }

// Use is a matrix's use (0 for other types).
func (t Type) Use() MatrixUse { return t.use }

// MatrixScope is the scope whose invocations hold a matrix.
func (t Type) MatrixScope() Scope { return Scope(t.scope) }

// arith reports whether t has arithmetic: a numeric scalar or vector other than bf16.
func (t Type) arith() bool { return !t.IsMatrix() && t.kind != BF16Kind && (t.IsFloat() || t.IsInt()) }

// Size is the size in bytes of t in a storage buffer or push-constant block (std430); a bool and
// a matrix have no defined size and give 0.
func (t Type) Size() int {
	if t.use != 0 {
		return 0
	}
	var s int
	switch t.kind {
	case I32Kind, U32Kind, F32Kind:
		s = 4
	case F16Kind, BF16Kind:
		s = 2
	default:
		return 0
	}
	return s * int(t.n)
}

// Align is t's std430 alignment: a vec3 aligns like a vec4.
func (t Type) Align() int {
	if t.n == 3 {
		return t.Elem().Size() * 4
	}
	return t.Size()
}

func (s Scalar) String() string {
	switch s {
	case BoolKind:
		return "bool"
	case I32Kind:
		return "i32"
	case U32Kind:
		return "u32"
	case F32Kind:
		return "f32"
	case F16Kind:
		return "f16"
	case BF16Kind:
		return "bf16"
	}
	return "invalid"
}

// String writes t as f32, i32, vec4<f16>, matrix<f16, subgroup, 16x16, a>, ...
func (t Type) String() string {
	if !t.Valid() {
		return "invalid"
	}
	if t.use != 0 {
		sc := "subgroup"
		if Scope(t.scope) == ScopeWorkgroup {
			sc = "workgroup"
		}
		return fmt.Sprintf("matrix<%s, %s, %dx%d, %s>", t.kind, sc, t.rows, t.cols, t.use)
	}
	if t.n == 1 {
		return t.kind.String()
	}
	return fmt.Sprintf("vec%d<%s>", t.n, t.kind)
}

// Access says how a kernel uses a storage buffer. It becomes the NonWritable/NonReadable decorations,
// and the builder rejects a store to a ReadOnly buffer and a load from a WriteOnly one.
type Access uint8

const (
	ReadOnly Access = iota + 1
	WriteOnly
	ReadWrite
)

func (a Access) String() string {
	switch a {
	case ReadOnly:
		return "readonly"
	case WriteOnly:
		return "writeonly"
	case ReadWrite:
		return "readwrite"
	}
	return "invalid-access"
}

// Feature is a device capability a kernel needs beyond Vulkan 1.1's core compute. Kernel.Needs lists
// them so the runtime can refuse a kernel the device cannot run, and so the kernels package can choose
// a variant; the emitter turns them into exactly the SPIR-V capabilities (and extensions) declared.
type Feature uint32

const (
	// FeatureFloat16 is arithmetic on f16 (shaderFloat16; SPIR-V Float16).
	FeatureFloat16 Feature = 1 << iota
	// FeatureStorageBuffer16 is f16 loads and stores in storage buffers
	// (storageBuffer16BitAccess; SPIR-V StorageBuffer16BitAccess).
	FeatureStorageBuffer16
	// FeaturePushConstant16 is f16 members of the push-constant block (storagePushConstant16).
	FeaturePushConstant16
	// FeatureSubgroupBasic is the subgroup built-ins (SUBGROUP_FEATURE_BASIC; GroupNonUniform).
	FeatureSubgroupBasic
	// FeatureSubgroupArithmetic is subgroup add/min/max (SUBGROUP_FEATURE_ARITHMETIC).
	FeatureSubgroupArithmetic
	// FeatureSubgroupBallot is subgroup broadcast (SUBGROUP_FEATURE_BALLOT).
	FeatureSubgroupBallot
	// FeatureSubgroupShuffle is subgroup shuffle and shuffle-xor (SUBGROUP_FEATURE_SHUFFLE).
	FeatureSubgroupShuffle
	// FeatureCooperativeMatrix is cooperative matrices (VK_KHR_cooperative_matrix's
	// cooperativeMatrix; SPIR-V CooperativeMatrixKHR). A module with them always uses the Vulkan
	// memory model too (FeatureVulkanMemoryModel), as SPIR-V requires.
	FeatureCooperativeMatrix
	// FeatureIntegerDot is SPV_KHR_integer_dot_product's packed 4x8-bit dot products (SDot,
	// SDotAccSat; the shaderIntegerDotProduct feature).
	FeatureIntegerDot
	// FeatureVulkanMemoryModel is the Vulkan memory model (vulkanMemoryModel; SPIR-V
	// VulkanMemoryModel and OpMemoryModel Logical Vulkan).
	FeatureVulkanMemoryModel
	// FeatureBFloat16 is the bfloat16 type (VK_KHR_shader_bfloat16's shaderBFloat16Type).
	FeatureBFloat16
	// FeatureBFloat16Matrix is cooperative matrices of bfloat16 (shaderBFloat16CooperativeMatrix).
	FeatureBFloat16Matrix
	// FeatureCooperativeMatrix2 is VK_NV_cooperative_matrix2's workgroup-scope matrices and
	// tensor-addressed loads and stores (SPIR-V CooperativeMatrixTensorAddressingNV and
	// TensorAddressingNV; the module is SPIR-V 1.6).
	FeatureCooperativeMatrix2
)

var featureNames = []string{"float16", "storage-buffer-16", "push-constant-16", "subgroup-basic",
	"subgroup-arithmetic", "subgroup-ballot", "subgroup-shuffle", "cooperative-matrix", "integer-dot",
	"vulkan-memory-model", "bfloat16", "bfloat16-matrix", "cooperative-matrix-2"}

// featureCaps maps each feature to the SPIR-V capabilities it declares.
var featureCaps = map[Feature][]uint32{
	FeatureFloat16:            {capFloat16},
	FeatureStorageBuffer16:    {capStorageBuffer16BitAccess},
	FeaturePushConstant16:     {capStoragePushConstant16},
	FeatureSubgroupBasic:      {capGroupNonUniform},
	FeatureSubgroupArithmetic: {capGroupNonUniform, capGroupNonUniformArithmetic},
	FeatureSubgroupBallot:     {capGroupNonUniform, capGroupNonUniformBallot},
	FeatureSubgroupShuffle:    {capGroupNonUniform, capGroupNonUniformShuffle},
	FeatureCooperativeMatrix:  {capCooperativeMatrixKHR},
	FeatureIntegerDot:         {capDotProduct, capDotProductInput4x8BitPacked},
	FeatureVulkanMemoryModel:  {capVulkanMemoryModel},
	FeatureBFloat16:           {capBFloat16TypeKHR},
	FeatureBFloat16Matrix:     {capBFloat16TypeKHR, capBFloat16CooperativeMatrixKHR},
	FeatureCooperativeMatrix2: {capCooperativeMatrixTensorAddressingNV, capTensorAddressingNV},
}

// Has reports whether f includes every feature of g.
func (f Feature) Has(g Feature) bool { return f&g == g }

// String lists the features, e.g. "float16|subgroup-basic"; "none" for zero.
func (f Feature) String() string {
	if f == 0 {
		return "none"
	}
	s := ""
	for i, n := range featureNames {
		if f&(1<<i) != 0 {
			if s != "" {
				s += "|"
			}
			s += n
		}
	}
	return s
}

// opcode is a SPIR-V core opcode; the constants are generated in spirv_tables.go.
type opcode uint16
