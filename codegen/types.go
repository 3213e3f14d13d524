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
)

// Type is a scalar or a vector of 2, 3 or 4 scalars. Types are plain values and compare with ==.
//
// Extension point: cooperative matrices (SPV_KHR_cooperative_matrix) will be a third shape next to
// scalar and vector (a new field for rows, columns and use), with their own arithmetic rules in
// ops.go; nothing here assumes that every type is a scalar or a vector except Len and Size, which a
// matrix shape would extend.
type Type struct {
	kind Scalar
	n    uint8 // 1 for a scalar, 2..4 for a vector
}

// The scalar types.
var (
	Bool = Type{BoolKind, 1}
	I32  = Type{I32Kind, 1}
	U32  = Type{U32Kind, 1}
	F32  = Type{F32Kind, 1}
	F16  = Type{F16Kind, 1}
)

// Vec returns the vector of n (2, 3 or 4) elements of the scalar type t; Vec(t, 1) is t.
// Any other n gives an invalid type, which every builder method reports.
func Vec(t Type, n int) Type {
	if t.n != 1 || n < 1 || n > 4 {
		return Type{}
	}
	return Type{t.kind, uint8(n)}
}

// Elem is the scalar type of t's elements (t itself for a scalar).
func (t Type) Elem() Type { return Type{t.kind, 1} }

// Len is the number of elements: 1 for a scalar, 2..4 for a vector.
func (t Type) Len() int { return int(t.n) }

// Kind is the scalar kind of t's elements.
func (t Type) Kind() Scalar { return t.kind }

// Valid reports whether t is a type (the zero Type is not).
func (t Type) Valid() bool { return t.kind != noScalar && t.n >= 1 && t.n <= 4 }

// IsFloat reports whether t's elements are f32 or f16.
func (t Type) IsFloat() bool { return t.kind == F32Kind || t.kind == F16Kind }

// IsInt reports whether t's elements are i32 or u32.
func (t Type) IsInt() bool { return t.kind == I32Kind || t.kind == U32Kind }

// IsBool reports whether t's elements are booleans.
func (t Type) IsBool() bool { return t.kind == BoolKind }

// IsVector reports whether t has more than one element.
func (t Type) IsVector() bool { return t.n > 1 }

// Size is the size in bytes of t in a storage buffer or push-constant block (std430); a bool has no
// defined size and gives 0.
func (t Type) Size() int {
	var s int
	switch t.kind {
	case I32Kind, U32Kind, F32Kind:
		s = 4
	case F16Kind:
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
	}
	return "invalid"
}

// String writes t as f32, i32, vec4<f16>, ...
func (t Type) String() string {
	if !t.Valid() {
		return "invalid"
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
	// FeatureCooperativeMatrix is reserved for SPV_KHR_cooperative_matrix; no operation uses it yet.
	FeatureCooperativeMatrix
	// FeatureIntegerDot is reserved for SPV_KHR_integer_dot_product; no operation uses it yet.
	FeatureIntegerDot
)

var featureNames = []string{"float16", "storage-buffer-16", "push-constant-16", "subgroup-basic",
	"subgroup-arithmetic", "subgroup-ballot", "subgroup-shuffle", "cooperative-matrix", "integer-dot"}

// featureCaps maps each feature to the SPIR-V capabilities it declares.
var featureCaps = map[Feature][]uint32{
	FeatureFloat16:            {capFloat16},
	FeatureStorageBuffer16:    {capStorageBuffer16BitAccess},
	FeaturePushConstant16:     {capStoragePushConstant16},
	FeatureSubgroupBasic:      {capGroupNonUniform},
	FeatureSubgroupArithmetic: {capGroupNonUniform, capGroupNonUniformArithmetic},
	FeatureSubgroupBallot:     {capGroupNonUniform, capGroupNonUniformBallot},
	FeatureSubgroupShuffle:    {capGroupNonUniform, capGroupNonUniformShuffle},
	// FeatureCooperativeMatrix: CooperativeMatrixKHR is newer than Debian 12's grammar; add it here
	// (and regenerate the tables from newer headers) when the operations land.
	FeatureIntegerDot: {capDotProduct, capDotProductInput4x8BitPacked},
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
